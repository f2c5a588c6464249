"""Tune notebook 8's testbed on validation seeds, before any verdict is computed.

Notebook 8 compares DropHead with the regularisers it would replace. Its budget and every
rate are chosen here, on seeds no verdict uses (900, 901, 902) and on the validation split
of a corpus drawn for them alone: never on a test split, never by a treatment's effect.

1. ``--curves``: every arm whose training does not depend on the budget (no regulariser,
   dropout, attention dropout, constant DropHead; the learning rate is constant after its
   warm-up) is trained for ``--steps`` steps, with its validation loss and token accuracy
   every ``EVERY`` steps.
2. ``--budget``: from those curves, the budget is the first evaluation at which the best
   control (the dropout or attention-dropout arm with the best validation accuracy at the
   end) has come within ``TOLERANCE`` nats of the lowest validation loss it reaches: where
   the control's validation loss stops improving.
3. ``--v``: the V schedule's shape depends on the budget, so its arms are trained at the
   budget, instead of dropout and on top of the dropout rate picked.
4. ``--rates``: at the budget, every family picks its rate from the same grid of four by
   validation token accuracy (the controls and constant DropHead read off their curves).

::

    python -m tools.drophead_tuning --curves --steps 800 --only plain dropout --out a.json
    python -m tools.drophead_tuning --curves --steps 800 --only attention DropHead --out b.json
    python -m tools.drophead_tuning --budget a.json b.json          # prints the budget, S
    python -m tools.drophead_tuning --v instead --steps S --out c.json
    python -m tools.drophead_tuning --v "on top" --dropout D --steps S --out d.json
    python -m tools.drophead_tuning --rates a.json b.json c.json d.json

The testbed (corpus sizes, model, batch, learning rate) is notebook 8's ``§2``: keep the two in
step. The notebook shows what this printed in a folded block and trains only what it picked.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from multihead.core.model import EncoderDecoder
from multihead.core.train import train_seeds
from multihead.interventions.drophead import drophead_schedule
from multihead.tasks.corpus import make_corpus
from multihead.tasks.translation import (
    default_configs,
    encode,
    sampler,
    seq2seq_loss,
    teacher_forced,
)

SEEDS = (900, 901, 902)  # validation seeds: no verdict uses them
DATA_SEED = 900  # the corpus drawn for them, not a draw any verdict uses
N_TRAIN, N_VALID, N_TEST = 640, 400, 1000
GRID = (0.1, 0.2, 0.3, 0.4)  # every family's rates, the same four
BATCH, LR, WARMUP = 64, 5e-3, 50
EVERY = 100
TOLERANCE = 0.03  # nats of validation loss: "stopped improving"

Arm = tuple[dict, tuple[float, str] | None]  # model config changes, DropHead (rate, schedule)


def testbed(steps: int):
    """Notebook 8's corpus and configs at ``steps`` training steps (the validation draw)."""
    n_all = N_TRAIN + N_VALID + N_TEST
    fractions = ((N_TRAIN + 0.5) / n_all, (N_VALID + 0.5) / n_all, (N_TEST - 1) / n_all)
    corpus = make_corpus(n_all, DATA_SEED, fractions=fractions)
    model_cfg, train_cfg = default_configs(corpus)
    model_cfg = replace(model_cfg, d_model=32, n_layers=2, n_decoder_layers=2, d_ff=64)
    train_cfg = replace(train_cfg, steps=steps, batch_size=BATCH, lr=LR, warmup=WARMUP)
    return corpus, model_cfg, train_cfg


def budget_free_arms() -> dict[str, Arm]:
    """The arms whose training does not depend on the number of steps."""
    arms: dict[str, Arm] = {"plain": ({}, None)}
    arms |= {f"dropout {r:g}": ({"dropout": r}, None) for r in GRID}
    arms |= {f"attention dropout {r:g}": ({"attn_dropout": r}, None) for r in GRID}
    arms |= {f"DropHead {r:g}": ({}, (r, "constant")) for r in GRID}
    return arms


def train_arm(steps: int, arm: Arm) -> list[dict]:
    """The validation curve of one arm, mean over the validation seeds: one
    ``{"step", "loss", "token_acc"}`` every ``EVERY`` steps and at the end."""
    changes, drophead = arm
    corpus, model_cfg, train_cfg = testbed(steps)
    model_cfg = replace(model_cfg, **changes)
    train_cfg = replace(train_cfg, eval_every=EVERY)
    data = {s: encode(corpus, corpus.split(s)) for s in ("train", "valid")}
    on_step = None
    if drophead is not None:
        p, schedule = drophead
        on_step = drophead_schedule(p, steps, schedule, turn=WARMUP)
    _, histories = train_seeds(
        list(SEEDS),
        lambda seed: EncoderDecoder(model_cfg),
        sampler(data["train"]),
        train_cfg,
        loss_fn=seq2seq_loss,
        evaluate=lambda m: teacher_forced(m, data["valid"]),
        on_step=on_step,
    )
    per_seed = [h.evals for h in histories]
    return [
        {
            "step": points[0]["step"],
            "loss": sum(p["loss"] for p in points) / len(points),
            "token_acc": sum(p["token_acc"] for p in points) / len(points),
        }
        for points in zip(*per_seed, strict=True)
    ]


def curves(arms: dict[str, Arm], steps: int, only: list[str]) -> dict[str, list[dict]]:
    """The validation curves of ``arms`` whose name starts with one of ``only`` (all of
    them when it is empty)."""
    out = {}
    for name, arm in arms.items():
        if only and not name.startswith(tuple(only)):
            continue
        start = time.process_time()
        out[name] = train_arm(steps, arm)
        best = min(out[name], key=lambda p: p["loss"])
        print(
            f"{name:>24}: lowest validation loss {best['loss']:.3f} at step {best['step']}; "
            f"at the end {out[name][-1]['loss']:.3f}, accuracy {out[name][-1]['token_acc']:.3f}"
            f" ({time.process_time() - start:.0f} CPU s for {len(SEEDS)} seeds)",
            flush=True,
        )
    return out


def at(curve: list[dict], step: int) -> dict:
    return next(p for p in curve if p["step"] == step)


def budget(found: dict[str, list[dict]]) -> int:
    """The step at which the best control's validation loss has come within ``TOLERANCE``
    of its lowest."""
    controls = [n for n in found if "dropout" in n]
    best = max(controls, key=lambda n: found[n][-1]["token_acc"])
    lowest = min(p["loss"] for p in found[best])
    step = next(p["step"] for p in found[best] if p["loss"] <= lowest + TOLERANCE)
    print(f"best control at the end: {best}; lowest validation loss {lowest:.3f}")
    for n in ["plain", *controls]:
        if n in found:
            print(f"{n:>24}: " + " ".join(f"{p['loss']:.2f}" for p in found[n]))
    print(f"budget: {step} steps (validation loss within {TOLERANCE} nats of its lowest)")
    return step


def v_arms(which: str, dropout: float | None) -> dict[str, Arm]:
    """The V-schedule arms, whose shape depends on the budget: ``"instead"`` of dropout, or
    ``"on top"`` of dropout at rate ``dropout``."""
    if which == "instead":
        return {f"DropHead V {r:g}": ({}, (r, "v")) for r in GRID}
    if dropout is None:
        raise ValueError("the V schedule on top of dropout needs --dropout, the rate picked")
    return {
        f"dropout {dropout:g} + DropHead V {r:g}": ({"dropout": dropout}, (r, "v")) for r in GRID
    }


def rates(found: dict[str, list[dict]], steps: int) -> dict:
    """Every family's validation token accuracy at ``steps`` and the rate it picks; the
    V-schedule arms must have been trained for exactly ``steps`` steps."""
    acc = {n: at(c, steps)["token_acc"] for n, c in found.items()}
    for name, curve in found.items():
        if "V" in name and curve[-1]["step"] != steps:
            raise ValueError(f"{name} was trained for {curve[-1]['step']} steps, not {steps}")
    families = {
        "dropout": [f"dropout {r:g}" for r in GRID],
        "attention dropout": [f"attention dropout {r:g}" for r in GRID],
        "DropHead": [f"DropHead {r:g}" for r in GRID],
        "DropHead V": list(v_arms("instead", None)),
    }
    picked = {f: max(arms, key=acc.__getitem__) for f, arms in families.items()}
    dropout = float(picked["dropout"].split()[-1])
    families["on top"] = list(v_arms("on top", dropout))
    picked["on top"] = max(families["on top"], key=acc.__getitem__)
    for family, arms in families.items():
        print(f"{family:>18}: " + ", ".join(f"{a} {acc[a]:.3f}" for a in arms))
    chosen = {f: float(a.split()[-1]) for f, a in picked.items()}
    print("picked:", chosen)
    return {"steps": steps, "validation accuracy": acc, "picked": chosen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--curves", action="store_true", help="the budget-free arms' curves")
    parser.add_argument("--v", choices=("instead", "on top"), help="the V arms, at --steps")
    parser.add_argument("--dropout", type=float, help="the dropout rate under --v 'on top'")
    parser.add_argument("--budget", nargs="+", type=Path, help="curves files: the budget")
    parser.add_argument("--rates", nargs="+", type=Path, help="curves files: every rate")
    parser.add_argument("--steps", type=int, help="training steps of --curves and --v")
    parser.add_argument("--only", nargs="*", default=[], help="arms starting with these")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out: dict = {}
    if (args.curves or args.v) and not args.steps:
        parser.error("--curves and --v need --steps")
    if args.curves:
        out = curves(budget_free_arms(), args.steps, args.only)
    if args.v:
        out = curves(v_arms(args.v, args.dropout), args.steps, args.only)
    for files in (args.budget, args.rates):
        if files:
            found = {k: v for f in files for k, v in json.loads(f.read_text()).items()}
            steps = budget({k: v for k, v in found.items() if "V" not in k})
    if args.rates:
        out = rates(found, steps)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
