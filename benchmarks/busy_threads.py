"""Training speed at each thread setting, on a quiet machine and with other work running.

Run from the repository root:  python benchmarks/busy_threads.py [--rounds 3]

Each setting trains the same small models (the chapter-1 encoder for 100 steps, the chapter-5
translation model for 10 steps) in a fresh Python process, since OpenMP reads its settings
once, when torch loads. "busy" runs the same while the benchmark keeps every core busy with
other work (one single-threaded matrix-multiply loop per core, the way a second notebook or
a test run loads a shared machine). The settings:

* ``1 thread``: ``torch.set_num_threads(1)``;
* ``all threads, spinning``: torch's default (one thread per core) with OpenMP's default wait
  policy, under which an idle thread spins for a while before it sleeps;
* ``all threads, passive``: the same with ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep);
* ``runtime``: what ``multihead.core.runtime`` sets when the package is imported (one thread
  for the course's small models, whatever the load);
* ``runtime, large``: the training run inside ``runtime.threads("large")``, the count a big
  model (a 135M-parameter decoder) would get: every core.

Prints seconds per run (median of ``--rounds``) and each setting's ratio to one thread on the
same machine state. Nothing is asserted: speed depends on the machine and what else runs, and
on a shared machine the "quiet" rows are only as quiet as the other users left it (the script
prints the load average before each state). Run it with nothing else running for numbers to
keep. ``PYTHONPATH`` chooses which checkout's runtime is measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import os, sys, time
if os.environ.get("BENCH_THREADS") == "1":
    import torch
    torch.set_num_threads(1)
import contextlib
import torch
from multihead.core import runtime  # the runtime's setting, made when it is imported
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import EncoderDecoder, EncoderModel
from multihead.core.train import train
from multihead.tasks.corpus import make_corpus
from multihead.tasks.synthetic import LookupTask
from multihead.tasks.translation import encode, sampler, seq2seq_loss

which = sys.argv[1]
if which == "encoder":
    task = LookupTask(vocab_size=8, seq_len=12, offsets=(1, 3))
    cfg = ModelConfig(vocab_size=8, n_classes=64, d_model=32, n_heads=4, n_layers=1, max_len=12)
    torch.manual_seed(0)
    model, sample, loss, steps = EncoderModel(cfg), task.sample, None, 100
else:
    corpus = make_corpus(1000, seed=0)
    cfg = ModelConfig(vocab_size=len(corpus.src_vocab), n_classes=len(corpus.tgt_vocab), d_model=64,
                      n_heads=4, n_layers=3, n_decoder_layers=3, d_ff=128, max_len=32)
    torch.manual_seed(0)
    model, sample = EncoderDecoder(cfg), sampler(encode(corpus, corpus.train))
    loss, steps = seq2seq_loss, 10
kw = {} if loss is None else {"loss_fn": loss}
kind = os.environ.get("BENCH_KIND")
with runtime.threads(kind) if kind else contextlib.nullcontext():
    train(model, sample, TrainConfig(steps=2, batch_size=64), progress=False, **kw)  # warm-up
    start = time.perf_counter()
    train(model, sample, TrainConfig(steps=steps, batch_size=64), progress=False, **kw)
    print(time.perf_counter() - start, torch.get_num_threads())
"""

LOAD = r"""
import time, numpy as np
a = np.random.rand(300, 300)
end = time.time() + float(__import__("sys").argv[1])
while time.time() < end:
    a = (a @ a) / 300.0
"""

SETTINGS = {
    "1 thread": {"BENCH_THREADS": "1"},
    "all threads, spinning": {"MULTIHEAD_THREADS": "all"},
    "all threads, passive": {"MULTIHEAD_THREADS": "all", "OMP_WAIT_POLICY": "PASSIVE"},
    "runtime": {},
    "runtime, large": {"BENCH_KIND": "large"},
}


def _package_folder() -> str:
    code = "import multihead, os; print(os.path.dirname(multihead.__file__))"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def run(which: str, env_extra: dict[str, str]) -> tuple[float, int]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "MULTIHEAD_THREADS")
    }
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, which], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), int(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"{cores} cores; seconds per run, median of {args.rounds}; ratio to 1 thread")
    print(f"measuring multihead from {_package_folder()}")
    for state in ("quiet", "busy"):
        load = []
        if state == "busy":
            env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
            load = [
                subprocess.Popen([sys.executable, "-c", LOAD, "3600"], env=env)
                for _ in range(cores)
            ]
            time.sleep(2)
        if hasattr(os, "getloadavg"):
            print(f"\n{state}: load average {os.getloadavg()[0]:.2f} on {cores} cores")
        try:
            for which in ("encoder", "translation"):
                times = {name: [] for name in SETTINGS}
                threads = {}
                for _ in range(args.rounds):
                    for name, extra in SETTINGS.items():
                        t, n = run(which, extra)
                        times[name].append(t)
                        threads[name] = n
                one = statistics.median(times["1 thread"])
                print(f"\n{state}, {which}")
                for name in SETTINGS:
                    t = statistics.median(times[name])
                    print(f"  {name:24s} {threads[name]} thread(s) {t:7.2f} s  {t / one:5.2f}x")
        finally:
            for p in load:
                p.kill()


if __name__ == "__main__":
    main()
