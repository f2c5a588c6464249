"""Each chapter-6 checker accepts the reference answer and rejects a wrong one."""

import math

import exercise_answers as answers
import pytest
import torch

from multihead.exercises import check_distinctness, check_layer_spread, check_logit_gap_bound


def test_check_layer_spread():
    assert check_layer_spread(answers.my_spread).startswith("Correct")
    with pytest.raises(AssertionError, match="diagonal"):
        check_layer_spread(lambda d: d.mean(dim=(1, 2)))
    with pytest.raises(AssertionError, match="shape"):
        check_layer_spread(lambda d: d.mean())


def test_check_distinctness():
    assert check_distinctness(answers.my_distinctness).startswith("Correct")
    with pytest.raises(AssertionError, match="heads - 1"):
        check_distinctness(lambda d: d.mean(dim=2))
    with pytest.raises(AssertionError, match="torch.Tensor"):
        check_distinctness(lambda d: d.tolist())


def test_check_logit_gap_bound():
    def half_range(a, b):  # the weaker bound r / 2
        return ((a - b).amax(-1) - (a - b).amin(-1)) / 2

    def range_of_a(a, b):  # the range of a alone, not of the difference
        return math.log(2) - torch.log1p(torch.exp(-(a.amax(-1) - a.amin(-1))))

    assert check_logit_gap_bound(answers.my_bound).startswith("Correct")
    with pytest.raises(AssertionError, match="weaker bound"):
        check_logit_gap_bound(half_range)
    with pytest.raises(AssertionError, match="difference"):
        check_logit_gap_bound(range_of_a)
    with pytest.raises(AssertionError):
        check_logit_gap_bound(lambda a, b: torch.full(a.shape[:-1], math.log(2)))


def test_checkers_reject_non_callables():
    for checker in (check_layer_spread, check_distinctness, check_logit_gap_bound):
        with pytest.raises(TypeError, match="function"):
            checker(3)
