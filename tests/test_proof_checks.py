"""Unit tests for the constructions and bounds behind the chapters' proof checks."""

import math

import pytest
import torch

from multihead.analysis.diversity import js_logit_bound, js_ratio_bound
from multihead.analysis.lowrank import (
    head_pattern,
    null_vector_defect,
    random_column_stochastic,
    realize_mixed_logits,
)
from multihead.analysis.metrics import js_divergence


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------- null_vector_defect
@pytest.mark.parametrize("d, n", [(1, 2), (2, 5), (4, 5), (7, 8)])
def test_every_head_on_dependent_tokens_meets_the_constraint(d, n):
    g = _gen(d * 10 + n)
    X = torch.randn(d, n, generator=g, dtype=torch.float64)
    for d_k in (1, n - 1, n + 2):
        W_q = torch.randn(d_k, d, generator=g, dtype=torch.float64)
        W_k = torch.randn(d_k, d, generator=g, dtype=torch.float64)
        assert null_vector_defect(X, head_pattern(X, W_q, W_k)) < 1e-10
    # a generic target is not reachable
    assert null_vector_defect(X, random_column_stochastic(n, g)) > 1e-3


def test_defect_is_zero_for_independent_tokens():
    g = _gen(1)
    X = torch.randn(6, 4, generator=g, dtype=torch.float64)
    assert null_vector_defect(X, random_column_stochastic(4, g)).item() == 0.0


def test_two_token_example():
    X = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    uniform_second = torch.tensor([[0.8, 0.5], [0.2, 0.5]], dtype=torch.float64)
    skewed_second = torch.tensor([[0.8, 0.6], [0.2, 0.4]], dtype=torch.float64)
    assert null_vector_defect(X, uniform_second) < 1e-12
    assert null_vector_defect(X, skewed_second) > 0.1


def test_null_vector_defect_bad_input():
    X = torch.zeros(1, 2, dtype=torch.float64)
    with pytest.raises(TypeError, match="X"):
        null_vector_defect([[1.0, 0.0]], torch.full((2, 2), 0.5, dtype=torch.float64))
    with pytest.raises(ValueError, match="P"):
        null_vector_defect(X, torch.full((3, 3), 1 / 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="rtol"):
        null_vector_defect(X, torch.full((2, 2), 0.5, dtype=torch.float64), rtol=2.0)


# ---------------------------------------------------------------------- realize_mixed_logits
def _mixed_pattern(X, W_Q, W_K, weights):
    d_k = W_Q.shape[-1]
    logits = torch.einsum("i,nd,ide,mf,ife->nm", weights, X, W_Q, X, W_K) / math.sqrt(d_k)
    return logits.softmax(dim=-1)


@pytest.mark.parametrize("n, h_k, d_k, r", [(6, 2, 3, 5), (8, 4, 1, 3), (5, 3, 2, 4), (4, 1, 3, 3)])
def test_mixed_logits_reach_every_pattern_within_the_bound(n, h_k, d_k, r):
    g = _gen(n + h_k + d_k)
    X = torch.randn(n, n + 2, generator=g, dtype=torch.float64)
    # a target whose centred log has rank r <= h_k d_k
    F = torch.randn(n, r, generator=g, dtype=torch.float64)
    G = F @ torch.randn(r, n, generator=g, dtype=torch.float64)
    W = G.softmax(dim=-1)
    weights = torch.tensor([1.0, -0.5, 2.0, 0.3][:h_k], dtype=torch.float64)
    W_Q, W_K = realize_mixed_logits(X, W, d_k, weights)
    assert W_Q.shape == W_K.shape == (h_k, n + 2, d_k)
    assert (_mixed_pattern(X, W_Q, W_K, weights) - W).abs().max() < 1e-9


def test_realize_mixed_logits_bad_input():
    g = _gen(3)
    X = torch.randn(5, 6, generator=g, dtype=torch.float64)
    W = torch.randn(5, 5, generator=g, dtype=torch.float64).softmax(dim=-1)
    with pytest.raises(ValueError, match="h_k \\* d_k"):
        realize_mixed_logits(X, W, 1, torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="weights"):
        realize_mixed_logits(X, W, 2, torch.tensor([1.0, 0.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="full row rank"):
        realize_mixed_logits(X[:, :3], W, 4, torch.ones(1, dtype=torch.float64))
    with pytest.raises(TypeError, match="d_k"):
        realize_mixed_logits(X, W, 2.0, torch.ones(2, dtype=torch.float64))


# ---------------------------------------------------------------------- js_ratio_bound
def test_ratio_bound_holds_and_is_second_order():
    g = _gen(4)
    for scale in (0.01, 0.1, 1.0, 5.0):
        s = scale * torch.randn(2000, 7, generator=g, dtype=torch.float64)
        t = scale * torch.randn(2000, 7, generator=g, dtype=torch.float64)
        r = (s - t).amax(-1) - (s - t).amin(-1)
        js = js_divergence(s.softmax(-1), t.softmax(-1))
        assert (js <= js_ratio_bound(r) * (1 + 1e-9) + 1e-15).all()
        assert (js_ratio_bound(r) <= r**2 * torch.exp(r) / 4 * (1 + 1e-12)).all()
    small = torch.tensor([1e-3, 1e-2], dtype=torch.float64)
    quarter = torch.full((2,), 0.25, dtype=torch.float64)
    assert torch.allclose(js_ratio_bound(small) / small**2, quarter, rtol=1e-2)
    assert (js_ratio_bound(small) < js_logit_bound(small)).all()


def test_ratio_bound_bad_input():
    with pytest.raises(TypeError, match="gap"):
        js_ratio_bound("1")
    with pytest.raises(ValueError, match="gap"):
        js_ratio_bound(-1.0)
