"""The package's architecture: the import-layer rule (an AST walk over ``src/``) and the
chapter map ``multihead.CHAPTERS`` (checked against what each notebook really imports)."""

import ast
import json
from pathlib import Path

import pytest

import multihead

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "multihead"

# layer -> the layers its modules may import (besides their own and the standard library)
ALLOWED = {
    "_checks": set(),
    "core": {"_checks"},
    "tasks": {"_checks", "core"},
    "analysis": {"_checks"},
    "interventions": {"_checks", "core", "analysis"},
    "pretrained": {"_checks", "core", "analysis", "interventions"},
    "viz": {"_checks", "core", "analysis"},
    "exercises": {"_checks", "core", "tasks", "analysis", "interventions", "pretrained", "viz"},
    "timing": {"_checks"},
    "__init__": {"_checks", "core"},  # the top level re-exports core names only
}
# Modules no notebook imports directly: they serve the others. (The repository's tools/, the
# notebook runner, the seed sweep and the diagram generator, are outside the package and this
# rule.)
SUPPORT = {"_checks", "tasks.lexicon", "exercises._common", "core.cache", "core.init"}
SUPPORT |= {"viz.claims"}  # the claims page's verdicts, for the notebooks to adopt


def _modules(pkg: Path = PKG) -> dict[str, Path]:
    """Dotted module name under ``multihead`` (``core.attention``, ``exercises``) -> path."""
    out = {}
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts) or "__init__"] = path
    return out


def _imports(tree: ast.AST, current: str) -> list[tuple[str, str, int]]:
    """(module imported, name imported or '', line) for every ``multihead`` import."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "multihead" or node.module.startswith("multihead."):
                mod = node.module.removeprefix("multihead").removeprefix(".") or "__init__"
                for alias in node.names:
                    found.append((mod, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("multihead"):
                    found.append((alias.name.removeprefix("multihead."), "", node.lineno))
    return found


def _layer(module: str) -> str:
    return module.split(".")[0]


def _violations(pkg: Path = PKG) -> list[str]:
    """Imports against the layers, and imports of another module's private name."""
    bad = []
    for name, path in _modules(pkg).items():
        layer = _layer(name)
        for mod, imported, line in _imports(ast.parse(path.read_text()), name):
            # ``from multihead import core`` imports the layer ``core``; anything else from the
            # top-level package counts as the top level (which imports every layer).
            target = _layer(mod) if mod != "__init__" else imported
            target = target if target in ALLOWED else "__init__"
            where = f"{path.relative_to(pkg)}:{line}"
            if target != layer and target not in ALLOWED[layer]:
                bad.append(f"{where} ({layer}) imports multihead.{mod}")
            if imported.startswith("_") and mod != name:
                bad.append(f"{where} imports the private {imported} from multihead.{mod}")
    return bad


def test_every_module_imports_only_its_own_or_lower_layers_and_no_private_name():
    bad = _violations()
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_the_layer_check_can_fail(tmp_path):
    for rel, code in {
        "core/model.py": "from multihead.analysis.metrics import entropy\n",  # upward
        "analysis/roles.py": "from multihead.tasks.corpus import RELATIONS\n",  # sideways
        "tasks/corpus.py": "from multihead.core.train import _private\n",  # private name
        "viz/plotting.py": "from multihead.analysis.metrics import entropy\n",  # allowed
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(code)
    bad = _violations(tmp_path)
    assert len(bad) == 3, bad
    assert any("core/model.py" in b for b in bad) and any("_private" in b for b in bad)


def _notebook_modules(path: Path) -> set[str]:
    """The package modules a notebook's code cells import (a name imported from the top
    level counts for the module that defines it)."""
    found = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        code = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
        for mod, imported, _ in _imports(ast.parse(code), "notebook"):
            if mod != "__init__":
                found.add(mod)
            elif imported in _modules():
                found.add(imported)
            else:
                defined = getattr(multihead, imported).__module__  # e.g. multihead.core.hooks
                found.add(defined.removeprefix("multihead."))
    return found


@pytest.mark.parametrize("chapter", sorted(multihead.CHAPTERS))
def test_chapter_map_lists_what_the_notebook_imports(chapter):
    notebook = ROOT / "notebooks" / f"{chapter}.ipynb"
    assert notebook.exists(), f"CHAPTERS names {chapter}, which has no notebook"
    listed = set(multihead.CHAPTERS[chapter])
    assert all(m in _modules() for m in listed), listed - set(_modules())
    used = _notebook_modules(notebook)
    assert used <= listed, f"{chapter} imports {sorted(used - listed)}, not in CHAPTERS"
    assert listed <= used, f"CHAPTERS lists {sorted(listed - used)} for {chapter}, unused there"


def test_every_module_is_in_the_chapter_map_or_declared_support():
    chapters = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert set(multihead.CHAPTERS) == chapters
    listed = {m for mods in multihead.CHAPTERS.values() for m in mods} | SUPPORT
    layers = {m for m in _modules() if "." not in m}  # the subpackages' __init__ files
    missing = set(_modules()) - listed - layers - {"__init__"}
    # the checker modules are reached through ``multihead.exercises``
    missing -= {m for m in missing if m.startswith(("exercises.ch", "exercises.primer"))}
    assert not missing, f"modules in no chapter and not declared support: {sorted(missing)}"
