"""Rotary position embeddings (RoPE, Su et al. 2021): positions as rotations of queries and
keys, so that a score depends on how far apart two tokens are and not on where they are.

Each head's vector is cut into pairs of coordinates ``(2i, 2i + 1)``; at position ``t`` pair
``i`` turns by the angle ``t w_i``, with the frequencies ``w_i = base ** (-2i / d_head)`` of
the sinusoidal encodings (``core.positions.frequencies``). In column form (chapter 10)
``R_t`` is block diagonal with blocks ``[[cos, -sin], [sin, cos]]`` of angle ``t w_i``; our
vectors are rows, so ``rotate(x, [t]) == x @ rotary_matrix(t).T``. ``R_t`` is chapter 4b's
offset map ``R_k`` with ``k = t`` (``core.positions.offset_map``), so ``R_t^T R_s = R_{s-t}``:
a score depends on the offset ``s - t`` alone.

Pairing. transformers' Llama code (``rotate_half``) pairs ``(i, i + d_head/2)`` instead: the
same rotations after one fixed permutation of each head's coordinates, applied to queries and
keys alike, so every score is unchanged. GGUF files store ``W_Q`` and ``W_K`` in our order
(llama.cpp's converter permutes them; transformers' GGUF loader undoes it), so
``multihead.pretrained.smollm`` copies them as they are and permutes only transformers'
weights. Angles are computed in float64 on the CPU, then cast and moved (MPS has no float64).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import torch
from torch import Tensor

from multihead._checks import check_even, check_int, check_int_tensor, check_tensor
from multihead.core.positions import frequencies, offset_map


def check_d_head(d_head: object) -> int:
    """Return ``d_head`` if it is a positive even int: rotary positions rotate pairs.

    Shapes: none.
    """
    return check_even("d_head", d_head, "for rotary positions, which turn pairs (2i, 2i + 1)")


def continue_positions(cache: object, n: int) -> Tensor:
    """The positions of ``n`` new tokens that continue ``cache`` (a ``KVCache`` or None):
    ``past, past + 1, ..., past + n - 1`` with ``past`` the tokens it holds (0 for None).

    Shapes: -> (n,) long, on the CPU.
    """
    past = 0 if cache is None else cache.length
    return torch.arange(past, past + n)


def rotate(x: Tensor, positions: Tensor | Sequence[int], base: float = 10000.0) -> Tensor:
    """Rotate each vector of ``x`` at sequence index ``j`` by ``R_{positions[j]}``: pair
    ``(2i, 2i + 1)`` turns by the angle ``positions[j] * w_i``, ``w_i = base ** (-2i / d_head)``.
    Positions ``(batch, seq)`` give each sequence its own (left padding).

    The angles are computed in float64 on the CPU; position 0 is exactly the identity.

    Shapes: x (..., seq, d_head), e.g. (batch, heads, seq, d_head); positions (seq,) integers,
    or (batch, seq) with x (batch, heads, seq, d_head) -> like x.
    """
    check_tensor("x", x, min_ndim=2, layout="(..., seq, d_head), e.g. (batch, heads, seq, d_head)")
    d_head = check_d_head(x.shape[-1])
    if not isinstance(positions, Tensor):
        if isinstance(positions, (str, bytes)) or not isinstance(positions, Sequence):
            raise TypeError(f"positions must be a tensor or list of ints, got {positions!r}")
        ints = [check_int(f"positions[{j}]", p) for j, p in enumerate(positions)]
        positions = torch.tensor(ints, dtype=torch.long)
    check_int_tensor("positions", positions, layout="(seq,) or (batch, seq)")
    if positions.ndim not in (1, 2) or positions.shape[-1] != x.shape[-2]:
        raise ValueError(
            f"positions has shape {tuple(positions.shape)}, but x has seq={x.shape[-2]}: give "
            "one position per vector along the second to last dimension, (seq,) or (batch, seq)"
        )
    if positions.ndim == 2 and (x.ndim != 4 or positions.shape[0] != x.shape[0]):
        raise ValueError(
            f"positions (batch, seq) needs x (batch, heads, seq, d_head), got {x.shape}"
        )
    w = cpu_frequencies(d_head, float(base))  # (d_head // 2,)
    angles = positions.to("cpu", torch.float64)[..., None] * w  # (..., seq, d_head // 2)
    cos, sin = (f(angles).to(x.device, x.dtype) for f in (torch.cos, torch.sin))
    if positions.ndim == 2:  # (batch, 1, seq, d_head // 2): the same for every head
        cos, sin = cos[:, None], sin[:, None]
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., seq, d_head // 2) each
    # the column rule R_t x, pair by pair: (a, b) -> (a cos - b sin, a sin + b cos)
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)  # (..., seq, d_head), pairs interleaved again


@lru_cache(maxsize=16)
def cpu_frequencies(d_head: int, base: float) -> Tensor:
    """``frequencies(d_head, base)`` in float64 on the CPU, computed once per pair (decoding
    rotates every layer at every step); read it, never change it in place.

    Shapes: -> (d_head // 2,).
    """
    return frequencies(d_head, base, torch.float64)


def rotary_matrix(
    position: int, d_head: int, base: float = 10000.0, dtype: torch.dtype | None = None
) -> Tensor:
    """The rotation ``R_t`` of position ``t = position``, with ``rotate(x, [t]) == x @ R_t.T``
    (``R_t`` acts on column vectors; see the module docstring). It equals
    ``core.positions.offset_map(t, d_head, base)``.

    Shapes: -> (d_head, d_head), orthogonal.
    """
    check_int("position", position)
    return offset_map(position, check_d_head(d_head), base, dtype)
