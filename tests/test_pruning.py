import copy

import pytest
import torch
import torch.nn.functional as F

from multihead.core.config import ModelConfig
from multihead.core.hooks import hooks
from multihead.core.model import EncoderDecoder, attention_modules, count_parameters
from multihead.core.talking_heads import TalkingHeadsAttention
from multihead.interventions.ablation import differentiable_masks, full_masks, head_masks
from multihead.interventions.pruning import (
    PruningCurve,
    head_confidences,
    head_importance,
    iterative_pruning,
    keep_one_head,
    prune_model,
)
from multihead.tasks.translation import (
    Encoded,
    batches,
    confidence_queries,
    count_heads,
    per_sentence_loss,
    run_batch,
    teacher_forced,
)

PATHS = [
    "encoder.layers.0.attn",
    "encoder.layers.1.attn",
    "decoder.layers.0.attn",
    "decoder.layers.0.cross_attn",
    "decoder.layers.1.attn",
    "decoder.layers.1.cross_attn",
]


def _model(seed: int = 0) -> EncoderDecoder:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=9, n_classes=10, d_model=16, n_heads=4, n_layers=2, n_decoder_layers=2,
        max_len=12,
    )  # fmt: skip
    return EncoderDecoder(cfg).eval()


def _importance(model, data, batch_size=500, **kw):
    return head_importance(model, batches(data, batch_size), per_sentence_loss, **kw)


def _confidences(model, data):
    return head_confidences(model, batches(data), run_batch, confidence_queries)


def _curve(model, score_data, eval_data, order="importance", **kw):
    score = {"importance": lambda m: _importance(m, score_data), "random": None}.get(
        order, lambda m: _confidences(m, score_data)
    )
    return iterative_pruning(model, lambda m: teacher_forced(m, eval_data), score, **kw)


def _data(n: int = 12, seed: int = 0) -> Encoded:
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(2, 9, (n, 7), generator=gen)
    tgt = torch.randint(2, 10, (n, 8), generator=gen)
    tgt[:, 0] = 1  # <s>
    for i in range(n):  # uneven lengths, padded with 0
        src[i, 4 + i % 4 :] = 0
        tgt[i, 5 + i % 3 :] = 0
    return Encoded(src, tgt)


def test_importance_shapes_normalisation_and_model_unchanged():
    model, data = _model(), _data()
    before = copy.deepcopy(model.state_dict())
    model.train()
    imp = _importance(model, data, batch_size=5)
    assert model.training  # mode restored
    assert list(imp) == PATHS
    assert all(v.shape == (4,) and bool((v >= 0).all()) for v in imp.values())
    assert all(abs(float(v.norm()) - 1) < 1e-5 for v in imp.values())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())


def test_importance_matches_mask_gradient_per_sentence():
    """I_h = mean_x |dL(x)/d xi_h| with the mask as a leaf, one sentence at a time."""
    model, data = _model(1), _data(6, seed=1)
    got = _importance(model, data, normalize=False, batch_size=4)
    modules = dict(attention_modules(model))
    want = {n: torch.zeros(4) for n in modules}
    for i in range(len(data.src)):
        src, tgt = data.src[i : i + 1], data.tgt[i : i + 1]
        xis = differentiable_masks(model)  # leaves we can differentiate
        with head_masks(model, xis):
            logits = model(src, tgt[:, :-1], src_padding_mask=src == 0)
        keep = tgt[0, 1:] != 0
        loss = F.cross_entropy(logits[0][keep], tgt[0, 1:][keep])
        grads = torch.autograd.grad(loss, list(xis.values()))
        for n, g in zip(modules, grads, strict=True):
            want[n] += g.abs() / len(data.src)
    assert all(not m.head_mask.requires_grad for m in modules.values())  # masks restored
    for n in modules:
        assert torch.allclose(got[n], want[n], atol=1e-6, rtol=1e-4), n


def test_importance_matches_taylor_formula_through_z_hook():
    """The same numbers as |sum A_h * dL/dA_h| with A_h the head output read at ``z``."""
    model, data = _model(2), _data(1, seed=2)
    got = _importance(model, data, normalize=False)
    zs = {}
    src, tgt = data.src, data.tgt
    with hooks(model, [(lambda n: n.endswith(".z"), lambda z, n: zs.__setitem__(n[:-2], z))]):
        logits = model(src, tgt[:, :-1], src_padding_mask=src == 0)
    keep = tgt[0, 1:] != 0
    loss = F.cross_entropy(logits[0][keep], tgt[0, 1:][keep])
    names = list(zs)
    grads = torch.autograd.grad(loss, [zs[n] for n in names])
    for n, g in zip(names, grads, strict=True):
        taylor = (zs[n] * g).sum(dim=(0, 2, 3)).abs().detach()  # (heads,)
        assert torch.allclose(got[n], taylor, atol=1e-6, rtol=1e-4)


def test_importance_of_masked_head_is_zero():
    model, data = _model(), _data()
    masks = full_masks(model)
    masks["encoder.layers.1.attn"][2] = 0.0
    with head_masks(model, masks):
        imp = _importance(model, data, normalize=False)
    assert imp["encoder.layers.1.attn"][2] == 0
    assert (imp["encoder.layers.1.attn"][[0, 1, 3]] > 0).all()


def test_confidences_shapes_and_range():
    conf = _confidences(_model(), _data())
    assert list(conf) == PATHS
    assert all(v.shape == (4,) and bool(((v > 0) & (v <= 1)).all()) for v in conf.values())


@pytest.mark.parametrize("order", ["importance", "random", "confidence"])
def test_iterative_pruning_curve(order):
    model, data = _model(), _data()
    x = (data.src[:2], data.tgt[:2, :-1])
    before = model(*x)
    curve = _curve(model, data, data, order=order, fraction_per_step=0.1, seed=3)
    assert isinstance(curve, PruningCurve)
    assert curve.order == ("random" if order == "random" else "score")
    n = len(curve.fraction)
    assert len(curve.metric("loss")) == len(curve.metric("token_acc")) == len(curve.masks) == n
    assert curve.fraction[0] == 0.0
    assert all(b > a for a, b in zip(curve.fraction, curve.fraction[1:], strict=False))
    # 24 heads, 10% per step = 2 heads; it stops when each of the 6 modules has one head.
    assert curve.fraction[-1] == pytest.approx(18 / 24)
    assert all(int(m.sum()) == 1 for m in curve.masks[-1].values())
    for a, b in zip(curve.masks, curve.masks[1:], strict=False):  # heads only ever leave
        assert all(bool((b[k] <= a[k]).all()) for k in a)
    assert curve.metric("loss")[0] == pytest.approx(teacher_forced(model, data)["loss"])
    assert torch.equal(model(*x), before)  # masks restored


def test_iterative_pruning_importance_removes_least_important_first():
    model, data = _model(), _data()
    imp = _importance(model, data)
    curve = _curve(model, data, data, fraction_per_step=1 / 24)
    first = {(k, int(h)) for k, m in curve.masks[1].items() for h in (m == 0).nonzero().flatten()}
    flat = [(float(v[h]), k, h) for k, v in imp.items() for h in range(4)]
    assert first == {min(flat)[1:]}


def test_prune_model_equals_masked_model():
    model, data = _model(), _data()
    masks = full_masks(model)
    masks["encoder.layers.0.attn"] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    masks["decoder.layers.1.cross_attn"] = torch.tensor([0.0, 0.0, 0.0, 1.0])
    masks["decoder.layers.0.attn"] = torch.tensor([0.0, 1.0, 1.0, 1.0])
    x = (data.src, data.tgt[:, :-1])
    kw = {"src_padding_mask": data.src == 0}
    with head_masks(model, masks):
        masked = model(*x, **kw)
    n_before = count_parameters(model)
    pruned = prune_model(model, masks)
    assert pruned is model
    assert torch.allclose(pruned(*x, **kw), masked, atol=1e-5)
    assert dict(attention_modules(pruned))["decoder.layers.1.cross_attn"].n_heads == 1
    # each removed head had W_Q, W_K, W_V (16 x 4 each), biases (3 x 4) and W_O (4 x 16)
    assert n_before - count_parameters(pruned) == 6 * (4 * 16 * 4 + 3 * 4)
    assert count_heads(masks) == {"encoder": 6, "decoder": 7, "cross": 5}


def test_bad_inputs():
    model, data = _model(), _data()
    evaluate = lambda m: teacher_forced(m, data)  # noqa: E731
    for bad in (0, 0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="fraction_per_step"):
            iterative_pruning(model, evaluate, fraction_per_step=bad)
    with pytest.raises(TypeError, match="evaluate"):
        iterative_pruning(model, data)
    with pytest.raises(TypeError, match="score"):
        iterative_pruning(model, evaluate, score="importance")
    with pytest.raises(TypeError, match="model"):
        head_importance("model", batches(data), per_sentence_loss)
    with pytest.raises(ValueError, match="no attention layer"):
        head_importance(torch.nn.Linear(2, 2), batches(data), per_sentence_loss)
    with pytest.raises(TypeError, match="per_example_loss"):
        head_importance(model, batches(data), "loss")
    with pytest.raises(ValueError, match="batches is empty"):
        head_importance(model, [], per_sentence_loss)
    with pytest.raises(TypeError, match="queries"):
        head_confidences(model, batches(data), run_batch, None)
    with pytest.raises(TypeError, match="data"):
        list(batches(data.src))
    with pytest.raises(ValueError, match="batch_size"):
        list(batches(data, 0))
    masks = full_masks(model)
    masks["encoder.layers.1.attn"] = torch.zeros(4)
    with pytest.raises(ValueError, match="every head"):
        prune_model(model, masks)
    assert dict(attention_modules(model))["encoder.layers.0.attn"].n_heads == 4  # untouched
    with pytest.raises(ValueError, match="shape"):
        prune_model(model, {"encoder.layers.0.attn": torch.ones(3)})
    with pytest.raises(ValueError, match="not an attention module"):
        prune_model(model, {"encoder.layers.9.attn": torch.ones(4)})
    with pytest.raises(ValueError, match="only 0"):
        prune_model(model, {"encoder.layers.0.attn": torch.tensor([1.0, 0.5, 1.0, 1.0])})


def test_pruning_talking_heads_says_what_to_do_instead():
    cfg = ModelConfig(vocab_size=9, d_model=16, n_heads=4, n_layers=1, attention="talking_heads")
    model = EncoderDecoder(cfg)
    masks = {"encoder.layers.0.attn": torch.tensor([1.0, 0.0, 1.0, 1.0])}
    assert isinstance(
        dict(attention_modules(model))["encoder.layers.0.attn"], TalkingHeadsAttention
    )
    with pytest.raises(ValueError, match="mask heads instead"):
        prune_model(model, masks)


def test_keep_one_head():
    masks = {"a": torch.zeros(3), "b": torch.tensor([0.0, 1.0, 0.0])}
    scores = {"a": torch.tensor([0.1, 0.5, -1.0]), "b": torch.tensor([9.0, 0.0, 0.0])}
    out = keep_one_head(masks, scores)
    assert out["a"].tolist() == [0.0, 1.0, 0.0]
    assert out["b"].tolist() == [0.0, 1.0, 0.0]
    assert masks["a"].sum() == 0  # not modified in place
    with pytest.raises(ValueError, match="scores"):
        keep_one_head(masks, {"a": torch.zeros(2)})


def _sample(data: Encoded):
    def sample(batch_size, generator):
        idx = torch.randint(0, len(data.src), (batch_size,), generator=generator)
        return data.src[idx], data.tgt[idx]

    return sample


_PER_HEAD = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")


def _train_masked_alone(model, mask, sample, cfg, seed):
    """The reference: a copy of ``model`` trained by ``train`` with ``mask`` in force."""
    from dataclasses import replace

    from multihead.core.train import train
    from multihead.tasks.translation import seq2seq_loss

    alone = copy.deepcopy(model)
    with head_masks(alone, mask):
        history = train(alone, sample, replace(cfg, seed=seed), loss_fn=seq2seq_loss,
                        device=torch.device("cpu"), progress=False)  # fmt: skip
    return alone, history


def _outputs(model, data, mask=None):
    x, kw = (data.src, data.tgt[:, :-1]), {"src_padding_mask": data.src == 0}
    with torch.no_grad(), head_masks(model, mask or {}):
        return model.eval()(*x, **kw)


def test_train_with_masks_trains_each_masked_model_as_train_does(monkeypatch):
    from multihead.core.config import TrainConfig
    from multihead.interventions.pruning import train_with_masks
    from multihead.tasks.translation import seq2seq_loss

    monkeypatch.setenv("MULTIHEAD_DEVICE", "cpu")
    data = _data(16)
    models = [_model(0).double(), _model(1).double()]  # float64: sliced and full sums agree
    masks = [full_masks(m) for m in models]
    masks[0]["encoder.layers.0.attn"] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    masks[1]["encoder.layers.0.attn"] = torch.tensor([0.0, 0.0, 0.0, 1.0])
    masks[1]["decoder.layers.1.cross_attn"] = torch.tensor([0.0, 1.0, 0.0, 1.0])
    # a module missing from a mask keeps the model's own mask
    dict(attention_modules(models[1]))["decoder.layers.0.attn"].head_mask[2] = 0.0
    del masks[1]["decoder.layers.0.attn"]
    before = [copy.deepcopy(m.state_dict()) for m in models]
    cfg = TrainConfig(steps=5, batch_size=4, lr=1e-2, warmup=0, weight_decay=0.1)
    widths = []

    def recording(model, batch):  # the heads each training step computes
        widths.append({n: m.n_heads for n, m in attention_modules(model)})
        return seq2seq_loss(model, batch)

    trained, histories = train_with_masks(
        models, masks, _sample(data), cfg, loss_fn=recording, seeds=[3, 4]
    )
    assert len(trained) == len(histories) == 2 and len(widths) == 10
    assert widths[0] == {**dict.fromkeys(PATHS, 4), "encoder.layers.0.attn": 2}  # sliced
    assert widths[5] == {**dict.fromkeys(PATHS, 4), "encoder.layers.0.attn": 1,
                         "decoder.layers.1.cross_attn": 2, "decoder.layers.0.attn": 3}  # fmt: skip
    assert widths[:5] == [widths[0]] * 5 and widths[5:] == [widths[5]] * 5
    for m, state in zip(models, before, strict=True):  # the inputs are untouched
        assert all(torch.equal(state[n], t) for n, t in m.state_dict().items())
    for k, (model, mask, seed) in enumerate(zip(models, masks, [3, 4], strict=True)):
        got = trained[k]
        assert not got.training and all(m.n_heads == 4 for _, m in attention_modules(got))
        final = {n: m.head_mask.cpu() for n, m in attention_modules(got)}  # carries the mask
        assert all(torch.equal(final[n], t.double()) for n, t in mask.items())
        own = before[k]["decoder.layers.0.attn.head_mask"]
        assert torch.equal(final["decoder.layers.0.attn"], own)
        alone, history = _train_masked_alone(model, mask, _sample(data), cfg, seed)
        assert history.loss == pytest.approx(histories[k].loss, abs=1e-5)
        torch.testing.assert_close(_outputs(got, data), _outputs(alone, data, mask), atol=1e-5,
                                   rtol=0)  # fmt: skip
        state, ref = got.state_dict(), alone.state_dict()
        for name, start in before[k].items():
            path, _, leaf = name.rpartition(".")
            if leaf in _PER_HEAD:
                off = final[path] == 0
                # a masked head keeps its starting weights (no weight decay: it was sliced
                # off), where the masked run decays them; a kept head trains as there
                assert torch.equal(state[name][off], start[off])
                if leaf.startswith("W_") and off.any():  # (the biases start at zero)
                    assert not torch.equal(ref[name][off], start[off])
                torch.testing.assert_close(state[name][~off], ref[name][~off], atol=1e-5, rtol=0)
            elif leaf != "head_mask":
                torch.testing.assert_close(state[name], ref[name], atol=1e-5, rtol=0)


def test_train_with_masks_keeps_one_masked_head_where_a_module_keeps_none(monkeypatch):
    from multihead.core.config import TrainConfig
    from multihead.interventions.pruning import train_with_masks
    from multihead.tasks.translation import seq2seq_loss

    monkeypatch.setenv("MULTIHEAD_DEVICE", "cpu")
    data, model = _data(16), _model(2).double()
    # the model's own mask removes every head of one module; the mask leaves it out
    dict(attention_modules(model))["decoder.layers.0.cross_attn"].head_mask.zero_()
    mask = {"encoder.layers.1.attn": torch.tensor([0.0, 1.0, 1.0, 0.0])}
    cfg = TrainConfig(steps=4, batch_size=4, lr=1e-2, warmup=0)
    widths = []

    def recording(m, batch):
        widths.append({n: a.n_heads for n, a in attention_modules(m)})
        return seq2seq_loss(m, batch)

    (got,), (history,) = train_with_masks([model], [mask], _sample(data), cfg,
                                          loss_fn=recording, seeds=[1])  # fmt: skip
    assert widths[0]["decoder.layers.0.cross_attn"] == 1  # one head kept, masked
    assert widths[0]["encoder.layers.1.attn"] == 2
    final = dict(attention_modules(got))
    assert (final["decoder.layers.0.cross_attn"].head_mask == 0).all()
    alone, ref = _train_masked_alone(model, mask, _sample(data), cfg, 1)
    assert history.loss == pytest.approx(ref.loss, abs=1e-5)
    torch.testing.assert_close(_outputs(got, data), _outputs(alone, data, mask), atol=1e-5, rtol=0)


def test_train_with_masks_trains_talking_heads_unsliced(monkeypatch):
    from multihead.core.config import TrainConfig
    from multihead.interventions.pruning import train_with_masks
    from multihead.tasks.translation import seq2seq_loss

    monkeypatch.setenv("MULTIHEAD_DEVICE", "cpu")
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=9, n_classes=10, d_model=16, n_heads=4, n_layers=1,
                      n_decoder_layers=1, max_len=12, attention="talking_heads")  # fmt: skip
    model, data = EncoderDecoder(cfg).eval(), _data(16)
    mask = {"encoder.layers.0.attn": torch.tensor([1.0, 0.0, 1.0, 1.0])}
    tcfg = TrainConfig(steps=3, batch_size=4, lr=1e-2, warmup=0)
    widths = []

    def recording(m, batch):
        widths.append({n: a.n_heads for n, a in attention_modules(m)})
        return seq2seq_loss(m, batch)

    (got,), (history,) = train_with_masks([model], [mask], _sample(data), tcfg,
                                          loss_fn=recording, seeds=[2])  # fmt: skip
    assert all(w == 4 for w in widths[0].values())  # talking heads mix heads: not sliced
    alone, ref = _train_masked_alone(model, mask, _sample(data), tcfg, 2)
    assert history.loss == ref.loss
    for name, t in alone.state_dict().items():
        if not name.endswith("head_mask"):
            assert torch.equal(got.state_dict()[name], t), name
    assert torch.equal(
        dict(attention_modules(got))["encoder.layers.0.attn"].head_mask,
        mask["encoder.layers.0.attn"],
    )


def test_train_with_masks_bad_input():
    from multihead.core.config import TrainConfig
    from multihead.interventions.pruning import train_with_masks
    from multihead.tasks.translation import seq2seq_loss

    models, data = [_model(0), _model(1)], _data()
    masks = [full_masks(m) for m in models]
    cfg = TrainConfig(steps=1, batch_size=2)
    kw = {"loss_fn": seq2seq_loss, "seeds": [0, 1]}
    with pytest.raises(TypeError, match="models"):
        train_with_masks(models[0], masks, _sample(data), cfg, **kw)
    with pytest.raises(ValueError, match="masks must be a list of 2"):
        train_with_masks(models, masks[:1], _sample(data), cfg, **kw)
    with pytest.raises(ValueError, match="seeds must hold 2"):
        train_with_masks(models, masks, _sample(data), cfg, loss_fn=seq2seq_loss, seeds=[0])
    with pytest.raises(TypeError, match="seeds must be a list"):
        train_with_masks(models, masks, _sample(data), cfg, loss_fn=seq2seq_loss, seeds=3)
    with pytest.raises(ValueError, match=r"seeds\[1\]"):
        train_with_masks(models, masks, _sample(data), cfg, loss_fn=seq2seq_loss, seeds=[0, -1])
    with pytest.raises(TypeError, match="train_config must be a TrainConfig"):
        train_with_masks(models, masks, _sample(data), {"steps": 1}, **kw)
    with pytest.raises(TypeError, match="sample"):
        train_with_masks(models, masks, data, cfg, **kw)
    with pytest.raises(TypeError, match="loss_fn"):
        train_with_masks(models, masks, _sample(data), cfg, loss_fn="seq2seq", seeds=[0, 1])
    with pytest.raises(TypeError, match=r"models\[1\]"):
        train_with_masks([models[0], "model"], masks, _sample(data), cfg, **kw)
    bad = [masks[0], {"encoder.layers.0.attn": torch.zeros(4)}]
    with pytest.raises(ValueError, match=r"masks\[1\].*every head"):
        train_with_masks(models, bad, _sample(data), cfg, **kw)
    with pytest.raises(ValueError, match="cache"):
        train_with_masks(models, masks, _sample(data), cfg, **kw, cache="a b")


def test_train_with_masks_cache_trains_each_masked_model_once(tmp_path, monkeypatch):
    from multihead.core.config import TrainConfig
    from multihead.interventions import pruning
    from multihead.tasks.translation import seq2seq_loss

    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    data = _data(8)
    models = [_model(0), _model(1)]
    masks = [full_masks(m) for m in models]
    masks[1]["encoder.layers.0.attn"] = torch.tensor([1.0, 0.0, 1.0, 1.0])
    cfg = TrainConfig(steps=2, batch_size=4, lr=1e-2, warmup=0)
    kw = {"loss_fn": seq2seq_loss, "cache": "t_masked"}
    trained, real = [], pruning.train

    def counting(model, sample, cfg, **kwargs):
        trained.append(cfg.seed)
        return real(model, sample, cfg, **kwargs)

    monkeypatch.setattr(pruning, "train", counting)
    first, h1 = pruning.train_with_masks(models, masks, _sample(data), cfg, seeds=[3, 4], **kw)
    assert trained == [3, 4] and len(list(tmp_path.glob("t_masked-*.pt"))) == 2
    again, h2 = pruning.train_with_masks(models, masks, _sample(data), cfg, seeds=[3, 4], **kw)
    assert trained == [3, 4] and h1[1].loss == h2[1].loss  # loaded, not retrained
    for a, b in zip(first, again, strict=True):
        assert all(torch.equal(t, b.state_dict()[n].cpu()) for n, t in a.state_dict().items())
    assert torch.equal(dict(attention_modules(again[1]))["encoder.layers.0.attn"].head_mask.cpu(),
                       masks[1]["encoder.layers.0.attn"])  # fmt: skip
    (one,), _ = pruning.train_with_masks(models[1:], masks[1:], _sample(data), cfg, seeds=[4], **kw)
    assert trained == [3, 4]  # the same model, mask and seed in another call: loaded
    assert all(torch.equal(t, one.state_dict()[n]) for n, t in first[1].state_dict().items())
    pruning.train_with_masks(models[1:], [full_masks(models[1])], _sample(data), cfg, seeds=[4],
                             **kw)  # fmt: skip
    pruning.train_with_masks(models[1:], masks[1:], _sample(data), cfg, seeds=[5], **kw)
    assert trained == [3, 4, 4, 5]  # another mask, another seed: trained
    assert len(list(tmp_path.glob("t_masked-*.pt"))) == 4
