"""Tests of the relation tagger used by the head-diversity sweeps."""

import pytest
import torch

from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import init_model
from multihead.tasks.corpus import RELATIONS, make_corpus
from multihead.tasks.synthetic import IGNORE
from multihead.tasks.tagging import (
    build_tagger,
    tagger_accuracy,
    tagger_config,
    tagger_patterns,
    tagging_data,
    train_tagger,
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


@pytest.mark.slow
def test_train_tagger_learns_and_caches(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    cfg = tagger_config(corpus, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    train_data, valid = tagging_data(corpus, corpus.train), tagging_data(corpus, corpus.valid)
    before = tagger_accuracy(build_tagger(cfg, 0), valid)
    tcfg = TrainConfig(steps=60, batch_size=32, lr=3e-3, warmup=5)
    model = train_tagger(corpus, train_data, cfg, tcfg, name="t")
    assert tagger_accuracy(model, valid) > before + 0.2
    again = train_tagger(corpus, train_data, cfg, tcfg, name="t")  # from the cache
    assert all(
        torch.equal(x, y) for x, y in zip(model.parameters(), again.parameters(), strict=True)
    )


def test_tagger_bad_input(corpus):
    with pytest.raises(TypeError, match="corpus"):
        tagger_config("corpus")
    with pytest.raises(TypeError, match="cfg"):
        build_tagger("cfg", 0)
    cfg = tagger_config(corpus, d_model=16, n_heads=2, n_layers=1)
    with pytest.raises(TypeError, match="train_data"):
        train_tagger(corpus, corpus.train, cfg, TrainConfig())
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
