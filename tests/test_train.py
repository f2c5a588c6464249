import pickle
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from support.models import same_weights

import multihead
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import EncoderModel
from multihead.core.train import (
    History,
    cached_train,
    checkpoint_path,
    code_fingerprint,
    token_accuracy,
    token_loss,
    train,
    train_seeds,
)
from multihead.tasks.synthetic import IGNORE, LookupTask

TASK = LookupTask(vocab_size=4, seq_len=8)


def _model(seed=0):
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=4, n_classes=16, d_model=32, n_heads=2, n_layers=1, max_len=8)
    return EncoderModel(cfg)


def test_training_learns_the_pair_task():
    model = _model()
    x, y = TASK.sample(500, torch.Generator().manual_seed(9))
    before = token_accuracy(model(x), y)
    hist = train(
        model,
        TASK.sample,
        TrainConfig(steps=150, lr=3e-3, eval_every=50),  # accuracy reaches 1 by step 100
        evaluate=lambda m: {"acc": token_accuracy(m(x), y)},
        device=torch.device("cpu"),
        progress=False,
    )
    assert [e["step"] for e in hist.evals] == [50, 100, 150]
    assert hist.evals[-1]["acc"] > 0.9 > before
    assert hist.loss[-1] < hist.loss[0] and hist.seconds > 0


def test_training_is_deterministic_on_cpu():
    runs = []
    for _ in range(2):
        model = _model()
        train(model, TASK.sample, TrainConfig(steps=20), device=torch.device("cpu"), progress=False)
        runs.append(model.head.weight.detach().clone())
    assert torch.equal(*runs)


def test_checkpoint_cache_loads_instead_of_training(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    calls = []
    cfg = TrainConfig(steps=5)

    def run(model):
        def fn():
            calls.append(1)
            return train(model, TASK.sample, cfg, device=torch.device("cpu"), progress=False)

        return fn

    first = _model()
    h1 = cached_train("unit", first, (cfg, TASK), run(first))
    second = _model(seed=1)
    h2 = cached_train("unit", second, (cfg, TASK), run(second))
    assert len(calls) == 1 and h1.loss == h2.loss
    assert torch.equal(first.head.weight.cpu(), second.head.weight.cpu())
    third = _model()
    cached_train("unit", third, (TrainConfig(steps=6), TASK), run(third))  # new key: trains
    assert len(calls) == 2
    with pytest.raises(ValueError, match="name"):
        cached_train("bad name!", first, cfg, run(first))


def test_accuracy_and_loss_skip_ignored_positions():
    logits = torch.tensor([[[5.0, 0.0], [0.0, 5.0], [5.0, 0.0]]])
    y = torch.tensor([[0, 0, IGNORE]])
    assert token_accuracy(logits, y) == 0.5
    with pytest.raises(ValueError, match="IGNORE"):
        token_accuracy(logits, torch.full((1, 3), IGNORE))
    with pytest.raises(ValueError, match="do not match"):
        token_accuracy(logits, y[:, :2])

    class Fixed(torch.nn.Module):
        def forward(self, x):
            return logits

    assert torch.isfinite(token_loss(Fixed(), (None, y)))


def test_bad_input():
    with pytest.raises(TypeError, match="model"):
        train("model", TASK.sample, TrainConfig())
    with pytest.raises(TypeError, match="train_config must be a TrainConfig"):
        train(_model(), TASK.sample, {"steps": 1})
    with pytest.raises(TypeError, match="sample"):
        train(_model(), None, TrainConfig())


def test_on_step_sees_every_step_in_training_mode():
    seen = []
    model = _model()
    train(
        model,
        TASK.sample,
        TrainConfig(steps=5),
        device=torch.device("cpu"),
        progress=False,
        on_step=lambda m, step: seen.append((step, m.training)),
    )
    assert seen == [(s, True) for s in range(5)]
    with pytest.raises(TypeError, match="on_step"):
        train(model, TASK.sample, TrainConfig(steps=1), progress=False, on_step=3)


PACKAGE = Path(multihead.__file__).resolve().parent
TRAINING_CODE = sorted(
    str(path.relative_to(PACKAGE))
    for layer in ("core", "tasks", "interventions")
    for path in (PACKAGE / layer).rglob("*.py")
) + ["_checks.py"]


def _copy_package(tmp_path):
    pkg = tmp_path / "multihead"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return pkg


@pytest.mark.parametrize("rel", TRAINING_CODE)
def test_an_edit_of_any_training_module_changes_the_fingerprint(tmp_path, rel):
    pkg = _copy_package(tmp_path)
    before = code_fingerprint(pkg)
    assert before == code_fingerprint()  # the copy hashes like the package itself
    module = pkg / rel
    module.write_text(module.read_text() + "\n# edited\n")
    assert code_fingerprint(pkg) != before


@pytest.mark.parametrize("rel", ["viz/plotting.py", "analysis/metrics.py", "exercises/ch01.py"])
def test_an_edit_elsewhere_keeps_the_fingerprint(tmp_path, rel):
    pkg = _copy_package(tmp_path)
    before = code_fingerprint(pkg)
    module = pkg / rel
    module.write_text(module.read_text() + "\n# edited\n")
    assert code_fingerprint(pkg) == before


def test_a_new_or_removed_training_module_changes_the_fingerprint(tmp_path):
    pkg = _copy_package(tmp_path)
    before = code_fingerprint(pkg)
    (pkg / "tasks" / "extra.py").write_text("X = 1\n")
    added = code_fingerprint(pkg)
    (pkg / "tasks" / "extra.py").unlink()
    (pkg / "tasks" / "lexicon.py").unlink()
    assert len({before, added, code_fingerprint(pkg)}) == 3


CFG = ModelConfig(vocab_size=4, n_classes=16, d_model=32, n_heads=2, n_layers=1, max_len=8)
CPU = torch.device("cpu")


def test_train_seeds_gives_each_seed_the_model_train_gives_it_alone():
    made, stepped = [], []
    cfg = TrainConfig(steps=5, batch_size=8, warmup=2, seed=0, eval_every=5)
    x, y = TASK.sample(32, torch.Generator().manual_seed(9))
    models, histories = train_seeds(
        [3, 5], lambda seed: made.append(seed) or EncoderModel(CFG), TASK.sample, cfg,
        evaluate=lambda m: {"acc": token_accuracy(m(x), y)}, device=CPU,
        on_step=lambda m, step: stepped.append((id(m), step)),
    )  # fmt: skip
    assert made == [3, 5] and len(models) == len(histories) == 2
    assert stepped == [(id(m), s) for m in models for s in range(5)]  # one model per seed
    assert not any(m.training for m in models)
    for seed, model, history in zip([3, 5], models, histories, strict=True):
        torch.manual_seed(seed)
        alone = EncoderModel(CFG)
        ref = train(alone, TASK.sample, replace(cfg, seed=seed), device=CPU, progress=False,
                    evaluate=lambda m: {"acc": token_accuracy(m(x), y)})  # fmt: skip
        assert same_weights(model, alone)  # bitwise, on the CPU
        assert history.loss == ref.loss and history.evals == ref.evals
    assert not same_weights(*models)
    # seed 5 draws its own batches (cfg.seed = 5), not those of cfg.seed = 0
    torch.manual_seed(5)
    other = EncoderModel(CFG)
    train(other, TASK.sample, cfg, device=CPU, progress=False)
    assert not same_weights(other, models[1])


def test_train_seeds_cache_loads_a_seed_instead_of_training_it(tmp_path, monkeypatch):
    from multihead.core import train as core_train

    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    trained = []
    real = core_train.train

    def counting(model, sample, cfg, **kwargs):
        trained.append(cfg.seed)
        return real(model, sample, cfg, **kwargs)

    monkeypatch.setattr(core_train, "train", counting)
    cfg = TrainConfig(steps=3, batch_size=8)
    kw = dict(device=CPU, cache="unit_seeds", key=("lookup", CFG))
    first, h1 = core_train.train_seeds([3, 5], lambda s: EncoderModel(CFG), TASK.sample, cfg, **kw)
    assert trained == [3, 5] and len(list(tmp_path.glob("unit_seeds-*.pt"))) == 2
    again, h2 = core_train.train_seeds([5, 7], lambda s: EncoderModel(CFG), TASK.sample, cfg, **kw)
    assert trained == [3, 5, 7]  # seed 5 came from the cache
    assert same_weights(again[0], first[1]) and h2[0].loss == h1[1].loss
    assert not again[0].training
    plain, _ = core_train.train_seeds([7], lambda s: EncoderModel(CFG), TASK.sample, cfg,
                                      device=CPU)  # fmt: skip
    assert same_weights(plain[0], again[1])  # the cached seed is the seed trained alone
    core_train.train_seeds([3], lambda s: EncoderModel(CFG), TASK.sample, cfg,
                           **{**kw, "key": ("lookup", "other")})  # fmt: skip
    assert trained == [3, 5, 7, 7, 3]  # another key is another checkpoint
    assert len(list(tmp_path.glob("unit_seeds-*.pt"))) == 4


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seeds": 3}, TypeError, "seeds must be a sequence"),
        ({"seeds": "01"}, TypeError, "seeds must be a sequence"),
        ({"seeds": []}, ValueError, "seeds is empty"),
        ({"seeds": [1, 1]}, ValueError, "repeats a seed"),
        ({"seeds": [0, -1]}, ValueError, r"seeds\[1\]"),
        ({"seeds": [0, 1.0]}, TypeError, r"seeds\[1\]"),
        ({"make": "EncoderModel"}, TypeError, "make must be callable"),
        ({"make": lambda seed: "model"}, TypeError, r"make\(0\) must return a torch.nn.Module"),
        ({"train_config": {"steps": 1}}, TypeError, "train_config must be a TrainConfig"),
        ({"cache": "a b"}, ValueError, "cache="),
        ({"cache": 3}, ValueError, "cache="),
    ],
)
def test_train_seeds_bad_input_names_the_argument(kwargs, error, match, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    args = dict(seeds=[0], make=lambda seed: EncoderModel(CFG), train_config=TrainConfig(steps=1))
    args.update(kwargs)
    with pytest.raises(error, match=match):
        train_seeds(args["seeds"], args["make"], TASK.sample, args["train_config"], device=CPU,
                    cache=args.get("cache"))  # fmt: skip
    assert not list(tmp_path.iterdir())  # nothing was trained or cached


def test_loss_fn_must_return_a_scalar_tensor():
    for bad in (lambda m, b: token_loss(m, b).item(), lambda m, b: token_loss(m, b)[None]):
        with pytest.raises(TypeError, match="loss_fn must return a scalar tensor"):
            train(_model(), TASK.sample, TrainConfig(steps=1), loss_fn=bad, device=CPU,
                  progress=False)  # fmt: skip
    with pytest.raises(TypeError, match="loss_fn must return a scalar tensor, got float"):
        train_seeds([0], lambda s: EncoderModel(CFG), TASK.sample, TrainConfig(steps=1),
                    loss_fn=lambda m, b: 1.0, device=CPU)  # fmt: skip


class _Arbitrary:
    """An object a checkpoint has no business holding."""


def test_checkpoints_hold_plain_data_and_load_without_unpickling_code(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    model = _model()

    def fn():  # an evaluation may return numpy numbers: they are saved as plain floats
        return History(loss=[np.float64(0.5)], evals=[{"step": 1, "acc": np.float64(1.0)}])

    cached_train("plain", model, "key", fn)
    path = checkpoint_path("plain", "key")
    saved = torch.load(path, weights_only=True)
    assert saved["history"] == {"loss": [0.5], "evals": [{"step": 1, "acc": 1.0}], "seconds": 0.0}
    assert cached_train("plain", _model(seed=1), "key", fn).evals == [{"step": 1, "acc": 1.0}]
    torch.save({"state": model.state_dict(), "history": {}, "extra": _Arbitrary()}, path)
    with pytest.raises(pickle.UnpicklingError):
        cached_train("plain", model, "key", fn)


def test_a_history_that_is_not_plain_data_fails_before_anything_is_saved(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    with pytest.raises(TypeError):
        cached_train("odd", _model(), "key", lambda: History(evals=[{"acc": torch.tensor(1.0)}]))
    assert not checkpoint_path("odd", "key").exists()
    assert list(tmp_path.iterdir()) == []
