import math

import pytest
import torch

from multihead.core.attention import MultiHeadAttention, attention_pattern
from multihead.core.convert import to_torch_multihead
from multihead.core.hooks import (
    add_hooks,
    hooks,
    run_with_cache,
    run_with_hooks,
    stack_layers,
)
from multihead.interventions.ablation import head_masks


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
        assert not layer.materialize
        fused = layer(x, **kw)
        explicit, _ = run_with_cache(layer, x, **kw)
        assert not layer.materialize  # run_with_cache restored the switch
        assert (fused - explicit).abs().max() < 1e-6, kw


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
    with head_masks(layer, {"": torch.tensor([1.0, 0.0, 1.0, 1.0])}):
        masked = layer(x)
    contribution = cache["z"][:, 1] @ layer.W_O[1]  # what head 1 writes
    assert torch.allclose(full - masked, contribution, atol=1e-5)
    assert torch.allclose(layer(x), full, atol=1e-5)


def test_prune_equals_mask():
    layer = _layer()
    x = torch.randn(2, 5, 32)
    with head_masks(layer, {"": torch.tensor([0.0, 1.0, 0.0, 1.0])}):
        masked = layer(x)
    n_before = sum(p.numel() for p in layer.parameters())
    layer.prune_heads([0, 2])
    assert layer.n_heads == 2 and layer.W_Q.shape[0] == 2
    assert sum(p.numel() for p in layer.parameters()) < n_before
    assert torch.allclose(layer(x), masked, atol=1e-5)
    with pytest.raises(ValueError, match="every head"):
        layer.prune_heads([0, 1])


def test_forward_and_backward_hooks_on_the_pattern_fire_on_request():
    layer = _layer()
    x = torch.randn(2, 5, 32, requires_grad=True)
    fired = []
    with pytest.raises(ValueError, match="add_hooks"):  # the fused path would skip it
        layer.pattern.register_forward_pre_hook(lambda _module, _args: None)
    fwd = [("pattern", lambda p, _name: fired.append(("forward", tuple(p.shape))))]
    bwd = [("pattern", lambda g, _name: fired.append(("backward", tuple(g.shape))))]
    with hooks(layer, fwd, bwd):
        assert layer.explicit_requests == 1 and not layer.materialize
        layer(x).sum().backward()
    assert layer.explicit_requests == 0
    assert fired == [("forward", (2, 4, 5, 5)), ("backward", (2, 4, 5, 5))]
    handle = add_hooks(layer, [("pattern", lambda p, _name: None)])
    assert layer.explicit_requests == 1
    handle.remove()
    assert layer.explicit_requests == 0


def test_run_with_hooks_forward_and_backward_hooks_fire_and_can_replace():
    layer = _layer()
    x = torch.randn(2, 5, 32)
    seen, grads = [], []

    def uniform(pattern, name):
        seen.append(name)
        return torch.full_like(pattern, 1 / pattern.shape[-1])  # replace the pattern

    def grad_hook(grad, name):
        grads.append((name, tuple(grad.shape)))

    out = run_with_hooks(layer, x, fwd_hooks=[("pattern", uniform)], bwd_hooks=[("z", grad_hook)])
    out.sum().backward()
    assert seen == ["pattern"] and grads == [("z", (2, 4, 5, 8))]
    _, cache = run_with_cache(layer, x)
    v_mean = cache["v"].mean(dim=2, keepdim=True).expand(-1, -1, 5, -1)  # uniform attention
    z_cat = v_mean.transpose(1, 2).reshape(2, 5, 32)
    want = z_cat @ layer.W_O.reshape(32, 32) + layer.b_O
    assert torch.allclose(out, want, atol=1e-5)
    assert not layer.materialize


def test_add_hooks_stays_until_removed_and_bad_names_are_named():
    layer = _layer()
    x = torch.randn(2, 5, 32)
    handles = add_hooks(layer, [("z", lambda z, name: 0 * z)])
    assert torch.allclose(layer(x), layer.b_O.expand(2, 5, 32))  # every head silenced
    handles.remove()
    handles.remove()  # a second remove is harmless
    assert not torch.allclose(layer(x), layer.b_O.expand(2, 5, 32))
    with pytest.raises(ValueError, match="'nope' is not a hook point"):
        run_with_hooks(layer, x, fwd_hooks=[("nope", lambda t, n: None)])
    with pytest.raises(TypeError, match="pairs"):
        run_with_hooks(layer, x, fwd_hooks=[("z",)])


def test_stack_layers_stacks_in_order():
    cache = {f"layers.{i}.attn.z": torch.full((2,), float(i)) for i in range(3)}
    assert stack_layers(cache, "layers.{}.attn.z").tolist() == [[0, 0], [1, 1], [2, 2]]
    with pytest.raises(ValueError, match="record it first"):
        stack_layers(cache, "layers.{}.attn.pattern")
    with pytest.raises(ValueError, match="template"):
        stack_layers(cache, "layers.0.attn.z")
    with pytest.raises(ValueError, match=r"layers \[0, 2\]"):  # a gap is an error, not the end
        stack_layers(
            {k: cache[k] for k in ("layers.0.attn.z", "layers.2.attn.z")}, "layers.{}.attn.z"
        )
    with pytest.raises(TypeError, match="values"):
        stack_layers([cache["layers.0.attn.z"]], "layers.{}.attn.z")


def test_stack_layers_stacks_per_module_dicts_by_default():
    """{module path: (heads,)} dicts (head masks, gradient norms, importances): the default
    template takes the encoder's attention modules."""
    norms = {f"encoder.layers.{i}.attn": torch.full((3,), float(i)) for i in range(2)}
    norms["decoder.layers.0.attn"] = torch.ones(3)
    assert stack_layers(norms).tolist() == [[0, 0, 0], [1, 1, 1]]
    assert stack_layers(norms, "decoder.layers.{}.attn").tolist() == [[1, 1, 1]]
    with pytest.raises(ValueError, match="encoder.layers.0.attn"):
        stack_layers({"decoder.layers.0.attn": torch.zeros(3)})


def test_hooks_do_not_change_the_output_and_are_removed():
    layer = _layer()
    x = torch.randn(2, 5, 32)
    out, _ = run_with_cache(layer, x)
    assert not layer.materialize
    assert torch.allclose(layer(x), out, atol=1e-5)
    calls = []
    run_with_hooks(layer, x, fwd_hooks=[(lambda n: True, lambda t, n: calls.append(n))])
    assert len(calls) == 6  # q, k, v, scores, pattern, z
    layer.materialize = True
    layer(x)
    assert len(calls) == 6  # the hooks were removed


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
    with pytest.raises(ValueError, match="query must be shaped"):
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
        layer.prune_heads([4])
    with pytest.raises(TypeError, match="causal"):
        layer(x, causal=1)
    with pytest.raises(TypeError, match="model"):
        run_with_cache(lambda t: t, x)
    with pytest.raises(TypeError, match="module"):
        to_torch_multihead(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="d_key"):
        to_torch_multihead(MultiHeadAttention(32, 4, d_key=16))


def test_a_query_with_no_key_reads_nothing_on_both_paths() -> None:
    """The course's convention for a fully masked row (see multihead._checks): the pattern row
    is zero, the head writes zero, gradients stay finite, and torch.nn.MultiheadAttention's
    default path agrees."""
    from multihead.core.attention import key_softmax

    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2).double()
    with torch.no_grad():
        layer.b_O.normal_()
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[True, False, False, False], [False, False, False, True]])  # left, right
    fused = layer(x, key_padding_mask=pad, causal=True)
    layer.materialize = True
    explicit = layer(x, key_padding_mask=pad, causal=True)
    assert torch.allclose(fused, explicit, atol=1e-12)
    assert torch.allclose(explicit[0, 0], layer.b_O)  # query 0 of example 0 sees only padding
    explicit.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(layer.W_Q.grad).all()
    future = torch.ones(4, 4, dtype=torch.bool).triu(1)
    ref, _ = to_torch_multihead(layer)(
        x, x, x, key_padding_mask=pad, attn_mask=future, need_weights=False
    )
    assert torch.allclose(ref, explicit, atol=1e-12)
    scores = torch.tensor([[0.0, float("-inf")], [float("-inf"), float("-inf")]])
    assert torch.equal(key_softmax(scores), torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    mask = torch.tensor([[False, True], [True, True]])
    q = torch.randn(2, 3)
    assert torch.equal(attention_pattern(q, q, mask)[1], torch.zeros(2))
