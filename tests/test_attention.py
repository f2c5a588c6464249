import math

import pytest
import torch

from multihead.core.attention import (
    MultiHeadAttention,
    attention_pattern,
    run_with_cache,
    to_torch_multihead,
)


def _layer(d_model=32, n_heads=4, **kw):
    torch.manual_seed(0)
    layer = MultiHeadAttention(d_model, n_heads, **kw)
    with torch.no_grad():  # non-zero biases exercise more of the code
        for b in (layer.b_Q, layer.b_K, layer.b_V, layer.b_O):
            b.normal_()
    return layer


def test_shapes_with_independent_key_and_value_sizes():
    layer = _layer(d_model=24, n_heads=3, d_key=5, d_value=7)
    x, mem = torch.randn(2, 6, 24), torch.randn(2, 9, 24)
    out, cache = run_with_cache(layer, x, mem, mem)
    assert out.shape == (2, 6, 24)
    assert cache["q"].shape == (2, 3, 6, 5)
    assert cache["k"].shape == (2, 3, 9, 5)
    assert cache["v"].shape == (2, 3, 9, 7)
    assert cache["pattern"].shape == cache["scores"].shape == (2, 3, 6, 9)
    assert cache["z"].shape == (2, 3, 6, 7)
    assert layer.W_Q.shape == (3, 24, 5) and layer.W_O.shape == (3, 7, 24)


def test_patterns_sum_to_one():
    _, cache = run_with_cache(_layer(), torch.randn(3, 8, 32))
    assert torch.allclose(cache["pattern"].sum(-1), torch.ones(3, 4, 8), atol=1e-6)


def test_masks_give_exactly_zero_weight():
    layer = _layer()
    x = torch.randn(2, 6, 32)
    pad = torch.tensor([[False] * 4 + [True] * 2, [False] * 6])
    _, cache = run_with_cache(layer, x, key_padding_mask=pad, causal=True)
    p = cache["pattern"]
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert (p[:, :, future] == 0).all()
    assert (p[0, :, :, 4:] == 0).all()
    assert torch.allclose(p.sum(-1), torch.ones_like(p.sum(-1)), atol=1e-6)


def test_fused_path_equals_explicit_path_with_masks():
    layer = _layer()
    x = torch.randn(2, 6, 32)
    pad = torch.tensor([[False] * 5 + [True], [False] * 6])
    for kw in (
        {},
        {"causal": True},
        {"key_padding_mask": pad},
        {"key_padding_mask": pad, "causal": True},
    ):
        fused = layer(x, **kw)
        explicit, _ = run_with_cache(layer, x, **kw)
        assert torch.allclose(fused, explicit, atol=1e-5), kw


def test_matches_torch_multihead_attention():
    layer = _layer()
    ref = to_torch_multihead(layer)
    x = torch.randn(3, 7, 32)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    out, cache = run_with_cache(layer, x, key_padding_mask=pad)
    ref_out, ref_w = ref(
        x, x, x, key_padding_mask=pad, need_weights=True, average_attn_weights=False
    )
    assert (out - ref_out).abs().max() < 1e-5
    assert (cache["pattern"] - ref_w).abs().max() < 1e-6


def test_reference_formula():
    q, k = torch.randn(4, 3), torch.randn(5, 3)
    p = attention_pattern(q, k)
    expected = torch.softmax(q @ k.T / math.sqrt(3), dim=-1)
    assert torch.allclose(p, expected)


def test_permutation_equivariance_of_unmasked_self_attention():
    layer = _layer()
    x = torch.randn(2, 7, 32)
    perm = torch.randperm(7)
    assert torch.allclose(layer(x)[:, perm], layer(x[:, perm]), atol=1e-5)


def test_head_mask_is_reversible_and_removes_one_term():
    layer = _layer()
    x = torch.randn(2, 5, 32)
    full, cache = run_with_cache(layer, x)
    layer.mask_heads([1])
    masked = layer(x)
    contribution = cache["z"][:, 1] @ layer.W_O[1]  # what head 1 writes
    assert torch.allclose(full - masked, contribution, atol=1e-5)
    layer.unmask_heads()
    assert torch.allclose(layer(x), full, atol=1e-5)


def test_prune_equals_mask():
    layer = _layer()
    x = torch.randn(2, 5, 32)
    layer.mask_heads([0, 2])
    masked = layer(x)
    layer.unmask_heads()
    n_before = sum(p.numel() for p in layer.parameters())
    layer.prune_heads([0, 2])
    assert layer.n_heads == 2 and layer.W_Q.shape[0] == 2
    assert sum(p.numel() for p in layer.parameters()) < n_before
    assert torch.allclose(layer(x), masked, atol=1e-5)
    with pytest.raises(ValueError, match="every head"):
        layer.prune_heads([0, 1])


def test_drophead_is_off_in_eval_and_unbiased_in_training():
    layer = _layer(drophead=0.5)
    plain = _layer()
    x = torch.randn(4, 5, 32)
    layer.eval()
    assert torch.allclose(layer(x), plain(x), atol=1e-6)  # no-op at eval: equals plain attention
    layer.train()
    torch.manual_seed(1)
    gates = torch.stack([layer.drophead_gate(4, x.device, x.dtype) for _ in range(2000)])
    assert (gates.sum(-1) == layer.n_heads).all()  # rescaled so the heads' total weight is kept
    assert ((gates > 0).sum(-1) >= 1).all()  # never drops every head of an example
    assert torch.allclose(gates.mean(0), torch.ones(4, 4), atol=0.1)  # each head kept on average


def test_hooks_do_not_change_the_output_and_are_removed():
    layer = _layer()
    x = torch.randn(2, 5, 32)
    out, _ = run_with_cache(layer, x)
    assert not layer.pattern.is_hooked
    assert torch.allclose(layer(x), out, atol=1e-5)


def test_names_filter_keeps_only_selected():
    _, cache = run_with_cache(_layer(), torch.randn(1, 3, 32), names_filter=lambda n: n == "z")
    assert list(cache) == ["z"]


@pytest.mark.parametrize(
    "args, kwargs, err, match",
    [
        ((100, 8), {}, ValueError, "d_model=100 is not divisible by n_heads=8"),
        ((0, 1), {}, ValueError, "d_model"),
        ((32, 0), {}, ValueError, "n_heads"),
        ((32, 4), {"d_key": -1}, ValueError, "d_key"),
        ((32, 4), {"d_value": 2.5}, TypeError, "d_value"),
        ((32, 4), {"drophead": 1.0}, ValueError, "drophead"),
        ((32, 4), {"attn_dropout": -0.5}, ValueError, "attn_dropout"),
    ],
)
def test_constructor_bad_input(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        MultiHeadAttention(*args, **kwargs)


def test_forward_bad_input():
    layer = _layer()
    x = torch.randn(2, 5, 32)
    with pytest.raises(TypeError, match="query"):
        layer(torch.ones(2, 5, 32, dtype=torch.long))
    with pytest.raises(ValueError, match="d_model=32"):
        layer(torch.randn(2, 5, 16))
    with pytest.raises(ValueError, match="query must have 3"):
        layer(torch.randn(5, 32))
    with pytest.raises(ValueError, match="key"):
        layer(x, torch.randn(3, 5, 32))
    with pytest.raises(ValueError, match="value"):
        layer(x, x, torch.randn(2, 4, 32))
    with pytest.raises(TypeError, match="key_padding_mask"):
        layer(x, key_padding_mask=torch.zeros(2, 5))
    with pytest.raises(ValueError, match="key_padding_mask has shape"):
        layer(x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="every key"):
        layer(x, key_padding_mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="causal"):
        layer(x, torch.randn(2, 7, 32), causal=True)
    with pytest.raises(ValueError, match="heads"):
        layer.mask_heads([4])
    with pytest.raises(TypeError, match="model"):
        run_with_cache(lambda t: t, x)
    with pytest.raises(TypeError, match="module"):
        to_torch_multihead(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="d_key"):
        to_torch_multihead(MultiHeadAttention(32, 4, d_key=16))
