"""Pages lead with findings: bookkeeping stays out of the visible prose.

Bookkeeping is what says how a result is checked rather than what it is: seed scopes, mode
provisos, claim ids, environment variables (``BOOKKEEPING`` below). Every chapter page, with
its notebook's markdown cells, and the intro may show at most ``MAX_RATE`` such phrases per
1,000 visible words (``support.prose.visible``: folded blocks, code and math do not count).
The claims page, the teaching guide, the notation page and the references are ledgers by
design and are not counted.
"""

import json
import re
from pathlib import Path

import pytest
from support.prose import visible, words

ROOT = Path(__file__).resolve().parents[1]
MAX_RATE = 2.0
LEDGERS = {"claims", "teaching_guide", "references", "notation"}
BOOKKEEPING = {
    "an older verdict word": r"mixed over (?:seeds|folds)",
    "the book's seeds": r"book.s (?:seeds|run|readings?)|book seeds",
    "seed offsets": (
        r"seed offsets?|offsets? \d{2,}|MULTIHEAD_SEED_OFFSET|other seeds|on any seeds"
        r"|for any seeds"
    ),
    "a claim id": r"\bch\d+b?-[a-z0-9]+(?:-[a-z0-9]+)+",
    "seed noise": r"seed noise|seed range|within (?:the )?noise|beyond the noise|within a step",
    "a mode": r"\b(?:fast|full)[ -]mode",
    "an environment variable": r"MULTIHEAD_[A-Z_]+",
}
PAGES = sorted(p.stem for p in (ROOT / "book").glob("*.md") if p.stem not in LEDGERS)


def page_prose(stem: str) -> str:
    text = visible((ROOT / "book" / f"{stem}.md").read_text())
    notebook = ROOT / "notebooks" / f"{stem}.ipynb"
    if notebook.is_file():
        cells = json.loads(notebook.read_text())["cells"]
        text += "\n" + "\n".join(
            visible("".join(c["source"])) for c in cells if c["cell_type"] == "markdown"
        )
    return text


def hits(text: str) -> list[str]:
    return [m.group(0) for p in BOOKKEEPING.values() for m in re.finditer(p, text, re.I)]


@pytest.mark.parametrize("stem", PAGES)
def test_bookkeeping_stays_folded(stem):
    text = page_prose(stem)
    found = hits(text)
    rate = 1000 * len(found) / max(words(text), 1)
    assert rate <= MAX_RATE, f"{stem}: {len(found)} per {words(text)} words: {found}"


def test_the_count_sees_what_a_reader_sees():
    page = (
        "Seeds 0-4 in fast mode agree.\n\n"
        ":::{admonition} How this is checked\n:class: dropdown\nfull mode, other seeds\n"
        "```python\nMULTIHEAD_FAST=1\n```\n:::\n\n"
        "```{math}\nch3-key-size\n```\n$$\nfast mode\n$$\n"
        "<details>for any seeds</details>\nThe value {glue:text}`nb.ipynb::x:s` holds."
    )
    assert hits(visible(page)) == ["fast mode"]
    assert "value  N  holds" in visible(page)
    # a verdict word shown by its role is what the reader sees, not the claim id inside it
    assert hits(visible("It holds: {word}`ch2-copies-worse`.")) == []
    assert hits(visible("An id: ch2-copies-worse.")) == ["ch2-copies-worse"]
    assert words("a fast mode of 10 steps") == 4
