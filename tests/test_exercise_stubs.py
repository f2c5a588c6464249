"""The exercise stubs at the end of the notebooks: each one, run as written, fails with its
checker's hint; with the reference answer (tests/exercise_answers.py) put in place of the
stub, the same checker call passes. Plus the bookkeeping that ties stubs to chapter pages."""

import ast
import re
from pathlib import Path

import exercise_answers
import nbformat
import pytest
import torch

import multihead
from multihead import exercises

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
TAG = re.compile(r"^\*[★☆]{3} · \d+ min\*$")
HINT = "fill in the function body first"


def chapter_page(notebook: Path) -> Path:
    return ROOT / "book" / f"{notebook.stem}.md"


def page_exercises(page: Path) -> list[tuple[str, str, str, str]]:
    """(number, title, label, first body line) of each exercise, in page order."""
    n = re.match(r"0*(\d+[a-z]?)_", page.name).group(1)  # "4b" for the primer
    found = re.findall(
        r":::\{exercise\} ([^\n]*)\n:label: (ex-[\w-]+)\n\n([^\n]*)", page.read_text()
    )
    return [(f"{n}.{k}", title, label, first) for k, (title, label, first) in enumerate(found, 1)]


def stubs(notebook: Path) -> list[tuple[nbformat.NotebookNode, nbformat.NotebookNode]]:
    """(markdown above, stub cell) for each cell tagged exercise-stub."""
    cells = nbformat.read(notebook, as_version=4).cells
    return [
        (cells[i - 1], cell)
        for i, cell in enumerate(cells)
        if "exercise-stub" in cell.metadata.get("tags", [])
    ]


STUBS = [
    pytest.param(nb, cell.source, id=f"{nb.stem[:2]}-{cell.id}")
    for nb in NOTEBOOKS
    for _, cell in stubs(nb)
]


@pytest.fixture(scope="module")
def notebook_variables():
    """The variables a stub may take from its notebook: notebook 5's `pattern` and `gold`
    (random patterns over a small corpus: the checker finds the best head itself)."""
    from multihead.analysis.roles import Gold
    from multihead.tasks.corpus import gold_tensors
    from multihead.tasks.translation import translation_corpus

    sentences = translation_corpus(n_sentences=400).valid[:30]
    gold = Gold(**gold_tensors(sentences))
    gen = torch.Generator().manual_seed(0)
    n = gold.seq_len
    pattern = (3 * torch.randn(2, len(sentences), 4, n, n, generator=gen)).softmax(-1)
    return {"pattern": pattern, "gold": gold}


def split(source: str) -> tuple[str, str, list[str]]:
    """The stub's definitions, its final checker call, and the names it defines."""
    tree = ast.parse(source)
    *body, call = tree.body
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call), "end with the check"
    assert call.value.func.id.startswith("check_"), ast.unparse(call)
    defined = [s.name for s in body if isinstance(s, (ast.FunctionDef, ast.ClassDef))]
    assert defined, "a stub defines the function (or class) the reader fills in"
    return ast.unparse(ast.Module(body, [])), ast.unparse(call), defined


@pytest.mark.parametrize(("notebook", "source"), STUBS)
def test_stub_fails_with_the_hint_and_passes_with_the_answer(
    notebook, source, notebook_variables, capsys
):
    definitions, call, defined = split(source)
    namespace = dict(notebook_variables)
    with pytest.raises(AssertionError, match=HINT):
        exec(compile(source, f"{notebook.name} stub", "exec"), namespace)

    namespace = dict(notebook_variables)
    exec(compile(definitions, f"{notebook.name} stub", "exec"), namespace)
    for name in defined:
        namespace[name] = getattr(exercise_answers, name)
    result = eval(compile(call, f"{notebook.name} check", "eval"), namespace)
    assert result.startswith("Correct"), result
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_every_coding_exercise_has_a_tagged_and_titled_stub(notebook):
    page = chapter_page(notebook)
    exercises_section = page.read_text().split("## Exercises", 1)[1]
    on_page = set(re.findall(r"check_\w+", exercises_section))
    pairs = stubs(notebook)
    in_notebook = {name for _, cell in pairs for name in re.findall(r"check_\w+", cell.source)}
    assert pairs, f"{notebook.name} has no exercise stub"
    assert on_page <= in_notebook, f"{notebook.name} lacks stubs for {on_page - in_notebook}"
    numbered = {title: (number, first) for number, title, _, first in page_exercises(page)}
    for markdown, cell in pairs:
        assert "raises-exception" in cell.metadata["tags"], "nbval must accept the hint"
        assert not any(out.get("output_type") == "error" for out in cell.get("outputs", []))
        head, _, rest = markdown.source.partition("\n")
        m = re.fullmatch(r"### Exercise (\d+[a-z]?\.\d+): (.*)", head)
        assert m, f"{notebook.name}: {head!r} should read '### Exercise N.k: <title>'"
        number, first = numbered[m.group(2)]
        assert m.group(1) == number, f"{notebook.name}: {head!r} is exercise {number} on the page"
        assert first in rest, f"{notebook.name}: {head!r} needs the page's tag {first!r}"


def test_every_exercise_on_every_page_has_a_difficulty_and_time_tag():
    pages = sorted((ROOT / "book").glob("[0-9][0-9]*_*.md"))
    assert len(pages) == 13  # twelve chapters and the primer
    for page in pages:
        found = page_exercises(page)
        assert len(found) >= 3, page.name
        for number, title, _, first in found:
            assert TAG.match(first), f"{page.name} exercise {number} ({title}): tag {first!r}"


def test_answers_are_not_on_the_students_import_path():
    answers = {n for n in vars(exercise_answers) if not n.startswith("_")}
    answers -= {"annotations", "math", "torch", "nn"}
    for module in (multihead, exercises):
        leaked = answers & set(dir(module))
        assert not leaked, f"{module.__name__} exports answers {sorted(leaked)}"
    for nb in NOTEBOOKS:
        text = nb.read_text()
        assert "exercise_answers" not in text
        assert not re.search(r"(?<!check_)mha_flops", text), f"{nb.name}: exercise 1.3's answer"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_markdown_reads_outside_the_book(notebook):
    """Colab and Jupyter do not know MyST citation roles or the book's relative links."""
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type == "markdown":
            assert "{cite" not in cell.source, f"{notebook.name}: {cell.source[:60]!r}"
            assert "](../book/" not in cell.source, f"{notebook.name}: {cell.source[:60]!r}"
        assert cell.source.strip(), f"{notebook.name} has an empty {cell.cell_type} cell"
        assert "placeholder" not in cell.source.lower(), f"{notebook.name}: a placeholder cell"
