import copy
import math

import pytest
import torch

from multihead.core.config import ModelConfig
from multihead.core.model import EncoderDecoder, attention_modules
from multihead.interventions.ablation import head_masks
from multihead.interventions.gates import (
    HardConcreteGate,
    attach_gates,
    deterministic_gate,
    expected_l0,
    hard_concrete,
    prob_one,
    prob_zero,
)


def _model() -> EncoderDecoder:
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=9, n_classes=10, d_model=16, n_heads=4, n_layers=2, n_decoder_layers=2,
        max_len=12,
    )  # fmt: skip
    return EncoderDecoder(cfg).eval()


def _inputs():
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(1, 9, (3, 6), generator=gen)
    tgt = torch.randint(1, 10, (3, 5), generator=gen)
    return src, tgt


def test_monte_carlo_matches_closed_forms():
    log_alpha = torch.tensor([-3.0, -1.0, 0.0, 0.7, 2.5])
    gen = torch.Generator().manual_seed(0)
    u = torch.rand(200_000, 5, generator=gen)
    g = hard_concrete(log_alpha, u)  # (samples, gates)
    assert g.min() >= 0 and g.max() <= 1
    p0, p1 = (g == 0).float().mean(0), (g == 1).float().mean(0)
    assert torch.allclose(p0, prob_zero(log_alpha), atol=4e-3)
    assert torch.allclose(p1, prob_one(log_alpha), atol=4e-3)
    assert abs((g > 0).float().mean(0).sum() - expected_l0(log_alpha)) < 1e-2


def test_closed_form_values():
    # beta log(-gamma/zeta) = (2/3) log(1/11)
    c = (2 / 3) * math.log(1 / 11)
    assert prob_zero(torch.tensor(0.0)).item() == pytest.approx(1 / (1 + math.exp(-c)))
    assert expected_l0(torch.zeros(3)).item() == pytest.approx(3 / (1 + math.exp(c)))
    # symmetric stretch: P(g = 1) at log_alpha equals P(g = 0) at -log_alpha
    la = torch.linspace(-4, 4, 9)
    assert torch.allclose(prob_one(la), prob_zero(-la))


def test_gradient_flows_to_log_alpha():
    la = torch.zeros(4, requires_grad=True)
    u = torch.full((4,), 0.5)
    hard_concrete(la, u).sum().backward()
    assert (la.grad > 0).all()  # at u = 0.5 the sample is inside (0, 1)
    la2 = torch.zeros(3, requires_grad=True)
    expected_l0(la2).backward()
    assert (la2.grad > 0).all()


def test_eval_gates_are_exactly_zero_or_one():
    gate = HardConcreteGate(6)
    with torch.no_grad():
        gate.log_alpha.copy_(torch.tensor([-2.0, -0.1, 0.0, 0.1, 1.0, 5.0]))
    gate.eval()
    g = gate()
    assert set(g.tolist()) <= {0.0, 1.0}
    assert g.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert torch.equal(g, deterministic_gate(gate.log_alpha.detach()))
    gate.train()
    s = gate()
    assert s.shape == (6,) and s.requires_grad


def test_gates_start_open_and_equal_ungated_model():
    model = _model()
    src, tgt = _inputs()
    ref = model(src, tgt)
    gates = attach_gates(model)
    assert len(gates.gates) == len(attention_modules(model))
    assert torch.allclose(model(src, tgt), ref, atol=1e-6)  # eval: gates are 1
    assert all(bool((m == 1).all()) for m in gates.masks().values())
    assert gates.expected_l0().item() > 0.98 * 24
    model.train()
    out = model(src, tgt)  # sampled gates: differentiable in log_alpha
    out.sum().backward()
    assert all(g.log_alpha.grad is not None for g in gates.gates.values())
    gates.remove()
    model.eval()
    assert torch.equal(model(src, tgt), ref)
    assert all(not m.head_mask.requires_grad for _, m in attention_modules(model))


def test_closed_gate_silences_its_head():
    model = _model()
    src, tgt = _inputs()
    name = "decoder.layers.1.cross_attn"
    gates = attach_gates(model, [name])
    with torch.no_grad():
        gates.gate(name).log_alpha[2] = -3.0
    gated = model(src, tgt)
    assert gates.masks()[name].tolist() == [1.0, 1.0, 0.0, 1.0]
    gates.remove()
    with head_masks(model, {name: torch.tensor([1.0, 1.0, 0.0, 1.0])}):
        assert torch.allclose(model(src, tgt), gated, atol=1e-6)


def test_bad_inputs():
    with pytest.raises(ValueError, match="beta"):
        HardConcreteGate(3, beta=0.0)
    with pytest.raises(ValueError, match="gamma"):
        HardConcreteGate(3, gamma=0.0)
    with pytest.raises(ValueError, match="zeta"):
        HardConcreteGate(3, zeta=1.0)
    with pytest.raises(ValueError, match="beta"):
        prob_zero(torch.zeros(2), beta=-1.0)
    with pytest.raises(ValueError, match="n_gates"):
        HardConcreteGate(0)
    with pytest.raises(ValueError, match="names"):
        attach_gates(_model(), ["encoder.layers.7.attn"])
    with pytest.raises(TypeError, match="model"):
        attach_gates("not a model")


def _sample_and_loss():
    src, tgt = _inputs()

    def sample(batch_size, generator):
        idx = torch.randint(len(src), (batch_size,), generator=generator)
        return src[idx], tgt[idx]

    def loss_fn(model, batch):
        s, t = batch
        logits = model(s, t[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), t[:, 1:].flatten())

    return sample, loss_fn


@pytest.mark.slow
def test_fine_tune_with_gates_penalty_closes_heads_and_cleans_up():
    from multihead.interventions.gates import fine_tune_with_gates

    sample, loss_fn = _sample_and_loss()
    model = _model()
    weak = fine_tune_with_gates(model, sample, loss_fn, lam=0.0, steps=5, progress=False)
    assert len(weak.task_loss) == len(weak.expected_heads) == 5
    assert all(bool((m == 1).all()) for m in weak.masks.values())
    strong = fine_tune_with_gates(
        _model(), sample, loss_fn, lam=10.0, steps=80, gate_lr=0.2, progress=False
    )
    assert sum(float(m.sum()) for m in strong.masks.values()) < 24
    assert strong.expected_heads[-1] < strong.expected_heads[0]
    src, tgt = _inputs()
    model.train()  # with a gate still attached, two training-mode passes would differ
    assert torch.equal(model(src, tgt), model(src, tgt))
    assert all(not m.head_mask.requires_grad for _, m in attention_modules(model))
    with pytest.raises(ValueError, match="lam"):
        fine_tune_with_gates(_model(), sample, loss_fn, lam=-1.0, steps=1)
    with pytest.raises(ValueError, match="steps"):
        fine_tune_with_gates(_model(), sample, loss_fn, lam=0.1, steps=0)


def _translation(seed: int = 0):
    """A small translation corpus (encoded) and a model sized to it, built with ``seed``."""
    from multihead.tasks.corpus import make_corpus
    from multihead.tasks.translation import encode

    corpus = make_corpus(80, seed=0)
    cfg = ModelConfig(
        vocab_size=len(corpus.src_vocab), n_classes=len(corpus.tgt_vocab), d_model=16, n_heads=4,
        n_layers=2, n_decoder_layers=2, max_len=32,
    )  # fmt: skip
    torch.manual_seed(seed)
    return encode(corpus, corpus.train), EncoderDecoder(cfg).double().eval()


def _state(model):
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def test_gated_fine_tunes_one_after_another_each_equal_the_run_alone():
    from multihead.interventions.gates import fine_tune_with_gates
    from multihead.tasks.translation import sampler, seq2seq_loss

    data, base = _translation()
    sample, other = sampler(data), _translation(seed=5)[1]
    kw = dict(steps=3, batch_size=8, gate_lr=0.3, progress=False)
    runs = [(base, 0.0, 0), (base, 0.5, 0), (other, 0.5, 3)]  # (model, lam, seed)
    after = []
    for model, lam, seed in runs:  # one after another, each on a copy, as a sweep does
        tuned = copy.deepcopy(model)
        after.append((fine_tune_with_gates(tuned, sample, seq2seq_loss, lam=lam, seed=seed,
                                           **kw), _state(tuned)))  # fmt: skip
    for k in (2, 1):  # the later runs again, first of all and in the other order
        (model, lam, seed), (run, state) = runs[k], after[k]
        alone = copy.deepcopy(model)
        ref = fine_tune_with_gates(alone, sample, seq2seq_loss, lam=lam, seed=seed, **kw)
        assert run.task_loss == ref.task_loss and run.expected_heads == ref.expected_heads
        assert all(torch.equal(run.log_alpha[n], t) for n, t in ref.log_alpha.items())
        assert all(torch.equal(run.masks[n], t) for n, t in ref.masks.items())
        assert all(torch.equal(state[n], t) for n, t in alone.state_dict().items())
    # the penalty moved the gates; another seed draws other batches
    assert after[0][0].expected_heads[-1] > after[1][0].expected_heads[-1]
    reseeded = fine_tune_with_gates(copy.deepcopy(base), sample, seq2seq_loss, lam=0.5, seed=1,
                                    **{**kw, "steps": 1})  # fmt: skip
    assert reseeded.task_loss[0] != after[1][0].task_loss[0]


def test_fine_tune_with_gates_bad_input():
    from multihead.interventions.gates import fine_tune_with_gates

    sample, loss_fn = _sample_and_loss()
    model = _model()
    for lam in (-1.0, True, "0.1"):
        with pytest.raises(ValueError, match="lam"):
            fine_tune_with_gates(model, sample, loss_fn, lam=lam, steps=1)
    with pytest.raises(ValueError, match="steps"):
        fine_tune_with_gates(model, sample, loss_fn, lam=0.1, steps=0)
    with pytest.raises(ValueError, match="batch_size"):
        fine_tune_with_gates(model, sample, loss_fn, lam=0.1, steps=1, batch_size=0)
    with pytest.raises(ValueError, match="beta"):
        fine_tune_with_gates(model, sample, loss_fn, lam=0.1, steps=1, beta=0.0)
    src, tgt = _inputs()
    model.train()  # nothing was left attached
    assert torch.equal(model(src, tgt), model(src, tgt))


def test_fine_tune_with_gates_on_a_pruned_model():
    from multihead.interventions.gates import fine_tune_with_gates
    from multihead.interventions.pruning import prune_model
    from multihead.tasks.translation import sampler, seq2seq_loss

    data, model = _translation()
    pruned = prune_model(model, {"encoder.layers.0.attn": torch.tensor([1.0, 0, 0, 1])})
    run = fine_tune_with_gates(pruned, sampler(data), seq2seq_loss, lam=0.2, steps=3,
                               batch_size=16, seed=2, progress=False)  # fmt: skip
    assert run.log_alpha["encoder.layers.0.attn"].shape == (2,)  # a gate per remaining head
    assert run.masks["encoder.layers.0.attn"].shape == (2,)
    assert run.log_alpha["encoder.layers.1.attn"].shape == (4,)
    assert dict(attention_modules(pruned))["encoder.layers.0.attn"].n_heads == 2
    with head_masks(pruned, run.masks):  # the masks apply to the pruned model
        pruned(data.src[:3], data.tgt[:3, :-1])
