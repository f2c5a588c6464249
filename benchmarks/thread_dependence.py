"""Which glued numbers change with the number of CPU threads?

Run from the repository root:  python benchmarks/thread_dependence.py [--threads 1 2] [05 ...]

Runs each notebook in fast mode once per thread count (``OMP_NUM_THREADS`` in the kernel's
environment, a fresh checkpoint cache each time), reads every value the notebook glues,
and prints the ones that differ between thread counts, with both values. Matrix products
sum in a different order with another thread count; a training run of hundreds of steps
can then end in a different model. Nothing is asserted: the notebooks' own asserts say
whether a conclusion survived (a failing assert stops the run with its error).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLUE_MIME = "application/papermill.record/text/plain"


def glued_values(path: Path, threads: int) -> dict[str, str]:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    cache = tempfile.mkdtemp(prefix="multihead-threads-")
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "MULTIHEAD_FAST": "1", "MULTIHEAD_PROGRESS": "off", "MULTIHEAD_CACHE_DIR": cache,
           "MPLBACKEND": "Agg"}  # fmt: skip
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=3600, kernel_name="python3",
                       resources={"metadata": {"path": path.parent}}).execute()  # fmt: skip
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(cache, ignore_errors=True)
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name and GLUE_MIME in out.get("data", {}):
                values[name] = out["data"][GLUE_MIME]
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebook numbers (default: all)")
    parser.add_argument("--threads", nargs=2, type=int, default=[1, 2])
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.notebooks:
        paths = [p for p in paths if p.name.split("_")[0] in args.notebooks]
    a, b = args.threads
    total = 0
    for path in paths:
        va, vb = glued_values(path, a), glued_values(path, b)
        differ = sorted(k for k in va.keys() & vb.keys() if va[k] != vb[k])
        total += len(differ)
        print(f"{path.stem}: {len(differ)} of {len(va)} glued values differ "
              f"between {a} and {b} threads", flush=True)  # fmt: skip
        for key in differ:
            print(f"    {key}: {va[key][:60]}  vs  {vb[key][:60]}")
    print(f"in all: {total} glued values differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
