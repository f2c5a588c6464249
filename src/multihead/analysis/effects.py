"""Effects and their intervals: the numbers the verdict rule (``analysis.verdict``) judges.

An **effect** is one number whose sign a claim predicts, measured on replicate seeds:

* ``paired(treatment, control, claimed=...)``: per-example values of two arms on the same
  test examples, for each seed; the effect is the mean difference.
* ``per_seed(values, claimed=...)``: one number per seed (a slope, a share, a score that is
  not a mean over examples), judged against ``reference`` (0 unless given).
* ``correlation(xs, ys, statistic, claimed=...)``: a correlation per seed.
* ``solved_share(solved, claimed=...)``: the share of seeds on which something happened
  (the task was solved), for outcomes that split into solved and unsolved seeds.

**The interval** is a 95% interval. For ``paired`` on examples every seed shares, two
independent sources of noise add up: the seeds (another training run) and the examples
(another test set). With ``K`` seeds and ``n`` examples the variance of the mean is
``s_seed^2 / K + s_example^2 / n``, from the spread of the per-seed means and of the
per-example means, with Student's t and Welch-Satterthwaite degrees of freedom. Where each
seed has its own examples, or the statistic is one number per seed, the per-seed values
already hold the example noise: the t-interval over seeds (``K - 1`` degrees of freedom). A
correlation's interval is that t-interval on Fisher's ``atanh`` of the per-seed values, mapped
back, so it stays inside (-1, 1); a seed at exactly +-1 counts as tanh 3 = 0.995, not infinity.
Why t rather than a bootstrap: over 3 to 5 seeds a bootstrap only ever sees the seeds it has
and comes out too narrow.

**Seed sets.** An effect keeps, per seed set (one run of a notebook: its seeds and the test
examples they share), what pooling needs: each seed's value, the example-noise term
``s_example^2 / n`` and ``n`` (a ``SeedSet``). Effects of several seed sets pool into one
(``pooled``): the seed variance is pooled within sets (a set's shared examples move all its
seeds together, which its own example term carries), each set adds its example term with the
weight of its seeds, and where no examples are shared the values of all sets form one t-
interval, exactly as if one run had made them all.

**Seeds that split.** Where seeds split into two groups (the task solved on some seeds and
not on others), a t-interval over 5 seeds covers the mean only about 70% of the time (under
50% over 3). ``split_seeds`` finds such a split (or is told the threshold) and
``solved_share`` judges the share of solved seeds with its exact Clopper-Pearson interval.

Shapes: see each function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from multihead._checks import check_choice, check_number, check_positive_int
from multihead.analysis.intervals import LEVEL, clopper_pearson, find_split, t_quantile

MIN_SEEDS = 3
KINDS = ("mean", "correlation", "share")
_EDGE = math.tanh(3.0)  # a rank correlation of few heads is often +-1 (at 1 - 1e-9 it swamped)


@dataclass(frozen=True)
class SeedSet:
    """One seed set's part of an effect: what pooling it with other sets needs.

    ``values``: per seed, the statistic (a mean difference over the examples, a correlation,
    1.0 or 0.0 for solved or not); ``ids``: the seeds' numbers where known; ``example_var``:
    ``s_example^2 / n`` of the test examples the set's seeds share (0 where none are shared);
    ``examples``: how many examples (per seed where shared, in all where not).
    """

    values: tuple[float, ...]
    ids: tuple[int, ...] | None = None
    example_var: float = 0.0
    examples: int = 0
    shared: bool = False


@dataclass(frozen=True)
class Effect:
    """An effect with its interval at ``level`` (95% unless a correction widened it).

    ``estimate``, ``low``, ``high`` are in the statistic's own units and sign; ``claimed``
    says which side of ``reference`` (no effect: 0 for a difference) the claim predicts;
    ``seeds`` and ``examples`` count what the interval rests on; ``sets`` keep each seed
    set's part (for pooling and for other levels); ``chance`` is the band shuffled data give
    (shown, not judged); ``split`` says the seeds fall into two groups (see ``split_seeds``).
    """

    estimate: float
    low: float
    high: float
    claimed: str
    seeds: int
    examples: int
    reference: float = 0.0
    level: float = LEVEL
    kind: str = "mean"
    sets: tuple[SeedSet, ...] = ()
    chance: tuple[float, float] | None = None
    split: bool = False
    example_name: str = "examples"
    seed_name: str = "seeds"

    @property
    def per_seed(self) -> tuple[float, ...]:
        return tuple(v for s in self.sets for v in s.values)

    def at(self, level: float) -> Effect:
        """The same effect with its interval at another ``level`` (a correction's)."""
        return _build(self.sets, self.kind, level=level, **_labels(self))

    def describe(self, fmt: str = "+.3f", unit: str = "") -> str:
        """``+0.012 (95% interval +0.004 to +0.020; 5 seeds x 971 tokens)``-style text."""
        u = f" {unit}" if unit else ""
        scope = f"{self.seeds} {self.seed_name}" + (
            f" x {self.examples} {self.example_name}" if self.examples else ""
        )
        if len(self.sets) > 1:
            scope += f" in {len(self.sets)} seed sets"
        pct = f"{100 * self.level:.4g}%"
        what = "exact interval" if self.kind == "share" else "interval"
        text = f"{self.estimate:{fmt}}{u} ({pct} {what} {self.low:{fmt}} to {self.high:{fmt}}"
        text += f"; {scope}"
        if self.reference:
            text += f"; no effect at {self.reference:{fmt.lstrip('+')}}"
        if self.chance is not None:
            text += f"; shuffled data give {self.chance[0]:{fmt}} to {self.chance[1]:{fmt}}"
        if self.split:
            text += "; the seeds split into two groups"
        return text + ")"


def _labels(e: Effect) -> dict:
    return {
        "claimed": e.claimed,
        "reference": e.reference,
        "chance": e.chance,
        "example_name": e.example_name,
        "seed_name": e.seed_name,
    }


def _interval(mean: float, var: float, df: float, level: float) -> tuple[float, float]:
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(max(var, 0.0))
    return mean - half, mean + half


def _build(sets: Sequence[SeedSet], kind: str, *, level: float = LEVEL, **labels) -> Effect:
    """The effect of one or more seed sets (see the module docstring for the formulas)."""
    check_choice("kind", kind, KINDS)
    sets = tuple(sets)
    values = torch.tensor([v for s in sets for v in s.values], dtype=torch.float64)
    N = values.numel()
    if N < MIN_SEEDS:
        raise ValueError(f"an effect needs at least {MIN_SEEDS} seeds, got {N}")
    ids = [i for s in sets for i in (s.ids or ())]
    if len(ids) != len(set(ids)):
        raise ValueError(
            "a seed appears in two seed sets: each seed counts once; pool sets "
            "whose seeds do not overlap"
        )
    if len({s.shared for s in sets}) > 1:
        raise ValueError("seed sets that share test examples cannot pool with sets that do not")
    examples = sum(s.examples for s in sets)
    if kind == "share":
        k = int(values.sum().round())
        lo, hi = clopper_pearson(k, N, level)
        return Effect(
            k / N, lo, hi, seeds=N, examples=0, level=level, kind=kind, sets=sets, **labels
        )
    if kind == "correlation":
        z = torch.atanh(values.clamp(-_EDGE, _EDGE))
        lo, hi = _interval(float(z.mean()), float(z.var()) / N, N - 1, level)
        est, lo, hi = math.tanh(float(z.mean())), math.tanh(lo), math.tanh(hi)
    elif not sets[0].shared:
        est = float(values.mean())
        lo, hi = _interval(est, float(values.var()) / N, N - 1, level)
    else:
        est = float(values.mean())
        within = sum(
            float(((torch.tensor(s.values) - sum(s.values) / len(s.values)) ** 2).sum())
            for s in sets
        )
        df_seed = N - len(sets)
        if df_seed < 1:
            raise ValueError("pooling shared-example sets needs a set with at least 2 seeds")
        var_seed = within / df_seed / N
        parts = [(len(s.values) / N) ** 2 * s.example_var for s in sets]
        var = var_seed + sum(parts)
        den = var_seed**2 / df_seed + sum(
            p**2 / (s.examples - 1) for p, s in zip(parts, sets, strict=True) if s.examples > 1
        )
        df = var**2 / den if den > 0 else float(df_seed)
        lo, hi = _interval(est, var, df, level)
    return Effect(
        est,
        lo,
        hi,
        seeds=N,
        examples=examples,
        level=level,
        kind=kind,
        sets=sets,
        split=find_split(values.tolist()) is not None,
        **labels,
    )


def pooled(effects: Sequence[Effect]) -> Effect:
    """One effect from the seed sets of several (the same claim measured on other seeds and
    test data): the interval as if one run had made them all. The effects must agree in
    kind, claimed side and reference.

    Shapes: none.
    """
    if not effects or not all(isinstance(e, Effect) for e in effects):
        raise TypeError("effects must be a non-empty sequence of Effect")
    first = effects[0]
    for e in effects[1:]:
        if (e.kind, e.claimed, e.reference) != (first.kind, first.claimed, first.reference):
            raise ValueError("pooled effects must agree in kind, claimed side and reference")
    return _build([s for e in effects for s in e.sets], first.kind, **_labels(first))


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


def _name(arg: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{arg} must be a non-empty str, got {value!r}")
    return value


def paired(
    treatment: object,
    control: object,
    *,
    claimed: str,
    shared_examples: bool = True,
    example_name: str = "examples",
    test_sets: Sequence[object] | None = None,
) -> Effect:
    """The effect ``treatment - control``, paired by seed and by test example.

    ``treatment`` and ``control`` hold one value per example (a loss, 1/0 for right/wrong)
    for each seed, on the same examples. ``shared_examples=True`` (the default): every seed
    was scored on the same examples, a second source of noise; ``False``: each seed has its
    own (rows may then differ in length, given as a list). ``test_sets``: one label per seed
    where seeds were scored on different test sets (the seeds of one label share theirs), as
    when seed sets are pooled. ``claimed``: ``"higher"`` or ``"lower"``, the side of zero the
    claim predicts for ``treatment - control``. ``example_name`` names the examples.

    Shapes: treatment, control (seeds, examples) or a list of (examples_k,) -> Effect.
    """
    check_choice("claimed", claimed, ("higher", "lower"))
    _name("example_name", example_name)
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
    labels = {"claimed": claimed, "example_name": example_name}
    if isinstance(a, list) or not shared_examples:
        if isinstance(a, list) and shared_examples:
            raise ValueError(
                "seeds with different numbers of examples cannot share them: "
                "pass shared_examples=False"
            )
        diffs = [x - y for x, y in zip(a, b, strict=True)]
        means = tuple(float(d.mean()) for d in diffs)
        n = sum(len(d) for d in diffs)
        return _build([SeedSet(means, examples=n)], "mean", **labels)
    d = a - b  # (K, n)
    groups = [None] * d.shape[0] if test_sets is None else list(test_sets)
    if len(groups) != d.shape[0]:
        raise ValueError(f"test_sets needs one label per seed ({d.shape[0]}), got {len(groups)}")
    sets = []
    for label in dict.fromkeys(groups):  # in order of first appearance
        rows = d[[k for k, g in enumerate(groups) if g == label]]  # (K_s, n)
        ex_means = rows.mean(0)  # (n,)
        ex_var = float(ex_means.var()) / ex_means.numel()
        sets.append(SeedSet(tuple(rows.mean(1).tolist()), None, ex_var, d.shape[1], True))
    return _build(sets, "mean", **labels)


def per_seed(
    values: object,
    *,
    claimed: str,
    reference: float = 0.0,
    null: object | None = None,
    seed_name: str = "seeds",
    correlation: bool = False,
) -> Effect:
    """The effect measured once per seed: its mean over seeds with a t-interval, against
    ``reference`` (the value that means no effect: 0.5 for "more than half").

    ``null``: samples of the seed mean under a permutation that breaks what the claim is
    about; its central 95% band is shown beside the effect (``Effect.chance``) but not
    judged: the interval already holds that noise (see ``analysis.verdict``). ``seed_name``:
    what one replicate is (``"folds"``). ``correlation=True``: the values are correlations,
    whose interval is taken on Fisher's scale.

    Shapes: values (seeds,), null (draws,) -> Effect.
    """
    check_choice("claimed", claimed, ("higher", "lower"))
    if not isinstance(seed_name, str) or not seed_name.strip():
        raise TypeError(f"seed_name must be a non-empty str, got {seed_name!r}")
    reference = check_number("reference", reference)
    v = _table("values", values)
    if v.ndim != 1:
        raise ValueError(f"values must be one number per seed (seeds,), got {tuple(v.shape)}")
    if correlation and not bool((v.abs() <= 1).all()):
        raise ValueError("correlation=True needs values in [-1, 1]")
    chance = None
    if null is not None:
        z = torch.as_tensor(null, dtype=torch.float64).flatten()
        if z.numel() < 20 or not torch.isfinite(z).all():
            raise ValueError("null must hold at least 20 finite draws of the statistic")
        q = torch.quantile(z, torch.tensor([(1 - LEVEL) / 2, (1 + LEVEL) / 2], dtype=z.dtype))
        chance = (float(q[0]), float(q[1]))
    kind = "correlation" if correlation else "mean"
    return _build(
        [SeedSet(tuple(v.tolist()))],
        kind,
        claimed=claimed,
        reference=reference,
        chance=chance,
        seed_name=seed_name,
    )


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
    """A correlation of two measurements of the same units (e.g. the rank correlation of two
    head scores) per seed, with the band its permutation null gives for comparison: ``ys``
    shuffled over the units of each seed (over the last ``within`` dims separately when
    given: ``within=1`` shuffles the heads within each layer), the seed mean recomputed
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
    return per_seed(values, claimed=claimed, null=null, seed_name=seed_name, correlation=True)


def solved_share(
    solved: Sequence[bool],
    *,
    claimed: str = "higher",
    reference: float = 0.0,
    seed_name: str = "seeds",
) -> Effect:
    """The share of seeds on which the claimed outcome happened (``solved``: one bool per
    seed, e.g. from ``split_seeds``, or "the treatment solved it and the control did not"),
    with its exact Clopper-Pearson interval, against ``reference`` (the share that means no
    effect: 0 for "it happens at all", 0.5 for "more often than not").

    Shapes: solved (seeds,) -> Effect.
    """
    check_choice("claimed", claimed, ("higher", "lower"))
    flags = list(solved.tolist() if isinstance(solved, Tensor) else solved)
    if not all(isinstance(f, bool) or f in (0, 1) for f in flags):
        raise TypeError("solved must hold one bool per seed")
    reference = check_number("reference", reference, 0.0, 1.0)
    return _build(
        [SeedSet(tuple(float(bool(f)) for f in flags))],
        "share",
        claimed=claimed,
        reference=reference,
        seed_name=seed_name,
    )
