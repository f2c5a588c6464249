"""Tests of the relation tagger used by the head-diversity sweeps."""

from dataclasses import replace

import pytest
import torch
from support.models import same_weights

from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import init_model
from multihead.core.train import train
from multihead.tasks.corpus import RELATIONS, make_corpus
from multihead.tasks.synthetic import IGNORE
from multihead.tasks.tagging import (
    build_tagger,
    tagger_accuracy,
    tagger_config,
    tagger_patterns,
    tagging_data,
    tagging_loss,
    tagging_sampler,
    train_taggers,
)


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(300, seed=0)


def test_tagging_data_shapes_and_labels(corpus):
    data = tagging_data(corpus, corpus.valid[:5])
    assert data.src.shape == data.labels.shape
    assert ((data.labels == IGNORE) == ~data.real_tokens).all()
    first = corpus.valid[0]
    assert data.labels[0, : len(first)].tolist() == [RELATIONS.index(r) for r in first.rels]


def test_build_tagger_is_reproducible_and_patterns_have_layers(corpus):
    cfg = tagger_config(corpus, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    a, b = build_tagger(cfg, 3), build_tagger(cfg, 3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    data = tagging_data(corpus, corpus.valid[:4])
    p = tagger_patterns(a, data.src)
    assert p.shape == (2, 4, 2, data.src.shape[1], data.src.shape[1])
    assert torch.allclose(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-5)


def test_train_taggers_learns_and_caches(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    cfg = tagger_config(corpus, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    train_data, valid = tagging_data(corpus, corpus.train), tagging_data(corpus, corpus.valid)
    before = tagger_accuracy(build_tagger(cfg, 0), valid)
    tcfg = TrainConfig(steps=60, batch_size=32, lr=3e-3, warmup=5)
    (model,) = train_taggers([0], corpus, train_data, cfg, tcfg, name="t")
    assert tagger_accuracy(model, valid) > before + 0.2
    (again,) = train_taggers([0], corpus, train_data, cfg, tcfg, name="t")  # from the cache
    assert same_weights(model, again)


def test_train_taggers_trains_each_seed_alone_and_caches_each(corpus, tmp_path, monkeypatch):
    from multihead.core import train as core_train

    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MULTIHEAD_DEVICE", "cpu")
    cfg = tagger_config(corpus, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    train_data = tagging_data(corpus, corpus.train)
    tcfg = TrainConfig(steps=4, batch_size=8, warmup=2)
    models = train_taggers([3, 5], corpus, train_data, cfg, tcfg)
    assert len(models) == 2 and len(list(tmp_path.iterdir())) == 2
    for seed, model in zip([3, 5], models, strict=True):  # seed s: train from build_tagger(s)
        alone = build_tagger(cfg, seed)
        train(alone, tagging_sampler(train_data), replace(tcfg, seed=seed), loss_fn=tagging_loss,
              progress=False)  # fmt: skip
        assert same_weights(model, alone) and not model.training
    assert not same_weights(*models)
    trained, real = [], core_train.train

    def counting(model, sample, cfg, **kwargs):
        trained.append(cfg.seed)
        return real(model, sample, cfg, **kwargs)

    monkeypatch.setattr(core_train, "train", counting)
    again = train_taggers([5, 7], corpus, train_data, cfg, tcfg)
    assert trained == [7] and same_weights(again[0], models[1])  # seed 5 from the cache
    assert len(list(tmp_path.iterdir())) == 3
    shallow = tagger_config(corpus, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    train_taggers([5], corpus, train_data, shallow, tcfg)  # another config: its own checkpoint
    assert trained == [7, 5] and len(list(tmp_path.iterdir())) == 4


def test_tagger_bad_input(corpus):
    with pytest.raises(TypeError, match="corpus"):
        tagger_config("corpus")
    with pytest.raises(TypeError, match="model_config"):
        build_tagger("cfg", 0)
    cfg = tagger_config(corpus, d_model=16, n_heads=2, n_layers=1)
    data, tcfg = tagging_data(corpus, corpus.train[:8]), TrainConfig(steps=1)
    with pytest.raises(TypeError, match="corpus"):
        train_taggers([0], corpus.train, data, cfg, tcfg)
    with pytest.raises(TypeError, match="train_data"):
        train_taggers([0], corpus, corpus.train, cfg, tcfg)
    with pytest.raises(TypeError, match="model_config"):
        train_taggers([0], corpus, data, "cfg", tcfg)
    with pytest.raises(TypeError, match="TrainConfig"):
        train_taggers([0], corpus, data, cfg, {"steps": 1})
    with pytest.raises(TypeError, match="seeds"):
        train_taggers(3, corpus, data, cfg, tcfg)
    with pytest.raises(ValueError, match="repeats"):
        train_taggers([1, 1], corpus, data, cfg, tcfg)
    with pytest.raises(ValueError, match=r"seeds\[0\]"):
        train_taggers([-1], corpus, data, cfg, tcfg)
    with pytest.raises(TypeError, match="EncoderModel"):
        tagger_patterns(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))


def test_init_scheme_errors_exist():
    with pytest.raises(ValueError, match="init='fancy'"):
        ModelConfig(vocab_size=10, init="fancy")
    with pytest.raises(ValueError, match="init_epsilon=-0.1"):
        ModelConfig(vocab_size=10, init="shared_heads", init_epsilon=-0.1)
    model = build_tagger(ModelConfig(vocab_size=10, d_model=8, n_heads=2), 0)
    with pytest.raises(ValueError, match="scheme='fancy'"):
        init_model(model, "fancy")
    with pytest.raises(ValueError, match="epsilon=-1"):
        init_model(model, "shared_heads", epsilon=-1)
