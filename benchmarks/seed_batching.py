"""Training time of 1 seed, of 5 seeds as one batched model, and of 5 seeds one after another.

Run from the repository root:  python benchmarks/seed_batching.py [--steps 30] [--profile]

For each model size the chapters train (the chapter-1/3 encoder, the chapter-6 tagger, the
chapter-5 translation model), the three variants train from the same start on the same
batches; each is run ``--rounds`` times, interleaved, and the median time per training step
is printed with the ratios to one seed side by side. The goal is 5 seeds in at most twice
the time of one. ``--profile`` prints the operators the batched run spends its time in.
Nothing here is asserted: speed depends on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch

from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.ensemble import stack_seeds
from multihead.core.ensemble_train import seed_token_loss, train_seeds
from multihead.core.model import EncoderDecoder, EncoderModel
from multihead.core.train import token_loss, train
from multihead.tasks.corpus import make_corpus
from multihead.tasks.synthetic import LookupTask
from multihead.tasks.tagging import (
    TAGGING_PAD,
    tagger_config,
    tagging_data,
    tagging_loss,
    tagging_sampler,
    tagging_seed_loss,
)
from multihead.tasks.translation import (
    SEQ2SEQ_PAD,
    encode,
    sampler,
    seq2seq_loss,
    seq2seq_seed_loss,
)

SEEDS = (0, 1, 2, 3, 4)


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
            make=lambda s: EncoderModel(encoder), sample=lookup.sample, batch=64,
            loss=token_loss, seed_loss=seed_token_loss, pad=None,
        ),
        "ch6 tagger d=64, 6x4 heads, batch 32": dict(
            make=lambda s: EncoderModel(tagger), batch=32,
            sample=tagging_sampler(tagging_data(corpus, corpus.train)),
            loss=tagging_loss, seed_loss=tagging_seed_loss, pad=TAGGING_PAD,
        ),
        "ch5 translation d=64, 3+3x4 heads, batch 64": dict(
            make=lambda s: EncoderDecoder(seq2seq), batch=64,
            sample=sampler(encode(corpus, corpus.train)),
            loss=seq2seq_loss, seed_loss=seq2seq_seed_loss, pad=SEQ2SEQ_PAD,
        ),
    }  # fmt: skip


def variants(setup: dict, cfg: TrainConfig, device: torch.device) -> dict:
    """The three ways to train, each a function of no argument that trains from scratch."""

    def alone(seed: int) -> None:
        torch.manual_seed(seed)
        model = setup["make"](seed)
        train(model, setup["sample"], replace(cfg, seed=seed), loss_fn=setup["loss"],
              device=device, progress=False)  # fmt: skip

    def batched() -> None:
        ensemble = stack_seeds(setup["make"], SEEDS)
        train_seeds(ensemble, setup["sample"], cfg, loss_fn=setup["seed_loss"],
                    pad=setup["pad"], device=device)  # fmt: skip

    return {
        "1 seed": lambda: alone(0),
        "5 seeds batched": batched,
        "5 seeds one by one": lambda: [alone(s) for s in SEEDS],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30, help="training steps per run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs per variant")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--profile", action="store_true", help="top operators, batched run")
    parser.add_argument("--only", default="", help="run the sizes whose name contains this")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {device}, "
          f"{args.steps} steps, median of {args.rounds} interleaved runs")  # fmt: skip
    for name, setup in setups().items():
        if args.only not in name:
            continue
        cfg = TrainConfig(steps=args.steps, batch_size=setup["batch"], lr=3e-3, warmup=10)
        fns = variants(setup, cfg, device)
        for fn in variants(setup, replace(cfg, steps=2), device).values():
            fn()  # warm-up: first calls import and allocate
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.rounds):
            for key, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[key].append((time.perf_counter() - start) / args.steps * 1e3)
        ms = {k: statistics.median(v) for k, v in times.items()}
        one = ms["1 seed"]
        print(f"\n{name}")
        print(f"  {'variant':20s} {'ms/step':>9s} {'x one seed':>11s}")
        for key, value in ms.items():
            print(f"  {key:20s} {value:9.1f} {value / one:11.2f}")
        if args.profile:
            from torch.profiler import profile

            with profile() as prof:
                fns["5 seeds batched"]()
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
