"""The chapter-5 checkers accept the reference answers and reject wrong ones."""

import pytest
import torch

from multihead.analysis.roles import Gold, relation_targets
from multihead.exercises import check_head_confidence, check_positional_share, check_subject_head
from multihead.tasks.corpus import gold_tensors, make_corpus


def gold_of(sentences, seq_len=None):
    return Gold(**gold_tensors(sentences, seq_len))


def good_confidence(pattern, query_mask):
    top = pattern.amax(-1)  # (batch, heads, query)
    w = query_mask[:, None, :].float()
    return (top * w).sum(dim=(0, 2)) / w.sum(dim=(0, 2))


def good_share(pattern, offset):
    n = pattern.shape[-1]
    idx = torch.arange(n)
    valid = (idx + offset >= 0) & (idx + offset < n)
    hit = (pattern.argmax(-1) == idx + offset) & valid
    return hit.float().sum(dim=(0, 2)) / (valid.sum() * pattern.shape[0])


def test_confidence_checker(capsys):
    check_head_confidence(good_confidence)
    assert "Correct" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="query_mask"):
        check_head_confidence(lambda p, m: p.amax(-1).mean(dim=(0, 2)))
    with pytest.raises(AssertionError, match="one number per head"):
        check_head_confidence(lambda p, m: p.amax(-1).mean())


def test_positional_checker(capsys):
    check_positional_share(good_share)
    assert "Correct" in capsys.readouterr().out
    wrong = lambda p, o: (p.argmax(-1) == torch.arange(p.shape[-1]) + o).float().mean(dim=(0, 2))  # noqa: E731
    with pytest.raises(AssertionError, match="0 <= i"):
        check_positional_share(wrong)


def test_subject_head_checker(capsys):
    sents = make_corpus(200, seed=1).test
    gold = gold_of(sents)
    target, _ = relation_targets(gold, "nsubj", "head->dep")
    scores = torch.where(target, 20.0, 0.0).masked_fill(~gold.key_mask()[:, None, :], -1e9)
    subject = scores.softmax(-1)  # the verb looks at its subject
    uniform = torch.zeros_like(scores).masked_fill(~gold.key_mask()[:, None, :], -1e9).softmax(-1)
    pattern = torch.stack([torch.stack([uniform, uniform], 1), torch.stack([uniform, subject], 1)])
    check_subject_head((1, 1), pattern, gold)
    assert "Correct" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="another"):
        check_subject_head((0, 1), pattern, gold)
    with pytest.raises(AssertionError, match="tuple"):
        check_subject_head([1, 1], pattern, gold)
    with pytest.raises(AssertionError, match="within"):
        check_subject_head((2, 0), pattern, gold)
