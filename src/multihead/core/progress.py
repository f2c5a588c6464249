"""Progress bars that never leave a frozen widget in a saved notebook.

Interactive notebooks get tqdm's widget bar and terminals its text bar (``tqdm.auto``).
A notebook executed to be saved (``python -m tools.nbtools run``, the test-suite)
sets ``MULTIHEAD_PROGRESS=off``: a widget saved in a notebook renders as a frozen bar in the
book, and a text bar as a page of carriage returns, so none is drawn.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TypeVar

from multihead._checks import check_bool

T = TypeVar("T")

PROGRESS_ENV = "MULTIHEAD_PROGRESS"
_MODES = ("auto", "text", "off")


def progress_mode() -> str:
    """``MULTIHEAD_PROGRESS``: ``"auto"`` (default; a widget in notebooks, text elsewhere),
    ``"text"`` (always text) or ``"off"`` (no bar).

    Shapes: none (reads the environment).
    """
    value = os.environ.get(PROGRESS_ENV, "auto").strip().lower() or "auto"
    if value not in _MODES:
        raise ValueError(f"{PROGRESS_ENV}={value!r} must be one of {', '.join(_MODES)}")
    return value


def progress(
    iterable: Iterable[T], *, desc: str = "", disable: bool = False, **kwargs
) -> Iterator[T]:
    """``iterable`` wrapped in a progress bar as ``progress_mode()`` says (see the module).

    The returned object has tqdm's ``set_postfix`` whether or not a bar is drawn.

    Shapes: none.
    """
    if not isinstance(desc, str):
        raise TypeError(f"desc must be a string, got {type(desc).__name__}")
    check_bool("disable", disable)
    mode = progress_mode()
    if mode == "text":
        from tqdm.std import tqdm
    else:
        from tqdm.auto import tqdm
    kwargs.setdefault("mininterval", 1.0)
    return tqdm(iterable, desc=desc, disable=disable or mode == "off", **kwargs)
