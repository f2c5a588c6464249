import pytest
import torch

from multihead.core.config import ModelConfig
from multihead.core.hooks import run_with_cache
from multihead.core.model import (
    EncoderDecoder,
    EncoderModel,
    attention_modules,
    count_parameters,
    init_model,
)


def _cfg(**kw):
    base = dict(vocab_size=11, d_model=16, n_heads=4, n_layers=2, n_decoder_layers=2, max_len=10)
    base.update(kw)
    return ModelConfig(**base)


def test_encoder_model_shapes_and_cache_keys():
    model = EncoderModel(_cfg(n_classes=5))
    logits, cache = run_with_cache(model, torch.randint(11, (3, 7)))
    assert logits.shape == (3, 7, 5)
    assert cache["encoder.layers.1.attn.pattern"].shape == (3, 4, 7, 7)


def test_encoder_decoder_shapes_and_paths():
    model = EncoderDecoder(_cfg(n_classes=9))
    src, tgt = torch.randint(11, (2, 6)), torch.randint(9, (2, 4))
    logits, cache = run_with_cache(model, src, tgt)
    assert logits.shape == (2, 4, 9)
    assert cache["decoder.layers.0.attn.pattern"].shape == (2, 4, 4, 4)
    assert cache["decoder.layers.0.cross_attn.pattern"].shape == (2, 4, 4, 6)
    names = [n for n, _ in attention_modules(model)]
    assert names[:2] == ["encoder.layers.0.attn", "encoder.layers.1.attn"]
    assert "decoder.layers.1.cross_attn" in names
    assert model.greedy_decode(src, bos=0, max_len=5).shape == (2, 5)


def test_decoder_is_causal():
    torch.manual_seed(0)
    model = EncoderDecoder(_cfg()).eval()
    src = torch.randint(11, (1, 6))
    tgt = torch.randint(11, (1, 5))
    changed = tgt.clone()
    changed[0, 4] = (tgt[0, 4] + 1) % 11
    a, b = model(src, tgt), model(src, changed)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)  # the future does not leak
    assert not torch.allclose(a[:, 4], b[:, 4])


def test_padding_in_source_is_ignored():
    torch.manual_seed(0)
    model = EncoderDecoder(_cfg()).eval()
    src = torch.randint(11, (1, 6))
    tgt = torch.randint(11, (1, 3))
    pad = torch.tensor([[False] * 4 + [True] * 2])
    other = src.clone()
    other[0, 4:] = (src[0, 4:] + 3) % 11
    assert torch.allclose(model(src, tgt, pad), model(other, tgt, pad), atol=1e-6)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_determinism_under_a_seed(norm):
    torch.manual_seed(3)
    a = EncoderModel(_cfg(norm=norm))
    torch.manual_seed(3)
    b = EncoderModel(_cfg(norm=norm))
    x = torch.randint(11, (2, 5))
    assert torch.equal(a(x), b(x))


def test_init_schemes():
    torch.manual_seed(0)
    shared = EncoderModel(_cfg(init="shared_heads"))
    for _, attn in attention_modules(shared):
        for W in (attn.W_Q, attn.W_K, attn.W_V, attn.W_O):
            assert torch.equal(W, W[:1].expand_as(W))
    noisy = EncoderModel(_cfg(init="shared_heads", init_epsilon=0.1))
    W = attention_modules(noisy)[0][1].W_Q
    assert not torch.equal(W[0], W[1])
    torch.manual_seed(0)
    xavier = EncoderModel(_cfg())
    torch.manual_seed(0)
    ds = EncoderModel(_cfg(init="ds_init"))
    torch.manual_seed(0)
    small = EncoderModel(_cfg(init="scaled", init_gain=0.5))
    for layer in range(2):
        x_w = xavier.encoder.layers[layer].attn.W_Q
        assert torch.allclose(ds.encoder.layers[layer].attn.W_Q, x_w / (layer + 1) ** 0.5)
        assert torch.allclose(small.encoder.layers[layer].attn.W_Q, 0.5 * x_w)


def test_bad_input():
    with pytest.raises(TypeError, match="cfg"):
        EncoderModel({"vocab_size": 3})
    model = EncoderModel(_cfg())
    with pytest.raises(TypeError, match="tokens"):
        model(torch.randn(2, 5))
    with pytest.raises(ValueError, match="max_len=10"):
        model(torch.randint(11, (2, 12)))
    with pytest.raises(ValueError, match="outside"):
        model(torch.full((2, 3), 11))
    with pytest.raises(ValueError, match=r"\(batch, seq\)"):
        model(torch.randint(11, (5,)))
    with pytest.raises(ValueError, match="scheme"):
        init_model(model, "orthogonal")
    with pytest.raises(ValueError, match="gain"):
        init_model(model, "scaled", gain=-1)
    with pytest.raises(ValueError, match="epsilon"):
        init_model(model, "shared_heads", epsilon=-0.1)


def test_count_parameters():
    model = EncoderModel(_cfg())
    assert count_parameters(model) == sum(p.numel() for p in model.parameters())
