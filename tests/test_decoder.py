import pytest
import torch

from multihead.analysis.cost import kv_cache_bytes, latent_cache_bytes
from multihead.core.attention import GroupedQueryAttention
from multihead.core.config import TrainConfig
from multihead.core.decoder import Decoder
from multihead.core.hooks import run_with_cache, stack_layers
from multihead.core.latent import LatentAttention
from multihead.core.model import count_parameters
from multihead.core.train import IGNORE, token_loss, train

VOCAB, MAX_LEN = 13, 16
KINDS = {"gqa": {"n_kv_heads": 2}, "mqa": {"n_kv_heads": 1}, "mla": {"d_latent": 6}}


def _decoder(kind="gqa", dtype=torch.float64, absorb=False):
    torch.manual_seed(0)
    model = Decoder(VOCAB, MAX_LEN, 16, 2, 4, **KINDS[kind]).to(dtype).eval()
    for layer in model.layers:
        if absorb:
            layer.attn.absorb = True
    return model


def _tokens(batch=2, seq=9):
    torch.manual_seed(1)
    tokens = torch.randint(VOCAB, (batch, seq))
    pad = torch.zeros(batch, seq, dtype=torch.bool)
    pad[0, :3] = True  # left padding: the first example starts three tokens later
    return tokens, pad


def _decode(model, tokens, pad, blocks):
    """Feed ``tokens`` through a cache in blocks of the given sizes; their logits in order."""
    cache, out, start = model.new_cache(), [], 0
    for size in blocks:
        out.append(model(tokens[:, start : start + size], pad[:, start : start + size], cache))
        start += size
    return torch.cat(out, dim=1), cache


@pytest.mark.parametrize("kind,absorb", [("gqa", False), ("mqa", False), ("mla", False),
                                         ("mla", True)])  # fmt: skip
@pytest.mark.parametrize("blocks", [[1] * 9, [4, 1, 3, 1], [2, 7]], ids=["1s", "mixed", "2+7"])
def test_cached_decoding_equals_the_full_pass(kind, absorb, blocks):
    model = _decoder(kind, absorb=absorb)
    tokens, pad = _tokens()
    full = model(tokens, pad)
    cached, cache = _decode(model, tokens, pad, blocks)
    assert (cached - full).abs().max() < 1e-10  # float64: only roundoff differs
    assert all(c.length == 9 and torch.equal(c.key_padding_mask, pad) for c in cache)


def test_the_model_is_causal_and_padding_is_ignored():
    model = _decoder()
    tokens, pad = _tokens()
    changed = tokens.clone()
    changed[:, 6] = (tokens[:, 6] + 1) % VOCAB
    changed[0, 1] = (tokens[0, 1] + 1) % VOCAB  # a padding token
    a, b = model(tokens, pad), model(changed, pad)
    real = ~pad[:, :6]  # the real tokens before the change
    assert (a[:, :6][real] - b[:, :6][real]).abs().max() < 1e-12
    assert (a[:, 6] - b[:, 6]).abs().max() > 1e-3


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_generate_with_and_without_cache_gives_the_same_tokens(kind):
    model = _decoder(kind, dtype=torch.float32)
    tokens, pad = _tokens(seq=5)
    cached = model.generate(tokens, 7, key_padding_mask=pad)
    fresh = model.generate(tokens, 7, use_cache=False, key_padding_mask=pad)
    assert cached.shape == (2, 12) and torch.equal(cached, fresh)
    assert torch.equal(cached[:, :5], tokens)
    assert torch.equal(model.generate(tokens, 3), model.generate(tokens, 3, use_cache=False))
    assert torch.equal(model.generate(tokens, 0), tokens)


def test_the_cache_holds_the_bytes_the_formulas_count():
    tokens, pad = _tokens(batch=3)
    for kind in ("gqa", "mqa"):
        model = _decoder(kind, dtype=torch.float32)
        _, cache = _decode(model, tokens, pad, [5, 4])
        want = kv_cache_bytes(
            n_layers=2, n_kv_heads=KINDS[kind]["n_kv_heads"], d_head=4, n_tokens=9, batch=3,
            bytes_per_value=4,
        )  # fmt: skip
        assert sum(c.nbytes() for c in cache) == want
        shape = model.cache_shape()
        assert want == kv_cache_bytes(**shape, n_tokens=9, batch=3, bytes_per_value=4)
    model = _decoder("mla", dtype=torch.float32)
    _, cache = _decode(model, tokens, pad, [1] * 9)
    want = latent_cache_bytes(n_layers=2, d_latent=6, n_tokens=9, batch=3, bytes_per_value=4)
    assert sum(c.nbytes() for c in cache) == want
    assert want == latent_cache_bytes(**model.cache_shape(), n_tokens=9, batch=3, bytes_per_value=4)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_run_with_cache_records_every_layers_pattern(kind):
    model = _decoder(kind, dtype=torch.float32)
    tokens, pad = _tokens()
    logits, cache = run_with_cache(model, tokens, pad)
    assert (logits - model(tokens, pad)).abs().max() < 1e-5  # explicit path = fused kernel
    patterns = stack_layers(cache, "layers.{}.attn.pattern")
    assert patterns.shape == (2, 2, 4, 9, 9)  # (layers, batch, heads, query, key)
    rows = patterns.sum(-1)
    assert torch.allclose(rows[:, 1], torch.ones_like(rows[:, 1]), atol=1e-6)
    assert torch.allclose(rows[:, 0, :, 3:], torch.ones_like(rows[:, 0, :, 3:]), atol=1e-6)
    assert (rows[:, 0, :, :3] == 0).all()  # a padding query under the causal mask sees no key
    assert (patterns[..., 0, 1:] == 0).all()  # causal
    past = model.new_cache()
    model(tokens[:, :6], pad[:, :6], past)
    _, cache = run_with_cache(model, tokens[:, 6:], None, past)
    assert cache["layers.1.attn.pattern"].shape == (2, 4, 3, 9)


def test_attention_kinds_and_parameter_counts():
    models = {kind: _decoder(kind) for kind in KINDS}
    assert isinstance(models["gqa"].layers[0].attn, GroupedQueryAttention)
    assert models["mqa"].layers[1].attn.n_kv_heads == 1
    assert isinstance(models["mla"].layers[0].attn, LatentAttention)
    mha = Decoder(VOCAB, MAX_LEN, 16, 2, 4)
    assert mha.layers[0].attn.n_kv_heads == 4
    kv_per_head = 2 * (16 * 4 + 4)  # W_K, W_V and biases of one key/value head
    assert count_parameters(mha) - count_parameters(models["mqa"]) == 2 * 3 * kv_per_head


def _copy_batch(batch_size, generator, n=5):
    """Copy task: ``a_1 .. a_n SEP a_1 .. a_n``; the loss counts the copy only."""
    first = torch.randint(1, VOCAB, (batch_size, n), generator=generator)
    seq = torch.cat([first, torch.zeros(batch_size, 1, dtype=torch.long), first], dim=1)
    y = seq[:, 1:].clone()
    y[:, : n] = IGNORE  # fmt: skip
    return seq[:, :-1], y


def test_a_tiny_decoder_learns_to_copy():
    torch.manual_seed(0)
    model = Decoder(VOCAB, MAX_LEN, 32, 2, 4, n_kv_heads=2)
    config = TrainConfig(steps=50, batch_size=32, lr=1e-2, warmup=5)
    history = train(model, _copy_batch, config, device=torch.device("cpu"), progress=False)
    x, y = _copy_batch(64, torch.Generator().manual_seed(5))
    assert token_loss(model, (x, y)).item() < 0.5 * history.loss[0]


def test_bad_arguments_name_themselves():
    model = _decoder(dtype=torch.float32)
    tokens, _ = _tokens()
    with pytest.raises(ValueError, match="tokens"):
        model(tokens + VOCAB)
    with pytest.raises(TypeError, match="tokens"):
        model(tokens.float())
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(1, MAX_LEN + 1, dtype=torch.long))
    cache = model.new_cache()
    model(tokens, None, cache)
    with pytest.raises(ValueError, match="max_len"):
        model(tokens, None, cache)  # 9 + 9 > 16
    with pytest.raises(ValueError, match="cache"):
        model(tokens, None, cache[:1])
    with pytest.raises(TypeError, match="cache"):
        model(tokens, None, cache[0])
    with pytest.raises(ValueError, match="n_new"):
        model.generate(tokens, 8)
    with pytest.raises(TypeError, match="use_cache"):
        model.generate(tokens, 1, use_cache=None)
    with pytest.raises(ValueError, match="d_latent"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, d_latent=0)
    with pytest.raises(ValueError, match="n_kv_heads"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, n_kv_heads=3)
    with pytest.raises(ValueError, match="d_latent"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, n_kv_heads=2, d_latent=6)
    with pytest.raises(ValueError, match="n_layers"):
        Decoder(VOCAB, MAX_LEN, 16, 0, 4)
    with pytest.raises(ValueError, match="dropout"):
        Decoder(VOCAB, MAX_LEN, 16, 2, 4, dropout=1.0)


def test_convert_decoder_pools_groups_and_is_exact_at_full_size():
    from multihead.core.convert import convert_decoder

    torch.manual_seed(0)
    model = Decoder(12, 10, 16, 2, 4).double().eval()
    x = torch.randint(12, (2, 10))
    assert torch.allclose(convert_decoder(model, 4)(x), model(x), atol=1e-12)
    pooled = convert_decoder(model, 2, how="mean")
    first = convert_decoder(model, 2, how="first")
    W_K = model.layers[1].attn.W_K
    assert torch.allclose(pooled.layers[1].attn.W_K, W_K.unflatten(0, (2, 2)).mean(1))
    assert torch.equal(first.layers[1].attn.W_K, W_K[::2])
    assert model.layers[1].attn.n_kv_heads == 4  # the original is untouched
    with pytest.raises(ValueError, match="how"):
        convert_decoder(model, 2, how="max")
    with pytest.raises(ValueError, match="n_kv_heads"):
        convert_decoder(model, 3)
    with pytest.raises(TypeError, match="latent"):
        convert_decoder(Decoder(12, 10, 16, 1, 4, d_latent=4), 2)
    with pytest.raises(TypeError, match="decoder"):
        convert_decoder(model.layers[0], 2)
