"""Test-suite settings: fast mode, a private checkpoint cache, a non-interactive backend,
no progress bars; and the built book, shared by the tests that need it.

The settings are made before any notebook kernel starts, so nbval's kernels inherit them.
The controlling process loads this file first, so pytest-xdist's workers share one checkpoint
cache. How the tests are shared between the workers is in the top-level ``conftest.py``.
"""

import os
import tempfile

os.environ["MULTIHEAD_FAST"] = "1"
os.environ.setdefault("MULTIHEAD_CACHE_DIR", tempfile.mkdtemp(prefix="multihead-cache-"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("MULTIHEAD_PROGRESS", "off")

import pytest  # noqa: E402


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
