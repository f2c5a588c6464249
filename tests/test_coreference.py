"""The coreference extension of the grammar (tasks.coreference) and its criterion
(analysis.coreference): gold links, translations, baselines, and bad input."""

import random

import pytest
import torch

from multihead.analysis.coreference import (
    class_copy_accuracy,
    coreference,
    nearest_noun,
    rule_accuracy,
)
from multihead.tasks.coreference import (
    NOUN_CLASS,
    PRONOUN_TARGET,
    CorefConfig,
    coref_corpus,
    coref_tensors,
    generate_item,
    noun_class,
    target_pronoun_positions,
)
from multihead.tasks.translation import encode


@pytest.fixture(scope="module")
def small():
    return coref_corpus(200, seed=3)


def test_items_link_a_pronoun_to_the_right_noun(small):
    for s, c in zip(*small.split("train"), strict=True):
        assert s.pos[c.pronoun] == "PRON" and s.pos[c.antecedent] == "NOUN"
        assert c.antecedent < s.words.index(".") < c.pronoun  # antecedent in sentence one
        rel = "nsubj" if c.kind == "subject" else "dobj"
        assert s.rels[c.antecedent] == rel and s.heads[s.heads[c.antecedent]] == -1
        assert s.words[c.pronoun] in (("it", "they") if c.kind == "subject" else ("it", "them"))
        assert noun_class(s.words[c.antecedent]) == c.noun_class
        # the target pronoun carries the antecedent's class and number
        assert s.target[target_pronoun_positions([s])[0]] == PRONOUN_TARGET[c.noun_class, c.number]


def test_both_kinds_and_every_class_occur(small):
    links = small.links["train"]
    assert {c.kind for c in links} == {"subject", "object"}
    assert {c.noun_class for c in links} == set(range(3))
    assert set(NOUN_CLASS.values()) == set(range(3))


def test_the_corpus_encodes_and_is_seeded(small):
    data = encode(small.corpus, small.corpus.valid)
    assert data.src.shape[0] == len(small.corpus.valid)
    again = coref_corpus(200, seed=3)
    assert again.digest == small.digest and coref_corpus(200, seed=4).digest != small.digest


def test_generate_item_is_deterministic():
    a = generate_item(random.Random(1), CorefConfig())
    b = generate_item(random.Random(1), CorefConfig())
    assert a == b


def test_tensors_and_rules(small):
    sents, links = small.split("valid")
    g = coref_tensors(sents, links)
    n = len(sents)
    assert g["is_noun"].shape[0] == n and g["pronoun"].shape == (n,)
    assert bool(g["is_noun"].gather(1, g["antecedent"][:, None]).all())
    rules = rule_accuracy(g["pronoun"], g["antecedent"], g["is_noun"], g["noun_class"])
    assert 0 <= rules["nearest"] <= rules["same_class"] <= 1
    copy = class_copy_accuracy(g["pronoun"], g["antecedent"], g["is_noun"], g["noun_class"])
    assert rules["nearest"] <= copy <= 1


def test_nearest_noun_by_hand():
    is_noun = torch.tensor([[False, True, False, True, True, False]])
    cls = torch.tensor([[-1, 0, -1, 1, 2, -1]])
    p = torch.tensor([5])
    assert nearest_noun(p, is_noun).tolist() == [4]
    assert nearest_noun(p, is_noun, cls, torch.tensor([0])).tolist() == [1]
    assert nearest_noun(torch.tensor([1]), is_noun).tolist() == [-1]


def _toy():
    # 2 items of 5 tokens: nouns at 0 and 2, the pronoun at 4, the antecedent at 0
    is_noun = torch.tensor([[True, False, True, False, False]] * 2)
    cls = torch.tensor([[1, -1, 0, -1, -1]] * 2)
    pron, ante = torch.tensor([4, 4]), torch.tensor([0, 0])
    pattern = torch.full((2, 2, 5, 5), 0.2)  # (batch, heads, query, key): head 1 uniform
    pattern[:, 0, 4] = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1])  # head 0 finds the antecedent
    return pattern, pron, ante, is_noun, cls


def test_criterion_scores_the_right_head_and_chance():
    pattern, pron, ante, is_noun, cls = _toy()
    out = coreference(pattern, pron, pron, ante, is_noun, cls)
    assert out["accuracy"].tolist() == pytest.approx([1.0, 0.2])  # uniform: 1 of 5 keys
    assert out["nearest"] == 0.0 and out["same_class"] == 1.0
    assert out["is_role"].tolist() == [False, False]  # the same-class rule already finds it
    stack = coreference(pattern[None].expand(3, -1, -1, -1, -1), pron, pron, ante, is_noun, cls)
    assert stack["accuracy"].shape == (3, 2)


def test_bad_input_names_the_argument():
    pattern, pron, ante, is_noun, cls = _toy()
    with pytest.raises(TypeError, match="pattern"):
        coreference(pattern.long(), pron, pron, ante, is_noun, cls)
    with pytest.raises(TypeError, match="query"):
        coreference(pattern, pron.float(), pron, ante, is_noun, cls)
    with pytest.raises(ValueError, match="query"):
        coreference(pattern, torch.tensor([4, 9]), pron, ante, is_noun, cls)
    with pytest.raises(ValueError, match="antecedent"):
        coreference(pattern, pron, pron, torch.tensor([1, 0]), is_noun, cls)  # not a noun
    with pytest.raises(ValueError, match="antecedent"):
        coreference(pattern, pron, torch.tensor([0, 4]), ante, is_noun, cls)  # not before
    with pytest.raises(ValueError, match="is_noun"):
        coreference(pattern, pron, pron, ante, is_noun[:, :3], cls)
    with pytest.raises(TypeError, match="is_noun"):
        coreference(pattern, pron, pron, ante, is_noun.long(), cls)
    with pytest.raises(ValueError, match="noun_class"):
        coreference(pattern, pron, pron, ante, is_noun, cls[:, :3])
    with pytest.raises(ValueError, match="margin"):
        coreference(pattern, pron, pron, ante, is_noun, cls, margin=2.0)
    with pytest.raises(ValueError, match="pattern"):
        coreference(pattern[0], pron, pron, ante, is_noun, cls)
    with pytest.raises(ValueError, match="noun_class and want"):
        nearest_noun(pron, is_noun, cls)


def test_task_bad_input(small):
    with pytest.raises(ValueError, match="n="):
        coref_corpus(5)
    with pytest.raises(TypeError, match="config"):
        coref_corpus(50, config="big")
    with pytest.raises(ValueError, match="p_object_pronoun"):
        CorefConfig(p_object_pronoun=1.5)
    with pytest.raises(ValueError, match="word"):
        noun_class("quickly")
    sents, links = small.split("valid")
    with pytest.raises(ValueError, match="links"):
        coref_tensors(sents, links[:-1])
    with pytest.raises(TypeError, match="links"):
        coref_tensors(sents[:1], ["x"])
    with pytest.raises(ValueError, match="seq_len"):
        coref_tensors(sents, links, seq_len=3)
    with pytest.raises(ValueError, match="target pronouns"):
        target_pronoun_positions(
            small.corpus.valid[:1]
            and [small.corpus.valid[0].__class__(("a",), ("DET",), (-1,), ("det",), ("ka",))]
        )


def test_shift_links_and_folds():
    from multihead.pretrained.coreference import coref_folds, shift_links

    pattern, pron, ante, is_noun, cls = _toy()
    links = {"pronoun": pron, "antecedent": ante, "is_noun": is_noun, "noun_class": cls,
             "number": cls.clamp_min(0)}  # fmt: skip
    shifted = shift_links(links, 7)
    assert shifted["pronoun"].tolist() == [5, 5] and shifted["is_noun"][:, 1].all()
    wide = torch.zeros(1, 2, 2, 7, 7)  # (layers, batch, heads, query, key): [CLS] w1..w5 [SEP]
    wide[0, :, :, 1:6, 1:6] = pattern
    out = coref_folds([(wide, shifted), (wide, shifted)], match="noun_class")
    assert out["head"] == [(0, 0), (0, 0)] and out["accuracy"] == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="seq_len"):
        shift_links(links, 5)
    with pytest.raises(TypeError, match="links"):
        shift_links({"pronoun": pron}, 7)
    with pytest.raises(ValueError, match="fold_data"):
        coref_folds([(wide, shifted)])
    with pytest.raises(TypeError, match="fold_data"):
        coref_folds([(wide, shifted), wide])
    with pytest.raises(ValueError, match="match"):
        coref_folds([(wide, shifted)] * 2, match="gender")


def test_trainer_glue_bad_input(small):
    from multihead.tasks.coreference import coref_readout, train_coref_models
    from multihead.tasks.translation import encode

    with pytest.raises(TypeError, match="data"):
        train_coref_models([0], small.corpus)
    with pytest.raises(TypeError, match="model"):
        coref_readout("model", encode(small.corpus, small.corpus.valid), small.corpus.valid)
