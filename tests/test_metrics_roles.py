"""Tests of the generic functions the head-roles chapter added to ``metrics``."""

import pytest
import torch

from multihead.analysis.metrics import argmax_credit, rank_correlation, rank_correlation_by_row


def test_argmax_credit_single_max_and_ties():
    p = torch.tensor([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5], [0.4, 0.4, 0.2], [1 / 3, 1 / 3, 1 / 3]])
    target = torch.tensor([True, False, False])
    assert argmax_credit(p, target).tolist() == pytest.approx([1.0, 0.0, 0.5, 1 / 3])


def test_argmax_credit_broadcasts_and_checks():
    p = torch.full((2, 3, 4, 4), 0.25)
    assert argmax_credit(p, torch.eye(4, dtype=torch.bool)).shape == (2, 3, 4)
    with pytest.raises(TypeError, match="bool"):
        argmax_credit(p, torch.eye(4))
    with pytest.raises(ValueError, match="broadcast"):
        argmax_credit(p, torch.ones(5, dtype=torch.bool))


def test_rank_correlation_known_values():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert rank_correlation(x, x**3).item() == pytest.approx(1.0)
    assert rank_correlation(x, -x).item() == pytest.approx(-1.0)
    # Ties get the average rank: ranks (0.5, 0.5, 2, 3) against (0, 1, 2, 3).
    r = rank_correlation(torch.tensor([1.0, 1.0, 2.0, 3.0]), x).item()
    assert r == pytest.approx(0.9486833, abs=1e-6)
    assert rank_correlation(torch.ones(2, 2), torch.arange(4.0)).shape == ()


def test_rank_correlation_rejects_bad_input():
    with pytest.raises(ValueError, match="elements"):
        rank_correlation(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="at least 2"):
        rank_correlation(torch.ones(1), torch.ones(1))
    with pytest.raises(TypeError, match="x"):
        rank_correlation([1, 2], torch.ones(2))


def test_rank_correlation_by_row_takes_out_the_rows():
    # Across rows x and y rise together; within each row they run opposite ways.
    x = torch.tensor([[0.0, 1.0, 2.0], [10.0, 11.0, 12.0]])
    y = torch.tensor([[2.0, 1.0, 0.0], [12.0, 11.0, 10.0]])
    assert rank_correlation(x, y).item() > 0.5
    assert rank_correlation_by_row(x, y).tolist() == pytest.approx([-1.0, -1.0])


def test_rank_correlation_by_row_rejects_bad_input():
    with pytest.raises(ValueError, match="x must be a 2-D"):
        rank_correlation_by_row(torch.ones(3), torch.ones(3))
    with pytest.raises(ValueError, match="same shape"):
        rank_correlation_by_row(torch.ones(2, 3), torch.ones(3, 2))
    with pytest.raises(ValueError, match="at least 2"):
        rank_correlation_by_row(torch.ones(3, 1), torch.ones(3, 1))
