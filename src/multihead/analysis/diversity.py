"""How different are the heads of a layer? Distances between heads, and their spread per layer.

The distance between two heads follows Clark et al. (2019): compare the two attention
distributions each query token gets from the two heads with the Jensen-Shannon divergence,
and average over the query tokens of all sentences. ``multihead.analysis.metrics`` has the
divergence itself; this module has the one head-distance matrix of the package, and what a
study across layers needs:

* a query mask, so padding rows (which attend somewhere but mean nothing) do not count;
* the whole model at once: a ``(layers, heads, heads)`` tensor of within-layer distances and
  the ``(layers * heads, layers * heads)`` matrix of all pairs (for an MDS picture);
* the *spread* of a layer (mean and standard deviation of its pairwise distances) and each
  head's *distinctness* (its mean distance to the other heads of its layer);
* the logit-gap bound of the chapter, which says how far apart two heads can be at all;
* the *contrast* of groups of heads (the query heads that share a key/value head) against
  heads of different groups, with its level for random groupings.

Pure functions of tensors: no model access, no printing.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from multihead._checks import (
    check_bool,
    check_bool_mask,
    check_pattern,
    check_positive_int,
    check_tensor,
)
from multihead.analysis.metrics import js_divergence


def _check_query_mask(query_mask: object, batch: int, queries: int) -> Tensor:
    check_bool_mask("query_mask", query_mask, (batch, queries), "(batch, query), True = count")
    if not query_mask.any():
        raise ValueError("query_mask selects no query; mark at least one real token True")
    return query_mask


def pairwise_head_distances(
    pattern: Tensor, query_mask: Tensor | None = None, *, divergence: bool = False
) -> Tensor:
    """Mean Jensen-Shannon distance (``divergence=False``: the square root of the divergence)
    or divergence (``divergence=True``) between every pair of heads, averaged over the
    queries that ``query_mask`` keeps (all queries if None) of all sentences.

    Shapes: pattern (batch, heads, query, key), query_mask (batch, query) -> (heads, heads),
    symmetric with a zero diagonal.
    """
    p = check_pattern("pattern", pattern, ndim=4, layout="(batch, heads, query, key)")
    check_bool("divergence", divergence)
    batch, heads, queries, _ = p.shape
    if query_mask is None:
        query_mask = torch.ones(batch, queries, dtype=torch.bool)
    w = _check_query_mask(query_mask, batch, queries).to(device=p.device, dtype=torch.float64)
    # In float32 a tiny weight (a denormal such as 1e-45, common in sharp heads) halves to 0
    # in m = (p + q) / 2, and p log(p / m) becomes infinite; float64 has room to spare.
    p64 = p.double()
    out = p64.new_zeros(heads, heads)
    for i in range(heads):  # one row at a time keeps memory at (batch, heads, query, key)
        d = js_divergence(p64[:, i : i + 1], p64)  # (batch, heads, query)
        if not divergence:
            d = d.sqrt()
        out[i] = (d * w[:, None, :]).sum(dim=(0, 2)) / w.sum()
    out.fill_diagonal_(0.0)
    return ((out + out.T) / 2).to(p.dtype)  # exact symmetry despite rounding


def _check_layered(pattern: object) -> Tensor:
    layout = "(layers, batch, heads, query, key) (stack the layers with torch.stack)"
    return check_pattern("pattern", pattern, ndim=5, layout=layout)


def layer_distances(
    pattern: Tensor, query_mask: Tensor | None = None, *, divergence: bool = False
) -> Tensor:
    """Within-layer head distances of a whole stack: entry ``[l, i, j]`` compares heads ``i``
    and ``j`` of layer ``l`` (see ``pairwise_head_distances``).

    Shapes: pattern (layers, batch, heads, query, key), query_mask (batch, query)
    -> (layers, heads, heads).
    """
    p = _check_layered(pattern)
    return torch.stack(
        [pairwise_head_distances(layer, query_mask, divergence=divergence) for layer in p]
    )


def all_head_distances(
    pattern: Tensor, query_mask: Tensor | None = None, *, divergence: bool = False
) -> Tensor:
    """Distances between every pair of heads of a stack, across layers too; head ``h`` of
    layer ``l`` is row ``l * heads + h`` (the input of an MDS picture of all heads).

    Shapes: pattern (layers, batch, heads, query, key), query_mask (batch, query)
    -> (layers * heads, layers * heads).
    """
    p = _check_layered(pattern)
    layers, batch, heads, q, k = p.shape
    flat = p.permute(1, 0, 2, 3, 4).reshape(batch, layers * heads, q, k)  # (batch, L*H, q, k)
    return pairwise_head_distances(flat, query_mask, divergence=divergence)


def _check_distances(distances: object) -> Tensor:
    check_tensor("distances", distances, layout="(layers, heads, heads)")
    if distances.ndim != 3 or distances.shape[1] != distances.shape[2]:
        raise ValueError(
            f"distances must be (layers, heads, heads), got {tuple(distances.shape)}; "
            "layer_distances returns this layout"
        )
    if distances.shape[1] < 2:
        raise ValueError("distances has 1 head per layer; a spread needs at least 2 heads")
    return distances


def within_layer_spread(distances: Tensor) -> dict[str, Tensor]:
    """Mean and standard deviation (population, over the ``heads * (heads - 1) / 2`` pairs)
    of the pairwise distances inside each layer, with their minimum and maximum.

    Identical heads give a mean of 0; a layer with one odd head out has a large standard
    deviation next to its mean.

    Shapes: (layers, heads, heads) -> {"mean", "std", "min", "max"}, each (layers,).
    """
    d = _check_distances(distances)
    heads = d.shape[1]
    upper = torch.triu(torch.ones(heads, heads, dtype=torch.bool), diagonal=1)
    pairs = d[:, upper]  # (layers, pairs)
    return {
        "mean": pairs.mean(dim=1),
        "std": pairs.std(dim=1, correction=0),
        "min": pairs.amin(dim=1),
        "max": pairs.amax(dim=1),
    }


def distinctness(distances: Tensor) -> Tensor:
    """Each head's mean distance to the *other* heads of its layer (the diagonal is left out).

    Shapes: (layers, heads, heads) -> (layers, heads).
    """
    d = _check_distances(distances)
    heads = d.shape[1]
    off = ~torch.eye(heads, dtype=torch.bool, device=d.device)
    return (d * off).sum(dim=2) / (heads - 1)


def logit_gap(scores_a: Tensor, scores_b: Tensor) -> Tensor:
    """The range ``max_j (a_j - b_j) - min_j (a_j - b_j)`` of the difference of two heads'
    attention logits over the keys: the quantity the chapter's logit-gap bound needs
    (adding a constant to a row of logits changes neither softmax nor the gap).

    Masked keys (``-inf`` in both rows) are left out, as the bound's range runs over the
    keys both rows allow; a row with every key masked has gap 0. A key masked in one row
    only makes the gap ``inf`` (the bound is then ``log 2``, true of any two rows).

    Shapes: scores_a (..., key), scores_b the same shape -> (...).
    """
    check_tensor("scores_a", scores_a, min_ndim=1, layout="(..., key)")
    check_tensor("scores_b", scores_b, min_ndim=1, layout="(..., key)")
    if scores_a.shape != scores_b.shape:
        raise ValueError(
            f"scores_a has shape {tuple(scores_a.shape)} but scores_b has "
            f"{tuple(scores_b.shape)}; compare two heads on the same queries and keys"
        )
    masked = (scores_a == float("-inf")) & (scores_b == float("-inf"))  # (..., key)
    diff = (scores_a - scores_b).masked_fill(masked, 0.0)  # -inf - -inf would be nan
    top = diff.masked_fill(masked, float("-inf")).amax(dim=-1)
    bottom = diff.masked_fill(masked, float("inf")).amin(dim=-1)
    return torch.where(masked.all(dim=-1), torch.zeros_like(top), top - bottom)


def _check_gap(gap: object) -> Tensor:
    """``gap`` as a float tensor, after checking it is a range of logit differences (>= 0)."""
    if isinstance(gap, bool) or not isinstance(gap, (Tensor, int, float)):
        raise TypeError(f"gap must be a number or a float tensor, got {type(gap).__name__}")
    g = gap if isinstance(gap, Tensor) and gap.is_floating_point() else torch.as_tensor(gap)
    g = g.to(g.dtype if g.is_floating_point() else torch.get_default_dtype())
    if (g < 0).any():
        raise ValueError(f"gap must be >= 0 (a range of logit differences), got {gap!r}")
    return g


def js_logit_bound(gap: Tensor | float) -> Tensor:
    """The chapter's bound on the JS divergence of two softmax rows whose logit difference
    has range ``gap``: ``log 2 - log(1 + exp(-gap))``, which is at most ``min(gap / 2, log 2)``.

    Shapes: (...) -> (...).
    """
    g = _check_gap(gap)
    return math.log(2) - torch.log1p(torch.exp(-g))


def js_ratio_bound(gap: Tensor | float) -> Tensor:
    """The second-order bound on the JS divergence of two softmax rows whose logit difference
    has range ``gap`` (chapter 6): ``(e^gap - 1)^2 / (2 (e^gap + 1))``, about ``gap^2 / 4``
    for a small gap and at most ``gap^2 e^gap / 4`` for every gap.

    Shapes: (...) -> (...).
    """
    g = _check_gap(gap)
    e = torch.expm1(g)  # e^gap - 1, accurate for a small gap
    return e * e / (2 * (e + 2))


def group_contrast(
    distances: Tensor, group_size: int, *, draws: int = 100, seed: int = 0
) -> dict[str, Tensor]:
    """How much closer the heads of a group are than heads of different groups: with the
    heads in consecutive groups of ``group_size`` (the query heads that share a key/value
    head), the mean distance of two heads of one group (``within``), of two heads of
    different groups (``across``), the *contrast* ``1 - within / across`` (0 when groups are
    no closer than any two heads, 1 when the heads of a group are identical), and its
    *chance* level: the mean contrast of ``draws`` random groupings of the same heads into
    groups of the same size (drawn from ``seed``). Heads that are all identical get 0.

    Shapes: distances (..., heads, heads) -> {"within", "across", "contrast", "chance"}: (...).
    """
    check_tensor("distances", distances, min_ndim=2, layout="(..., heads, heads)")
    heads = distances.shape[-1]
    if distances.shape[-2] != heads:
        raise ValueError(f"distances must be square in its last two dims, got {distances.shape}")
    check_positive_int("group_size", group_size)
    if group_size < 2 or heads % group_size or heads // group_size < 2:
        raise ValueError(
            f"group_size={group_size} must split the {heads} heads into at least 2 groups of at "
            "least 2 heads (n_heads // n_kv_heads for grouped-query attention)"
        )
    check_positive_int("draws", draws)
    d = distances.double()
    off = ~torch.eye(heads, dtype=torch.bool, device=d.device)

    def contrast_of(labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        same = labels[:, None] == labels[None, :]  # (heads, heads)
        within = (d * (same & off)).sum((-2, -1)) / (same & off).sum()
        across = (d * ~same).sum((-2, -1)) / (~same).sum()
        safe = torch.where(across > 0, across, torch.ones_like(across))
        return (
            within,
            across,
            torch.where(across > 0, 1 - within / safe, torch.zeros_like(d[..., 0, 0])),
        )

    labels = torch.arange(heads, device=d.device) // group_size  # consecutive groups
    within, across, contrast = contrast_of(labels)
    g = torch.Generator().manual_seed(seed)
    chance = torch.stack(
        [
            contrast_of(labels[torch.randperm(heads, generator=g).to(d.device)])[2]
            for _ in range(draws)
        ]
    ).mean(0)
    out = {"within": within, "across": across, "contrast": contrast, "chance": chance}
    return {k: v.to(distances.dtype) for k, v in out.items()}
