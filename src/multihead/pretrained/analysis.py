"""Analyses of a pretrained encoder's heads: Clark et al. (2019)'s attention statistics,
word rarity for the rare-word detector, head distances, and head importance (gradient and
ablation, Michel et al. 2019) with pruning curves.

Inputs are the :class:`multihead.pretrained.load.SentenceAttention` records of
``attention_maps`` (word level, ``[CLS]`` first and ``[SEP]`` last) or an objective
callable evaluated with a :class:`multihead.pretrained.load.HeadMask` in place.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Callable

import torch
from torch import Tensor

from multihead._checks import check_int
from multihead.analysis.diversity import pairwise_head_distances
from multihead.analysis.metrics import entropy, rank_correlation
from multihead.analysis.roles import Gold
from multihead.pretrained.load import HeadMask, SentenceAttention, check_maps

PUNCTUATION = frozenset(string.punctuation)


def clark_statistics(maps: list[SentenceAttention]) -> dict[str, Tensor]:
    """Per-head statistics of Clark et al. (2019), on word-level attention, pooled over all
    query words of all sentences:

    * ``cls``, ``sep``, ``punct``: mean weight on [CLS], on [SEP], on punctuation words;
    * ``prev``, ``next``: mean weight on the previous / next word (queries that are words of
      the sentence, not [CLS] or [SEP]);
    * ``entropy``: mean entropy of a query's attention (nats); ``cls_entropy``: entropy of
      the [CLS] query alone.

    Shapes: list of SentenceAttention -> dict of (layers, heads).
    """
    maps = check_maps(maps)
    sums: dict[str, Tensor] = {}
    counts: dict[str, float] = {}

    def add(key: str, value: Tensor, count: float) -> None:
        sums[key] = sums.get(key, 0) + value
        counts[key] = counts.get(key, 0) + count

    for m in maps:
        p = m.word_attention  # (layers, heads, words, words)
        n = p.shape[-1]
        punct = torch.tensor([all(c in PUNCTUATION for c in w) for w in m.words])
        punct[0] = punct[-1] = False
        add("cls", p[..., 0].sum(-1), n)
        add("sep", p[..., -1].sum(-1), n)
        add("punct", p[..., punct].sum(-1).sum(-1), n)
        add("entropy", entropy(p).sum(-1), n)
        add("cls_entropy", entropy(p[..., 0, :]), 1)
        inner = torch.arange(1, n - 1)  # the sentence's own words
        add("prev", p[..., inner, inner - 1].sum(-1), len(inner))
        add("next", p[..., inner, inner + 1].sum(-1), len(inner))
    return {k: sums[k] / counts[k] for k in sums}


def word_ranks(maps: list[SentenceAttention], tokenizer) -> list[list[int]]:
    """A rarity rank for every word of every sentence (0 = most common; [CLS], [SEP] get 0).

    Words (lower-cased) are ordered by their count in the given sentences, most frequent
    first; ties are broken by how many WordPiece pieces the tokenizer needs (a word split
    into pieces was rare in the tokenizer's training text), then by length. A crude list,
    derived only from the course's own sentences: good enough to find each sentence's
    rarest word, not a corpus frequency.

    Shapes: n sentences -> n lists of len(words) ints.
    """
    maps = check_maps(maps)
    counts = Counter(w.lower() for m in maps for w in m.words[1:-1])

    def key(w: str) -> tuple[int, int, int]:
        return (-counts[w], len(tokenizer.tokenize(w)), len(w))

    order = sorted(counts, key=lambda w: (*key(w), w))
    keys = sorted({key(w) for w in order})
    rank_of_key = {k: i + 1 for i, k in enumerate(keys)}
    return [[0] + [rank_of_key[key(w.lower())] for w in m.words[1:-1]] + [0] for m in maps]


def padded_words(
    maps: list[SentenceAttention], ranks: list[list[int]] | None = None
) -> tuple[Tensor, Gold]:
    """Word attention of all sentences padded into one stack, with a :class:`Gold` that has
    the lengths (and ranks, if given; no dependency arcs), for the detectors of
    ``multihead.analysis.roles``. [SEP] is the end token, as the detectors expect.

    Shapes: -> pattern (layers, batch, heads, seq, seq), Gold tensors (batch, seq).
    """
    maps = check_maps(maps)
    seq = max(m.word_attention.shape[-1] for m in maps)
    layers, heads = maps[0].word_attention.shape[:2]
    out = torch.zeros(layers, len(maps), heads, seq, seq)
    full = torch.full((len(maps), seq), -1)
    rank_t = full.clone()
    for i, m in enumerate(maps):
        n = m.word_attention.shape[-1]
        out[:, i, :, :n, :n] = m.word_attention
        if ranks is not None:
            rank_t[i, :n] = torch.tensor(ranks[i])
    lengths = torch.tensor([m.word_attention.shape[-1] for m in maps])
    gold = Gold(lengths=lengths, heads=full, rels=full.clone(), pos=full.clone(), ranks=rank_t)
    return out, gold


def head_distances(maps: list[SentenceAttention]) -> Tensor:
    """Mean Jensen-Shannon distance between every pair of heads of the model (all layers),
    over all query words of all sentences. Head ``layer * heads + h`` is row ``layer*H + h``.

    Shapes: list of SentenceAttention -> (layers * heads, layers * heads).
    """
    maps = check_maps(maps)
    total, n_queries = 0, 0
    for m in maps:
        p = m.word_attention  # (layers, heads, w, w)
        flat = p.reshape(1, -1, *p.shape[-2:])  # (1, layers * heads, w, w)
        total = total + pairwise_head_distances(flat) * p.shape[-2]
        n_queries += p.shape[-2]
    return total / n_queries


Objective = Callable[[], Tensor]


def gradient_importance(head_mask: HeadMask, objective: Objective) -> Tensor:
    """|d objective / d mask| at the open mask (Michel et al. 2019): the first-order change
    of the objective when a head is removed.

    Shapes: -> (layers, heads).
    """
    if not isinstance(head_mask, HeadMask):
        raise TypeError("head_mask must be a multihead.pretrained.load.HeadMask")
    head_mask.mask = torch.ones_like(head_mask.mask).requires_grad_(True)
    try:
        (grad,) = torch.autograd.grad(objective(), head_mask.mask)
    finally:  # the mask is open and plain again, even if the objective raised
        head_mask.mask = torch.ones_like(head_mask.mask).detach()
    return grad.abs()


def ablation_importance(head_mask: HeadMask, objective: Objective) -> Tensor:
    """The objective's drop when each head alone is masked: f(all) - f(all but one).

    Shapes: -> (layers, heads).
    """
    if not isinstance(head_mask, HeadMask):
        raise TypeError("head_mask must be a multihead.pretrained.load.HeadMask")
    layers, heads = head_mask.mask.shape
    try:
        with torch.no_grad():
            head_mask.set([])
            base = float(objective())
            out = torch.zeros(layers, heads)
            for i in range(layers):
                for h in range(heads):
                    head_mask.set([(i, h)])
                    out[i, h] = base - float(objective())
    finally:
        head_mask.set([])
    return out


def pruning_curve(
    head_mask: HeadMask, objective: Objective, order: Tensor, steps: list[int]
) -> Tensor:
    """The objective after masking the first ``k`` heads of ``order`` for each ``k`` in
    ``steps``. ``order`` lists flat head indices ``layer * heads + h``.

    Shapes: order (layers * heads,), steps list of m ints -> (m,).
    """
    if not isinstance(head_mask, HeadMask):
        raise TypeError("head_mask must be a multihead.pretrained.load.HeadMask")
    layers, heads = head_mask.mask.shape
    order = torch.as_tensor(order).flatten()
    if sorted(order.tolist()) != list(range(layers * heads)):
        raise ValueError(f"order must be a permutation of range({layers * heads})")
    if any(not 0 <= k <= layers * heads for k in steps):
        raise ValueError(f"steps must lie in [0, {layers * heads}], got {steps}")
    values = []
    try:
        with torch.no_grad():
            for k in steps:
                head_mask.set([(int(j) // heads, int(j) % heads) for j in order[:k]])
                values.append(float(objective()))
    finally:
        head_mask.set([])
    return torch.tensor(values)


def triplet_scores(a: Tensor, p: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
    """Paraphrase ranking on (sentence, paraphrase, distractor) embeddings of unit length:
    the mean margin cos(a, p) - cos(a, d) (differentiable), and the share of triplets where
    the paraphrase is closer.

    Shapes: (n, hidden) each -> (), ().
    """
    if not (a.shape == p.shape == d.shape) or a.ndim != 2:
        raise ValueError(
            f"a, p, d must be equally shaped (n, hidden); got {tuple(a.shape)}, "
            f"{tuple(p.shape)}, {tuple(d.shape)}"
        )
    margin = (a * p).sum(-1) - (a * d).sum(-1)  # (n,)
    return margin.mean(), (margin > 0).float().mean()


def retrieval_scores(a: Tensor, p: Tensor) -> tuple[Tensor, Tensor]:
    """Paraphrase retrieval on unit-length embeddings: for sentence i, its paraphrase p_i
    competes with every other paraphrase p_j. Returns the mean margin
    cos(a_i, p_i) - mean_{j != i} cos(a_i, p_j) (differentiable) and the share of sentences
    whose own paraphrase is the closest.

    Shapes: (n, hidden) each, n >= 2 -> (), ().
    """
    if a.shape != p.shape or a.ndim != 2 or a.shape[0] < 2:
        raise ValueError(
            f"a and p must be equally shaped (n, hidden) with n >= 2; got {tuple(a.shape)} "
            f"and {tuple(p.shape)}"
        )
    n = a.shape[0]
    sim = a @ p.T  # (n, n): sim[i, j] = cos(a_i, p_j)
    own = sim.diagonal()
    others = (sim.sum(-1) - own) / (n - 1)
    best_other = sim.masked_fill(torch.eye(n, dtype=torch.bool), float("-inf")).amax(-1)
    return (own - others).mean(), (own > best_other).float().mean()


def folds(n: int, k: int, seed: int = 0) -> list[list[int]]:
    """Split ``range(n)`` into ``k`` disjoint folds of nearly equal size, after a shuffle
    seeded by ``seed``: independent subsets of the data, the replicates of a model that
    cannot be retrained.

    Shapes: -> k sorted lists of ints.
    """
    for name, v, low in (("n", n, 1), ("k", k, 1), ("seed", seed, 0)):
        check_int(name, v, low)
    if k > n:
        raise ValueError(f"k={k} folds need at least k items, got n={n}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return [sorted(perm[i::k]) for i in range(k)]


def held_out_splits(
    n: int, k: int, seed: int = 0, *, evaluate: str = "others"
) -> list[tuple[list[int], list[int]]]:
    """Out-of-sample replicates: cut ``range(n)`` into ``k`` folds (:func:`folds`) and
    return, for each fold, (the fold, indices to evaluate on, disjoint from it): indices to
    score on and indices to evaluate on. Scoring on the small part keeps the cost of a score
    that needs one evaluation per head (ablation) at that of one pass over the data.

    ``evaluate="others"``: evaluate on every other fold (the replicates share their
    evaluation data). ``evaluate="next"``: evaluate on the next fold (the last on the
    first), so that every item is scored on once and evaluated on once, and two replicates
    share at most one fold, in different roles.

    Shapes: -> k pairs of sorted lists of ints.
    """
    check_int("k", k, 2)  # a fold to score on and the rest
    if evaluate not in ("others", "next"):
        raise ValueError(f"evaluate must be 'others' or 'next', got {evaluate!r}")
    parts = folds(n, k, seed)
    if evaluate == "next":
        return [(f, parts[(r + 1) % k]) for r, f in enumerate(parts)]
    return [(f, sorted(i for g in parts if g is not f for i in g)) for f in parts]


def steps_at_full(curve: Tensor, steps: list[int]) -> int:
    """The largest number of removed heads up to which a pruning curve never falls below
    its start (``curve[0]``, nothing removed): every point up to it keeps the full value.

    Shapes: curve (m,), steps m ints starting at 0 -> int.
    """
    curve = torch.as_tensor(curve).flatten()
    if len(steps) != len(curve) or not steps or steps[0] != 0:
        raise ValueError(
            f"steps must start at 0 and match the curve's {len(curve)} points, got {steps}"
        )
    kept = 0
    for k, v in zip(steps, curve.tolist(), strict=True):
        if v < curve[0].item():
            break
        kept = k
    return kept


def within_layer_rank_correlation(x: Tensor, y: Tensor) -> Tensor:
    """Spearman correlation of two head statistics inside each layer.

    Shapes: x, y (layers, heads) -> (layers,).
    """
    if not isinstance(x, Tensor) or not isinstance(y, Tensor) or x.shape != y.shape:
        raise ValueError("x and y must be equally shaped (layers, heads) tensors")
    if x.ndim != 2 or x.shape[1] < 3:
        raise ValueError(f"x must be (layers, heads) with at least 3 heads, got {tuple(x.shape)}")
    return torch.stack([rank_correlation(a, b) for a, b in zip(x, y, strict=True)])
