"""The wheel a student installs holds the package and nothing else: every file is under
``multihead/`` or its ``.dist-info``, nothing of the repository's ``tools/`` or ``tests/``,
and every module a notebook imports is in it."""

import ast
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "multihead"


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> list[str]:
    """The file list of the wheel built from a copy of the checkout (a build in place would
    leave build/ behind, whose stale files a later build packs too)."""
    pytest.importorskip("setuptools", minversion="77")  # the backend of pyproject.toml
    folder = tmp_path_factory.mktemp("wheel")
    checkout = folder / "checkout"
    skip = shutil.ignore_patterns(".*", "_build", "build", "*.egg-info", "__pycache__")
    shutil.copytree(ROOT, checkout, ignore=skip)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run(
        [*cmd, "-w", str(folder / "dist"), str(checkout)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (folder / "dist").glob("multihead-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _notebook_imports() -> dict[str, set[str]]:
    """Notebook name -> the ``multihead`` modules its code cells import: ``import a.b``
    and ``from a.b import c`` give ``a.b``, and ``a.b.c`` too where that is a module of
    ``src/`` (``from multihead import exercises``)."""
    found = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        modules = set()
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            lines = "".join(cell["source"]).splitlines()
            code = "\n".join("" if s.lstrip().startswith(("%", "!")) else s for s in lines)
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.Import):
                    modules |= {a.name for a in node.names if a.name.split(".")[0] == "multihead"}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    if node.module.split(".")[0] != "multihead":
                        continue
                    modules.add(node.module)
                    for alias in node.names:
                        sub = PKG.parent.joinpath(*node.module.split("."), alias.name)
                        if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists():
                            modules.add(f"{node.module}.{alias.name}")
        found[path.name] = modules
    return found


def _in_wheel(module: str, files: set[str]) -> bool:
    path = module.replace(".", "/")
    return f"{path}.py" in files or f"{path}/__init__.py" in files


@pytest.mark.slow  # pip builds the wheel once for both: about 6 s on two cores
def test_the_wheel_holds_the_package_and_nothing_else(wheel_files):
    print("\n".join(wheel_files))  # shown with pytest -s
    outside = [
        name
        for name in wheel_files
        if not name.startswith("multihead/")
        and not (name.startswith("multihead-") and name.split("/")[0].endswith(".dist-info"))
    ]
    assert not outside, f"files outside the package: {outside}"
    tooling = [name for name in wheel_files if "/tools/" in f"/{name}" or "/tests/" in f"/{name}"]
    assert not tooling, f"repository tooling in the wheel: {tooling}"
    # the whole package is there: every module of src/ and the pretrained model's data
    expected = {p.relative_to(PKG.parent).as_posix() for p in PKG.rglob("*.py")}
    expected |= {
        p.relative_to(PKG.parent).as_posix() for p in (PKG / "pretrained" / "data").iterdir()
    }
    expected.add("multihead/viz/book_verdicts.json")  # the book's words, for a reader's run
    assert expected <= set(wheel_files), sorted(expected - set(wheel_files))


@pytest.mark.slow  # pip builds the wheel once for both: about 6 s on two cores
def test_the_wheel_holds_every_module_a_notebook_imports(wheel_files):
    files = set(wheel_files)
    imports = _notebook_imports()
    assert imports and all(imports.values()), "every notebook imports the package"
    missing = {
        name: sorted(m for m in modules if not _in_wheel(m, files))
        for name, modules in imports.items()
    }
    missing = {name: mods for name, mods in missing.items() if mods}
    assert not missing, f"notebooks import modules the wheel lacks: {missing}"


def test_the_notebook_import_check_can_fail():
    files = {"multihead/__init__.py", "multihead/core/__init__.py", "multihead/core/model.py"}
    assert _in_wheel("multihead.core.model", files) and _in_wheel("multihead.core", files)
    assert not _in_wheel("multihead.tools.timing", files)
    modules = _notebook_imports()["07_pruning.ipynb"]
    assert "multihead.timing" in modules and "multihead.viz.glue" in modules
