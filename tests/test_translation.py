"""The translation helpers: tensors, loss, training with the cache, internals, ablation."""

from dataclasses import replace

import pytest
import torch
from support.models import same_weights

from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import EncoderDecoder
from multihead.core.train import train
from multihead.interventions.ablation import head_masks, leave_one_out
from multihead.interventions.drophead import drophead_schedule
from multihead.tasks.corpus import make_corpus
from multihead.tasks.translation import (
    BOS_ID,
    PAD_ID,
    attention_kind,
    by_length,
    count_heads,
    encode,
    encoder_internals,
    encoder_paths,
    greedy_accuracy,
    sampler,
    seq2seq_loss,
    teacher_forced,
    train_translation_arms,
    train_translation_models,
)


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(120, seed=2)


@pytest.fixture(scope="module")
def model(corpus):
    torch.manual_seed(0)
    cfg = ModelConfig(
        len(corpus.src_vocab),
        d_model=16,
        n_heads=2,
        n_layers=2,
        n_decoder_layers=1,
        n_classes=len(corpus.tgt_vocab),
        max_len=32,
    )
    return EncoderDecoder(cfg).eval()


def test_encode_shapes_and_ids(corpus):
    data = encode(corpus, corpus.test)
    n = len(corpus.test)
    assert data.src.shape == (n, max(len(s) for s in corpus.test))
    assert data.tgt.shape == (n, 1 + max(len(s.target) for s in corpus.test))
    assert (data.tgt[:, 0] == BOS_ID).all()
    s = corpus.test[0]
    assert [corpus.src_vocab[i] for i in data.src[0, : len(s)]] == list(s.words)
    assert (data.src[0, len(s) :] == PAD_ID).all()
    with pytest.raises(ValueError, match="empty"):
        encode(corpus, [])
    with pytest.raises(TypeError, match="Corpus"):
        encode(corpus.test, corpus.test)


def test_sampler_loss_and_scores(corpus, model):
    data = encode(corpus, corpus.train)
    src, tgt = sampler(data)(8, torch.Generator().manual_seed(0))
    assert src.shape[0] == 8 and (src[:, -1] != PAD_ID).any()  # trimmed to the longest
    assert torch.isfinite(seq2seq_loss(model, (src, tgt)))
    tf = teacher_forced(model, encode(corpus, corpus.valid))
    assert 0 <= tf["token_acc"] <= 1 and tf["loss"] > 0
    ga = greedy_accuracy(model, encode(corpus, corpus.valid))
    assert 0 <= ga["sentence_acc"] <= ga["token_acc"] <= 1


def test_internals_and_ablation_restore_the_model(corpus, model):
    data = encode(corpus, corpus.valid)
    pattern, z = encoder_internals(model, data.src)
    b, s = data.src.shape
    assert pattern.shape == (2, b, 2, s, s) and z.shape == (2, b, 2, s, 8)
    assert torch.allclose(pattern.sum(-1), torch.ones(2, b, 2, s))
    assert (pattern.masked_select(data.src_padding_mask[None, :, None, None, :]) == 0).all()
    before = teacher_forced(model, data)
    earlier = {"decoder.layers.0.attn": torch.tensor([1.0, 0.0])}  # a mask already in place
    with head_masks(model, earlier):
        masked = teacher_forced(model, data)
        out = leave_one_out(model, lambda m: teacher_forced(m, data), encoder_paths(model))
        assert teacher_forced(model, data) == masked  # the earlier mask survives
    assert out["loss"].shape == (2, 2) and out["token_acc"].shape == (2, 2)
    with head_masks(model, {"encoder.layers.1.attn": torch.tensor([0.0, 1.0]), **earlier}):
        one = teacher_forced(model, data)
    assert out["loss"][1, 0].item() == pytest.approx(one["loss"] - masked["loss"])
    assert teacher_forced(model, data) == before
    assert all((layer.attn.head_mask == 1).all() for layer in model.encoder.layers)
    with pytest.raises(TypeError, match="EncoderDecoder"):
        encoder_internals(torch.nn.Linear(2, 2), data.src)


def _tiny():
    corpus = make_corpus(100, seed=0)
    model_cfg = ModelConfig(
        200, d_model=16, n_heads=2, n_layers=1, n_decoder_layers=1, n_classes=200, max_len=32
    )
    return corpus, model_cfg, TrainConfig(steps=4, batch_size=4, warmup=2)


def test_train_translation_models_trains_each_seed_alone_and_caches_each(tmp_path, monkeypatch):
    from multihead.core import train as core_train

    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MULTIHEAD_DEVICE", "cpu")
    corpus, model_cfg, tcfg = _tiny()
    setups = train_translation_models([3, 5], corpus, model_cfg, tcfg)
    assert [s.train_config for s in setups] == [replace(tcfg, seed=3), replace(tcfg, seed=5)]
    assert len(list(tmp_path.iterdir())) == 2  # one checkpoint per seed
    data = encode(corpus, corpus.train)
    for seed, setup in zip([3, 5], setups, strict=True):
        assert torch.equal(setup.train.src, data.src) and setup.model_config == model_cfg
        torch.manual_seed(seed)
        alone = EncoderDecoder(model_cfg)
        history = train(alone, sampler(data), replace(tcfg, seed=seed), loss_fn=seq2seq_loss,
                        progress=False)  # fmt: skip
        assert same_weights(setup.model, alone) and setup.history.loss == history.loss
        assert not setup.model.training
    assert not same_weights(setups[0].model, setups[1].model)
    trained, real = [], core_train.train

    def counting(model, sample, cfg, **kwargs):
        trained.append(cfg.seed)
        return real(model, sample, cfg, **kwargs)

    monkeypatch.setattr(core_train, "train", counting)
    again = train_translation_models([5, 7], corpus, model_cfg, tcfg)
    assert trained == [7]  # seed 5 came from the cache
    assert same_weights(again[0].model, setups[1].model)
    assert again[0].history.loss == setups[1].history.loss
    assert len(list(tmp_path.iterdir())) == 3
    steps = []
    hooked = train_translation_models(
        [3], corpus, model_cfg, tcfg, on_step=lambda m, s: steps.append(s), on_step_key="count"
    )
    assert steps == [0, 1, 2, 3] and trained == [7, 3]  # its own checkpoint: trained
    assert same_weights(hooked[0].model, setups[0].model)  # the callback changed nothing
    assert len(list(tmp_path.iterdir())) == 4
    curve = train_translation_models([3], corpus, model_cfg, replace(tcfg, eval_every=2),
                                     eval_split="valid")  # fmt: skip
    evals = curve[0].history.evals
    assert [e["step"] for e in evals] == [2, 4] and len(list(tmp_path.iterdir())) == 5
    assert evals[-1]["loss"] == teacher_forced(curve[0].model, curve[0].valid)["loss"]
    assert same_weights(curve[0].model, setups[0].model)  # evaluating changed nothing


@pytest.mark.slow
def test_train_translation_arms_in_two_processes_trains_the_same_models(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path / "two"))
    monkeypatch.setenv("MULTIHEAD_DEVICE", "cpu")
    corpus, model_cfg, tcfg = _tiny()
    arms = {
        "plain": {},
        "dropout": {"model_config": replace(model_cfg, dropout=0.3)},
        "drophead": {"on_step": drophead_schedule(0.3, 4, "v"), "on_step_key": "v 0.3"},
    }
    common = {"model_config": model_cfg, "train_config": tcfg, "name": "arms"}
    side_by_side = train_translation_arms(arms, [3, 5], corpus, workers=2, **common)
    assert len(list((tmp_path / "two").iterdir())) == 6  # every (arm, seed) checkpoint
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path / "one"))
    in_turn = train_translation_arms(arms, [3, 5], corpus, **common)
    for arm in arms:
        for a, b in zip(side_by_side[arm], in_turn[arm], strict=True):
            assert same_weights(a.model, b.model) and a.history.loss == b.history.loss
    for arm in ("dropout", "drophead"):
        assert not same_weights(side_by_side["plain"][0].model, side_by_side[arm][0].model)
    with pytest.raises(ValueError, match="workers"):
        train_translation_arms(arms, [3], corpus, workers=0, **common)
    with pytest.raises(TypeError, match="arms"):
        train_translation_arms({}, [3], corpus, **common)
    # train_translation_models(..., workers=2): the seeds side by side, the same models
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path / "models"))
    two = train_translation_models([3, 5], corpus, model_cfg, tcfg, name="arms", workers=2)
    assert len(list((tmp_path / "models").iterdir())) == 2
    for a, b in zip(two, in_turn["plain"], strict=True):
        assert same_weights(a.model, b.model) and a.history.loss == b.history.loss


def test_train_translation_models_rejects_bad_input():
    corpus, model_cfg, tcfg = _tiny()
    with pytest.raises(ValueError, match="workers"):
        train_translation_models([0], corpus, model_cfg, tcfg, workers=0)
    with pytest.raises(TypeError, match="corpus"):
        train_translation_models([0], corpus.train)
    small = ModelConfig(10, d_model=16, n_heads=2, n_classes=10)
    with pytest.raises(ValueError, match="vocab_size"):
        train_translation_models([0], corpus, small)
    with pytest.raises(TypeError, match="train_config"):
        train_translation_models([0], corpus, model_cfg, {"steps": 1})
    with pytest.raises(ValueError, match="on_step_key"):
        train_translation_models([0], corpus, on_step=lambda m, s: None)
    with pytest.raises(ValueError, match="eval_split"):
        train_translation_models([0], corpus, model_cfg, tcfg, eval_split="dev")
    with pytest.raises(TypeError, match="seeds"):
        train_translation_models(3, corpus, model_cfg, tcfg)
    with pytest.raises(ValueError, match="repeats"):
        train_translation_models([1, 1], corpus, model_cfg, tcfg)
    with pytest.raises(ValueError, match=r"seeds\[0\]"):
        train_translation_models([-1], corpus, model_cfg, tcfg)


def test_attention_paths_are_classified():
    assert attention_kind("encoder.layers.3.attn") == "encoder"
    assert attention_kind("decoder.layers.0.attn") == "decoder"
    assert attention_kind("decoder.layers.0.cross_attn") == "cross"
    with pytest.raises(ValueError, match="not an attention path"):
        attention_kind("layers.0.attn")
    masks = {
        "encoder.layers.0.attn": torch.tensor([1.0, 0.0]),
        "decoder.layers.0.cross_attn": torch.ones(2),
    }
    assert count_heads(masks) == {"encoder": 1, "decoder": 0, "cross": 2}


def test_by_length_orders_sentences_and_keeps_the_scores():
    corpus = make_corpus(150, seed=3)
    data = encode(corpus, corpus.valid)
    ordered = by_length(data)
    lengths = (ordered.src != PAD_ID).sum(1) + (ordered.tgt != PAD_ID).sum(1)
    assert bool((lengths[1:] >= lengths[:-1]).all()) and len(ordered.src) == len(data.src)
    assert sorted(map(tuple, ordered.src.tolist())) == sorted(map(tuple, data.src.tolist()))
    with pytest.raises(TypeError, match="data"):
        by_length((data.src, data.tgt))


@pytest.mark.slow
def test_side_by_side_trains_and_fine_tunes_the_same_models_as_in_turn(tmp_path, monkeypatch):
    from multihead.core.runtime import side_by_side
    from multihead.interventions.ablation import full_masks
    from multihead.interventions.gates import gated_copy
    from multihead.interventions.pruning import train_with_masks

    monkeypatch.setenv("MULTIHEAD_DEVICE", "cpu")
    corpus, model_cfg, tcfg = _tiny()
    for way, workers in (("two", 2), ("one", 1)):  # a cache of its own each: both train
        monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path / way))
        jobs = [{"seeds": [s], "corpus": corpus, "model_config": model_cfg,
                 "train_config": tcfg} for s in (3, 5)]  # fmt: skip
        side_by_side(train_translation_models, jobs, workers=workers)
        assert len(list((tmp_path / way).iterdir())) == 2  # one checkpoint per seed
    one = train_translation_models([3, 5], corpus, model_cfg, tcfg)  # trained in turn
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path / "two"))
    two = train_translation_models([3, 5], corpus, model_cfg, tcfg)  # side by side
    assert all(same_weights(a.model, b.model) for a, b in zip(one, two, strict=True))
    data = one[0].train
    gate_jobs = [{"model": s.model, "sample": sampler(data), "loss_fn": seq2seq_loss, "lam": lam,
                  "steps": 3, "batch_size": 4, "seed": k, "progress": False}
                 for k, s in enumerate(one) for lam in (0.1, 1.0)]  # fmt: skip
    in_turn = [gated_copy(**job) for job in gate_jobs]
    together = side_by_side(gated_copy, gate_jobs, workers=2)
    for (m1, r1), (m2, r2) in zip(in_turn, together, strict=True):
        assert same_weights(m1, m2) and r1.task_loss == r2.task_loss
        assert all(torch.equal(r1.log_alpha[n], r2.log_alpha[n]) for n in r1.log_alpha)
    assert not same_weights(in_turn[0][0], in_turn[1][0])  # the penalty mattered
    assert same_weights(gate_jobs[0]["model"], one[0].model)  # the inputs are unchanged
    mask_jobs = [{"models": [s.model], "masks": [full_masks(s.model)], "sample": sampler(data),
                  "train_config": tcfg, "loss_fn": seq2seq_loss, "seeds": [k]}
                 for k, s in enumerate(one)]  # fmt: skip
    in_turn = [train_with_masks(**job)[0][0] for job in mask_jobs]
    together = side_by_side(train_with_masks, mask_jobs, workers=2)
    assert all(same_weights(a, b[0][0]) for a, b in zip(in_turn, together, strict=True))


def test_side_by_side_rejects_bad_input():
    from multihead.core.runtime import side_by_side

    with pytest.raises(ValueError, match="workers"):
        side_by_side(sampler, [{}], workers=0)
    with pytest.raises(TypeError, match="jobs"):
        side_by_side(sampler, {"data": None})
    with pytest.raises(TypeError, match="jobs\\[0\\]"):
        side_by_side(sampler, [None])
    with pytest.raises(TypeError, match="fn"):
        side_by_side(None, [])
