import copy

import pytest
import torch

from multihead.core.config import ModelConfig
from multihead.core.model import EncoderDecoder
from multihead.interventions.ablation import head_masks
from multihead.interventions.relevance import (
    BIASES,
    conservation,
    encoder_decoder_cuts,
    head_relevance,
    lrp_rules,
    relevance,
    top_logits,
)
from multihead.tasks.translation import PAD_ID, Encoded, batches, run_batch

INPUTS = ["encoder.embed", "encoder.pos", "decoder.embed", "decoder.pos"]
ENCODER = ["encoder.layers.0.attn", "encoder.layers.1.attn"]


def _model(seed: int = 0, norm: str = "pre") -> EncoderDecoder:
    """A small encoder-decoder in float64 with random (non-zero) biases and norm shifts."""
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=9, n_classes=10, d_model=16, n_heads=4, n_layers=2, n_decoder_layers=2,
        max_len=12, norm=norm,
    )  # fmt: skip
    model = EncoderDecoder(cfg).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.rpartition(".")[2] in BIASES:
                p.normal_(0, 0.3)
            elif name.endswith("norms.0.weight") or name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model


def _batch(n: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(2, 9, (n, 7), generator=gen)
    tgt = torch.randint(2, 10, (n, 8), generator=gen)
    tgt[:, 0] = 1  # <s>
    for i in range(n):  # uneven lengths, padded with 0
        src[i, 4 + i % 4 :] = 0
        tgt[i, 5 + i % 3 :] = 0
    return src, tgt


def _explained(logits, batch):
    return top_logits(logits, batch[1][:, 1:] != PAD_ID)


def _run(model, batch, eps=0.0, capture=()):
    return relevance(model, batch, run_batch, _explained, eps=eps, capture=capture)


def test_rules_leave_the_forward_values_unchanged():
    model, batch = _model(), _batch()
    with torch.no_grad():
        plain = run_batch(model, batch)
    with lrp_rules(model, eps=0.1):
        ruled = run_batch(model, batch)
    assert torch.allclose(plain, ruled, atol=1e-10)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("eps", [0.0, 0.05])
def test_relevance_is_conserved_over_every_cut(norm, eps):
    model, batch = _model(norm=norm), _batch()
    cuts = encoder_decoder_cuts(model)
    assert list(cuts) == ["embeddings", "after encoder layer 0", "after encoder layer 1", "logits"]
    capture = sorted({p for paths, _ in cuts.values() for p in paths})
    r = _run(model, batch, eps=eps, capture=capture)
    f = r.output
    balance = conservation(r, cuts)
    for on, above in balance.values():
        assert on + above == pytest.approx(f, rel=1e-10)
    assert balance["logits"] == (pytest.approx(f, rel=1e-10), 0)  # the logits explain f
    # At the inputs, everything else went to the biases and stabilisers.
    taken = sum(r.bias.values()) + sum(r.absorbed.values())
    assert balance["embeddings"][1] == pytest.approx(taken)
    assert (sum(r.absorbed.values()) != 0) == (eps > 0)
    # Layer to layer: the cut below has less, by what encoder layer 1 takes.
    layer1 = sum(v for n, v in {**r.bias, **r.absorbed}.items() if n.startswith("encoder.layers.1"))
    on0, on1 = balance["after encoder layer 0"][0], balance["after encoder layer 1"][0]
    assert on1 - on0 == pytest.approx(layer1, rel=1e-8, abs=1e-10)


def test_without_biases_and_epsilon_relevance_is_exactly_conserved():
    model, batch = _model(), _batch()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.rpartition(".")[2] in BIASES:
                p.zero_()
    r = _run(model, batch, capture=INPUTS + ["encoder.layers.0", "encoder.layers.1"])
    stream = [r.at[f"encoder.layers.{i}"].sum().item() for i in range(2)]
    decoder_in = sum(r.at[p].sum().item() for p in INPUTS[2:])
    assert stream[0] == pytest.approx(stream[1], rel=1e-12)
    assert stream[1] + decoder_in == pytest.approx(r.output, rel=1e-12)
    assert all(v == 0 for v in r.bias.values())


def test_plain_gradient_times_input_is_not_conserved():
    """The rules matter: without them gradient x input over the inputs misses f."""
    model, batch = _model(), _batch()
    cuts = encoder_decoder_cuts(model)
    capture = sorted({p for paths, _ in cuts.values() for p in paths})
    plain = relevance(model, batch, run_batch, _explained, capture=capture, rules=False)
    assert plain.absorbed == {}
    on, above = conservation(plain, cuts)["embeddings"]
    assert abs(on + above - plain.output) > 1e-3 * abs(plain.output)


def test_head_relevance_sums_heads_and_normalises():
    model, data = _model(), Encoded(*_batch(12))
    raw = head_relevance(model, batches(data, 5), run_batch, _explained, normalize=False)
    assert set(raw) == set(ENCODER) | {
        f"decoder.layers.{i}.{k}" for i in range(2) for k in ("attn", "cross_attn")
    }
    assert all(v.shape == (4,) for v in raw.values())
    # Batching does not change the per-token mean.
    whole = head_relevance(model, batches(data, 12), run_batch, _explained, normalize=False)
    for name in raw:
        assert torch.allclose(raw[name], whole[name], atol=1e-5)
    # The relevance of one head is what relevance() finds at its output z.
    src, tgt = data.src, data.tgt
    r = _run(model, (src, tgt), capture=["encoder.layers.1.attn.z"])
    per_head = r.at["encoder.layers.1.attn.z"].sum(dim=(0, 2, 3)) / r.count
    assert torch.allclose(whole["encoder.layers.1.attn"], per_head.float(), atol=1e-5)
    norm = head_relevance(model, batches(data, 12), run_batch, _explained)
    for name in norm:
        assert norm[name].abs().sum().item() == pytest.approx(1.0, rel=1e-5)
        assert torch.allclose(norm[name], raw[name] / raw[name].abs().sum(), atol=1e-5)


def test_a_masked_head_has_no_relevance_and_the_model_is_restored():
    model, data = _model(), Encoded(*_batch(12))
    before = copy.deepcopy(model.state_dict())
    model.train()
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0])
    with head_masks(model, {"encoder.layers.0.attn": mask}):
        r = head_relevance(model, batches(data), run_batch, _explained, normalize=False)
    assert r["encoder.layers.0.attn"][1] == 0
    assert model.training  # mode restored
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not any(m.materialize for m in model.modules() if hasattr(m, "materialize"))
    # The hooks are gone: the pattern is no longer a constant for an ordinary backward.
    model.eval()
    run_batch(model, _batch()).sum().backward()
    assert model.encoder.layers[0].attn.W_Q.grad.abs().sum() > 0


def test_bad_input_is_rejected_with_the_argument_named():
    model, batch = _model(), _batch()
    with pytest.raises(ValueError, match="eps"):
        _run(model, batch, eps=-0.1)
    with pytest.raises(TypeError, match="eps"):
        _run(model, batch, eps="small")
    with pytest.raises(TypeError, match="forward"):
        relevance(model, batch, "run_batch", _explained)
    with pytest.raises(TypeError, match="explained"):
        relevance(model, batch, run_batch, None)
    with pytest.raises(ValueError, match="capture"):
        _run(model, batch, capture=["encoder.layers.7"])
    with pytest.raises(TypeError, match="capture"):
        _run(model, batch, capture="encoder.layers.0")
    with pytest.raises(ValueError, match="explained"):
        relevance(model, batch, run_batch, lambda logits, b: logits.amax(-1))
    with pytest.raises(TypeError, match="model"):
        relevance("model", batch, run_batch, _explained)
    with pytest.raises(ValueError, match="eval mode"), lrp_rules(model.train()):
        pass
    model.eval()
    with pytest.raises(ValueError, match="keep"):
        top_logits(torch.zeros(2, 3, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="logits"):
        top_logits(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="batches"):
        head_relevance(model, [], run_batch, _explained)
    with pytest.raises(TypeError, match="EncoderDecoder"):
        encoder_decoder_cuts(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="Relevance"):
        conservation({}, encoder_decoder_cuts(model))
    with pytest.raises(ValueError, match="capture"):
        conservation(_run(model, batch), encoder_decoder_cuts(model))
    with pytest.raises(TypeError, match="rules"):
        relevance(model, batch, run_batch, _explained, rules="no")
    with pytest.raises(TypeError, match="normalize"):
        head_relevance(model, [batch], run_batch, _explained, normalize=1)
