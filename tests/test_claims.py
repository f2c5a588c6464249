"""The claims module: verdict vocabulary, glue names, bad input."""

import json

import pytest

from multihead.viz import claims


def test_glue_name_and_claim_print(capsys):
    assert claims.glue_name("drophead-accuracy", "verdict") == "claim_drophead_accuracy_verdict"
    claims.claim("key-size", "partly", "0.004 (3 seeds)")
    assert "claim key-size: partly (0.004 (3 seeds))" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, word",
    [
        (("Key size", "partly", "x"), "claim_id"),
        (("key-size", "yes", "x"), "verdict"),
        (("key-size", "partly", ""), "evidence"),
        (("key-size", "partly", "a\nb"), "evidence"),
        (("key-size", "partly", "a | b"), "evidence"),
    ],
)
def test_claim_rejects_bad_input(args, word):
    with pytest.raises(ValueError, match=word):
        claims.claim(*args)


def test_spread():
    assert claims.spread([0.1, 0.3, 0.2]) == "0.200 (0.100 to 0.300, 3 seeds)"
    assert claims.spread([2.0], ".1f") == "2.0 (1 seed)"
    assert claims.spread([1, 2], ".0f", unit="fold") == "2 (1 to 2, 2 folds)"
    assert claims.spread([0, 0, 0], "d") == "0 (0 to 0, 3 seeds)"
    assert claims.spread([0.0, 3.0, 1.0, 3.0, 0.0], "d") == "1.4 (0 to 3, 5 seeds)"
    with pytest.raises(ValueError, match="counts"):
        claims.spread([0.5, 1], "d")
    with pytest.raises(TypeError, match="unit"):
        claims.spread([1, 2], unit="")
    with pytest.raises(ValueError, match="values"):
        claims.spread([])
    with pytest.raises(TypeError, match="values"):
        claims.spread("abc")
    with pytest.raises(ValueError, match="finite"):
        claims.spread([float("nan")])
    with pytest.raises(ValueError, match="fmt"):
        claims.spread([1.0], "x")


def test_claim_with_a_verdict_adds_its_effect_and_logs_its_record(capsys, tmp_path, monkeypatch):
    from multihead.analysis.verdict import judge, per_seed, pool

    log = tmp_path / "verdicts.jsonl"
    monkeypatch.setenv(claims.LOG_ENV, str(log))
    monkeypatch.setenv("MULTIHEAD_SEED_OFFSET", "200")
    v = judge(per_seed([0.2, 0.3, 0.25], claimed="higher"), minimal=0.1)
    claims.claim("key-size", v, "gain per seed", fmt="+.2f")
    out = capsys.readouterr().out
    assert "claim key-size: reproduced (gain per seed; effect +0.25 (95% interval" in out
    claims.claim("key-size-proof", "proved and checked", "to 1e-9")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert rows[0]["claim"] == "key-size" and rows[0]["word"] == "reproduced"
    assert rows[0]["offset"] == 200 and rows[0]["mode"] in ("fast", "full")
    # the record holds the per-seed effects, numbered from the offset, and judges again
    assert rows[0]["record"]["effect"]["sets"][0]["ids"] == [200, 201, 202]
    assert pool([rows[0]["record"]]).word == "reproduced"
    assert "record" not in rows[1] and rows[1]["word"] == "proved and checked"


def test_folds_of_fixed_data_never_pool_with_another_seed_sets_folds(monkeypatch, tmp_path):
    from multihead.analysis.verdict import judge, per_seed, pool

    log = tmp_path / "verdicts.jsonl"
    monkeypatch.setenv(claims.LOG_ENV, str(log))
    for offset in ("0", "5000"):
        monkeypatch.setenv("MULTIHEAD_SEED_OFFSET", offset)
        v = judge(per_seed([0.2, 0.3, 0.25], claimed="higher", seed_name="folds"), minimal=0.1)
        claims.claim("fixed-folds", v, "lead per fold", fixed_data=True)
        claims.claim("drawn-folds", v, "lead per fold")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    fixed = [r["record"] for r in rows if r["claim"] == "fixed-folds"]
    drawn = [r["record"] for r in rows if r["claim"] == "drawn-folds"]
    # folds of the same sentences, cut again: numbered alike, so pooling them is refused
    assert fixed[0]["effect"]["sets"][0]["ids"] == fixed[1]["effect"]["sets"][0]["ids"]
    with pytest.raises(ValueError, match="two seed sets"):
        pool(fixed)
    # folds of data drawn per seed set pool into one verdict of six folds
    assert pool(drawn).effect.seeds == 6
    with pytest.raises(TypeError, match="fixed_data"):
        claims.claim("fixed-folds", v, "lead per fold", fixed_data="yes")


def test_a_run_shows_its_word_beside_the_books(capsys, monkeypatch):
    from multihead.analysis.verdict import judge, per_seed

    monkeypatch.delenv("MULTIHEAD_SEED_OFFSET", raising=False)
    book = claims.book_words()
    assert book, "the package carries no book words (python -m tools.verdicts --publish)"
    claim_id, entry = next(iter(sorted(book.items())))
    v = judge(per_seed([0.2, 0.3, 0.25], claimed="higher"), minimal=0.1)
    claims.claim(claim_id, v, "a reader's run")
    out = capsys.readouterr().out
    assert f"the book ({entry['basis']}): {entry['word']}" in out
    assert "this run (" in out and "): reproduced" in out
    claims.claim("not-a-book-claim", v, "a new claim")
    assert "the book has no word for this claim yet" in capsys.readouterr().out
