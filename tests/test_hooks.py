"""Hooks that need the explicit path: counted requests, refused torch hooks, cache filters."""

import pytest
import torch
import torch.nn.functional as F

from multihead.core.attention import MultiHeadAttention
from multihead.core.hooks import add_hooks, hooks, run_with_cache, run_with_hooks
from multihead.core.talking_heads import TalkingHeadsAttention


def _layer():
    torch.manual_seed(0)
    return MultiHeadAttention(32, 4)


@pytest.fixture
def fused_calls(monkeypatch):
    """How many times the fused kernel ran (the explicit path never calls it)."""
    calls = []
    kernel = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    return calls


def test_removing_one_of_two_handles_keeps_the_other_firing(fused_calls):
    layer, x = _layer(), torch.randn(2, 5, 32)
    fired = []
    a = add_hooks(layer, [("pattern", lambda p, n: fired.append("a"))])
    b = add_hooks(layer, [("pattern", lambda p, n: fired.append("b"))])
    layer(x)
    assert fired == ["a", "b"]
    a.remove()
    layer(x)
    assert fired == ["a", "b", "b"]  # b still fires: a's removal did not switch the path off
    assert fused_calls == []
    b.remove()
    a.remove()  # removing twice changes nothing
    layer(x)
    assert fired == ["a", "b", "b"] and fused_calls == [1]  # back on the fused kernel
    assert not layer.materialize  # the user's switch was never touched


def test_hook_blocks_and_handles_may_end_in_any_order(fused_calls):
    layer, x = _layer(), torch.randn(2, 5, 32)
    fired = []
    with hooks(layer, [("scores", lambda s, n: None)]):
        handle = add_hooks(layer, [("pattern", lambda p, n: fired.append(1))])
    layer(x)  # the block ended first; the handle still needs the explicit path
    assert fired == [1] and fused_calls == []
    handle.remove()
    layer(x)
    assert fused_calls == [1]


def test_the_public_switch_stays_on_after_hooks_are_removed(fused_calls):
    layer, x = _layer(), torch.randn(2, 5, 32)
    layer.materialize = True
    run_with_hooks(layer, x, fwd_hooks=[("pattern", lambda p, n: None)])
    assert layer.materialize
    layer(x)
    assert fused_calls == []


@pytest.mark.parametrize(
    "register",
    [
        lambda point: point.register_forward_hook(lambda m, args, out: None),
        lambda point: point.register_forward_pre_hook(lambda m, args: None),
        lambda point: point.register_full_backward_hook(lambda m, gi, go: None),
    ],
    ids=["forward", "pre", "backward"],
)
def test_torch_hooks_on_explicit_only_points_are_refused(register):
    layer = _layer()
    for point in (layer.pattern, layer.scores):
        with pytest.raises(ValueError, match="add_hooks.*run_with_hooks.*materialize"):
            register(point)
    register(layer.q).remove()  # q exists on both paths: a torch hook there always fires


def test_the_package_hooks_still_reach_the_pattern():
    layer, x = _layer(), torch.randn(2, 5, 32, requires_grad=True)
    grads = []
    out = run_with_hooks(
        layer,
        x,
        fwd_hooks=[("pattern", lambda p, n: p * 1.0)],
        bwd_hooks=[("pattern", lambda g, n: grads.append(tuple(g.shape)))],
    )
    out.sum().backward()
    assert grads == [(2, 4, 5, 5)]
    _, cache = run_with_cache(layer, x)
    assert cache["pattern"].shape == (2, 4, 5, 5)


def test_talking_heads_always_compute_their_pattern_so_torch_hooks_are_allowed():
    layer = TalkingHeadsAttention(32, 4)
    seen = []
    handle = layer.pattern.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    layer(torch.randn(2, 5, 32))
    handle.remove()
    assert seen == [(2, 4, 5, 5)]


def test_run_with_cache_names_filter_takes_a_name_a_list_or_a_predicate():
    layer, x = _layer(), torch.randn(1, 3, 32)
    _, one = run_with_cache(layer, x, names_filter="pattern")
    _, some = run_with_cache(layer, x, names_filter=["q", "pattern"])
    _, kept = run_with_cache(layer, x, names_filter=lambda n: n == "z")
    assert list(one) == ["pattern"]
    assert sorted(some) == ["pattern", "q"]
    assert list(kept) == ["z"]
    assert torch.equal(one["pattern"], some["pattern"])
    with pytest.raises(ValueError, match="'patern' is not a hook point"):
        run_with_cache(layer, x, names_filter="patern")
    with pytest.raises(ValueError, match="'nope' is not a hook point"):
        run_with_cache(layer, x, names_filter=["q", "nope"])
    with pytest.raises(TypeError, match="names_filter"):
        run_with_cache(layer, x, names_filter=3)
    with pytest.raises(TypeError, match="names_filter"):
        run_with_cache(layer, x, names_filter=["q", 3])
