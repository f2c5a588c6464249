"""Linear probes: perfect on separable features, majority level on noise."""

import pytest
import torch

from multihead.analysis.probing import (
    fit_probes,
    majority_accuracy,
    position_features,
    position_majority_accuracy,
    probe_heads,
)


def test_majority_accuracy():
    assert majority_accuracy(torch.tensor([0, 1, 1]), torch.tensor([1, 1, 0, 2])) == 0.5
    with pytest.raises(TypeError, match="train_labels"):
        majority_accuracy(torch.tensor([0.5]), torch.tensor([1]))
    with pytest.raises(ValueError, match="test_labels is empty"):
        majority_accuracy(torch.tensor([0]), torch.tensor([], dtype=torch.long))


def test_position_majority_accuracy():
    # position 0: 3 twice, 4 once; position 1: 5; position 2: only padding
    train = torch.tensor([[3, 5, 0], [3, 5, 0], [4, 0, 0]])
    # scored: 3 (right), 5 (right), 4 (wrong), 6 (wrong), 7 at a position never trained
    test = torch.tensor([[3, 5, 0, 0], [4, 6, 0, 7]])
    assert position_majority_accuracy(train, test) == pytest.approx(2 / 5)
    assert position_majority_accuracy(train, train) == pytest.approx(4 / 5)
    with pytest.raises(TypeError, match="test_labels"):
        position_majority_accuracy(train, test.float())
    with pytest.raises(ValueError, match="nothing to score"):
        position_majority_accuracy(train, torch.zeros(2, 3, dtype=torch.long))


def test_probe_reads_separable_features_and_not_noise():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(3, (40, 6), generator=g)
    informative = torch.nn.functional.one_hot(labels, 4).float()  # (batch, seq, 4)
    noise = torch.randn(40, 6, 4, generator=g)
    z = torch.stack([informative, noise])[:, :, None].expand(2, 40, 1, 6, 4)  # (2, b, 1, s, 4)
    z = torch.cat([z, z.flip(0)], dim=2)  # (layers 2, batch, heads 2, seq, d)
    out = probe_heads(z, labels, torch.ones(40, 6, dtype=bool), 3, steps=200)
    acc = out["accuracy"]
    assert acc.shape == (2, 2)
    assert acc[0, 0] == 1.0 and acc[1, 1] == 1.0
    assert acc[1, 0] < 0.6 and acc[0, 1] < 0.6  # noise: about chance (1/3)


def test_probe_shape_errors():
    z = torch.zeros(1, 4, 1, 3, 2)
    with pytest.raises(ValueError, match="layers, batch"):
        probe_heads(z[0], torch.zeros(4, 3, dtype=torch.long), torch.ones(4, 3, dtype=bool), 2)
    with pytest.raises(ValueError, match="labels"):
        probe_heads(z, torch.zeros(4, 2, dtype=torch.long), torch.ones(4, 3, dtype=bool), 2)
    with pytest.raises(ValueError, match="train_fraction"):
        probe_heads(z, torch.zeros(4, 3, dtype=torch.long), torch.ones(4, 3, dtype=bool), 2, 1.0)
    with pytest.raises(ValueError, match="n_classes"):
        fit_probes(
            torch.zeros(1, 3, 2),
            torch.tensor([0, 1, 5]),
            torch.zeros(1, 2, 2),
            torch.tensor([0, 1]),
            2,
        )


def test_position_features_hold_only_position_and_length():
    f = position_features(torch.tensor([2, 3]), 4)
    assert f.shape == (1, 2, 1, 4, 4)
    assert torch.equal(f[0, 0, 0], torch.eye(4)) and torch.equal(f[0, 1, 0], torch.eye(4))
    g = position_features(torch.tensor([2, 3]), 4, with_length=True)
    assert g.shape == (1, 2, 1, 4, 8)
    assert g[0, 0, 0, :, 4:].argmax(-1).tolist() == [1] * 4  # length 2 -> index 1
    assert g[0, 1, 0, :, 4:].argmax(-1).tolist() == [2] * 4
    # A label that is the position itself is read perfectly from them.
    labels = torch.arange(4).expand(40, -1)
    out = probe_heads(position_features(torch.full((40,), 4), 4), labels, labels >= 0, 4)
    assert out["accuracy"].item() == 1.0


def test_position_features_bad_input():
    with pytest.raises(TypeError, match="lengths"):
        position_features(torch.tensor([1.5]), 4)
    with pytest.raises(ValueError, match="lengths must lie"):
        position_features(torch.tensor([5]), 4)
    with pytest.raises(ValueError, match="seq_len"):
        position_features(torch.tensor([1]), 0)


def test_fit_probes_names_the_argument_that_is_not_a_tensor_of_the_right_kind():
    x, y = torch.zeros(1, 3, 2), torch.tensor([0, 1, 1])
    with pytest.raises(TypeError, match="train_x must be a torch.Tensor"):
        fit_probes([[1.0]], [0], x, y, 2)
    with pytest.raises(TypeError, match="train_y must be a torch.Tensor"):
        fit_probes(x, [0, 1, 1], x, y, 2)
    with pytest.raises(TypeError, match="train_y must be an integer tensor"):
        fit_probes(x, y.float(), x, y, 2)
    with pytest.raises(TypeError, match="test_x must be a floating-point tensor"):
        fit_probes(x, y, x.long(), y, 2)
    with pytest.raises(TypeError, match="n_classes must be an int"):
        fit_probes(x, y, x, y, 2.0)
    with pytest.raises(TypeError, match="steps must be an int"):
        fit_probes(x, y, x, y, 2, steps=True)
    with pytest.raises(TypeError, match="lr must be a number"):
        fit_probes(x, y, x, y, 2, lr="0.1")
    with pytest.raises(TypeError, match="labels must be an integer tensor"):
        probe_heads(torch.zeros(1, 4, 1, 3, 2), torch.zeros(4, 3), torch.ones(4, 3, dtype=bool), 2)
    with pytest.raises(TypeError, match="token_mask must be a bool tensor"):
        probe_heads(torch.zeros(1, 4, 1, 3, 2), torch.zeros(4, 3, dtype=torch.long), 1, 2)
