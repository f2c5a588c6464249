"""Sinusoidal position encodings and the offset maps of the primer chapter."""

import math

import pytest
import torch

from multihead.core.positions import frequencies, offset_map, sinusoidal_positions


def test_encodings_follow_the_formula():
    pe = sinusoidal_positions(20, 8, dtype=torch.float64)
    assert pe.shape == (20, 8) and pe.dtype == torch.float64
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0] * 4, dtype=torch.float64))
    t, i = 7, 2  # column 2i holds sin(t w_i) with w_i = 10000 ** (-2i / d)
    w = 10000.0 ** (-2 * i / 8)
    assert pe[t, 2 * i].item() == pytest.approx(math.sin(t * w), abs=1e-12)
    assert pe[t, 2 * i + 1].item() == pytest.approx(math.cos(t * w), abs=1e-12)
    want = 10000.0 ** -(torch.arange(4, dtype=torch.float64) / 4)
    assert torch.allclose(frequencies(8, dtype=torch.float64), want)
    assert sinusoidal_positions(3, 4).dtype == torch.get_default_dtype()


@pytest.mark.parametrize("k", [0, 1, 3, -5, 17])
def test_offset_map_moves_every_position_and_is_orthogonal(k):
    n, d = 40, 16
    pe = sinusoidal_positions(n, d, dtype=torch.float64)
    R = offset_map(k, d, dtype=torch.float64)
    lo, hi = max(0, -k), n - max(0, k)
    assert (pe[lo:hi] @ R - pe[lo + k : hi + k]).abs().max() < 1e-12
    assert (R @ R.T - torch.eye(d, dtype=torch.float64)).abs().max() < 1e-12
    assert torch.allclose(offset_map(-k, d, dtype=torch.float64), R.T, atol=1e-12)


def test_a_wrong_offset_map_fails_the_check():
    pe = sinusoidal_positions(30, 8, dtype=torch.float64)
    R = offset_map(2, 8, dtype=torch.float64)
    assert (pe[:27] @ R - pe[3:]).abs().max() > 0.1  # R_2 does not move by 3


def test_bad_input():
    with pytest.raises(ValueError, match="even"):
        sinusoidal_positions(4, 5)
    with pytest.raises(ValueError, match="n=0"):
        sinusoidal_positions(0, 4)
    with pytest.raises(TypeError, match="d_model"):
        sinusoidal_positions(4, 4.0)
    with pytest.raises(ValueError, match="base"):
        frequencies(4, base=1.0)
    with pytest.raises(TypeError, match="k"):
        offset_map(1.5, 4)
