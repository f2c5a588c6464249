"""Checkers for the exercises of chapter 4: talking heads."""

from __future__ import annotations

from collections.abc import Callable

import torch

from multihead.core import talking_heads
from multihead.core.talking_heads import TalkingHeadsAttention
from multihead.exercises._common import checker, ok, refuse_reference, require_callable


@checker
def check_post_mix(fn: Callable) -> str:
    """Check ``fn(pattern, P_w) -> mixed``: ``mixed[:, m] = sum_j P_w[j, m] pattern[:, j]``.

    Shapes: pattern (batch, h, query, key), P_w (h, h_v) -> (batch, h_v, query, key).
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, talking_heads)  # TalkingHeadsAttention.mix is the answer
    gen = torch.Generator().manual_seed(41)
    for h, h_v in ((3, 3), (4, 2), (2, 5)):
        pattern = torch.randn(2, h, 5, 6, generator=gen, dtype=torch.float64).softmax(-1)
        P_w = torch.randn(h, h_v, generator=gen, dtype=torch.float64)
        want = TalkingHeadsAttention.mix(pattern, P_w)
        got = fn(pattern, P_w)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = getattr(got, "shape", None)
            raise AssertionError(f"expected shape {tuple(want.shape)}, got {shape}")
        if not torch.allclose(got.double(), want, atol=1e-8):
            raise AssertionError(
                "wrong values: output head m is a weighted sum over input heads j with weights "
                "P_w[j, m] (check which index of P_w you sum over)"
            )
    return ok("post-softmax mixing sums the heads' patterns with weights P_w[j, m].")


@checker
def check_invisible_mixing(fn: Callable) -> str:
    """Check ``fn(h) -> (P_l, P_w)``: mixing matrices, not the identity, that leave a
    talking-heads layer with ``h`` key, softmax and value heads computing the same output
    as with identity mixing.

    Shapes: -> P_l (h, h), P_w (h, h).
    """
    require_callable("fn", fn)
    for h in (2, 3, 5):
        P_l, P_w = fn(h)
        eye = torch.eye(h)
        if P_l.shape != (h, h) or P_w.shape != (h, h):
            raise AssertionError(f"for h={h} both matrices must be ({h}, {h})")
        if torch.allclose(P_l.float(), eye) and torch.allclose(P_w.float(), eye):
            raise AssertionError("that is the identity: find another pair")
        torch.manual_seed(h)
        layer = TalkingHeadsAttention(4 * h, h).double()
        x = torch.randn(2, 6, 4 * h, dtype=torch.float64)
        want = layer(x)
        with torch.no_grad():
            layer.P_l.copy_(P_l)
            layer.P_w.copy_(P_w)
        if not torch.allclose(layer(x), want, atol=1e-8):
            raise AssertionError(
                "the output changed. Hint: relabel the softmax heads with a permutation before "
                "the softmax, and undo the relabelling after it"
            )
    return ok("a permutation and its inverse relabel the heads and change nothing.")


@checker
def check_talking_heads_flops(fn: Callable) -> str:
    """Check ``fn(n_heads, n) -> int``: the extra FLOPs (2 per multiply-add) of both
    mixing steps of one talking-heads layer, with ``h_k = h = h_v = n_heads``, over one
    sequence of ``n`` tokens.

    Shapes: none.
    """
    require_callable("fn", fn)
    for h, n in ((12, 512), (8, 64), (32, 16), (1, 10)):
        want = 2 * 2 * n * n * h * h
        got = fn(h, n)
        if got != want:
            raise AssertionError(
                f"for n_heads={h}, n={n} you gave {got}, expected {want}: each mixing step "
                "computes h outputs per (query, key) pair, each a sum over h inputs"
            )
    return ok("both mixing steps together cost 4 n^2 h^2 FLOPs per sequence.")
