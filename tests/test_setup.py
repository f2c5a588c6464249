"""The local way to run the course, as the intro and the README write it, and the one
repository URL that the intro, the README and the notebooks' setup cell all show.

The install check reads the documented commands and the files they name (requirements.txt,
pyproject.toml); it installs nothing. What the commands install must bring everything a
notebook kernel needs: the Jupyter front end they start, ipykernel, the course package with
the extra the Colab setup cell installs, and every package the notebooks import.
"""

import ast
import importlib.util
import re
import shutil
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import yaml
from docutils import nodes

from tools import nbtools

ROOT = Path(__file__).resolve().parents[1]
DOCS = {"intro": ROOT / "book" / "intro.md", "README": ROOT / "README.md"}
FAST_COMMAND = "MULTIHEAD_FAST=1 jupyter lab notebooks/"
# what each `jupyter <command>` needs installed
FRONT_ENDS = {"lab": "jupyterlab", "notebook": "notebook"}
# a clone command, with the URL or the book's placeholder for it
CLONE = re.compile(r"git clone (\{\{ repository_url \}\}|\S+)")

_spec = importlib.util.spec_from_file_location(
    "repository_url", ROOT / "book" / "_ext" / "repository_url.py"
)
repository_ext = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repository_ext)


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (``Foo_Bar[x]==1`` -> ``foo-bar``)."""
    return re.split(r"[<>=!~ \[;@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _config_url(root: Path = ROOT) -> str:
    return yaml.safe_load((root / "_config.yml").read_text())["repository"]["url"]


def local_commands(doc: Path) -> list[str]:
    """The shell commands of the doc's code block that starts JupyterLab, one per item."""
    blocks = re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S)
    block = next((b for b in blocks if "jupyter lab" in b), None)
    assert block is not None, f"{doc.name} shows no code block that runs `jupyter lab`"
    commands = []
    for line in block.splitlines():
        line = line.split(" #")[0].strip()
        commands += [c.strip() for c in line.split("&&") if c.strip()]
    return commands


def _project(root: Path, extras: set[str]) -> set[str]:
    """The project's name and the dependencies ``pip install .[extras]`` brings."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    return {_name(project["name"])} | {_name(s) for s in specs}


def _requirement(line: str, root: Path) -> set[str]:
    """What one requirement (a pip argument or a requirements-file line) installs."""
    line = line.split(" #")[0].strip()
    if line.startswith("-e"):
        line = line[2:].strip()
    if not line or line.startswith("#"):
        return set()
    if line.startswith("-r"):
        return _requirements_file(root / line[2:].strip(), root)
    if line.startswith("."):
        return _project(root, set(re.findall(r"\w[\w-]*", line)))
    return {_name(line)}


def _requirements_file(path: Path, root: Path) -> set[str]:
    return set().union(*(_requirement(line, root) for line in path.read_text().splitlines()))


def installed_by(commands: list[str], root: Path = ROOT) -> set[str]:
    """The distributions (normalised names) the ``pip install`` commands declare."""
    names: set[str] = set()
    for command in commands:
        words = command.split()
        if words[:2] != ["pip", "install"]:
            continue
        args = iter(words[2:])
        for arg in args:
            if arg in ("-r", "--requirement"):
                names |= _requirements_file(root / next(args), root)
            elif arg in ("-e", "--editable"):
                names |= _requirement(next(args), root)
            elif not arg.startswith("-"):
                names |= _requirement(arg, root)
    return names


def _notebook_imports() -> set[str]:
    modules = set()
    for path in nbtools.notebooks(ROOT):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            source = "\n".join(
                "" if line.lstrip().startswith(("%", "!")) else line
                for line in cell.source.splitlines()
            )
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names)


def kernel_needs(commands: list[str], root: Path = ROOT) -> dict[str, set[str]]:
    """{what needs it: distributions, any one of which will do} for the documented commands."""
    needs = {"a kernel": {"ipykernel"}}
    for command in commands:
        words = [w for w in command.split() if not re.match(r"\w+=", w)]  # VAR=value prefixes
        if words[:1] == ["jupyter"] and len(words) > 1:
            front_end = FRONT_ENDS.get(words[1])
            assert front_end, f"`{command}`: no front end known for `jupyter {words[1]}`"
            needs[f"`{command}`"] = {front_end}
    # the package as the setup cell installs it on Colab (notebook 9 needs the extra)
    extra = re.search(r"multihead\[(\w+)\]", nbtools.setup_source(root)).group(1)
    for dist in sorted(_project(root, {extra})):
        needs[f"the package with [{extra}]: {dist}"] = {dist}
    providers = metadata.packages_distributions()
    for module in sorted(_notebook_imports() - {"multihead"}):
        dists = {_name(d) for d in providers.get(module, [])}
        assert dists, f"a notebook imports {module}, which no installed distribution provides"
        needs[f"import {module}"] = dists
    return needs


def missing(commands: list[str], root: Path = ROOT) -> list[str]:
    installed = installed_by(commands, root)
    return [
        f"{need}: {' or '.join(sorted(dists))}"
        for need, dists in kernel_needs(commands, root).items()
        if not dists & installed
    ]


@pytest.mark.parametrize("doc", DOCS, ids=str)
def test_the_documented_install_brings_what_a_notebook_kernel_needs(doc):
    commands = local_commands(DOCS[doc])
    assert any(c.startswith("pip install -r requirements.txt") for c in commands), commands
    assert "jupyter lab notebooks/" in commands
    assert not missing(commands), f"{doc}: the documented install lacks {missing(commands)}"


def test_the_install_check_fails_without_jupyterlab(tmp_path):
    for name in ("_config.yml", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    kept = [line for line in lines if _name(line) not in ("jupyterlab", "ipykernel")]
    (tmp_path / "requirements.txt").write_text("\n".join(kept) + "\n")
    commands = local_commands(DOCS["intro"])
    assert missing(commands, tmp_path) == [
        "a kernel: ipykernel",
        "`jupyter lab notebooks/`: jupyterlab",
    ]
    # a notebook import that nothing declares is caught too
    assert "import torch: torch" in missing(["pip install numpy==2.4.6", "jupyter lab"], tmp_path)


@pytest.mark.parametrize("doc", DOCS, ids=str)
def test_the_docs_show_fast_mode_locally(doc):
    text = DOCS[doc].read_text()
    code = re.findall(r"```bash\n(.*?)```", text, re.S) + re.findall(r"`([^`\n]+)`", text)
    lines = {line.split(" #")[0].strip() for block in code for line in block.splitlines()}
    assert FAST_COMMAND in lines, f"{doc}: show `{FAST_COMMAND}`"


def _clone_urls(text: str) -> list[str]:
    return CLONE.findall(text)


def test_the_intro_readme_and_setup_cell_show_the_configured_url():
    url = _config_url()
    # the intro's URL is filled in from _config.yml when the book is built
    assert _clone_urls(DOCS["intro"].read_text()) == [repository_ext.PLACEHOLDER]
    assert _clone_urls(DOCS["README"].read_text()) == [url], "run `python -m tools.nbtools sync`"
    assert f"git+{url}" in nbtools.setup_source(ROOT)
    # the URL Jupyter Book hands to the book's extensions is the configured one
    from jupyter_book.config import get_final_config

    sphinx_config, _ = get_final_config(
        user_yaml=ROOT / "_config.yml", cli_config={"latex_individualpages": False}
    )
    assert "repository_url" in sphinx_config["extensions"]
    config = SimpleNamespace(**sphinx_config)
    assert repository_ext.repository_url(config) == url


def test_changing_the_url_in_config_changes_intro_readme_and_setup_cell(tmp_path):
    new_url = f"{_config_url()}-elsewhere"
    config = (ROOT / "_config.yml").read_text().replace(_config_url(), new_url)
    (tmp_path / "_config.yml").write_text(config)
    shutil.copy(DOCS["README"], tmp_path / "README.md")
    (tmp_path / "notebooks").mkdir()
    notebook = nbtools.notebooks(ROOT)[0]
    shutil.copy(notebook, tmp_path / "notebooks" / notebook.name)

    assert nbtools.sync(tmp_path) and nbtools.sync_readme(tmp_path)
    assert _clone_urls((tmp_path / "README.md").read_text()) == [new_url]
    first = nbformat.read(tmp_path / "notebooks" / notebook.name, as_version=4).cells[0]
    assert f"git+{new_url}" in first.source
    assert not nbtools.sync_readme(tmp_path)  # nothing left to change

    # the intro's code block, as the book renders it
    app = SimpleNamespace(config=SimpleNamespace(html_theme_options={"repository_url": new_url}))
    block = re.search(r"```bash\n(.*?)```", DOCS["intro"].read_text(), re.S).group(1)
    doctree = nodes.section("", nodes.literal_block(block, block))
    repository_ext.fill_code_blocks(app, doctree, "book/intro")
    rendered = doctree[0]
    assert _clone_urls(rendered.astext()) == [new_url]
    assert rendered.rawsource == rendered.astext()  # so Sphinx still highlights it


LOWEST_PYTHON = re.compile(r"Python (3\.\d+) or newer")


def _minor(version: str) -> int:
    major, minor = version.split(".")[:2]
    assert major == "3", version
    return int(minor)


def test_the_docs_name_the_lowest_python_the_pins_install_on():
    """The intro, the README and pyproject.toml name one lowest Python, and it is the lowest
    the pinned requirements install on: every pin's ``Requires-Python`` (read from the
    installed distribution, where it is the pinned version) admits it, and some pin refuses
    the version below it."""
    from packaging.specifiers import SpecifierSet

    named = {doc: set(LOWEST_PYTHON.findall(path.read_text())) for doc, path in DOCS.items()}
    for doc, found in named.items():
        assert len(found) == 1, f"{doc} should name one lowest Python ('Python 3.x or newer')"
    assert len(set().union(*named.values())) == 1, f"the docs disagree: {named}"
    (floor,) = set().union(*named.values())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={floor}", "pyproject.toml names another Python"
    lowest, below = f"3.{_minor(floor)}.0", f"3.{_minor(floor) - 1}.99"
    checked, refuse_below = [], []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" not in line:
            continue
        name, version = (part.strip() for part in line.split("==", 1))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version.split("+")[0] != version:
            continue  # another version is installed here: its metadata says nothing of the pin
        spec = SpecifierSet(dist.metadata.get("Requires-Python") or "")
        assert spec.contains(lowest), f"{name}=={version} needs Python {spec}, not {floor}"
        checked.append(name)
        if not spec.contains(below):
            refuse_below.append(name)
    assert len(checked) >= 10, f"too few pins installed at their version to check: {checked}"
    assert refuse_below, f"every pin installs on Python 3.{_minor(floor) - 1}: name that one"
