"""The published words: the claims page's verdict cells, the counts, and the package data that
every reader's run compares with, which must be what the recorded runs pool to."""

import importlib.util
import json
from pathlib import Path

import pytest

from tools import verdicts

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("stability", ROOT / "book/_ext/stability.py")
stability = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stability)


def test_the_package_holds_what_the_recorded_runs_pool_to():
    published = json.loads(verdicts.PACKAGE.read_text())
    fresh = verdicts.publish(verdicts.read_notebooks(), verdicts.load_sweep())
    stale = sorted(c for c in set(published) | set(fresh) if published.get(c) != fresh.get(c))
    assert not stale, (
        f"{len(stale)} published words differ from the recorded runs (e.g. {stale[:3]}): "
        "python -m tools.verdicts --publish"
    )
    assert stability.PUBLISHED == str(verdicts.PACKAGE.relative_to(ROOT))


def _record(values, offset, minimal=0.1):
    from multihead.analysis.verdict import judge, number_seeds, per_seed

    return number_seeds(judge(per_seed(values, claimed="higher"), minimal=minimal).record(), offset)


def test_a_claim_pools_the_books_run_with_the_sweeps_seed_sets():
    book = {"word": "partly", "record": _record([0.05, 0.12, 0.2, 0.1, 0.15], 0)}
    modes = {
        "full": {
            "4987": {"word": "reproduced", "record": _record([0.2, 0.25, 0.3, 0.22, 0.27], 4987)},
            "7987": {"word": "partly"},  # a run of an earlier design: shown apart, not pooled
        },
        "fast": {"0": {"word": "no clear effect"}, "300": {"word": "partly"}},
    }
    row = verdicts.entry(book, modes)
    assert row["pooled"] == ["0", "4987"] and row["seeds"] == 10
    assert row["basis"] == "10 seeds in 2 seed sets" and row["word"] == "reproduced"
    assert row["sets"] == {"0": "partly", "4987": "reproduced"}
    assert row["earlier"] == {"7987": "partly"}  # not counted among the current design's sets
    assert row["loo"] is False  # the book's set alone says partly
    lines = stability.describe(row)
    assert lines[0].startswith("pooled: +0.186 (95% interval")
    assert lines[1] == "each seed set's word: same at 1 of 2 (partly at the book's seeds)"
    assert "runs of an earlier design of the experiment, not pooled: partly at offset 7987" in lines
    assert "leaving out one seed set changes the pooled word" in lines
    assert lines[-1] == "fast mode: same word at 0 of 2 seed sets"
    # a sweep set judged by another minimal size is left out and named
    modes["full"]["4987"]["record"] = _record([0.2, 0.25, 0.3, 0.22, 0.27], 4987, minimal=0.2)
    row = verdicts.entry(book, modes)
    assert row["stale"] == ["4987"] and row["pooled"] == ["0"] and row["word"] == "partly"
    assert "rests on 5 seeds, fewer than the 10 the book asks" in stability.describe(row)
    # folds of fixed data (claim(fixed_data=True)) are numbered alike in every seed set: a
    # second cut of the same sentences is shown beside the word, never pooled with it
    modes["full"]["4987"]["record"] = _record([0.2, 0.25, 0.3, 0.22, 0.27], 0)
    row = verdicts.entry(book, modes)
    assert row["recut"] == ["4987"] and row["stale"] == [] and row["pooled"] == ["0"]
    assert row["sets"]["4987"] == "reproduced" and row["word"] == "partly"
    assert stability.describe(row)[0].startswith("the book's run: +0.124 (95% interval")
    assert (
        "offset 4987: the same sentences cut into other folds, so its word is shown and not "
        "pooled (a new cut adds no data)" in stability.describe(row)
    )


def test_a_stated_word_and_a_run_without_records_keep_the_notebooks_word():
    row = verdicts.entry({"word": "proved and checked", "record": None}, {})
    assert row["word"] == "proved and checked" and row["effect"] is None
    old = verdicts.entry({"word": "partly", "record": None}, {"full": {"100": {"word": "partly"}}})
    assert old["word"] == "partly" and old["sets"] == {"0": "partly", "100": "partly"}
    assert stability.describe(old)[:2] == [
        "the book's run alone (no per-seed effects recorded yet)",
        "each seed set's word: same at 2 of 2, by the rule before per-seed records",
    ]


def test_counts_print_words_per_chapter_and_the_stability_shares():
    rows = {
        "ch1-a": verdicts.entry({"word": "proved and checked", "record": None}, {}),
        "ch2-a": verdicts.entry({"word": "partly", "record": _record([0.05, 0.1, 0.15], 0)},
                                {"full": {"100": {"record": _record([0.1, 0.2, 0.3], 100),
                                                  "word": "reproduced"}}}),
    }  # fmt: skip
    text = verdicts.counts(rows)
    assert text.splitlines()[0] == "| chapter | partly | proved and checked | total |"
    assert "| all | 1 | 1 | 2 |" in text
    assert "the pooled word stays when any one seed set is left out: 0 of 1" in text


def test_competence_table_counts_the_passing_seeds_of_each_check_per_seed_set():
    from multihead.analysis.verdict import competence, judge, number_seeds, per_seed

    def record(values, losses, offset):
        ok = competence("the baseline learned it", losses, measure="loss", at_most=0.1)
        return number_seeds(judge(per_seed(values, claimed="higher"), minimal=0.1,
                                  competence=ok).record(), offset)  # fmt: skip

    book = record([0.2, 0.3, 0.25], [0.01, 0.5, 0.02], 0)  # 2 of 3 pass
    out = {
        "metadata": {"scrapbook": {"name": "claim_ch3_a_record"}},
        "data": {"application/papermill.record/text/plain": repr(json.dumps(book))},
    }
    notebooks = {"03.ipynb": {"cells": [{"outputs": [out]}]}}
    sweep = {"ch3-a": {"full": {"500": {"record": record([0.2, 0.3, 0.25], [0.01] * 3, 500)}}}}
    table = verdicts.competence_table(notebooks, sweep)
    assert table.splitlines()[-1] == "| 3 | the baseline learned it | 2/3 | 500: 3/3 |"


def test_publishing_quotes_the_new_word_beside_each_claim_in_the_committed_outputs(tmp_path):
    run = (
        "claim ch3-a: partly (evidence; effect +0.2)\n"
        "    this run (full mode, seed offset 0): partly; the book (5 seeds): reproduced\n"
        "claim ch3-b: ruled out (x)\n"
        "    this run (full mode, seed offset 0): ruled out; the book has no word for this "
        "claim yet\nother output\n"
    )
    cell = {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout",
                                             "text": run.splitlines(keepends=True)}]}  # fmt: skip
    (tmp_path / "notebooks").mkdir()
    path = tmp_path / "notebooks" / "03_x.ipynb"
    path.write_text(json.dumps({"cells": [cell]}, indent=1) + "\n")
    rows = {"ch3-a": {"basis": "10 seeds in 2 seed sets", "word": "partly"},
            "ch3-b": {"basis": "5 seeds", "word": "ruled out"}}  # fmt: skip
    assert verdicts.quote_published(rows, tmp_path) == ["03_x.ipynb"]
    text = "".join(json.loads(path.read_text())["cells"][0]["outputs"][0]["text"])
    assert text == (
        "claim ch3-a: partly (evidence; effect +0.2)\n"
        "    this run (full mode, seed offset 0): partly; the book (10 seeds in 2 seed sets): "
        "partly\n"
        "claim ch3-b: ruled out (x)\n"
        "    this run (full mode, seed offset 0): ruled out; the book (5 seeds): ruled out\n"
        "other output\n"
    )
    assert verdicts.quote_published(rows, tmp_path) == []  # a second pass changes nothing


def test_counts_tabulate_each_chapter_and_the_total_by_word():
    words = {"ch1-a": "reproduced", "ch1-b": "proved and checked", "ch2-a": "ruled out",
             "ch10-a": "no clear effect", "ch2-b": "contradicted"}  # fmt: skip
    columns, rows = stability.counts(words)
    assert columns == ["reproduced", "ruled out", "no clear effect", "contradicted",
                       "proved and checked"]  # fmt: skip
    assert rows == [
        ("chapter 1", [1, 0, 0, 0, 1]),
        ("chapter 2", [0, 1, 0, 1, 0]),
        ("chapter 10", [0, 0, 1, 0, 0]),
        ("all chapters", [1, 1, 1, 1, 1]),
    ]


def test_the_sweep_file_gives_every_claim_three_other_fast_seed_sets():
    sweep = verdicts.load_sweep()
    words = {c: r["word"] for c, r in verdicts.notebook_glue(verdicts.read_notebooks()).items()}
    missing = [c for c in words if len(set(sweep.get(c, {}).get("fast", {})) - {"0"}) < 3]
    assert not missing, f"no fast-mode sweep at 3 other offsets for {missing}"
    stale = sorted(set(sweep) - set(words))
    assert not stale, f"the sweep file has claims no notebook makes: {stale}"


@pytest.mark.parametrize("claim", ["ch10-mqa-degrades", "ch1-heads-sum"])
def test_every_published_row_has_its_lines(claim):
    row = json.loads(verdicts.PACKAGE.read_text())[claim]
    assert row["word"] and stability.describe(row)


def _glued(claim, record):
    """A notebook cell's outputs gluing ``claim``'s record and word, as ``claim`` does."""
    from multihead.analysis.verdict import pool

    name = "claim_" + claim.replace("-", "_")
    texts = {"record": repr(json.dumps(record)), "verdict": repr(pool([record]).word)}
    return [{"metadata": {"scrapbook": {"name": f"{name}_{field}"}},
             "data": {"application/papermill.record/text/plain": text}}
            for field, text in texts.items()]  # fmt: skip


def test_power_simulates_seed_sets_of_each_size_from_the_pooled_seeds():
    from multihead.analysis.effects import per_seed, solved_share
    from multihead.analysis.verdict import judge, number_seeds

    far = _record([0.5, 0.52, 0.48], 0)  # far beyond its minimal size 0.1: every set agrees
    wide = _record([-0.1, 0.2, 0.05], 0)  # spread wide around half the minimal size
    edge = _record([0.03, 0.23, 0.13], 0)  # above the minimal size by an interval's half-width
    corr = number_seeds(judge(per_seed([0.8, 0.85, 0.9], claimed="higher", correlation=True),
                              minimal=0.3).record(), 0)  # fmt: skip
    share = number_seeds(judge(solved_share([True] * 3), minimal=0.5).record(), 0)
    sweep = {
        "ch2-far": {"full": {"100": {"record": _record([0.51, 0.49, 0.5], 100), "word": "x"}}},
        "ch2-wide": {"full": {"100": {"record": _record([0.0, 0.1, 0.05], 100), "word": "x"}}},
        "ch2-edge": {"full": {"100": {"record": _record([0.08, 0.18, 0.13], 100), "word": "x"}}},
        "ch2-corr": {
            "full": {
                "100": {
                    "record": number_seeds(
                        judge(
                            per_seed([0.82, 0.88, 0.86], claimed="higher", correlation=True),
                            minimal=0.3,
                        ).record(),
                        100,
                    ),
                    "word": "x",
                }
            }
        },  # fmt: skip
        "ch2-share": {
            "full": {
                "100": {
                    "record": number_seeds(
                        judge(solved_share([True] * 3), minimal=0.5).record(), 100
                    ),
                    "word": "x",
                }
            }
        },
    }
    notebooks = {}
    for claim, rec in (("ch2-far", far), ("ch2-wide", wide), ("ch2-edge", edge),
                       ("ch2-corr", corr), ("ch2-share", share)):  # fmt: skip
        notebooks[f"{claim}.ipynb"] = {"cells": [{"outputs": _glued(claim, rec)}]}
    rows = verdicts.publish(notebooks, sweep)
    assert rows["ch2-wide"]["word"] == "no clear effect"
    text = verdicts.power(rows, notebooks, sweep, sizes=(5, 20), draws=200)
    cells = {
        line.split(" | ")[0][2:]: line.strip("| ").split(" | ")[1:]
        for line in text.splitlines()
        if line.startswith("| ch")
    }  # claim: [effect kind, word, 5 now, 5 agree, 20 now, 20 agree]
    assert cells["ch2-far"][2:] == ["1.00"] * 4
    assert cells["ch2-corr"][:1] == ["correlation"] and cells["ch2-corr"][2:] == ["1.00"] * 4
    # every seed solved, judged by an exact interval, which five seeds cannot bring past
    # 0.5 (its lower end is 0.48: *partly*) and ten or twenty can: two sets of five say
    # *partly* where their pooled ten say *reproduced*
    assert cells["ch2-share"][:1] == ["share"] and cells["ch2-share"][2:] == [
        "0.00", "0.00", "1.00", "1.00"]  # fmt: skip
    five, _, twenty, _ = (float(x) for x in cells["ch2-wide"][2:])
    # "no clear effect" says the evidence is short: larger sets give it less often
    assert 0.5 < five < 0.95 and twenty < five - 0.3
    # an effect one half-width of a 20-seed interval above the minimal size: sets of 20
    # split between *partly* and *reproduced*
    assert float(cells["ch2-edge"][5]) < 0.75
    assert "a set of 5 seeds gives the published word 9 times in 10 or more: 2 of 5 rows" in text
    assert "a set of 20 seeds gives the published word 9 times in 10 or more: 3 of 5 rows" in text
    both = float(text.split("two sets of 5 seeds would both give the published word on about ")
                 [1].split(" of 5 rows")[0])  # fmt: skip
    now5 = [float(c[2]) for c in cells.values()]
    assert both == pytest.approx(sum(p**2 for p in now5), abs=0.06)
    agree20 = float(text.split("two sets of 20 seeds would both give the word they give pooled "
                               "on about ")[1].split(" of 5 rows")[0])  # fmt: skip
    assert agree20 == pytest.approx(sum(float(c[5]) for c in cells.values()), abs=0.06)
