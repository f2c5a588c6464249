"""``claim``: record a tested claim's verdict and evidence for the book's claims page.

Every claim the course tests has a row on ``book/claims.md``: its id, the claim, where it
comes from, the chapter, the verdict, the evidence and the assert behind it. The verdict and
the evidence cells are pasted from the notebook that tests the claim, so neither is typed by
hand. A notebook computes the verdict from its replicates, asserts what it teaches, and calls

    claim("drophead-accuracy", verdict, f"DropHead {spread(drop)} vs dropout {spread(best)}")

which glues ``claim_<id>_verdict`` and ``claim_<id>_evidence`` (ids use ``-``; the glue
names use ``_``) and prints one line. The page pastes them with the ``:s`` format spec.
An empirical verdict is a ``Verdict`` from ``multihead.analysis.verdict`` (the course's one
rule), and its effect and interval join the evidence; ``proved and checked``, ``not at this
scale`` and ``open`` are given as words (*not at this scale* is also what ``judge`` computes
where the baseline did not learn the task). A ``Verdict`` is also glued as
``claim_<id>_record``: the per-seed effects its word rests on (``Verdict.record()``, seeds
numbered from the run's offset), which the seed sweep pools with other seed sets into the word
the book publishes. ``claim`` prints that published word (``book_word``, read from the
package's ``book_verdicts.json``, which ``python -m tools.verdicts --publish`` writes) beside
the run's own, so a reader who re-runs a notebook sees both. Where ``MULTIHEAD_VERDICT_LOG``
names a file, every claim also appends one JSON line to it (the seed sweep reads them).

Shapes: none.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

from multihead.analysis.verdict import NOT_AT_THIS_SCALE, WORDS, Verdict, number_seeds
from multihead.core import runtime
from multihead.viz.glue import glue

# Words given as words: a theorem's check, a claim our models cannot test, an open question.
STATED = ("proved and checked", NOT_AT_THIS_SCALE, "open")
# Words of the older per-chapter rules, still given as words by the notebooks that use them.
# The words of the retired per-chapter rules: no claim may give them any more.
OLDER = ("mixed over seeds", "not reproduced")
VERDICTS = (*STATED, *WORDS)
LOG_ENV = "MULTIHEAD_VERDICT_LOG"
BOOK_WORDS = "book_verdicts.json"  # package data: the word the book publishes per claim
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def glue_name(claim_id: str, field: str) -> str:
    """The glue name of a claim's ``field`` ("verdict" or "evidence")."""
    check_claim_id(claim_id)
    if field not in ("verdict", "evidence", "record"):
        raise ValueError(f"field must be 'verdict', 'evidence' or 'record', got {field!r}")
    return f"claim_{claim_id.replace('-', '_')}_{field}"


def check_claim_id(claim_id: object) -> str:
    if not isinstance(claim_id, str) or not _ID.match(claim_id):
        raise ValueError(
            f"claim_id must be lowercase words joined by '-' (e.g. 'drophead-accuracy'), "
            f"got {claim_id!r}"
        )
    return claim_id


def claim(
    claim_id: str,
    verdict: Verdict | str,
    evidence: str,
    *,
    fmt: str = "+.3f",
    unit: str = "",
    fixed_data: bool = False,
) -> None:
    """Glue ``verdict`` and ``evidence`` (one line of text, with the seed count) for the
    claims page, and print them. ``verdict`` is a ``Verdict`` (its effect, formatted with
    ``fmt`` and ``unit``, is added to the evidence) or a word of ``VERDICTS``.

    ``fixed_data=True``: the replicates are folds of data that no seed offset draws again
    (sentences written for the course), so another seed set only cuts the same data into
    other folds. Its record numbers the folds from 0 in every run, so that the folds of two
    seed sets overlap and never pool (``analysis.verdict.pool`` refuses a seed counted
    twice): the published word rests on one run's folds, and another set's word shows how
    much the cut moves it.

    Shapes: none.
    """
    check_claim_id(claim_id)
    if not isinstance(fixed_data, bool):
        raise TypeError(f"fixed_data must be True or False, got {fixed_data!r}")
    if isinstance(verdict, Verdict):
        word = verdict.word
    elif isinstance(verdict, str) and verdict in VERDICTS:
        # A stated word (tests/test_verdict_structure.py fails a notebook that gives a
        # computed word by hand).
        word = verdict
    else:
        raise ValueError(f"verdict must be a Verdict or one of {VERDICTS}, got {verdict!r}")
    if not isinstance(evidence, str) or not evidence.strip() or "\n" in evidence:
        raise ValueError(f"evidence must be one non-empty line of text, got {evidence!r}")
    if isinstance(verdict, Verdict):
        grounds = verdict.describe(fmt, unit)
        evidence += f"; {grounds}" if verdict.conditions else f"; effect {grounds}"
    if "|" in evidence:
        raise ValueError("evidence must not contain '|' (it sits in a table cell)")
    glue(glue_name(claim_id, "verdict"), word, display=False)
    glue(glue_name(claim_id, "evidence"), evidence, display=False)
    record = None
    if isinstance(verdict, Verdict) and verdict.effect is not None:
        record = number_seeds(verdict.record(), 0 if fixed_data else runtime.seed_offset())
        glue(glue_name(claim_id, "record"), json.dumps(record), display=False)
    print(f"claim {claim_id}: {word} ({evidence})")
    if record is not None:  # a computed word: the reader's run beside the book's
        print(f"    {_beside_the_book(claim_id, word)}")
    log = os.environ.get(LOG_ENV)
    if log:
        row: dict = {"claim": claim_id, "word": word, "mode": runtime.mode()}
        row["offset"] = runtime.seed_offset()
        if record is not None:
            row["record"] = record
        with open(log, "a") as f:
            f.write(json.dumps(row) + "\n")


@lru_cache(maxsize=1)
def book_words() -> dict:
    """``{claim id: {"word": ..., "basis": ...}}``: the word the book publishes per claim
    (pooled over its seed sets), from the package data the seed sweep writes; empty where the
    package has none.

    Shapes: none.
    """
    try:
        text = resources.files("multihead.viz").joinpath(BOOK_WORDS).read_text()
    except (FileNotFoundError, ModuleNotFoundError):
        return {}
    return json.loads(text)


def _beside_the_book(claim_id: str, word: str) -> str:
    """One line: this run's word beside the word the book publishes for ``claim_id``."""
    run = f"this run ({runtime.mode()} mode, seed offset {runtime.seed_offset()}): {word}"
    book = book_words().get(claim_id)
    if book is None:
        return f"{run}; the book has no word for this claim yet"
    return f"{run}; the book ({book['basis']}): {book['word']}"


def spread(values: Sequence[float], fmt: str = ".3f", unit: str = "seed") -> str:
    """``"mean (min to max, n seeds)"`` of replicate values, e.g. ``0.312 (0.301 to 0.320,
    5 seeds)``; one value reads ``0.312 (1 seed)``. ``unit`` names a replicate when it is not
    a seed (``"fold"``, ``"layer-seed pair"``); its plural adds an "s". ``fmt="d"`` is for
    counts: the extremes print as integers and so does the mean when it is whole
    (``"0 (0 to 0, 5 seeds)"``, ``"1.4 (0 to 3, 5 seeds)"``).

    Shapes: values (n,).
    """
    if isinstance(values, (str, bytes)):
        raise TypeError("values must be a sequence of numbers, not a string")
    try:
        vals = [float(v) for v in values]
    except (TypeError, ValueError) as err:
        raise TypeError(f"values must be a sequence of numbers: {err}") from None
    if not vals:
        raise ValueError("values is empty: pass one value per seed")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"values must be finite, got {vals}")
    if not isinstance(fmt, str):
        raise TypeError(f"fmt must be a format spec str, got {type(fmt).__name__}")
    if fmt == "d":
        if not all(v.is_integer() for v in vals):
            raise ValueError(f"fmt='d' is for counts, got {vals}")
        whole = sum(vals) % len(vals) == 0
        vals, fmt = [int(v) for v in vals], "d"
        mean = f"{sum(vals) // len(vals)}" if whole else f"{sum(vals) / len(vals):.1f}"
        return _spread_text(mean, vals, fmt, unit)
    try:
        mean = format(sum(vals) / len(vals), fmt)
    except ValueError:
        raise ValueError(f"fmt={fmt!r} is not a float format spec") from None
    return _spread_text(mean, vals, fmt, unit)


def _spread_text(mean: str, vals: list, fmt: str, unit: str) -> str:
    if not isinstance(unit, str) or not unit.strip():
        raise TypeError(f"unit must be a non-empty str such as 'fold', got {unit!r}")
    if len(vals) == 1:
        return f"{mean} (1 {unit})"
    return f"{mean} ({min(vals):{fmt}} to {max(vals):{fmt}}, {len(vals)} {unit}s)"
