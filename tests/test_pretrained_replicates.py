"""Tests of the replicate helpers of multihead.pretrained.analysis and of the token-level
rare-word criterion of multihead.pretrained.rarity, on hand-built attention (no model)."""

import math

import pytest
import torch

pytest.importorskip("transformers")

from multihead.pretrained.analysis import (  # noqa: E402
    folds,
    held_out_splits,
    steps_at_full,
    within_layer_rank_correlation,
)
from multihead.pretrained.load import SentenceAttention, word_level  # noqa: E402
from multihead.pretrained.rarity import (  # noqa: E402
    pieces_per_word,
    rare_word_targets,
    token_hit_rate,
    word_zipf,
)


def record(words, word_of_token, token_attention):
    wot = torch.tensor(word_of_token)
    return SentenceAttention(
        sentence=" ".join(words[1:-1]),
        tokens=[f"t{i}" for i in range(len(wot))],
        words=words,
        word_of_token=wot,
        token_attention=token_attention,
        word_attention=word_level(token_attention, wot, len(words)),
    )


def onto(t, key):
    """(1, 2, t, t): head 0 puts every query's maximum on ``key``, head 1 is uniform."""
    att = torch.full((1, 2, t, t), 0.1 / (t - 1))
    att[0, 0, :, key] = 0.9
    att[0, 0] /= att[0, 0].sum(-1, keepdim=True)
    att[0, 1] = 1.0 / t
    return att


def test_folds_and_held_out_splits_are_disjoint_partitions():
    fs = folds(10, 3, seed=0)
    assert sorted(i for f in fs for i in f) == list(range(10))
    assert sorted(len(f) for f in fs) == [3, 3, 4]
    assert folds(10, 3, seed=0) == fs and folds(10, 3, seed=1) != fs
    reps = held_out_splits(9, 3, seed=2)
    assert len(reps) == 3
    for score, held_out in reps:
        assert sorted(score + held_out) == list(range(9)) and not set(score) & set(held_out)
    assert sorted(i for s, _ in reps for i in s) == list(range(9))  # each item scored once
    with pytest.raises(ValueError, match="k=5"):
        folds(3, 5)
    with pytest.raises(ValueError, match="n="):
        folds(0, 1)
    with pytest.raises(ValueError, match="k=1"):
        held_out_splits(8, 1)
    # evaluate on the next fold: every item scored on once and evaluated on once
    nxt = held_out_splits(10, 5, seed=3, evaluate="next")
    parts = folds(10, 5, seed=3)
    assert [s for s, _ in nxt] == parts and [e for _, e in nxt] == parts[1:] + parts[:1]
    assert all(not set(s) & set(e) for s, e in nxt)
    with pytest.raises(ValueError, match="evaluate"):
        held_out_splits(10, 5, evaluate="rest")


def test_steps_at_full_stops_at_the_first_drop():
    steps = [0, 6, 12, 18]
    assert steps_at_full(torch.tensor([0.5, 0.6, 0.49, 0.7]), steps) == 6
    assert steps_at_full(torch.tensor([0.5, 0.4, 0.6, 0.7]), steps) == 0
    assert steps_at_full(torch.tensor([0.5, 0.5, 0.5, 0.5]), steps) == 18
    with pytest.raises(ValueError, match="steps"):
        steps_at_full(torch.tensor([0.5, 0.6]), [1, 2])


def test_within_layer_rank_correlation():
    x = torch.tensor([[1.0, 2, 3, 4], [1, 2, 3, 4]])
    y = torch.tensor([[2.0, 4, 6, 8], [4, 3, 2, 1]])
    assert torch.allclose(within_layer_rank_correlation(x, y), torch.tensor([1.0, -1.0]).double())
    with pytest.raises(ValueError, match="equally shaped"):
        within_layer_rank_correlation(x, y[:1])
    with pytest.raises(ValueError, match="at least 3 heads"):
        within_layer_rank_correlation(x[:, :2], y[:, :2])


def test_word_zipf_and_targets_skip_multi_piece_rarest_words():
    pytest.importorskip("wordfreq")
    # [CLS] the palimpsest ( pali ##mp ##sest ) faded . [SEP]: the rarest word has 3 pieces.
    split = record(
        ["[CLS]", "the", "palimpsest", "faded", ".", "[SEP]"],
        [0, 1, 2, 2, 2, 3, 4, 5],
        onto(8, 2),
    )
    one = record(["[CLS]", "the", "ornithologist", "slept", "[SEP]"], [0, 1, 2, 3, 4], onto(5, 2))
    z = word_zipf([split, one])
    assert math.isinf(z[0][0]) and math.isinf(z[0][4]) and math.isinf(z[0][-1])  # [CLS] . [SEP]
    assert z[0][2] < z[0][3] < z[0][1]  # palimpsest rarer than faded, rarer than the
    assert pieces_per_word(split).tolist() == [1, 1, 3, 1, 1, 1]
    targets = rare_word_targets([split, one], z)
    assert targets[0] is None  # rarest word in three pieces: not used
    assert targets[1] == (2, [1, 3])  # ornithologist; controls: the, slept
    with pytest.raises(ValueError, match="zipf"):
        rare_word_targets([split, one], z[:1])
    with pytest.raises(ValueError, match="maps"):
        word_zipf([])
    with pytest.raises(ValueError, match="lang"):
        word_zipf([one], "")


def test_token_hit_rate_chance_and_a_head_on_the_target():
    m = record(["[CLS]", "a", "b", "c", "[SEP]"], [0, 1, 2, 3, 4], onto(5, 2))
    rate, chance, offset = token_hit_rate([m], [[2]])
    # queries: [CLS], a, c (not [SEP], not the target itself); head 0 always hits word b.
    assert rate.shape == (1, 2)
    assert rate[0, 0].item() == pytest.approx(1.0)
    assert rate[0, 1].item() == pytest.approx(1 / 5)  # uniform: ties share, pieces / tokens
    assert chance == pytest.approx(1 / 5)
    assert offset == pytest.approx(1 / 3)  # one fixed offset reaches b from one of 3 queries
    # Two alternative targets are averaged: head 0 hits b, never c.
    rate2, _, _ = token_hit_rate([m], [[2, 3]])
    assert rate2[0, 0].item() == pytest.approx(0.5)
    assert token_hit_rate([m, m], [[2], None])[0].equal(rate)
    with pytest.raises(ValueError, match="targets"):
        token_hit_rate([m], [[0]])
    with pytest.raises(ValueError, match="targets"):
        token_hit_rate([m], [])
    with pytest.raises(ValueError, match="no sentence"):
        token_hit_rate([m], [None])
