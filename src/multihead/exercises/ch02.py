"""Checkers for the exercises of chapter 2: symmetry, or why heads differ at all."""

from __future__ import annotations

from collections.abc import Callable

import torch

from multihead.core.attention import MultiHeadAttention
from multihead.exercises._common import checker, ok, require_callable

_PER_HEAD = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O")


@checker
def check_swap_heads(fn: Callable) -> str:
    """Check ``fn(attn, i, j)``: swap heads ``i`` and ``j`` of ``attn`` in place, so that the
    layer computes exactly the same output with its parameters permuted.

    Shapes: none.
    """
    require_callable("fn", fn)
    for seed, (i, j) in enumerate(((0, 1), (1, 3), (2, 0))):
        torch.manual_seed(seed)
        attn = MultiHeadAttention(16, 4).double()
        with torch.no_grad():
            for b in (attn.b_Q, attn.b_K, attn.b_V):
                b.normal_()
        before = {n: getattr(attn, n).detach().clone() for n in _PER_HEAD}
        x = torch.randn(2, 5, 16, dtype=torch.float64)
        want = attn(x)
        fn(attn, i, j)
        for n in _PER_HEAD:
            after = getattr(attn, n)
            if not (torch.equal(after[i], before[n][j]) and torch.equal(after[j], before[n][i])):
                raise AssertionError(
                    f"{n} of heads {i} and {j} is not swapped: every per-head parameter moves, "
                    "including the head's block of W_O"
                )
        if not torch.allclose(attn(x), want, atol=1e-10):
            raise AssertionError("the output changed; swap the same heads in every tensor")
    return ok("swapping two heads everywhere leaves the layer's function unchanged.")


@checker
def check_value_gradient(fn: Callable) -> str:
    """Check ``fn(X, A, G, W_O_i) -> dL/dW_V^(i)`` for one head of a layer without biases,
    where ``out = sum_h A_h X W_V^(h) W_O^(h)`` and ``G = dL/d out``.

    Shapes: X (n, d_model), A (n, n), G (n, d_model), W_O_i (d_value, d_model)
    -> (d_model, d_value).
    """
    require_callable("fn", fn)
    gen = torch.Generator().manual_seed(7)
    for n, d, d_v in ((5, 8, 3), (7, 6, 6)):
        X = torch.randn(n, d, generator=gen, dtype=torch.float64)
        A = torch.randn(n, n, generator=gen, dtype=torch.float64).softmax(-1)
        G = torch.randn(n, d, generator=gen, dtype=torch.float64)
        W_O = torch.randn(d_v, d, generator=gen, dtype=torch.float64)
        W_V = torch.zeros(d, d_v, dtype=torch.float64, requires_grad=True)
        ((A @ X @ W_V @ W_O) * G).sum().backward()  # dL = <G, d out>
        got = fn(X, A, G, W_O)
        if not isinstance(got, torch.Tensor) or got.shape != W_V.shape:
            raise AssertionError(f"expected a tensor of shape {tuple(W_V.shape)}")
        if not torch.allclose(got.double(), W_V.grad, atol=1e-9):
            raise AssertionError(
                "wrong values: write d out = A X (dW_V) W_O and use <G, A X dW W_O> = "
                "<X^T A^T G W_O^T, dW>"
            )
    return ok("dL/dW_V = X^T A^T G W_O^T: the head's output block enters its gradient.")
