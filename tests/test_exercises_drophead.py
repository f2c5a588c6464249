"""The chapter-8 checkers accept the reference answers and reject wrong ones."""

import math

import pytest

from multihead import exercises as ex


def rescale(keep):
    return keep.float() * keep.shape[1] / keep.sum(dim=1, keepdim=True)


def gate_variance(h, p):
    e = sum(math.comb(h, k) * (1 - p) ** k * p ** (h - k) / max(k, 1) for k in range(h + 1))
    return h * e - 1


def v_rate(step, total, p, turn):
    if step < turn:
        return p * (1 - step / turn)
    return p * (step - turn) / (total - 1 - turn)


def test_check_drophead_rescale():
    assert ex.check_drophead_rescale(rescale).startswith("Correct")
    with pytest.raises(AssertionError, match="h / K, not 1"):
        ex.check_drophead_rescale(lambda keep: keep.float())
    with pytest.raises(AssertionError, match="own row"):
        ex.check_drophead_rescale(lambda keep: keep.float() * keep.shape[1] / keep.sum())
    with pytest.raises(AssertionError, match="shape"):
        ex.check_drophead_rescale(lambda keep: keep.float().sum(1))
    with pytest.raises(TypeError, match="fn"):
        ex.check_drophead_rescale(3)


def test_check_gate_variance():
    assert ex.check_gate_variance(gate_variance).startswith("Correct")
    with pytest.raises(AssertionError, match="dropout rule"):
        ex.check_gate_variance(lambda h, p: p / (1 - p))


def test_check_v_schedule():
    assert ex.check_v_schedule(v_rate).startswith("Correct")
    with pytest.raises(AssertionError, match="total - 1"):
        ex.check_v_schedule(lambda s, t, p, turn: v_rate(s, t + 1, p, turn))
    with pytest.raises(AssertionError):
        ex.check_v_schedule(lambda s, t, p, turn: p)
