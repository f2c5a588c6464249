"""Each chapter-9 checker accepts the reference answer and rejects a wrong one."""

import exercise_answers as answers
import pytest
import torch

from multihead.exercises import check_classical_mds, check_js_divergence, check_word_level


def test_check_js_divergence():
    assert check_js_divergence(answers.my_js).startswith("Correct")
    with pytest.raises(AssertionError, match="JS distance"):
        check_js_divergence(lambda p, q: answers.my_js(p, q).sqrt())
    with pytest.raises(AssertionError, match="nan"):
        check_js_divergence(lambda p, q: (p * (p / ((p + q) / 2)).log()).sum(-1))


def test_check_word_level():
    assert check_word_level(answers.my_word_level).startswith("Correct")

    def summed_queries(p, wot, n):
        A = torch.nn.functional.one_hot(wot, n).to(p.dtype)
        return A.T @ p @ A

    with pytest.raises(AssertionError, match="average"):
        check_word_level(summed_queries)


def test_check_classical_mds():
    assert check_classical_mds(answers.my_mds).startswith("Correct")

    def unsquared(d, dim):  # forgets to square the distances
        n = d.shape[0]
        J = torch.eye(n, dtype=d.dtype) - 1.0 / n
        vals, vecs = torch.linalg.eigh(-J @ d @ J / 2)
        return vecs[:, -dim:] * vals[-dim:].clamp_min(0).sqrt()

    with pytest.raises(AssertionError, match="squared"):
        check_classical_mds(unsquared)
    with pytest.raises(AssertionError, match="shape"):
        check_classical_mds(lambda d, dim: torch.zeros(3))
