"""Pure functions of attention tensors: no model access, no printing, no file I/O.

Patterns are ``(..., query, key)`` with rows summing to 1; most functions accept any
leading dimensions, e.g. ``(batch, heads, query, key)`` or ``(layers, heads, query, key)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from multihead._checks import check_bool_mask, check_int, check_pattern


def entropy(pattern: Tensor) -> Tensor:
    """Entropy in nats of each attention row, with 0 log 0 = 0.

    A head that looks at one token has entropy 0; a uniform row over n keys has log n.

    Shapes: (..., query, key) -> (..., query); a single distribution (key,) -> ().
    """
    p = check_pattern("pattern", pattern, 1, "(..., key)")
    # xlogy gives exactly 0 where p == 0, so masked keys contribute nothing.
    return -torch.special.xlogy(p, p).sum(dim=-1)


def max_weight(pattern: Tensor) -> Tensor:
    """The largest weight of each attention row.

    Shapes: (..., query, key) -> (..., query).
    """
    return check_pattern("pattern", pattern).amax(dim=-1)


def head_confidence(pattern: Tensor, query_mask: Tensor | None = None) -> Tensor:
    """Head confidence (Voita et al. 2019): the mean over queries of the max weight.

    ``query_mask`` (boolean, True = count this query) drops queries such as padding or an
    end-of-sentence token. The mean is over every dimension except the head dimension,
    which is the one just before ``(query, key)``.

    Shapes: pattern (batch, heads, query, key), query_mask (batch, query) -> (heads,).
    """
    p = check_pattern("pattern", pattern, ndim=4, layout="(batch, heads, query, key)")
    top = p.amax(dim=-1)  # (batch, heads, query)
    if query_mask is None:
        return top.mean(dim=(0, 2))
    shape = (p.shape[0], p.shape[2])
    check_bool_mask("query_mask", query_mask, shape, "(batch, query), True = count")
    if not query_mask.any():
        raise ValueError("query_mask selects no query")
    w = query_mask[:, None, :].to(top.dtype)  # (batch, 1, query)
    return (top * w).sum(dim=(0, 2)) / w.sum(dim=(0, 2))


def offset_profile(pattern: Tensor) -> Tensor:
    """Mean weight a query puts on each relative offset ``key - query``.

    Entry ``j`` of the last dimension is offset ``j - (n - 1)`` for ``n`` tokens, so the
    middle entry is the token itself and the one before it the previous token. Averaged
    over the batch and over the queries for which that offset exists; every row counts, so
    pass unpadded patterns (padding rows would pull the profile down).

    Shapes: (batch, heads, n, n) -> (heads, 2n - 1).
    """
    p = check_pattern("pattern", pattern, 4, "(batch, heads, n, n)")
    if p.ndim != 4 or p.shape[-1] != p.shape[-2]:
        raise ValueError(f"pattern must be (batch, heads, n, n), got {tuple(p.shape)}")
    n = p.shape[-1]
    mean = p.mean(dim=0)  # (heads, n, n)
    out = mean.new_zeros(mean.shape[0], 2 * n - 1)
    for j, offset in enumerate(range(-(n - 1), n)):
        out[:, j] = torch.diagonal(mean, offset=offset, dim1=-2, dim2=-1).mean(dim=-1)
    return out


def argmax_credit(pattern: Tensor, target: Tensor, atol: float = 1e-6) -> Tensor:
    """How much of each row's maximum lies on the ``target`` keys, ties shared equally.

    A row whose single largest weight is on a target key scores 1; one whose largest
    weight is elsewhere scores 0; a row with m tied maxima scores (number of tied maxima
    on targets) / m. So a uniform row over n keys scores |target| / n, never 1 by the
    accident of ``argmax`` picking the first key.

    Shapes: pattern (..., query, key), target bool broadcastable to it -> (..., query).
    """
    p = check_pattern("pattern", pattern)
    check_bool_mask("target", target, meaning="marking the keys to hit")
    try:
        target = target.expand_as(p)
    except RuntimeError as err:
        raise ValueError(
            f"target of shape {tuple(target.shape)} does not broadcast to pattern {tuple(p.shape)}"
        ) from err
    is_max = p >= p.amax(dim=-1, keepdim=True) - atol  # (..., query, key)
    return (is_max & target).sum(-1).to(p.dtype) / is_max.sum(-1).to(p.dtype)


def _ranks(t: Tensor) -> Tensor:
    """Ranks 0..n-1 of the flattened values, ties given their average rank."""
    t = t.flatten().double()
    # each distinct value (sorted) takes the ranks end - count .. end - 1; ties share their mean
    _, inverse, counts = torch.unique(t, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    return (ends - (counts.double() + 1) / 2)[inverse]


def _centred_group_ranks(t: Tensor, label_of: Tensor, sizes: Tensor) -> Tensor:
    """Ranks of ``t`` inside each group (``label_of``: 0..G-1), centred on their group's mean."""
    # sorting the (group, value) pairs ranks each group's values in one block; the block's
    # offset goes away with the centring
    _, inverse, counts = torch.unique(
        torch.stack([label_of.double(), t.double()], 1), dim=0, return_inverse=True,
        return_counts=True,
    )  # fmt: skip
    r = (counts.cumsum(0).double() - (counts.double() + 1) / 2)[inverse]  # (n,)
    means = torch.zeros(len(sizes), dtype=r.dtype).index_add_(0, label_of, r) / sizes
    return r - means[label_of]


def rank_correlation(x: Tensor, y: Tensor) -> Tensor:
    """Spearman's rank correlation of two equally shaped tensors (ties get average ranks).
    It is nan when ``x`` or ``y`` is constant (no ranking to correlate), as in
    ``scipy.stats.spearmanr`` and ``within_group_rank_correlation``.

    Shapes: x (...), y (...) with the same number of elements -> scalar (float64).
    """
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.numel() != y.numel():
        raise ValueError(f"x has {x.numel()} elements but y has {y.numel()}; they must match")
    if x.numel() < 2:
        raise ValueError("rank_correlation needs at least 2 values")

    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = rx.norm() * ry.norm()
    if denom == 0:
        return torch.tensor(float("nan"), dtype=torch.float64)
    return (rx @ ry) / denom


def within_group_rank_correlation(x: Tensor, y: Tensor, groups: Tensor) -> Tensor:
    """Spearman's correlation of ``x`` and ``y`` *within* groups (e.g. the heads of one
    layer): both are ranked inside each group, the ranks centred on their group's mean, and
    the centred ranks of all groups correlated together. A difference between the groups'
    levels (one layer more confident and more important than another) cannot drive it.
    Groups of one element carry no information and are skipped.

    Shapes: x, y, groups (n,) (groups: integer labels) -> scalar (nan when no group has a
    spread in both x and y).
    """
    for name, t in (("x", x), ("y", y), ("groups", groups)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    x, y, groups = x.flatten(), y.flatten(), groups.flatten()
    if not (x.numel() == y.numel() == groups.numel()):
        raise ValueError(
            f"x, y and groups must have the same number of elements, got "
            f"{x.numel()}, {y.numel()} and {groups.numel()}"
        )
    if groups.is_floating_point() or groups.is_complex() or groups.dtype == torch.bool:
        raise TypeError(f"groups must hold integer labels, got dtype {groups.dtype}")
    labels, label_of, sizes = torch.unique(groups, return_inverse=True, return_counts=True)
    if int(sizes.max()) < 2:
        raise ValueError("within_group_rank_correlation needs a group with at least 2 elements")
    # a group of one element has centred rank 0 and adds nothing: no need to skip it
    rx, ry = (_centred_group_ranks(t, label_of, sizes) for t in (x, y))
    denom = rx.norm() * ry.norm()
    if denom == 0:
        return torch.tensor(float("nan"), dtype=torch.float64)
    return (rx @ ry) / denom


def rank_correlation_by_row(x: Tensor, y: Tensor) -> Tensor:
    """Spearman's rank correlation of ``x`` and ``y`` within each row, e.g. over the heads of
    each layer for ``(layers, heads)`` statistics: what is left of a correlation over all
    heads once the differences between layers are taken out. A constant row gives nan.

    Shapes: x (rows, n), y (rows, n), n >= 2 -> (rows,).
    """
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, Tensor) or t.ndim != 2:
            raise ValueError(f"{name} must be a 2-D tensor (rows, n), e.g. (layers, heads)")
    if x.shape != y.shape:
        raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)} must have the same shape")
    if x.shape[1] < 2:
        raise ValueError(f"each row needs at least 2 values, got {x.shape[1]}")
    return torch.stack([rank_correlation(a, b) for a, b in zip(x, y, strict=True)])


def js_divergence(p: Tensor, q: Tensor) -> Tensor:
    """Jensen-Shannon divergence in nats between distributions on the last dimension.

    JS(p, q) = KL(p || m) / 2 + KL(q || m) / 2 with m = (p + q) / 2; it is symmetric, lies in
    [0, log 2], and its square root (the JS distance) is a metric. 0 log 0 = 0.

    Shapes: p (..., n), q broadcastable to p -> (...).
    """
    p = check_pattern("p", p, 1, "(..., n)")
    q = check_pattern("q", q, 1, "(..., n)")
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(f"p has {p.shape[-1]} outcomes but q has {q.shape[-1]}; they must match")
    dtype = torch.promote_types(p.dtype, q.dtype)
    # In float64: halving a float32 denormal (a sharp head's 1e-45) would give m = 0 < p.
    p, q = p.double(), q.double()
    m = (p + q) / 2
    # xlogy(p, p/m) is 0 where p == 0; where p > 0, m > 0 as well.
    kl_pm = torch.special.xlogy(p, p).sum(-1) - torch.special.xlogy(p, m).sum(-1)
    kl_qm = torch.special.xlogy(q, q).sum(-1) - torch.special.xlogy(q, m).sum(-1)
    return ((kl_pm + kl_qm) / 2).clamp_min(0.0).to(dtype)


def classical_mds(distances: Tensor, dim: int = 2) -> Tensor:
    """Classical (Torgerson) multidimensional scaling: points whose Euclidean distances
    approximate ``distances``. Double-centre the squared distances, B = -J D^2 J / 2, and
    scale the top ``dim`` eigenvectors of B by the square roots of their eigenvalues.

    Shapes: (n, n) symmetric -> (n, dim).
    """
    if not isinstance(distances, Tensor) or distances.ndim != 2:
        raise TypeError("distances must be a square (n, n) torch.Tensor")
    n = distances.shape[0]
    if distances.shape[1] != n:
        raise ValueError(f"distances must be square, got {tuple(distances.shape)}")
    check_int("dim", dim, 1, n + 1)
    d2 = distances.double() ** 2
    J = torch.eye(n, dtype=d2.dtype) - 1.0 / n  # centring matrix (n, n)
    B = -J @ d2 @ J / 2
    B = (B + B.T) / 2
    values, vectors = torch.linalg.eigh(B)  # ascending
    values, vectors = values.flip(0)[:dim], vectors.flip(1)[:, :dim]
    # Fix each axis' sign (first nonzero coordinate positive) so the picture is reproducible.
    signs = torch.sign(vectors[vectors.abs().argmax(0), torch.arange(dim)])
    return (vectors * signs * values.clamp_min(0).sqrt()).to(distances.dtype)


def group_spread(distances: Tensor, group_size: int) -> Tensor:
    """Mean off-diagonal distance inside consecutive groups of ``group_size`` items, e.g. the
    heads of each layer in a (layers * heads, layers * heads) distance matrix.

    Shapes: (n, n) with n = groups * group_size -> (groups,).
    """
    if not isinstance(distances, Tensor) or distances.ndim != 2:
        raise TypeError("distances must be a square (n, n) torch.Tensor")
    n = distances.shape[0]
    check_int("group_size", group_size, 2)
    if n % group_size:
        raise ValueError(f"n={n} items do not split into groups of group_size={group_size}")
    g = n // group_size
    blocks = distances.reshape(g, group_size, g, group_size).diagonal(dim1=0, dim2=2)
    blocks = blocks.permute(2, 0, 1)  # (groups, group_size, group_size)
    off = ~torch.eye(group_size, dtype=torch.bool)
    return blocks[:, off].mean(-1)
