"""Interval arithmetic for the verdict rule: Student's t quantiles, exact intervals of a
share, and the test that finds seeds split into two groups. Pure functions of numbers.

Shapes: none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import torch

from multihead._checks import check_choice, check_number, check_positive_int

LEVEL = 0.95
SPLIT_GAP = 8.0  # a gap of 8 within-group standard deviations: 4% of 5 normal draws show one


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``df`` may be
    fractional, as Welch-Satterthwaite gives it): bisection on the CDF (Simpson's rule on the
    density after ``s = tan(x)``), then Newton's steps kept inside the bracket. About 1e-7.

    Shapes: none.
    """
    check_number("p", p, 0.0, 1.0, closed="()")
    check_number("df", df, 0.0, None, closed="(]")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float) -> float:
        x = torch.linspace(0.0, math.atan(t), 1001, dtype=torch.float64)
        s = torch.tan(x)
        dens = torch.exp(log_norm - (df + 1) / 2 * torch.log1p(s * s / df)) / torch.cos(x) ** 2
        w = torch.ones_like(x)
        w[1:-1:2], w[2:-1:2] = 4.0, 2.0
        return 0.5 + float(x[1] - x[0]) / 3 * float((w * dens).sum())

    def pdf(t: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, 2.0 * hi
        if hi > 1e12:
            raise ValueError(f"p={p} is too close to 1 for df={df}")
    t = (lo + hi) / 2
    for _ in range(100):
        f = cdf(t) - p
        lo, hi = (t, hi) if f < 0 else (lo, t)
        step = t - f / pdf(t)
        t_new = step if lo < step < hi else (lo + hi) / 2
        if abs(t_new - t) <= 1e-10 * max(1.0, t):
            return t_new
        t = t_new
    return t


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) ``level`` interval of a share from ``k`` of ``n``: the
    shares whose binomial tail holds ``k`` with probability at least ``(1 - level) / 2``.

    Shapes: none.
    """
    check_positive_int("n", n)
    if not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"k must be an int from 0 to n={n}, got {k!r}")
    alpha = (1 - check_number("level", level, 0.0, 1.0, closed="()")) / 2

    def pmf(j: int, p: float) -> float:
        return math.comb(n, j) * p**j * (1 - p) ** (n - j)

    def solve(rising: Callable[[float], float], target: float) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):  # bisection to 1e-18
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if rising(mid) < target else (lo, mid)
        return (lo + hi) / 2

    # P(X >= k) rises with p: the low end is where it reaches alpha; P(X <= k) falls with p:
    # the high end is where it falls to alpha
    low = 0.0 if k == 0 else solve(lambda p: sum(pmf(j, p) for j in range(k, n + 1)), alpha)
    high = 1.0 if k == n else solve(lambda p: -sum(pmf(j, p) for j in range(k + 1)), -alpha)
    return low, high


def find_split(values: Sequence[float]) -> float | None:
    """A threshold between two groups of per-seed values, or None: the values split where the
    largest gap between sorted neighbours exceeds ``SPLIT_GAP`` pooled within-group standard
    deviations (with 5 normal draws 4% show such a gap, with 10 under 0.1%). Fewer than 5
    values never split: 3 or 4 cannot tell a split from chance.

    Shapes: values (seeds,) -> float or None.
    """
    v = sorted(float(x) for x in values)
    if len(v) < 5:
        return None
    gaps = [v[i + 1] - v[i] for i in range(len(v) - 1)]
    i = max(range(len(gaps)), key=gaps.__getitem__)
    groups = (v[: i + 1], v[i + 1 :])
    ss = sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in groups)
    sd = math.sqrt(ss / (len(v) - 2))
    return (v[i] + v[i + 1]) / 2 if gaps[i] > SPLIT_GAP * sd and gaps[i] > 0 else None


def split_seeds(
    values: Sequence[float], *, threshold: float | None = None, solved: str = "below"
) -> tuple[bool, ...]:
    """Which seeds solved the task: those whose value lies ``solved`` (``"below"`` for a loss,
    ``"above"`` for an accuracy) the ``threshold`` fixed from the task, or, where none is
    given, below or above the split ``find_split`` finds (an error where there is none).

    Shapes: values (seeds,) -> (seeds,) bools.
    """
    check_choice("solved", solved, ("below", "above"))
    vals = [float(x) for x in values]
    if not vals or not all(math.isfinite(x) for x in vals):
        raise ValueError("values must be finite numbers, one per seed")
    if threshold is None:
        threshold = find_split(vals)
        if threshold is None:
            raise ValueError(
                "the values do not split into two groups: give threshold= (fixed from the "
                "task) or judge their mean with per_seed"
            )
    threshold = check_number("threshold", threshold)
    return tuple((x < threshold) if solved == "below" else (x > threshold) for x in vals)
