"""tasks.seed_scores.train_seed_scores: K seeds scored as the alone runs, cached, checked."""

import pytest
import torch

from multihead import ModelConfig, TrainConfig
from multihead.core.model import EncoderModel
from multihead.core.train import token_loss, train
from multihead.tasks.seed_scores import SeedScores, train_seed_scores
from multihead.tasks.synthetic import LookupTask

TASK = LookupTask(vocab_size=4, seq_len=6, offsets=(1, 2))
CFG = ModelConfig(vocab_size=4, n_classes=16, d_model=8, n_heads=2, n_layers=1, max_len=6)
TRAIN = TrainConfig(steps=4, batch_size=8, lr=3e-3, warmup=2)


def _val():
    return TASK.sample(32, torch.Generator().manual_seed(5))


@pytest.mark.parametrize("attention", ["standard", "talking_heads"])
def test_scores_equal_the_alone_runs_and_are_cached(attention):
    cfg = ModelConfig(**{**vars(CFG), "attention": attention})
    out = train_seed_scores(TASK, cfg, TRAIN, [0, 2], _val(), evals=2, name="test_scores")
    assert out.steps == (2, 4) and out.loss.shape == (2, 2) == out.accuracy.shape
    torch.manual_seed(2)
    alone = EncoderModel(cfg)
    train(alone, TASK.sample, TrainConfig(**{**vars(TRAIN), "seed": 2}), progress=False)
    with torch.no_grad():
        assert abs(token_loss(alone, _val()).item() - out.final_loss[1].item()) < 1e-4
    again = train_seed_scores(TASK, cfg, TRAIN, [0, 2], _val(), evals=2, name="test_scores")
    assert torch.equal(again.loss, out.loss) and again.seconds == out.seconds


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"task": object()}, TypeError, "task must have a sample"),
        ({"model_config": {}}, TypeError, "model_config must be a ModelConfig"),
        ({"train_config": None}, TypeError, "train_config must be a TrainConfig"),
        ({"validation": torch.zeros(3, 6)}, TypeError, "validation must be a tuple"),
        ({"validation": (torch.zeros(3, 9), torch.zeros(3, 9))}, ValueError, "validation must"),
        ({"seeds": "01"}, TypeError, "seeds must be"),
        ({"seeds": [0, -1]}, ValueError, r"seeds\[1\]"),
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
