"""Tests of the sentence-classification testbed (which clause holds the direct object)."""

from collections import Counter
from dataclasses import replace

import pytest
import torch

from multihead.core.config import TrainConfig
from multihead.core.model import EncoderModel
from multihead.tasks.classification import (
    ClassificationData,
    bag_of_words,
    classification_corpus,
    classification_data,
    classification_loss,
    classification_sampler,
    classifier_config,
    classifier_scores,
    classify,
    mean_pool,
    object_clause,
    train_classifiers,
)
from multihead.tasks.corpus import GrammarConfig, make_corpus


@pytest.fixture(scope="module")
def corpus():
    return classification_corpus(400, seed=0)


def test_labels_follow_the_gold_parse(corpus):
    labelled = [(s, object_clause(s)) for s in corpus.train if object_clause(s) is not None]
    assert 0.3 < len(labelled) / len(corpus.train) < 0.7  # exactly one transitive verb
    for s, y in labelled[:50]:
        obj = s.rels.index("dobj")
        assert s.rels.count("dobj") == 1 and "relcl" in s.rels
        assert y == int(s.rels[s.heads[obj]] == "root")
        # label 0: the object comes before the main verb (inside the relative clause)
        assert (obj < s.rels.index("root")) == (y == 0)
    assert {y for _, y in labelled} == {0, 1}


def test_sentences_without_a_relative_clause_have_no_label():
    plain = make_corpus(60, seed=1, config=GrammarConfig(p_relative=0.0))
    assert all(object_clause(s) is None for s in plain.train)


def test_bag_of_words_is_blind_to_the_label_by_construction(corpus):
    # swapping which verb takes the object keeps the words: the two classes have the same
    # distribution of bags, so their most common words occur about equally often
    data = classification_data(corpus, corpus.train)
    counts = bag_of_words(data, len(corpus.src_vocab))
    assert counts.shape == (len(data), len(corpus.src_vocab))
    assert torch.equal(counts.sum(1), (data.src != 0).sum(1).float())
    assert (counts[:, 0] == 0).all()  # padding is not a word
    words = Counter(w for s in corpus.train if object_clause(s) is not None for w in s.words)
    that = corpus.src_vocab.index("that")
    assert words["that"] == int(counts[:, that].sum())


def test_mean_pool_equals_the_head_on_pooled_states(corpus):
    cfg = classifier_config(corpus, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    torch.manual_seed(0)
    model = EncoderModel(cfg)
    data = classification_data(corpus, corpus.valid)
    src = data.src[:6]
    states = model.encoder(src, key_padding_mask=src == 0)  # (6, seq, 16)
    real = (src != 0).float()[..., None]
    pooled_states = (states * real).sum(1) / real.sum(1)
    assert torch.allclose(classify(model, src), model.head(pooled_states), atol=1e-5)


def test_classification_loss_is_the_cross_entropy_of_the_pooled_logits(corpus):
    cfg = classifier_config(corpus, d_model=16, n_heads=4, n_layers=1, d_ff=32)
    torch.manual_seed(0)
    model = EncoderModel(cfg).eval()
    data = classification_data(corpus, corpus.train)
    src, labels = classification_sampler(data)(8, torch.Generator().manual_seed(0))
    loss = classification_loss(model, (src, labels))
    assert loss.ndim == 0 and loss.requires_grad
    want = torch.nn.functional.cross_entropy(classify(model, src), labels)
    torch.testing.assert_close(loss.detach(), want, atol=1e-6, rtol=0)
    padded = torch.cat([src, torch.zeros(8, 3, dtype=src.dtype)], dim=1)  # more padding
    torch.testing.assert_close(classification_loss(model, (padded, labels)), loss, atol=1e-6,
                               rtol=0)  # fmt: skip
    flipped = classification_loss(model, (src, 1 - labels))
    assert abs(flipped.item() - loss.item()) > 1e-4  # the labels count


def test_train_classifiers_scores_each_seed_as_alone_and_caches_each(corpus, tmp_path, monkeypatch):
    from multihead.core import train as core_train

    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MULTIHEAD_DEVICE", "cpu")
    cfg = classifier_config(corpus, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    train, valid = (
        classification_data(corpus, corpus.train),
        classification_data(corpus, corpus.valid),
    )
    tcfg = TrainConfig(steps=8, batch_size=16, lr=3e-3, warmup=2)
    scores = train_classifiers([0, 1], corpus, train, valid, cfg, tcfg, evals=2, name="t")
    assert scores.seeds == (0, 1) and scores.steps == (4, 8)
    assert scores.loss.shape == scores.accuracy.shape == (2, 2)
    assert ((scores.accuracy >= 0) & (scores.accuracy <= 1)).all()
    assert torch.equal(scores.at(8)[0], scores.final_loss)
    assert len(list(tmp_path.iterdir())) == 2  # one checkpoint per seed
    for k, seed in enumerate([0, 1]):  # seed s: EncoderModel after manual_seed(s), own batches
        torch.manual_seed(seed)
        alone = EncoderModel(cfg)
        core_train.train(alone, classification_sampler(train), replace(tcfg, seed=seed),
                         loss_fn=classification_loss, progress=False)  # fmt: skip
        loss, accuracy = classifier_scores(alone, valid)
        assert (loss, accuracy) == (scores.final_loss[k].item(), scores.final_accuracy[k].item())
        assert scores.examples()[k].shape == (len(valid),)  # each held-out sentence's loss
        assert abs(scores.examples()[k].mean().item() - loss) < 1e-6
    assert scores.final_loss[0] != scores.final_loss[1]
    trained, real = [], core_train.train

    def counting(model, sample, cfg, **kwargs):
        trained.append(cfg.seed)
        return real(model, sample, cfg, **kwargs)

    monkeypatch.setattr(core_train, "train", counting)
    again = train_classifiers([1, 2], corpus, train, valid, cfg, tcfg, evals=2, name="t")
    assert trained == [2]  # seed 1 came from the cache, with its scores
    assert torch.equal(again.loss[:, 0], scores.loss[:, 1])
    assert torch.equal(again.accuracy[:, 0], scores.accuracy[:, 1])
    short = train_classifiers([0, 1], corpus, train, valid, cfg, replace(tcfg, steps=4), name="t")
    assert trained == [2, 0, 1]  # another run length: trained afresh
    assert torch.equal(short.final_loss, scores.at(4)[0])  # ... and a prefix of the long run
    with pytest.raises(ValueError, match="step=5"):
        scores.at(5)
    loss, acc = classifier_scores(EncoderModel(cfg), valid)
    assert loss > 0 and 0 <= acc <= 1


def test_bad_inputs_name_the_argument(corpus):
    data = classification_data(corpus, corpus.valid)
    cfg = classifier_config(corpus, d_model=16, n_heads=2, n_layers=1)
    tcfg = TrainConfig(steps=2)
    with pytest.raises(ValueError, match="n="):
        classification_corpus(0)
    with pytest.raises(TypeError, match="sentence"):
        object_clause("the dog runs .")
    with pytest.raises(TypeError, match="corpus"):
        classification_data("corpus", corpus.valid)
    with pytest.raises(TypeError, match="sentences"):
        classification_data(corpus, "the dog runs")
    with pytest.raises(ValueError, match="no sentence"):
        classification_data(
            corpus, make_corpus(20, seed=2, config=GrammarConfig(p_relative=0.0)).train
        )
    with pytest.raises(TypeError, match="corpus"):
        classifier_config(None)
    with pytest.raises(ValueError, match="token_logits"):
        mean_pool(torch.zeros(2, 5, 2), torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="padding only"):
        mean_pool(torch.zeros(1, 3, 2), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="model"):
        classify(torch.nn.Linear(2, 2), data.src)
    with pytest.raises(TypeError, match="data"):
        classification_sampler((data.src, data.labels))
    with pytest.raises(TypeError, match="valid_data"):
        train_classifiers([0, 1], corpus, data, (data.src, data.labels), cfg, tcfg)
    with pytest.raises(TypeError, match="train_data"):
        train_classifiers([0, 1], corpus, data.src, data, cfg, tcfg)
    with pytest.raises(TypeError, match="corpus"):
        train_classifiers([0, 1], "corpus", data, data, cfg, tcfg)
    with pytest.raises(ValueError, match="n_classes"):
        classifier_config(corpus, d_model=16, n_heads=2, n_classes=3)
    with pytest.raises(ValueError, match="classifier_config"):
        bad = cfg.__class__(vocab_size=5, d_model=16, n_heads=2, n_classes=2)
        train_classifiers([0, 1], corpus, data, data, bad, tcfg)
    with pytest.raises(TypeError, match="model_config"):
        train_classifiers([0, 1], corpus, data, data, "cfg", tcfg)
    with pytest.raises(TypeError, match="seeds"):
        train_classifiers(0, corpus, data, data, cfg, tcfg)
    with pytest.raises(ValueError, match="repeats"):
        train_classifiers([1, 1], corpus, data, data, cfg, tcfg)
    with pytest.raises(ValueError, match=r"seeds\[1\]"):
        train_classifiers([0, -1], corpus, data, data, cfg, tcfg)
    with pytest.raises(ValueError, match="evals=3"):
        train_classifiers([0, 1], corpus, data, data, cfg, tcfg, evals=3)
    with pytest.raises(TypeError, match="train_config"):
        train_classifiers([0, 1], corpus, data, data, cfg, {"steps": 2})
    with pytest.raises(ValueError, match="vocab_size"):
        bag_of_words(data, 3)
    with pytest.raises(TypeError, match="data"):
        bag_of_words(data.src, 10)
    assert isinstance(data, ClassificationData) and len(data) == len(data.labels)
