"""The course's one verdict rule: an effect, its interval over seeds and test examples, a word.

Every empirical claim of the course is tested through an **effect**: one number whose sign
the claim predicts, such as a paired difference (treatment minus control, per test example,
per seed) or a rank correlation (per seed). This module measures it and says what it shows:

* ``paired(treatment, control, claimed=...)``: per-example values of two arms on the same
  test examples, for each seed. The effect is the mean difference over seeds and examples.
* ``per_seed(values, claimed=...)``: one number per seed (a slope, a rank correlation, a
  score that is not a mean over examples), with an optional permutation ``null`` of the same
  statistic (``correlation`` builds one for a rank correlation).
* ``judge(effect, minimal=...)``: the word, from the interval and a minimal size stated
  before the run.

**The interval.** A 95% interval of Student's t. For ``paired`` with the same test examples
for every seed (a ``(seeds, examples)`` table), two independent sources of noise add up: the
seeds (another training run) and the examples (another test set). With ``K`` seeds and ``n``
examples, the variance of the mean is estimated as ``s_seed^2 / K + s_example^2 / n``, from
the spread of the per-seed means and of the per-example means (each also carries a small
share of the seed-by-example interaction, so the estimate errs wide), with Welch-Satterthwaite
degrees of freedom. Where each seed has its own examples, or the statistic is one number per
seed, the spread of the per-seed values already holds the example noise and the interval is
the t-interval over seeds, ``K - 1`` degrees of freedom. Why t rather than a bootstrap: with
3 to 5 seeds a bootstrap over seeds only ever sees the seeds it has (3 seeds give 10 possible
resampled means) and its interval comes out too narrow; t's heavier tail is the price of few
seeds, paid in the open.

**The reference.** No effect means the effect equals ``0`` for a difference; for a
statistic with a permutation ``null`` (relabel what the statistic pairs, keep the rest),
no effect is anywhere in the central 95% band of that null, which is where shuffled data
put the same statistic (a rank correlation of 8 heads reaches +0.35 by chance).

**The words.** With the claimed direction taken as positive (``claimed="lower"`` flips the
signs), the interval ``[lo, hi]``, the reference band ``[r_lo, r_hi]`` and the minimal size
``m >= 0`` that the claim needs:

* ``"reproduced"``: ``lo > r_hi`` and ``lo >= m``: the whole interval lies beyond no effect
  and clears the minimal size;
* ``"partly"``: ``lo > r_hi`` but ``lo < m``: the claimed direction is clear, the size is
  not; also, from ``combine``, a claim that holds in one named condition and not in another;
* ``"no clear effect"``: the interval reaches the reference band;
* ``"contradicted"``: ``hi < r_lo``: the whole interval lies on the other side.

Shapes: see each function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from multihead._checks import check_choice, check_number, check_positive_int

WORDS = ("reproduced", "partly", "no clear effect", "contradicted")
LEVEL = 0.95
MIN_SEEDS = 3


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``df`` may be
    fractional, as Welch-Satterthwaite gives it), by bisection on its CDF, which is the
    integral of the density (Simpson's rule on a fine grid), then Newton's steps kept inside
    the bracket. Accurate to about 1e-7.

    Shapes: none.
    """
    check_number("p", p, 0.0, 1.0, closed="()")
    check_number("df", df, 0.0, None, closed="(]")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float) -> float:
        # substitute s = tan(x) so the heavy tail sits on a bounded grid
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
    t = (lo + hi) / 2  # Newton's steps, kept inside the bracket [lo, hi] (else bisect)
    for _ in range(100):
        f = cdf(t) - p
        lo, hi = (t, hi) if f < 0 else (lo, t)
        step = t - f / pdf(t)
        t_new = step if lo < step < hi else (lo + hi) / 2
        if abs(t_new - t) <= 1e-10 * max(1.0, t):
            return t_new
        t = t_new
    return t


@dataclass(frozen=True)
class Effect:
    """An effect with its 95% interval and the band that means no effect.

    ``estimate``, ``low`` and ``high`` are in the statistic's own units and sign (``claimed``
    says which side the claim predicts: ``"higher"`` above the reference, ``"lower"`` below);
    ``reference`` is ``(r_lo, r_hi)``; ``seeds`` and ``examples`` count what the interval
    rests on (``examples`` is 0 for one number per seed).
    """

    estimate: float
    low: float
    high: float
    reference: tuple[float, float]
    claimed: str
    seeds: int
    examples: int
    per_seed: tuple[float, ...] = field(default=())
    example_name: str = "examples"
    seed_name: str = "seeds"

    def describe(self, fmt: str = "+.3f", unit: str = "") -> str:
        """``+0.012 (95% interval +0.004 to +0.020; 5 seeds x 971 tokens)``-style text."""
        u = f" {unit}" if unit else ""
        scope = f"{self.seeds} {self.seed_name}" + (
            f" x {self.examples} {self.example_name}" if self.examples else ""
        )
        text = (
            f"{self.estimate:{fmt}}{u} (95% interval {self.low:{fmt}} to {self.high:{fmt}}; {scope}"
        )
        if self.reference != (0.0, 0.0):
            text += f"; shuffled data give {self.reference[0]:{fmt}} to {self.reference[1]:{fmt}}"
        return text + ")"


@dataclass(frozen=True)
class Verdict:
    """A verdict word (one of ``WORDS``) with the effect and minimal size it came from, or,
    from ``combine``, with the verdicts of its named conditions."""

    word: str
    effect: Effect | None
    minimal: float
    conditions: tuple[tuple[str, Verdict], ...] = ()

    def __str__(self) -> str:
        return self.word

    def describe(self, fmt: str = "+.3f", unit: str = "") -> str:
        """The word's grounds in one line, for a claims row."""
        if self.effect is None:
            return "; ".join(
                f"{name}: {v.word}, {v.describe(fmt, unit)}" for name, v in self.conditions
            )
        text = self.effect.describe(fmt, unit)
        if self.minimal:
            text += f", minimal size {self.minimal:{fmt.lstrip('+')}}"
        return text


def _table(name: str, values: object) -> Tensor:
    if isinstance(values, Tensor):
        t = values.detach().double().cpu()
    else:
        try:
            t = torch.as_tensor(values, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"{name} must be numbers shaped (seeds,) or (seeds, examples)"
            ) from None
    if t.ndim not in (1, 2):
        raise ValueError(
            f"{name} must be shaped (seeds,) or (seeds, examples), got {tuple(t.shape)}"
        )
    if t.shape[0] < MIN_SEEDS:
        raise ValueError(
            f"{name} holds {t.shape[0]} seeds: a verdict needs at least {MIN_SEEDS} "
            f"(one row per seed)"
        )
    if t.ndim == 2 and t.shape[1] < 2:
        raise ValueError(f"{name} needs at least 2 examples per seed, got {t.shape[1]}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} holds a value that is not finite")
    return t


def _rows(name: str, values: object) -> Tensor | list[Tensor]:
    """A (seeds, examples) table, or a list of per-seed example vectors of their own lengths."""
    if (
        isinstance(values, (list, tuple))
        and values
        and all(isinstance(v, (Tensor, list, tuple)) for v in values)
    ):
        rows = [torch.as_tensor(v, dtype=torch.float64).flatten() for v in values]
        if len({len(r) for r in rows}) > 1:
            _table(name, [r.mean() for r in rows])  # checks the seed count
            for k, r in enumerate(rows):
                if len(r) < 2 or not torch.isfinite(r).all():
                    raise ValueError(f"{name}[{k}] needs at least 2 finite examples")
            return rows
        return _table(name, torch.stack(rows))
    return _table(name, values)


def _interval(mean: float, var: float, df: float) -> tuple[float, float]:
    half = t_quantile(0.5 + LEVEL / 2, df) * math.sqrt(max(var, 0.0))
    return mean - half, mean + half


def paired(
    treatment: object,
    control: object,
    *,
    claimed: str,
    shared_examples: bool = True,
    example_name: str = "examples",
) -> Effect:
    """The effect ``treatment - control``, paired by seed and by test example.

    ``treatment`` and ``control`` hold one value per example (a loss, 1/0 for right/wrong)
    for each seed, measured on the same examples. ``shared_examples=True`` (the default)
    says every seed was scored on the same examples, so the examples are a second source of
    noise shared by the seeds; ``False`` says each seed has its own (then rows may differ in
    length, given as a list). ``claimed``: ``"higher"`` or ``"lower"``, the side of zero the
    claim predicts for ``treatment - control``. ``example_name`` names the examples in the
    description ("test sentences").

    Shapes: treatment, control (seeds, examples) or a list of (examples_k,) -> Effect.
    """
    check_choice("claimed", claimed, ("higher", "lower"))
    if not isinstance(example_name, str) or not example_name.strip():
        raise ValueError(f"example_name must be a non-empty str, got {example_name!r}")
    a, b = _rows("treatment", treatment), _rows("control", control)
    if (
        isinstance(a, Tensor) != isinstance(b, Tensor)
        or (isinstance(a, Tensor) and a.shape != b.shape)
        or (not isinstance(a, Tensor) and [len(r) for r in a] != [len(r) for r in b])
    ):
        raise ValueError("treatment and control must have the same seeds and examples, paired")
    if isinstance(a, Tensor) and a.ndim == 1:
        raise ValueError(
            "treatment and control need per-example values (seeds, examples); "
            "for one number per seed use per_seed(treatment - control, ...)"
        )
    if isinstance(a, list):
        if shared_examples:
            raise ValueError(
                "seeds with different numbers of examples cannot share them: "
                "pass shared_examples=False"
            )
        diffs = [x - y for x, y in zip(a, b, strict=True)]
        means = torch.stack([d.mean() for d in diffs])
        n = sum(len(d) for d in diffs)
    else:
        d = a - b  # (K, n)
        means = d.mean(1)
        n = d.shape[1] if shared_examples else d.numel()
    K = len(means)
    est = float(means.mean())
    var_seed = float(means.var()) / K
    if isinstance(a, Tensor) and shared_examples:
        ex_means = d.mean(0)  # (n,)
        var_ex = float(ex_means.var()) / ex_means.numel()
        num = (var_seed + var_ex) ** 2
        den = var_seed**2 / (K - 1) + var_ex**2 / (ex_means.numel() - 1)
        df = num / den if den > 0 else float(K - 1)
        lo, hi = _interval(est, var_seed + var_ex, df)
    else:
        lo, hi = _interval(est, var_seed, K - 1)
    return Effect(est, lo, hi, (0.0, 0.0), claimed, K, n, tuple(means.tolist()), example_name)


def per_seed(
    values: object, *, claimed: str, null: object | None = None, seed_name: str = "seeds"
) -> Effect:
    """The effect measured once per seed: its mean over seeds with a t-interval.

    ``null``: optional samples of the *seed mean* of the same statistic under a permutation
    that breaks what the claim is about (see ``correlation``); its central 95% band is then
    the reference instead of zero. ``seed_name``: what one replicate is, for the text
    (``"folds"`` where the replicates are disjoint folds of the data of one model).

    Shapes: values (seeds,), null (draws,) -> Effect.
    """
    check_choice("claimed", claimed, ("higher", "lower"))
    if not isinstance(seed_name, str) or not seed_name.strip():
        raise TypeError(f"seed_name must be a non-empty str, got {seed_name!r}")
    v = _table("values", values)
    if v.ndim != 1:
        raise ValueError(f"values must be one number per seed (seeds,), got {tuple(v.shape)}")
    reference = (0.0, 0.0)
    if null is not None:
        z = torch.as_tensor(null, dtype=torch.float64).flatten()
        if z.numel() < 20 or not torch.isfinite(z).all():
            raise ValueError("null must hold at least 20 finite draws of the statistic")
        q = torch.quantile(z, torch.tensor([(1 - LEVEL) / 2, (1 + LEVEL) / 2], dtype=z.dtype))
        reference = (float(q[0]), float(q[1]))
    K = v.numel()
    est = float(v.mean())
    lo, hi = _interval(est, float(v.var()) / K, K - 1)
    return Effect(est, lo, hi, reference, claimed, K, 0, tuple(v.tolist()), seed_name=seed_name)


def correlation(
    xs: Sequence[Tensor],
    ys: Sequence[Tensor],
    statistic: Callable[[Tensor, Tensor], Tensor],
    *,
    claimed: str,
    permutations: int = 200,
    within: int | None = None,
    seed: int = 0,
    seed_name: str = "seeds",
) -> Effect:
    """A statistic of two measurements of the same units (e.g. the rank correlation of two
    head scores) per seed, judged against its permutation null: ``ys`` shuffled over the
    units of each seed (over the last ``within`` dims separately when given, e.g.
    ``within=1`` shuffles the heads within each layer), the seed mean recomputed
    ``permutations`` times.

    Shapes: xs, ys: one (...units) tensor per seed -> Effect.
    """
    check_positive_int("permutations", permutations)
    if len(xs) != len(ys):
        raise ValueError(f"xs has {len(xs)} seeds and ys {len(ys)}: pair them by seed")
    for k, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if not isinstance(x, Tensor) or not isinstance(y, Tensor) or x.shape != y.shape:
            raise ValueError(f"xs[{k}] and ys[{k}] must be tensors of one shape")
    values = torch.stack(
        [torch.as_tensor(statistic(x, y), dtype=torch.float64) for x, y in zip(xs, ys, strict=True)]
    )
    g = torch.Generator().manual_seed(seed)
    null = []
    for _ in range(permutations):
        draws = []
        for x, y in zip(xs, ys, strict=True):
            if within is None:
                flat = y.flatten()
                shuffled = flat[torch.randperm(flat.numel(), generator=g)].view_as(y)
            else:
                lead = y.shape[: y.ndim - within]
                flat = y.reshape(*lead, -1)
                idx = torch.argsort(torch.rand(flat.shape, generator=g), dim=-1)
                shuffled = flat.gather(-1, idx).view_as(y)
            draws.append(float(statistic(x, shuffled)))
        null.append(sum(draws) / len(draws))
    return per_seed(values, claimed=claimed, null=null, seed_name=seed_name)


def judge(effect: Effect, *, minimal: float = 0.0) -> Verdict:
    """The verdict word of ``effect`` (see the module docstring) for a claim that needs an
    effect of at least ``minimal`` (>= 0, in the effect's units, on the claimed side).

    Shapes: none.
    """
    if not isinstance(effect, Effect):
        raise TypeError(
            f"effect must be an Effect (from paired, per_seed or correlation), got "
            f"{type(effect).__name__}"
        )
    minimal = check_number("minimal", minimal, 0.0, None)
    sign = 1.0 if effect.claimed == "higher" else -1.0
    lo, hi = sorted((sign * effect.low, sign * effect.high))
    r_lo, r_hi = sorted((sign * effect.reference[0], sign * effect.reference[1]))
    if lo > r_hi:
        word = "reproduced" if lo >= minimal else "partly"
    elif hi < r_lo:
        word = "contradicted"
    else:
        word = "no clear effect"
    return Verdict(word, effect, minimal)


def combine(conditions: Mapping[str, Verdict]) -> Verdict:
    """One verdict for a claim that should hold in each of several named conditions (every
    number of heads, every noise size...): *reproduced* if every condition reproduces it;
    *partly* if some condition shows the claimed direction (reproduced or partly) and not all
    reproduce it; *contradicted* if none shows it and some condition contradicts it (the
    claim fails where it was said to hold); *no clear effect* otherwise.

    Shapes: none.
    """
    if not isinstance(conditions, Mapping) or not conditions:
        raise TypeError("conditions must be a non-empty dict {condition name: Verdict}")
    for name, v in conditions.items():
        if not isinstance(name, str) or not isinstance(v, Verdict):
            raise TypeError(f"conditions[{name!r}] must be a Verdict named by a str")
    words = [v.word for v in conditions.values()]
    if all(w == "reproduced" for w in words):
        word = "reproduced"
    elif any(w in ("reproduced", "partly") for w in words):
        word = "partly"
    elif "contradicted" in words:
        word = "contradicted"
    else:
        word = "no clear effect"
    return Verdict(word, None, 0.0, tuple(conditions.items()))
