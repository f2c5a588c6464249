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


def test_gates_together_equal_each_run_alone(monkeypatch):
    from multihead.interventions.gates import fine_tune_with_gates, fine_tune_with_gates_together
    from multihead.tasks import translation
    from multihead.tasks.translation import SEQ2SEQ_PAD, sampler, seq2seq_loss, seq2seq_seed_loss

    grouped = []
    length_groups = translation.length_groups

    def counting(*args):  # the gates are drawn once per step, so the batch may be split
        grouped.append(args[2])
        return length_groups(*args)

    monkeypatch.setattr(translation, "length_groups", counting)

    data, base = _translation()
    sample, other = sampler(data), _translation(seed=5)[1]
    models, lams, seeds = [base, base, other], [0.0, 0.5, 0.5], [0, 0, 3]
    before = copy.deepcopy(base.state_dict())
    together = fine_tune_with_gates_together(
        models,
        sample,
        seq2seq_seed_loss,
        lams=lams,
        seeds=seeds,
        steps=6,
        batch_size=44,
        gate_lr=0.3,
        pad=SEQ2SEQ_PAD,
        progress=False,
    )  # fmt: skip  (44 rows: the loss takes them in two length groups)
    assert grouped == [2] * 6  # two length groups at every step
    assert all(torch.equal(t, base.state_dict()[n]) for n, t in before.items())  # inputs kept
    for model, lam, seed, (tuned, run) in zip(models, lams, seeds, together, strict=True):
        alone = copy.deepcopy(model)
        ref = fine_tune_with_gates(
            alone, sample, seq2seq_loss, lam=lam, steps=6, batch_size=44, gate_lr=0.3,
            seed=seed, progress=False,
        )  # fmt: skip
        assert torch.allclose(torch.tensor(run.task_loss), torch.tensor(ref.task_loss), atol=1e-5)
        assert torch.allclose(
            torch.tensor(run.expected_heads), torch.tensor(ref.expected_heads), atol=1e-5
        )
        for n in ref.log_alpha:
            assert torch.allclose(run.log_alpha[n], ref.log_alpha[n], atol=1e-5)
            assert torch.equal(run.masks[n], ref.masks[n])
        for n, t in alone.state_dict().items():
            assert torch.allclose(tuned.state_dict()[n], t, atol=1e-5), n
    # the penalty moved the gates: the two runs of one model differ
    assert together[0][1].expected_heads[-1] > together[1][1].expected_heads[-1]


def test_gates_together_bad_input():
    from multihead.interventions.gates import fine_tune_with_gates_together
    from multihead.tasks.translation import sampler, seq2seq_seed_loss

    data, m = _translation()
    sample = sampler(data)
    kw = {"steps": 1, "progress": False}
    with pytest.raises(TypeError, match="models"):
        fine_tune_with_gates_together(m, sample, seq2seq_seed_loss, lams=[0.1], seeds=[0], **kw)
    with pytest.raises(ValueError, match="lams must be a list of 2"):
        fine_tune_with_gates_together(
            [m, m], sample, seq2seq_seed_loss, lams=[0.1], seeds=[0, 1], **kw
        )
    with pytest.raises(ValueError, match=r"lams\[1\]"):
        fine_tune_with_gates_together(
            [m, m], sample, seq2seq_seed_loss, lams=[0.1, -1], seeds=[0, 1], **kw
        )
    with pytest.raises(ValueError, match=r"seeds\[0\]"):
        fine_tune_with_gates_together([m], sample, seq2seq_seed_loss, lams=[0.1], seeds=[-2], **kw)
    with pytest.raises(ValueError, match="steps"):
        fine_tune_with_gates_together(
            [m], sample, seq2seq_seed_loss, lams=[0.1], seeds=[0], steps=0
        )
    cfg = ModelConfig(vocab_size=9, n_classes=10, d_model=16, n_heads=4, n_layers=1, dropout=0.1)
    with pytest.raises(ValueError, match="dropout"):
        fine_tune_with_gates_together(
            [EncoderDecoder(cfg)], sample, seq2seq_seed_loss, lams=[0.1], seeds=[0], **kw
        )


def test_gates_together_on_a_pruned_model():
    from multihead.interventions.gates import fine_tune_with_gates, fine_tune_with_gates_together
    from multihead.interventions.pruning import prune_model
    from multihead.tasks.translation import SEQ2SEQ_PAD, sampler, seq2seq_loss, seq2seq_seed_loss

    data, model = _translation()
    sample = sampler(data)
    pruned = prune_model(model, {"encoder.layers.0.attn": torch.tensor([1.0, 0, 0, 1])})
    (tuned, run), _ = fine_tune_with_gates_together(
        [pruned, pruned], sample, seq2seq_seed_loss, lams=[0.2, 0.0], seeds=[2, 2], steps=3,
        batch_size=44, pad=SEQ2SEQ_PAD, progress=False,
    )  # fmt: skip
    assert run.log_alpha["encoder.layers.0.attn"].shape == (2,)
    alone = copy.deepcopy(pruned)
    ref = fine_tune_with_gates(
        alone, sample, seq2seq_loss, lam=0.2, steps=3, batch_size=44, seed=2, progress=False
    )
    assert torch.allclose(torch.tensor(run.task_loss), torch.tensor(ref.task_loss), atol=1e-5)
    for n in ref.log_alpha:
        assert torch.allclose(run.log_alpha[n], ref.log_alpha[n], atol=1e-5)
