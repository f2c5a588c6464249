"""tasks.seed_scores.train_seed_scores: K seeds scored as the alone runs, cached, checked."""

from dataclasses import replace

import pytest
import torch

from multihead import ModelConfig, TrainConfig
from multihead.core import train as core_train
from multihead.core.model import EncoderModel
from multihead.core.train import History, token_accuracy, token_loss
from multihead.tasks.seed_scores import SeedScores, train_seed_scores
from multihead.tasks.synthetic import LookupTask

TASK = LookupTask(vocab_size=4, seq_len=6, offsets=(1, 2))
CFG = ModelConfig(vocab_size=4, n_classes=16, d_model=8, n_heads=2, n_layers=1, max_len=6)
TRAIN = TrainConfig(steps=4, batch_size=8, lr=3e-3, warmup=2)


def _val():
    return TASK.sample(32, torch.Generator().manual_seed(5))


@pytest.mark.parametrize("attention", ["standard", "talking_heads"])
def test_scores_equal_the_alone_runs_and_each_seed_is_cached(attention, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIHEAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MULTIHEAD_DEVICE", "cpu")
    cfg = ModelConfig(**{**vars(CFG), "attention": attention})
    out = train_seed_scores([0, 2], TASK, cfg, TRAIN, _val(), evals=2, name="test_scores")
    assert out.seeds == (0, 2) and out.steps == (2, 4)
    assert out.loss.shape == (2, 2) == out.accuracy.shape and out.loss.dtype == torch.float64
    x, y = _val()
    for k, seed in enumerate([0, 2]):  # seed s: EncoderModel after manual_seed(s), own batches
        torch.manual_seed(seed)
        alone = EncoderModel(cfg)
        core_train.train(alone, TASK.sample, replace(TRAIN, seed=seed), progress=False)
        with torch.no_grad():
            assert token_loss(alone, (x, y)).item() == out.final_loss[k].item()
            assert token_accuracy(alone(x), y) == out.final_accuracy[k].item()
    assert out.final_loss[0] != out.final_loss[1]
    # each held-out sequence's loss: (evals, seeds, sequences), its mean over scored tokens
    assert out.example_loss.shape == (2, 2, len(x)) and out.examples().shape == (2, len(x))
    kept = (y != -100).sum(1)
    pooled = (out.examples() * kept).sum(1) / kept.sum()
    assert torch.allclose(pooled, out.final_loss, atol=1e-5)
    assert torch.equal(out.examples(2), out.example_loss[0].double())
    with pytest.raises(ValueError, match="step=3"):
        out.examples(3)
    trained, real = [], core_train.train

    def counting(model, sample, cfg, **kwargs):
        trained.append(cfg.seed)
        return real(model, sample, cfg, **kwargs)

    monkeypatch.setattr(core_train, "train", counting)
    again = train_seed_scores([2, 4], TASK, cfg, TRAIN, _val(), evals=2, name="test_scores")
    assert trained == [4]  # seed 2 came from the cache
    assert torch.equal(again.loss[:, 0], out.loss[:, 1])
    assert torch.equal(again.accuracy[:, 0], out.accuracy[:, 1])
    other = (_val()[0][:16], _val()[1][:16])  # other validation data: another checkpoint
    train_seed_scores([2], TASK, cfg, TRAIN, other, evals=2, name="test_scores")
    assert trained == [4, 2] and len(list(tmp_path.glob("test_scores-*.pt"))) == 4


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"task": object()}, TypeError, "task must have a sample"),
        ({"model_config": {}}, TypeError, "model_config must be a ModelConfig"),
        ({"train_config": None}, TypeError, "train_config must be a TrainConfig"),
        ({"validation": torch.zeros(3, 6)}, TypeError, "validation must be a tuple"),
        ({"validation": (torch.zeros(3, 9), torch.zeros(3, 9))}, ValueError, "validation must"),
        ({"seeds": "01"}, TypeError, "seeds must be"),
        ({"seeds": 3}, TypeError, "seeds must be"),
        ({"seeds": [0, -1]}, ValueError, r"seeds\[1\]"),
        ({"seeds": [2, 2]}, ValueError, "repeats"),
        ({"evals": 3}, ValueError, "evals=3 must divide"),
        ({"evals": 0}, ValueError, "evals"),
    ],
)
def test_bad_input_names_the_argument(kwargs, error, match):
    args = dict(task=TASK, model_config=CFG, train_config=TRAIN, seeds=[0, 1], validation=_val())
    args.update(kwargs)
    evals = args.pop("evals", 1)
    with pytest.raises(error, match=match):
        train_seed_scores(**args, evals=evals)


def test_from_histories_tabulates_the_seeds_and_checks_the_steps():
    runs = [
        History(evals=[{"step": 2, "loss": 0.875, "accuracy": 0.125},
                       {"step": 4, "loss": 0.5, "accuracy": 0.625}], seconds=1.0),
        History(evals=[{"step": 2, "loss": 0.75, "accuracy": 0.25},
                       {"step": 4, "loss": 0.375, "accuracy": 0.75}], seconds=2.0),
    ]  # fmt: skip
    scores = SeedScores.from_histories([3, 5], runs)  # rows: steps; columns: seeds
    assert scores.seeds == (3, 5) and scores.steps == (2, 4) and scores.seconds == 3.0
    assert scores.loss.dtype == scores.accuracy.dtype == torch.float64
    assert scores.loss.tolist() == [[0.875, 0.75], [0.5, 0.375]]
    assert scores.final_accuracy.tolist() == [0.625, 0.75]
    runs[1].evals.pop(0)
    with pytest.raises(ValueError, match="same steps"):
        SeedScores.from_histories([3, 5], runs)
    with pytest.raises(ValueError, match="non-empty"):
        SeedScores.from_histories([], [])


def test_at_reads_one_scored_step_and_names_a_missing_one():
    scores = SeedScores(
        seeds=(0, 1),
        steps=(5, 10),
        loss=torch.tensor([[0.9, 0.8], [0.5, 0.4]]),
        accuracy=torch.tensor([[0.1, 0.2], [0.6, 0.7]]),
        seconds=1.0,
    )
    loss, acc = scores.at(5)
    assert torch.equal(loss, torch.tensor([0.9, 0.8])) and torch.equal(
        acc, torch.tensor([0.1, 0.2])
    )
    assert torch.equal(scores.at(10)[0], scores.final_loss)
    with pytest.raises(ValueError, match="step=7"):
        scores.at(7)
