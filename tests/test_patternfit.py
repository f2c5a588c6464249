"""Tests of multihead.analysis.patternfit: distances and the generic pattern fitter."""

import math

import pytest
import torch

from multihead.analysis.patternfit import (
    check_column_stochastic,
    column_kl,
    fit_pattern,
    total_variation,
)


def softmax_cols(L: torch.Tensor) -> torch.Tensor:
    return L.softmax(dim=-2)


def test_distances_on_hand_built_case() -> None:
    target = torch.tensor([[0.5, 1.0], [0.5, 0.0]], dtype=torch.float64)
    P = torch.tensor([[0.25, 0.5], [0.75, 0.5]], dtype=torch.float64)
    # column 0: 0.5 log 2 + 0.5 log(2/3); column 1: 1 * log 2 (0 log 0 = 0)
    want_kl = (0.5 * math.log(2.0) + 0.5 * math.log(2 / 3) + math.log(2.0)) / 2
    assert abs(column_kl(target, P).item() - want_kl) < 1e-12
    assert abs(total_variation(target, P).item() - (0.25 + 0.5) / 2) < 1e-12


def test_fit_pattern_free_logits_is_exact() -> None:
    g = torch.Generator().manual_seed(0)
    target = softmax_cols(torch.randn(3, 5, 5, generator=g, dtype=torch.float64))
    init = [torch.zeros(3, 5, 5, dtype=torch.float64)]
    res = fit_pattern(target, lambda p: softmax_cols(p[0]), init, steps=200)
    assert res.kl.shape == (3,) and res.tv.shape == (3,) and res.P.shape == (3, 5, 5)
    assert res.kl.max() < 1e-8 and res.steps >= 1
    assert not res.params[0].requires_grad


def test_bad_input() -> None:
    P = torch.full((3, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="square"):
        check_column_stochastic("P", P[:2])
    with pytest.raises(TypeError, match="torch.Tensor"):
        check_column_stochastic("P", [[1.0]])
    with pytest.raises(ValueError, match="steps"):
        fit_pattern(P, lambda p: p[0], [P], steps=0)
