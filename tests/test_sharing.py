import pytest
import torch

from multihead.core.attention import GroupedQueryAttention, MultiHeadAttention, attention_pattern
from multihead.core.cache import KVCache
from multihead.core.convert import regroup
from multihead.core.hooks import run_with_cache, run_with_hooks
from multihead.core.latent import LatentAttention
from multihead.core.model import count_parameters
from multihead.core.tiles import tiled_attention

PAD = torch.tensor([[True, True] + [False] * 5, [False] * 7])  # left padding in example 0
MASKS = ({}, {"causal": True}, {"key_padding_mask": PAD}, {"key_padding_mask": PAD, "causal": True})


def _random_biases(module, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():  # non-zero biases exercise more of the code
        for name in ("b_Q", "b_K", "b_V", "b_O"):
            if getattr(module, name, None) is not None:
                getattr(module, name).normal_()
    return module


def _gqa(n_heads=4, n_kv_heads=2, d_model=16, **kw):
    torch.manual_seed(0)
    return _random_biases(GroupedQueryAttention(d_model, n_heads, n_kv_heads, **kw))


def _both_paths(module, x, **kw):
    fused = module(x, **kw)
    explicit, cache = run_with_cache(module, x, **kw)
    tol = 1e-5 if x.dtype == torch.float32 else 1e-10  # the kernel sums in another order
    assert (fused - explicit).abs().max() < tol, kw
    return explicit, cache


def test_gqa_shapes_hook_points_and_pattern_rows():
    layer = _gqa(n_heads=6, n_kv_heads=2, d_model=24, d_head=5)
    x = torch.randn(2, 7, 24)
    out, cache = _both_paths(layer, x, key_padding_mask=PAD)
    assert out.shape == x.shape and layer.W_K.shape == (2, 24, 5) and layer.W_O.shape == (6, 5, 24)
    assert cache["q"].shape == (2, 6, 7, 5) and cache["z"].shape == (2, 6, 7, 5)
    assert cache["k"].shape == cache["v"].shape == (2, 2, 7, 5)  # not repeated
    assert cache["pattern"].shape == (2, 6, 7, 7)
    assert torch.allclose(cache["pattern"].sum(-1), torch.ones(2, 6, 7), atol=1e-6)
    assert (cache["pattern"][0, :, :, :2] == 0).all()  # padding keys get no weight


@pytest.mark.parametrize("kw", MASKS, ids=["plain", "causal", "padding", "both"])
def test_gqa_with_every_head_its_own_kv_is_multi_head_attention(kw):
    gqa = _gqa(n_heads=4, n_kv_heads=4)
    mha = MultiHeadAttention(16, 4)
    mha.load_state_dict(gqa.state_dict())  # the same names and shapes when n_kv == n_heads
    x = torch.randn(2, 7, 16)
    assert (gqa(x, **kw) - mha(x, **kw)).abs().max() < 1e-6
    assert (_both_paths(gqa, x, **kw)[0] - run_with_cache(mha, x, **kw)[0]).abs().max() < 1e-6


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_gqa_is_multi_head_attention_with_tied_key_value_heads(n_kv_heads):
    gqa = _gqa(n_heads=4, n_kv_heads=n_kv_heads)
    gqa.head_mask[1] = 0.0
    mha = regroup(gqa, 4)
    assert type(mha) is MultiHeadAttention
    x = torch.randn(2, 7, 16)
    for kw in MASKS:
        assert (gqa(x, **kw) - mha(x, **kw)).abs().max() < 1e-6, kw
    group = 4 // n_kv_heads
    assert torch.equal(mha.W_K[group - 1], gqa.W_K[0]) and torch.equal(mha.b_V[-1], gqa.b_V[-1])
    assert count_parameters(gqa) == 16 * (4 + 2 * n_kv_heads) * 4 + (4 + 2 * n_kv_heads) * 4 + (
        4 * 4 * 16 + 16
    )


def test_head_mask_silences_a_head():
    layer = _gqa()
    x = torch.randn(2, 7, 16)
    layer.head_mask[2] = 0.0
    masked = layer(x, causal=True)
    layer.head_mask[2] = 1.0

    def zero(z, _name):
        z = z.clone()
        z[:, 2] = 0
        return z

    hooked = run_with_hooks(layer, x, causal=True, fwd_hooks=[("z", zero)])
    assert (masked - hooked).abs().max() < 1e-6


def test_regroup_mean_pools_and_first_picks_within_groups():
    torch.manual_seed(0)
    mha = _random_biases(MultiHeadAttention(16, 4))
    mean, first = regroup(mha, 2), regroup(mha, 2, how="first")
    for gqa in (mean, first):
        for name in ("W_Q", "b_Q", "W_O", "b_O"):
            assert torch.equal(getattr(gqa, name), getattr(mha, name))
    for name in ("W_K", "W_V", "b_K", "b_V"):
        heads = getattr(mha, name)
        assert torch.allclose(getattr(mean, name)[1], (heads[2] + heads[3]) / 2)
        assert torch.equal(getattr(first, name)[1], heads[2])
    assert regroup(mha, 1).W_K.shape == (1, 16, 4)
    exact = regroup(mha, 4)
    x = torch.randn(2, 7, 16)
    for kw in MASKS:
        assert (exact(x, **kw) - mha(x, **kw)).abs().max() < 1e-6, kw


def _latent(absorb=False, dtype=torch.float32):
    torch.manual_seed(0)
    layer = LatentAttention(16, 4, 6, d_head=5, absorb=absorb).to(dtype)
    with torch.no_grad():
        layer.b_O.normal_()
    return layer


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_latent_attention_absorbed_equals_decompressed(dtype, tol):
    plain, absorbed = _latent(dtype=dtype), _latent(absorb=True, dtype=dtype)
    x = torch.randn(2, 7, 16, dtype=dtype)
    for kw in MASKS:
        a, cache_a = _both_paths(plain, x, **kw)
        b, cache_b = _both_paths(absorbed, x, **kw)
        assert (a - b).abs().max() < tol, kw
        assert (cache_a["pattern"] - cache_b["pattern"]).abs().max() < tol
    assert cache_a["latent"].shape == (2, 7, 6) and cache_a["pattern"].shape == (2, 4, 7, 7)
    assert cache_a["q"].shape == cache_a["z"].shape == (2, 4, 7, 5)


@pytest.mark.parametrize("make", [_gqa, _latent, lambda: _latent(absorb=True)])
def test_a_layer_with_a_cache_equals_the_full_pass(make):
    layer = make()
    x = torch.randn(2, 7, 16)
    full = layer(x, key_padding_mask=PAD, causal=True)
    cache = KVCache()
    parts = [
        layer(x[:, i:j], key_padding_mask=PAD[:, i:j], causal=True, cache=cache)
        for i, j in ((0, 1), (1, 4), (4, 5), (5, 7))  # starts with a block of padding only
    ]
    assert (torch.cat(parts, dim=1) - full).abs().max() < 1e-5
    assert cache.length == 7 and torch.equal(cache.key_padding_mask, PAD)
    _, seen = run_with_cache(layer, x[:, :2], causal=True, cache=cache)
    assert seen["pattern"].shape == (2, 4, 2, 9)  # new queries over past and new keys
    assert (seen["pattern"][0, :, :, :2] == 0).all() and (seen["pattern"][:, :, 0, 8] == 0).all()


def test_kv_cache_appends_along_the_sequence_and_counts_bytes():
    cache = KVCache()
    assert cache.length == 0 and cache.nbytes() == 0 and cache.key_padding_mask is None
    k, v = cache.append(k=torch.zeros(2, 3, 4, 5), v=torch.ones(2, 3, 4, 5))
    assert k.shape == v.shape == (2, 3, 4, 5) and cache.key_padding_mask is None
    pad = torch.tensor([[True, False], [False, False]])
    k, v = cache.append(pad, k=torch.zeros(2, 3, 2, 5), v=torch.ones(2, 3, 2, 5))
    assert k.shape == (2, 3, 6, 5) and cache.length == 6
    assert cache.key_padding_mask.tolist() == [[False] * 4 + [True, False], [False] * 6]
    assert cache.nbytes() == 2 * (2 * 3 * 6 * 5) * 4  # float32, mask excluded
    (c,) = KVCache().append(c=torch.zeros(2, 3, 8, dtype=torch.float64))
    assert c.shape == (2, 3, 8) and "length=6" in repr(cache)
    with pytest.raises(ValueError, match="append needs"):
        cache.append(c=torch.zeros(2, 1, 8))
    with pytest.raises(ValueError, match="k has shape"):
        cache.append(k=torch.zeros(2, 2, 1, 5), v=torch.zeros(2, 3, 1, 5))
    with pytest.raises(ValueError, match="key_padding_mask"):
        cache.append(pad, k=torch.zeros(2, 3, 1, 5), v=torch.zeros(2, 3, 1, 5))


@pytest.mark.parametrize("tile", [1, 3, 7, 64])
def test_tiled_attention_is_exact_attention(tile):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 10, 4), torch.randn(2, 3, 10, 6)
    mask = torch.rand(2, 1, 5, 10) < 0.4
    mask[0, :, 1] = True  # a query that sees no key
    for m in (None, mask, torch.tensor([False] * 9 + [True])):
        want = attention_pattern(q, k, m) @ v
        assert (tiled_attention(q, k, v, tile=tile, mask=m) - want).abs().max() < 1e-6
    out = tiled_attention(q, k, v, tile=tile, mask=mask)
    assert (out[0, :, 1] == 0).all()  # the course's convention for a fully masked row
    assert tiled_attention(q[0, 0], k[0, 0], v[0, 0], tile=tile).shape == (5, 6)


def test_tiled_attention_has_finite_gradients_on_masked_rows():
    q, k, v = (torch.randn(1, 4, 3, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True] * 4, [False, True, True, True], [False] * 4, [True] * 4])
    tiled_attention(q, k, v, tile=2, mask=mask).sum().backward()
    assert all(t.grad.isfinite().all() for t in (q, k, v))


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="n_kv_heads"):
        GroupedQueryAttention(16, 4, 3)
    with pytest.raises(ValueError, match="n_kv_heads"):
        GroupedQueryAttention(16, 4, 0)
    with pytest.raises(ValueError, match="d_latent"):
        LatentAttention(16, 4, 0)
    with pytest.raises(TypeError, match="absorb"):
        LatentAttention(16, 4, 6, absorb=1)
    q = torch.randn(3, 4)
    with pytest.raises(ValueError, match="tile"):
        tiled_attention(q, q, q, tile=0)
    with pytest.raises(ValueError, match="k must be"):
        tiled_attention(q, torch.randn(3, 5), q, tile=2)
    with pytest.raises(TypeError, match="mask"):
        tiled_attention(q, q, q, tile=2, mask=torch.zeros(3, 3))
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match="how"):
        regroup(mha, 2, how="x")
    with pytest.raises(ValueError, match="n_kv_heads"):
        regroup(mha, 3)
    with pytest.raises(ValueError, match="n_kv_heads"):
        regroup(mha, 0)
    with pytest.raises(TypeError, match="layer"):
        regroup(LatentAttention(16, 4, 6), 2)
    layer, x = _gqa(), torch.randn(2, 7, 16)
    with pytest.raises(TypeError, match="cache"):
        layer(x, cache=[KVCache()])
    with pytest.raises(ValueError, match="key_padding_mask"):
        layer(x, key_padding_mask=torch.ones(2, 7, dtype=torch.bool))  # no key left, no cache
    with pytest.raises(ValueError, match="d_model"):
        layer(torch.randn(2, 7, 8))
    with pytest.raises(TypeError, match="causal"):
        layer(x, causal=1)
