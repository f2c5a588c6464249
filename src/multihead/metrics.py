"""Pure functions of attention tensors: no model access, no printing, no file I/O.

Patterns are ``(..., query, key)`` with rows summing to 1; most functions accept any
leading dimensions, e.g. ``(batch, heads, query, key)`` or ``(layers, heads, query, key)``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_pattern(
    name: str, pattern: object, min_ndim: int = 2, layout: str = "(..., query, key)"
) -> Tensor:
    """Raise a clear error unless ``pattern`` is a float tensor of attention rows.

    Shapes: (..., query, key).
    """
    if not isinstance(pattern, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(pattern).__name__}")
    if not pattern.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {pattern.dtype}")
    if pattern.ndim < min_ndim:
        raise ValueError(f"{name} must be shaped {layout}, got shape {tuple(pattern.shape)}")
    if pattern.numel() and (pattern.min() < 0):
        raise ValueError(f"{name} has negative entries; expected attention probabilities")
    return pattern


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
    p = check_pattern("pattern", pattern, 4, "(batch, heads, query, key)")
    if p.ndim != 4:
        raise ValueError(f"pattern must be (batch, heads, query, key), got {tuple(p.shape)}")
    top = p.amax(dim=-1)  # (batch, heads, query)
    if query_mask is None:
        return top.mean(dim=(0, 2))
    if not isinstance(query_mask, Tensor) or query_mask.dtype != torch.bool:
        raise TypeError("query_mask must be a bool tensor (batch, query), True = count")
    if query_mask.shape != (p.shape[0], p.shape[2]):
        raise ValueError(
            f"query_mask has shape {tuple(query_mask.shape)}, expected (batch, query) = "
            f"({p.shape[0]}, {p.shape[2]})"
        )
    if not query_mask.any():
        raise ValueError("query_mask selects no query")
    w = query_mask[:, None, :].to(top.dtype)  # (batch, 1, query)
    return (top * w).sum(dim=(0, 2)) / w.sum(dim=(0, 2))


def offset_profile(pattern: Tensor) -> Tensor:
    """Mean weight a query puts on each relative offset ``key - query``.

    Entry ``j`` of the last dimension is offset ``j - (n - 1)`` for ``n`` tokens, so the
    middle entry is the token itself and the one before it the previous token. Averaged
    over batch and over the queries for which that offset exists.

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
