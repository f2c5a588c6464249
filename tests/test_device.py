"""Work follows `runtime.device()`: the training and scoring helpers, run on a stand-in
accelerator (`tests/support/fake_device.py`), leave nothing on the CPU that a GPU would
refuse, and give the CPU's numbers."""

import pytest
import torch
from support.fake_device import FAKE, FakeAccelerator, OnFake

from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import EncoderModel
from multihead.core.train import token_accuracy, train
from multihead.interventions.drophead import drophead_schedule
from multihead.interventions.gates import fine_tune_with_gates
from multihead.interventions.pruning import head_confidences, head_importance
from multihead.tasks.corpus import make_corpus
from multihead.tasks.synthetic import LookupTask, SubsetCountTask
from multihead.tasks.tagging import tagger_accuracy, tagger_config, tagging_data, train_taggers
from multihead.tasks.translation import (
    batches,
    confidence_queries,
    encode,
    greedy_accuracy,
    per_sentence_loss,
    run_batch,
    sampler,
    seq2seq_loss,
    teacher_forced,
    train_translation_models,
)

pytestmark = pytest.mark.slow  # each trains a small model through Python-level dispatch


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))


def _on_fake(model):
    return {p.device.type for p in model.parameters()} == {FAKE.type} and all(
        isinstance(p, OnFake) for p in model.parameters()
    )


def test_the_fake_device_catches_what_a_gpu_refuses():
    with FakeAccelerator() as fake:
        model = torch.nn.Linear(3, 2).to(FAKE)
        model(torch.randn(4, 3))  # data left on the CPU
        assert fake.mixed == ["aten.addmm.default"]
        with pytest.raises((RuntimeError, TypeError)):
            model(torch.randn(4, 3).to(FAKE)).detach().numpy()  # needs .cpu() first
        assert model(torch.ones(1, 3).to(FAKE)).cpu().shape == (1, 2)
    with pytest.raises(RuntimeError, match="FakeAccelerator"):
        _ = model.weight + 1  # outside the context


@pytest.mark.parametrize("task", [LookupTask(), SubsetCountTask(seq_len=8, subset_size=2)])
def test_train_follows_the_device_and_matches_the_cpu(task):
    cfg = ModelConfig(
        vocab_size=getattr(task, "vocab_size", 2), n_classes=task.n_classes, d_model=16, n_heads=2,
        n_layers=1, max_len=task.seq_len,
    )  # fmt: skip
    tcfg = TrainConfig(steps=6, batch_size=8, lr=1e-3, seed=0, eval_every=3)
    x, y = task.sample(16, torch.Generator().manual_seed(1))

    def run(dev):
        torch.manual_seed(0)
        model = EncoderModel(cfg)
        xe, ye = x.to(dev), y.to(dev)
        hist = train(
            model, task.sample, tcfg, evaluate=lambda m: {"acc": token_accuracy(m(xe), ye)},
            progress=False,
        )  # fmt: skip
        return model, hist

    _, on_cpu = run(torch.device("cpu"))
    with FakeAccelerator() as fake:
        model, on_fake = run(FAKE)  # train's own default device is device(), i.e. FAKE here
    assert not fake.mixed, fake.mixed
    assert _on_fake(model)
    assert on_fake.loss == pytest.approx(on_cpu.loss, abs=1e-4)
    assert [e["acc"] for e in on_fake.evals] == pytest.approx([e["acc"] for e in on_cpu.evals])


def test_translation_helpers_follow_the_device():
    corpus = make_corpus(60, seed=0)
    kw = dict(
        model_config=ModelConfig(
            200, d_model=16, n_heads=2, n_layers=1, n_decoder_layers=1, n_classes=200, max_len=32
        ),
        train_config=TrainConfig(steps=3, batch_size=4),
        progress=False,
    )
    data = encode(corpus, corpus.valid[:8])
    with FakeAccelerator() as fake:
        (setup,) = train_translation_models(
            [0], corpus, on_step=drophead_schedule(0.2, 3), on_step_key="drophead 0.2", **kw
        )
        model = setup.model
        assert _on_fake(model)
        teacher_forced(model, data)
        greedy_accuracy(model, data)
        dev = next(model.parameters()).device
        head_importance(model, batches(data, device=dev), per_sentence_loss)
        head_confidences(model, batches(data, device=dev), run_batch, confidence_queries)
        fine_tune_with_gates(
            model, sampler(setup.train), seq2seq_loss, lam=0.1, steps=2, batch_size=4,
            progress=False,
        )  # fmt: skip
        assert _on_fake(model)
    assert not fake.mixed, fake.mixed


def test_tagger_follows_the_device():
    corpus = make_corpus(60, seed=0)
    cfg = tagger_config(corpus, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    train_data, valid = tagging_data(corpus, corpus.train), tagging_data(corpus, corpus.valid)
    with FakeAccelerator() as fake:
        (model,) = train_taggers([0], corpus, train_data, cfg, TrainConfig(steps=3, batch_size=8))
        assert _on_fake(model)
        tagger_accuracy(model, valid)
        (loaded,) = train_taggers([0], corpus, train_data, cfg, TrainConfig(steps=3, batch_size=8))
        assert _on_fake(loaded)  # a seed loaded from the cache goes to the device too
        assert tagger_accuracy(loaded, valid) == tagger_accuracy(model, valid)
    assert not fake.mixed, fake.mixed


def test_run_notebook_reports_the_cell_that_mixes_devices(tmp_path):
    import nbformat
    from support.fake_device import run_notebook

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("# setup"),
        nbformat.v4.new_markdown_cell("text"),
        nbformat.v4.new_code_cell(
            "import torch\nfrom multihead import device\nlayer = torch.nn.Linear(3, 2).to(device())"
        ),
        nbformat.v4.new_code_cell("y = layer(torch.ones(1, 3).to(device()))"),  # fine
        nbformat.v4.new_code_cell("z = layer(torch.ones(1, 3))"),  # left on the CPU
    ]
    path = tmp_path / "demo.ipynb"
    nbformat.write(nb, path)
    assert run_notebook(path) == {4: ["aten.addmm.default"]}
