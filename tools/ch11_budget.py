"""Chapter 11's training budget, chosen on validation seeds for the baselines' competence only.

Notebook 11 trains attention-only decoders on repeated random segments. Each of its
experiments needs a baseline that has learned the task before any claim is judged: a
two-layer model (learned, rotary or sinusoidal positions) *reads the earlier copy* when its
loss on the second copy of held-out sequences, at the training length, is at most 1 nat
(chance is ln 32 = 3.47 nats; knowing only that the answer is one of the segment's tokens,
without finding which, costs about ln 6 = 1.8 nats even on the shortest segments). This
script trains every two-layer arm on validation seeds (900 and on, which no verdict uses),
scores them on a validation split (sequences no notebook cell draws), and prints, per
learning rate and number of steps, how many seeds pass. It looks at nothing else: no
one-layer control, no patching, ablation or longer sequences. The warm-up is linear and the
rate then constant, so the model after ``s`` steps of a longer run is the model a run of
``s`` steps ends with: one run per seed and rate gives every budget::

    python -m tools.ch11_budget                      # the grid the notebook records
    python -m tools.ch11_budget --steps 1000 3000 --lrs 3e-3 --seeds 900 901
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F

from multihead.core.config import TrainConfig
from multihead.core.decoder import Decoder
from multihead.core.train import IGNORE, train_seeds
from multihead.tasks.repeats import RepeatTask

THRESHOLD = 1.0  # nats of second-copy loss: the model reads the earlier copy
ARMS = ("learned", "rotary", "sinusoidal")
VALIDATION_DATA = 90_000  # the validation split's generator seed (no notebook cell uses it)


def second_copy_loss(model: torch.nn.Module, task: RepeatTask, data: tuple) -> float:
    """Mean loss on the second copy's targets of ``data`` (from ``task.sample_layout``)."""
    x, y, lengths, starts = data
    with torch.no_grad():
        logits = model.eval()(x)
    ce = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
    _, second = task.copy_masks(lengths, starts)
    return float(((ce * second).sum(1) / second.sum(1)).mean())


def sweep(steps: list[int], lrs: list[float], seeds: list[int]) -> dict:
    """``{(arm, lr, steps): [second-copy loss per seed]}`` on the validation split."""
    task = RepeatTask(vocab_size=32, segment=12, min_segment=6)
    data = task.sample_layout(400, torch.Generator().manual_seed(VALIDATION_DATA))
    n = task.seq_len
    out: dict = {}
    for lr in lrs:
        config = TrainConfig(
            steps=max(steps), batch_size=32, lr=lr, warmup=50, eval_every=math.gcd(*steps)
        )
        for arm in ARMS:

            def make(seed: int, arm: str = arm) -> Decoder:
                return Decoder(32, 2 * n, 64, 2, 4, positions=arm, mlp=False, norm=False)

            def evaluate(model: torch.nn.Module) -> dict:
                return {"second": second_copy_loss(model, task, data)}

            _, hists = train_seeds(seeds, make, task.sample, config, evaluate=evaluate)
            for s in steps:
                out[arm, lr, s] = [
                    next(e["second"] for e in h.evals if e["step"] == s) for h in hists
                ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 1500, 2000, 3000])
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 3e-3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[900, 901, 902, 903, 904])
    args = parser.parse_args()
    t0 = time.process_time()
    table = sweep(sorted(args.steps), args.lrs, args.seeds)
    print(f"second-copy loss at the training length; passes at most {THRESHOLD} nat")
    print("| lr | steps | " + " | ".join(ARMS) + " |")
    print("|---|---|" + "---|" * len(ARMS))
    for lr in args.lrs:
        for s in sorted(args.steps):
            cells = []
            for arm in ARMS:
                v = table[arm, lr, s]
                ok = sum(x <= THRESHOLD for x in v)
                cells.append(f"{ok} of {len(v)} (worst {max(v):.2f})")
            print(f"| {lr:g} | {s} | " + " | ".join(cells) + " |")
    print(f"CPU time {time.process_time() - t0:.0f} s")


if __name__ == "__main__":
    main()
