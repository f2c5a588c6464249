"""The claims page: every row's evidence is pasted from a notebook's glue and its verdict is
the published word of a claim that notebook records, every claim a notebook records has a
row, and every chapter links to its rows."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from multihead.viz.claims import VERDICTS, glue_name

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "claims.md"
PUBLISHED = ROOT / "src" / "multihead" / "viz" / "book_verdicts.json"
GLUE = re.compile(r"\{glue:text\}`\.\./notebooks/([\w]+)\.ipynb::(claim_\w+_(verdict|evidence)):s`")
# A row is | claim | source | verdict |. The claim cell: the id in small type, the claim, and
# the evidence and the assert behind it folded into a <details> element.
CLAIM = re.compile(
    r'<span class="claim-id">(?P<id>[a-z0-9-]+)</span><br>(?P<claim>.+?) '
    r"<details><summary>evidence</summary>(?P<evidence>\S+) <br>"
    r"<em>Backed by</em>: (?P<backed>.+)</details>"
)


def _rows() -> list[tuple[str, str, list[str]]]:
    """(chapter number, claim id, cells) for every table row of the page; the cells are
    [id, claim, source, verdict, evidence, backed by], read from the three columns."""
    rows, chapter = [], None
    for line in PAGE.read_text().splitlines():
        if m := re.match(r"\(claims-ch(\d+)\)=", line):
            chapter = m.group(1)
        if chapter and line.startswith("|") and not line.startswith(("| claim |", "|---")):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            assert len(cells) == 3, f"expected | claim | source | verdict |, got {line[:80]}"
            m = CLAIM.fullmatch(cells[0])
            assert m, f"claim cell not in the page's form: {cells[0][:120]}"
            rows.append((chapter, m["id"], [m["id"], m["claim"], cells[1], cells[2],
                                            m["evidence"], m["backed"]]))  # fmt: skip
    return rows


@functools.cache
def _glued(stem: str) -> dict[str, str]:
    nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
    out = {}
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                out[name] = o["data"].get("application/papermill.record/text/plain", "")
    return out


def test_every_row_pastes_its_evidence_and_shows_the_published_word():
    rows = _rows()
    assert rows, "the claims page has no rows"
    ids = [cid for _, cid, _ in rows]
    assert len(ids) == len(set(ids)), "a claim id appears twice on the claims page"
    published = json.loads(PUBLISHED.read_text())
    for chapter, cid, cells in rows:
        assert len(cells) == 6, f"row {cid}: expected 6 fields, got {len(cells)}"
        assert all(cells), f"row {cid}: an empty field"
        assert cells[3] == f"{{verdict}}`{cid}`", f"row {cid}: the verdict cell is {{verdict}}`id`"
        m = GLUE.fullmatch(cells[4])
        assert m, f"row {cid}: the evidence cell must be one {{glue:text}} reference"
        stem, name = m.group(1), m.group(2)
        assert stem.startswith(chapter), f"row {cid} sits under chapter {chapter}"
        assert name == glue_name(cid, "evidence"), f"row {cid}: glue name {name}"
        glued = _glued(stem)
        assert name in glued, f"row {cid}: {stem} does not glue {name}"
        word = glued.get(glue_name(cid, "verdict"), "").strip("'")
        assert word in VERDICTS, f"row {cid}: {stem} glues no verdict word ({word!r})"
        assert published.get(cid, {}).get("word") in VERDICTS, f"row {cid}: no published word"


def test_every_row_states_where_its_minimal_size_comes_from():
    # A computed word rests on a minimal size or margin; the row's "Backed by" names it.
    for _, cid, cells in _rows():
        word = _glued_word(cid)
        if word in ("proved and checked", "open"):
            continue
        backed = cells[5]
        assert "minimal size" in backed or "margin" in backed or "bar" in backed, (
            f"row {cid}: its Backed by names no minimal size or margin"
        )


def _glued_word(cid: str) -> str:
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        glued = _glued(nb.stem)
        if glue_name(cid, "verdict") in glued:
            return glued[glue_name(cid, "verdict")].strip("'")
    return ""


def test_every_recorded_claim_has_a_row():
    on_page = {glue_name(cid, "verdict") for _, cid, _ in _rows()}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for name in _glued(nb.stem):
            if name.startswith("claim_") and name.endswith("_verdict"):
                assert name in on_page, f"{nb.name} records {name}, which has no row"


CHAPTER_PAGES = sorted((ROOT / "book").glob("[0-9][0-9]*_*.md"))


@pytest.mark.parametrize("page", CHAPTER_PAGES, ids=lambda p: p.stem)
def test_every_chapter_with_claims_links_to_its_rows(page):
    chapter = page.stem.split("_")[0]
    if not any(ch == chapter for ch, _, _ in _rows()):
        pytest.skip(f"chapter {chapter} has no rows")
    assert f"claims-ch{chapter}" in page.read_text(), f"{page.name} never links to its rows"


def test_the_page_lists_at_least_25_claims():
    assert len(_rows()) >= 25, f"the claims page has {len(_rows())} rows"
