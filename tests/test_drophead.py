from dataclasses import replace

import pytest
import torch

from multihead.core.attention import MultiHeadAttention
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.hooks import run_with_cache
from multihead.core.model import EncoderModel, attention_modules
from multihead.core.train import train, train_seeds
from multihead.interventions.drophead import (
    DropHead,
    drophead_gate,
    drophead_rate,
    drophead_schedule,
    gate_moments,
    head_outputs,
    injected_variance,
)
from multihead.tasks.synthetic import LookupTask


def _gates(h, p, n=40000):
    torch.manual_seed(0)
    return drophead_gate(n, h, p, dtype=torch.float64)  # (n, heads)


@pytest.mark.parametrize("h,p", [(4, 0.3), (2, 0.5), (8, 0.1)])
def test_monte_carlo_matches_exact_moments(h, p):
    g = _gates(h, p)
    m = gate_moments(h, p)
    assert torch.allclose(g.sum(1), torch.full((len(g),), float(h), dtype=g.dtype))
    assert abs(g.mean().item() - 1) < 0.03
    assert abs(g.var(0).mean().item() - m["variance"]) < 0.05 * max(m["variance"], 0.1)
    cov = torch.cov(g.T)[0, 1].item()
    assert abs(cov - m["covariance"]) < 0.05 * max(abs(m["covariance"]), 0.1)


def test_exact_moments_hand_values():
    # h = 1: the single head is always kept with factor 1.
    assert gate_moments(1, 0.5)["variance"] == pytest.approx(0.0)
    # h = 2, p = 0.5: K = 0 (1/4, rescued to K = 1), 1 (1/2), 2 (1/4) -> E[1/max(K,1)] = 7/8.
    assert gate_moments(2, 0.5)["variance"] == pytest.approx(2 * 7 / 8 - 1)
    assert gate_moments(4, 0.0)["variance"] == pytest.approx(0.0)
    assert gate_moments(4, 0.3)["dropout_variance"] == pytest.approx(0.3 / 0.7)


def test_injected_variance_is_the_variance_of_the_gated_sum():
    torch.manual_seed(1)
    h, p = 4, 0.3
    o = torch.randn(1, h, 1, 5, dtype=torch.float64)
    g = _gates(h, p)  # (n, heads)
    gated = torch.einsum("nh,hd->nd", g, o[0, :, 0])
    mc = (gated - o[0, :, 0].sum(0)).pow(2).sum(1).mean()
    exact = injected_variance(o, p)[0, 0]
    assert abs(mc.item() - exact.item()) < 0.05 * exact.item()
    same = o[:, :1].expand(1, h, 1, 5)
    assert injected_variance(same, p).abs().max() < 1e-12


def test_head_outputs_sum_to_the_layer_output():
    torch.manual_seed(2)
    attn = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    out, cache = run_with_cache(attn, x)
    parts = head_outputs(attn, cache["z"])
    assert parts.shape == (2, 4, 5, 16)
    assert torch.allclose(parts.sum(1) + attn.b_O, out, atol=1e-5)
    with pytest.raises(ValueError, match="z must have shape"):
        head_outputs(attn, torch.zeros(2, 3, 5, 4))


def test_rates_and_schedules():
    assert drophead_rate(5, 10, 0.2) == 0.2
    assert drophead_rate(0, 11, 0.2, "v", turn=5) == pytest.approx(0.2)
    assert drophead_rate(5, 11, 0.2, "v", turn=5) == pytest.approx(0.0)
    assert drophead_rate(10, 11, 0.2, "v", turn=5) == pytest.approx(0.2)
    assert drophead_rate(3, 11, 0.2, "v", turn=5) == pytest.approx(0.2 * 2 / 5)
    model = EncoderModel(ModelConfig(vocab_size=5, d_model=16, n_heads=4, n_layers=2))
    cb = drophead_schedule(0.3, 11, "v", turn=5)
    cb(model, 0)
    assert cb.drophead.p == pytest.approx(0.3)
    cb(model, 5)
    assert cb.drophead.p == 0.0
    cb.remove()
    assert cb.drophead is None


def test_bad_input():
    with pytest.raises(ValueError, match="schedule"):
        drophead_rate(0, 10, 0.1, "cosine")
    with pytest.raises(ValueError, match="p="):
        drophead_rate(0, 10, 1.0)
    with pytest.raises(ValueError, match="turn"):
        drophead_rate(0, 10, 0.1, "v", turn=10)
    with pytest.raises(ValueError, match="step"):
        drophead_rate(-1, 10, 0.1)
    with pytest.raises(ValueError, match="p="):
        gate_moments(4, -0.1)
    with pytest.raises(TypeError, match="n_heads"):
        gate_moments(4.0, 0.1)
    with pytest.raises(ValueError, match="p="):
        DropHead(EncoderModel(ModelConfig(vocab_size=5, d_model=16)), 1.5)
    with pytest.raises(ValueError, match="model"):
        DropHead("model", 0.1)
    with pytest.raises(ValueError, match="at least 2 heads"):
        injected_variance(torch.zeros(1, 1, 2, 3), 0.1)
    with pytest.raises(ValueError, match="p="):
        drophead_schedule(1.2, 10)
    with pytest.raises(ValueError, match="schedule"):
        drophead_schedule(0.3, 10, "w")


def test_drophead_gate_generator_and_bad_batch():
    a = drophead_gate(50, 4, 0.4, generator=torch.Generator().manual_seed(5))
    b = drophead_gate(50, 4, 0.4, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and a.shape == (50, 4)
    with pytest.raises(ValueError, match="batch"):
        drophead_gate(0, 4, 0.4)


def test_drophead_is_off_in_eval_and_unbiased_in_training():
    torch.manual_seed(0)
    model = EncoderModel(ModelConfig(vocab_size=5, d_model=16, n_heads=4, n_layers=2))
    x = torch.randint(5, (8, 6))
    model.eval()
    plain = model(x)
    drop = DropHead(model, 0.5)
    assert torch.equal(model(x), plain)  # a no-op in eval mode
    model.train()
    torch.manual_seed(1)
    assert not torch.allclose(model(x), plain)
    # The gate multiplies z: run one layer and compare with the gate drawn from the same seed.
    attn = attention_modules(model)[0][1]
    q = torch.randn(3, 6, 16)
    torch.manual_seed(2)
    out = attn(q)
    torch.manual_seed(2)
    gate = drophead_gate(3, 4, 0.5)
    with torch.no_grad():
        drop.p = 0.0
        _, cache = run_with_cache(attn, q)
    z = cache["z"] * gate[:, :, None, None]
    want = z.transpose(1, 2).reshape(3, 6, 16) @ attn.W_O.reshape(16, 16) + attn.b_O
    assert torch.allclose(out, want, atol=1e-5)
    drop.remove()
    model.train()
    assert torch.allclose(model.eval()(x), plain)


def test_drophead_schedule_attaches_once():
    # A constant schedule attaches the same gate as DropHead itself, before the first step.
    torch.manual_seed(0)
    model = EncoderModel(ModelConfig(vocab_size=5, d_model=16, n_heads=4, n_layers=1))
    cb = drophead_schedule(0.2, 10)
    cb(model, 0)
    assert isinstance(cb.drophead, DropHead) and cb.drophead.p == pytest.approx(0.2)
    cb(model, 1)  # attaches once only
    model.train()
    calls = []
    handle = attention_modules(model)[0][1].z.register_forward_hook(lambda *a: calls.append(1))
    model(torch.randint(5, (2, 3)))
    handle.remove()
    cb.remove()
    assert calls == [1]


def _hooks(model):
    return sum(len(m._forward_hooks) for m in model.modules())


@pytest.mark.parametrize("schedule", ["constant", "v"])
def test_a_drophead_schedule_follows_train_seeds_to_each_new_model(schedule):
    task = LookupTask(vocab_size=4, seq_len=8)
    cfg = ModelConfig(vocab_size=4, n_classes=16, d_model=16, n_heads=4, n_layers=1, max_len=8)
    tcfg = TrainConfig(steps=6, batch_size=8, lr=3e-3, warmup=2)
    cpu = torch.device("cpu")
    on_step = drophead_schedule(0.5, tcfg.steps, schedule, turn=tcfg.warmup)
    models, histories = train_seeds([0, 1], lambda s: EncoderModel(cfg), task.sample, tcfg,
                                    device=cpu, on_step=on_step)  # fmt: skip
    for seed, model, history in zip([0, 1], models, histories, strict=True):
        torch.manual_seed(seed)  # the seed alone, with a schedule of its own
        alone = EncoderModel(cfg)
        hook = drophead_schedule(0.5, tcfg.steps, schedule, turn=tcfg.warmup)
        ref = train(alone, task.sample, replace(tcfg, seed=seed), device=cpu, progress=False,
                    on_step=hook)  # fmt: skip
        hook.remove()
        assert history.loss == ref.loss
        assert all(torch.equal(t, alone.state_dict()[n]) for n, t in model.state_dict().items())
    # Without DropHead the second seed trains differently: the schedule reached its model.
    torch.manual_seed(1)
    plain = train(EncoderModel(cfg), task.sample, replace(tcfg, seed=1), device=cpu,
                  progress=False)  # fmt: skip
    assert max(abs(a - b) for a, b in zip(plain.loss, histories[1].loss, strict=True)) > 1e-3
    # The first model was let go; the last keeps DropHead until remove().
    x = task.sample(4, torch.Generator().manual_seed(0))[0]
    assert _hooks(models[0]) == 0 and on_step.model is models[1] and _hooks(models[1]) > 0
    models[0].train()
    assert torch.equal(models[0](x), models[0](x))  # no gate drawn
    on_step.remove()
    assert _hooks(models[1]) == 0 and on_step.drophead is None and on_step.model is None
