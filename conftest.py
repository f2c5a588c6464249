"""How pytest shares the work between pytest-xdist's workers (``-n auto --dist loadgroup``,
in ``pyproject.toml``), for ``pytest`` and for ``pytest notebooks`` alike.

Each worker runs one torch thread: the models are small, so one-thread workers on every core
get more done than one worker with every thread. The notebook kernels nbval starts inherit
the setting. The test suite's own settings (fast mode,
the checkpoint cache) are in ``tests/conftest.py``.
"""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")

import pytest

# The order the work is handed out in (pytest-xdist gives each free worker the next group).
# Longest first, so that no long notebook starts last and keeps one worker busy alone; and
# notebook 05 before 06 and 07, which load its trained models from the shared checkpoint
# cache: started together, both workers would train the same models. Notebook 12 runs a
# 135M-parameter model, the longest in fast mode after 05. The book's group
# ("book") builds three editions in subprocesses. Notebooks not named here, then the unit
# tests, come after, and fill the gaps as workers free up.
ORDER = (
    "05_head_roles",
    "12_decoder_heads",
    "book",
    "04_talking_heads",
    "09_pretrained_heads",
    "08_drophead",
    "02_symmetry",
    "03_low_rank_bottleneck",
    "06_head_diversity",
    "07_pruning",
)


def _rank(group: str | None) -> int:
    if group in ORDER:
        return ORDER.index(group)
    return len(ORDER) if group is not None else len(ORDER) + 1


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    """Every notebook (nbval) is slow: ``pytest -m "not slow"`` is the quick unit-test tier.

    Groups for ``--dist loadgroup``: a notebook's cells run in order in one kernel, so each
    notebook is one group; the tests that use the built book (``editions``) are another, so
    it is built once. Every other test goes to whichever worker is free. The groups are
    handed out in the order of ``ORDER`` (a stable sort: a notebook's cells keep theirs).
    """
    groups = {}
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
            groups[item] = item.path.stem
        elif "editions" in getattr(item, "fixturenames", ()):
            groups[item] = "book"
        if item in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item]))
    items.sort(key=lambda item: _rank(groups.get(item)))
