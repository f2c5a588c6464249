"""Head symmetry: tie the heads of a layer together, and measure how far apart they are.

Chapter 2 proves that heads which start as exact copies (queries, keys, values *and* their
blocks of ``W_O``) stay copies under gradient descent and Adam, and that copying only the
query/key/value projections is not enough. These helpers build such starts and measure
the distance between heads, in parameters and in attention patterns.
"""

from __future__ import annotations

import torch
from torch import Tensor

from multihead._checks import check_bool, check_number
from multihead.analysis.diversity import pairwise_head_distances
from multihead.core.attention import MultiHeadAttention

_QKV = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")


@torch.no_grad()
def tie_heads(
    attn: MultiHeadAttention,
    *,
    output: bool = True,
    epsilon: float = 0.0,
    generator: torch.Generator | None = None,
) -> None:
    """Make every head of ``attn`` a copy of head 0, then add noise of relative size ``epsilon``.

    ``output=True`` also copies head 0's block of ``W_O`` (the symmetric start of the
    theorem); ``output=False`` leaves the ``W_O`` blocks as they are. The noise added to a
    tensor is Gaussian with standard deviation ``epsilon`` times that tensor's own standard
    deviation (zero tensors, such as fresh biases, stay zero).

    Shapes: none (modifies ``attn`` in place).
    """
    if not isinstance(attn, MultiHeadAttention):
        raise TypeError(f"attn must be a MultiHeadAttention, got {type(attn).__name__}")
    check_bool("output", output)
    check_number("epsilon", epsilon, 0.0)
    names = _QKV + (("W_O",) if output else ())
    for name in names:
        p = getattr(attn, name)
        if p is None:
            continue
        p.copy_(p[:1].expand_as(p))  # (heads, ...): every head becomes head 0
        if epsilon > 0 and p.std() > 0:
            noise = torch.randn(p.shape, generator=generator, dtype=p.dtype).to(p.device)
            p.add_(epsilon * p.std() * noise)


@torch.no_grad()
def parameter_spread(attn: MultiHeadAttention, output: bool = True) -> float:
    """Largest distance of a head's parameters from head 0's, relative to head 0's norm.

    The parameters compared are ``W_Q, W_K, W_V`` with their biases and, if ``output``,
    the head's block of ``W_O``. Exactly 0.0 when the heads are copies.

    Shapes: none (returns a float).
    """
    if not isinstance(attn, MultiHeadAttention):
        raise TypeError(f"attn must be a MultiHeadAttention, got {type(attn).__name__}")
    names = _QKV + (("W_O",) if output else ())
    params = [getattr(attn, n) for n in names if getattr(attn, n) is not None]
    flat = torch.cat([p.reshape(p.shape[0], -1) for p in params], dim=1)  # (heads, all)
    ref = flat[0].norm().clamp_min(1e-30)
    return ((flat - flat[:1]).norm(dim=1).max() / ref).item()


def pattern_spread(pattern: Tensor) -> Tensor:
    """Mean Jensen-Shannon distance over all pairs of different heads: 0 when all heads
    attend identically, at most sqrt(log 2).

    Shapes: (batch, heads, query, key) -> scalar tensor.
    """
    d = pairwise_head_distances(pattern)  # (heads, heads)
    h = d.shape[0]
    if h < 2:
        raise ValueError(f"pattern has {h} head; the spread needs at least two")
    return d.sum() / (h * (h - 1))
