"""Each checker accepts the course's reference answer and rejects a wrong one."""

import math

import pytest
import torch

from multihead import exercises as ex


def reference_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(-1) @ v


def test_check_attention():
    assert ex.check_attention(reference_attention).startswith("Correct")

    def unscaled(q, k, v, mask=None):
        return reference_attention(q * math.sqrt(q.shape[-1]), k, v, mask)

    def ignores_mask(q, k, v, mask=None):
        return reference_attention(q, k, v)

    def soft_mask(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask, -5.0)
        return scores.softmax(-1) @ v

    for wrong in (unscaled, ignores_mask, soft_mask):
        with pytest.raises(AssertionError):
            ex.check_attention(wrong)
    with pytest.raises(AssertionError, match="shape"):
        ex.check_attention(lambda q, k, v, mask=None: reference_attention(q, k, v, mask)[..., :1])
    with pytest.raises(TypeError, match="fn"):
        ex.check_attention(3)


def test_check_parameter_count():
    def right(d, h, dk, dv):
        return h * d * (2 * dk + dv) + h * dv * d + h * (2 * dk + dv) + d

    def no_biases(d, h, dk, dv):
        return h * d * (2 * dk + dv) + h * dv * d

    assert ex.check_mha_parameter_count(right).startswith("Correct")
    with pytest.raises(AssertionError, match="biases"):
        ex.check_mha_parameter_count(no_biases)


def test_check_flops():
    def right(d, h, dk, dv, n):
        return 2 * (n * d * h * (2 * dk + dv) + h * n * n * (dk + dv) + n * h * dv * d)

    def forgot_values(d, h, dk, dv, n):
        return 2 * (n * d * h * (2 * dk + dv) + h * n * n * dk + n * h * dv * d)

    assert ex.check_mha_flops(right).startswith("Correct")
    with pytest.raises(AssertionError, match="FLOPs"):
        ex.check_mha_flops(forgot_values)


def test_reference_flops_match_torch_counter():
    from torch.utils.flop_counter import FlopCounterMode

    from multihead.core.attention import MultiHeadAttention, run_with_cache

    layer = MultiHeadAttention(48, 3, 8, 12)
    with FlopCounterMode(display=False) as counter:
        run_with_cache(layer, torch.randn(1, 9, 48))
    assert counter.get_total_flops() == ex.mha_flops(48, 3, 8, 12, 9)
