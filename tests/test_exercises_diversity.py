"""Each chapter-6 checker accepts the reference answer and rejects a wrong one."""

import math

import pytest
import torch

from multihead.analysis.diversity import (
    distinctness,
    js_logit_bound,
    logit_gap,
    within_layer_spread,
)
from multihead.exercises import check_distinctness, check_layer_spread, check_logit_gap_bound


def test_check_layer_spread():
    assert check_layer_spread(lambda d: within_layer_spread(d)["mean"]).startswith("Correct")
    with pytest.raises(AssertionError, match="diagonal"):
        check_layer_spread(lambda d: d.mean(dim=(1, 2)))
    with pytest.raises(AssertionError, match="shape"):
        check_layer_spread(lambda d: d.mean())


def test_check_distinctness():
    assert check_distinctness(distinctness).startswith("Correct")
    with pytest.raises(AssertionError, match="heads - 1"):
        check_distinctness(lambda d: d.mean(dim=2))
    with pytest.raises(AssertionError, match="torch.Tensor"):
        check_distinctness(lambda d: d.tolist())


def test_check_logit_gap_bound():
    def reference(a, b):
        return js_logit_bound(logit_gap(a, b))

    assert check_logit_gap_bound(reference).startswith("Correct")
    with pytest.raises(AssertionError, match="weaker bound"):
        check_logit_gap_bound(lambda a, b: logit_gap(a, b) / 2)
    with pytest.raises(AssertionError, match="difference"):
        check_logit_gap_bound(lambda a, b: js_logit_bound(a.amax(-1) - a.amin(-1)))
    with pytest.raises(AssertionError):
        check_logit_gap_bound(lambda a, b: torch.full(a.shape[:-1], math.log(2)))


def test_checkers_reject_non_callables():
    for checker in (check_layer_spread, check_distinctness, check_logit_gap_bound):
        with pytest.raises(TypeError, match="function"):
            checker(3)
