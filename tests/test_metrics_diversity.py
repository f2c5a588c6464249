"""Tests of the head-distance functions added to ``metrics`` (JS divergence, distance
matrices, classical MDS, within-group spread)."""

import math

import pytest
import torch

from multihead.analysis.diversity import pairwise_head_distances
from multihead.analysis.metrics import (
    classical_mds,
    group_spread,
    js_divergence,
)


def test_js_divergence_known_values():
    p = torch.tensor([1.0, 0.0])
    q = torch.tensor([0.0, 1.0])
    assert js_divergence(p, q).item() == pytest.approx(math.log(2))  # disjoint supports
    assert js_divergence(p, p).item() == pytest.approx(0.0)
    a = torch.tensor([0.5, 0.5])
    # m = (0.75, 0.25): KL(p||m) = log(4/3), KL(a||m) = 0.5 log(2/3) + 0.5 log 2.
    expected = 0.5 * math.log(4 / 3) + 0.5 * (0.5 * math.log(2 / 3) + 0.5 * math.log(2))
    assert js_divergence(p, a).item() == pytest.approx(expected)
    assert js_divergence(a, p).item() == pytest.approx(expected)  # symmetric


def test_js_divergence_bad_input():
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        js_divergence(torch.ones(2) / 2, [0.5, 0.5])
    with pytest.raises(ValueError, match="outcomes"):
        js_divergence(torch.ones(2) / 2, torch.ones(3) / 3)


def test_head_distance_matrix_hand_built():
    eye = torch.eye(3)
    shift = eye.roll(1, dims=-1)
    p = torch.stack([eye, eye, shift])[None]  # (1, 3 heads, 3, 3)
    d = pairwise_head_distances(p)
    assert d.shape == (3, 3)
    assert d[0, 1].item() == pytest.approx(0.0)
    assert d[0, 2].item() == pytest.approx(math.sqrt(math.log(2)))
    assert torch.allclose(d, d.T)
    with pytest.raises(ValueError, match="batch, heads, query, key"):
        pairwise_head_distances(eye)


def test_classical_mds_recovers_a_configuration():
    pts = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0], [3.0, 4.0]], dtype=torch.float64)
    d = torch.cdist(pts, pts)
    x = classical_mds(d, 2)
    assert x.shape == (4, 2)
    assert torch.allclose(torch.cdist(x, x), d, atol=1e-8)
    with pytest.raises(ValueError, match="dim"):
        classical_mds(d, 5)
    with pytest.raises(ValueError, match="square"):
        classical_mds(d[:3], 2)


def test_group_spread():
    d = torch.ones(4, 4) - torch.eye(4)
    d[2, 3] = d[3, 2] = 3.0
    assert group_spread(d, 2).tolist() == pytest.approx([1.0, 3.0])
    with pytest.raises(ValueError, match="groups"):
        group_spread(d, 3)
    with pytest.raises(ValueError, match="group_size"):
        group_spread(d, 1)


def test_js_divergence_is_finite_for_float32_denormals():
    tiny = torch.tensor(1e-45, dtype=torch.float32)  # halving it underflows to 0 in float32
    p = torch.stack([1 - tiny, tiny])
    q = torch.tensor([1.0, 0.0])
    js = js_divergence(p, q)
    assert js.dtype == torch.float32 and torch.isfinite(js) and js < 1e-6
    d = pairwise_head_distances(torch.stack([p, q])[None, :, None, :])  # (1, heads=2, 1, 2)
    assert torch.isfinite(d).all()
