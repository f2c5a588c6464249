"""Every theorem-like block of a chapter is checked in its notebook.

For each ``:::{prf:theorem|lemma|proposition|corollary}`` of ``book/NN_*.md`` with label ``x``,
the paired ``notebooks/NN_*.ipynb`` must either

* have a code cell containing an ``assert`` statement (found by parsing the cell, not by
  searching the text) whose nearest preceding markdown cell names the label as
  ``{prf:ref}`x` ``; or
* say in a markdown cell, on a line naming ``{prf:ref}`x` ``, that the statement is a
  "definition/trivial" one and why no check is needed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]*_*.md"))  # 04b: the primer
BLOCK = re.compile(
    r"^:::+\{prf:(theorem|lemma|proposition|corollary)\}[^\n]*\n"  # the opening line
    r"(?::[a-z]+:[^\n]*\n)*?:label: (\S+)",  # options, up to the label
    re.M,
)
ANY_LABEL = re.compile(r"^:label: (\S+)", re.M)
REF = re.compile(r"\{prf:ref\}`([^`<>]+)`")


def _labels(chapter: Path) -> list[str]:
    return [m.group(2) for m in BLOCK.finditer(chapter.read_text())]


def _has_assert(source: str) -> bool:
    # Drop IPython magics and shell escapes so that the cell parses as Python.
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return False
    return any(isinstance(node, ast.Assert) for node in ast.walk(tree))


def _checked_and_excused(notebook: Path) -> tuple[set[str], set[str]]:
    nb = nbformat.read(notebook, as_version=4)
    checked: set[str] = set()
    excused: set[str] = set()
    last_md = ""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            last_md = cell.source
            for line in cell.source.splitlines():
                if "definition/trivial" in line:
                    excused.update(REF.findall(line))
        elif cell.cell_type == "code" and _has_assert(cell.source):
            checked.update(REF.findall(last_md))
    return checked, excused


def test_the_label_pattern_finds_the_blocks():
    # guard against a regex that silently finds nothing
    found = sum(len(_labels(c)) for c in CHAPTERS)
    assert found >= 30, f"only {found} theorem-like labels found in book/"
    assert "thm-lowrank-bound" in _labels(ROOT / "book" / "03_low_rank_bottleneck.md")


def test_has_assert_parses_code():
    assert _has_assert("x = 1\nassert x == 1, 'x'")
    assert not _has_assert("# assert nothing\nprint('assert')")
    assert _has_assert("%matplotlib inline\nfor i in range(2):\n    assert i < 2")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_statement_is_checked_in_its_notebook(chapter):
    notebook = ROOT / "notebooks" / f"{chapter.stem}.ipynb"
    assert notebook.exists(), f"{chapter.name} has no notebook {notebook.name}"
    checked, excused = _checked_and_excused(notebook)
    missing = [x for x in _labels(chapter) if x not in checked and x not in excused]
    assert not missing, (
        f"{notebook.name}: no asserting cell after a markdown cell naming {{prf:ref}}`x` "
        f"(nor a 'definition/trivial' note) for {missing}"
    )


def test_notebook_references_name_existing_labels():
    labels = {m for c in CHAPTERS for m in ANY_LABEL.findall(c.read_text())}
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(notebook, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                unknown = set(REF.findall(cell.source)) - labels
                assert not unknown, f"{notebook.name} refers to unknown labels {unknown}"
