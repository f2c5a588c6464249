"""The decoder's options for chapter 11: where positions come from, attention-only layers,
no LayerNorm, and the residual-stream hook point."""

import pytest
import torch
import torch.nn.functional as F

from multihead.core.config import TrainConfig
from multihead.core.decoder import Decoder, SwiGLU, convert_decoder
from multihead.core.hooks import run_with_cache
from multihead.core.model import count_parameters
from multihead.core.positions import sinusoidal_positions
from multihead.core.train import train
from multihead.tasks.repeats import RepeatTask

VOCAB, MAX_LEN = 13, 16
OPTIONS = {
    "learned": {},
    "sinusoidal": {"positions": "sinusoidal"},
    "rotary": {"positions": "rotary"},
    "none": {"positions": "none"},
    "rotary-gqa": {"positions": "rotary", "n_kv_heads": 2},
    "attention-only": {"mlp": False},
    "no-norm": {"norm": False},
    "circuits": {"positions": "none", "mlp": False, "norm": False},
    "llama": {
        "positions": "rotary",
        "n_kv_heads": 2,
        "mlp": "swiglu",
        "norm": "rms",
        "bias": False,
        "tie_embeddings": True,
        "rope_base": 500.0,
    },
}


def _decoder(dtype=torch.float64, **kw):
    torch.manual_seed(0)
    return Decoder(VOCAB, MAX_LEN, 16, 2, 4, **kw).to(dtype).eval()


def _tokens(batch=2, seq=9):
    torch.manual_seed(1)
    tokens = torch.randint(VOCAB, (batch, seq))
    pad = torch.zeros(batch, seq, dtype=torch.bool)
    pad[0, :3] = True  # left padding in the first example
    return tokens, pad


@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.parametrize("blocks", [[1] * 9, [4, 1, 4]], ids=["1s", "mixed"])
def test_every_option_decodes_with_a_cache_exactly(option, blocks):
    model = _decoder(**OPTIONS[option])
    tokens, pad = _tokens()
    full = model(tokens, pad)
    cache, out, start = model.new_cache(), [], 0
    for size in blocks:
        out.append(model(tokens[:, start : start + size], pad[:, start : start + size], cache))
        start += size
    assert (torch.cat(out, dim=1) - full).abs().max() < 1e-10
    generated = model.float().generate(tokens[:, :4], 5)
    assert torch.equal(generated, model.generate(tokens[:, :4], 5, use_cache=False))


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_option_trains(option):
    task = RepeatTask(vocab_size=VOCAB, segment=6, prefix=2)
    torch.manual_seed(0)
    model = Decoder(VOCAB, MAX_LEN, 16, 2, 4, **OPTIONS[option])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = TrainConfig(steps=4, batch_size=8, lr=1e-2, warmup=1)
    history = train(model, task.sample, config, device=torch.device("cpu"), progress=False)
    assert len(history.loss) == 4 and all(map(torch.isfinite, torch.tensor(history.loss)))
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters() if "W_" in n)


def test_what_each_option_builds():
    learned, sinusoidal = _decoder(), _decoder(positions="sinusoidal")
    assert count_parameters(learned) - count_parameters(sinusoidal) == MAX_LEN * 16
    assert "pos_table" not in sinusoidal.state_dict()  # fixed, rebuilt, never trained
    assert not any("pos" in n for n, _ in sinusoidal.named_parameters())
    table = sinusoidal_positions(MAX_LEN, 16)  # built in the default dtype, then cast
    assert torch.equal(sinusoidal.pos_table, table.double())
    for positions in ("rotary", "none"):
        model = _decoder(positions=positions)
        assert not hasattr(model, "pos") and not hasattr(model, "pos_table")
        assert all(layer.attn.rotary == (positions == "rotary") for layer in model.layers)
    assert not any(layer.attn.rotary for layer in learned.layers)
    attention_only = _decoder(mlp=False)
    assert not any(".ff." in n or ".ln2." in n for n, _ in attention_only.named_parameters())
    assert all(layer.ff is None for layer in attention_only.layers)
    no_norm = _decoder(norm=False)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in no_norm.modules())
    assert count_parameters(learned) - count_parameters(no_norm) == (2 * 2 + 1) * 2 * 16


def test_what_the_llama_settings_build():
    model = _decoder(**OPTIONS["llama"])
    names = [n for n, _ in model.named_parameters()]
    assert not any(n.endswith("bias") or ".b_" in n for n in names), names
    assert model.unembed.weight is model.embed.weight and "unembed.weight" not in names
    assert all(isinstance(layer.ff, SwiGLU) for layer in model.layers)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.RMSNorm)]
    assert len(norms) == 2 * 2 + 1 and all(m.eps == 1e-5 for m in norms)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    assert all(layer.attn.rope_base == 500.0 for layer in model.layers)
    per_layer = 16 * 4 * 4 + 2 * 16 * 2 * 4 + 4 * 4 * 16 + 3 * 16 * 64 + 2 * 16  # attn, MLP, norms
    assert count_parameters(model) == VOCAB * 16 + 2 * per_layer + 16
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    ff = model.layers[0].ff
    assert torch.allclose(ff(x), ff.down(F.silu(ff.gate(x)) * ff.up(x)))
    rms = model.layers[0].ln1
    with torch.no_grad():
        rms.weight.normal_()
    want = x / (x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * rms.weight
    assert torch.allclose(rms(x), want, atol=1e-12)
    gelu = _decoder(bias=False, norm_eps=1e-6)
    assert gelu.layers[0].ff.fc1.bias is None and gelu.unembed.bias is None
    assert gelu.layers[0].ln1.eps == 1e-6


def test_positions_count_real_tokens_only():
    # one token whose past is only padding sits at position 0 under every scheme, as alone
    # (positions come from the padding mask, as transformers derives position_ids)
    tokens = torch.randint(VOCAB, (1, 4), generator=torch.Generator().manual_seed(2))
    for positions in ("learned", "sinusoidal", "rotary", "none"):
        model = _decoder(positions=positions)
        cache = model.new_cache()
        model(tokens[:, :3], torch.ones(1, 3, dtype=torch.bool), cache)
        moved = model(tokens[:, 3:], None, cache)
        assert (moved - model(tokens[:, 3:])).abs().max() < 1e-12, positions
        shown = model.token_positions(tokens, torch.tensor([[True, True, False, False]]), None)
        assert shown.tolist() == [[0, 0, 0, 1]]
        assert model.token_positions(tokens, None, None) is None  # nothing padded


def test_resid_pre_is_the_residual_stream_entering_each_layer():
    model = _decoder(mlp=False, norm=False, positions="none")
    tokens, pad = _tokens()
    _, cache = run_with_cache(model, tokens, pad)
    assert torch.equal(cache["layers.0.resid_pre"], model.embed(tokens))
    layer0 = model.layers[0]
    after = cache["layers.0.resid_pre"] + layer0.attn(
        cache["layers.0.resid_pre"], key_padding_mask=pad, causal=True
    )
    assert (cache["layers.1.resid_pre"] - after).abs().max() < 1e-12
    assert cache["layers.1.resid_pre"].shape == (2, 9, 16)


def test_convert_decoder_keeps_rotary_positions():
    model = _decoder(positions="rotary")
    tokens, _ = _tokens()
    same = convert_decoder(model, 4)
    assert all(layer.attn.rotary for layer in same.layers)
    assert (same(tokens) - model(tokens)).abs().max() < 1e-12
    pooled = convert_decoder(model, 2)
    assert all(layer.attn.rotary and layer.attn.n_kv_heads == 2 for layer in pooled.layers)
    assert all(layer.attn.rotary for layer in model.layers)  # the original is untouched


def test_bad_options_name_themselves():
    with pytest.raises(ValueError, match="positions"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, positions="alibi")
    with pytest.raises(ValueError, match="positions"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, positions="rotary", d_latent=6)
    with pytest.raises(ValueError, match="d_head"):
        Decoder(VOCAB, MAX_LEN, 15, 2, 3, positions="rotary")  # d_head = 5
    with pytest.raises(ValueError, match="d_model"):
        Decoder(VOCAB, MAX_LEN, 15, 2, 3, positions="sinusoidal")
    with pytest.raises(ValueError, match="d_ff"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, mlp=False, d_ff=32)
    with pytest.raises(TypeError, match="mlp"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, mlp=0)
    with pytest.raises(TypeError, match="norm"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, norm="pre")
    with pytest.raises(TypeError, match="'swiglu'"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, mlp="geglu")
    with pytest.raises(ValueError, match="norm_eps"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, norm_eps=0)
    with pytest.raises(TypeError, match="bias"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, bias=None)
    with pytest.raises(ValueError, match="bias"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, d_latent=6, bias=False)
    with pytest.raises(TypeError, match="tie_embeddings"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, tie_embeddings=1)
    with pytest.raises(ValueError, match="rope_base"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, positions="rotary", rope_base=-1.0)
    for positions in ("learned", "sinusoidal"):
        model = _decoder(positions=positions)
        with pytest.raises(ValueError, match="max_len"):
            model(torch.zeros(1, MAX_LEN + 1, dtype=torch.long))
        cache = model.new_cache()
        model(torch.zeros(1, 10, dtype=torch.long), None, cache)
        with pytest.raises(ValueError, match="max_len"):
            model(torch.zeros(1, 7, dtype=torch.long), None, cache)
