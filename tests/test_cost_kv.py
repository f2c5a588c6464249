import pytest

from multihead.analysis.cost import decode_step_costs, kv_cache_bytes, latent_cache_bytes


def test_kv_cache_bytes_counts_keys_and_values_of_every_layer():
    # a 7B-style model: 32 layers, 32 heads of 128, 16-bit values: 0.5 MiB per token
    assert kv_cache_bytes(n_layers=32, n_kv_heads=32, d_head=128) == 2**19
    gqa = kv_cache_bytes(n_layers=32, n_kv_heads=8, d_head=128, n_tokens=4096, batch=2)
    assert gqa == 2 * 32 * 8 * 128 * 2 * 4096 * 2
    assert kv_cache_bytes(n_layers=2, n_kv_heads=1, d_head=4, bytes_per_value=4) == 64


def test_latent_cache_bytes_counts_one_latent_per_token_and_layer():
    assert latent_cache_bytes(n_layers=2, d_latent=6, n_tokens=9, batch=3, bytes_per_value=4) == (
        2 * 6 * 4 * 9 * 3
    )
    # DeepSeek-V2: 60 layers, d_latent 512, a rotary key of 64 -> 576 values per layer
    deepseek = latent_cache_bytes(n_layers=60, d_latent=512, d_rope=64)
    assert deepseek == 60 * 576 * 2
    assert deepseek < kv_cache_bytes(n_layers=60, n_kv_heads=128, d_head=128) / 50


def test_decode_step_costs_follow_the_documented_convention():
    kw = dict(d_model=64, n_heads=8, n_kv_heads=2, d_head=8)
    one, many = decode_step_costs(**kw, n_tokens=1), decode_step_costs(**kw, n_tokens=100)
    assert one["flops_cached"] == one["flops_uncached"]  # nothing cached yet to reuse
    assert one["bytes_cached"] > one["bytes_uncached"]  # ... but the new key/value is written
    q_and_out, kv_one = 4 * 64 * 8 * 8, 4 * 64 * 2 * 8
    assert many["flops_cached"] == q_and_out + 4 * 8 * 8 * 100 + kv_one
    assert many["flops_uncached"] - many["flops_cached"] == 99 * kv_one
    weights = 2 * 64 * 8 * (8 + 2)
    assert many["bytes_cached"] == 2 * (weights + 64 + 2 * 2 * 8 * 100)
    assert many["bytes_uncached"] == 2 * (weights + 64 * 100)
    mqa = decode_step_costs(**{**kw, "n_kv_heads": 1}, n_tokens=100)
    assert mqa["bytes_cached"] < many["bytes_cached"] and mqa["flops_cached"] < many["flops_cached"]


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: kv_cache_bytes(n_layers=0, n_kv_heads=1, d_head=1), "n_layers"),
        (lambda: kv_cache_bytes(n_layers=1, n_kv_heads=1, d_head=1, n_tokens=0), "n_tokens"),
        (lambda: kv_cache_bytes(n_layers=1, n_kv_heads=1, d_head=1, batch=-1), "batch"),
        (lambda: kv_cache_bytes(n_layers=1, n_kv_heads=0, d_head=1), "n_kv_heads"),
        (lambda: latent_cache_bytes(n_layers=1, d_latent=0), "d_latent"),
        (lambda: latent_cache_bytes(n_layers=1, d_latent=1, d_rope=-1), "d_rope"),
        (lambda: latent_cache_bytes(n_layers=1, d_latent=1, bytes_per_value=0), "bytes_per_value"),
        (lambda: decode_step_costs(d_model=8, n_heads=4, n_kv_heads=3, d_head=2, n_tokens=1),
         "n_kv_heads"),
        (lambda: decode_step_costs(d_model=8, n_heads=4, n_kv_heads=2, d_head=2, n_tokens=0),
         "n_tokens"),
    ],
)  # fmt: skip
def test_bad_arguments_name_themselves(call, name):
    with pytest.raises(ValueError, match=name):
        call()
    with pytest.raises(TypeError, match="d_head"):
        kv_cache_bytes(n_layers=1, n_kv_heads=1, d_head=2.0)
