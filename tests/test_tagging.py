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


def test_train_taggers_batches_seeds_and_caches_each(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    cfg = tagger_config(corpus, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    train_data = tagging_data(corpus, corpus.train)
    tcfg = TrainConfig(steps=4, batch_size=8, warmup=2)
    models = train_taggers(corpus, train_data, cfg, tcfg, [3, 5])
    assert len(models) == 2 and len(list(tmp_path.iterdir())) == 2
    # Seed 5 is the tagger train_tagger trains with seed 5: it finds it in the cache ...
    alone_cfg = TrainConfig(steps=4, batch_size=8, warmup=2, seed=5)
    alone = train_tagger(corpus, train_data, cfg, alone_cfg)
    assert len(list(tmp_path.iterdir())) == 2
    assert all(
        torch.equal(a, b) for a, b in zip(alone.parameters(), models[1].parameters(), strict=True)
    )
    # ... and equals the alone run trained afresh. The key bias is left out: its gradient is
    # zero in exact arithmetic (a shift of a whole row cancels in the softmax), so AdamW turns
    # the roundoff there into steps of size lr.
    fresh = train_tagger(corpus, train_data, cfg, alone_cfg, name="alone")
    batched = dict(models[1].named_parameters())
    for name, p in fresh.named_parameters():
        if not name.endswith("b_K"):
            torch.testing.assert_close(p, batched[name], atol=1e-5, rtol=0)
    x = tagging_data(corpus, corpus.valid[:4]).src
    torch.testing.assert_close(
        tagger_patterns(fresh, x), tagger_patterns(models[1], x), atol=1e-5, rtol=0
    )
    assert not torch.allclose(models[0].encoder.embed.weight, models[1].encoder.embed.weight)
    again = train_taggers(corpus, train_data, cfg, tcfg, [5, 7])
    assert all(
        torch.equal(a, b)
        for a, b in zip(again[0].parameters(), models[1].parameters(), strict=True)
    )
    assert len(list(tmp_path.iterdir())) == 4  # seed 7 trained; plus the fresh alone run
    with pytest.raises(TypeError, match="seeds"):
        train_taggers(corpus, train_data, cfg, tcfg, 3)
    with pytest.raises(ValueError, match="repeats"):
        train_taggers(corpus, train_data, cfg, tcfg, [1, 1])
    with pytest.raises(ValueError, match="seeds\\[0\\]"):
        train_taggers(corpus, train_data, cfg, tcfg, [-1])
    with pytest.raises(TypeError, match="train_data"):
        train_taggers(corpus, corpus.train, cfg, tcfg, [0])
    with pytest.raises(TypeError, match="cfg"):
        train_taggers(corpus, train_data, "cfg", tcfg, [0])
    with pytest.raises(TypeError, match="train_cfg"):
        train_taggers(corpus, train_data, cfg, "tcfg", [0])


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
