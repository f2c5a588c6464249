"""The chapter-3 checkers accept the reference answers and reject wrong ones."""

import math

import pytest
import torch

from multihead.exercises import (
    check_bert_large_extra_params,
    check_min_key_size,
    check_realize_rows,
)


def realize_rows(X: torch.Tensor, P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: the expressivity construction for tokens as rows and row-stochastic P."""
    n = X.shape[0]
    X_right = X.T @ torch.linalg.inv(X @ X.T)  # (d, n): X @ X_right = I_n
    logits = math.sqrt(n) * torch.log(P)  # D0 = I
    return X_right @ logits, X_right  # W_Q (d, n), W_K (d, n): logits @ I^T


def min_key_size_reference(P: torch.Tensor) -> int:
    L = torch.log(P)
    C = L - L.mean(dim=0, keepdim=True)
    s = torch.linalg.svdvals(C)
    return 0 if s[0] < 1e-12 else int((s > 1e-8 * s[0]).sum())


def test_realize_rows_accepts_reference(capsys: pytest.CaptureFixture) -> None:
    assert check_realize_rows(realize_rows).startswith("Correct")
    assert "Correct" in capsys.readouterr().out


def test_realize_rows_rejects_wrong_constructions() -> None:
    def no_scale(X, P):
        W_Q, W_K = realize_rows(X, P)
        return W_Q / math.sqrt(X.shape[0]), W_K  # forgets sqrt(d_k)

    def swapped(X, P):
        W_Q, W_K = realize_rows(X, P)
        return W_K, W_Q  # gives softmax of the transposed logits

    def too_small(X, P):
        W_Q, W_K = realize_rows(X, P)
        return W_Q[:, :-1], W_K[:, :-1]

    def both(X, P):
        return swapped(X, P)[0], no_scale(X, P)[0]  # swapped and without sqrt(d_k)

    def twice(X, P):
        W_Q, W_K = realize_rows(X, P)
        return W_Q * math.sqrt(X.shape[0]), W_K  # multiplies by sqrt(d_k) once too often

    hints = {}
    for wrong, hint in (
        (no_scale, r"off by .*; the sqrt\(d_k\) is missing"),
        (swapped, "queries and keys are swapped: queries index the rows"),
        (both, "two mistakes: the sqrt.* swap W_Q and W_K"),
        (twice, "applied twice"),
    ):
        with pytest.raises(AssertionError, match=hint) as info:
            check_realize_rows(wrong)
        hints[wrong.__name__] = str(info.value).split("; ", 1)[1]
        assert "right inverse" not in hints[wrong.__name__]  # not the whole recipe
    assert len(set(hints.values())) == len(hints)  # four mistakes, four different hints
    with pytest.raises(AssertionError, match="right inverse"):
        check_realize_rows(lambda X, P: (torch.ones(X.shape[1], 3 * X.shape[0]),) * 2)
    with pytest.raises(AssertionError, match="d_k="):
        check_realize_rows(too_small)
    with pytest.raises(AssertionError, match="tuple"):
        check_realize_rows(lambda X, P: X)
    with pytest.raises(TypeError):
        check_realize_rows("not a function")


def test_min_key_size_checker() -> None:
    assert check_min_key_size(min_key_size_reference).startswith("Correct")

    def uncentred(P):
        s = torch.linalg.svdvals(torch.log(P))
        return int((s > 1e-8 * s[0]).sum())

    with pytest.raises(AssertionError, match="centr|mean"):
        check_min_key_size(uncentred)

    def rows_centred(P):  # the mean of each row (dim=1) taken out, not of each column
        L = torch.log(P)
        s = torch.linalg.svdvals(L - L.mean(dim=1, keepdim=True))
        return 0 if s[0] < 1e-12 else int((s > 1e-8 * s[0]).sum())

    with pytest.raises(AssertionError, match="centring the rows removes another one"):
        check_min_key_size(rows_centred)

    def ranks(P):  # uncentred, rows centred
        L = torch.log(P)
        return [int(torch.linalg.matrix_rank(M, rtol=1e-8)) for M in (L, L - L.mean(1, True))]

    def uncentred_where_it_differs(P):  # where centring the rows would give another rank
        raw, rows = ranks(P)
        return raw if raw != rows else min_key_size_reference(P)

    with pytest.raises(AssertionError, match="rank\\(log P\\) counts the per-column constant"):
        check_min_key_size(uncentred_where_it_differs)
    with pytest.raises(AssertionError, match="expected"):
        check_min_key_size(lambda P: P.shape[0])


def test_bert_large_checker() -> None:
    per_layer = 2 * (1024 * 1024 + 1024)
    assert check_bert_large_extra_params(24 * per_layer).startswith("Correct")
    with pytest.raises(AssertionError, match="24"):
        check_bert_large_extra_params(per_layer)
    with pytest.raises(AssertionError, match="biases"):
        check_bert_large_extra_params(24 * 2 * 1024 * 1024)
    with pytest.raises(AssertionError, match="number"):
        check_bert_large_extra_params("50M")
