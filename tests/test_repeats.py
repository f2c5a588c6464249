import pytest
import torch
import torch.nn.functional as F

from multihead.core.train import IGNORE
from multihead.tasks.repeats import RepeatTask


def _sample(task, batch=64, seed=0):
    return task.sample(batch, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("prefix", [0, 5])
def test_sequences_repeat_a_segment_after_the_prefix(prefix):
    task = RepeatTask(vocab_size=11, segment=7, prefix=prefix)
    x, y = _sample(task)
    assert task.seq_len == prefix + 14 and x.shape == y.shape == (64, task.seq_len)
    assert x.dtype == torch.long and x.min() >= 0 and x.max() < 11
    assert torch.equal(x[:, prefix : prefix + 7], x[:, prefix + 7 :])
    assert torch.equal(y[:, :-1], x[:, 1:]) and (y[:, -1] == IGNORE).all()
    again, _ = _sample(task)
    assert torch.equal(x, again)  # the generator decides everything
    assert not torch.equal(x, _sample(task, seed=1)[0])


def test_tokens_are_uniform_over_the_vocabulary():
    x, _ = _sample(RepeatTask(vocab_size=8, segment=16, prefix=4), batch=2000)
    counts = torch.bincount(x[:, :20].flatten(), minlength=8).double()  # prefix and one copy
    assert (counts / counts.mean() - 1).abs().max() < 0.05  # 40,000 draws: 5 standard errors


def test_the_copies_hold_the_same_targets_at_the_same_offsets():
    task = RepeatTask(vocab_size=20, segment=6, prefix=3)
    first, second = task.first_copy, task.second_copy
    assert first.tolist() == [3, 4, 5, 6, 7] and second.tolist() == [9, 10, 11, 12, 13]
    x, y = _sample(task)
    assert torch.equal(y[:, first], y[:, second])
    # target t is in a copy: x[t] and x[t + 1] both are
    assert torch.equal(x[:, first], x[:, second]) and torch.equal(x[:, first + 1], x[:, second + 1])
    assert second.max() + 1 < task.seq_len  # never the last (ignored) position


def test_in_context_loss_is_second_copy_minus_first():
    task = RepeatTask(vocab_size=10, segment=4, prefix=2)
    losses = torch.full((3, task.seq_len), 9.0)
    losses[:, task.first_copy] = 2.0
    losses[:, task.second_copy] = 0.5
    assert torch.equal(task.in_context_loss(losses), torch.full((3,), -1.5))
    # a predictor that copies from the earlier segment: uniform on the first copy, exact after
    x, y = _sample(task, batch=8)
    logits = torch.zeros(8, task.seq_len, 10)
    second = task.second_copy
    logits[:, second] = 50.0 * F.one_hot(x[:, second - task.segment + 1], 10).float()
    per_token = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
    gap = task.in_context_loss(per_token)
    assert torch.allclose(gap, torch.full((8,), -torch.log(torch.tensor(10.0))), atol=1e-6)


def test_bad_arguments_name_themselves():
    for kwargs, kind, name in [
        ({"vocab_size": 1}, ValueError, "vocab_size"),
        ({"vocab_size": 3.0}, TypeError, "vocab_size"),
        ({"segment": 1}, ValueError, "segment"),
        ({"segment": 0}, ValueError, "segment"),
        ({"prefix": -1}, ValueError, "prefix"),
        ({"prefix": True}, TypeError, "prefix"),
    ]:
        with pytest.raises(kind, match=name):
            RepeatTask(**kwargs)
    task = RepeatTask()
    with pytest.raises(ValueError, match="batch_size"):
        task.sample(0, torch.Generator())
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, 0)
    with pytest.raises(ValueError, match="seq_len"):
        task.in_context_loss(torch.zeros(2, 5))
    with pytest.raises(TypeError, match="losses"):
        task.in_context_loss(torch.zeros(2, task.seq_len, dtype=torch.long))


def test_variable_segments_move_the_copy_and_the_masks_follow():
    task = RepeatTask(vocab_size=12, segment=6, min_segment=3)
    x, y, lengths, starts = task.sample_layout(50, torch.Generator().manual_seed(0))
    assert x.shape == (50, 12) and set(lengths.tolist()) <= set(range(3, 7))
    assert len(set(lengths.tolist())) > 1  # the distance between the copies varies
    first, second = task.copy_masks(lengths, starts)
    for b in range(50):
        L, s = int(lengths[b]), int(starts[b])
        assert s + 2 * L == 12
        assert torch.equal(x[b, s + L :], x[b, s : s + L])  # the second copy repeats the first
        assert first[b].sum() == second[b].sum() == L - 1
        assert torch.equal(second[b].nonzero().flatten(), first[b].nonzero().flatten() + L)
    losses = torch.rand(50, 12)
    want = torch.stack([
        losses[b, second[b]].mean() - losses[b, first[b]].mean() for b in range(50)
    ])  # fmt: skip
    assert torch.allclose(task.in_context_loss(losses, lengths, starts), want, atol=1e-6)


def test_fixed_and_variable_layouts_agree_when_the_length_is_fixed():
    task = RepeatTask(vocab_size=12, segment=5, prefix=2)
    x, y, lengths, starts = task.sample_layout(4, torch.Generator().manual_seed(1))
    assert lengths.tolist() == [5] * 4 and starts.tolist() == [2] * 4
    losses = torch.rand(4, 12)
    assert torch.allclose(
        task.in_context_loss(losses), task.in_context_loss(losses, lengths, starts)
    )
    with pytest.raises(ValueError, match="both"):
        task.in_context_loss(losses, lengths, None)
    with pytest.raises(ValueError, match="min_segment"):
        RepeatTask(segment=4, min_segment=5)
    with pytest.raises(TypeError, match="lengths"):
        task.copy_masks(lengths.float(), starts)
