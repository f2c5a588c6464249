import math

import exercise_answers as answers
import pytest
import torch

from multihead.exercises import check_expected_l0, check_hard_concrete, check_taylor_importance


def test_hard_concrete_checker():
    assert check_hard_concrete(answers.sample).startswith("Correct")

    def no_stretch(log_alpha, u, beta, gamma, zeta):
        return torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / beta)

    with pytest.raises(AssertionError, match="stretch"):
        check_hard_concrete(no_stretch)

    def no_clip(log_alpha, u, beta, gamma, zeta):
        s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / beta)
        return gamma + (zeta - gamma) * s

    with pytest.raises(AssertionError, match="clip"):
        check_hard_concrete(no_clip)


def test_expected_l0_checker():
    def reference(log_alpha, beta, gamma, zeta):
        return torch.sigmoid(log_alpha - beta * math.log(-gamma / zeta)).sum()

    assert check_expected_l0(reference).startswith("Correct")
    with pytest.raises(AssertionError, match="stretch"):
        check_expected_l0(lambda la, b, g, z: torch.sigmoid(la).sum())
    with pytest.raises(AssertionError, match="expected"):
        check_expected_l0(lambda la, b, g, z: torch.sigmoid(la - math.log(-g / z)).sum() + 1)


def test_taylor_importance_checker():
    def reference(z, g):
        return (z * g).sum(dim=(2, 3)).abs().mean(0)

    assert check_taylor_importance(reference).startswith("Correct")
    with pytest.raises(AssertionError, match="after averaging"):
        check_taylor_importance(lambda z, g: (z * g).sum(dim=(2, 3)).mean(0).abs())
    with pytest.raises(AssertionError, match="first"):
        check_taylor_importance(lambda z, g: (z * g).abs().sum(dim=(2, 3)).mean(0))
    with pytest.raises(TypeError):
        check_taylor_importance("not a function")
