"""The n-gram frequency predictors that fix a translation model's competence threshold."""

import pytest
import torch

from multihead.analysis.baselines import ngram_accuracy


def test_ngram_accuracy_uses_the_longest_context_seen():
    # start token 1, then sentences over tokens 2..5, padded with 0
    train = torch.tensor([[1, 2, 3, 4, 0], [1, 2, 3, 5, 0], [1, 2, 3, 5, 0], [1, 4, 3, 4, 0]])
    test = torch.tensor([[1, 2, 3, 5], [1, 4, 3, 4]])
    # unigram: the most frequent token (3, seen 4 times) everywhere
    assert ngram_accuracy(train, test, 1) == pytest.approx(2 / 6)
    # bigram: after 1 -> 2, 2 -> 3, 4 -> 3, and 3 -> 4 (twice, as often as 5 but seen first)
    assert ngram_accuracy(train, test, 2) == pytest.approx(4 / 6)
    # trigram: (2, 3) -> 5 and (4, 3) -> 4: every token but the first 4 is right
    assert ngram_accuracy(train, test, 3) == pytest.approx(5 / 6)
    # an unseen context backs off to a shorter one
    assert ngram_accuracy(train, torch.tensor([[1, 5, 3, 5]]), 3) == pytest.approx(1 / 3)


def test_ngram_accuracy_rejects_bad_input():
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="order"):
        ngram_accuracy(ids, ids, 0)
    with pytest.raises(ValueError, match="train must be"):
        ngram_accuracy(ids.float(), ids, 2)
    with pytest.raises(ValueError, match="test must be"):
        ngram_accuracy(ids, ids[0], 2)
    with pytest.raises(ValueError, match="each hold"):
        ngram_accuracy(torch.tensor([[1, 0, 0]]), ids, 2)
