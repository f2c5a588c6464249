"""Several seeds of one ``EncoderModel`` on a synthetic task (``core.train.train_seeds``),
scored on a held-out set during and at the end of training, and kept in the checkpoint cache.

``train_seed_scores(seeds, task, model_config, train_config, validation)`` is what a sweep
over architectures needs at each point: K replicates of the held-out loss and accuracy, at
the end of training and at earlier steps (``evals``), so that a verdict can be judged against
the seed noise of the same statistic. Seed ``s`` is the model ``core.train.train`` trains
after ``torch.manual_seed(s)`` with ``train_config.seed = s``.

Shapes: validation = (x (N, seq), y (N, seq)); scores (evals, K).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from multihead._checks import check_int
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import EncoderModel
from multihead.core.train import IGNORE, History, token_accuracy, train_seeds


@dataclass(frozen=True)
class SeedScores:
    """Held-out scores of K seeds: ``loss`` and ``accuracy`` (evals, K) at ``steps`` (the
    last is the end of training); ``seconds``: wall time of the training runs (as
    measured when it ran, also when loaded from the cache; the seeds' runs added up);
    ``example_loss``: each held-out example's loss (evals, K, N), where the runs kept it,
    for a verdict's interval over test examples (``analysis.verdict.paired``).

    Shapes: loss, accuracy (evals, K); example_loss (evals, K, N) or None.
    """

    seeds: tuple[int, ...]
    steps: tuple[int, ...]
    loss: Tensor
    accuracy: Tensor
    seconds: float
    example_loss: Tensor | None = None

    @property
    def final_loss(self) -> Tensor:
        """Held-out loss at the end of training. Shapes: (K,)."""
        return self.loss[-1]

    @property
    def final_accuracy(self) -> Tensor:
        """Held-out accuracy at the end of training. Shapes: (K,)."""
        return self.accuracy[-1]

    @classmethod
    def from_histories(cls, seeds: Sequence[int], histories: Sequence[History]) -> SeedScores:
        """The scores of K runs whose ``History.evals`` hold ``loss`` and ``accuracy`` at
        the same steps.

        Shapes: K histories -> loss, accuracy (evals, K).
        """
        steps = [tuple(e["step"] for e in h.evals) for h in histories]
        if not histories or any(s != steps[0] for s in steps):
            raise ValueError("histories must be non-empty and scored at the same steps")

        def table(name: str) -> Tensor:  # (evals, K)
            return torch.tensor(
                [[e[name] for e in h.evals] for h in histories], dtype=torch.float64
            ).T

        kept = all("example_loss" in e for h in histories for e in h.evals)
        examples = (
            torch.tensor([[e["example_loss"] for e in h.evals] for h in histories]).transpose(0, 1)
            if kept
            else None
        )  # (evals, K, N)
        return cls(tuple(seeds), steps[0], table("loss"), table("accuracy"),
                   sum(h.seconds for h in histories), examples)  # fmt: skip

    def examples(self, step: int | None = None) -> Tensor:
        """Each held-out example's loss at ``step`` (default: the end of training), one row
        per seed: the table ``analysis.verdict.paired`` takes.

        Shapes: -> (K, N).
        """
        if self.example_loss is None:
            raise ValueError("these scores kept no per-example losses")
        if step is not None and step not in self.steps:
            raise ValueError(f"step={step!r} was not scored; the scored steps are {self.steps}")
        i = len(self.steps) - 1 if step is None else self.steps.index(step)
        return self.example_loss[i].to(torch.float64)

    def at(self, step: int) -> tuple[Tensor, Tensor]:
        """Held-out loss and accuracy at training step ``step`` (one of ``steps``).

        Shapes: -> loss (K,), accuracy (K,).
        """
        if step not in self.steps:
            raise ValueError(f"step={step!r} was not scored; the scored steps are {self.steps}")
        i = self.steps.index(step)
        return self.loss[i], self.accuracy[i]


def _fingerprint(validation: tuple[Tensor, Tensor]) -> str:
    h = hashlib.sha256()
    for t in validation:
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _check_validation(validation: object, max_len: int) -> tuple[Tensor, Tensor]:
    if (
        not isinstance(validation, tuple)
        or len(validation) != 2
        or not all(isinstance(t, Tensor) for t in validation)
    ):
        raise TypeError("validation must be a tuple (x, y) of tensors, as task.sample returns")
    x, y = validation
    if x.ndim != 2 or x.shape != y.shape or x.shape[1] > max_len:
        raise ValueError(
            f"validation must be (x, y) both shaped (N, seq <= {max_len}), got "
            f"{tuple(x.shape)} and {tuple(y.shape)}"
        )
    return x, y


def train_seed_scores(
    seeds: Sequence[int],
    task: object,
    model_config: ModelConfig,
    train_config: TrainConfig,
    validation: tuple[Tensor, Tensor],
    *,
    evals: int = 1,
    name: str = "seed_scores",
    progress: bool = False,
) -> SeedScores:
    """Train ``EncoderModel(model_config)`` on ``task.sample`` for every seed and score each
    seed on ``validation`` ``evals`` times, evenly spaced, the last at the end.

    Each seed's model and scores are cached under ``name`` and a key made of the task, both
    configs and the validation data: a second call loads them.

    Shapes: validation = (x (N, seq), y (N, seq)) -> SeedScores with (evals, K) scores.
    """
    if not callable(getattr(task, "sample", None)):
        raise TypeError("task must have a sample(batch_size, generator) method (a tasks object)")
    if not isinstance(model_config, ModelConfig):
        raise TypeError(f"model_config must be a ModelConfig, got {type(model_config).__name__}")
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    evals = check_int("evals", evals, 1, train_config.steps + 1)
    if train_config.steps % evals:
        raise ValueError(f"evals={evals} must divide train_config.steps={train_config.steps}")
    x_val, y_val = _check_validation(validation, model_config.max_len)
    cfg = replace(train_config, eval_every=train_config.steps // evals)

    @torch.no_grad()
    def evaluate(model: torch.nn.Module) -> dict:
        dev = next(model.parameters()).device
        x, y = x_val.to(dev), y_val.to(dev)
        logits = model(x)  # (N, seq, classes)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE)
        tokens = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
        kept = (y != IGNORE).sum(1).clamp(min=1)  # (N,) scored tokens per sequence
        return {"loss": loss.item(), "accuracy": token_accuracy(logits, y),
                "example_loss": (tokens.sum(1) / kept).tolist()}  # fmt: skip

    key = ("seed-scores", repr(task), model_config, _fingerprint((x_val, y_val)))
    _, histories = train_seeds(
        seeds, lambda seed: EncoderModel(model_config), task.sample, cfg, evaluate=evaluate,
        progress=progress, cache=name, key=key,
    )  # fmt: skip
    return SeedScores.from_histories(seeds, histories)
