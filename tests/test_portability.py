"""What a notebook needs to run anywhere: only declared dependencies, checked outputs that
roundoff cannot change, no frozen progress-bar widgets, no training pinned to the CPU."""

import ast
import json
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import nbformat
import pytest

from tools import nbtools

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = nbtools.notebooks(ROOT)
# What runs the notebooks: Jupyter itself (Colab and every Jupyter install provide it).
KERNEL_MODULES = {"IPython", "ipykernel"}


def _code_cells(path):
    nb = nbformat.read(path, as_version=4)
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def _python(source: str) -> str:
    """A cell's source without IPython magics and shell escapes."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def _top_level_imports(tree: ast.AST, skip_guarded: bool = False) -> set[str]:
    guarded: set[int] = set()
    if skip_guarded:  # imports inside `try: ... except ImportError` are optional
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in {"ImportError", "ModuleNotFoundError"}
                for h in node.handlers
            ):
                guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _declared_distributions() -> set[str]:
    """The package's dependencies plus the extra the setup cell installs, normalised."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = re.search(r"multihead\[(\w+)\]", nbtools.setup_source(ROOT)).group(1)
    specs = project["dependencies"] + project["optional-dependencies"][extra]
    return {
        re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in specs
    }


def _undeclared(modules: set[str]) -> set[str]:
    providers = metadata.packages_distributions()
    declared = _declared_distributions()
    missing = set()
    for module in modules - set(sys.stdlib_module_names) - KERNEL_MODULES - {"multihead"}:
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists & declared:
            missing.add(f"{module} (from {sorted(dists) or 'no installed distribution'})")
    return missing


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_imports_are_declared_dependencies(path):
    modules = set()
    for _, cell in _code_cells(path)[1:]:  # the setup cell installs; it imports stdlib only
        modules |= _top_level_imports(ast.parse(_python(cell.source)))
    assert not _undeclared(modules), (
        f"{path.name} imports modules that neither the package's dependencies nor the setup "
        f"cell's extra provide: {sorted(_undeclared(modules))}"
    )


NEEDS_TRANSFORMERS = "transformers (the pretrained extra) is absent, so its distribution is unknown"


def test_package_imports_are_declared_dependencies():
    pytest.importorskip("transformers", reason=NEEDS_TRANSFORMERS)
    modules = set()
    for path in (ROOT / "src" / "multihead").rglob("*.py"):
        modules |= _top_level_imports(ast.parse(path.read_text()), skip_guarded=True)
    assert not _undeclared(modules), f"the package imports {sorted(_undeclared(modules))}"


def test_declared_dependencies_check_can_fail():
    pytest.importorskip("transformers", reason=NEEDS_TRANSFORMERS)
    assert _undeclared({"yaml"}), "pyyaml is not declared: the check must say so"
    assert not _undeclared({"torch", "numpy", "transformers", "os"})


# --- checked outputs -------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def roundoff_digits(text: str) -> list[str]:
    """Numbers in ``text`` printed with digits that roundoff can change: more than four
    significant digits after a decimal point, or an exponent with a two-digit mantissa
    (``1.55e-11``; a constant such as ``1e-08`` passes)."""
    flagged = []
    for match in _NUMBER.finditer(text):
        mantissa, _, exponent = match.group(0).lstrip("+-").lower().partition("e")
        whole, _, frac = mantissa.partition(".")
        significant = len((whole + frac).lstrip("0"))
        if (exponent and significant >= 2) or (frac and significant > 4):
            flagged.append(match.group(0))
    return flagged


def _output_texts(cell):
    for out in cell.outputs:
        if "text" in out:
            yield out["text"]
        for mime, value in out.get("data", {}).items():
            if mime.endswith("text/plain") and isinstance(value, str):
                yield value


def test_roundoff_digits_flags_what_it_should():
    assert roundoff_digits("max error 1.55e-11, tol 1e-08") == ["1.55e-11"]
    assert roundoff_digits("22.713216 M") == ["22.713216"]
    assert roundoff_digits("acc 0.973, loss 1.25, 12 heads, step 2000, 3.5e+02") == ["3.5e+02"]
    assert roundoff_digits("head (3, 11): 0.5") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_checked_outputs_show_no_roundoff_digits(path):
    bad = []
    for i, cell in _code_cells(path):
        if "NBVAL_CHECK_OUTPUT" in cell.source:
            for text in _output_texts(cell):
                bad += [f"cell {i}: {number}" for number in roundoff_digits(text)]
    assert not bad, (
        f"{path.name}: checked outputs (NBVAL_CHECK_OUTPUT) must not show digits that BLAS "
        f"roundoff or the thread count can change; round to what the claim needs: {bad}"
    )


# --- progress bars and devices ----------------------------------------------------------------

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_frozen_widgets_in_committed_outputs(path):
    nb = json.loads(path.read_text())
    assert "widgets" not in nb["metadata"], f"{path.name}: saved widget state in the metadata"
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            assert WIDGET_MIME not in out.get("data", {}), (
                f"{path.name} cell {i}: a saved widget (a progress bar renders frozen in the book)"
            )


_TEXT_BAR = re.compile(r"\d+/\d+ \[[\d:<?]+")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_progress_bar_text_in_committed_outputs(path):
    for i, cell in _code_cells(path):
        for text in _output_texts(cell):
            assert not _TEXT_BAR.search(text), f"{path.name} cell {i}: a progress bar was saved"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_progress_bars_come_from_the_package(path):
    for i, cell in _code_cells(path):
        assert "tqdm" not in _top_level_imports(ast.parse(_python(cell.source))), (
            f"{path.name} cell {i}: use multihead.core.progress.progress, which draws no "
            "widget when the notebook is executed to be saved"
        )


_CPU = re.compile(r"""device\s*=\s*["']cpu["']|torch\.device\(\s*["']cpu["']\s*\)|\.cpu\(\)\s*$""")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_do_not_pin_work_to_the_cpu(path):
    """Models and data follow `runtime.device()`; a line that puts work on the CPU on
    purpose (an exact float64 check, say) says so with `# CPU on purpose`, at its end or on
    a comment line just above it."""
    for i, cell in _code_cells(path):
        lines = cell.source.splitlines()
        for above, line in zip(["", *lines], [*lines, ""], strict=True):
            if re.search(r"""device\s*=\s*["']cpu["']|torch\.device\(\s*["']cpu["']""", line):
                marked = above.lstrip().startswith("#") and "CPU on purpose" in above
                assert marked or "CPU on purpose" in line, (
                    f"{path.name} cell {i}: `{line.strip()}` pins work to the CPU; use "
                    "runtime.device() (or mark the line `# CPU on purpose: <why>`)"
                )


def test_strip_widgets_keeps_fallbacks_and_drops_bare_bars():
    nb = nbformat.v4.new_notebook()
    bar = nbformat.v4.new_output("display_data", data={WIDGET_MIME: {"model_id": "a"}})
    explorer = nbformat.v4.new_output(
        "display_data",
        data={WIDGET_MIME: {"model_id": "b"}, "image/png": "iVBOR", "text/plain": "x"},
    )
    text = nbformat.v4.new_output("stream", text="done\n")
    nb.cells = [nbformat.v4.new_code_cell("f()", outputs=[bar, explorer, text])]
    nb.metadata["widgets"] = {"state": {}}
    assert nbtools.strip_widgets(nb) == 2
    outs = nb.cells[0].outputs
    assert [o.output_type for o in outs] == ["display_data", "stream"]
    assert set(outs[0].data) == {"image/png", "text/plain"} and "widgets" not in nb.metadata


def test_progress_modes(monkeypatch):
    from multihead.core.progress import progress, progress_mode

    monkeypatch.setenv("MULTIHEAD_PROGRESS", "off")
    bar = progress(range(3), desc="x")
    assert bar.disable and list(bar) == [0, 1, 2]
    bar.set_postfix(loss="1")  # callable whether or not a bar is drawn
    monkeypatch.setenv("MULTIHEAD_PROGRESS", "text")
    from tqdm.std import tqdm as text_tqdm

    assert type(progress(range(3), disable=True)) is text_tqdm
    monkeypatch.setenv("MULTIHEAD_PROGRESS", "widgets please")
    with pytest.raises(ValueError, match="MULTIHEAD_PROGRESS"):
        progress_mode()
    monkeypatch.delenv("MULTIHEAD_PROGRESS")
    assert progress_mode() == "auto"
    with pytest.raises(TypeError, match="desc"):
        progress(range(3), desc=3)
    with pytest.raises(TypeError, match="disable"):
        progress(range(3), disable="yes")
