"""What attention costs: parameters and FLOPs of a layer, and what a decoder's KV cache costs
in memory per token and in work per generated token. One module, so that every count the
course makes follows one convention.

Counting convention: a multiply-add is 2 FLOPs, and only matrix products count (the four
projections, the logits ``Q K^T`` and the weighted sum ``P V``; softmax, scaling, biases and
norms are left out). Bytes count values read or written once each, ``bytes_per_value`` bytes
apiece (2 for 16-bit floats, 4 for float32).

A decoder that generates token after token keeps, in every layer, the keys and values of the
past tokens (``multihead.core.cache.KVCache``): grouped-query attention stores ``n_kv_heads``
heads instead of ``n_heads``; latent attention stores one vector of size ``d_latent`` (plus
``d_rope`` for a decoupled rotary key, as in DeepSeek-V2). ``Decoder.cache_shape()`` gives a
model's arguments: ``kv_cache_bytes(**model.cache_shape(), n_tokens=...)``.
"""

from __future__ import annotations

from multihead._checks import check_int, check_positive_int


def attention_cost(
    d_model: int,
    n_heads: int,
    d_key: int,
    d_value: int,
    seq_len: int,
    *,
    n_kv_heads: int | None = None,
) -> dict[str, int]:
    """Parameters and forward FLOPs of one self-attention layer (biases included) whose
    ``n_heads`` query heads share ``n_kv_heads`` key/value heads (default ``n_heads``:
    multi-head attention).

    Parameters include the biases; FLOPs are counted as in the module docstring.

    Shapes: none -> {"params", "flops", "flops_logits"}.
    """
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("d_key", d_key)):
        check_positive_int(name, v)
    check_positive_int("d_value", d_value)
    check_positive_int("seq_len", seq_len)
    kv = n_heads if n_kv_heads is None else check_positive_int("n_kv_heads", n_kv_heads)
    if n_heads % kv:
        raise ValueError(f"n_kv_heads={kv} must divide n_heads={n_heads}")
    hq, hv, kk, kv_v = n_heads * d_key, n_heads * d_value, kv * d_key, kv * d_value
    params = (d_model + 1) * (hq + kk + kv_v) + (hv * d_model + d_model)
    proj = 2 * seq_len * d_model * (hq + kk + kv_v + hv)  # W_Q, W_K, W_V and W_O
    logits = 2 * seq_len * seq_len * hq
    mix = 2 * seq_len * seq_len * hv
    return {"params": params, "flops": proj + logits + mix, "flops_logits": logits}


def matched_key_size(d_model: int, n_heads: int, d_value: int, params: int) -> int:
    """The key size ``d_key >= 1`` whose layer (``n_heads`` heads of value size ``d_value``)
    has the attention parameter count closest to ``params``: the equal-parameter partner of
    a layer, when the key size grows and the value size or the number of heads shrinks.

    The count is linear in ``d_key`` with slope ``2 n_heads (d_model + 1)`` (``W_Q``, ``W_K``
    and their biases), so an exact match exists only when that slope divides the difference;
    compare ``attention_cost(...)["params"]`` with ``params`` to see how close it is.

    Shapes: none.
    """
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("d_value", d_value)):
        check_positive_int(name, v)
    check_positive_int("params", params)
    rest = attention_cost(d_model, n_heads, 1, d_value, seq_len=1)["params"]
    slope = 2 * n_heads * (d_model + 1)  # parameters per unit of d_key
    if params < rest:
        raise ValueError(
            f"params={params} is below the {rest} parameters of d_key=1 with n_heads={n_heads} "
            f"and d_value={d_value}; lower n_heads or d_value"
        )
    return 1 + round((params - rest) / slope)


def _check_counts(n_tokens: int, batch: int, bytes_per_value: int) -> None:
    check_positive_int("n_tokens", n_tokens)
    check_positive_int("batch", batch)
    check_positive_int("bytes_per_value", bytes_per_value)


def kv_cache_bytes(
    *,
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    n_tokens: int = 1,
    batch: int = 1,
    bytes_per_value: int = 2,
) -> int:
    """Bytes of the keys and values a grouped-query (or multi-head) decoder caches:
    ``2 n_layers n_kv_heads d_head bytes_per_value n_tokens batch`` (the 2: keys and values).

    Shapes: none.
    """
    check_positive_int("n_layers", n_layers)
    check_positive_int("n_kv_heads", n_kv_heads)
    check_positive_int("d_head", d_head)
    _check_counts(n_tokens, batch, bytes_per_value)
    return 2 * n_layers * n_kv_heads * d_head * bytes_per_value * n_tokens * batch


def latent_cache_bytes(
    *,
    n_layers: int,
    d_latent: int,
    d_rope: int = 0,
    n_tokens: int = 1,
    batch: int = 1,
    bytes_per_value: int = 2,
) -> int:
    """Bytes of the latents a latent-attention decoder caches: one vector of ``d_latent``
    values per token and layer, plus ``d_rope`` values of a rotary key shared by the heads
    (0 here: the course's ``LatentAttention`` has none).

    Shapes: none.
    """
    check_positive_int("n_layers", n_layers)
    check_positive_int("d_latent", d_latent)
    check_int("d_rope", d_rope, 0)
    _check_counts(n_tokens, batch, bytes_per_value)
    return n_layers * (d_latent + d_rope) * bytes_per_value * n_tokens * batch


def decode_step_costs(
    *,
    d_model: int,
    n_heads: int,
    n_kv_heads: int,
    d_head: int,
    n_tokens: int,
    bytes_per_value: int = 2,
) -> dict[str, int]:
    """FLOPs and bytes moved by one attention layer to produce the output of one new token
    whose context holds ``n_tokens`` tokens (itself included), with and without a KV cache.

    Both compute the new token's query (``2 d_model n_heads d_head``), its scores against
    the ``n_tokens`` keys and its mix of their values (``2 n_heads d_head n_tokens`` each) and
    its output projection (``2 n_heads d_head d_model``). Then:

    * with the cache, the new token's key and value only (``4 d_model n_kv_heads d_head``);
      bytes: the weights, the new token's input, the cache read once
      (``2 n_kv_heads d_head (n_tokens - 1)`` values) and the new key and value written;
    * without it, keys and values of all ``n_tokens`` tokens
      (``4 d_model n_kv_heads d_head n_tokens``); bytes: the weights and the inputs of all
      ``n_tokens`` tokens. (In a stack of layers, a step without cache recomputes every
      position's output too, since the next layer needs its keys: this is the least one
      layer must redo.)

    Weights: ``W_Q``, ``W_O`` with ``n_heads`` heads, ``W_K``, ``W_V`` with ``n_kv_heads``.

    Shapes: none -> {"flops_cached", "flops_uncached", "bytes_cached", "bytes_uncached"}, and
    the terms: "flops_query_and_output", "flops_attend", "flops_key_value_per_token".
    """
    check_positive_int("d_model", d_model)
    check_positive_int("n_heads", n_heads)
    check_positive_int("n_kv_heads", n_kv_heads)
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    check_positive_int("d_head", d_head)
    check_positive_int("n_tokens", n_tokens)
    check_positive_int("bytes_per_value", bytes_per_value)
    q_and_out = 2 * 2 * d_model * n_heads * d_head  # the new query and W_O
    attend = 2 * 2 * n_heads * d_head * n_tokens  # scores and mix, one query
    kv_one = 2 * 2 * d_model * n_kv_heads * d_head  # one token's key and value
    weights = 2 * d_model * d_head * (n_heads + n_kv_heads)
    cache_io = 2 * n_kv_heads * d_head * n_tokens  # read n_tokens - 1 keys/values, write 1
    return {
        "flops_query_and_output": q_and_out,
        "flops_attend": attend,
        "flops_key_value_per_token": kv_one,
        "flops_cached": q_and_out + attend + kv_one,
        "flops_uncached": q_and_out + attend + kv_one * n_tokens,
        "bytes_cached": bytes_per_value * (weights + d_model + cache_io),
        "bytes_uncached": bytes_per_value * (weights + d_model * n_tokens),
    }
