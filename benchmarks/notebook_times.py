"""Wall time of every notebook, in fast and in full mode, on this machine.

Run from the repository root:

    python benchmarks/notebook_times.py                  # both modes, every notebook
    python benchmarks/notebook_times.py --modes fast     # fast mode only
    python benchmarks/notebook_times.py 05 06            # the notebooks named

Each mode runs the notebooks in order, as a student would, in a copy (the committed
outputs are not touched), with a fresh checkpoint cache for the mode: notebook 5 trains the
translation model that notebooks 6 and 7 then load. Times go to
``benchmarks/results/notebook_times.json`` under this machine's label (a CPU model and
thread count, or a GPU's name), so runs from a CPU and from a GPU machine add up to one
table, and the table the teaching guide shows (``book/_generated/notebook_times.md``) is
rewritten from that file. Nothing is asserted: times depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "notebook_times.json"
TABLE = ROOT / "book" / "_generated" / "notebook_times.md"


def machine_label() -> str:
    import torch

    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {cpu}, {torch.get_num_threads()} threads"


def run_notebook(path: Path, workdir: Path) -> float:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=3600, kernel_name="python3",
                   resources={"metadata": {"path": workdir}}).execute()  # fmt: skip
    return time.perf_counter() - start


def render(results: dict) -> str:
    """The markdown table: one row per notebook, a fast and a full column per machine."""
    machines = sorted(results)
    names = sorted(
        {nb for m in machines for mode in ("fast", "full") for nb in results[m].get(mode, {})}
    )
    head = ["notebook"] + [f"{mode} mode, {m}" for m in machines for mode in ("fast", "full")]
    rows = [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for name in names:
        cells = [f"`{name}`"]
        for m in machines:
            for mode in ("fast", "full"):
                seconds = results[m].get(mode, {}).get(name)
                cells.append("not measured" if seconds is None else _duration(seconds))
        rows.append("| " + " | ".join(cells) + " |")
    dates = ", ".join(f"{m}: {results[m].get('date', '?')}" for m in machines)
    return (
        "<!-- written by benchmarks/notebook_times.py; do not edit -->\n"
        + "\n".join(rows)
        + f"\n\nMeasured with `python benchmarks/notebook_times.py` ({dates}); each mode runs the "
        "notebooks in order with a fresh checkpoint cache, so notebooks 6 and 7 load the model "
        "notebook 5 trained.\n"
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebook numbers (default: all)")
    parser.add_argument("--modes", nargs="+", choices=["fast", "full"], default=["fast", "full"])
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.notebooks:
        paths = [p for p in paths if p.name.split("_")[0] in args.notebooks]
        if not paths:
            parser.error(f"no notebook matches {args.notebooks}")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    label = machine_label()
    entry = results.setdefault(label, {})
    os.environ["MULTIHEAD_PROGRESS"] = "off"
    os.environ.setdefault("MPLBACKEND", "Agg")
    for mode in args.modes:
        os.environ["MULTIHEAD_FAST"] = "1" if mode == "fast" else "0"
        cache = Path(tempfile.mkdtemp(prefix="multihead-times-"))
        os.environ["MULTIHEAD_CACHE_DIR"] = str(cache)
        try:
            for path in paths:
                seconds = run_notebook(path, path.parent)
                entry.setdefault(mode, {})[path.stem] = round(seconds, 1)
                print(f"{label} | {mode} | {path.stem}: {_duration(seconds)}", flush=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    entry["date"] = time.strftime("%Y-%m-%d")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(render(results))
    print(f"wrote {RESULTS.relative_to(ROOT)} and {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
