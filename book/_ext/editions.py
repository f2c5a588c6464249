"""Three editions of the book from one source, picked by ``MULTIHEAD_EDITION``.

* ``reader`` (the default, for self-learners): exercise solutions in dropdowns.
* ``student``: no solutions at all (for courses that grade the exercises).
* ``instructor``: solutions shown open, plus the blocks written for instructors only
  (the teaching guide's answers, rubrics and reference results), which pages mark with
  ```` ```{only} instructor ```` (Sphinx's ``only`` directive; the edition is a Sphinx tag).

Build one with, e.g., ``MULTIHEAD_EDITION=student jupyter-book build . --path-output
_build/student`` (a separate output folder per edition, so no page is reused from another).
The edition also names itself in the page title, so a printed page says which it is.
"""

import os

from sphinx.errors import ConfigError
from sphinx_exercise.nodes import solution_node

EDITIONS = ("reader", "student", "instructor")
TITLES = {"student": "student edition", "instructor": "instructor edition"}


def edition(config) -> str:
    name = os.environ.get("MULTIHEAD_EDITION", "").strip() or config.multihead_edition
    if name not in EDITIONS:
        raise ConfigError(f"MULTIHEAD_EDITION={name!r} is not one of {', '.join(EDITIONS)}")
    return name


def set_edition(app, config):
    name = edition(config)
    config.multihead_edition = name
    app.tags.add(name)  # {only} reader / student / instructor
    if name in TITLES and config.html_title:
        config.html_title = f"{config.html_title} ({TITLES[name]})"


def apply_edition(app, doctree, docname):
    name = app.config.multihead_edition
    for node in list(doctree.findall(solution_node)):
        if name == "student":
            node.parent.remove(node)
        elif name == "instructor":
            node["classes"] = [c for c in node["classes"] if c != "dropdown"]


def setup(app):
    app.add_config_value("multihead_edition", "reader", "env", [str])
    app.connect("config-inited", set_edition)
    app.connect("doctree-resolved", apply_edition)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
