"""Wall time of every notebook, in fast and in full mode, on this machine.

Run from the repository root:

    python benchmarks/notebook_times.py                  # both modes, every notebook
    python benchmarks/notebook_times.py --modes fast     # fast mode only
    python benchmarks/notebook_times.py 05 06            # the notebooks named
    python benchmarks/notebook_times.py --committed      # read the committed outputs' times

Each mode runs the notebooks in order, as a student would, in a copy (the committed
outputs are not touched), with a fresh checkpoint cache for the mode: notebook 5 trains the
translation model that notebooks 6 and 7 then load. Times go to
``benchmarks/results/notebook_times.json`` under this machine's label (a CPU model and
thread count, or a GPU's name), so runs from a CPU and from a GPU machine add up to one
table, and the table the teaching guide shows (``book/_generated/notebook_times.md``) is
rewritten from that file. Nothing is asserted: times depend on the machine.

``--committed`` runs nothing: it reads how long the committed full-mode outputs took from the
cell timestamps Jupyter stores with them (first cell started to last cell finished). That run
is not controlled: it may have found checkpoints in the cache or shared the cores with other
work, and the table says so.
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
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "notebook_times.json"
TABLE = ROOT / "book" / "_generated" / "notebook_times.md"


def machine_label() -> str:
    """The machine: a GPU's name, or the CPU's model, its widest vector unit and the thread
    count (two CPUs that both call themselves "AMD EPYC" can differ twofold in speed; the
    vector unit tells many of them apart, and ``calibrate`` measures the rest)."""
    import torch

    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}"
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("", platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    return f"CPU: {cpu}{', ' + vector if vector else ''}, {torch.get_num_threads()} threads"


def calibrate() -> float:
    """One thread's float32 matrix-multiply rate in GFLOP/s (512 x 512, best of 20): a
    yardstick to scale the table's times to another machine by."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        best = float("inf")
        for _ in range(20):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return 2 * 512**3 / best / 1e9


def run_notebook(path: Path, workdir: Path) -> tuple[float, list[str]]:
    """Run the notebook to its end; return its wall time and, for every cell that raised (an
    exercise stub aside), a line naming the cell and the error. A failing assert does not stop
    the clock: the other cells still run, so the time is the whole notebook's. Prints the three
    slowest cells, which is where a notebook's time goes."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=3600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": workdir}}).execute()  # fmt: skip
    seconds = time.perf_counter() - start
    for line in slowest_cells(nb):
        print(f"    {line}", flush=True)
    errors = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        if "raises-exception" in cell.metadata.get("tags", []):
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                errors.append(f"cell {i}: {out['ename']} {out['evalue'][:200]}")
    return seconds, errors


def slowest_cells(nb, n: int = 3) -> list[str]:
    """The ``n`` slowest code cells of an executed notebook, from the timestamps nbclient
    records, as lines: seconds, code-cell number, the cell's first line."""
    rows = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        ex = cell.metadata.get("execution", {})
        if "iopub.execute_input" in ex and "shell.execute_reply" in ex:
            begin, end = _when(ex["iopub.execute_input"]), _when(ex["shell.execute_reply"])
            first = cell.source.strip().splitlines()[0][:60] if cell.source.strip() else ""
            rows.append(((end - begin).total_seconds(), i, first))
    return [f"{s:6.0f} s  cell {i}: {first}" for s, i, first in sorted(rows, reverse=True)[:n]]


def committed_seconds(path: Path) -> float | None:
    """Wall time of the notebook's committed run, from its cells' execution timestamps
    (None when a code cell has none, e.g. outputs written by hand or cleared)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    stamps = [c.metadata.get("execution", {}) for c in nb.cells if c.cell_type == "code"]
    if not stamps or not all("iopub.status.busy" in t and "iopub.status.idle" in t for t in stamps):
        return None
    start = min(_when(t["iopub.status.busy"]) for t in stamps)
    end = max(_when(t["iopub.status.idle"]) for t in stamps)
    return (end - start).total_seconds()


def _when(text: str) -> datetime:
    """A timestamp nbclient wrote into a cell's metadata."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


COMMITTED = "committed outputs"


def render(results: dict) -> str:
    """The markdown table: one row per notebook, a fast and a full column per machine."""
    machines = sorted(m for m in results if m != COMMITTED)
    committed = results.get(COMMITTED, {})
    names = sorted(
        {nb for m in machines for mode in ("fast", "full") for nb in results[m].get(mode, {})}
        | set(committed.get("full", {}))
    )
    head = ["notebook"] + [f"{mode} mode, {m}" for m in machines for mode in ("fast", "full")]
    if committed:
        head.append(f"full mode, the committed outputs ({committed.get('machine', '?')})")
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
        if committed:
            seconds = committed.get("full", {}).get(name)
            cells.append("no timestamps" if seconds is None else _duration(seconds))
        rows.append("| " + " | ".join(cells) + " |")
    dates = ", ".join(
        f"{m}: {results[m].get('date', '?')}"
        + (
            f", one thread multiplies matrices at {g:.0f} GFLOP/s"
            if (g := results[m].get("gflops"))
            else ""
        )
        for m in machines
    )
    note = (
        f"\n\nMeasured with `python benchmarks/notebook_times.py` ({dates}); each mode runs the "
        "notebooks in order with a fresh checkpoint cache, so notebooks 6 and 7 load the model "
        "notebook 5 trained."
    )
    if committed:
        note += (
            " The last column is read from the cell timestamps of the outputs in the repository "
            f"(`--committed`, {committed.get('date', '?')}): that run was not controlled. It may "
            "have loaded models an earlier run had cached, and it often shared the two cores "
            "with another notebook."
        )
    return (
        "<!-- written by benchmarks/notebook_times.py; do not edit -->\n"
        + "\n".join(rows)
        + note
        + "\n"
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebook numbers (default: all)")
    parser.add_argument("--modes", nargs="+", choices=["fast", "full"], default=["fast", "full"])
    parser.add_argument(
        "--committed",
        action="store_true",
        help="read the committed outputs' cell timestamps instead of running",
    )
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.notebooks:
        paths = [p for p in paths if p.name.split("_")[0] in args.notebooks]
        if not paths:
            parser.error(f"no notebook matches {args.notebooks}")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    label = machine_label()
    if args.committed:
        entry = results.setdefault(COMMITTED, {})
        entry["machine"], entry["date"] = label, time.strftime("%Y-%m-%d")
        for path in paths:
            seconds = committed_seconds(path)
            if seconds is not None:
                entry.setdefault("full", {})[path.stem] = round(seconds, 1)
            print(
                f"{COMMITTED} | {path.stem}: "
                f"{'no timestamps' if seconds is None else _duration(seconds)}"
            )
        return _write(results)
    entry = results.setdefault(label, {})
    entry["gflops"] = round(calibrate(), 1)
    os.environ["MULTIHEAD_PROGRESS"] = "off"
    os.environ.setdefault("MPLBACKEND", "Agg")
    failed = []
    for mode in args.modes:
        os.environ["MULTIHEAD_FAST"] = "1" if mode == "fast" else "0"
        cache = Path(tempfile.mkdtemp(prefix="multihead-times-"))
        os.environ["MULTIHEAD_CACHE_DIR"] = str(cache)
        try:
            for path in paths:
                seconds, errors = run_notebook(path, path.parent)
                entry.setdefault(mode, {})[path.stem] = round(seconds, 1)
                entry["date"] = time.strftime("%Y-%m-%d")
                _write(results)  # after every notebook: a long run keeps what it measured
                print(f"{label} | {mode} | {path.stem}: {_duration(seconds)}", flush=True)
                for line in errors:
                    print(f"    FAILED {line}", flush=True)
                failed += [f"{mode} {path.stem} {line}" for line in errors]
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    if failed:  # the times stand, but a notebook that fails here is worth a report
        print("cells that raised:\n  " + "\n  ".join(failed))
    return 1 if failed else 0


def _write(results: dict) -> int:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
