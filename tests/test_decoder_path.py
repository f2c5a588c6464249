"""The decoder path wherever the course runs: a left-padded prompt decodes as the same prompt
alone, rotary angles never need float64 on the model's device, the lowest accepted torch
zeroes fully masked rows in its fused kernel, ``convert_decoder`` regroups directly, and a
cache refuses a batch of another size."""

import re
from pathlib import Path

import pytest
import torch
from support.fake_device import FAKE, FakeAccelerator

from multihead.core.attention import GroupedQueryAttention, MultiHeadAttention
from multihead.core.cache import KVCache
from multihead.core.convert import convert_decoder, regroup
from multihead.core.decoder import Decoder
from multihead.core.latent import LatentAttention
from multihead.core.rotary import rotate

ROOT = Path(__file__).resolve().parents[1]
VOCAB, MAX_LEN = 13, 16
SCHEMES = ("learned", "sinusoidal", "rotary", "none")


def _decoder(positions, **kw):
    torch.manual_seed(0)
    return Decoder(VOCAB, MAX_LEN, 16, 2, 4, positions=positions, **kw).double().eval()


@pytest.mark.parametrize("positions", SCHEMES)
@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_a_left_padded_prompt_decodes_as_the_prompt_alone(positions, n_kv_heads):
    model = _decoder(positions, n_kv_heads=n_kv_heads)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(VOCAB, (1, n), generator=g) for n in (6, 4, 2)]
    batch = torch.zeros(3, 6, dtype=torch.long)
    pad = torch.ones(3, 6, dtype=torch.bool)
    for i, p in enumerate(prompts):  # left padding: each prompt ends at the last column
        batch[i, 6 - p.shape[1] :], pad[i, 6 - p.shape[1] :] = p, False
    logits = model(batch, pad)
    generated = model.generate(batch, 5, key_padding_mask=pad)
    for i, p in enumerate(prompts):
        alone = model(p)[0]
        gap = (logits[i, 6 - p.shape[1] :] - alone).abs().max()
        assert gap < 1e-10, f"prompt {i}: padded logits differ by {gap:.2e}"
        assert torch.equal(generated[i, 6:], model.generate(p, 5)[0, p.shape[1] :]), i
    # the same through the cache, one token at a time after the prompt
    cache = model.new_cache()
    model(batch[:, :4], pad[:, :4], cache)
    stepped = torch.cat([model(batch[:, j : j + 1], pad[:, j : j + 1], cache) for j in (4, 5)], 1)
    assert (stepped - logits[:, 4:]).abs().max() < 1e-10


def test_rotary_angles_are_never_float64_on_the_device():
    # MPS has no float64: the angles are computed on the CPU, then cast and moved
    with FakeAccelerator() as fake:
        x = torch.randn(2, 3, 5, 8).to(FAKE)
        out = rotate(x, torch.arange(5).to(FAKE), base=100.0).cpu()
        layer = GroupedQueryAttention(16, 4, 2, rotary=True).to(FAKE)
        layer(torch.randn(2, 5, 16).to(FAKE), causal=True)
        x = x.cpu()
    assert not fake.float64, f"float64 tensors on the device: {fake.float64}"
    assert torch.equal(out, rotate(x, torch.arange(5), base=100.0))


def test_the_lowest_torch_accepted_zeroes_fully_masked_rows_in_its_fused_kernel():
    # SDPA returns zeros for a query that sees no key only since torch 2.5 (pytorch PR
    # 133882, "call _safe_softmax from SDPA"); before, NaN, which left padding under a causal
    # mask produces and the next layer spreads to every query. 2.5 also brings enable_gqa.
    floor = re.search(r'"torch>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert tuple(map(int, floor.split("."))) >= (2, 5), f"pyproject.toml accepts torch {floor}"
    q = torch.randn(1, 1, 2, 4)
    blocked_all = torch.tensor([[False, False], [True, True]])  # "may attend": row 0 sees none
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=blocked_all)
    assert (out[0, 0, 0] == 0).all()


def test_convert_decoder_regroups_directly_and_keeps_every_setting():
    model = _decoder("rotary", n_kv_heads=4)
    for layer in model.layers:
        layer.attn.materialize = True
    pooled = convert_decoder(model, 2)
    for old, new in zip(model.layers, pooled.layers, strict=True):
        assert new.attn.materialize and new.attn.rotary and new.attn.n_kv_heads == 2
        for name in ("W_K", "W_V", "b_K", "b_V"):
            want = getattr(old.attn, name).unflatten(0, (2, 2)).mean(1)
            assert torch.equal(getattr(new.attn, name), want), name
        assert torch.equal(new.attn.W_Q, old.attn.W_Q)
    # from fewer key/value heads to more: each old head is copied into its new group
    wider = convert_decoder(convert_decoder(model, 1, how="first"), 2)
    W_K = model.layers[0].attn.W_K[0]
    assert all(torch.equal(wider.layers[0].attn.W_K[i], W_K) for i in range(2))
    tokens = torch.randint(VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    assert (convert_decoder(model, 4)(tokens) - model(tokens)).abs().max() < 1e-12


def test_a_cache_refuses_a_batch_of_another_size():
    cache = KVCache()
    cache.append(k=torch.zeros(2, 1, 3, 4), v=torch.zeros(2, 1, 3, 4))
    with pytest.raises(ValueError, match=r"KVCache.*batch of 2.*batch of 3"):
        cache.append(k=torch.zeros(3, 1, 1, 4), v=torch.zeros(3, 1, 1, 4))
    model = _decoder("learned")
    cache = model.new_cache()
    model(torch.zeros(2, 3, dtype=torch.long), None, cache)
    with pytest.raises(ValueError, match=r"KVCache.*batch of 2.*batch of 1"):
        model(torch.zeros(1, 1, dtype=torch.long), None, cache)


def test_regroup_pools_the_key_value_heads_each_new_group_reads():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 8, 4, rotary=True, rope_base=500.0).double()
    with torch.no_grad():
        gqa.b_K.normal_()
    gqa.materialize = True
    for n_kv, how in ((2, "mean"), (1, "first"), (4, "mean"), (8, "first")):
        new = regroup(gqa, n_kv, how)
        assert new.n_kv_heads == n_kv and new.materialize and new.rope_base == 500.0
        for name in ("W_K", "W_V", "b_K", "b_V"):
            read = getattr(gqa, name).repeat_interleave(2, dim=0)  # the head query h reads
            groups = read.unflatten(0, (n_kv, -1))
            want = groups.mean(1) if how == "mean" else groups[:, 0]
            assert torch.allclose(getattr(new, name), want, atol=1e-15), (n_kv, name)
        for name in ("W_Q", "b_Q", "W_O", "b_O", "head_mask"):
            assert torch.equal(getattr(new, name), getattr(gqa, name))
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    for n_kv in (4, 8):  # as many heads as before, or each copied: the same layer
        assert (regroup(gqa, n_kv)(x, causal=True) - gqa(x, causal=True)).abs().max() < 1e-12
    assert gqa.n_kv_heads == 4 and gqa.W_K.shape[0] == 4  # the original is untouched
    with pytest.raises(ValueError, match="n_kv_heads"):
        regroup(gqa, 3)
    with pytest.raises(ValueError, match="how"):
        regroup(gqa, 2, how="max")
    torch.manual_seed(1)
    fresh = regroup(gqa, 2, how="random")  # queries and outputs kept, keys and values drawn
    torch.manual_seed(1)
    again = regroup(gqa, 2, how="random")
    assert torch.equal(fresh.W_K, again.W_K) and torch.equal(fresh.W_Q, gqa.W_Q)
    assert not torch.allclose(fresh.W_K, gqa.W_K.unflatten(0, (2, 2)).mean(1))
    assert (fresh.b_K == 0).all() and fresh.W_V.shape == (2, 16, 2)
    bound = (6 / (16 + 2 * 2)) ** 0.5  # Xavier, as the layer's own initialisation
    assert fresh.W_K.abs().max() <= bound and fresh.W_K.std() > bound / 4
    with pytest.raises(TypeError, match="layer"):
        regroup(LatentAttention(16, 4, 6), 2)
    assert type(regroup(MultiHeadAttention(16, 4), 2)) is GroupedQueryAttention
