"""Structure checks of the course, the book build (warnings are errors) and lint."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from tools import nbtools

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = nbtools.notebooks(ROOT)
CHAPTERS = sorted((ROOT / "book").glob("*.md"))


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries:
            files.append(entry["file"])
            walk(entry.get("sections", []))

    for part in toc["parts"]:
        walk(part["chapters"])
    return files


def test_every_notebook_and_chapter_is_in_the_toc():
    listed = set(_toc_files())
    for path in NOTEBOOKS + CHAPTERS:
        assert str(path.relative_to(ROOT).with_suffix("")) in listed, f"{path} not in _toc.yml"
    for entry in listed:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), entry


def test_chapters_and_notebooks_pair_up():
    numbered = {p.stem for p in CHAPTERS if re.match(r"\d\d[a-z]?_", p.stem)}
    assert numbered == {p.stem for p in NOTEBOOKS}


def test_setup_cells_are_identical_and_current():
    expected = nbtools.setup_source(ROOT)
    for path in NOTEBOOKS:
        first = nbformat.read(path, as_version=4).cells[0]
        assert first.cell_type == "code" and first.source == expected, (
            f"{path.name}: run `python -m tools.nbtools sync`"
        )
        assert first.metadata.get("tags") == nbtools.SETUP_TAGS, f"{path.name}: setup cell tag"


def test_setup_cell_installs_from_the_configured_repository():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert f"git+{url}" in nbtools.setup_source(ROOT)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_size_outputs_and_metadata(path):
    assert path.stat().st_size < 2_000_000, f"{path.name} is over 2 MB"
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert any(c["outputs"] for c in code), f"{path.name} has no committed outputs"
    for cell in code:
        for out in cell["outputs"]:
            assert out["output_type"] != "error", f"{path.name} has an error output"
            text = "".join(out.get("text", ""))
            assert "mode: fast" not in text, f"{path.name}: commit a full-mode run"
    assert nb["metadata"].get("accelerator") == "GPU"
    assert any("assert " in "".join(c["source"]) for c in code), f"{path.name} asserts nothing"


def test_sync_is_idempotent(tmp_path):
    for name in ("_config.yml",):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(1)")]
    target = tmp_path / "notebooks" / "99_demo.ipynb"
    nbformat.write(nb, target)
    assert nbtools.sync(tmp_path) == [target]
    assert nbtools.sync(tmp_path) == []
    cells = nbformat.read(target, as_version=4).cells
    assert cells[0].source == nbtools.setup_source(tmp_path) and cells[1].source == "print(1)"


def test_requirements_pin_everything():
    lines = [
        line.strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[-1] == "-e ."
    assert "torch==2.13.0" in lines
    assert all("==" in line for line in lines[:-1]), "pin every requirement exactly"


def test_ruff_lint_and_format():
    targets = ["src", "tests", "tools", "benchmarks", "book/_ext"]
    ruff = [sys.executable, "-m", "ruff"]
    lint = subprocess.run(ruff + ["check", *targets], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = subprocess.run(
        ruff + ["format", "--check", *targets], cwd=ROOT, capture_output=True, text=True
    )
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


@pytest.mark.slow
def test_book_builds_without_warnings(editions):
    # -W -n --keep-going: any Sphinx warning fails the build (the browser tests reuse it)
    html = editions.html("reader")
    chapter = (html / "book" / "01_mha_from_scratch.html").read_text()
    assert "proof" in chapter and "colab.research.google.com" in chapter
    assert "<img" in chapter  # figures pasted from the notebook
    notebook_page = (html / "notebooks" / "01_mha_from_scratch.html").read_text()
    assert "colab.research.google.com" in notebook_page  # the launch button


def test_no_page_or_notebook_refers_readers_to_notes_they_do_not_have():
    pattern = re.compile(r"\b(source|the) notes?\b", re.IGNORECASE)
    for path in CHAPTERS + NOTEBOOKS:
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
        found = pattern.findall(text)
        assert not found, f"{path.name} mentions {found}: cite the paper or the claims instead"


# Notebooks whose title is still to be fixed, by the one editing them; remove each entry
# when its notebook is done (01: "Notebook 1: Multi-head attention from scratch", 03:
# "Notebook 3: The low-rank bottleneck").
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_title_names_its_number_and_chapter(nb):
    """The first markdown cell's heading is "Notebook N: <the chapter's title>", N as in the
    file name (1, 2, ..., 4b, ...)."""
    number = nb.stem.split("_")[0].lstrip("0")
    chapter = (ROOT / "book" / f"{nb.stem}.md").read_text()
    title = re.sub(r"^\d+\.\s+", "", re.search(r"^# (.+)$", chapter, re.M).group(1))
    cells = json.loads(nb.read_text())["cells"]
    first = next("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    heading = first.splitlines()[0]
    assert heading == f"# Notebook {number}: {title}", f"{nb.name}: {heading!r}"


def test_visible_notebook_code_fits_the_page():
    # The rendered page shows about 88 columns of code at 1,280 px (tests/test_browser.py
    # measures it); a longer line scrolls sideways. ruff wraps code at 88 but not comments or
    # strings, so this holds every visible line to it in seconds.
    import json

    wide = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            hidden = {"remove-cell", "remove-input"} & set(cell["metadata"].get("tags", []))
            if cell["cell_type"] != "code" or hidden:
                continue
            wide += [
                f"{path.name} cell {i}: {line[:40]}..."
                for line in "".join(cell["source"]).splitlines()
                if len(line) > 88
            ]
    assert not wide, "code lines over 88 columns:\n" + "\n".join(wide)
