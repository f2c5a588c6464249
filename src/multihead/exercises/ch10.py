"""Checkers for the exercises of chapter 10: the KV cache, grouped-query and latent attention,
attention in tiles."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from multihead.analysis import cost
from multihead.exercises._common import checker, expect, ok, refuse_reference, require_callable

LLAMA3_8B = {"n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "d_head": 128, "tokens": 8192}


@checker
def check_llama3_cache_bytes(answer: object) -> str:
    """Check the KV cache of Llama 3 8B in 16 bits for one sequence of 8,192 tokens, in bytes.

    ``answer`` is the number, or a function of no arguments returning it.

    Shapes: none.
    """
    if callable(answer):
        answer = refuse_reference(answer, cost)()  # kv_cache_bytes is the formula
    c = LLAMA3_8B
    per_token = 2 * c["n_layers"] * c["n_kv_heads"] * c["d_head"] * 2
    want = per_token * c["tokens"]
    expect(
        isinstance(answer, (int, float)) and not isinstance(answer, bool),
        f"give a number of bytes, got {type(answer).__name__}",
    )
    if answer == want:
        return ok(f"{want:,} bytes, exactly 1 GiB ({per_token:,} bytes per token).")
    wrong = {
        want * c["n_heads"] // c["n_kv_heads"]: "that counts a key and a value for each of the "
        "32 query heads; Llama 3 8B caches only its 8 key/value heads",
        want // 2: "a token keeps a key AND a value in every layer and head: the factor 2",
        per_token: "that is the cache of one token; the sequence has 8,192",
        want * 8: "that is bits; a 16-bit number takes 2 bytes",
        want * 2: "16-bit numbers take 2 bytes each, not 4",
        want // c["n_layers"]: "every one of the 32 layers keeps its own keys and values",
    }
    for value, hint in wrong.items():
        if math.isclose(float(answer), value, rel_tol=1e-9):
            raise AssertionError(hint)
    raise AssertionError(
        f"expected 2 x layers x key/value heads x head size x bytes per number x tokens; "
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
            raise AssertionError(
                f"query head i must read key/value head i // {n_heads // kv_heads} "
                f"({kv_heads} key/value heads, n_heads={n_heads})"
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


def _online_step(mu, ell, o, s, v):
    new_mu = torch.maximum(mu, s.max(dim=-1).values)
    safe = torch.where(torch.isinf(new_mu), torch.zeros_like(new_mu), new_mu)
    scale = torch.where(torch.isinf(mu), torch.zeros_like(mu), torch.exp(mu - safe))
    w = torch.exp(s - safe[:, None])
    return new_mu, scale * ell + w.sum(-1), scale[:, None] * o + w @ v


@checker
def check_online_step(fn: Callable[..., tuple]) -> str:
    """Check ``fn(mu, ell, o, s, v) -> (mu, ell, o)``: one tile of the online softmax, and
    that running it over all tiles gives softmax(s) v."""
    require_callable("fn", fn)
    gen = torch.Generator().manual_seed(11)
    q, n, d_v, tile = 4, 10, 3, 4
    s_all = 3 * torch.randn(q, n, dtype=torch.float64, generator=gen)
    s_all[1, :tile] = float("-inf")  # a query whose first tile is masked
    v_all = torch.randn(n, d_v, dtype=torch.float64, generator=gen)
    mu = torch.full((q,), float("-inf"), dtype=torch.float64)
    ell, o = torch.zeros(q, dtype=torch.float64), torch.zeros(q, d_v, dtype=torch.float64)
    for start in range(0, n, tile):
        s, v = s_all[:, start : start + tile], v_all[start : start + tile]
        got = fn(mu.clone(), ell.clone(), o.clone(), s, v)
        expect(isinstance(got, tuple) and len(got) == 3, "return the tuple (mu, ell, o), updated")
        want = _online_step(mu, ell, o, s, v)
        if any(not torch.isfinite(t).all() for t in got[1:]):
            raise AssertionError(
                "nan or inf in ell or o: where the old maximum is -inf the rescaling factor "
                "exp(mu_old - mu_new) must be 0 (exp(-inf - (-inf)) is nan: guard it)"
            )
        if not torch.allclose(got[0], want[0]):
            raise AssertionError("mu must become the larger of the old maximum and the tile's")
        if not (torch.allclose(got[1], want[1]) and torch.allclose(got[2], want[2])):
            plain = (ell + torch.exp(s - want[0][:, None]).sum(-1), None)
            if start and torch.allclose(got[1], plain[0]):
                raise AssertionError(
                    "the old sum is relative to the old maximum: multiply ell and o by "
                    "exp(mu_old - mu_new) before adding the tile's terms"
                )
            raise AssertionError(
                "ell and o differ from the recurrence: the tile's terms are exp(s - mu_new) "
                "(and exp(s - mu_new) v for o), after rescaling the old ones"
            )
        mu, ell, o = want
    out = o / ell[:, None]
    expect(torch.allclose(out, s_all.softmax(-1) @ v_all), "the tiles do not add up")
    return ok("your step, run tile by tile, gives softmax(s) v exactly.")


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
