"""Test-suite settings: fast mode, a private checkpoint cache, a non-interactive backend,
no progress bars.

They are set before any notebook kernel starts, so nbval's kernels inherit them.
"""

import os
import tempfile

os.environ["MULTIHEAD_FAST"] = "1"
os.environ.setdefault("MULTIHEAD_CACHE_DIR", tempfile.mkdtemp(prefix="multihead-cache-"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("MULTIHEAD_PROGRESS", "off")

import pytest  # noqa: E402


def pytest_collection_modifyitems(items):
    """Every notebook (nbval) is slow: ``pytest -m "not slow"`` is the quick unit-test tier."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
