"""Every head tool on every decoder layout: multi-head, grouped-query, multi-query, latent and
rotary attention. A head is a query head; masking it leaves the key/value head it shares
untouched, so the other heads of its group compute exactly what they did."""

import pytest
import torch
import torch.nn.functional as F

from multihead.core.convert import regroup
from multihead.core.decoder import Decoder
from multihead.core.hooks import run_with_cache, run_with_hooks, stack_layers
from multihead.interventions.ablation import drop_grid, full_masks, head_masks, leave_one_out
from multihead.interventions.drophead import DropHead, head_outputs
from multihead.interventions.gates import attach_gates
from multihead.interventions.patching import (
    ablate_heads,
    ablated,
    first_order_ablation,
    head_means,
    patch_heads,
)
from multihead.interventions.pruning import (
    head_confidences,
    head_importance,
    iterative_pruning,
    prune_model,
)

VOCAB, LEN = 11, 9
LAYOUTS = {
    "MHA": {},
    "GQA": {"n_kv_heads": 2},
    "MQA": {"n_kv_heads": 1},
    "MLA": {"d_latent": 6},
    "rotary GQA": {"n_kv_heads": 2, "positions": "rotary"},
}


def _model(layout):
    torch.manual_seed(0)
    return Decoder(VOCAB, LEN, 16, 2, 4, **LAYOUTS[layout]).double().eval()


def _tokens(batch=5, seed=1):
    return torch.randint(VOCAB, (batch, LEN), generator=torch.Generator().manual_seed(seed))


def _per_sequence_loss(model, batch):
    (x,) = batch
    logits = model(x[:, :-1])  # (batch, seq - 1, vocab)
    return F.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none").mean(1)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_cache_of_patterns_and_hooks(layout):
    model, x = _model(layout), _tokens()
    logits, cache = run_with_cache(model, x)
    pattern = stack_layers(cache, "layers.{}.attn.pattern")
    assert pattern.shape == (2, 5, 4, LEN, LEN)  # (layers, batch, heads, query, key)
    assert torch.allclose(pattern.sum(-1), torch.ones(()).double())
    assert torch.equal(pattern.triu(1), torch.zeros_like(pattern))  # causal
    assert torch.allclose(logits, model(x), atol=1e-12)  # fused and explicit agree

    def uniform(p, _name):
        return torch.tril(torch.ones_like(p)) / torch.arange(1, LEN + 1).to(p)[:, None]

    hooked = run_with_hooks(model, x, fwd_hooks=[("layers.0.attn.pattern", uniform)])
    assert (hooked - logits).abs().max() > 1e-6
    # with a KV cache, the hooks see the new query against every cached key
    cache_kv = model.new_cache()
    model(x[:, :5], cache=cache_kv)
    _, step = run_with_cache(model, x[:, 5:6], cache=cache_kv)
    assert step["layers.1.attn.pattern"].shape == (5, 4, 1, 6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_masking_a_query_head_leaves_the_rest_of_its_group_alone(layout):
    model, x = _model(layout), _tokens()
    _, intact = run_with_cache(model, x, names_filter="layers.1.attn.z")
    masks = full_masks(model)
    masks["layers.1.attn"][0] = 0.0
    with head_masks(model, masks):
        out, masked = run_with_cache(model, x, names_filter="layers.1.attn.z")
    z, z_masked = intact["layers.1.attn.z"], masked["layers.1.attn.z"]
    assert torch.equal(z, z_masked)  # z is taken before the mask: every head, head 0 included
    assert torch.equal(model.layers[1].attn.head_mask, torch.ones(4, dtype=torch.float64))

    def zero_head0(v, _name):
        v = v.clone()
        v[:, 0] = 0.0
        return v

    by_hook = run_with_hooks(model, x, fwd_hooks=[("layers.1.attn.z", zero_head0)])
    assert (out - by_hook).abs().max() < 1e-12
    with ablated(model, {"layers.1.attn.z": [0]}):  # zero ablation is masking
        assert (model(x) - out).abs().max() < 1e-12


@pytest.mark.parametrize("layout", LAYOUTS)
def test_leave_one_out_and_the_drop_grid(layout):
    model, x = _model(layout), _tokens()

    @torch.no_grad()
    def evaluate(m):
        return {"loss": float(_per_sequence_loss(m, (x,)).mean())}

    change = leave_one_out(model, evaluate, ["layers.0.attn", "layers.1.attn"])
    assert change["loss"].shape == (2, 4) and bool((change["loss"] != 0).all())
    grid = drop_grid(model, lambda m: evaluate(m)["loss"], [0.0, 1.0], [0.0, 1.0], trials=2)
    assert grid.shape == (2, 2) and grid[0, 0] == grid[0, 1] == grid[1, 0]
    assert torch.equal(model.layers[0].attn.head_mask, torch.ones(4, dtype=torch.float64))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradient_importance_is_the_derivative_in_each_heads_multiplier(layout):
    model, x = _model(layout), _tokens()
    scores = head_importance(model, [(x,)], _per_sequence_loss, normalize=False)
    eps = 1e-6
    for path in ("layers.0.attn", "layers.1.attn"):
        for h in (0, 3):
            per_example = []
            for sign in (1, -1):
                masks = full_masks(model)
                masks[path] = masks[path].double()
                masks[path][h] += sign * eps
                with head_masks(model, masks), torch.no_grad():
                    per_example.append(_per_sequence_loss(model, (x,)))
            want = ((per_example[0] - per_example[1]) / (2 * eps)).abs().mean()
            assert abs(scores[path][h] - want) < 1e-5, (path, h)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_confidence_is_the_mean_largest_weight(layout):
    model, x = _model(layout), _tokens()
    conf = head_confidences(
        model, [(x,)], lambda m, b: m(b[0]), lambda path, b: torch.ones(5, LEN, dtype=torch.bool)
    )
    _, cache = run_with_cache(model, x)
    for i in range(2):
        want = cache[f"layers.{i}.attn.pattern"].amax(-1).mean(dim=(0, 2))  # (heads,)
        assert torch.allclose(conf[f"layers.{i}.attn"].double(), want, atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gates_open_at_init_and_drophead_off_in_eval(layout):
    model, x = _model(layout), _tokens()
    plain = model(x)
    gates = attach_gates(model, init_log_alpha=10.0)
    gates.eval()
    assert (model(x) - plain).abs().max() < 1e-12  # every gate is 1 in eval mode
    assert gates.expected_l0().requires_grad
    assert set(gates.masks()) == {"layers.0.attn", "layers.1.attn"}
    gates.remove()
    drop = DropHead(model, 0.5)
    assert torch.equal(model(x), plain)  # eval mode: DropHead does nothing
    model.train()
    torch.manual_seed(0)
    assert (model(x) - plain).abs().max() > 1e-6
    model.eval()
    drop.remove()
    _, cache = run_with_cache(model, x, names_filter="layers.0.attn.z")
    outputs = head_outputs(model.layers[0].attn, cache["layers.0.attn.z"])
    assert outputs.shape == (5, 4, LEN, 16)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_patching_ablation_and_the_first_order_estimate(layout):
    model, x = _model(layout), _tokens()
    corrupted = x.clone()
    corrupted[:, 2] = (x[:, 2] + 1) % VOCAB

    def metric(logits):
        return F.cross_entropy(logits[:, -1], x[:, 0])

    recovered = patch_heads(model, x, corrupted, metric)
    assert recovered.shape == (2, 4) and bool(recovered.isfinite().all())
    means = head_means(model, x)
    by_set = ablated(model, {"layers.0.attn.z": [1]}, means)
    with torch.no_grad():
        intact = metric(model(x))
        with by_set:
            one = metric(model(x))
    assert abs(ablate_heads(model, x, metric)[0, 1] - one) < 1e-6  # (float32 table)
    zero = ablate_heads(model, x, metric, how="zero") - intact  # (layers, heads)
    estimate = first_order_ablation(model, x, metric)
    assert estimate.shape == (2, 4)
    assert torch.corrcoef(torch.stack([zero.flatten(), estimate.flatten()]))[0, 1] > 0.5


@pytest.mark.parametrize("layout", ["MHA", "GQA"])
def test_pruning_by_mask_and_by_slicing(layout):
    model, x = _model(layout), _tokens()
    scores = head_importance(model, [(x,)], _per_sequence_loss)
    curve = iterative_pruning(
        model,
        lambda m: {"loss": float(_per_sequence_loss(m, (x,)).mean())},
        lambda m: head_importance(m, [(x,)], _per_sequence_loss),
        fraction_per_step=0.25,
    )
    assert curve.fraction[-1] == 0.75 and len(scores) == 2
    masks = full_masks(model)
    masks["layers.1.attn"][2:] = 0.0  # a whole group of the grouped layer
    with head_masks(model, masks):
        want = model(x)
    prune_model(model, masks)
    assert model.layers[1].attn.n_heads == 2
    assert (model(x) - want).abs().max() < 1e-12
    if layout == "GQA":
        assert model.layers[1].attn.n_kv_heads == 1
        with pytest.raises(ValueError, match="groups"):
            prune_model(model, {"layers.0.attn": torch.tensor([1.0, 0.0, 1.0, 1.0])})
        full = regroup(model.layers[0].attn, 4)  # as multi-head attention, any head can go
        full.prune_heads([1])
        assert full.n_heads == 3
    with pytest.raises(ValueError, match="mask heads"):
        prune_model(_model("MLA"), {"layers.0.attn": torch.tensor([1.0, 0.0, 1.0, 1.0])})
