"""Checkers for the exercises of chapter 12: the KV cache of SmolLM2, induction heads found in
a cache of patterns, the mean-pooling of key/value heads, and the rank a trained head needs."""

from __future__ import annotations

from collections.abc import Callable

import torch

from multihead.analysis import circuits, headrank
from multihead.core import convert
from multihead.exercises._common import checker, expect, ok, refuse_reference, require_callable
from multihead.exercises.ch10 import cache_bytes_answer

SMOLLM2 = {"n_layers": 30, "n_heads": 9, "n_kv_heads": 3, "d_head": 64, "tokens": 8192}


@checker
def check_smollm2_cache_bytes(answer: object) -> str:
    """Check the KV cache of SmolLM2-135M for one sequence of 8,192 tokens in 16 bits, in
    bytes. ``answer`` is the number, or a function of no arguments returning it.

    Shapes: none.
    """
    return cache_bytes_answer(answer, SMOLLM2, "SmolLM2", "180 MiB")


def _planted_patterns(segment: int, gen: torch.Generator) -> tuple[torch.Tensor, list]:
    """Random causal patterns (layers 3, batch 2, heads 4) on repeated sequences, with
    induction heads, a duplicate-token head and a head that is an induction head on one
    sequence only planted in them; and the induction heads (mean score above one half)."""
    n = 2 * segment
    layers, batch, heads = 3, 2, 4
    scores = 2 * torch.randn(layers, batch, heads, n, n, dtype=torch.float64, generator=gen)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    p = scores.masked_fill(future, float("-inf")).softmax(-1)
    q = torch.arange(segment, n)  # the second copy's queries

    def plant(layer, head, offset, strength, which=slice(None)):
        target = torch.zeros(n, n, dtype=torch.float64)
        target[q, q - offset] = 1.0
        row = p[layer, which, head]
        row[..., q, :] = (1 - strength) * row[..., q, :] + strength * target[q]
        p[layer, which, head] = row

    plant(1, 2, segment - 1, 0.9)  # an induction head
    plant(2, 0, segment - 1, 0.7)  # another
    plant(2, 3, segment - 1, 0.15)  # one that stays below one half on every sequence
    plant(0, 1, segment, 0.9)  # a duplicate-token head
    plant(1, 3, segment - 1, 0.7, which=0)  # induction on sequence 0 only: mean below 1/2
    score = torch.stack([circuits.induction_score(layer, segment) for layer in p])  # (3, 2, 4)
    mean = score.mean(1)  # (layers, heads)
    want = [(i, j) for i in range(layers) for j in range(heads) if mean[i, j] > 0.5]
    return p, want


@checker
def check_find_induction_heads(fn: Callable[..., object]) -> str:
    """Check ``fn(patterns, segment, threshold=0.5) -> [(layer, head), ...]``: the heads
    whose induction score, averaged over the batch, passes ``threshold``, in order."""
    require_callable("fn", fn)
    guarded = refuse_reference(fn, circuits)
    gen = torch.Generator().manual_seed(12)
    segment = 6
    patterns, want = _planted_patterns(segment, gen)
    got = guarded(patterns.clone(), segment, 0.5)
    expect(
        isinstance(got, (list, tuple)) and all(isinstance(x, (tuple, list)) for x in got),
        f"return a list of (layer, head) pairs, got {type(got).__name__}",
    )
    got = [tuple(int(i) for i in x) for x in got]
    if got == want:
        return ok(f"the induction heads are {want}, in order.")
    if sorted(got) == want:
        raise AssertionError("the right heads, in the wrong order: sort by layer, then head")
    if (0, 1) in got:
        raise AssertionError(
            "you found the duplicate-token head (0, 1): it looks at the earlier copy of the "
            "current token, i - segment; the induction head looks at the token after it, "
            "i - segment + 1"
        )
    if (1, 3) in got and (2, 3) not in got:
        raise AssertionError(
            "head (1, 3) is an induction head on one sequence only: average the score over "
            "the batch before comparing it with the threshold"
        )
    if (2, 3) in got:
        raise AssertionError("head (2, 3) scores below 0.5: keep only scores above threshold")
    raise AssertionError(
        f"expected {want}: the mean weight that the queries of the second copy (positions "
        "segment to 2 segment - 1) put on key i - segment + 1, averaged over the batch"
    )


@checker
def check_mean_pool_kv(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check ``fn(W, new_kv)``: ``W`` (n_kv, d_model, d_head) of key/value heads shared by
    consecutive groups of query heads -> (new_kv, d_model, d_head), each new head the mean of
    the old heads its new group reads; a ``new_kv`` that does not divide n_kv must raise."""
    require_callable("fn", fn)
    guarded = refuse_reference(fn, convert)
    gen = torch.Generator().manual_seed(13)
    for n_kv, new_kv in ((3, 1), (4, 2), (6, 3), (2, 2)):
        W = torch.randn(n_kv, 5, 4, dtype=torch.float64, generator=gen)
        got = guarded(W.clone(), new_kv)
        expect(isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}")
        expect(
            tuple(got.shape) == (new_kv, 5, 4),
            f"with {n_kv} heads and new_kv={new_kv} return shape ({new_kv}, 5, 4), "
            f"got {tuple(got.shape)}",
        )
        r = n_kv // new_kv
        want = W.view(new_kv, r, 5, 4).mean(1)
        if torch.allclose(got, want):
            continue
        if torch.allclose(got, W.view(new_kv, r, 5, 4)[:, 0]):
            raise AssertionError(
                "that keeps the first head of each group (the control of the chapter); "
                "mean-pooling averages the group's heads"
            )
        if torch.allclose(got, W.view(new_kv, r, 5, 4).sum(1)):
            raise AssertionError("that is the sum of a group's heads; take their mean")
        if torch.allclose(got, W.view(r, new_kv, 5, 4).mean(0)):
            raise AssertionError(
                "the groups are consecutive: new head j pools old heads j*r to (j+1)*r - 1, "
                "with r = n_kv // new_kv, not every new_kv-th head"
            )
        raise AssertionError(f"with {n_kv} heads and new_kv={new_kv} the pooled heads differ")
    try:
        guarded(torch.randn(3, 5, 4), 2)
    except (ValueError, TypeError):
        pass
    except AssertionError:
        raise
    except Exception as err:  # noqa: BLE001 - any other error is the wrong kind
        raise AssertionError(
            f"new_kv=2 with 3 heads should raise a ValueError naming new_kv, got "
            f"{type(err).__name__}: {err}"
        ) from None
    else:
        raise AssertionError(
            "new_kv=2 with 3 heads returned a result: groups must have equal sizes, so raise "
            "a ValueError naming new_kv"
        )
    return ok("each new key/value head is the mean of its group, and bad sizes are refused.")


def _causal_scores(n: int, d_k: int, scale: float, gen: torch.Generator) -> torch.Tensor:
    q = torch.randn(n, d_k, dtype=torch.float64, generator=gen)
    k = torch.randn(n, d_k, dtype=torch.float64, generator=gen)
    s = scale * (q @ k.T) + 0.7 * torch.randn(n, 1, dtype=torch.float64, generator=gen)
    return s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))


@checker
def check_head_needed_rank(fn: Callable[[torch.Tensor, float], int]) -> str:
    """Check ``fn(scores, tol) -> int``: the smallest rank whose truncated SVD of the visible
    block of a causal head's ``scores``, rows centred, is within ``tol`` of it in every entry.
    """
    require_callable("fn", fn)
    guarded = refuse_reference(fn, headrank)
    gen = torch.Generator().manual_seed(14)
    for n, d_k, scale, tol in ((16, 5, 1.0, 0.3), (20, 6, 0.5, 1.5), (12, 4, 2.0, 2.0)):
        s = _causal_scores(n, d_k, scale, gen)
        block = headrank.visible_block(s)
        want = int(headrank.needed_rank(block, [tol])[0])
        got = guarded(s.clone(), tol)
        expect(
            isinstance(got, (int, torch.Tensor)) and not isinstance(got, bool),
            f"return an int, got {type(got).__name__}",
        )
        got = int(got)
        if got == want:
            continue
        plain = torch.linalg.svdvals(block)
        centred = torch.linalg.svdvals(block - block.mean(-1, keepdim=True))
        uncentred = _needed_without_centring(block, tol)
        if got == int((centred > tol).sum()) and got != want:
            raise AssertionError(
                "that counts the singular values above tol, a rank that is enough but not "
                "the smallest: compute the largest entry of the truncation's error for each "
                "rank, and take the first rank where it is at most tol"
            )
        if got == uncentred and got != want:
            raise AssertionError(
                "centre every row first (subtract its mean): a softmax forgets a constant "
                "added to a row, so the row means are not part of what the head must encode"
            )
        if got == int((plain > tol * plain[0]).sum()) or got == int(
            (centred > tol * centred[0]).sum()
        ):
            raise AssertionError("tol is in nats, the logits' own units, not relative")
        raise AssertionError(
            f"with n={n} tokens and tol={tol} the needed rank is {want}, got {got}: take the "
            "block of the second half's queries against the first half's keys"
        )
    return ok("your ranks match: the fewest dimensions that keep every logit within tol.")


def _needed_without_centring(block: torch.Tensor, tol: float) -> int:
    """The smallest rank whose truncated SVD of the uncentred ``block`` is within ``tol``."""
    U, S, Vh = torch.linalg.svd(block)
    for r in range(len(S) + 1):
        approx = (U[:, :r] * S[:r]) @ Vh[:r]
        if (block - approx).abs().max() <= tol:
            return r
    return len(S)
