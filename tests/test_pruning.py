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
    with pytest.raises(ValueError, match="no MultiHeadAttention"):
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


def test_train_with_masks_trains_each_masked_model_as_alone(monkeypatch):
    from dataclasses import replace

    from multihead.core.config import TrainConfig
    from multihead.core.train import train
    from multihead.interventions import pruning
    from multihead.interventions.pruning import train_with_masks
    from multihead.tasks.translation import SEQ2SEQ_PAD, seq2seq_loss, seq2seq_seed_loss

    data = _data(16)
    models = [_model(0), _model(1)]
    masks = [full_masks(m) for m in models]
    masks[0]["encoder.layers.0.attn"] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    masks[1]["encoder.layers.0.attn"] = torch.tensor([0.0, 0.0, 0.0, 1.0])
    masks[1]["decoder.layers.1.cross_attn"] = torch.tensor([0.0, 0.0, 0.0, 1.0])
    # a module missing from a mask keeps the model's own mask
    dict(attention_modules(models[1]))["decoder.layers.0.attn"].head_mask[2] = 0.0
    del masks[1]["decoder.layers.0.attn"]
    before = [copy.deepcopy(m.state_dict()) for m in models]
    cfg = TrainConfig(steps=5, batch_size=4, lr=1e-2, warmup=0, grad_clip=0.0)
    widths = {}
    train_seeds = pruning.train_seeds

    def recording(ensemble, *args, **kwargs):  # the batched run computes only needed heads
        widths.update({n: m.n_heads for n, m in attention_modules(ensemble.template)})
        return train_seeds(ensemble, *args, **kwargs)

    monkeypatch.setattr(pruning, "train_seeds", recording)
    trained, histories = train_with_masks(
        models, masks, _sample(data), cfg, loss_fn=seq2seq_seed_loss, seeds=[3, 4],
        pad=SEQ2SEQ_PAD,
    )  # fmt: skip
    assert widths["encoder.layers.0.attn"] == 2  # the most heads either model keeps there
    assert widths["decoder.layers.1.cross_attn"] == 4 and widths["encoder.layers.1.attn"] == 4
    assert widths["decoder.layers.0.attn"] == 4  # model 0 keeps all four there
    assert len(trained) == len(histories) == 2 and len(histories[0].loss) == 5
    for m, state in zip(models, before, strict=True):  # the inputs are untouched
        assert all(torch.equal(state[n], t) for n, t in m.state_dict().items())
    for k, (model, mask) in enumerate(zip(models, masks, strict=True)):
        got = dict(attention_modules(trained[k]))
        for name, m in mask.items():
            assert torch.equal(got[name].head_mask.cpu(), m)
        own = before[k]["decoder.layers.0.attn.head_mask"]
        assert torch.equal(got["decoder.layers.0.attn"].head_mask.cpu(), own)
        # a masked head's projections get no gradient, so they keep their initial values
        enc = got["encoder.layers.0.attn"]
        for h in range(4):  # a masked head keeps its starting weights (wd = 0)
            if mask["encoder.layers.0.attn"][h] == 0:
                assert torch.equal(enc.W_Q[h].cpu(), before[k]["encoder.layers.0.attn.W_Q"][h])
        alone = copy.deepcopy(model)
        with head_masks(alone, mask):
            train(alone, _sample(data), replace(cfg, seed=[3, 4][k]), loss_fn=seq2seq_loss,
                  progress=False)  # fmt: skip
            x = (data.src, data.tgt[:, :-1])
            kw = {"src_padding_mask": data.src == 0}
            with torch.no_grad():
                assert torch.allclose(trained[k](*x, **kw), alone(*x, **kw), atol=1e-4)


def test_train_with_masks_bad_input():
    from multihead.core.config import TrainConfig
    from multihead.interventions.pruning import train_with_masks
    from multihead.tasks.translation import seq2seq_seed_loss

    models, data = [_model(0), _model(1)], _data()
    masks = [full_masks(m) for m in models]
    cfg = TrainConfig(steps=1, batch_size=2)
    kw = {"loss_fn": seq2seq_seed_loss, "seeds": [0, 1]}
    with pytest.raises(TypeError, match="models"):
        train_with_masks(models[0], masks, _sample(data), cfg, **kw)
    with pytest.raises(ValueError, match="masks must be a list of 2"):
        train_with_masks(models, masks[:1], _sample(data), cfg, **kw)
    with pytest.raises(ValueError, match="seeds must hold 2"):
        train_with_masks(models, masks, _sample(data), cfg, loss_fn=seq2seq_seed_loss, seeds=[0])
    with pytest.raises(TypeError, match="cfg"):
        train_with_masks(models, masks, _sample(data), {"steps": 1}, **kw)
    bad = [masks[0], {"encoder.layers.0.attn": torch.zeros(4)}]
    with pytest.raises(ValueError, match=r"masks\[1\].*every head"):
        train_with_masks(models, bad, _sample(data), cfg, **kw)


def test_train_with_masks_cache_trains_once(tmp_path, monkeypatch):
    from multihead.core.config import TrainConfig
    from multihead.interventions import pruning
    from multihead.tasks.translation import SEQ2SEQ_PAD, seq2seq_seed_loss

    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    data = _data(8)
    models = [_model(0), _model(1)]
    masks = [full_masks(m) for m in models]
    masks[1]["encoder.layers.0.attn"] = torch.tensor([1.0, 0.0, 1.0, 1.0])
    cfg = TrainConfig(steps=2, batch_size=4, lr=1e-2, warmup=0, grad_clip=0.0)
    kw = {"loss_fn": seq2seq_seed_loss, "seeds": [3, 4], "pad": SEQ2SEQ_PAD, "cache": "t_masked"}
    first, h1 = pruning.train_with_masks(models, masks, _sample(data), cfg, **kw)
    assert len(list(tmp_path.glob("t_masked-*.pt"))) == 2
    calls = []
    real = pruning.train_seeds
    monkeypatch.setattr(pruning, "train_seeds", lambda *a, **k: calls.append(1) or real(*a, **k))
    again, h2 = pruning.train_with_masks(models, masks, _sample(data), cfg, **kw)
    assert not calls and h1[1].loss == h2[1].loss  # loaded, not retrained
    for a, b in zip(first, again, strict=True):
        assert all(torch.equal(t, b.state_dict()[n].cpu()) for n, t in a.state_dict().items())
    assert torch.equal(dict(attention_modules(again[1]))["encoder.layers.0.attn"].head_mask.cpu(),
                       masks[1]["encoder.layers.0.attn"])  # fmt: skip
    other = [masks[0], full_masks(models[1])]  # a different mask is a different checkpoint
    pruning.train_with_masks(models, other, _sample(data), cfg, **kw)
    assert calls and len(list(tmp_path.glob("t_masked-*.pt"))) == 3
    with pytest.raises(ValueError, match="cache"):
        pruning.train_with_masks(models, masks, _sample(data), cfg, **{**kw, "cache": "a b"})
