"""Fast/full mode, device choice and seeding.

Every notebook runs in one of two modes. Readers get *full* mode (the sizes the book
reports); the test-suite sets ``MULTIHEAD_FAST=1`` and gets *fast* mode (small sizes,
same qualitative conclusion). ``pick(full=..., fast=...)`` is the only switch a
notebook needs.

Threads: the course's models are small, and on a machine where other work runs, torch's
default of one thread per core can train them many times slower than one thread (the
threads wait for each other, and each wait for a descheduled thread costs a time slice).
When this module is imported, ``choose_threads`` times a few matrix products of the
chapters' sizes at one thread and at torch's default and reads the load average: all
threads on a quiet machine, one on a busy one. ``MULTIHEAD_THREADS`` (a number, or ``all``) or
``OMP_NUM_THREADS`` decide instead, without the timing.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from typing import TypeVar

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


_DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice, before any change here


def _seconds_of_work(threads: int) -> float:
    """Wall time of a few products and softmaxes of the chapters' sizes at ``threads``."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(768, 64, generator=g), torch.randn(64, 64, generator=g)
    start = time.perf_counter()
    for _ in range(10):
        (torch.softmax(x @ w, dim=-1) @ w).sum()
    return time.perf_counter() - start


def choose_threads() -> int:
    """Set torch's number of CPU threads for the course's small models and return it.

    ``MULTIHEAD_THREADS`` (a positive int, or ``all`` for torch's default) decides if set;
    else ``OMP_NUM_THREADS``, if set, is left to torch. Otherwise the same small workload is
    timed at one thread and at torch's default (interleaved, best of three each); all threads
    are kept when they are clearly faster (under 0.9 of one thread's time) and the load
    average of the last minute leaves a core free, else a single thread, which on a busy
    machine runs several times faster. Called once when this module is imported.

    Shapes: none.
    """
    value = os.environ.get(THREADS_ENV, "").strip().lower()
    if value:
        if value == "all":
            threads = _DEFAULT_THREADS
        elif value.isdigit() and int(value) > 0:
            threads = int(value)
        else:
            raise ValueError(f"{THREADS_ENV}={value!r} must be a positive integer or 'all'")
    elif os.environ.get("OMP_NUM_THREADS") or _DEFAULT_THREADS == 1:
        threads = _DEFAULT_THREADS
    else:
        one, default = [], []
        for _ in range(3):
            one.append(_seconds_of_work(1))
            default.append(_seconds_of_work(_DEFAULT_THREADS))
        # all threads only if clearly faster now and no other work held the cores in the last
        # minute: a short timing can miss a busy neighbour, and guessing wrong that way costs
        # many times more than a single thread costs on a quiet machine
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        quiet = load < _DEFAULT_THREADS - 0.5
        threads = _DEFAULT_THREADS if quiet and min(default) < 0.9 * min(one) else 1
    torch.set_num_threads(threads)
    return threads


choose_threads()
