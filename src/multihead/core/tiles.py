"""Exact attention computed over tiles of keys with the online softmax (Milakov and
Gimelshein 2018; Dao et al. 2022), never storing a whole score matrix: the recurrence that
FlashAttention runs inside one kernel, written out in PyTorch so each step can be checked.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from multihead._checks import check_bool_mask, check_positive_int, check_tensor


def tiled_attention(
    q: Tensor, k: Tensor, v: Tensor, *, tile: int, mask: Tensor | None = None
) -> Tensor:
    """Exact attention ``softmax(q k^T / sqrt(d)) v``, computed over tiles of ``tile`` keys
    with the online softmax: never more than a ``(..., q_len, tile)`` block of scores.

    Each query keeps a running maximum ``m`` of its scores, a running sum ``l`` of
    ``exp(score - m)`` and a running unnormalised output ``acc``; a new tile with maximum
    ``m'`` rescales both by ``exp(m - m')`` before adding its own terms, and the answer is
    ``acc / l``. ``mask`` is bool, True = blocked; a query whose every key is blocked gets
    0 (as ``key_softmax`` says).

    Shapes: q (..., q_len, d), k (..., k_len, d), v (..., k_len, d_v), mask broadcastable
    to (..., q_len, k_len) -> (..., q_len, d_v).
    """
    check_positive_int("tile", tile)
    check_tensor("q", q, min_ndim=2, layout="(..., q_len, d)")
    check_tensor("k", k, min_ndim=2, layout="(..., k_len, d)")
    check_tensor("v", v, min_ndim=2, layout="(..., k_len, d_v)")
    (q_len, d), (k_len, d_k) = q.shape[-2:], k.shape[-2:]
    if d_k != d or v.shape[-2] != k_len:
        raise ValueError(
            f"k must be (..., k_len, {d}) and v (..., k_len, d_v), got {tuple(k.shape)} and "
            f"{tuple(v.shape)}"
        )
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is not None:
        check_bool_mask("mask", mask, meaning="True = blocked")
        lead = torch.broadcast_shapes(lead, mask.shape[:-2])
        mask = mask.broadcast_to(lead + (q_len, k_len))  # a view, sliced tile by tile below
    m = q.new_full(lead + (q_len, 1), float("-inf"))  # running max of each query's scores
    l = q.new_zeros(lead + (q_len, 1))  # running sum of exp(score - m)
    acc = q.new_zeros(lead + (q_len, v.shape[-1]))  # running sum of exp(score - m) v
    for start in range(0, k_len, tile):
        keys = slice(start, start + tile)
        s = (q / math.sqrt(d)) @ k[..., keys, :].transpose(-2, -1)  # (..., q_len, tile)
        s = s if mask is None else s.masked_fill(mask[..., keys], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., q_len, 1)
        # a query that has seen no open key yet keeps m = -inf: subtract 0 there, not -inf
        shift = m_new.masked_fill(torch.isneginf(m_new), 0.0)
        p = torch.exp(s - shift)  # (..., q_len, tile); blocked keys give 0
        rescale = torch.exp(m - shift)  # old terms to the new maximum (0 while m = -inf)
        l = rescale * l + p.sum(dim=-1, keepdim=True)
        acc = rescale * acc + p @ v[..., keys, :]
        m = m_new
    return acc / l.masked_fill(l == 0, 1.0)  # a fully blocked query: acc = 0, so 0
