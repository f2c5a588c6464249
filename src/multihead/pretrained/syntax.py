"""Syntactic heads in a pretrained encoder (Clark et al. 2019, section 4.2): does some head's
largest weight land on the word a word is syntactically related to, more often than a fixed
relative offset does?

The sentences and their gold dependency arcs come from the course grammar
(``multihead.tasks.corpus``); this module never imports it: the notebook passes each
sentence's words and the :class:`multihead.analysis.roles.Gold` of ``gold_tensors``. The
encoder reads a sentence as ``[CLS] w_1 ... w_n [SEP]``, so gold word ``i`` is word ``i + 1``
of :class:`multihead.pretrained.load.SentenceAttention` and every arc shifts by one; the
criterion itself is ``analysis.roles.syntactic`` (argmax over words, best-offset baseline).

Replicates are disjoint folds of the sentences. For each fold the head is chosen on the
other folds (``analysis.replicates.held_out_best``) and scored on that fold; the baseline's
offset is chosen on the scored fold itself, which can only favour the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from multihead._checks import check_number
from multihead.analysis.replicates import held_out_best
from multihead.analysis.roles import (
    DIRECTIONS,
    SYNTACTIC_RELATIONS,
    Gold,
    relation_targets,
    syntactic,
)
from multihead.pretrained.load import SentenceAttention, check_maps


def sentence_text(words: Sequence[str]) -> str:
    """The text the encoder reads for one gold sentence: its words joined by spaces (the
    tokenizer splits the final full stop off again).

    Shapes: n words -> str.
    """
    if isinstance(words, str) or not words or any(not isinstance(w, str) for w in words):
        raise TypeError("words must be a non-empty sequence of str (one sentence's words)")
    return " ".join(words)


def aligned_words(
    maps: list[SentenceAttention], words: Sequence[Sequence[str]], gold: Gold
) -> tuple[Tensor, Gold]:
    """Word attention of the sentences padded into one stack, and ``gold`` shifted by one
    word for ``[CLS]``, after checking that the encoder's words are the gold words.

    ``[SEP]`` becomes the end token of the shifted gold (its ``lengths`` count ``[CLS]`` and
    ``[SEP]``), so the criteria of ``analysis.roles`` score every gold word as a query and
    never ``[SEP]``; ``[CLS]`` has no arc and is never a target.

    Shapes: n sentences -> pattern (layers, n, heads, seq + 2, seq + 2), Gold (n, seq + 2).
    """
    maps = check_maps(maps)
    if not isinstance(gold, Gold):
        raise TypeError(f"gold must be a Gold (see gold_tensors), got {type(gold).__name__}")
    if len(words) != len(maps) or len(gold.lengths) != len(maps):
        raise ValueError(
            f"maps ({len(maps)}), words ({len(words)}) and gold ({len(gold.lengths)}) must "
            "describe the same sentences in the same order"
        )
    for i, (m, w) in enumerate(zip(maps, words, strict=True)):
        if [x.lower() for x in m.words[1:-1]] != [x.lower() for x in w]:
            raise ValueError(
                f"sentence {i}: the encoder's words {m.words[1:-1]} are not the gold words "
                f"{list(w)}; feed it sentence_text(words)"
            )
        if int(gold.lengths[i]) != len(w):
            raise ValueError(f"sentence {i}: gold.lengths says {int(gold.lengths[i])} words, "
                             f"words has {len(w)}")  # fmt: skip
    n, seq = len(maps), gold.seq_len + 2
    layers, heads = maps[0].word_attention.shape[:2]
    pattern = torch.zeros(layers, n, heads, seq, seq)
    for i, m in enumerate(maps):
        k = m.word_attention.shape[-1]
        pattern[:, i, :, :k, :k] = m.word_attention  # (layers, heads, k, k)

    def shift(t: Tensor) -> Tensor:  # (n, seq - 2) -> (n, seq): [CLS] in front, [SEP] after
        out = torch.full((n, seq), -1, dtype=t.dtype)
        out[:, 1:-1] = t
        return out

    heads_t = shift(torch.where(gold.heads >= 0, gold.heads + 1, gold.heads))
    shifted = Gold(
        lengths=gold.lengths + 2,
        heads=heads_t,
        rels=shift(gold.rels),
        pos=shift(gold.pos),
        ranks=shift(gold.ranks),
        relations=gold.relations,
    )
    return pattern, shifted


def syntax_folds(
    fold_data: Sequence[tuple[Tensor, Gold]],
    relations: Sequence[str] = SYNTACTIC_RELATIONS,
    margin: float = 0.10,
) -> list[dict]:
    """Clark et al.'s table of syntactic heads, with folds as replicates: one row per
    relation and direction that has an arc in every fold.

    Each row holds, per fold: ``count`` (queries scored), ``head`` (``(layer, head)`` chosen
    on the other folds), ``accuracy`` (that head on this fold), ``baseline`` and
    ``baseline_offset`` (the best fixed offset on this fold), ``clear`` (accuracy at least
    ``baseline + margin``); pooled over the folds (weighted by ``count``): ``pooled_accuracy``
    (the held-out heads' accuracy), ``pooled_baseline`` and ``pooled_clear`` (at least
    ``pooled_baseline + margin``); and ``in_sample`` (best accuracy of any head, pooled over
    all folds, with its ``(layer, head)`` in ``in_sample_head``) and ``n_clear``.

    ``pooled_clear`` judges a relation on every query at once; ``clear`` fold by fold, where a
    fold with a few dozen arcs can miss a 10-point margin by chance.

    Shapes: folds of (pattern (layers, batch, heads, seq, seq), Gold) -> list of dicts.
    """
    check_number("margin", margin, 0.0, 1.0)
    fold_data = list(fold_data)
    if len(fold_data) < 2:
        raise ValueError(f"fold_data must hold at least 2 folds, got {len(fold_data)}")
    for f, item in enumerate(fold_data):
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Gold)):
            raise TypeError(f"fold_data[{f}] must be a (pattern, Gold) pair from aligned_words")
    rows = []
    for relation in relations:
        for direction in DIRECTIONS:
            if any(relation not in g.relations for _, g in fold_data):
                raise ValueError(f"relation={relation!r} is not in every fold's gold relations")
            has_arcs = [
                bool((relation_targets(g, relation, direction)[1] & g.scored_queries()).any())
                for _, g in fold_data
            ]
            if not all(has_arcs):
                continue  # a fold without this relation: too few replicates for a row
            stats = [syntactic(p, g, relation, direction, margin) for p, g in fold_data]
            acc = torch.stack([s["accuracy"] for s in stats])  # (folds, layers, heads)
            count = torch.tensor([float(s["count"]) for s in stats])  # (folds,)
            chosen, held = held_out_best(acc, count)
            n_heads = acc.shape[-1]
            pooled = (acc * count[:, None, None]).sum(0) / count.sum()  # (layers, heads)
            best = int(pooled.argmax())
            base = [float(s["baseline"]) for s in stats]
            clear = [float(a) >= b + margin for a, b in zip(held.tolist(), base, strict=True)]
            weight = count / count.sum()  # (folds,)
            pooled_acc = float((held * weight).sum())
            pooled_base = float((torch.tensor(base, dtype=weight.dtype) * weight).sum())
            rows.append(
                {
                    "relation": relation,
                    "direction": direction,
                    "count": [int(c) for c in count.tolist()],
                    "head": [divmod(int(c), n_heads) for c in chosen],
                    "accuracy": held.tolist(),
                    "baseline": base,
                    "baseline_offset": [int(s["baseline_offset"]) for s in stats],
                    "clear": clear,
                    "n_clear": sum(clear),
                    "pooled_accuracy": pooled_acc,
                    "pooled_baseline": pooled_base,
                    "pooled_clear": pooled_acc >= pooled_base + margin,
                    "in_sample": float(pooled.max()),
                    "in_sample_head": divmod(best, n_heads),
                }
            )
    return rows
