"""Choose notebook 10's training budget from the MHA baseline's competence alone.

Notebook 10 compares attention layouts on multi-query associative recall
(``multihead.tasks.recall``) and converts trained MHA models to grouped-query attention.
Before any layout is compared, the MHA baseline must have learned the lookup: held-out loss
per sequence below ``SOLVED`` = 0.1 nats (a lookup solved exactly costs no loss). This
command trains the notebook's MHA decoder on **validation seeds** (900 and up, which no
verdict uses), scores it on a **validation split** (sequences drawn from generator seed
20_000; the notebook's test sequences come from 10_000 and its seed sets' own draws) every
``--every`` steps, and prints, per candidate budget (learning rate, batch, warm-up) and width
(``--d-model``, ``--d-head``; 8 heads of 2 layers), how many validation seeds pass at each
number of steps. No other layout is trained here: the budget is chosen on the baseline's
competence only, then given to every layout::

    python -m tools.tune_recall                       # the grid, 10 validation seeds
    python -m tools.tune_recall --lrs 3e-3 --batches 32 --warmups 50 --steps 3000
    python -m tools.tune_recall --candidates 3e-3:32:50 --d-model 64 --d-head 8 \
        --seeds $(seq 900 919) --steps 2500 --share 1   # every validation seed must pass

The rate is constant after its linear warm-up (``core.train``), so the model after ``k``
steps of a longer run is the model a ``k``-step run gives: one run per seed and candidate
scores every shorter budget too. Runs go side by side, one process per core, one torch
thread each.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SOLVED = 0.1  # nats, the notebook's threshold: fixed from the task
VALIDATION_DATA = 20_000  # generator seed of the validation split
SHARE = 0.9  # the share of validation seeds that must pass (the rule's competence share)
WIDTH = (64, 8)  # the notebook's d_model and d_head


def _run(job: tuple[float, int, int, int, int, int, int, int]) -> dict:
    """One validation seed of one candidate: its validation loss every ``every`` steps."""
    import torch
    import torch.nn.functional as F

    from multihead.core.config import TrainConfig
    from multihead.core.decoder import Decoder
    from multihead.core.train import IGNORE, train_seeds
    from multihead.tasks.recall import RecallTask

    lr, batch, warmup, steps, every, seed, d_model, d_head = job
    task = RecallTask(n_keys=16, n_values=16, n_pairs=6)
    val_x, val_y = task.sample(1000, torch.Generator().manual_seed(VALIDATION_DATA))

    def make(seed: int) -> torch.nn.Module:  # the notebook's MHA decoder
        return Decoder(task.vocab_size, task.seq_len, d_model, 2, 8, d_head=d_head,
                       d_ff=2 * d_model, n_kv_heads=8)  # fmt: skip

    @torch.no_grad()
    def evaluate(model: torch.nn.Module) -> dict:
        logits = model(val_x)  # (batch, seq, vocab)
        ce = F.cross_entropy(logits.transpose(1, 2), val_y, ignore_index=IGNORE, reduction="none")
        asked = val_y != IGNORE
        return {"loss": float(((ce * asked).sum(1) / asked.sum(1)).mean())}

    config = TrainConfig(steps=steps, batch_size=batch, lr=lr, warmup=warmup, eval_every=every)
    _, (history,) = train_seeds([seed], make, task.sample, config, evaluate=evaluate)
    return {"lr": lr, "batch": batch, "warmup": warmup, "seed": seed,
            "curve": [[e["step"], e["loss"]] for e in history.evals]}  # fmt: skip


def summarize(runs: list[dict]) -> list[dict]:
    """Per candidate and number of steps: how many validation seeds pass, and the cost in
    sequences trained (steps times batch)."""
    rows = []
    key = lambda r: (r["lr"], r["batch"], r["warmup"])  # noqa: E731
    for cand, group in itertools.groupby(sorted(runs, key=key), key=key):
        group = list(group)
        for i, (step, _) in enumerate(group[0]["curve"]):
            losses = [r["curve"][i][1] for r in group]
            passed = sum(x < SOLVED for x in losses)
            rows.append({"lr": cand[0], "batch": cand[1], "warmup": cand[2], "steps": step,
                         "passed": passed, "seeds": len(group), "sequences": step * cand[1],
                         "worst": max(losses)})  # fmt: skip
    return rows


def choose(rows: list[dict], stable: bool = False, share: float = SHARE) -> dict | None:
    """The cheapest budget (fewest sequences trained) at which at least ``share`` of the
    validation seeds pass; with ``stable``, every longer budget of the same candidate must
    pass too (a seed whose loss spikes above ``SOLVED`` at one evaluation then counts)."""
    ok = []
    for row in rows:
        same = [r for r in rows if (r["lr"], r["batch"], r["warmup"]) == (row["lr"],
                row["batch"], row["warmup"]) and r["steps"] >= row["steps"]]  # fmt: skip
        if all(r["passed"] >= share * r["seeds"] for r in (same if stable else [row])):
            ok.append(row)
    return min(ok, key=lambda r: (r["sequences"], r["steps"])) if ok else None


def table(rows: list[dict], marks: tuple[int, ...]) -> str:
    """Validation seeds passing at the budgets ``marks`` (steps), one line per candidate."""
    head = "| lr | batch | warm-up | " + " | ".join(f"{m} steps" for m in marks) + " |"
    lines = [head, "|---" * (3 + len(marks)) + "|"]
    key = lambda r: (r["lr"], r["batch"], r["warmup"])  # noqa: E731
    for cand, group in itertools.groupby(sorted(rows, key=key), key=key):
        at = {r["steps"]: r for r in group}
        cells = [f"{at[m]['passed']}/{at[m]['seeds']}" if m in at else "" for m in marks]
        lines.append(f"| {cand[0]:g} | {cand[1]} | {cand[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.tune_recall",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 3e-3])
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--warmups", type=int, nargs="+", default=[50])
    parser.add_argument(
        "--candidates",
        nargs="+",
        default=None,
        metavar="LR:BATCH:WARMUP",
        help="these candidates instead of the grid of --lrs, --batches, --warmups",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(900, 910)))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--d-model", type=int, default=WIDTH[0])
    parser.add_argument("--d-head", type=int, default=WIDTH[1])
    parser.add_argument(
        "--share",
        type=float,
        default=SHARE,
        help="the share of validation seeds that must pass (1: every seed)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write every curve as JSON")
    parser.add_argument("--load", type=Path, default=None, help="summarize curves of --out")
    args = parser.parse_args(argv)
    if min(args.seeds) < 900:
        parser.error("validation seeds start at 900: lower ones are the verdicts' seeds")
    grid = itertools.product(args.lrs, args.batches, args.warmups)
    if args.candidates:
        try:
            grid = [(float(lr), int(b), int(w)) for lr, b, w in
                    (c.split(":") for c in args.candidates)]  # fmt: skip
        except ValueError:
            parser.error("--candidates takes LR:BATCH:WARMUP, e.g. 3e-3:64:50")
    if not 0 < args.share <= 1:
        parser.error("--share must lie in (0, 1]")
    jobs = [(lr, b, w, args.steps, args.every, s, args.d_model, args.d_head) for (lr, b, w), s
            in itertools.product(grid, args.seeds)]  # fmt: skip
    runs = json.loads(args.load.read_text()) if args.load else []
    with ProcessPoolExecutor(args.workers) as pool:
        for run in pool.map(_run, [] if args.load else jobs):  # each curve kept as it comes
            runs.append(run)
            if args.out:
                args.out.write_text(json.dumps(runs) + "\n")
    rows = summarize(runs)
    marks = tuple(m for m in (500, 1000, 1500, 2000, 2100, 2500, 3000) if m <= args.steps)
    print(f"d_model {args.d_model}, d_head {args.d_head}; validation seeds passing (loss per "
          f"sequence below {SOLVED} nats):")  # fmt: skip
    print(table(rows, marks))
    for stable, what in ((False, "at it"), (True, "at it and at every longer one")):
        best = choose(rows, stable, args.share)
        if best is None:
            print(f"no candidate reaches {args.share:.0%} of the validation seeds: grow the budget")
            continue
        print(
            f"cheapest budget with at least {args.share:.0%} of the validation seeds passing "
            f"{what}: lr {best['lr']:g}, batch {best['batch']}, warm-up {best['warmup']}, "
            f"{best['steps']} steps ({best['passed']}/{best['seeds']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
