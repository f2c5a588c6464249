"""The checkers of chapter 11: each passes the reference answer, names the bug of the usual
wrong ones, and refuses the package's own solution."""

import exercise_answers as answers
import pytest
import torch

from multihead.analysis.circuits import induction_score
from multihead.core.hooks import run_with_cache, run_with_hooks
from multihead.core.rotary import rotary_matrix
from multihead.exercises import (
    check_induction_build,
    check_patch_head,
    check_prefix_matching,
    check_rope,
)
from multihead.interventions.patching import patch_heads


def test_rope_hints_and_refusal():
    assert check_rope(answers.rope).startswith("Correct")
    with pytest.raises(AssertionError, match="wrong way"):
        check_rope(lambda x, t, base=10000.0: answers.rope(x, -t, base))

    def halves(x, t, base=10000.0):  # pairs (j, j + d/2) instead of (2j, 2j + 1)
        d = x.shape[-1]
        th = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
        c, s = torch.cos(t * th), torch.sin(t * th)
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * c - b * s, a * s + b * c], -1)

    with pytest.raises(AssertionError, match="plane by plane"):
        check_rope(halves)
    with pytest.raises(AssertionError, match="write it yourself"):
        check_rope(lambda x, t, base=10000.0: x @ rotary_matrix(t, x.shape[-1], dtype=x.dtype).T)


def test_prefix_matching_hints_and_refusal():
    assert check_prefix_matching(answers.prefix_matching).startswith("Correct")
    with pytest.raises(AssertionError, match="i - L \\+ 1"):
        check_prefix_matching(lambda p, L: p[torch.arange(L, 2 * L), torch.arange(0, L)].mean())
    with pytest.raises(AssertionError, match="write it yourself"):
        check_prefix_matching(lambda p, L: induction_score(p, L))


def test_patch_head_hints_and_refusal():
    assert check_patch_head(answers.patch_head).startswith("Correct")

    def lost(model, clean, corrupted, metric, layer, head):
        return 1 - answers.patch_head(model, clean, corrupted, metric, layer, head)

    with pytest.raises(AssertionError, match="what is lost"):
        check_patch_head(lost)

    def patched(model, clean, corrupted, metric, layer, head):
        """(m_clean, m_corrupted, m_patched) for one head, the answer's way."""
        name = f"layers.{layer}.attn.z"
        clean_logits, cache = run_with_cache(model, clean, names_filter=[name])

        def put(z, _name):
            z = z.clone()
            z[:, head] = cache[name][:, head]
            return z

        m_patched = metric(run_with_hooks(model, corrupted, fwd_hooks=[(name, put)]))
        return metric(clean_logits), metric(model(corrupted)), m_patched

    def not_normalised(*args):
        m_clean, m_bad, m_patched = patched(*args)
        return float(m_patched - m_bad)

    def sign_flipped(*args):
        m_clean, m_bad, m_patched = patched(*args)
        return float((m_patched - m_bad) / (m_bad - m_clean))

    def next_head(model, clean, corrupted, metric, layer, head):
        return answers.patch_head(model, clean, corrupted, metric, layer, 1 - head)

    for wrong, hint in (
        (not_normalised, "that is m_patched - m_corrupted.*divide it by m_clean - m_corrupted"),
        (sign_flipped, "the sign is flipped"),
        (next_head, "you returned what patching layer 0, head 1 recovers.*z\\[:, 0\\]"),
    ):
        with pytest.raises(AssertionError, match=hint):
            check_patch_head(wrong)


def test_recovered_is_checked_with_its_own_hints():
    assert check_patch_head(answers.patch_head, answers.recovered).startswith("Correct")
    for wrong, hint in (
        (lambda c, b, p: 1 - answers.recovered(c, b, p), "not what is lost"),
        (lambda c, b, p: min(max(answers.recovered(c, b, p), 0.0), 1.0), "do not clip it"),
        (lambda c, b, p: (p - b) / (b - c), "recovered\\(2.0, 4.0, 3.0\\) is 0.5"),
    ):
        with pytest.raises(AssertionError, match=hint):
            check_patch_head(answers.patch_head, wrong)
    with pytest.raises(AssertionError, match="write it yourself"):
        check_patch_head(
            lambda m, c, x, f, layer, head: float(patch_heads(m, c, x, f)[layer, head])
        )


def test_induction_build_passes_the_construction_and_names_a_broken_one():
    assert check_induction_build(answers.build_induction).startswith("Correct")

    def no_previous(vocab_size, seq_len):
        model = answers.build_induction(vocab_size, seq_len)
        with torch.no_grad():
            model.layers[0].attn.W_O.zero_()  # layer 0 writes nothing
        return model

    with pytest.raises(AssertionError, match="predicted wrongly"):
        check_induction_build(no_previous)
