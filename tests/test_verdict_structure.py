"""Every empirical verdict comes from the verdict module, never from a word a cell sets.

In a notebook that follows the rule, no code cell may hold an empirical verdict word
(``reproduced``, ``partly``, ``no clear effect``, ``contradicted``, or an older rule's word) as
a string, except as the right-hand side of a comparison (``assert v.word != "contradicted"``);
the words a cell may give ``claim`` directly are the stated ones (``proved and checked``,
``not at this scale``, ``open``). The notebooks still on the older per-chapter rules are
listed by name: a new notebook must follow the rule.
"""

import ast
import json
from pathlib import Path

import pytest

from multihead.viz.claims import OLDER, STATED, WORDS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
# Notebooks still judged by older per-chapter rules: none (a new notebook must follow the rule).
OLDER_RULES: set[str] = set()
EMPIRICAL = set(WORDS) | set(OLDER)


def set_words(source: str) -> list[str]:
    """The empirical verdict words a cell's code holds other than as a comparison's operand."""
    tree = ast.parse(source)
    compared = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                for sub in ast.walk(side):
                    compared.add(id(sub))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in EMPIRICAL
        and id(node) not in compared
    ]


def claim_words(source: str) -> list[str]:
    """The string verdicts a cell passes to ``claim`` directly."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "claim"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
        ):
            out.append(node.args[1].value)
    return out


def _code_cells(path: Path) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    return [(i, "".join(c["source"])) for i, c in enumerate(code)]


@pytest.mark.parametrize(
    "path", [p for p in NOTEBOOKS if p.stem not in OLDER_RULES], ids=lambda p: p.stem
)
def test_no_cell_sets_an_empirical_verdict_word(path):
    bad = []
    for i, source in _code_cells(path):
        if source.lstrip().startswith(("%", "!")):
            continue
        bad += [f"code cell {i}: sets {w!r}" for w in set_words(source)]
        bad += [
            f"code cell {i}: claim(..., {w!r}) is not a stated word {STATED}"
            for w in claim_words(source)
            if w not in STATED
        ]
    assert not bad, "verdict words set without multihead.analysis.verdict:\n" + "\n".join(bad)


def test_the_structure_check_catches_a_word_set_by_hand():
    assert set_words('verdict = "reproduced" if ok else "partly"') == ["reproduced", "partly"]
    assert set_words('assert v.word != "contradicted"') == []
    assert set_words('x = {"a": "no clear effect"}') == ["no clear effect"]
    assert claim_words('claim("x", "reproduced", "e")') == ["reproduced"]
    assert claim_words('claim("x", judge(e), "e")') == []


def test_the_list_of_notebooks_on_older_rules_names_real_notebooks():
    names = {p.stem for p in NOTEBOOKS}
    assert OLDER_RULES <= names, OLDER_RULES - names
