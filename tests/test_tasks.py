import pytest
import torch

from multihead.tasks.synthetic import IGNORE, LookupTask


def test_pair_lookup_targets():
    task = LookupTask(vocab_size=5, seq_len=9, offsets=(1, 3))
    x, y = task.sample(4, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 9)
    assert (y[:, :3] == IGNORE).all()
    for t in range(3, 9):
        assert torch.equal(y[:, t], 5 * x[:, t - 1] + x[:, t - 3])
    assert task.n_classes == 25 and task.first_target == 3


def test_three_offsets():
    task = LookupTask(vocab_size=3, seq_len=6, offsets=(1, 2, 4))
    x, y = task.sample(5, torch.Generator().manual_seed(2))
    assert task.n_classes == 27
    for t in range(4, 6):
        assert torch.equal(y[:, t], 9 * x[:, t - 1] + 3 * x[:, t - 2] + x[:, t - 4])


def test_sampling_is_seeded():
    task = LookupTask()
    a = task.sample(3, torch.Generator().manual_seed(1))
    b = task.sample(3, torch.Generator().manual_seed(1))
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


@pytest.mark.parametrize(
    "kwargs, err",
    [
        ({"vocab_size": 1}, ValueError),
        ({"seq_len": 0}, ValueError),
        ({"offsets": (2, 2)}, ValueError),
        ({"offsets": (0, 1)}, ValueError),
        ({"offsets": (1, 12)}, ValueError),
        ({"offsets": [1, 3]}, TypeError),
        ({"offsets": (1,)}, TypeError),
    ],
)
def test_bad_input(kwargs, err):
    with pytest.raises(err):
        LookupTask(**kwargs)


def test_sample_bad_input():
    task = LookupTask()
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, 0)
    with pytest.raises(ValueError, match="batch_size"):
        task.sample(0, torch.Generator())
