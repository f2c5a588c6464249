"""Serve MathJax 3 from the book's own ``_static``, so formulas render with no network.

Sphinx loads MathJax from a CDN by default. This extension points ``mathjax_path`` at
``_static/mathjax/tex-mml-chtml.js`` (Sphinx's default component) and, at the end of an HTML
build, copies MathJax's ``es5`` distribution (scripts, the CommonHTML woff fonts, the
lazily loaded TeX extensions and the accessibility menu) into ``_static/mathjax``. The files
come from the PyPI package ``django-static-mathjax`` (pinned in ``requirements.txt``): MathJax
3.2 as plain files with no dependencies; nothing is committed to this repository.

The ``mathjax3_config`` macros of ``_config.yml`` are untouched: Sphinx writes them into
``window.MathJax`` before the local script loads, exactly as with the CDN.
"""

import shutil
from importlib.util import find_spec
from pathlib import Path

from sphinx.errors import ExtensionError

ENTRY = "tex-mml-chtml.js"
# Other single-file builds of MathJax that the book never loads (about half the package).
UNUSED = (
    "mml-chtml.js",
    "mml-svg.js",
    "node-main.js",
    "tex-chtml.js",
    "tex-chtml-full.js",
    "tex-chtml-full-speech.js",
    "tex-mml-svg.js",
    "tex-svg.js",
    "tex-svg-full.js",
)


def mathjax_source() -> Path:
    """The ``es5`` folder of the installed ``django-static-mathjax`` package."""
    spec = find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            "offline_mathjax: the package django-static-mathjax is not installed; "
            "run `pip install -r requirements.txt`"
        )
    es5 = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5"
    if not (es5 / ENTRY).is_file():
        raise ExtensionError(f"offline_mathjax: {es5 / ENTRY} is missing; reinstall the package")
    return es5


def use_local_mathjax(app, config):
    mathjax_source()  # fail early, before any page is written
    config.mathjax_path = f"mathjax/{ENTRY}"


def copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    shutil.copytree(
        mathjax_source(),
        target,
        dirs_exist_ok=True,
        ignore=lambda folder, names: [n for n in names if n in UNUSED or n == "svg"],
    )


def setup(app):
    app.connect("config-inited", use_local_mathjax)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
