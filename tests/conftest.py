"""Test-suite settings: fast mode, a private checkpoint cache, a non-interactive backend.

They are set before any notebook kernel starts, so nbval's kernels inherit them.
"""

import os
import tempfile

os.environ["MULTIHEAD_FAST"] = "1"
os.environ.setdefault("MULTIHEAD_CACHE_DIR", tempfile.mkdtemp(prefix="multihead-cache-"))
os.environ.setdefault("MPLBACKEND", "Agg")
