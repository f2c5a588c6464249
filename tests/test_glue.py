"""The notebooks' glue: myst-nb's own where installed, a plain fallback elsewhere."""

import importlib
import sys

import pytest


def test_glue_is_myst_nb_when_installed(monkeypatch):
    myst_nb = pytest.importorskip("myst_nb", reason="myst-nb (for the book build) is absent")
    from multihead.viz import glue as module

    calls = []
    monkeypatch.setattr(module, "_myst_glue", lambda *a, **k: calls.append((a, k)))
    module.glue("x", 1.5, display=False)
    assert calls == [(("x", 1.5), {"display": False})]
    importlib.reload(module)
    assert module._myst_glue is myst_nb.glue


def test_glue_without_myst_nb_shows_or_stays_quiet(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # import myst_nb now fails
    from multihead.viz import glue as module

    module = importlib.reload(module)
    try:
        assert module._myst_glue is None
        module.glue("hidden", 2.0, display=False)
        module.glue("shown", "value 3")
        assert "value 3" in capsys.readouterr().out
        with pytest.raises(TypeError, match="name"):
            module.glue("", 1)
        with pytest.raises(TypeError, match="display"):
            module.glue("x", 1, display="no")
    finally:
        monkeypatch.delitem(sys.modules, "myst_nb")
        importlib.reload(module)


def test_every_glue_name_is_glued_once_per_notebook():
    # The book's build refuses a key glued twice (mystnb warns, -W fails); a notebook that
    # glues a value in two cells fails here in seconds instead.
    import json
    from collections import Counter
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        names = Counter(
            o.get("metadata", {}).get("scrapbook", {}).get("name")
            for c in cells
            for o in c.get("outputs", [])
        )
        names.pop(None, None)
        twice = sorted(n for n, k in names.items() if k > 1)
        assert not twice, f"{path.name} glues {twice} more than once"
