"""Training time of 1 seed and of 5 seeds, one after another or in a pool of 2 processes.

Run from the repository root:  python benchmarks/seed_batching.py [--steps 30] [--rounds 3]

Seeds train one after another with the one training loop (``core.train.train_seeds``). What
is left to choose is how to spend the cores, and this measures it for each model size the
chapters train (the chapter-1/3 encoder, the chapter-6 tagger, the chapter-5 translation
model): 1 seed and 5 seeds one by one (``train_seeds``) at the default number of torch threads,
and the same 5 seeds in a pool of 2 worker processes at one thread each (a spawn
``ProcessPoolExecutor`` started once; its start-up and a warm-up run in every worker are not
timed). Each variant runs ``--rounds`` times, interleaved, and the median time per training
step (all the variant's seeds together) is printed with the ratios to one seed side by side.

A batched engine, the seeds stacked into one model, was measured here before, on 2 quiet
cores (``benchmarks/results/seed_batching.json``): 1.35-1.66x faster than the loop, and under
1.5x at the translation size, which takes most of the notebooks' training time. It was then
removed. Nothing here is asserted: speed depends on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import torch
from multihead.tools.timing import median_times

from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import EncoderDecoder, EncoderModel
from multihead.core.train import token_loss, train_seeds
from multihead.tasks.corpus import make_corpus
from multihead.tasks.synthetic import LookupTask
from multihead.tasks.tagging import tagger_config, tagging_data, tagging_loss, tagging_sampler
from multihead.tasks.translation import encode, sampler, seq2seq_loss

SEEDS = (0, 1, 2, 3, 4)
WORKERS = 2


def setups() -> dict[str, dict]:
    """name -> how to build, feed and score one model of that size."""
    lookup = LookupTask(vocab_size=8, seq_len=12, offsets=(1, 3))
    encoder = ModelConfig(vocab_size=8, n_classes=64, d_model=32, n_heads=4, n_layers=1, max_len=12)
    corpus = make_corpus(2000, seed=0)
    tagger = tagger_config(corpus, d_model=64, n_heads=4, n_layers=6, d_ff=128)
    seq2seq = ModelConfig(
        vocab_size=len(corpus.src_vocab), n_classes=len(corpus.tgt_vocab), d_model=64,
        n_heads=4, n_layers=3, n_decoder_layers=3, d_ff=128, max_len=32,
    )  # fmt: skip
    return {
        "ch1/3 encoder d=32, 1x4 heads, batch 64": dict(
            make=lambda s: EncoderModel(encoder), sample=lookup.sample, batch=64, loss=token_loss,
        ),
        "ch6 tagger d=64, 6x4 heads, batch 32": dict(
            make=lambda s: EncoderModel(tagger), batch=32,
            sample=tagging_sampler(tagging_data(corpus, corpus.train)), loss=tagging_loss,
        ),
        "ch5 translation d=64, 3+3x4 heads, batch 64": dict(
            make=lambda s: EncoderDecoder(seq2seq), batch=64,
            sample=sampler(encode(corpus, corpus.train)), loss=seq2seq_loss,
        ),
    }  # fmt: skip


def config(setup: dict, steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=setup["batch"], lr=3e-3, warmup=10)


def train_on_cpu(setup: dict, seeds: tuple[int, ...], steps: int) -> float:
    """Train ``seeds`` one after another from scratch; the last seed's final loss."""
    _, histories = train_seeds(seeds, setup["make"], setup["sample"], config(setup, steps),
                               loss_fn=setup["loss"], device=torch.device("cpu"))  # fmt: skip
    return histories[-1].loss[-1]


# In a worker process (spawned: it imports this file afresh): one thread, its own setups.
_WORKER_SETUPS: dict[str, dict] = {}


def _start_worker() -> None:
    torch.set_num_threads(1)
    _WORKER_SETUPS.update(setups())


def _train_in_worker(name: str, seed: int, steps: int) -> float:
    return train_on_cpu(_WORKER_SETUPS[name], (seed,), steps)


def _warm_worker(steps: int) -> int:
    for name in _WORKER_SETUPS:
        _train_in_worker(name, 0, steps)  # first calls import and allocate
    return os.getpid()


def start_pool() -> ProcessPoolExecutor:
    """A pool of ``WORKERS`` one-thread processes, every one of them started and warm."""
    pool = ProcessPoolExecutor(
        WORKERS, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker
    )
    warm: set[int] = set()
    for _ in range(20):  # a worker that has run a task is warm; ask until every one has
        warm |= {f.result() for f in [pool.submit(_warm_worker, 2) for _ in range(WORKERS)]}
        if len(warm) == WORKERS:
            return pool
    pool.shutdown()
    raise RuntimeError(f"only {len(warm)} of {WORKERS} workers took a warm-up task")


def variants(name: str, setup: dict, steps: int, pool: ProcessPoolExecutor) -> dict:
    """The three ways to train, each a function of no argument that trains from scratch."""

    def pooled() -> None:
        list(pool.map(_train_in_worker, [name] * len(SEEDS), SEEDS, [steps] * len(SEEDS)))

    return {
        "1 seed": lambda: train_on_cpu(setup, SEEDS[:1], steps),
        "5 seeds one by one": lambda: train_on_cpu(setup, SEEDS, steps),
        f"5 seeds, {WORKERS} processes x 1 thread": pooled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30, help="training steps per run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs per variant")
    parser.add_argument("--only", default="", help="run the sizes whose name contains this")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s) in this process, "
          f"{WORKERS} worker processes x 1 thread, {args.steps} steps, median of {args.rounds} "
          "interleaved runs")  # fmt: skip
    chosen = {name: s for name, s in setups().items() if args.only in name}
    pool = start_pool()
    try:
        for name, setup in chosen.items():
            for fn in variants(name, setup, 2, pool).values():
                fn()  # warm-up: first calls import and allocate
            fns = variants(name, setup, args.steps, pool)
            seconds = median_times(fns, rounds=args.rounds, number=1, warmup=0, grad=True)
            ms = {key: value / args.steps * 1e3 for key, value in seconds.items()}
            one = ms["1 seed"]
            print(f"\n{name}")
            print(f"  {'variant':32s} {'ms/step':>9s} {'x one seed':>11s}")
            for key, value in ms.items():
                print(f"  {key:32s} {value:9.1f} {value / one:11.2f}")
    finally:
        pool.shutdown()


if __name__ == "__main__":
    main()
