"""The checkers of chapter 12: each passes the reference answer, names the bug of every usual
wrong answer with the hint meant for it, and refuses the package's own solution."""

import exercise_answers as answers
import pytest
import torch

from multihead.analysis import circuits, headrank
from multihead.analysis.cost import kv_cache_bytes
from multihead.core.attention import GroupedQueryAttention
from multihead.core.convert import regroup
from multihead.exercises import (
    check_find_induction_heads,
    check_head_needed_rank,
    check_mean_pool_kv,
    check_smollm2_cache_bytes,
)

RIGHT = answers.smollm2_cache_bytes()


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (RIGHT * 3, "9 query heads"),
        (RIGHT // 2, "the factor 2"),
        (RIGHT // 8192, "one token"),
        (RIGHT * 8, "bits"),
        (RIGHT * 2, "2 bytes each"),
        (RIGHT // 30, "30 layers"),
        (12345, "expected 2 x layers"),
    ],
)
def test_cache_bytes_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        check_smollm2_cache_bytes(wrong)


def test_cache_bytes_right_and_refusal():
    assert check_smollm2_cache_bytes(answers.smollm2_cache_bytes).startswith("Correct")
    assert check_smollm2_cache_bytes(RIGHT).startswith("Correct")
    with pytest.raises(AssertionError, match="write it yourself"):
        check_smollm2_cache_bytes(
            lambda: kv_cache_bytes(n_layers=30, n_kv_heads=3, d_head=64, n_tokens=8192)
        )
    with pytest.raises(AssertionError, match="a number of bytes"):
        check_smollm2_cache_bytes("180 MiB")


def _scores(patterns, segment, offset):
    q = torch.arange(segment, 2 * segment)
    return patterns[..., q, q - offset].mean(-1)  # (layers, batch, heads)


def test_find_induction_heads_hints_and_refusal():
    assert check_find_induction_heads(answers.find_induction_heads).startswith("Correct")

    def duplicate(patterns, segment, threshold=0.5):  # the earlier copy itself
        s = _scores(patterns, segment, segment).mean(1)
        return [tuple(x) for x in (s > threshold).nonzero().tolist()] + [(0, 1)]

    def any_sequence(patterns, segment, threshold=0.5):  # no mean over the batch
        s = _scores(patterns, segment, segment - 1).amax(1)
        return [tuple(x) for x in (s > threshold).nonzero().tolist()]

    def lax(patterns, segment, threshold=0.5):  # a lower bar than asked
        return answers.find_induction_heads(patterns, segment, 0.25)

    def reversed_order(patterns, segment, threshold=0.5):
        return answers.find_induction_heads(patterns, segment, threshold)[::-1]

    for wrong, hint in (
        (duplicate, "duplicate-token head"),
        (any_sequence, "one sequence only"),
        (lax, "below 0.5"),
        (reversed_order, "wrong order"),
    ):
        with pytest.raises(AssertionError, match=hint):
            check_find_induction_heads(wrong)

    def package(patterns, segment, threshold=0.5):
        s = torch.stack([circuits.induction_score(p, segment) for p in patterns]).mean(1)
        return [tuple(x) for x in (s > threshold).nonzero().tolist()]

    with pytest.raises(AssertionError, match="write it yourself"):
        check_find_induction_heads(package)


def test_mean_pool_kv_hints_and_refusal():
    assert check_mean_pool_kv(answers.mean_pool_kv).startswith("Correct")

    def first(W, new_kv):
        return W.view(new_kv, W.shape[0] // new_kv, *W.shape[1:])[:, 0]

    def total(W, new_kv):
        return W.view(new_kv, W.shape[0] // new_kv, *W.shape[1:]).sum(1)

    def strided(W, new_kv):
        return W.view(W.shape[0] // new_kv, new_kv, *W.shape[1:]).mean(0)

    def no_check(W, new_kv):
        r = max(W.shape[0] // new_kv, 1)
        return W[: new_kv * r].reshape(new_kv, r, *W.shape[1:]).mean(1)

    for wrong, hint in (
        (first, "keeps the first head"),
        (total, "the sum"),
        (strided, "consecutive"),
        (no_check, "raise"),
    ):
        with pytest.raises(AssertionError, match=hint):
            check_mean_pool_kv(wrong)

    def package(W, new_kv):
        n_kv, d_model, d_head = W.shape
        layer = GroupedQueryAttention(d_model, n_kv, n_kv, d_head, bias=False).double()
        with torch.no_grad():
            layer.W_K.copy_(W)
        return regroup(layer, new_kv).W_K.detach()

    with pytest.raises(AssertionError, match="write it yourself"):
        check_mean_pool_kv(package)


def test_head_needed_rank_hints_and_refusal():
    assert check_head_needed_rank(answers.head_needed_rank).startswith("Correct")

    def block_of(scores):
        n = scores.shape[-1]
        return scores[n // 2 :, : n // 2].double()

    def counted(scores, tol):  # singular values above tol: enough, not the smallest
        b = block_of(scores)
        return int((torch.linalg.svdvals(b - b.mean(-1, keepdim=True)) > tol).sum())

    def uncentred(scores, tol):
        b = block_of(scores)
        U, S, Vh = torch.linalg.svd(b)
        for r in range(len(S) + 1):
            if (b - (U[:, :r] * S[:r]) @ Vh[:r]).abs().max() <= tol:
                return r
        return len(S)

    def relative(scores, tol):
        b = block_of(scores)
        s = torch.linalg.svdvals(b - b.mean(-1, keepdim=True))
        return int((s > tol * s[0]).sum())

    for wrong, hint in (
        (counted, "not the smallest"),
        (uncentred, "centre every row"),
        (relative, "not relative"),
    ):
        with pytest.raises(AssertionError, match=hint):
            check_head_needed_rank(wrong)
    with pytest.raises(AssertionError, match="write it yourself"):
        check_head_needed_rank(
            lambda s, tol: int(headrank.needed_rank(headrank.visible_block(s), [tol])[0])
        )
