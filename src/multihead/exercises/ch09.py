"""Checkers for the exercises of chapter 9: the heads of a real pretrained Transformer."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from multihead.analysis.metrics import classical_mds, js_divergence
from multihead.exercises._common import (
    checker,
    expect,
    ok,
    random_patterns,
    refuse_reference,
    require_callable,
)
from multihead.pretrained.load import word_level


@checker
def check_js_divergence(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """Check ``fn(p, q) -> (...)``: the Jensen-Shannon divergence in nats of distributions on
    the last dimension, with 0 log 0 = 0 (rows with zeros must not give nan)."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, js_divergence)
    one_hot = torch.eye(4, dtype=torch.float64)
    cases = [(one_hot[0], one_hot[1]), (one_hot, one_hot.roll(1, 0))]
    cases += [(random_patterns(s).double(), random_patterns(s + 10).double()) for s in (0, 1)]
    for p, q in cases:
        got = fn(p, q)
        expect(isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}")
        expect(
            got.shape == p.shape[:-1],
            f"return one value per distribution, shape {tuple(p.shape[:-1])}; got "
            f"{tuple(got.shape)}",
        )
        if torch.isnan(got).any():
            raise AssertionError("got nan: use 0 log 0 = 0 (torch.special.xlogy does this)")
        want = js_divergence(p, q)
        if not torch.allclose(got.double(), want, atol=1e-6):
            if torch.allclose(got.double(), want.sqrt(), atol=1e-6):
                raise AssertionError("that is the JS distance; return the divergence (no sqrt)")
            raise AssertionError(
                f"expected {want.flatten()[:4].tolist()}..., got {got.flatten()[:4].tolist()}...; "
                "JS(p, q) = KL(p || m) / 2 + KL(q || m) / 2 with m = (p + q) / 2, in nats"
            )
    expect(
        abs(float(fn(one_hot[0], one_hot[2])) - math.log(2)) < 1e-6,
        "the function gives a wrong value on a simple input",
    )
    return ok("your JS divergence is log 2 for disjoint supports and matches the reference.")


@checker
def check_word_level(fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> str:
    """Check ``fn(token_attention, word_of_token, n_words) -> (..., words, words)``:
    attention *to* a word is the sum over its tokens, attention *from* a word the mean."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, word_level)
    cases = [
        (random_patterns(0, batch=1, heads=2, n=5)[0], torch.tensor([0, 1, 1, 2, 3]), 4),
        (random_patterns(1, batch=2, heads=3, n=6), torch.tensor([0, 1, 1, 1, 2, 2]), 3),
    ]
    for p, wot, n_words in cases:
        got = fn(p, wot, n_words)
        want = word_level(p, wot, n_words)
        expect(
            isinstance(got, torch.Tensor) and got.shape == want.shape,
            f"return shape {tuple(want.shape)} (..., words, words)",
        )
        if not torch.allclose(got, want, atol=1e-5):
            rows = got.sum(-1)
            if not torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
                raise AssertionError(
                    "rows must still sum to 1: sum over the key tokens of a word, but average "
                    "(not sum) over its query tokens"
                )
            raise AssertionError("keys: sum the columns of a word's tokens; queries: average rows")
    return ok("word-level rows sum to 1 and match multihead.pretrained.load.word_level.")


@checker
def check_classical_mds(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check ``fn(distances, dim) -> (n, dim)``: classical MDS must reproduce the distances
    of points that really lie in ``dim`` dimensions (up to rotation and reflection)."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, classical_mds)
    gen = torch.Generator().manual_seed(9)
    for n, dim in ((6, 2), (9, 3)):
        pts = torch.randn(n, dim, generator=gen, dtype=torch.float64)
        d = torch.cdist(pts, pts)
        got = fn(d, dim)
        expect(
            isinstance(got, torch.Tensor) and got.shape == (n, dim),
            f"return the coordinates, shape ({n}, {dim}); got "
            f"{getattr(got, 'shape', type(got).__name__)}",
        )
        err = (torch.cdist(got.double(), got.double()) - d).abs().max().item()
        if err > 1e-6:
            raise AssertionError(
                f"the distances of your points are off by up to {err:.3g}: double-centre the "
                "*squared* distances, B = -J D**2 J / 2, and scale the top eigenvectors by the "
                "square roots of their eigenvalues"
            )
    return ok("your MDS reproduces Euclidean distances exactly.")
