"""Checkers for the exercises of chapter 6: head diversity across layers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from multihead.analysis import diversity
from multihead.analysis.diversity import (
    distinctness,
    js_logit_bound,
    logit_gap,
    within_layer_spread,
)
from multihead.analysis.metrics import group_spread
from multihead.exercises._common import checker, expect, ok, refuse_reference, require_callable


def _random_distances(seed: int, layers: int = 3, heads: int = 5) -> torch.Tensor:
    """Symmetric (layers, heads, heads) distances with a zero diagonal."""
    gen = torch.Generator().manual_seed(seed)
    d = torch.rand(layers, heads, heads, generator=gen, dtype=torch.float64)
    d = (d + d.transpose(1, 2)) / 2
    return d * (1 - torch.eye(heads, dtype=torch.float64))


def _compare(got: object, want: torch.Tensor, what: str) -> torch.Tensor:
    expect(isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}")
    expect(
        got.shape == want.shape, f"{what}: return shape {tuple(want.shape)}, got {tuple(got.shape)}"
    )
    return got.to(want.dtype)


@checker
def check_layer_spread(fn: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Check ``fn(distances) -> (layers,)``: the mean distance over the pairs of *different*
    heads of each layer, for ``distances`` shaped ``(layers, heads, heads)``."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, diversity, group_spread)
    for seed, heads in ((0, 5), (1, 2), (2, 8)):
        d = _random_distances(seed, heads=heads)
        want = within_layer_spread(d)["mean"]
        got = _compare(fn(d.clone()), want, "one spread per layer")
        if not torch.allclose(got, want, atol=1e-8):
            with_diagonal = d.mean(dim=(1, 2))
            if torch.allclose(got, with_diagonal, atol=1e-8):
                raise AssertionError(
                    "you averaged the zero diagonal too: divide the sum by heads * (heads - 1), "
                    "the number of ordered pairs of different heads"
                )
            raise AssertionError(f"expected {want.tolist()}, got {got.tolist()}")
    return ok("your spread averages exactly the pairs of different heads in each layer.")


@checker
def check_distinctness(fn: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Check ``fn(distances) -> (layers, heads)``: each head's mean distance to the *other*
    heads of its layer."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, diversity)
    for seed, heads in ((3, 4), (4, 6)):
        d = _random_distances(seed, heads=heads)
        want = distinctness(d)
        got = _compare(fn(d.clone()), want, "one value per head")
        if not torch.allclose(got, want, atol=1e-8):
            if torch.allclose(got, d.mean(dim=2), atol=1e-8):
                raise AssertionError(
                    "you divided by heads, counting the head's zero distance to itself; "
                    "divide by heads - 1"
                )
            if torch.allclose(got, d.mean(dim=1).transpose(0, 1), atol=1e-8):
                raise AssertionError("mean over the last dimension, and keep (layers, heads)")
            raise AssertionError(f"expected {want[0].tolist()} in layer 0, got {got[0].tolist()}")
    return ok("your distinctness is the mean distance to the other heads of the layer.")


@checker
def check_logit_gap_bound(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """Check ``fn(scores_a, scores_b) -> (...)``: the bound ``log 2 - log(1 + exp(-r))`` on
    the JS divergence of the two softmax rows, where ``r`` is the range over the keys of the
    *difference* of the logits."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, diversity)
    gen = torch.Generator().manual_seed(5)
    a = 3 * torch.randn(4, 6, 7, generator=gen, dtype=torch.float64)
    b = a + torch.randn(4, 6, 7, generator=gen, dtype=torch.float64)
    want = js_logit_bound(logit_gap(a, b))
    got = _compare(fn(a.clone(), b.clone()), want, "one bound per row")
    if not torch.allclose(got, want, atol=1e-8):
        gap = logit_gap(a, b)
        if torch.allclose(got, gap / 2, atol=1e-8):
            raise AssertionError(
                "that is the weaker bound r / 2; return log 2 - log(1 + exp(-r)) itself"
            )
        range_a = a.amax(-1) - a.amin(-1)
        if torch.allclose(got, js_logit_bound(range_a), atol=1e-8):
            raise AssertionError(
                "r is the range of the difference a - b over the keys, not the range of a"
            )
        raise AssertionError("use r = max(a - b) - min(a - b) and log 2 - log1p(exp(-r))")
    shifted = fn(a, a + 2.0)  # a constant shift changes no softmax: the bound must be 0
    expect(
        torch.allclose(shifted.to(torch.float64), torch.zeros_like(want), atol=1e-8),
        "two rows whose logits differ by a constant give the same softmax: the bound is 0",
    )
    return ok("your bound matches log 2 - log(1 + exp(-r)) and vanishes for shifted logits.")
