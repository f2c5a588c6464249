"""How long must the baselines of chapters 2 to 4 train to learn their tasks?

Each experiment of chapters 2 to 4 states, before its run, what it means for its baseline
to have learned the task: a held-out measure against a threshold fixed from the task (a
lookup or a count the model can solve exactly: held-out loss at most 0.1 nats). This command
trains the baseline alone (never a treatment arm) on validation seeds the verdicts never use
(900, 901, ...) and scores it on a validation split drawn apart from every test set, at
evenly spaced steps of one long run (the learning rate is constant after warm-up, so the
score at step ``s`` is that of an ``s``-step run). It prints, per budget, each seed's loss
and how many seeds pass; the notebook's budget is the smallest that every validation seed
passes::

    python -m tools.ch2_4_budget ch3 --steps 2000 --every 100
    python -m tools.ch2_4_budget ch4-lookup ch4-subset ch4-classify --seeds 900 901 902 903

The baselines: chapter 2, independent heads on the three-offset lookup; chapter 3, the
usual key size (8 heads of ``d_k = d_model / h = 4``) on the subset count of 32 tokens;
chapter 4, the standard layer (plain attention, 8 heads) on the lookup, on the subset count
of 16 tokens, and on the clause classification. ``--lr`` tries other learning rates (the
treatment arms of a notebook get whatever the baseline is given).
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

from multihead import ModelConfig, TrainConfig
from multihead.core.model import EncoderModel
from multihead.core.train import IGNORE, train
from multihead.tasks.synthetic import LookupTask, SubsetCountTask

THRESHOLD = 0.1  # nats: a task the model can solve exactly, learned
VALIDATION_DATA = 424_242  # the validation split's generator seed, apart from every test set


def _lookup_baseline(d_model: int, heads: int):
    task = LookupTask(vocab_size=4, seq_len=12, offsets=(1, 2, 4))
    cfg = ModelConfig(
        vocab_size=4,
        n_classes=task.n_classes,
        d_model=d_model,
        n_heads=heads,
        n_layers=1,
        max_len=12,
        d_value=d_model // heads,
    )
    return task, cfg


def _subset_baseline(n: int, d_model: int, heads: int):
    task = SubsetCountTask(seq_len=n, subset_size=n // 4, seed=0)
    cfg = ModelConfig(
        vocab_size=2,
        n_classes=task.n_classes,
        d_model=d_model,
        n_heads=heads,
        n_layers=1,
        max_len=n,
        d_value=d_model // heads,
        d_key=d_model // heads,
    )
    return task, cfg


BASELINES = {
    "ch2": lambda: _lookup_baseline(32, 4),  # notebook 2: independent init, 4 heads
    "ch3": lambda: _subset_baseline(32, 32, 8),  # notebook 3: (a), d_k = 32 / 8
    "ch4-lookup": lambda: _lookup_baseline(32, 8),  # notebook 4: plain, 8 heads
    "ch4-subset": lambda: _subset_baseline(16, 32, 8),
}


def curve(name: str, seed: int, steps: int, every: int, lr: float, batch: int) -> list:
    """[(step, held-out loss)] of one baseline seed, on the validation split."""
    task, cfg = BASELINES[name]()
    x, y = task.sample(2000, torch.Generator().manual_seed(VALIDATION_DATA))

    @torch.no_grad()
    def evaluate(model):
        logits = model(x)
        return {
            "loss": F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE).item()
        }

    torch.manual_seed(seed)
    model = EncoderModel(cfg)
    hist = train(
        model,
        task.sample,
        TrainConfig(steps=steps, batch_size=batch, lr=lr, seed=seed, eval_every=every),
        evaluate=evaluate,
        progress=False,
    )
    return [(e["step"], e["loss"]) for e in hist.evals]


def classify_curve(seed: int, steps: int, every: int, lr: float, heads: int = 8) -> list:
    """[(step, held-out loss)] of notebook 4's plain classifier on a validation corpus."""
    from multihead.tasks.classification import (
        classification_corpus,
        classification_data,
        classifier_config,
        train_classifiers,
    )

    corpus = classification_corpus(6000, seed=VALIDATION_DATA)
    data = classification_data(corpus, corpus.train)
    held = classification_data(corpus, corpus.valid)  # the validation split only
    cfg = classifier_config(corpus, d_model=64, n_heads=heads, n_layers=1)
    tcfg = TrainConfig(steps=steps, batch_size=32, lr=lr, warmup=10)
    s = train_classifiers(
        [seed], corpus, data, held, cfg, tcfg, evals=steps // every, name="ch4_budget"
    )
    return [(int(t), float(v)) for t, v in zip(s.steps, s.loss[:, 0], strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.ch2_4_budget", description=__doc__)
    parser.add_argument("baselines", nargs="+", choices=[*BASELINES, "ch4-classify"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[900, 901, 902])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--lr", type=float, nargs="+", default=[3e-3])
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)
    if any(s < 900 for s in args.seeds):
        parser.error("validation seeds start at 900: the verdicts' seeds must stay unseen")
    for name in args.baselines:
        for lr in args.lr:
            runs = {
                s: (
                    classify_curve(s, args.steps, args.every, lr)
                    if name == "ch4-classify"
                    else curve(name, s, args.steps, args.every, lr, args.batch)
                )
                for s in args.seeds
            }
            print(
                f"{name}, lr {lr:g}: held-out loss per validation seed "
                f"(passing: at most {THRESHOLD} nats)"
            )
            first = None
            for i, (step, _) in enumerate(runs[args.seeds[0]]):
                losses = [runs[s][i][1] for s in args.seeds]
                passed = sum(v <= THRESHOLD for v in losses)
                if first is None and passed == len(losses):
                    first = step
                print(
                    f"  step {step:5d}: "
                    + " ".join(f"{v:.4f}" for v in losses)
                    + f"   {passed} of {len(losses)} pass"
                )
            print(f"  every validation seed passes from step: {first}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
