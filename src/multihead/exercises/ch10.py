"""Checkers for the exercises of chapter 10: the KV cache, grouped-query and latent attention,
attention in tiles."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from multihead.analysis import cost
from multihead.core import attention, latent, tiles
from multihead.core import cache as kv_cache
from multihead.exercises._common import checker, expect, ok, refuse_reference, require_callable

LLAMA3_8B = {"n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "d_head": 128, "tokens": 8192}


@checker
def check_llama3_cache_bytes(answer: object) -> str:
    """Check the KV cache of Llama 3 8B in 16 bits for one sequence of 8,192 tokens, in bytes.

    ``answer`` is the number, or a function of no arguments returning it.

    Shapes: none.
    """
    return cache_bytes_answer(answer, LLAMA3_8B, "Llama 3 8B", "exactly 1 GiB")


def cache_bytes_answer(answer: object, c: dict, model: str, size: str) -> str:
    """The verdict on ``answer``, a model's KV cache in 16 bits for one sequence (a number, or
    a function of no arguments returning it; ``c``: the model's layers, query and key/value
    heads, head size and tokens): ``ok`` naming ``size`` (the answer in words), or the hint of
    the common slip the answer matches.

    Shapes: none.
    """
    if callable(answer):
        answer = refuse_reference(answer, cost)()  # kv_cache_bytes is the formula
    expect(
        isinstance(answer, (int, float)) and not isinstance(answer, bool),
        f"give a number of bytes, got {type(answer).__name__}",
    )
    per_token = 2 * c["n_layers"] * c["n_kv_heads"] * c["d_head"] * 2
    want = per_token * c["tokens"]
    if answer == want:
        return ok(f"{want:,} bytes, {size} ({per_token:,} bytes per token).")
    wrong = {
        want * c["n_heads"] // c["n_kv_heads"]: f"that counts a key and a value for each of the "
        f"{c['n_heads']} query heads; {model} caches only its {c['n_kv_heads']} key/value heads",
        want // 2: "a token keeps a key AND a value in every layer and key/value head: the "
        "factor 2",
        per_token: f"that is the cache of one token; the sequence has {c['tokens']:,}",
        want * 8: "that is bits; a 16-bit number takes 2 bytes",
        want * 2: "16-bit numbers take 2 bytes each, not 4",
        want // c["n_layers"]: f"every one of the {c['n_layers']} layers keeps its own keys and "
        "values",
    }
    for value, hint in wrong.items():
        if math.isclose(float(answer), value, rel_tol=1e-9):
            raise AssertionError(hint)
    raise AssertionError(
        "expected 2 x layers x key/value heads x head size x bytes per number x tokens; "
        f"got {answer:,}"
    )


@checker
def check_group_kv(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check ``fn(k, n_heads)``: keys or values of ``kv_heads`` heads, (batch, kv_heads, seq,
    d_head), repeated so that query head ``i`` reads key/value head ``i // (n_heads //
    kv_heads)``; a ``n_heads`` that is not a multiple of ``kv_heads`` must raise."""
    require_callable("fn", fn)
    gen = torch.Generator().manual_seed(10)
    for kv_heads, n_heads in ((2, 8), (1, 4), (4, 4), (3, 6)):
        k = torch.randn(2, kv_heads, 5, 3, generator=gen)
        got = fn(k, n_heads)
        expect(isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}")
        expect(
            tuple(got.shape) == (2, n_heads, 5, 3),
            f"with {kv_heads} key/value heads and n_heads={n_heads} return shape "
            f"(2, {n_heads}, 5, 3), got {tuple(got.shape)}",
        )
        want = k.repeat_interleave(n_heads // kv_heads, dim=1)
        if not torch.equal(got, want):
            if torch.equal(got, k.repeat(1, n_heads // kv_heads, 1, 1)):
                raise AssertionError(
                    "the copies are in the wrong order: with repeat, head 1 reads key/value head "
                    "1; the heads of a group are consecutive (heads 0..g-1 read head 0): "
                    "repeat each head g times in place"
                )
            g = n_heads // kv_heads
            head = next(i for i in range(n_heads) if not torch.equal(got[:, i], want[:, i]))
            read = [j for j in range(kv_heads) if torch.equal(got[:, head], k[:, j])]
            what = f"reads key/value head {read[0]}" if read else "reads none of the heads"
            raise AssertionError(
                f"with {kv_heads} key/value heads and n_heads={n_heads}, query head {head} "
                f"{what}; it is in group {head} // {g} = {head // g} (heads "
                f"{head // g * g} to {head // g * g + g - 1} read key/value head {head // g})"
            )
    try:
        fn(torch.randn(1, 3, 2, 2), 4)
    except (ValueError, TypeError):
        pass
    except Exception as err:  # noqa: BLE001 - any other error is the wrong kind
        raise AssertionError(
            f"n_heads=4 with 3 key/value heads should raise a ValueError naming n_heads, "
            f"got {type(err).__name__}: {err}"
        ) from None
    else:
        raise AssertionError(
            "n_heads=4 with 3 key/value heads returned a result: groups must have equal sizes, "
            "so raise a ValueError naming n_heads"
        )
    return ok("query heads read their group's key/value head, and bad sizes are refused.")


def _online_step(mu, ell, o, s, v, flip=False, rescale=True):
    """The recurrence of eq-online-softmax, or one of its usual slips (``flip``: the factor
    exp(mu_new - mu_old); ``rescale=False``: no factor). Masked scores are -inf; while a
    query's maximum is still -inf, 0 is subtracted instead, so its factor and terms are 0.
    Shapes: mu, ell (q,), o (q, d_v), s (q, tile), v (tile, d_v)."""
    new_mu = torch.maximum(mu, s.max(dim=-1).values)
    safe = torch.where(torch.isinf(new_mu), torch.zeros_like(new_mu), new_mu)
    factor = torch.exp(safe - mu) if flip else torch.exp(mu - safe)
    scale = torch.where(torch.isinf(mu), torch.zeros_like(mu), factor)
    if not rescale:
        scale = torch.ones_like(mu)
    w = torch.exp(s - safe[:, None])
    return new_mu, scale * ell + w.sum(-1), scale[:, None] * o + w @ v


_UNSEEN = (
    "nan or inf in ell or o, after a tile in which a query has still seen no open key (its "
    "maximum is -inf: the first tile of a left-padded query is all masked). There "
    "exp(mu_old - mu_new) and every exp(s - mu_new) are exp(-inf - (-inf)) = nan: the factor "
    "must be 0 and each term of a masked score 0. Subtract 0 instead of mu_new while mu_new is "
    "-inf (torch.where(torch.isinf(mu_new), 0, mu_new)), and set the factor to 0 where mu_old "
    "is -inf"
)


@checker
def check_online_step(fn: Callable[..., tuple]) -> str:
    """Check ``fn(mu, ell, o, s, v) -> (mu, ell, o)``: one tile of the online softmax, and
    that running it over all tiles gives softmax(s) v, also for a query whose first tile is
    masked."""
    require_callable("fn", fn)
    gen = torch.Generator().manual_seed(11)
    q, n, d_v, tile = 4, 10, 3, 4
    s_all = 3 * torch.randn(q, n, dtype=torch.float64, generator=gen)
    s_all[1, :tile] = float("-inf")  # a query whose first tile is masked (left padding)
    v_all = torch.randn(n, d_v, dtype=torch.float64, generator=gen)
    mu = torch.full((q,), float("-inf"), dtype=torch.float64)
    ell, o = torch.zeros(q, dtype=torch.float64), torch.zeros(q, d_v, dtype=torch.float64)
    for start in range(0, n, tile):
        s, v = s_all[:, start : start + tile], v_all[start : start + tile]
        got = fn(mu.clone(), ell.clone(), o.clone(), s, v)
        expect(isinstance(got, tuple) and len(got) == 3, "return the tuple (mu, ell, o), updated")
        want = _online_step(mu, ell, o, s, v)
        if any(not torch.isfinite(t).all() for t in got[1:]):
            raise AssertionError(_UNSEEN)
        if not torch.allclose(got[0], want[0]):
            raise AssertionError("mu must become the larger of the old maximum and the tile's")
        if not (torch.allclose(got[1], want[1]) and torch.allclose(got[2], want[2])):
            slips = (
                (
                    _online_step(mu, ell, o, s, v, rescale=False),
                    "the old sum is relative to the old maximum: multiply ell and o by "
                    "exp(mu_old - mu_new) before adding the tile's terms",
                ),
                (
                    _online_step(mu, ell, o, s, v, flip=True),
                    "the factor is upside down: rescale by exp(mu_old - mu_new), which is at "
                    "most 1 because the maximum only grows, not by exp(mu_new - mu_old)",
                ),
            )
            for slip, hint in slips:
                if torch.allclose(got[1], slip[1]) and torch.allclose(got[2], slip[2]):
                    raise AssertionError(hint)
            raise AssertionError(
                "ell and o differ from the recurrence: after rescaling the old ones, add the "
                "tile's terms exp(s - mu_new) to ell and exp(s - mu_new) v to o"
            )
        mu, ell, o = want
    out = o / ell[:, None]
    expect(torch.allclose(out, s_all.softmax(-1) @ v_all), "the tiles do not add up")
    return ok("your step, run tile by tile, gives softmax(s) v (to roundoff).")


class _Latents(torch.Tensor):
    """A tensor that notes whether anything computed from it took the shape of keys."""

    shapes: set[tuple[int, ...]] = set()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if isinstance(out, torch.Tensor):
            cls.shapes.add(tuple(out.shape))
        return out


@checker
def check_absorbed_scores(fn: Callable[..., torch.Tensor]) -> str:
    """Check ``fn(x_query, W_Q, W_UK, latents) -> (q, n)``: one MLA head's scaled logits from
    the latents, without forming the keys ``latents @ W_UK``."""
    require_callable("fn", fn)
    gen = torch.Generator().manual_seed(12)
    q, n, d_model, d_latent, d_head = 3, 11, 13, 5, 7
    x = torch.randn(q, d_model, dtype=torch.float64, generator=gen)
    W_Q = torch.randn(d_model, d_head, dtype=torch.float64, generator=gen)
    W_UK = torch.randn(d_latent, d_head, dtype=torch.float64, generator=gen)
    c = torch.randn(n, d_latent, dtype=torch.float64, generator=gen)
    want = (x @ W_Q) @ (c @ W_UK).T / math.sqrt(d_head)
    _Latents.shapes = set()
    got = fn(x, W_Q, W_UK, c.as_subclass(_Latents))
    expect(isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}")
    formed = {(n, d_head), (d_head, n)} & _Latents.shapes
    if formed:
        raise AssertionError(
            f"your function formed the keys, a {n} x {d_head} matrix computed from the "
            "latents: move W_UK to the query side, (x W_Q W_UK^T) latents^T"
        )
    got = torch.as_tensor(got).as_subclass(torch.Tensor)
    expect(tuple(got.shape) == (q, n), f"return (q, n) = ({q}, {n}), got {tuple(got.shape)}")
    if not torch.allclose(got, want):
        for scale, hint in (
            (math.sqrt(d_head), "divide by sqrt(d_head), the size of the head's keys"),
            (math.sqrt(d_head) / math.sqrt(d_latent), "divide by sqrt(d_head), not sqrt(d_latent)"),
        ):
            if torch.allclose(got, want * scale):
                raise AssertionError(hint)
        raise AssertionError("the logits differ from (x W_Q)(latents W_UK)^T / sqrt(d_head)")
    return ok("the absorbed logits equal those of the decompressed keys, and no key was formed.")


def _decode_case(seed: int):
    """Inputs of one head's decoding: x (batch, steps, d_model), W_Q, W_K, W_V (d_model,
    d_head), and the full computation's outputs (batch, steps, d_head), keys and values."""
    gen = torch.Generator().manual_seed(seed)
    batch, steps, d_model, d_head = 2, 6, 7, 3
    x = torch.randn(batch, steps, d_model, dtype=torch.float64, generator=gen)
    W_Q, W_K, W_V = (
        torch.randn(d_model, d_head, dtype=torch.float64, generator=gen) for _ in range(3)
    )
    q, k, v = x @ W_Q, x @ W_K, x @ W_V  # (batch, steps, d_head)
    causal = torch.ones(steps, steps, dtype=torch.bool).triu(1)  # True = blocked
    scores = (q @ k.transpose(1, 2) / math.sqrt(d_head)).masked_fill(causal, float("-inf"))
    return x, (W_Q, W_K, W_V), scores.softmax(-1) @ v, k, v


@checker
def check_decode_step(fn: Callable[..., tuple]) -> str:
    """Check ``fn(x, k_cache, v_cache, W_Q, W_K, W_V) -> (out, k_cache, v_cache)``: one step
    of decoding with a KV cache for one head. ``x`` (batch, d_model) is the new token's input,
    the caches (batch, t, d_head) hold the keys and values of the ``t`` earlier tokens (``t``
    may be 0); ``out`` (batch, d_head) is the new token's attention output over all ``t + 1``
    tokens, and the returned caches hold ``t + 1``. Run from an empty cache, step by step,
    the outputs must be those of causal attention over the whole sequence at once."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, attention, kv_cache, latent, tiles)
    x, weights, want_out, want_k, want_v = _decode_case(13)
    batch, steps, _ = x.shape
    d_head = want_k.shape[-1]
    k_cache = torch.zeros(batch, 0, d_head, dtype=torch.float64)
    v_cache = torch.zeros(batch, 0, d_head, dtype=torch.float64)
    for t in range(steps):
        got = fn(x[:, t], k_cache.clone(), v_cache.clone(), *weights)
        expect(
            isinstance(got, tuple) and len(got) == 3,
            "return the tuple (out, k_cache, v_cache): the output and the caches after the step",
        )
        out, k_new, v_new = got
        for name, cache, full in (("k_cache", k_new, want_k), ("v_cache", v_new, want_v)):
            expect(isinstance(cache, torch.Tensor), f"{name} must be a tensor")
            length = cache.shape[1] if cache.ndim == 3 else None
            if t and length == 1 and torch.allclose(cache, full[:, t : t + 1]):
                raise AssertionError(
                    f"at step {t} the returned {name} holds only the new token: append to the "
                    "cache, do not replace it, or the next step forgets every earlier token"
                )
            if length == t:
                raise AssertionError(
                    f"at step {t} the returned {name} is the cache as it came in: the new token's "
                    "key and value must be appended (torch.cat along the token axis, dim=1), or "
                    "the next step will not see this token at all"
                )
            expect(
                tuple(cache.shape) == (batch, t + 1, d_head),
                f"after step {t} {name} must have shape (batch, {t + 1}, d_head) = "
                f"{(batch, t + 1, d_head)}, got {tuple(cache.shape)}",
            )
        stored = {"k_cache": (k_new, want_k), "v_cache": (v_new, want_v)}
        for name, (cache, full) in stored.items():
            if not torch.allclose(cache, full[:, : t + 1]):
                if t and torch.allclose(cache, torch.cat([full[:, t : t + 1], full[:, :t]], 1)):
                    raise AssertionError(
                        f"{name} is in the wrong order: the new token goes at the end (cat the "
                        "old cache first), so that row j is token j"
                    )
                raise AssertionError(
                    f"after step {t} {name} must hold the {'keys' if name[0] == 'k' else 'values'}"
                    " of tokens 0 to t: x W_K (or x W_V) of each token, in order"
                )
        expect(isinstance(out, torch.Tensor), f"out must be a tensor, got {type(out).__name__}")
        expect(
            tuple(out.shape) == (batch, d_head),
            f"out must have shape (batch, d_head) = {(batch, d_head)}, got {tuple(out.shape)}",
        )
        if torch.allclose(out, want_out[:, t]):
            k_cache, v_cache = want_k[:, : t + 1], want_v[:, : t + 1]
            continue
        q = x[:, t] @ weights[0]  # (batch, d_head)
        earlier = (q[:, None] @ want_k[:, :t].transpose(1, 2) / math.sqrt(d_head)).softmax(-1)
        earlier = (earlier @ want_v[:, :t])[:, 0]  # zeros at step 0: there is nothing earlier
        if torch.isnan(out).all() or torch.allclose(out, earlier):
            raise AssertionError(
                f"at step {t} the new token attends only to the tokens before it ({t} of them): "
                "it must see its own key and value too, as query i sees keys j <= i in the full "
                "computation. Append the new key and value first, then attend over the whole cache"
            )
        plain = (q[:, None] @ want_k[:, : t + 1].transpose(1, 2)).softmax(-1)
        if torch.allclose(out, (plain @ want_v[:, : t + 1])[:, 0]):
            raise AssertionError("divide the scores by sqrt(d_head) before the softmax")
        raise AssertionError(
            f"at step {t} the output differs from attention of the new query over the keys "
            "and values of tokens 0 to t: softmax(q K^T / sqrt(d_head)) V with the updated cache"
        )
    return ok(
        f"{steps} steps from an empty cache give the outputs of causal attention over the whole "
        "sequence, and the cache grows by one key and one value per step."
    )
