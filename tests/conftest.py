"""Test-suite settings: fast mode, a private checkpoint cache, a non-interactive backend,
no progress bars; and how the tests are shared between pytest-xdist's workers.

The settings are made before any notebook kernel starts, so nbval's kernels inherit them.
The controlling process loads this file first, so its workers share one checkpoint cache.
Each worker (``-n``, in ``pyproject.toml``) runs one torch thread: the models are small, so
two one-thread workers on two cores get more done than one worker with two threads.
"""

import os
import tempfile

os.environ["MULTIHEAD_FAST"] = "1"
os.environ.setdefault("MULTIHEAD_CACHE_DIR", tempfile.mkdtemp(prefix="multihead-cache-"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("MULTIHEAD_PROGRESS", "off")
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


class _Editions:
    """The book's editions, each built at most once per test session, in parallel.

    ``start(*editions)`` launches the builds (one process each, so two cores build two
    editions at once); ``html(edition)`` waits for one and returns its ``_build/html``.
    The browser tests start all three before walking the first; the build test reuses
    the reader edition instead of building the book a fourth time.
    """

    def __init__(self, folder):
        self.folder = folder
        self._running = {}
        self._done = {}

    def start(self, *editions):
        import subprocess
        from pathlib import Path

        root = Path(__file__).resolve().parents[1]
        for edition in editions:
            if edition in self._running or edition in self._done:
                continue
            out = self.folder / edition
            log = open(self.folder / f"{edition}.log", "w")
            cmd = [
                "jupyter-book",
                "build",
                str(root),
                "-W",
                "-n",
                "--keep-going",
                "--path-output",
                str(out),
            ]
            env = {**os.environ, "MULTIHEAD_EDITION": edition}
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            self._running[edition] = (proc, log)

    def html(self, edition):
        import subprocess

        self.start(edition)
        if edition not in self._done:
            proc, log = self._running.pop(edition)
            try:
                code = proc.wait(timeout=900)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = "timeout"
            log.close()
            text = (self.folder / f"{edition}.log").read_text()
            self._done[edition] = (code, text)
        code, text = self._done[edition]
        assert code == 0, f"{edition} edition build failed:\n{text[-6000:]}"
        return self.folder / edition / "_build" / "html"


@pytest.fixture(scope="session")
def editions(tmp_path_factory):
    built = _Editions(tmp_path_factory.mktemp("editions"))
    yield built
    for proc, log in built._running.values():  # builds nobody waited for
        proc.kill()
        log.close()
