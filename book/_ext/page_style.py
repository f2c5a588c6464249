"""The book's own stylesheet (``static/multihead.css``): pages that fit a 1,280 px window.

Code and cell outputs in a smaller monospace, so that 88 columns fit the text column;
printed output that wraps at the column rather than scrolling out of sight; glued values
in tables in the table's weight (myst-nb pastes them in bold); and the claims page's
three columns (the verdict-counts table is marked by its directive).
"""

from pathlib import Path

STATIC = Path(__file__).parent / "static"


def add_static(app, config):
    config.html_static_path.append(str(STATIC))


def setup(app):
    app.connect("config-inited", add_static)
    app.add_css_file("multihead.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
