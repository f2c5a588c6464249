"""Wall-clock comparisons that are fair on a busy machine: interleaved rounds, medians.

Timings are measured and reported, never asserted: they depend on the machine and on
whatever else runs on it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from multihead._checks import check_positive_int


def median_times(
    fns: dict[str, Callable[[], object]],
    *,
    rounds: int = 15,
    number: int = 3,
    warmup: int = 2,
    grad: bool = False,
) -> dict[str, float]:
    """Median seconds per call of each function, over ``rounds`` interleaved rounds.

    Each round calls every function ``number`` times in turn, so a slow moment of the
    machine hits all of them alike. ``warmup`` untimed calls come first. The calls run in
    inference mode unless ``grad`` (set it to time a backward pass).

    Shapes: none.
    """
    if not isinstance(fns, dict) or not fns:
        raise ValueError("fns must be a non-empty dict from a name to a function of no argument")
    for name, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"fns[{name!r}] must be callable with no argument")
    check_positive_int("rounds", rounds)
    check_positive_int("number", number)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} must be an int >= 0")
    samples: dict[str, list[float]] = {name: [] for name in fns}
    if not isinstance(grad, bool):
        raise TypeError(f"grad must be a bool, got {type(grad).__name__}")
    with torch.inference_mode(not grad):
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        for _ in range(rounds):
            for name, fn in fns.items():
                start = time.perf_counter()
                for _ in range(number):
                    fn()
                samples[name].append((time.perf_counter() - start) / number)
    return {name: statistics.median(s) for name, s in samples.items()}
