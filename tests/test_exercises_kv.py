"""The checkers of chapter 10: each passes the reference answer and names the bug of the
usual wrong ones."""

import math

import exercise_answers as answers
import pytest
import torch

from multihead.exercises import (
    check_absorbed_scores,
    check_decode_step,
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

    def off_by_one(k, n_heads):  # the last head of each group reads the next group's head
        g = n_heads // k.shape[1]
        if n_heads % k.shape[1]:
            raise ValueError("n_heads")
        index = torch.tensor([min((i + 1) // g, k.shape[1] - 1) for i in range(n_heads)])
        return k[:, index]

    with pytest.raises(AssertionError, match="query head 3 reads key/value head 1; it is in group"):
        check_group_kv(off_by_one)


def _no_guard(mu, ell, o, s, v):
    new = torch.maximum(mu, s.max(-1).values)
    scale, w = torch.exp(mu - new), torch.exp(s - new[:, None])
    return new, scale * ell + w.sum(-1), scale[:, None] * o + w @ v


def _no_rescale(mu, ell, o, s, v):
    new = torch.maximum(mu, s.max(-1).values)
    safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)
    w = torch.exp(s - safe[:, None])
    return new, ell + w.sum(-1), o + w @ v


def _factor_guarded_only(mu, ell, o, s, v):  # the printed recurrence, factor guarded as hinted
    new = torch.maximum(mu, s.max(-1).values)
    scale = torch.where(torch.isinf(mu), torch.zeros_like(mu), torch.exp(mu - new))
    w = torch.exp(s - new[:, None])  # nan while new is -inf
    return new, scale * ell + w.sum(-1), scale[:, None] * o + w @ v


def _flipped(mu, ell, o, s, v):  # exp(mu_new - mu_old)
    new = torch.maximum(mu, s.max(-1).values)
    safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)
    scale = torch.where(torch.isinf(mu), torch.zeros_like(mu), torch.exp(safe - mu))
    w = torch.exp(s - safe[:, None])
    return new, scale * ell + w.sum(-1), scale[:, None] * o + w @ v


def test_online_step_hints():
    assert check_online_step(answers.online_step).startswith("Correct")
    for wrong in (_no_guard, _factor_guarded_only):  # both give nan on the left-padded query
        with pytest.raises(AssertionError, match="Subtract 0 instead of mu_new"):
            check_online_step(wrong)
    with pytest.raises(AssertionError, match="multiply ell and o by exp\\(mu_old - mu_new\\)"):
        check_online_step(_no_rescale)
    with pytest.raises(AssertionError, match="the factor is upside down"):
        check_online_step(_flipped)


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


def _attend(q, keys, values):
    """Shapes: q (batch, d), keys, values (batch, t, d) -> (batch, d)."""
    weights = (q[:, None] @ keys.transpose(1, 2) / math.sqrt(q.shape[-1])).softmax(-1)
    return (weights @ values)[:, 0]


def test_decode_step_names_a_cache_that_forgets_to_append():
    assert check_decode_step(answers.decode_step).startswith("Correct")

    def forgets_to_append(x, k_cache, v_cache, W_Q, W_K, W_V):  # right output, cache unchanged
        out, _, _ = answers.decode_step(x, k_cache, v_cache, W_Q, W_K, W_V)
        return out, k_cache, v_cache

    def replaces(x, k_cache, v_cache, W_Q, W_K, W_V):  # keeps only the new token
        out, k, v = answers.decode_step(x, k_cache, v_cache, W_Q, W_K, W_V)
        return out, k[:, -1:], v[:, -1:]

    def attends_before_appending(x, k_cache, v_cache, W_Q, W_K, W_V):  # misses its own key
        q, k, v = x @ W_Q, x @ W_K, x @ W_V
        out = _attend(q, k_cache, v_cache)  # zeros while the cache is empty
        return out, torch.cat([k_cache, k[:, None]], 1), torch.cat([v_cache, v[:, None]], 1)

    def prepends(x, k_cache, v_cache, W_Q, W_K, W_V):  # the new token first
        q, k, v = x @ W_Q, x @ W_K, x @ W_V
        keys, values = torch.cat([k[:, None], k_cache], 1), torch.cat([v[:, None], v_cache], 1)
        return _attend(q, keys, values), keys, values

    def unscaled(x, k_cache, v_cache, W_Q, W_K, W_V):
        d_head = W_Q.shape[1]
        return answers.decode_step(x, k_cache, v_cache, W_Q * math.sqrt(d_head), W_K, W_V)

    for wrong, hint in (
        (
            forgets_to_append,
            "the cache as it came in: the new token's key and value must be appended",
        ),
        (replaces, "holds only the new token: append to the cache, do not replace it"),
        (attends_before_appending, "attends only to the tokens before it"),
        (prepends, "in the wrong order: the new token goes at the end"),
        (unscaled, "divide the scores by sqrt\\(d_head\\)"),
    ):
        with pytest.raises(AssertionError, match=hint):
            check_decode_step(wrong)
