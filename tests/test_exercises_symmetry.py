"""The chapter-2 checkers accept the reference answers and reject wrong ones."""

import pytest
import torch

from multihead import exercises as ex

PER_HEAD = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O")


def swap(attn, i, j, names=PER_HEAD):
    with torch.no_grad():
        for name in names:
            p = getattr(attn, name)
            p[[i, j]] = p[[j, i]]


def test_check_swap_heads():
    assert ex.check_swap_heads(swap).startswith("Correct")
    with pytest.raises(AssertionError, match="W_O"):
        ex.check_swap_heads(lambda a, i, j: swap(a, i, j, PER_HEAD[:-1]))


def test_check_value_gradient():
    assert ex.check_value_gradient(lambda X, A, G, W_O: X.T @ A.T @ G @ W_O.T).startswith("Correct")
    with pytest.raises(AssertionError, match="wrong values"):
        ex.check_value_gradient(lambda X, A, G, W_O: X.T @ A @ G @ W_O.T)
    with pytest.raises(AssertionError, match="shape"):
        ex.check_value_gradient(lambda X, A, G, W_O: W_O)
