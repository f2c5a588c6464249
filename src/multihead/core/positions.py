"""Where position information comes from: sinusoidal encodings and their offset maps.

The course's models *learn* one vector per position (``Stack.pos`` in
``multihead.core.model``, an ``nn.Embedding(max_len, d_model)``). The sinusoidal encodings
of the original Transformer are here for the primer chapter, together with the matrix that
moves every encoding by a fixed offset, so that the chapter's theorem can be checked.

Layout: one row per position, as token vectors are one row per token. Column ``2i`` holds
``sin(t * w_i)`` and column ``2i + 1`` holds ``cos(t * w_i)``, with frequencies
``w_i = base ** (-2i / d_model)``; positions count from 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from multihead._checks import check_even, check_int, check_number, check_positive_int


def _check_width(d_model: object) -> int:
    return check_even(
        "d_model", d_model, "for sinusoidal encodings, which come in (sin, cos) pairs"
    )


def frequencies(d_model: int, base: float = 10000.0, dtype: torch.dtype | None = None) -> Tensor:
    """The angular frequencies ``w_i = base ** (-2i / d_model)``, one per (sin, cos) pair.

    Shapes: -> (d_model // 2,).
    """
    _check_width(d_model)
    check_number("base", base, 1.0, None, "()")
    exponent = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model  # 2i / d_model
    return (base**-exponent).to(dtype or torch.get_default_dtype())


def sinusoidal_positions(
    n: int, d_model: int, base: float = 10000.0, dtype: torch.dtype | None = None
) -> Tensor:
    """Sinusoidal position encodings of positions ``0 .. n - 1``:
    ``PE[t, 2i] = sin(t w_i)`` and ``PE[t, 2i + 1] = cos(t w_i)``.

    Shapes: -> (n, d_model).
    """
    check_positive_int("n", n)
    w = frequencies(d_model, base, torch.float64)  # (d_model // 2,)
    angles = torch.arange(n, dtype=torch.float64)[:, None] * w  # (n, d_model // 2)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # (n, d_model), interleaved
    return pe.to(dtype or torch.get_default_dtype())


def offset_map(
    k: int, d_model: int, base: float = 10000.0, dtype: torch.dtype | None = None
) -> Tensor:
    """The matrix ``R_k`` with ``PE[t + k] = PE[t] @ R_k`` for every position ``t``: block
    diagonal, one 2x2 rotation by the angle ``k w_i`` per frequency. ``k`` may be negative.

    Shapes: -> (d_model, d_model), orthogonal.
    """
    check_int("k", k)
    w = frequencies(d_model, base, torch.float64)  # (d_model // 2,)
    c, s = (k * w).cos(), (k * w).sin()
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    # a row vector (sin a, cos a) times [[cos b, -sin b], [sin b, cos b]] is (sin(a+b), cos(a+b))
    R[even, even], R[even, odd] = c, -s
    R[odd, even], R[odd, odd] = s, c
    return R.to(dtype or torch.get_default_dtype())
