"""How often does each notebook assert hold on seeds nobody picked?

The notebooks assert their chapters' conclusions on any seeds (``MULTIHEAD_SEED_OFFSET``
shifts every replicate seed). A run at one offset says only whether every assert held there,
and stops a cell at its first failing assert. This command runs each notebook once per
offset with every ``assert`` statement rewritten to *record* its outcome and go on, so one
sweep gives, for every assert, the offsets at which it failed::

    python -m tools.seedcheck --offsets 600 700 800          # every notebook, fast mode
    python -m tools.seedcheck --offsets 600 700 --notebooks 05 06 --out sweep.json

It prints one row per assert that failed at some offset (cell, line, source, failures), and
how many held everywhere. It also records every claim at every offset (``claim`` appends it
to ``MULTIHEAD_VERDICT_LOG``): its word and, for a computed word, its record, the per-seed
effects with what pooling needs (each seed's mean difference keyed by seed, the example-noise
term of the seed set's test data, the minimal size, the competence values). ``--verdicts
FILE`` merges them into ``book/_generated/verdicts.json``, keyed by claim, mode and offset (an
offset run again replaces its entry), so a sweep can run in parts, on several machines, and
merge; ``python -m tools.verdicts --publish`` then pools every full-mode seed set of a claim
with the book's own (the record its notebook glues) into the word the book publishes::

    python -m tools.seedcheck --full --offsets 4987 --verdicts book/_generated/verdicts.json
    python -m tools.seedcheck --full --offsets 7987 --verdicts book/_generated/verdicts.json
    python -m tools.verdicts --publish && python -m tools.verdicts --counts

Each offset is a seed set: ``runtime.seeds`` shifts the replicate seeds by it and
``runtime.data_seed`` draws the test data again for it, so offsets must lie at least 100
apart (and from 0) for no seed to count twice. Offsets run
side by side, one process per core, one torch thread each; the notebooks of one offset run in
order in one process and share a checkpoint cache, so the models of notebook 05 are trained
once for 06 and 07. Slow: a fast-mode offset costs
about as much CPU time as ``pytest notebooks``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

RECORD_ENV = "MULTIHEAD_SEEDCHECK_LOG"
VERDICT_ENV = "MULTIHEAD_VERDICT_LOG"  # multihead.viz.claims.LOG_ENV
RECORDER = "_seedcheck_record"
COMPARE = "_seedcheck_compare"
# The first code cell of every rewritten notebook: append one JSON line per assert executed.
# A comparison (``a < b``) also records both sides where they are numbers, so a sweep shows
# how close to its threshold each assert came.
RECORDER_CELL = f"""\
import json as _json, operator as _operator, os as _os


def {RECORDER}(ok, cell, line, source, sides=None, op=None):
    with open(_os.environ["{RECORD_ENV}"], "a") as _f:
        _f.write(_json.dumps({{"cell": cell, "line": line, "source": source,
                              "ok": bool(ok), "sides": sides, "op": op}}) + "\\n")


def {COMPARE}(left, right, op, cell, line, source):
    ok = bool(getattr(_operator, op)(left, right))
    try:
        sides = [float(left), float(right)]
    except (TypeError, ValueError, RuntimeError):
        sides = None
    {RECORDER}(ok, cell, line, source, sides, op)
"""
_OPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}


class _AssertRecorder(ast.NodeTransformer):
    """``assert test, msg`` -> ``_seedcheck_record(test, cell, line, "<source>")``;
    ``assert a < b`` (one ``<``, ``<=``, ``>`` or ``>=``) -> ``_seedcheck_compare(a, b, "lt",
    cell, line, "<source>")``, which records both sides too."""

    def __init__(self, source: str, cell: int) -> None:
        self.source, self.cell = source, cell

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        test = node.test
        text = ast.get_source_segment(self.source, test) or ast.unparse(test)
        where = [ast.Constant(v) for v in (self.cell, node.lineno, text)]
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS:
            op = ast.Constant(_OPS[type(test.ops[0])])
            call = ast.Call(
                ast.Name(COMPARE, ast.Load()), [test.left, *test.comparators, op, *where], []
            )
        else:
            call = ast.Call(ast.Name(RECORDER, ast.Load()), [test, *where], [])
        return ast.copy_location(ast.Expr(call), node)


def record_asserts(source: str, cell: int) -> str:
    """The cell's source with every ``assert`` recording its outcome instead of raising.

    A cell Python cannot parse (an IPython magic, say) comes back unchanged.

    Shapes: none.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a cell's source text, got {type(source).__name__}")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    if not any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
        return source
    tree = ast.fix_missing_locations(_AssertRecorder(source, cell).visit(tree))
    return ast.unparse(tree)


def rewritten(path: Path):
    """The notebook at ``path`` with its asserts recording (``record_asserts``) and the
    recorder defined in a cell of its own after the setup cell. Cells keep their numbers
    in the records: ``cell`` counts the original code cells from 0.

    Shapes: none.
    """
    import nbformat

    nb = nbformat.read(path, as_version=4)
    code = 0
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = record_asserts(cell.source, code)
            code += 1
    nb.cells.insert(1, nbformat.v4.new_code_cell(RECORDER_CELL))
    return nb


def run_offset(offset: int, paths: list[str], full: bool, folder: str) -> dict:
    """Run ``paths`` in order at one offset; return {notebook: {"records": [...], "errors":
    [cell numbers whose execution raised, other than cells tagged raises-exception]}}.

    Shapes: none.
    """
    from nbclient import NotebookClient

    results = {}
    cache = Path(folder) / f"cache-{offset}"
    for path in map(Path, paths):
        log = Path(folder) / f"{path.stem}-{offset}.jsonl"
        verdict_log = Path(folder) / f"{path.stem}-{offset}.verdicts.jsonl"
        log.unlink(missing_ok=True)
        verdict_log.unlink(missing_ok=True)
        env = {
            RECORD_ENV: str(log),
            VERDICT_ENV: str(verdict_log),
            "MULTIHEAD_SEED_OFFSET": str(offset),
            "MULTIHEAD_FAST": "0" if full else "1",
            "MULTIHEAD_CACHE_DIR": str(cache),
            "MULTIHEAD_PROGRESS": "off",
            "MPLBACKEND": "Agg",
        }
        nb = rewritten(path)
        client = NotebookClient(nb, timeout=3600, kernel_name="python3", allow_errors=True)
        start = time.perf_counter()
        client.execute(cwd=str(path.parent), env={**os.environ, **env})
        seconds = time.perf_counter() - start
        errors, code = [], -1
        for cell in nb.cells[:1] + nb.cells[2:]:  # the recorder cell is not counted
            if cell.cell_type != "code":
                continue
            code += 1
            expected = "raises-exception" in cell.metadata.get("tags", [])  # exercise stubs
            if not expected and any(o.get("output_type") == "error" for o in cell.outputs):
                errors.append(code)
        records = (
            [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        )
        verdicts = (
            [json.loads(line) for line in verdict_log.read_text().splitlines()]
            if verdict_log.exists()
            else []
        )
        results[path.stem] = {
            "records": records,
            "verdicts": verdicts,
            "errors": errors,
            "full": full,
            "seconds": round(seconds, 1),  # wall time of the run, kernel start included
        }
    return results


def _margin(record: dict) -> float | None:
    """How far a recorded comparison was from failing (negative: it failed)."""
    sides, op = record.get("sides"), record.get("op")
    if not sides or op is None:
        return None
    left, right = sides
    return left - right if op in ("gt", "ge") else right - left


def summarize(sweep: dict[int, dict]) -> tuple[list[dict], list[dict]]:
    """Per assert (notebook, cell, line): the offsets it ran at, those it failed at, and for a
    comparison its margin at each offset (how far the two sides were from failing; the
    smallest, where it ran several times).

    Returns every assert as a row, those that failed somewhere first (most failures first),
    and the rows of the asserts that held everywhere.

    Shapes: none.
    """
    table: dict[tuple, dict] = {}
    for offset, notebooks in sweep.items():
        for name, result in notebooks.items():
            seen = defaultdict(list)
            for r in result["records"]:
                seen[(name, r["cell"], r["line"], r["source"])].append(r)
            for key, records in seen.items():
                row = table.setdefault(key, {"ran": [], "failed": [], "margins": {}})
                row["ran"].append(offset)
                if not all(r["ok"] for r in records):
                    row["failed"].append(offset)
                margins = [m for m in map(_margin, records) if m is not None]
                if margins:
                    row["margins"][offset] = min(margins)
    rows = [
        {"notebook": k[0], "cell": k[1], "line": k[2], "source": k[3], **v}
        for k, v in table.items()
    ]
    failing = [r for r in rows if r["failed"]]
    failing.sort(key=lambda r: (-len(r["failed"]), r["notebook"], r["cell"], r["line"]))
    return failing, [r for r in rows if not r["failed"]]


def closeness(row: dict) -> float | None:
    """The smallest margin over the offsets in units of the margins' spread (their standard
    deviation): a comparison that held everywhere but by a fraction of its spread is likely to
    fail on some other seeds. None where there is no margin or no spread.

    Shapes: none.
    """
    margins = list(row["margins"].values())
    if len(margins) < 2:
        return None
    mean = sum(margins) / len(margins)
    sd = (sum((m - mean) ** 2 for m in margins) / (len(margins) - 1)) ** 0.5
    return min(margins) / sd if sd > 0 else None


def _notebook_paths() -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    return sorted((root / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def _order(paths: list[Path]) -> list[Path]:
    # 05 trains the models 06 and 07 load: run it first.
    return sorted(paths, key=lambda p: (not p.name.startswith("05"), p.name))


def render(sweep: dict[int, dict]) -> str:
    """The sweep as markdown for the teaching guide: what ran, then every assert that failed at
    some offset and every comparison that held with a margin under 3 of its standard
    deviations, with where it stands now.

    Shapes: none.
    """
    failing, held = summarize(sweep)
    offsets = sorted(sweep)
    full = any(_full(sweep))
    command = "python -m tools.seedcheck --offsets " + " ".join(map(str, offsets))
    ran = sorted({name.split("_")[0] for notebooks in sweep.values() for name in notebooks})
    every = {p.name.split("_")[0] for p in _notebook_paths()}
    what = "every notebook"
    if set(ran) != every:  # a sweep of some notebooks says which
        what = ("notebook " if len(ran) == 1 else "notebooks ") + ", ".join(ran)
        command += " --notebooks " + " ".join(ran)
    command += " --full" if full else ""
    lines = [
        "<!-- written by python -m tools.seedcheck --markdown; do not edit -->",
        f"Offsets {', '.join(map(str, offsets))} ({len(offsets)} runs of {what} in "
        f"{'full' if full else 'fast'} mode, `{command}`): "
        f"{len(failing) + len(held)} asserts ran, {len(held)} held at every offset, "
        f"{len(failing)} failed at one or more.",
        "",
    ]
    close = sorted(
        ((c, r) for r in held if (c := closeness(r)) is not None and c < 3), key=lambda t: t[0]
    )
    if failing or close:
        lines += [
            "| notebook | cell | assert | failed at | smallest margin |",
            "|---|---|---|---|---|",
        ]
    for r in failing + [r for _, r in close]:
        src = " ".join(r["source"].split()).replace("|", "\\|")
        where = ", ".join(map(str, sorted(r["failed"]))) or "none"
        margin = f"{min(r['margins'].values()):.3g}" if r["margins"] else "-"
        name = r["notebook"].split("_")[0]
        lines.append(f"| {name} | {r['cell']} | `{src[:90]}` | {where} | {margin} |")
    return "\n".join(lines) + "\n"


def merge_verdicts(sweep: dict[int, dict], known: dict | None = None) -> dict:
    """``{claim id: {"fast"|"full": {offset: {"word": ..., "record": ...}}}}``: every claim's
    word (and record, where its word was computed) at every offset of ``sweep``, merged into
    ``known`` (an earlier file's contents; an offset run again replaces its entry; an older
    file's bare words read as entries without a record). A claim whose notebook stopped
    before it has no entry there.

    Shapes: none.
    """
    table: dict = {}
    for claim, modes in (known or {}).items():
        table[claim] = {
            m: {o: dict(e) if isinstance(e, dict) else {"word": e} for o, e in runs.items()}
            for m, runs in modes.items()
        }
    for offset, notebooks in sweep.items():
        for result in notebooks.values():
            mode = "full" if result.get("full") else "fast"
            for row in result.get("verdicts", []):
                entry = {"word": row["word"]}
                if row.get("record") is not None:
                    entry["record"] = row["record"]
                table.setdefault(row["claim"], {}).setdefault(mode, {})[str(offset)] = entry
    return {k: table[k] for k in sorted(table)}


def _full(sweep: dict) -> list[bool]:
    return [bool(nb.get("full")) for notebooks in sweep.values() for nb in notebooks.values()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.seedcheck", description=__doc__)
    parser.add_argument("--offsets", type=int, nargs="+", default=None)
    parser.add_argument("--notebooks", nargs="*", default=None, help="numbers, e.g. 05 06")
    parser.add_argument("--full", action="store_true", help="full mode (default: fast)")
    parser.add_argument("--out", type=Path, default=None, help="write the sweep as JSON")
    parser.add_argument("--load", type=Path, default=None, help="summarize a saved sweep")
    parser.add_argument("--markdown", type=Path, default=None, help="write the summary table")
    parser.add_argument(
        "--verdicts",
        type=Path,
        default=None,
        help="merge every claim's verdict per offset into this JSON file",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if args.load is not None:
        sweep = {int(k): v for k, v in json.loads(args.load.read_text()).items()}
    else:
        if not args.offsets:
            parser.error("give --offsets to run, or --load a saved sweep")
        if any(o < 0 for o in args.offsets):
            parser.error("--offsets must be non-negative integers")
        spaced = sorted({0, *args.offsets})
        if args.full and any(b - a < 100 for a, b in zip(spaced, spaced[1:], strict=False)):
            parser.error("--offsets must lie at least 100 apart and from 0 in full mode, so "
                         "that no seed counts in two seed sets")  # fmt: skip
        sweep = _run(parser, args)
    if args.out:
        args.out.write_text(json.dumps({str(k): v for k, v in sweep.items()}, indent=1) + "\n")
    failing, held = summarize(sweep)
    print(
        f"\n{len(held)} asserts held at every offset they ran at; {len(failing)} failed somewhere"
    )
    for r in failing:
        src = " ".join(r["source"].split())
        print(
            f"{r['notebook']} cell {r['cell']} line {r['line']}: failed at {len(r['failed'])} "
            f"of {len(r['ran'])} offsets {sorted(r['failed'])}\n    {src[:160]}"
        )
    close = sorted(
        ((c, r) for r in held if (c := closeness(r)) is not None and c < 3), key=lambda t: t[0]
    )
    if close:
        print("\nHeld everywhere, but with a smallest margin under 3 standard deviations of it:")
    for c, r in close:
        src = " ".join(r["source"].split())
        print(f"{r['notebook']} cell {r['cell']} line {r['line']}: {c:.1f} sd\n    {src[:160]}")
    if args.markdown:
        args.markdown.write_text(render(sweep))
    if args.verdicts:
        known = json.loads(args.verdicts.read_text()) if args.verdicts.exists() else {}
        merged = merge_verdicts(sweep, known)
        args.verdicts.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
        print(f"verdicts of {len(merged)} claims in {args.verdicts}; "
              "python -m tools.verdicts --publish pools them into the book's words")  # fmt: skip
    return 0


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[int, dict]:
    root = Path(__file__).resolve().parents[1]
    paths = _notebook_paths()
    if args.notebooks:
        paths = [p for p in paths if any(p.name.startswith(n) for n in args.notebooks)]
        if not paths:
            parser.error(
                f"--notebooks {args.notebooks} matches no notebook in {root / 'notebooks'}"
            )
    paths = [str(p) for p in _order(paths)]
    if args.jobs > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    from concurrent.futures import ProcessPoolExecutor

    folder = tempfile.mkdtemp(prefix="multihead-seedcheck-")
    print(f"logs and checkpoints in {folder}", flush=True)
    sweep = {}
    with ProcessPoolExecutor(max(1, min(args.jobs, len(args.offsets)))) as pool:
        futures = {o: pool.submit(run_offset, o, paths, args.full, folder) for o in args.offsets}
        for offset, future in futures.items():
            sweep[offset] = future.result()
            errors = {n: r["errors"] for n, r in sweep[offset].items() if r["errors"]}
            times = ", ".join(f"{n} {r['seconds']:.0f} s" for n, r in sweep[offset].items())
            print(f"offset {offset}: done ({times}); cells that raised: {errors or 'none'}",
                  flush=True)  # fmt: skip
    return sweep


if __name__ == "__main__":
    sys.exit(main())
