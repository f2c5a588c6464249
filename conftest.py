"""How pytest shares the work between pytest-xdist's workers (``-n auto --dist loadgroup``,
in ``pyproject.toml``), for ``pytest`` and for ``pytest notebooks`` alike.

Each worker runs one torch thread: the models are small, so one-thread workers on every core
get more done than one worker with every thread. The notebook kernels nbval starts inherit
the setting. The test suite's own settings (fast mode, the checkpoint cache) are in
``tests/conftest.py``.
"""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")

import pytest  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    """Every notebook (nbval) is slow: ``pytest -m "not slow"`` is the quick unit-test tier.

    Groups for ``--dist loadgroup``: a notebook's cells run in order in one kernel, so each
    notebook is one group; the tests that use the built book (``editions``) are another, so
    it is built once. Every other test goes to whichever worker is free.
    """
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
        elif "editions" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("book"))
