"""Tests of ``multihead.analysis.diversity``: head distances across layers, spread, distinctness and
the logit-gap bound, on hand-built attention tensors."""

import math

import pytest
import torch

from multihead.analysis.diversity import (
    all_head_distances,
    distinctness,
    js_logit_bound,
    layer_distances,
    logit_gap,
    pairwise_head_distances,
    within_layer_spread,
)
from multihead.analysis.metrics import js_divergence

LOG2 = math.log(2)


def random_rows(*shape, seed=0, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).softmax(-1)


def test_js_bounds_on_hand_built_distributions():
    p, q = random_rows(50, 6, seed=1), random_rows(50, 6, seed=2)
    assert torch.allclose(js_divergence(p, p), torch.zeros(50, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(js_divergence(p, q), js_divergence(q, p))  # symmetric
    js = js_divergence(p, q)
    assert (js >= 0).all() and (js <= LOG2 + 1e-12).all()
    disjoint = js_divergence(torch.tensor([0.3, 0.7, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.5, 0.5]))
    assert disjoint.item() == pytest.approx(LOG2)


def test_pairwise_distances_equal_the_definition_without_mask():
    p = random_rows(3, 4, 5, 5).float()
    want = torch.tensor(
        [[js_divergence(p[:, i], p[:, j]).sqrt().mean().item() for j in range(4)] for i in range(4)]
    )
    assert torch.allclose(pairwise_head_distances(p), want, atol=1e-6)
    div = pairwise_head_distances(p, divergence=True)
    assert (div <= LOG2 + 1e-6).all() and torch.allclose(div, div.T)
    assert torch.all(div.diagonal() == 0)


def test_query_mask_ignores_padding_rows():
    eye = torch.eye(3)
    p = torch.stack([eye, eye.roll(1, -1)])[None]  # (1, 2 heads, 3, 3), rows all differ
    p[0, 1, 2] = eye[2]  # the last query agrees in both heads
    only_last = torch.tensor([[False, False, True]])
    assert pairwise_head_distances(p, only_last)[0, 1].item() == pytest.approx(0.0)
    all_rows = pairwise_head_distances(p)[0, 1].item()
    assert all_rows == pytest.approx(2 / 3 * math.sqrt(LOG2))


def test_tiny_weights_do_not_overflow():
    # A float32 denormal halves to 0 in (p + q) / 2; the distance must stay finite.
    p = torch.zeros(1, 2, 1, 3)
    p[0, 0, 0] = torch.tensor([1.0, 1e-45, 0.0])
    p[0, 1, 0] = torch.tensor([0.0, 0.0, 1.0])
    d = pairwise_head_distances(p)
    assert torch.isfinite(d).all()
    assert d[0, 1].item() == pytest.approx(math.sqrt(LOG2), rel=1e-6)


def test_identical_heads_give_zero_spread():
    row = random_rows(4, 1, 6, 6)  # (batch, 1, q, k)
    pattern = torch.stack([row.expand(4, 3, 6, 6), random_rows(4, 3, 6, 6, seed=5)])  # 2 layers
    d = layer_distances(pattern)
    assert d.shape == (2, 3, 3)
    spread = within_layer_spread(d)
    assert spread["mean"][0].item() == pytest.approx(0.0, abs=1e-7)
    assert spread["std"][0].item() == pytest.approx(0.0, abs=1e-7)
    assert spread["mean"][1] > 0.1
    assert torch.all(distinctness(d)[0] == 0)


def test_spread_and_distinctness_hand_built():
    d = torch.tensor([[0.0, 1.0, 3.0], [1.0, 0.0, 2.0], [3.0, 2.0, 0.0]])[None]
    s = within_layer_spread(d)
    assert s["mean"].item() == pytest.approx(2.0)
    assert s["std"].item() == pytest.approx(math.sqrt(2 / 3))
    assert (s["min"].item(), s["max"].item()) == (1.0, 3.0)
    assert distinctness(d)[0].tolist() == pytest.approx([2.0, 1.5, 2.5])


def test_all_head_distances_blocks_are_layer_distances():
    pattern = random_rows(2, 3, 2, 4, 4)  # (layers, batch, heads, q, k)
    mask = torch.tensor([[True, True, True, False]] * 3)
    full = all_head_distances(pattern, mask)
    blocks = layer_distances(pattern, mask)
    assert full.shape == (4, 4)
    assert torch.allclose(full[:2, :2], blocks[0]) and torch.allclose(full[2:, 2:], blocks[1])


def test_logit_gap_bound_holds_and_is_tight_for_two_keys():
    gen = torch.Generator().manual_seed(0)
    a = 4 * torch.randn(200, 7, generator=gen, dtype=torch.float64)
    b = 4 * torch.randn(200, 7, generator=gen, dtype=torch.float64)
    gap = logit_gap(a, b)
    js = js_divergence(a.softmax(-1), b.softmax(-1))
    bound = js_logit_bound(gap)
    assert (js <= bound + 1e-12).all()
    assert (bound <= torch.minimum(gap / 2, torch.tensor(LOG2, dtype=gap.dtype)) + 1e-12).all()
    shift = logit_gap(a, a + 5.0)  # a constant shift changes nothing
    assert torch.allclose(shift, torch.zeros_like(shift))
    assert js_logit_bound(0.0).item() == pytest.approx(0.0)
    assert js_logit_bound(torch.tensor([1, 2])).dtype == torch.get_default_dtype()


def test_logit_gap_leaves_out_the_keys_both_rows_mask():
    gen = torch.Generator().manual_seed(1)
    a = 4 * torch.randn(300, 7, generator=gen, dtype=torch.float64)
    b = 4 * torch.randn(300, 7, generator=gen, dtype=torch.float64)
    masked = torch.rand(300, 7, generator=gen) < 0.3
    masked[:, 0] = False  # at least one key open
    a_m, b_m = a.masked_fill(masked, float("-inf")), b.masked_fill(masked, float("-inf"))
    gap = logit_gap(a_m, b_m)
    assert torch.isfinite(gap).all()
    for row in range(0, 300, 37):  # the range over the open keys, by hand
        d = (a - b)[row][~masked[row]]
        assert gap[row].item() == pytest.approx((d.max() - d.min()).item())
    js = js_divergence(a_m.softmax(-1), b_m.softmax(-1))  # thm-logit-gap with masked keys
    assert (js <= js_logit_bound(gap) + 1e-12).all()
    every = torch.full((2, 5), float("-inf"), dtype=torch.float64)
    assert torch.equal(logit_gap(every, every), torch.zeros(2, dtype=torch.float64))
    one_side = a[:1].clone()
    one_side[0, 3] = float("-inf")  # masked in one row only: no finite range
    assert logit_gap(one_side, a[:1]).item() == float("inf")


def test_bad_input():
    p = random_rows(2, 3, 4, 4).float()
    with pytest.raises(ValueError, match="batch, heads, query, key"):
        pairwise_head_distances(p[0])
    with pytest.raises(ValueError, match=r"query_mask has shape \(2, 3\).*\(2, 4\)"):
        pairwise_head_distances(p, torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        pairwise_head_distances(p, torch.ones(2, 4))
    with pytest.raises(ValueError, match="selects no query"):
        pairwise_head_distances(p, torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="divergence"):
        pairwise_head_distances(p, divergence=1)
    with pytest.raises(ValueError, match="layers, batch, heads"):
        layer_distances(p)
    with pytest.raises(ValueError, match="negative"):
        layer_distances(-p[None])
    with pytest.raises(ValueError, match="outcomes"):
        js_divergence(p, p[..., :3])  # mismatched attention tensors
    with pytest.raises(ValueError, match="layers, heads, heads"):
        within_layer_spread(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="at least 2 heads"):
        distinctness(torch.zeros(2, 1, 1))
    with pytest.raises(TypeError, match="distances must be a floating-point tensor"):
        within_layer_spread(torch.zeros(1, 2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="same queries and keys"):
        logit_gap(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(TypeError, match="scores_b"):
        logit_gap(torch.zeros(3), [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="gap must be >= 0"):
        js_logit_bound(-1.0)
    with pytest.raises(TypeError, match="gap"):
        js_logit_bound("1")
