"""The seed sweep: asserts rewritten to record, a sweep's summary, one real run."""

import json

import nbformat
import pytest

from tools.seedcheck import (
    COMPARE,
    RECORDER,
    RECORDER_CELL,
    closeness,
    main,
    merge_verdicts,
    record_asserts,
    render,
    rewritten,
    run_offset,
    summarize,
)


def _run(source: str, tmp_path, monkeypatch) -> list[dict]:
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("MULTIHEAD_SEEDCHECK_LOG", str(log))
    scope = {}
    exec(RECORDER_CELL, scope)
    exec(source, scope)
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_every_assert_records_and_the_cell_goes_on(tmp_path, monkeypatch):
    source = "x = 3\nassert x > 5, 'too small'\nfor i in range(2):\n    assert i == 0\ny = x + 1\n"
    out = record_asserts(source, cell=7)
    assert "assert" not in out and COMPARE in out and RECORDER in out
    records = _run(out + "\ndone = y\n", tmp_path, monkeypatch)
    assert [(r["ok"], r["cell"], r["line"], r["source"], r["sides"]) for r in records] == [
        (False, 7, 2, "x > 5", [3.0, 5.0]),  # a comparison records both sides
        (True, 7, 4, "i == 0", None),
        (False, 7, 4, "i == 0", None),
    ]


def test_cells_without_asserts_or_that_python_cannot_parse_are_unchanged():
    assert record_asserts("x = 1  # a comment\n", 0) == "x = 1  # a comment\n"
    magic = "%matplotlib inline\nassert False\n"
    assert record_asserts(magic, 0) == magic
    with pytest.raises(TypeError, match="source"):
        record_asserts(None, 0)


def test_the_rewritten_notebook_keeps_cell_numbers(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("# setup"),
        nbformat.v4.new_markdown_cell("text"),
        nbformat.v4.new_code_cell("assert 1 == 1"),
    ]
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    out = rewritten(path)
    assert RECORDER in out.cells[1].source  # the recorder's own cell, after the setup cell
    assert f"{RECORDER}(1 == 1, 1, 1, '1 == 1')" in out.cells[3].source
    assert RECORDER not in out.cells[0].source


def test_summary_names_the_offsets_an_assert_failed_at_and_its_margins():
    rec = {"cell": 3, "line": 2, "source": "a < b", "op": "lt"}
    sweep = {
        100: {"05": {"records": [{**rec, "ok": True, "sides": [1.0, 4.0]}], "errors": []}},
        200: {
            "05": {
                "records": [
                    {**rec, "ok": False, "sides": [5.0, 4.0]},
                    {**rec, "ok": True, "sides": [2.0, 4.0]},
                ],
                "errors": [],
            }
        },
        300: {"05": {"records": [{**rec, "line": 9, "source": "c", "ok": True}], "errors": []}},
    }
    failing, held = summarize(sweep)
    assert [(r["line"], r["ran"], r["failed"], r["margins"]) for r in failing] == [
        (2, [100, 200], [200], {100: 3.0, 200: -1.0})  # the smallest margin of the offset
    ]
    assert [(r["line"], r["failed"]) for r in held] == [(9, [])]
    assert closeness(failing[0]) == pytest.approx(-1 / (8**0.5))  # margins 3 and -1: sd 2.83
    assert closeness(held[0]) is None  # no sides recorded


@pytest.mark.slow
def test_a_sweep_runs_a_notebook_at_each_offset(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import os\nfrom multihead.viz.claims import claim"),
        nbformat.v4.new_code_cell(
            "offset = int(os.environ['MULTIHEAD_SEED_OFFSET'])\n"
            "assert offset % 2 == 0\n"
            "assert os.environ['MULTIHEAD_FAST'] == '1'\n"
            "claim('demo-even', 'open' if offset % 2 else 'proved and checked', 'parity')"
        ),
    ]
    path = tmp_path / "05_demo.ipynb"
    nbformat.write(nb, path)
    sweep = {o: run_offset(o, [str(path)], False, str(tmp_path)) for o in (0, 1)}
    failing, held = summarize(sweep)
    assert len(held) == 1 and [(r["line"], r["failed"]) for r in failing] == [(2, [1])]
    assert sweep[1]["05_demo"]["errors"] == []  # the failing assert did not stop the cell
    json.dumps(sweep)  # the sweep can be written out
    assert merge_verdicts(sweep) == {
        "demo-even": {"fast": {"0": {"word": "proved and checked"}, "1": {"word": "open"}}}
    }


def test_verdicts_merge_over_sweeps_run_in_parts():
    def sweep(offset, word, full, record=None):
        row = {"claim": "c", "word": word} | ({"record": record} if record else {})
        return {offset: {"05_x": {"verdicts": [row], "full": full}}}

    older = {"c": {"fast": {"100": "partly"}}}  # a file of words only, as sweeps once wrote
    first = merge_verdicts(sweep(300, "partly", False), older)
    second = merge_verdicts(sweep(100, "reproduced", True, {"r": 1}), first)
    third = merge_verdicts(sweep(200, "no clear effect", True), second)
    assert third == {
        "c": {
            "fast": {"100": {"word": "partly"}, "300": {"word": "partly"}},
            "full": {"100": {"word": "reproduced", "record": {"r": 1}},
                     "200": {"word": "no clear effect"}},
        }
    }  # fmt: skip
    again = merge_verdicts(sweep(100, "partly", True, {"r": 2}), third)
    assert again["c"]["full"]["100"] == {"word": "partly", "record": {"r": 2}}  # replaced
    assert first["c"]["fast"] == {"100": {"word": "partly"}, "300": {"word": "partly"}}
    assert older == {"c": {"fast": {"100": "partly"}}}  # merging copies, never edits


def test_the_markdown_summary_lists_what_failed():
    rec = {"cell": 3, "line": 2, "source": "a < b | c", "op": "lt"}
    sweep = {
        100: {"05_x": {"records": [{**rec, "ok": True, "sides": [1.0, 4.0]}], "errors": []}},
        200: {"05_x": {"records": [{**rec, "ok": False, "sides": [5.0, 4.0]}], "errors": []}},
    }
    text = render(sweep)
    assert "Offsets 100, 200 (2 runs of notebook 05 in fast mode" in text
    assert "`python -m tools.seedcheck --offsets 100 200 --notebooks 05`" in text
    assert "0 held at every offset, 1 failed" in text
    assert "| 05 | 3 | `a < b \\| c` | 200 | -1 |" in text  # the pipe escaped for the table


def test_bad_command_lines_say_what_is_wrong(capsys):
    for argv, words in (
        (["--offsets", "-5"], "--offsets must be non-negative"),
        ([], "give --offsets"),
        (["--offsets", "1", "--notebooks", "99"], "matches no notebook"),
        (["--full", "--offsets", "4987", "5000"], "at least 100 apart"),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        assert words in capsys.readouterr().err
