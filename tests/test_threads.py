"""The same seeds give bitwise the same trained numbers on a quiet and on a busy machine.

``multihead.core.runtime`` sets torch's thread count from the machine alone. Here the same
small training runs with the machine quiet and again while one matrix-multiply loop per
core keeps it busy, in this process (setting the threads again under the load, as a kernel
that starts then would) and in a fresh process started in each state, with the runtime's
own choice (the test runner's ``OMP_NUM_THREADS`` removed). The fresh processes import torch
and take a first optimiser step beforehand, so that the busy one spends the load importing
the package and training, not starting torch. The busy state also reports the load average
such load leaves after a minute (its loops last seconds), so a runtime that read the load
would see it. Every run must give the same bits. The training is big enough that another
thread count gives other bits, which the test checks too: else it could not fail. It takes
seconds on a quiet machine and more on a busy one, and keeps every core busy for a few of
them, so it is in the slow tier.
"""

import os
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest
import torch

from multihead.core import runtime

# A training whose reductions are large enough to be split between threads (batch 64 x 32
# positions x width 64), so that the thread count shows in the last bits of its parameters.
WORKLOAD = """
import torch
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import EncoderModel
from multihead.core.train import train
from multihead.tasks.synthetic import LookupTask


def trained():
    task = LookupTask(vocab_size=16, seq_len=32, offsets=(1, 3))
    cfg = ModelConfig(vocab_size=16, n_classes=256, d_model=64, n_heads=4, n_layers=1,
                      max_len=32)
    torch.manual_seed(0)
    model = EncoderModel(cfg)
    history = train(model, task.sample, TrainConfig(steps=3, batch_size=64), progress=False)
    total = sum(p.double().sum() for p in model.parameters()).item()
    return f"{history.loss[-1].hex()} {total.hex()} {torch.get_num_threads()}"
"""

# torch's first import and first optimiser step, which take seconds on a busy machine
WARM_UP = """
import sys
import torch
layer = torch.nn.Linear(8, 8)
torch.nn.functional.cross_entropy(layer(torch.randn(4, 8)), torch.arange(4)).backward()
torch.optim.AdamW(layer.parameters()).step()
"""

LOAD = """
import time
import numpy as np
a = np.random.default_rng(0).random((300, 300))
end = time.time() + 120  # a bound, in case the test cannot stop it
while time.time() < end:
    a = (a @ a) / 300.0
"""

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MULTIHEAD_THREADS")


def _env() -> dict[str, str]:
    """This process's environment without any thread setting: the runtime decides."""
    return {k: v for k, v in os.environ.items() if k not in THREAD_VARS}


# What the load average reads after a minute of such load: the busy loops of this test last
# seconds, too short to move it, so the busy state reports it as well (a runtime that read the
# load would see a busy machine).
BUSY_LOADAVG = "import os\nos.getloadavg = lambda: (4.0 * (os.cpu_count() or 1),) * 3\n"


def _fresh_process(busy: bool = False) -> subprocess.Popen:
    """A new Python that has imported torch and run one optimiser step (the slow first calls)
    and waits: it imports the package, and with it the runtime's thread setting, and trains
    when ``_finish`` tells it to. ``busy``: it reads the load average of a busy machine."""
    code = WARM_UP + "print('ready', flush=True)\nsys.stdin.readline()\n"
    code += BUSY_LOADAVG if busy else ""
    code += WORKLOAD + "\nprint(trained())\n"
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready", process.stderr.read()[-2000:]
    return process


def _finish(process: subprocess.Popen) -> str:
    out, err = process.communicate("go\n", timeout=300)
    assert process.returncode == 0, err[-2000:]
    return out.strip()


@contextmanager
def _busy(monkeypatch):
    """One single-threaded matrix-multiply loop per core, as another notebook or test run
    would load a shared machine."""
    env = {**_env(), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    load = [
        subprocess.Popen([sys.executable, "-c", LOAD], env=env) for _ in range(os.cpu_count() or 1)
    ]
    try:
        time.sleep(1.0)  # the loops are running
        monkeypatch.setattr(os, "getloadavg", lambda: (4.0 * (os.cpu_count() or 1),) * 3)
        yield
    finally:
        for p in load:
            p.kill()
        for p in load:
            p.wait()


@pytest.fixture
def own_choice(monkeypatch):
    """The runtime's own thread choice, whatever the test runner set; restored afterwards."""
    for var in THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.slow  # it loads every core on purpose, which slows whatever runs beside it
def test_same_seeds_give_the_same_bits_quiet_and_busy(own_choice, monkeypatch):
    namespace = {}
    exec(WORKLOAD, namespace)  # noqa: S102 - the same code the fresh processes run
    trained = namespace["trained"]
    quiet_process, busy_process = _fresh_process(), _fresh_process(busy=True)
    runtime.choose_threads()
    quiet = trained()
    quiet_fresh = _finish(quiet_process)
    with _busy(monkeypatch):
        runtime.choose_threads()  # chosen again while the machine is busy
        busy = trained()
        busy_fresh = _finish(busy_process)  # imports the package while the machine is busy
    assert busy == quiet, "in one process"
    assert quiet_fresh == busy_fresh, "in fresh processes, one quiet and one busy"
    assert quiet_fresh == quiet, "in this process and in a fresh one"
    # the test can fail: the same training on another number of threads ends in other bits
    threads = torch.get_num_threads()
    torch.set_num_threads(2 if threads == 1 else 1)
    assert trained().split()[1] != quiet.split()[1]
