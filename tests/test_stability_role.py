"""The claims page's stability text: the book's word against the sweep's words."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("stability", ROOT / "book/_ext/stability.py")
stability = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stability)


def test_describe_counts_the_same_word_and_names_the_others():
    modes = {
        "full": {"0": "partly", "100": "partly", "200": "no clear effect"},
        "fast": {"0": "no clear effect", "100": "partly", "300": "no clear effect"},
    }
    text = stability.describe("partly", modes)
    assert text == (
        "same word at 1 of 2 other seed sets (no clear effect at 200); same word "
        "at 1 of 3 seed sets in fast mode (no clear effect at the book's seeds, 300)"
    )
    assert stability.describe("partly", {}) == "not swept yet"
    assert stability.describe("partly", {"fast": {"100": "partly"}}) == (
        "other seed sets not yet run in full mode; same word at 1 of 1 seed sets in fast mode"
    )


def test_every_claim_of_the_committed_notebooks_has_a_book_word():
    words = stability._book_words(ROOT)
    assert len(words) >= 80
    assert all(w for w in words.values())


def test_the_sweep_file_gives_every_claim_three_other_fast_seed_sets():
    sweep = json.loads((ROOT / stability.VERDICTS).read_text())
    words = stability._book_words(ROOT)
    missing = [c for c in words if len(set(sweep.get(c, {}).get("fast", {})) - {"0"}) < 3]
    assert not missing, f"no fast-mode sweep at 3 other offsets for {missing}"
    stale = sorted(set(sweep) - set(words))
    assert not stale, f"the sweep file has claims no notebook makes: {stale}"


def test_counts_tabulate_each_chapter_and_the_total_by_word():
    words = {"ch1-a": "reproduced", "ch1-b": "proved and checked", "ch2-a": "reproduced",
             "ch10-a": "no clear effect", "ch2-b": "contradicted"}  # fmt: skip
    columns, rows = stability.counts(words)
    assert columns == ["reproduced", "no clear effect", "contradicted", "proved and checked"]
    assert rows == [
        ("chapter 1", [1, 0, 0, 1]),
        ("chapter 2", [1, 0, 1, 0]),
        ("chapter 10", [0, 1, 0, 0]),
        ("all chapters", [2, 1, 1, 1]),
    ]
