"""The course's one verdict rule: an effect's interval, the claim's minimal size, a word.

Every empirical claim is tested through an **effect** (``analysis.effects``: ``paired``,
``per_seed``, ``correlation``, ``solved_share``), whose 95% interval combines seeds and test
examples. ``judge`` turns it into a word, with the claimed direction taken as positive
(``claimed="lower"`` flips the signs), the interval ``[lo, hi]`` measured from the
reference (no effect) and the claim's **minimal size** ``m > 0``, the smallest effect the
claim needs, fixed before the run from the claim or its paper:

=================  ==============================  ==========================================
word               the interval                    read it as
=================  ==============================  ==========================================
reproduced         ``lo >= m``                     the claimed effect, at least its size
partly             ``0 < lo < m <= hi``            the claimed direction; the size not shown
ruled out          ``-m < hi < m``                 no effect of the claimed size (a smaller
                   (and not reproduced)            one, of either sign, may remain)
contradicted       ``hi <= -m``                    the opposite effect, at the claimed size
no clear effect    ``lo <= 0`` and ``hi >= m``     too little data to tell
=================  ==============================  ==========================================

The five cases are exhaustive and do not overlap: ``hi <= -m`` is *contradicted*; else
``lo >= m`` is *reproduced*; else ``hi < m`` is *ruled out*; else ``hi >= m`` and the
interval starts above 0 (*partly*) or not (*no clear effect*). *ruled out* covers every
interval that ends below ``m`` without lying beyond ``-m``: the claim is one-sided, so an
interval below ``m`` rules it out whatever it says about the other side.

**At least as good.** A claim that the treatment is no worse than the control is judged
with a non-inferiority ``margin`` ``d > 0`` instead of a minimal size: *reproduced* where
``lo > -d``, *contradicted* where ``hi < -d``, *no clear effect* otherwise.

**Competence before verdict.** A ``Competence`` says, per seed, whether the baseline
learned the task (a held-out measure against a threshold fixed from the task). Where fewer
than 90% of the seeds pass, the word is *not at this scale*, with the reason ("the baseline
learned the lookup on 1 of 5 seeds").

**Several conditions.** ``combine`` takes the conditions and the **primary** one, named
before the run. The claim's word is the primary's, judged at 95% like a claim of one
condition: it is one test, fixed before the run, so the other conditions cannot make a
claimed word likelier (a rule that let any condition decide would). The others' words are
listed beside it, contradicted ones first, each judged at the Bonferroni level
``1 - 0.05/k`` over the ``k`` conditions, so that they hold together at 95% (more, since
they are ``k - 1``); Bonferroni because the conditions share arms (a common control), which
rules out corrections that assume independence, and because Holm's gives no intervals.

**Correlations** are judged once, by their interval (Fisher's scale, mapped back) against 0
and the minimal size. The permutation band of ``correlation`` is shown, not judged: each
seed's correlation already carries the chance noise of a finite set of units, so requiring
the interval to clear the band as well counted that noise twice, and only the interval can
be compared with a minimal size on both sides.

A claim in a notebook, with its test data drawn for the seed set (``runtime.data_seed``)::

    learned = competence("the baseline learned the lookup", base_loss_per_seed,
                         measure="test loss", at_most=0.1)
    v = judge(paired(loss_mqa, loss_mha, claimed="higher"), minimal=0.01, competence=learned)
    v_as_good = judge(paired(loss_mla, loss_mha, claimed="lower"), margin=0.01)
    v_all = combine({"4 kv heads": v4, "2 kv heads": v2}, primary="2 kv heads")
    claim("ch10-mqa-degrades", v, "test loss per sequence ...")  # glues word and record

**Records.** ``Verdict.record()`` is a JSON-able dict of what the word rests on (per-seed
values keyed by seed, each seed set's example-noise term, the minimal size or margin, the
competence values, the conditions); ``pool(records)`` judges the seed sets of several runs
as one, so runs made in parts merge.

Shapes: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from multihead._checks import check_number
from multihead.analysis.effects import (
    MIN_SEEDS,
    Effect,
    SeedSet,
    correlation,
    paired,
    per_seed,
    pooled,
    solved_share,
)
from multihead.analysis.intervals import (
    LEVEL,
    clopper_pearson,
    find_split,
    split_seeds,
    t_quantile,
)

__all__ = [
    "LEVEL",
    "MIN_SEEDS",
    "WORDS",
    "NOT_AT_THIS_SCALE",
    "COMPETENT_SHARE",
    "Competence",
    "Effect",
    "SeedSet",
    "Verdict",
    "clopper_pearson",
    "combine",
    "competence",
    "correlation",
    "find_split",
    "interval_word",
    "judge",
    "number_seeds",
    "paired",
    "per_seed",
    "pool",
    "pooled",
    "solved_share",
    "split_seeds",
    "t_quantile",
]

WORDS = ("reproduced", "partly", "ruled out", "no clear effect", "contradicted")
NOT_AT_THIS_SCALE = "not at this scale"
COMPETENT_SHARE = 0.9


def interval_word(
    lo: float, hi: float, *, minimal: float | None = None, margin: float | None = None
) -> str:
    """The word of an interval ``[lo, hi]`` oriented so the claim predicts positive values
    and measured from no effect, for a ``minimal`` size or a non-inferiority ``margin``.

    Shapes: none.
    """
    if lo > hi:
        raise ValueError(f"lo={lo} lies above hi={hi}")
    if (minimal is None) == (margin is None):
        raise ValueError("give exactly one of minimal= and margin=")
    if margin is not None:
        return (
            "reproduced"
            if lo > -margin
            else "contradicted"
            if hi < -margin
            else ("no clear effect")
        )
    if hi <= -minimal:
        return "contradicted"
    if lo >= minimal:
        return "reproduced"
    if hi < minimal:
        return "ruled out"
    return "partly" if lo > 0 else "no clear effect"


@dataclass(frozen=True)
class Competence:
    """Whether the baseline learned the task, per seed: ``values`` of a held-out ``measure``
    against ``threshold`` (passing at or above it where ``higher``, else at or below), fixed
    from the task before the run; ``task`` reads "the baseline learned the lookup"."""

    task: str
    measure: str
    threshold: float
    higher: bool
    values: tuple[float, ...]
    ids: tuple[int, ...] | None = None
    unit: str = "seed"  # what one value is measured on: a seed, a text window, a fold

    @property
    def passed(self) -> tuple[bool, ...]:
        t = self.threshold
        return tuple(v >= t if self.higher else v <= t for v in self.values)

    @property
    def ok(self) -> bool:
        return sum(self.passed) >= COMPETENT_SHARE * len(self.values)

    def reason(self) -> str:
        side = "at least" if self.higher else "at most"
        return (
            f"{self.task} on {sum(self.passed)} of {len(self.values)} {self.unit}s "
            f"({self.measure} {side} {self.threshold:g})"
        )


def competence(
    task: str,
    values: Sequence[float],
    *,
    measure: str,
    at_least: float | None = None,
    at_most: float | None = None,
    unit: str = "seed",
) -> Competence:
    """A competence check: ``values`` (one per seed) of ``measure`` must be ``at_least`` or
    ``at_most`` a threshold fixed from the task; ``task`` says what passing means ("the
    baseline learned the lookup"); ``unit`` names what a value is measured on where it is not
    a seed ("window", "fold").

    Shapes: values (seeds,) -> Competence.
    """
    for name, text in (("task", task), ("measure", measure)):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{name} must be a non-empty str, e.g. 'the baseline learned it'")
    if (at_least is None) == (at_most is None):
        raise ValueError("give exactly one of at_least= and at_most= (the task's threshold)")
    vals = tuple(float(check_number(f"values[{k}]", v)) for k, v in enumerate(values))
    if not vals:
        raise ValueError("values must hold one number per seed")
    threshold = check_number("threshold", at_least if at_least is not None else at_most)
    if not isinstance(unit, str) or not unit.strip():
        raise ValueError(f"unit must be a non-empty str such as 'seed' or 'window', got {unit!r}")
    return Competence(task, measure, threshold, at_least is not None, vals, unit=unit)


@dataclass(frozen=True)
class Verdict:
    """A word with what it came from: the effect, the minimal size or non-inferiority margin,
    the competence checks, and, from ``combine``, every condition (the primary first) with
    the word the claim takes from the primary."""

    word: str
    effect: Effect | None
    minimal: float | None = None
    margin: float | None = None
    competence: tuple[Competence, ...] = ()
    conditions: tuple[tuple[str, Verdict], ...] = ()
    primary: str | None = None

    def __str__(self) -> str:
        return self.word

    @property
    def reason(self) -> str:
        """Why the word is *not at this scale* ("" otherwise)."""
        failed = [c.reason() for c in self.competence if not c.ok]
        return "; ".join(failed)

    def others(self) -> str:
        """The conditions other than the primary by word, contradicted first ("" if none)."""
        if not self.conditions:
            return ""
        by_word: dict[str, list[str]] = {}
        for name, v in self.conditions[1:]:
            by_word.setdefault(v.word, []).append(name)
        order = ["contradicted", NOT_AT_THIS_SCALE, *WORDS]
        return "; ".join(
            f"{w} in {', '.join(by_word[w])}" for w in dict.fromkeys(order) if w in by_word
        )

    def describe(self, fmt: str = "+.3f", unit: str = "") -> str:
        """The word's grounds in one line, for a claims row."""
        if self.conditions:
            k = len(self.conditions)
            text = "; ".join(
                f"{'primary ' if i == 0 else ''}{name}: {v.word}, {v.describe(fmt, unit)}"
                for i, (name, v) in enumerate(self.conditions)
            )
            return text + f"; the others at the Bonferroni level over {k} conditions"
        text = self.effect.describe(fmt, unit) if self.effect is not None else ""
        size = fmt.lstrip("+")
        if self.minimal is not None:
            text += f", minimal size {self.minimal:{size}}"
        if self.margin is not None:
            text += f", non-inferiority margin {self.margin:{size}}"
        for c in self.competence:
            text += f"; {c.reason()}"
        return text

    def record(self) -> dict:
        """What the word rests on, as JSON-able data (see ``pool``)."""
        if self.conditions:
            parts = [[n, v.record()] for n, v in self.conditions]
            return {"word": self.word, "primary": self.primary, "conditions": parts}
        e = self.effect
        effect = {k: getattr(e, k) for k in ("kind", "claimed", "reference", "chance")}
        effect |= {"names": [e.example_name, e.seed_name], "sets": [asdict(s) for s in e.sets]}
        checks = [asdict(c) for c in self.competence]
        return {"word": self.word, "minimal": self.minimal, "margin": self.margin,
                "effect": effect, "competence": checks}  # fmt: skip


def judge(
    effect: Effect,
    *,
    minimal: float | None = None,
    margin: float | None = None,
    competence: Competence | Sequence[Competence] | None = None,
) -> Verdict:
    """The word of ``effect`` (see the module docstring) for a claim that needs an effect of
    at least ``minimal`` (> 0, in the effect's units, on the claimed side), or, for an "at
    least as good" claim, that allows a loss of at most ``margin`` (> 0). ``competence``: the
    baseline's check(s), one value per seed of the effect.

    Shapes: none.
    """
    if not isinstance(effect, Effect):
        raise TypeError(
            f"effect must be an Effect (from paired, per_seed, correlation or solved_share), "
            f"got {type(effect).__name__}"
        )
    if (minimal is None) == (margin is None):
        raise ValueError(
            "judge needs the claim's minimal size (minimal=..., the smallest effect the claim "
            "needs, fixed before the run) or, for an 'at least as good' claim, its "
            "non-inferiority margin (margin=...), one of them"
        )
    for name, size in (("minimal", minimal), ("margin", margin)):
        if size is not None:
            check_number(name, size, 0.0, None, closed="()")
    checks = (
        ()
        if competence is None
        else ((competence,) if isinstance(competence, Competence) else tuple(competence))
    )
    for c in checks:
        if not isinstance(c, Competence):
            raise TypeError(f"competence must be a Competence (from competence()), got {c!r}")
        if len(c.values) != effect.seeds:
            raise ValueError(
                f"competence has {len(c.values)} values and the effect {effect.seeds} seeds: "
                "give one value per seed of the effect"
            )
    sign = 1.0 if effect.claimed == "higher" else -1.0
    lo, hi = sorted(
        (sign * (effect.low - effect.reference), sign * (effect.high - effect.reference))
    )
    word = interval_word(lo, hi, minimal=minimal, margin=margin)
    if any(not c.ok for c in checks):
        word = NOT_AT_THIS_SCALE
    return Verdict(word, effect, minimal, margin, checks)


def _at(v: Verdict, level: float) -> Verdict:
    return judge(v.effect.at(level), minimal=v.minimal, margin=v.margin, competence=v.competence)


def combine(conditions: Mapping[str, Verdict], *, primary: str) -> Verdict:
    """One verdict for a claim tested in several named conditions: the word the ``primary``
    condition's (named before the run), judged at 95%; the others shown beside it
    (``Verdict.others``), each judged at the Bonferroni level over the number of conditions.
    A condition that is itself combined adds its conditions as ``"name: condition"`` (naming
    it as the primary names its primary).

    Shapes: none.
    """
    if not isinstance(conditions, Mapping) or not conditions:
        raise TypeError("conditions must be a non-empty dict {condition name: Verdict}")
    flat: dict[str, Verdict] = {}
    for name, v in conditions.items():
        if not isinstance(name, str) or not isinstance(v, Verdict) or v.effect is None:
            raise TypeError(f"conditions[{name!r}] must be a Verdict named by a str")
        if name == primary and v.conditions:
            primary = f"{name}: {v.primary}"
        flat.update({f"{name}: {n}": c for n, c in v.conditions} if v.conditions else {name: v})
    if primary not in flat:
        raise ValueError(f"primary={primary!r} must name one of {list(flat)}")
    level = 1 - (1 - LEVEL) / len(flat)
    judged = {name: _at(v, LEVEL if name == primary else level) for name, v in flat.items()}
    order = [primary, *(n for n in judged if n != primary)]
    first = judged[primary]
    return Verdict(first.word, first.effect, first.minimal, first.margin, first.competence,
                   tuple((n, judged[n]) for n in order), primary)  # fmt: skip


def _effect(data: dict) -> Effect:
    sets = [SeedSet(**{k: tuple(v) if isinstance(v, list) else v for k, v in s.items()})
            for s in data["sets"]]  # fmt: skip
    chance = tuple(data["chance"]) if data["chance"] else None
    names = dict(zip(("example_name", "seed_name"), data["names"], strict=True))
    e = Effect(0.0, 0.0, 0.0, data["claimed"], 0, 0, data["reference"], kind=data["kind"],
               sets=tuple(sets), chance=chance, **names)  # fmt: skip
    return e.at(LEVEL)


def pool(records: Sequence[dict]) -> Verdict:
    """The verdict of several runs' ``Verdict.record()`` of one claim, judged as one run of
    all their seeds (each seed set keeps its own test examples). The records must agree in
    the claim's rule: conditions and primary, minimal size or margin, competence checks.

    Shapes: none.
    """
    if not records or not all(isinstance(r, Mapping) for r in records):
        raise TypeError("records must be a non-empty sequence of Verdict.record() dicts")
    first = records[0]
    if "conditions" in first:
        names = [n for n, _ in first["conditions"]]
        for r in records:
            if [n for n, _ in r.get("conditions", [])] != names or r["primary"] != first["primary"]:
                raise ValueError("records of one claim must name the same conditions and primary")
        parts = {n: pool([dict(r["conditions"])[n] for r in records]) for n in names}
        return combine(parts, primary=first["primary"])
    for r in records:
        if "conditions" in r or (r["minimal"], r["margin"]) != (first["minimal"], first["margin"]):
            raise ValueError("records of one claim must share its minimal size or margin")
        if len(r["competence"]) != len(first["competence"]):
            raise ValueError("records of one claim must carry the same competence checks")
    effect = pooled([_effect(r["effect"]) for r in records])
    checks = []
    for i, c in enumerate(first["competence"]):
        parts = [r["competence"][i] for r in records]
        ids = [x for p in parts for x in (p["ids"] or [])]
        checks.append(
            Competence(
                c["task"],
                c["measure"],
                c["threshold"],
                c["higher"],
                tuple(x for p in parts for x in p["values"]),
                tuple(ids) if len(ids) == effect.seeds else None,
                c.get("unit", "seed"),
            )
        )
    return judge(effect, minimal=first["minimal"], margin=first["margin"], competence=checks)


def number_seeds(record: dict, first_seed: int) -> dict:
    """``record`` with its seeds numbered ``first_seed, first_seed + 1, ...`` wherever a
    seed set or competence check does not number them (``runtime.seeds`` numbers the seeds
    of a run from its offset).

    Shapes: none.
    """
    if "conditions" in record:
        return {
            **record,
            "conditions": [[n, number_seeds(r, first_seed)] for n, r in record["conditions"]],
        }
    sets, next_seed = [], first_seed
    for s in record["effect"]["sets"]:  # the sets of one run number its seeds in turn
        ids = s["ids"] or list(range(next_seed, next_seed + len(s["values"])))
        next_seed += len(s["values"])
        sets.append({**s, "ids": ids})
    checks = [
        {**c, "ids": c["ids"] or list(range(first_seed, first_seed + len(c["values"])))}
        for c in record["competence"]
    ]
    return {**record, "effect": {**record["effect"], "sets": sets}, "competence": checks}
