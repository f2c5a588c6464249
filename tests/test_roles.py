"""Role detectors on hand-built attention patterns whose answers we know."""

import pytest
import torch

from multihead.analysis.roles import (
    DIRECTIONS,
    SYNTACTIC_RELATIONS,
    Gold,
    assign_roles,
    confidence,
    delimiter,
    head_roles,
    positional,
    rare_word,
    rarest_targets,
    relation_targets,
    syntactic,
)
from multihead.tasks.corpus import gold_tensors, make_corpus


def gold_of(sentences, seq_len=None):
    return Gold(**gold_tensors(sentences, seq_len))


@pytest.fixture(scope="module")
def sents():
    return make_corpus(300, seed=5).test


@pytest.fixture(scope="module")
def gold(sents):
    return gold_of(sents)


def _rows(gold: Gold, target: torch.Tensor) -> torch.Tensor:
    """A (batch, 1, seq, seq) pattern putting weight ~1 on ``target`` keys (else uniform)."""
    scores = torch.where(target, 30.0, 0.0)  # (batch, seq, seq)
    scores = scores.masked_fill(~gold.key_mask()[:, None, :], float("-inf"))
    return scores.softmax(-1)[:, None]


def _offset_head(gold: Gold, offset: int) -> torch.Tensor:
    idx = torch.arange(gold.seq_len)
    key = (idx + offset).clamp(0)[None, :].expand(len(gold.lengths), -1)
    key = torch.minimum(key, gold.lengths[:, None] - 1)  # stay inside the sentence
    return _rows(gold, torch.nn.functional.one_hot(key, gold.seq_len).bool())


def _uniform(gold: Gold) -> torch.Tensor:
    return _rows(gold, torch.zeros(len(gold.lengths), gold.seq_len, gold.seq_len, dtype=bool))


def test_previous_token_head_is_positional_minus_one(gold):
    p = _offset_head(gold, -1)
    stats = positional(p, gold)
    assert stats["offset"].tolist() == [-1] and stats["is_role"].tolist() == [True]
    assert stats["share"].item() == pytest.approx(1.0)
    assert confidence(p, gold).item() == pytest.approx(1.0, abs=1e-6)


def test_next_token_and_self_heads(gold):
    assert positional(_offset_head(gold, 1), gold)["offset"].item() == 1
    assert positional(_offset_head(gold, 0), gold)["offset"].item() == 0


def test_uniform_head_has_no_role(gold):
    p = _uniform(gold)
    assert not positional(p, gold)["is_role"].any()
    assert not delimiter(p, gold)["is_role"].any()
    assert not rare_word(p, gold)["is_role"].any()
    for rel in SYNTACTIC_RELATIONS:
        for direction in DIRECTIONS:
            assert not syntactic(p, gold, rel, direction)["is_role"].any(), (rel, direction)
    # Its confidence is the mean of 1/n: far from 1.
    assert confidence(p, gold).item() < 0.2


def test_uniform_head_scores_chance_on_rare_words(gold):
    stats = rare_word(_uniform(gold), gold)
    assert stats["rate"].item() == pytest.approx(stats["chance"], abs=1e-5)


def test_end_token_head_is_a_delimiter(gold):
    end = torch.arange(gold.seq_len)[None, :] == (gold.lengths[:, None] - 1)
    p = _rows(gold, end[:, None, :].expand(-1, gold.seq_len, -1))
    assert delimiter(p, gold)["share"].item() == pytest.approx(1.0)
    assert delimiter(p, gold)["is_role"].all()


def test_rare_word_head(gold):
    rare = rarest_targets(gold, k=1)
    p = _rows(gold, rare[:, None, :].expand(-1, gold.seq_len, -1))
    stats = rare_word(p, gold)
    assert stats["rate"].item() == pytest.approx(1.0) and stats["is_role"].item()
    assert stats["chance"] < 0.2
    assert rare_word(p, gold, k=2)["rate"].item() == pytest.approx(1.0)


def test_rarest_targets_picks_the_highest_rank(sents, gold):
    rare = rarest_targets(gold, 1)
    for i, s in enumerate(sents[:20]):
        top = max(s.ranks)
        assert rare[i, : len(s)].tolist() == [r == top for r in s.ranks]


def test_subject_head_is_syntactic(gold):
    target, _ = relation_targets(gold, "nsubj", "head->dep")
    p = _rows(gold, target)  # the verb looks at its subject, other tokens look anywhere
    stats = syntactic(p, gold, "nsubj", "head->dep")
    assert stats["accuracy"].item() == pytest.approx(1.0)
    assert stats["is_role"].item() and stats["baseline"] < 0.9
    other = syntactic(p, gold, "dobj", "dep->head")
    assert not other["is_role"].item()


def test_baseline_of_a_fixed_position_relation(gold):
    # An adverb always sits right before its verb: the baseline is perfect, nothing beats it.
    stats = syntactic(_offset_head(gold, 1), gold, "advmod", "dep->head")
    assert stats["baseline"] == pytest.approx(1.0) and stats["baseline_offset"] == 1
    assert stats["accuracy"].item() == pytest.approx(1.0) and not stats["is_role"].item()


def test_stack_of_layers_and_role_grid(gold):
    layers = torch.stack(
        [
            torch.cat([_offset_head(gold, -1), _uniform(gold)], 1),
            torch.cat([_offset_head(gold, 0), _uniform(gold)], 1),
        ]
    )  # (2, batch, 2, seq, seq)
    pos = positional(layers, gold)
    assert pos["offset"].shape == (2, 2) and confidence(layers, gold).shape == (2, 2)
    roles = assign_roles(
        pos, delimiter(layers, gold), torch.zeros(2, 2, dtype=bool), rare_word(layers, gold)
    )
    assert roles == [["positional", "none"], ["self", "none"]]


def test_mismatched_lengths_are_rejected(sents, gold):
    p = _uniform(gold)
    with pytest.raises(ValueError, match="seq_len"):
        positional(p[..., :-1, :-1], gold)
    with pytest.raises(ValueError, match="batch"):
        confidence(p[:-1], gold)
    with pytest.raises(ValueError, match="batch, heads, query, key"):
        delimiter(p[0, 0], gold)
    with pytest.raises(ValueError, match="layers"):
        rare_word(p[None, None], gold)
    with pytest.raises(TypeError, match="gold"):
        positional(p, {"lengths": gold.lengths})
    with pytest.raises(ValueError, match="negative"):
        positional(-p, gold)
    with pytest.raises(ValueError, match="seq_len"):
        gold_of(sents, seq_len=3)
    with pytest.raises(ValueError, match="empty"):
        gold_of([])


def test_bad_relation_direction_and_k(gold):
    with pytest.raises(ValueError, match="relation"):
        relation_targets(gold, "subj", "dep->head")
    with pytest.raises(ValueError, match="direction"):
        relation_targets(gold, "nsubj", "up")
    with pytest.raises(ValueError, match="k=0"):
        rarest_targets(gold, 0)


def test_head_roles_scores_every_criterion_and_counts_the_roles(gold):
    layers = torch.stack(
        [
            torch.cat([_offset_head(gold, -1), _uniform(gold)], 1),
            torch.cat([_offset_head(gold, 0), _uniform(gold)], 1),
        ]
    )  # (2, batch, 2, seq, seq)
    out = head_roles(layers, gold)
    assert out["confidence"].shape == (2, 2)
    assert out["counts"] == {
        "positional": 2, "self": 1, "syntactic": out["counts"]["syntactic"],
        "rare-word": 0, "delimiter": 0,
    }  # fmt: skip
    assert ("nsubj", "head->dep") in out["syntactic"]
    flags = torch.zeros(2, 2, dtype=bool)
    for stats in out["syntactic"].values():
        flags |= stats["is_role"]
    assert torch.equal(out["syntactic_flags"], flags)
    assert not out["syntactic_flags"][:, 1].any()  # the uniform heads follow no relation


def test_head_roles_wants_a_stack_of_layers(gold):
    with pytest.raises(ValueError, match="stack"):
        head_roles(_uniform(gold), gold)
    with pytest.raises(TypeError, match="gold"):
        head_roles(_uniform(gold)[None], "gold")
