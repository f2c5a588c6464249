from dataclasses import replace

import pytest
import torch

from multihead.core.attention import MultiHeadAttention
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.ensemble import stack_seeds
from multihead.core.ensemble_train import train_seeds
from multihead.core.hooks import run_with_cache
from multihead.core.model import EncoderDecoder, EncoderModel, attention_modules
from multihead.core.train import train
from multihead.interventions.drophead import (
    DropHead,
    SeedDropHead,
    drophead_gate,
    drophead_rate,
    drophead_schedule,
    gate_moments,
    head_outputs,
    injected_variance,
    seed_drophead_schedule,
)
from multihead.tasks.corpus import make_corpus
from multihead.tasks.translation import (
    SEQ2SEQ_PAD,
    encode,
    sampler,
    seq2seq_loss,
    seq2seq_seed_loss,
)


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


@pytest.fixture
def float64():
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(saved)


@pytest.mark.parametrize("schedule", ["constant", "v"])
def test_a_batched_seed_with_drophead_equals_that_seed_trained_alone_with_the_hook(
    schedule, float64
):
    corpus = make_corpus(120, seed=0)
    cfg = ModelConfig(vocab_size=len(corpus.src_vocab), n_classes=len(corpus.tgt_vocab),
                      d_model=16, n_heads=4, n_layers=1, n_decoder_layers=1, d_ff=32,
                      max_len=32)  # fmt: skip
    # No dropout here: the seeds' batches are padded to one length, so a dropout mask of the
    # batched run has another shape than the alone run's; DropHead's gates (batch, heads) do not.
    tcfg = TrainConfig(steps=10, batch_size=8, lr=3e-3, warmup=4)
    sample = sampler(encode(corpus, corpus.train))
    seeds = [0, 1]
    ensemble = stack_seeds(lambda s: EncoderDecoder(cfg), seeds)
    on_step = seed_drophead_schedule(0.5, tcfg.steps, schedule, turn=tcfg.warmup)
    histories = train_seeds(ensemble, sample, tcfg, loss_fn=seq2seq_seed_loss, pad=SEQ2SEQ_PAD,
                            device=torch.device("cpu"), on_step=on_step)  # fmt: skip
    for k, seed in enumerate(seeds):
        torch.manual_seed(seed)
        model = EncoderDecoder(cfg)
        hook = drophead_schedule(0.5, tcfg.steps, schedule, turn=tcfg.warmup)
        alone = train(model, sample, replace(tcfg, seed=seed), loss_fn=seq2seq_loss,
                      device=torch.device("cpu"), progress=False, on_step=hook)  # fmt: skip
        assert max(abs(a - b) for a, b in zip(alone.loss, histories[k].loss, strict=True)) < 1e-8
        picked = ensemble.pick(k).state_dict()
        diff = max((t - picked[n]).abs().max().item() for n, t in model.state_dict().items()
                   if "b_K" not in n)  # fmt: skip
        assert diff < 1e-6, (seed, diff)
    # Without DropHead the same seeds train differently: the test can fail.
    torch.manual_seed(0)
    plain = train(EncoderDecoder(cfg), sample, replace(tcfg, seed=0), loss_fn=seq2seq_loss,
                  device=torch.device("cpu"), progress=False)  # fmt: skip
    assert max(abs(a - b) for a, b in zip(plain.loss, histories[0].loss, strict=True)) > 1e-3
    on_step.remove()
    assert ensemble.head_gates is None


def test_seed_drophead_bad_input():
    cfg = ModelConfig(vocab_size=4, n_classes=4, d_model=8, n_heads=2, n_layers=1, max_len=8)
    ensemble = stack_seeds(lambda s: EncoderModel(cfg), [0, 1])
    with pytest.raises(TypeError, match="ensemble must be a SeedEnsemble"):
        SeedDropHead(EncoderModel(cfg), [0.1, 0.1])
    with pytest.raises(ValueError, match="rates holds 1 rates but the ensemble has 2 seeds"):
        SeedDropHead(ensemble, [0.1])
    with pytest.raises(TypeError, match="rates must be a list"):
        SeedDropHead(ensemble, 0.1)
    with pytest.raises(ValueError, match="rates\\[1\\]"):
        SeedDropHead(ensemble, [0.1, 1.5])
    with pytest.raises(ValueError, match="schedule"):
        seed_drophead_schedule(0.3, 10, "w")
    with pytest.raises(TypeError, match="fn must be callable"):
        ensemble.set_head_gates("gates")
    ensemble.set_head_gates(lambda path, b, h, gens: torch.ones(3, b, h))
    ensemble.train()
    with pytest.raises(ValueError, match="head gates of encoder.layers.0.attn must be shaped"):
        ensemble(torch.zeros(2, 3, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="on_step must be callable"):
        train_seeds(ensemble, lambda b, g: None, TrainConfig(steps=1), on_step=3)
