"""The checkers of chapter 10: each passes the reference answer and names the bug of the
usual wrong ones."""

import math

import exercise_answers as answers
import pytest
import torch

from multihead.exercises import (
    check_absorbed_scores,
    check_group_kv,
    check_llama3_cache_bytes,
    check_online_step,
)

PER_TOKEN = 2 * 32 * 8 * 128 * 2


def test_cache_bytes_hints():
    assert check_llama3_cache_bytes(PER_TOKEN * 8192).startswith("Correct")
    assert check_llama3_cache_bytes(answers.llama3_cache_bytes).startswith("Correct")
    for wrong, hint in (
        (PER_TOKEN * 4 * 8192, "8 key/value heads"),
        (PER_TOKEN // 2 * 8192, "factor 2"),
        (PER_TOKEN, "one token"),
        (PER_TOKEN * 8192 * 8, "bits"),
        (PER_TOKEN * 8192 * 2, "2 bytes each"),
        (12345, "expected 2 x layers"),
    ):
        with pytest.raises(AssertionError, match=hint):
            check_llama3_cache_bytes(wrong)
    with pytest.raises(AssertionError, match="number of bytes"):
        check_llama3_cache_bytes("1 GiB")


def test_group_kv_hints():
    assert check_group_kv(answers.group_kv).startswith("Correct")
    with pytest.raises(AssertionError, match="wrong order"):
        check_group_kv(lambda k, h: k.repeat(1, h // k.shape[1], 1, 1))
    with pytest.raises(AssertionError, match="returned a result"):
        check_group_kv(lambda k, h: k.repeat_interleave(h // k.shape[1], 1))


def _no_guard(mu, ell, o, s, v):
    new = torch.maximum(mu, s.max(-1).values)
    scale, w = torch.exp(mu - new), torch.exp(s - new[:, None])
    return new, scale * ell + w.sum(-1), scale[:, None] * o + w @ v


def _no_rescale(mu, ell, o, s, v):
    new = torch.maximum(mu, s.max(-1).values)
    safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)
    w = torch.exp(s - safe[:, None])
    return new, ell + w.sum(-1), o + w @ v


def test_online_step_hints():
    assert check_online_step(answers.online_step).startswith("Correct")
    with pytest.raises(AssertionError, match="guard it"):
        check_online_step(_no_guard)
    with pytest.raises(AssertionError, match="exp\\(mu_old - mu_new\\)"):
        check_online_step(_no_rescale)


def test_absorbed_scores_refuses_formed_keys_and_names_the_scale():
    assert check_absorbed_scores(answers.absorbed_scores).startswith("Correct")

    def with_keys(x, W_Q, W_UK, c):
        return (x @ W_Q) @ (c @ W_UK).T / math.sqrt(W_Q.shape[1])

    def keys_transposed(x, W_Q, W_UK, c):
        return x @ W_Q @ (W_UK.T @ c.T) / math.sqrt(W_Q.shape[1])

    with pytest.raises(AssertionError, match="formed the keys"):
        check_absorbed_scores(with_keys)
    with pytest.raises(AssertionError, match="formed the keys"):
        check_absorbed_scores(keys_transposed)
    with pytest.raises(AssertionError, match="sqrt\\(d_head\\), the size"):
        check_absorbed_scores(lambda x, W_Q, W_UK, c: x @ W_Q @ W_UK.T @ c.T)
    with pytest.raises(AssertionError, match="not sqrt\\(d_latent\\)"):
        check_absorbed_scores(
            lambda x, W_Q, W_UK, c: x @ W_Q @ W_UK.T @ c.T / math.sqrt(c.shape[1])
        )
