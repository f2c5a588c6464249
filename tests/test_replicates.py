import pytest
import torch

from multihead.analysis.replicates import held_out_best


def test_held_out_best_chooses_on_the_other_folds():
    # Candidate 2 wins on fold 0 only (noise); candidate 1 is best on the others.
    scores = torch.tensor([[0.1, 0.5, 0.9], [0.2, 0.6, 0.1], [0.3, 0.7, 0.2]])
    chosen, held = held_out_best(scores)
    assert chosen.tolist() == [1, 1, 1]
    assert torch.allclose(held, torch.tensor([0.5, 0.6, 0.7]))
    # Weights: fold 2 heavy, so for fold 0 the pooled choice follows fold 2.
    s2 = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    chosen, _ = held_out_best(s2, torch.tensor([1.0, 1.0, 3.0]))
    assert chosen.tolist() == [1, 1, 0]
    # Several candidate dimensions are flattened: (folds, layers, heads).
    chosen, _ = held_out_best(torch.zeros(2, 3, 4).index_fill_(2, torch.tensor([3]), 1.0))
    assert divmod(int(chosen[0]), 4)[1] == 3


def test_held_out_best_bad_input():
    with pytest.raises(TypeError, match="scores"):
        held_out_best([[0.1, 0.2], [0.3, 0.4]])
    with pytest.raises(ValueError, match="at least 2 folds"):
        held_out_best(torch.ones(1, 3))
    with pytest.raises(ValueError, match="not finite"):
        held_out_best(torch.tensor([[0.1, float("nan")], [0.2, 0.3]]))
    with pytest.raises(ValueError, match="weights"):
        held_out_best(torch.ones(3, 2), torch.ones(2))
    with pytest.raises(ValueError, match="no weight"):
        held_out_best(torch.ones(2, 2), torch.tensor([1.0, 0.0]))
