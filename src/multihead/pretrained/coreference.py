"""Coreference heads in a pretrained encoder (Clark et al. 2019, section 5), on the course
grammar's two-sentence items: at a pronoun, does some head's largest weight land on the
antecedent more often than the nearest preceding noun, or the nearest one that agrees with
the pronoun in number (English pronouns show only number)?

The items and their gold links come from ``multihead.tasks.coreference``; this module never
imports it: the notebook passes each fold's word-level stack (``syntax.aligned_words``, which
puts ``[CLS]`` in front) and the tensors of ``coref_tensors``. The criterion is
``analysis.coreference.coreference``; the replicates are folds of the items, with the head
chosen on the other folds (``analysis.replicates.held_out_best``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from multihead._checks import check_number
from multihead.analysis.coreference import coreference
from multihead.analysis.replicates import held_out_best

LINK_FIELDS = ("pronoun", "antecedent", "is_noun", "noun_class", "number")


def shift_links(links: dict, seq_len: int) -> dict[str, Tensor]:
    """The gold links of ``coref_tensors`` moved one word right for ``[CLS]`` and padded to
    ``seq_len`` words (``[CLS]``, the words, ``[SEP]``, padding).

    Shapes: pronoun, antecedent (n,); is_noun, noun_class, number (n, seq) -> the same with
    the positions + 1 and (n, seq_len) masks.
    """
    if not isinstance(links, dict) or any(k not in links for k in LINK_FIELDS):
        raise TypeError(f"links must be the dict of coref_tensors, with keys {LINK_FIELDS}")
    n, seq = links["is_noun"].shape
    if seq_len < seq + 2:
        raise ValueError(f"seq_len={seq_len} must leave room for [CLS] and [SEP] ({seq + 2})")
    out = {"pronoun": links["pronoun"] + 1, "antecedent": links["antecedent"] + 1}
    for key, fill in (("is_noun", False), ("noun_class", -1), ("number", -1)):
        t = torch.full((n, seq_len), fill, dtype=links[key].dtype)
        t[:, 1 : seq + 1] = links[key]
        out[key] = t
    return out


def coref_folds(
    fold_data: Sequence[tuple[Tensor, dict]], margin: float = 0.10, match: str = "number"
) -> dict:
    """Clark et al.'s coreference test with folds as replicates. ``fold_data`` holds, per
    fold, the word-level stack ``(layers, n, heads, seq, seq)`` and the links of
    ``shift_links``; ``match`` names the field the agreeing-noun rule matches on.

    Returns per fold: ``count``, ``head`` (``(layer, head)`` chosen on the other folds),
    ``accuracy`` (that head on the fold), ``nearest`` and ``agreeing`` (the two rules on the
    fold), ``clear`` (accuracy at least ``margin`` above the better rule); and ``in_sample``
    (every head's accuracy pooled over the folds, (layers, heads)).

    Shapes: folds of (pattern (layers, n, heads, seq, seq), links) -> dict of lists.
    """
    check_number("margin", margin, 0.0, 1.0)
    if match not in ("number", "noun_class"):
        raise ValueError(f"match={match!r} must be 'number' or 'noun_class'")
    fold_data = list(fold_data)
    if len(fold_data) < 2:
        raise ValueError(f"fold_data must hold at least 2 folds, got {len(fold_data)}")
    stats = []
    for f, item in enumerate(fold_data):
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict)):
            raise TypeError(f"fold_data[{f}] must be a (pattern, links) pair (shift_links)")
        p, g = item
        stats.append(
            coreference(
                p, g["pronoun"], g["pronoun"], g["antecedent"], g["is_noun"], g[match], margin
            )
        )
    acc = torch.stack([s["accuracy"] for s in stats])  # (folds, layers, heads)
    count = torch.tensor([float(s["count"]) for s in stats])  # (folds,)
    chosen, held = held_out_best(acc, count)
    n_heads = acc.shape[-1]
    base = [max(s["nearest"], s["same_class"]) for s in stats]
    clear = [float(a) >= b + margin for a, b in zip(held.tolist(), base, strict=True)]
    return {
        "count": [int(c) for c in count.tolist()],
        "head": [divmod(int(c), n_heads) for c in chosen],
        "accuracy": held.tolist(),
        "nearest": [s["nearest"] for s in stats],
        "agreeing": [s["same_class"] for s in stats],
        "clear": clear,
        "in_sample": (acc * count[:, None, None]).sum(0) / count.sum(),
    }
