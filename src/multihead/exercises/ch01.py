"""Checkers for the exercises of chapter 1: multi-head attention from scratch."""

from __future__ import annotations

from collections.abc import Callable

import torch

from multihead.analysis.cost import mha_flops
from multihead.core.attention import MultiHeadAttention, attention_pattern
from multihead.core.model import count_parameters
from multihead.exercises._common import ok, require_callable


def check_attention(fn: Callable) -> str:
    """Check ``fn(q, k, v, mask=None)``: scaled dot-product attention.

    ``mask`` is boolean, True where a query may not look. Any leading batch dimensions.

    Shapes: q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v).
    """
    require_callable("fn", fn)
    gen = torch.Generator().manual_seed(1234)
    for shape_q, shape_k, d_v in (((5, 4), (7, 4), 3), ((2, 3, 6, 8), (2, 3, 6, 8), 5)):
        q = torch.randn(*shape_q, generator=gen, dtype=torch.float64)
        k = torch.randn(*shape_k, generator=gen, dtype=torch.float64)
        v = torch.randn(*shape_k[:-1], d_v, generator=gen, dtype=torch.float64)
        n_q, n_k = shape_q[-2], shape_k[-2]
        causal = torch.ones(n_q, n_k, dtype=torch.bool).triu(1) if n_q == n_k else None
        for mask in (None,) if causal is None else (None, causal):
            want = attention_pattern(q, k, mask) @ v
            got = fn(q, k, v) if mask is None else fn(q, k, v, mask=mask)
            if not isinstance(got, torch.Tensor):
                raise AssertionError(f"return a tensor, got {type(got).__name__}")
            if got.shape != want.shape:
                raise AssertionError(
                    f"output shape {tuple(got.shape)}, expected {tuple(want.shape)}"
                )
            err = (got.double() - want).abs().max().item()
            if err > 1e-6:
                hint = (
                    "masked keys must get exactly zero weight (fill their scores with -inf)"
                    if mask is not None
                    else "did you divide the scores by sqrt(d_k) and softmax over the keys?"
                )
                raise AssertionError(f"max difference {err:.2e} from the reference; {hint}")
    return ok("your attention matches the reference, with and without a mask.")


def check_mha_parameter_count(fn: Callable) -> str:
    """Check ``fn(d_model, n_heads, d_key, d_value) -> int``: parameters of one MHA layer,
    biases included (as ``MultiHeadAttention`` with ``bias=True``).

    Shapes: none.
    """
    require_callable("fn", fn)
    for d_model, h, d_k, d_v in (
        (64, 4, 16, 16),
        (128, 8, 32, 8),
        (96, 3, 7, 11),
        (512, 8, 64, 64),
    ):
        want = count_parameters(MultiHeadAttention(d_model, h, d_k, d_v))
        got = fn(d_model, h, d_k, d_v)
        if got != want:
            raise AssertionError(
                f"for d_model={d_model}, n_heads={h}, d_key={d_k}, d_value={d_v} you gave "
                f"{got}, expected {want}. Count W_Q, W_K, W_V, W_O and the four biases."
            )
    return ok("your formula counts every weight and bias.")


def check_mha_flops(fn: Callable) -> str:
    """Check ``fn(d_model, n_heads, d_key, d_value, n) -> int``: matmul FLOPs of one
    self-attention forward pass over ``n`` tokens, counting 2 FLOPs per multiply-add.

    Shapes: none.
    """
    require_callable("fn", fn)
    cases = ((64, 4, 16, 16, 10), (128, 8, 32, 8, 50), (96, 3, 7, 11, 33), (512, 8, 64, 64, 512))
    for d_model, h, d_k, d_v, n in cases:
        want = mha_flops(d_model, h, d_k, d_v, n)
        got = fn(d_model, h, d_k, d_v, n)
        if got != want:
            terms = "the Q/K/V projections, Q K^T, the weighted sum of values and W_O"
            raise AssertionError(
                f"for d_model={d_model}, n_heads={h}, d_key={d_k}, d_value={d_v}, n={n} you "
                f"gave {got}, expected {want}. Count {terms}, 2 FLOPs per multiply-add."
            )
    return ok("your FLOP count matches, and grows like n^2 only through Q K^T and P V.")
