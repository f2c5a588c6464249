"""Fast/full mode, device choice, seeding and CPU threads.

Every notebook runs in one of two modes. Readers get *full* mode (the sizes the book
reports); the test-suite sets ``MULTIHEAD_FAST=1`` and gets *fast* mode (small sizes,
same qualitative conclusion). ``pick(full=..., fast=...)`` is the only switch a
notebook needs.

Threads depend on the machine alone, never on its load or on a timing, so that the same
seeds give the same numbers however busy the machine is (another thread count sums matrix
products in another order, and a trained model ends elsewhere). The course's models are
small: on one thread they train at least as fast as on two, and many times faster when
other work holds the cores (each thread that waits for a descheduled one loses a time
slice). So torch runs one thread from the moment this module is imported. A workload of
another kind asks for its own count by name, ``with threads("large"):`` (every core, for a
model like a 135M-parameter decoder whose products are big enough to share), and gets the
same count on every run on that machine. ``MULTIHEAD_THREADS`` (a number, or ``all``)
decides for every kind instead; where only ``OMP_NUM_THREADS`` is set, torch's reading of it
is kept.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import torch

from multihead._checks import check_choice, check_int, check_positive_int

T = TypeVar("T")

FAST_ENV = "MULTIHEAD_FAST"
SEED_ENV = "MULTIHEAD_SEED_OFFSET"
THREADS_ENV = "MULTIHEAD_THREADS"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def is_fast() -> bool:
    """Return True when ``MULTIHEAD_FAST`` asks for fast mode.

    Shapes: none (reads the environment).
    """
    value = os.environ.get(FAST_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"{FAST_ENV}={value!r} is not understood; use 1 (fast mode) or 0 / unset (full mode)"
    )


def mode() -> str:
    """The current mode as a word, ``"fast"`` or ``"full"``, for printing in notebooks.

    Shapes: none.
    """
    return "fast" if is_fast() else "full"


def pick(*, full: T, fast: T) -> T:
    """Choose a value by mode: ``full`` for readers, ``fast`` for the test-suite.

    Shapes: none (any values).
    """
    return fast if is_fast() else full


def device(prefer: str | None = None) -> torch.device:
    """The device to train on: CUDA if present, else Apple MPS, else the CPU.

    ``prefer`` forces one (``"cpu"``, ``"cuda"``, ``"mps"``). The environment variable
    ``MULTIHEAD_DEVICE`` does the same without editing a notebook.

    Shapes: none.
    """
    choice = prefer if prefer is not None else os.environ.get("MULTIHEAD_DEVICE")
    if choice is not None:
        check_choice("prefer", choice, ("cpu", "cuda", "mps"))
        if choice == "cuda" and not torch.cuda.is_available():
            raise ValueError("prefer='cuda' but no CUDA device is available")
        if choice == "mps" and not torch.backends.mps.is_available():
            raise ValueError("prefer='mps' but no MPS device is available")
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_offset() -> int:
    """The shift ``MULTIHEAD_SEED_OFFSET`` gives every replicate seed (0 when unset).

    Shapes: none (reads the environment).
    """
    value = os.environ.get(SEED_ENV, "").strip()
    if not value:
        return 0
    try:
        offset = int(value)
    except ValueError:
        raise ValueError(f"{SEED_ENV}={value!r} must be a non-negative integer") from None
    if offset < 0:
        raise ValueError(f"{SEED_ENV}={offset} must be a non-negative integer")
    return offset


def seeds(*, full: int = 5, fast: int = 3) -> list[int]:
    """The replicate seeds a verdict rests on: ``full`` of them in full mode, ``fast`` in
    fast mode, ``0, 1, ...`` shifted by ``MULTIHEAD_SEED_OFFSET``.

    The offset re-checks a notebook's conclusions on seeds nobody picked:
    ``MULTIHEAD_SEED_OFFSET=100`` trains seeds 100, 101, ... instead.

    Shapes: none.
    """
    for name, n in (("full", full), ("fast", fast)):
        check_positive_int(name, n)  # a number of seeds
    offset = seed_offset()
    return [offset + k for k in range(pick(full=full, fast=fast))]


def data_seed(base: int) -> int:
    """The seed of a notebook's test data for this seed set: ``base`` itself at the book's
    seeds (no offset), and at any other ``MULTIHEAD_SEED_OFFSET`` a seed drawn from ``base``
    and the offset, so that each seed set is scored on test data of its own, as a new run
    would be. Where a notebook fixed its test set with ``manual_seed(10_000)`` it writes
    ``manual_seed(data_seed(10_000))``.

    Shapes: none.
    """
    check_int("base", base, 0)
    offset = seed_offset()
    if offset == 0:
        return base
    digest = hashlib.sha256(f"test data {base} at offset {offset}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 2**31


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a CPU ``torch.Generator`` seeded the same way.

    Results are then deterministic on the CPU (GPU kernels may still differ in the last
    bits between runs).

    Shapes: none.
    """
    check_int("seed", seed, 0)
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 (seeds legacy global users too)
    torch.manual_seed(seed)
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


_DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice: OMP_NUM_THREADS, else cores

# What each kind of workload runs on, as a function of torch's default (the core count, or
# OMP_NUM_THREADS where set): the course's small models on one thread, large ones on all.
WORKLOADS = {"small": lambda cores: 1, "large": lambda cores: cores}


def thread_count(kind: str = "small") -> int:
    """The number of CPU threads for a workload of ``kind`` on this machine.

    ``"small"``: the course's models (widths up to a few hundred), one thread. ``"large"``:
    models whose matrix products are big enough to share between cores (a 135M-parameter
    decoder), torch's default, one per core. ``MULTIHEAD_THREADS`` (a positive int, or
    ``all`` for torch's default) overrides both; where ``OMP_NUM_THREADS`` is set (and
    ``MULTIHEAD_THREADS`` is not), every kind keeps torch's reading of it. The answer
    depends on these settings and the core count only: never on the load or a timing.

    Shapes: none.
    """
    check_choice("kind", kind, tuple(WORKLOADS))
    value = os.environ.get(THREADS_ENV, "").strip().lower()
    if value:
        if value == "all":
            return _DEFAULT_THREADS
        if value.isdigit() and int(value) > 0:
            return int(value)
        raise ValueError(f"{THREADS_ENV}={value!r} must be a positive integer or 'all'")
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return _DEFAULT_THREADS
    return WORKLOADS[kind](_DEFAULT_THREADS)


def choose_threads(kind: str = "small") -> int:
    """Set torch's number of CPU threads to ``thread_count(kind)`` and return it. Called with
    ``"small"`` when this module is imported.

    Shapes: none.
    """
    count = thread_count(kind)
    torch.set_num_threads(count)
    return count


@contextmanager
def threads(kind: str) -> Iterator[int]:
    """Run the block with ``thread_count(kind)`` CPU threads, then restore the count before.

    ``with threads("large"): logits = model(tokens)`` runs a big model on every core, and
    the course's small models after it on one thread again.

    Shapes: none.
    """
    before = torch.get_num_threads()
    count = choose_threads(kind)
    try:
        yield count
    finally:
        torch.set_num_threads(before)


def worker_count() -> int:
    """The number of processes that train independent models side by side on this machine:
    one per core this process may use. It depends on the machine alone, never on its load.

    Shapes: none.
    """
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _start_worker(count: int) -> None:
    torch.set_num_threads(count)


def side_by_side(
    fn: Callable[..., T], jobs: Sequence[Mapping[str, Any]], *, workers: int | None = None
) -> list[T]:
    """``[fn(**job) for job in jobs]``, computed in ``workers`` processes at once (default
    ``worker_count()``), each on the thread count of this one, and returned in the order of
    ``jobs``. A job seeds what it draws (every training function of the course does), so each
    result is bitwise the one computed here, one after another; only the time differs. With
    one worker or one job, or off the CPU, the jobs run here in turn. ``fn`` and the jobs'
    values must be picklable: a function of the package, models, data, configs.

    Shapes: none (any results, one per job).
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function of the package, got {type(fn).__name__}")
    if isinstance(jobs, Mapping) or not isinstance(jobs, Sequence):
        raise TypeError("jobs must be a list of dicts of keyword arguments, one per call")
    for k, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise TypeError(f"jobs[{k}] must be a dict of keyword arguments for fn")
    workers = worker_count() if workers is None else check_positive_int("workers", workers)
    if workers == 1 or len(jobs) < 2 or device().type != "cpu":
        return [fn(**job) for job in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    spawn = multiprocessing.get_context("spawn")  # a clean interpreter on every platform
    with ProcessPoolExecutor(
        min(workers, len(jobs)),
        mp_context=spawn,
        initializer=_start_worker,
        initargs=(torch.get_num_threads(),),
    ) as pool:
        futures = [pool.submit(fn, **job) for job in jobs]
        return [f.result() for f in futures]


choose_threads()
