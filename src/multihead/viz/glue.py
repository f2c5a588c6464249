"""``glue``: record a notebook value for the book, and keep working where myst-nb is absent.

The book pastes numbers and figures that the notebooks record with myst-nb's ``glue``. On
Colab (or any Jupyter without myst-nb) that import fails, so every notebook goes through this
function instead: with myst-nb installed it *is* myst-nb's ``glue`` (the recorded output is
exactly myst-nb's), and without it the value is shown when ``display`` is True and otherwise
nothing happens.
"""

from __future__ import annotations

from typing import Any

from multihead._checks import check_bool

try:  # the book's toolchain (requirements.txt) has it; a student's Colab usually does not
    from myst_nb import glue as _myst_glue
except ImportError:  # pragma: no cover - exercised by the Colab-like run
    _myst_glue = None


def glue(name: str, variable: Any, display: bool = True) -> None:
    """Record ``variable`` under ``name`` for ``{glue}`` in the book (myst-nb), or, without
    myst-nb, show it if ``display``.

    Shapes: none.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    check_bool("display", display)
    if _myst_glue is not None:
        _myst_glue(name, variable, display=display)
    elif display:
        from IPython.display import display as show

        show(variable)
