"""Detectors of head roles (Voita et al. 2019 and after): pure functions of attention
patterns and gold annotations.

Every criterion asks where a head's *maximum* weight lands, through
``metrics.argmax_credit`` (ties share the credit, so a uniform head scores chance, not 1).
Queries are the real tokens of each sentence except the end token; keys are the real
tokens including it. Patterns are ``(batch, heads, query, key)`` for one layer or
``(layers, batch, heads, query, key)`` for a stack; statistics come back as ``(heads,)``
or ``(layers, heads)`` accordingly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from multihead._checks import check_pattern, check_positive_int
from multihead.analysis.metrics import argmax_credit, head_confidence

SYNTACTIC_RELATIONS = ("nsubj", "dobj", "amod", "advmod", "det", "prep", "pobj")
DIRECTIONS = ("dep->head", "head->dep")


@dataclass(frozen=True)
class Gold:
    """Gold annotations of a padded batch of sentences (-1 marks padding / the root), e.g.
    ``Gold(**multihead.tasks.corpus.gold_tensors(sentences, seq_len))``. ``rels`` indexes
    ``relations`` (the relation names).

    Shapes: lengths (batch,); heads, rels, pos, ranks (batch, seq).
    """

    lengths: Tensor
    heads: Tensor
    rels: Tensor
    pos: Tensor
    ranks: Tensor
    relations: tuple[str, ...] = ()

    @property
    def seq_len(self) -> int:
        """The padded length. Shapes: none."""
        return self.heads.shape[1]

    def key_mask(self) -> Tensor:
        """True at real tokens. Shapes: (batch, seq)."""
        return torch.arange(self.seq_len)[None, :] < self.lengths[:, None]

    def scored_queries(self) -> Tensor:
        """The queries every criterion scores: real tokens other than the end token.

        Shapes: (batch, seq) bool, True = counted."""
        return torch.arange(self.seq_len)[None, :] < (self.lengths[:, None] - 1)


def _check(pattern: object, gold: object) -> Tensor:
    """The pattern as (layers, batch, heads, query, key), after checking it fits ``gold``."""
    layout = "(batch, heads, query, key) or (layers, batch, heads, query, key)"
    p = check_pattern("pattern", pattern, ndim=(4, 5), layout=layout)
    if not isinstance(gold, Gold):
        raise TypeError(f"gold must be a Gold (see gold_tensors), got {type(gold).__name__}")
    p5 = p if p.ndim == 5 else p[None]
    batch, q, k = p5.shape[1], p5.shape[3], p5.shape[4]
    if batch != len(gold.lengths) or q != gold.seq_len or k != gold.seq_len:
        raise ValueError(
            f"pattern has batch {batch}, {q} queries and {k} keys but the gold annotations "
            f"have batch {len(gold.lengths)} and seq_len {gold.seq_len}; annotate the same "
            "sentences with the same padding (gold_tensors(sentences, seq_len))"
        )
    return p5


def _out(stat: Tensor, pattern: Tensor) -> Tensor:
    return stat if pattern.ndim == 5 else stat[0]


def _masked_mean(credit: Tensor, queries: Tensor) -> Tensor:
    """Mean of (layers, batch, heads, query) credits over the selected (batch, query)."""
    w = queries[None, :, None, :].to(credit.dtype)  # (1, batch, 1, query)
    return (credit * w).sum(dim=(1, 3)) / w.sum(dim=(1, 3)).clamp_min(1)


def confidence(pattern: Tensor, gold: Gold) -> Tensor:
    """Mean over queries (end token excluded) of the largest weight: ``head_confidence``.

    Shapes: pattern (layers?, batch, heads, seq, seq) -> (layers?, heads).
    """
    p = _check(pattern, gold)
    stat = torch.stack([head_confidence(layer, gold.scored_queries()) for layer in p])
    return _out(stat, pattern)


def offset_targets(gold: Gold, offset: int) -> tuple[Tensor, Tensor]:
    """Target keys ``query + offset`` and the queries for which that key is a real token.

    Shapes: -> target (batch, seq, seq) bool, queries (batch, seq) bool.
    """
    idx = torch.arange(gold.seq_len)
    target = (idx[None, :] - idx[:, None] == offset)[None].expand(len(gold.lengths), -1, -1)
    inside = (idx + offset >= 0)[None, :] & ((idx + offset)[None, :] < gold.lengths[:, None])
    return target, gold.scored_queries() & inside


def positional(
    pattern: Tensor, gold: Gold, max_offset: int = 3, threshold: float = 0.9
) -> dict[str, Tensor]:
    """Positional heads: for each relative offset in ``[-max_offset, max_offset]`` the share
    of queries whose maximum is at ``query + offset`` (over queries where that key exists);
    a head is positional if its best offset has share >= ``threshold``.

    Shapes: pattern (layers?, batch, heads, seq, seq) -> {"offset", "share", "is_role"}
    each (layers?, heads).
    """
    p = _check(pattern, gold)
    offsets = list(range(-max_offset, max_offset + 1))
    shares = []
    for o in offsets:
        target, queries = offset_targets(gold, o)
        shares.append(_masked_mean(argmax_credit(p, target[None, :, None]), queries))
    share, best = torch.stack(shares).max(dim=0)  # (layers, heads)
    offset = torch.tensor(offsets)[best]
    return {
        k: _out(v, pattern)
        for k, v in (("offset", offset), ("share", share), ("is_role", share >= threshold))
    }


def relation_targets(gold: Gold, relation: str, direction: str) -> tuple[Tensor, Tensor]:
    """Queries and target keys of one relation: ``dep->head`` asks a dependent to find its
    head, ``head->dep`` asks a head to find any of its dependents with that label.

    Shapes: -> target (batch, seq, seq) bool, queries (batch, seq) bool.
    """
    if relation not in gold.relations:
        raise ValueError(f"relation={relation!r} is not one of the gold's {gold.relations}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r} must be one of {DIRECTIONS}")
    batch, seq = gold.heads.shape
    is_rel = gold.rels == gold.relations.index(relation)  # (batch, seq): the dependents
    arc = torch.zeros(batch, seq, seq, dtype=torch.bool)  # arc[b, dependent, head]
    b, d = is_rel.nonzero(as_tuple=True)
    arc[b, d, gold.heads[b, d]] = True
    if direction == "dep->head":
        return arc, is_rel
    target = arc.transpose(1, 2)  # target[b, head, dependent]
    return target, target.any(-1)


def _best_offset_accuracy(target: Tensor, queries: Tensor, span: int) -> tuple[int, float]:
    best = (0, 0.0)
    idx = torch.arange(target.shape[-1])
    for o in range(-span, span + 1):
        at = (idx[None, :] - idx[:, None] == o)[None]  # (1, query, key)
        hit = (target & at).any(-1)[queries].float().mean().item() if queries.any() else 0.0
        best = max(best, (o, hit), key=lambda t: t[1])
    return best


def syntactic(
    pattern: Tensor, gold: Gold, relation: str, direction: str, margin: float = 0.10
) -> dict[str, Tensor | int | float]:
    """Syntactic heads for one relation and direction: the accuracy of "the max-weight key
    is the related token", against the baseline that always picks the most common relative
    position of that relation. A head is syntactic if it beats the baseline by ``margin``.

    Shapes: pattern (layers?, batch, heads, seq, seq) -> {"accuracy", "is_role"} each
    (layers?, heads), plus the ints/floats "baseline_offset", "baseline", "count".
    """
    p = _check(pattern, gold)
    target, queries = relation_targets(gold, relation, direction)
    queries = queries & gold.scored_queries()
    if not queries.any():
        raise ValueError(f"the gold annotations have no {relation!r} arc to score")
    offset, baseline = _best_offset_accuracy(target, queries, gold.seq_len - 1)
    acc = _masked_mean(argmax_credit(p, target[None, :, None]), queries)
    return {
        "accuracy": _out(acc, pattern),
        "is_role": _out(acc >= baseline + margin, pattern),
        "baseline_offset": offset,
        "baseline": baseline,
        "count": int(queries.sum()),
    }


def rarest_targets(gold: Gold, k: int = 1) -> Tensor:
    """Keys holding one of the ``k`` rarest distinct words of each sentence (highest rank).

    Shapes: -> (batch, seq) bool.
    """
    check_positive_int("k", k)  # 1 = the rarest word only
    out = torch.zeros_like(gold.ranks, dtype=torch.bool)
    for i, n in enumerate(gold.lengths.tolist()):
        ranks = gold.ranks[i, :n]
        keep = ranks.unique(sorted=True)[-k:]  # the k largest ranks
        out[i, :n] = torch.isin(ranks, keep)
    return out


def rare_word(
    pattern: Tensor, gold: Gold, k: int = 1, margin: float = 0.10
) -> dict[str, Tensor | float]:
    """Rare-word heads: how often the maximum lands on one of the ``k`` rarest words.

    Two reference levels: ``chance``, the mean of |rarest positions| / n (a head choosing
    a key uniformly at random), and ``positional_baseline``, the best fixed relative offset.
    A head is a rare-word head if it beats the larger of the two by ``margin``.

    Shapes: pattern (layers?, batch, heads, seq, seq) -> {"rate", "is_role"} each
    (layers?, heads), plus floats "chance" and "positional_baseline".
    """
    p = _check(pattern, gold)
    rare = rarest_targets(gold, k)  # (batch, key)
    queries = gold.scored_queries()
    rate = _masked_mean(argmax_credit(p, rare[None, :, None, None, :]), queries)
    per_query = rare.sum(-1).float() / gold.lengths.float()  # (batch,)
    chance = (per_query[:, None] * queries).sum() / queries.sum()
    target = rare[:, None, :].expand(-1, gold.seq_len, -1)
    _, pos_base = _best_offset_accuracy(target, queries, gold.seq_len - 1)
    bar = max(chance.item(), pos_base) + margin
    return {
        "rate": _out(rate, pattern),
        "is_role": _out(rate >= bar, pattern),
        "chance": chance.item(),
        "positional_baseline": pos_base,
    }


def delimiter(pattern: Tensor, gold: Gold, threshold: float = 0.5) -> dict[str, Tensor]:
    """Delimiter heads: the share of queries whose maximum is on the end token.

    Shapes: pattern (layers?, batch, heads, seq, seq) -> {"share", "is_role"} (layers?, heads).
    """
    p = _check(pattern, gold)
    end = torch.arange(gold.seq_len)[None, :] == (gold.lengths[:, None] - 1)  # (batch, key)
    share = _masked_mean(argmax_credit(p, end[None, :, None, None, :]), gold.scored_queries())
    return {"share": _out(share, pattern), "is_role": _out(share >= threshold, pattern)}


ROLE_NAMES = ("positional", "self", "delimiter", "syntactic", "rare-word", "none")


def assign_roles(
    positional_stats: dict, delimiter_stats: dict, syntactic_flags: Tensor, rare_stats: dict
) -> list[list[str]]:
    """One role per head for a colour grid: positional (or ``self`` at offset 0) first, then
    delimiter, syntactic, rare-word, else ``none``. ``syntactic_flags`` is any-relation.

    Shapes: each input (layers, heads) -> nested list (layers, heads) of role names.
    """
    flags = [
        (positional_stats["is_role"] & (positional_stats["offset"] == 0), "self"),
        (positional_stats["is_role"], "positional"),
        (delimiter_stats["is_role"], "delimiter"),
        (syntactic_flags, "syntactic"),
        (rare_stats["is_role"], "rare-word"),
    ]
    layers, heads = syntactic_flags.shape
    out = [["none"] * heads for _ in range(layers)]
    for i in range(layers):
        for h in range(heads):
            out[i][h] = next((name for flag, name in flags if flag[i, h]), "none")
    return out


def head_roles(pattern: Tensor, gold: Gold) -> dict:
    """Every criterion of this module for one model's stack of patterns, so that several
    training seeds are scored the same way: ``confidence``; ``positional`` (offsets -3..3),
    ``self`` (offset 0 only) and ``delimiter`` stats; ``rare`` and ``rare2`` (the rarest
    word, one of the two rarest); ``syntactic`` {(relation, direction): stats} over
    ``SYNTACTIC_RELATIONS`` and ``DIRECTIONS`` (the relations with an arc in ``gold``);
    ``syntactic_flags`` (syntactic for any of them); and ``counts``, the number of heads
    meeting each role criterion (ints).

    Shapes: pattern (layers, batch, heads, seq, seq) -> tensors (layers, heads), floats, ints.
    """
    p = _check(pattern, gold)
    if p.ndim != 5 or pattern.ndim != 5:
        raise ValueError(
            f"pattern must be a stack (layers, batch, heads, query, key), got "
            f"{tuple(pattern.shape)}; add a layer dimension with pattern[None]"
        )
    pos = positional(p, gold)
    syn = {}
    for relation in SYNTACTIC_RELATIONS:
        if relation not in gold.relations:
            continue
        for direction in DIRECTIONS:
            queries = relation_targets(gold, relation, direction)[1] & gold.scored_queries()
            if queries.any():
                syn[(relation, direction)] = syntactic(p, gold, relation, direction)
    flags = torch.zeros(pos["share"].shape, dtype=torch.bool)
    for stats in syn.values():
        flags |= stats["is_role"]
    out = {
        "confidence": confidence(p, gold),
        "positional": pos,
        "self": positional(p, gold, max_offset=0),
        "delimiter": delimiter(p, gold),
        "rare": rare_word(p, gold, k=1),
        "rare2": rare_word(p, gold, k=2),
        "syntactic": syn,
        "syntactic_flags": flags,
    }
    out["counts"] = {
        "positional": int(pos["is_role"].sum()),
        "self": int(out["self"]["is_role"].sum()),
        "syntactic": int(flags.sum()),
        "rare-word": int(out["rare"]["is_role"].sum()),
        "delimiter": int(out["delimiter"]["is_role"].sum()),
    }
    return out
