"""The words the book publishes: every claim's seed sets pooled into one word, and counts.

A notebook's run records, per claim, the per-seed effects its word rests on (``claim`` glues
``claim_<id>_record`` into the committed notebook: the book's seed set), and the seed sweep
(``python -m tools.seedcheck --full --offsets ... --verdicts book/_generated/verdicts.json``)
adds the records of other seed sets, each with test data of its own. This command pools, per
claim, every full-mode seed set that has a record (``multihead.analysis.verdict.pool``) and
writes the published words into the package, where the claims page and every reader's run
read them::

    python -m tools.verdicts --publish    # writes src/multihead/viz/book_verdicts.json
    python -m tools.verdicts --counts     # verdict counts per chapter, stability shares
    python -m tools.verdicts --competence # seeds that passed each competence check
    python -m tools.verdicts --power      # how often 5, 10, 20 seeds give each word
    python -m tools.verdicts --counts --sweep old.json --notebooks-at 3f58eab

A claim with no record anywhere (a stated word, or runs made before records existed) keeps
the word its notebook glued. ``--publish`` also rewrites, in the committed notebooks'
outputs, the line beside each claim that quotes the book's word (what a run after publishing
prints there; the run's own word and record are left as they were). Where the book's run has
a record, a seed set with a word alone is a run of an earlier design of the experiment:
listed apart (``earlier``), never pooled or counted among the seed sets. ``--counts`` prints
how many claims of each chapter get each word, how many empirical rows rest on 10 seeds or
more, the share of empirical rows whose every full-mode seed set gives the published word,
and the share whose pooled word stays the same when any one seed set is left out.
``--power`` simulates seed sets of 5, 10 and 20 seeds from each row's pooled seeds and prints
how often each would give the published word, and how often two such sets would both give the
word they give pooled (the stability of a book whose seed sets had that size).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "book" / "_generated" / "verdicts.json"
PACKAGE = ROOT / "src" / "multihead" / "viz" / "book_verdicts.json"
BOOK_OFFSET = "0"  # the committed notebooks run the book's seed set
ORDER = ("reproduced", "partly", "ruled out", "no clear effect", "contradicted",
         "not at this scale", "proved and checked", "open")  # fmt: skip
STATED = ("proved and checked", "open")


def load_sweep(path: Path = SWEEP) -> dict:
    """``{claim: {"full"|"fast": {offset: {"word": ..., "record": ... (where logged)}}}}``;
    older files that hold only words per offset read as entries without a record."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {
        claim: {
            mode: {o: e if isinstance(e, dict) else {"word": e} for o, e in runs.items()}
            for mode, runs in modes.items()
        }
        for claim, modes in data.items()
    }


def _glued_text(out: dict) -> str:
    text = out["data"].get("application/papermill.record/text/plain", "")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text.strip("'\"")


def notebook_glue(notebooks: dict[str, dict]) -> dict:
    """``{claim: {"word": ..., "record": ... or None}}`` from notebooks (name -> JSON)."""
    found: dict = {}
    for nb in notebooks.values():
        for cell in nb.get("cells", []):
            for out in cell.get("outputs", []):
                name = out.get("metadata", {}).get("scrapbook", {}).get("name", "")
                for field in ("verdict", "record"):
                    if name.startswith("claim_") and name.endswith(f"_{field}"):
                        claim = name[len("claim_") : -len(field) - 1].replace("_", "-")
                        entry = found.setdefault(claim, {"word": None, "record": None})
                        text = _glued_text(out)
                        entry["word" if field == "verdict" else "record"] = (
                            text if field == "verdict" else json.loads(text)
                        )
    return found


def read_notebooks(root: Path = ROOT, commit: str | None = None) -> dict[str, dict]:
    """The committed notebooks (at ``commit`` where given, via git)."""
    if commit is None:
        paths = sorted((root / "notebooks").glob("*.ipynb"))
        return {p.name: json.loads(p.read_text()) for p in paths}
    names = subprocess.run(["git", "-C", str(root), "ls-tree", "--name-only", commit,
                            "notebooks/"], capture_output=True, text=True, check=True)  # fmt: skip
    out = {}
    for name in names.stdout.split():
        if name.endswith(".ipynb"):
            text = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{name}"],
                                  capture_output=True, text=True, check=True).stdout  # fmt: skip
            out[Path(name).name] = json.loads(text)
    return out


def _basis(effect) -> str:
    sets = len(effect.sets)
    return f"{effect.seeds} {effect.seed_name}" + (f" in {sets} seed sets" if sets > 1 else "")


def _seed_ids(record: dict) -> set:
    """The seeds (or folds) of a record's primary effect."""
    if "conditions" in record:
        return _seed_ids(dict(record["conditions"])[record["primary"]])
    return {i for s in record["effect"]["sets"] for i in s.get("ids") or ()}


def entry(book: dict, modes: dict) -> dict:
    """The published row of one claim from its notebook's glue (``book``) and its sweep
    entries (``modes``)."""
    from multihead.analysis.verdict import pool

    full = {o: dict(e) for o, e in modes.get("full", {}).items()}
    if book.get("record") is not None:
        full[BOOK_OFFSET] = {"word": book["word"], "record": book["record"]}
    elif BOOK_OFFSET not in full and book.get("word"):
        full[BOOK_OFFSET] = {"word": book["word"]}
    order = sorted(full, key=int)
    # Where the book's run logs per-seed records, a seed set with a word alone is a run made
    # before records existed, of an earlier design of the experiment: shown apart as
    # "earlier", never pooled, and not counted among the seed sets of the current design.
    earlier = {}
    if book.get("record") is not None:
        earlier = {o: full.pop(o)["word"] for o in order if not full[o].get("record")}
        order = [o for o in order if o not in earlier]
    sets = {}
    for o in order:
        rec = full[o].get("record")
        sets[o] = pool([rec]).word if rec else full[o]["word"]
    row = {"word": book.get("word"), "basis": "the book's run", "effect": None, "seeds": None,
           "sets": sets, "fast": {o: pool([e["record"]]).word if e.get("record") else e["word"]
                    for o, e in modes.get("fast", {}).items()},
           "pooled": [], "stale": [], "recut": [], "others": "", "loo": None, "earlier": earlier,
           "recorded": [o for o in order if full[o].get("record")]}  # fmt: skip
    if book.get("word") in STATED or not any(full[o].get("record") for o in order):
        return row
    # the book's own record decides the rule; a sweep set judged by another rule is stale
    anchor = full[BOOK_OFFSET].get("record") if BOOK_OFFSET in full else None
    usable = []
    for o in order:
        rec = full[o].get("record")
        if rec is None:
            continue
        if anchor is not None and o != BOOK_OFFSET and _seed_ids(anchor) & _seed_ids(rec):
            row["recut"].append(o)  # folds of the same data cut again (claim(fixed_data=True))
            continue
        try:
            pool([anchor, rec] if anchor is not None and o != BOOK_OFFSET else [rec])
        except ValueError:
            row["stale"].append(o)
            continue
        usable.append(o)
    try:
        verdict = pool([full[o]["record"] for o in usable])
    except ValueError:  # overlapping seeds: keep the book's own set
        row["stale"] += [o for o in usable if o != BOOK_OFFSET]
        usable = [BOOK_OFFSET] if anchor is not None else usable[:1]
        verdict = pool([full[o]["record"] for o in usable])
    row.update(word=verdict.word, effect=verdict.describe(), seeds=verdict.effect.seeds,
               basis=_basis(verdict.effect), pooled=usable, others=verdict.others())  # fmt: skip
    if len(usable) >= 2:
        row["loo"] = all(
            pool([full[o]["record"] for o in usable if o != out]).word == verdict.word
            for out in usable
        )
    return row


def publish(notebooks: dict[str, dict], sweep: dict) -> dict:
    """``{claim: published row}`` for every claim a notebook glues."""
    glued = notebook_glue(notebooks)
    return {c: entry(glued[c], sweep.get(c, {})) for c in sorted(glued, key=_chapter_key)}


def _chapter_key(claim: str) -> tuple:
    head = claim.split("-")[0]
    return (int(head[2:]) if head[2:].isdigit() else 99, claim)


def counts(rows: dict) -> str:
    """Verdict counts per chapter, then the seeds and stability shares, as text."""
    words = [w for w in ORDER if any(r["word"] == w for r in rows.values())]
    words += sorted({r["word"] for r in rows.values()} - set(words))
    table: dict[str, list[int]] = {}
    for claim, r in rows.items():
        table.setdefault(claim.split("-")[0], [0] * len(words))[words.index(r["word"])] += 1
    lines = ["| chapter | " + " | ".join(words) + " | total |", "|---" * (len(words) + 2) + "|"]
    for ch, n in table.items():
        lines.append(f"| {ch[2:]} | " + " | ".join(map(str, n)) + f" | {sum(n)} |")
    total = [sum(n[i] for n in table.values()) for i in range(len(words))]
    lines.append("| all | " + " | ".join(map(str, total)) + f" | {sum(total)} |")
    empirical = {c: r for c, r in rows.items() if r["word"] not in STATED and (
        r["effect"] is not None or r["word"] != "not at this scale")}  # fmt: skip
    n = len(empirical)
    swept = {c: r for c, r in empirical.items() if len(r["sets"]) >= 2}
    agree = sum(all(w == r["word"] for w in r["sets"].values()) for r in swept.values())
    ten = sum((r["seeds"] or 0) >= 10 for r in empirical.values())
    loo = [r["loo"] for r in empirical.values() if r["loo"] is not None]
    fast = [r for r in empirical.values() if BOOK_OFFSET in r["fast"]]
    same_fast = sum(r["fast"][BOOK_OFFSET] == r["word"] for r in fast)
    lines += [
        "",
        f"empirical rows: {n}; resting on 10 seeds or more: {ten}",
        f"every full-mode seed set gives the published word: {agree} of {len(swept)} rows "
        f"with 2 or more sets ({_share(agree, len(swept))})",
        f"the pooled word stays when any one seed set is left out: {sum(loo)} of {len(loo)} "
        f"pooled rows ({_share(sum(loo), len(loo))})",
        f"fast mode at the book's seeds gives the published word: {same_fast} of {len(fast)}",
    ]
    return "\n".join(lines)


def _checks(record: dict):
    """Every competence check in a record (a combined record holds one per condition)."""
    yield from record.get("competence") or []
    for _, sub in record.get("conditions") or []:
        yield from _checks(sub)


def competence_table(notebooks: dict[str, dict], sweep: dict) -> str:
    """Per chapter and competence check: how many seeds (or folds, windows) passed, at the
    book's seed set and at each full-mode seed set of the sweep, as markdown."""
    found: dict = {}  # (chapter, task) -> {offset: (passed, n)}
    glued = notebook_glue(notebooks)
    for claim in sorted(glued, key=_chapter_key):
        sets = {o: e.get("record") for o, e in sweep.get(claim, {}).get("full", {}).items()}
        sets[BOOK_OFFSET] = glued[claim].get("record")
        for offset, record in sets.items():
            for check in _checks(record or {}):
                passed = sum(
                    (v >= check["threshold"]) if check["higher"] else (v <= check["threshold"])
                    for v in check["values"]
                )
                key = (claim.split("-")[0][2:], check["task"])
                found.setdefault(key, {}).setdefault(offset, (passed, len(check["values"])))
    lines = ["| chapter | the baseline ... | book's set | other seed sets |", "|---|---|---|---|"]
    for (chapter, task), by in found.items():
        book = "{}/{}".format(*by[BOOK_OFFSET]) if BOOK_OFFSET in by else "-"
        others = ", ".join(f"{o}: {p}/{n}" for o, (p, n) in sorted(by.items(), key=lambda t:
                           int(t[0])) if o != BOOK_OFFSET)  # fmt: skip
        lines.append(f"| {chapter} | {task} | {book} | {others or '-'} |")
    return "\n".join(lines)


def _share(k: int, n: int) -> str:
    return f"{100 * k / n:.0f}%" if n else "none to count"


def write_package(rows: dict, path: Path = PACKAGE) -> None:
    path.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


# "claim <id>: <the run's word> (...)" then "    this run (...): <word>; the book (<basis>):
# <word>", as multihead.viz.claims prints them: the second line quotes the package.
BESIDE = re.compile(r"(claim (ch[\w-]+): [^\n]*\n\s+this run \([^)]*\): [^;\n]+; )"
                    r"the book (?:\([^)]*\): [^\n]+|has no word for this claim yet)")  # fmt: skip


def quote_published(rows: dict, root: Path = ROOT) -> list[str]:
    """Rewrite, in the committed notebooks' outputs, the line that quotes the book's word
    beside a claim, from the package's published rows: what a run after ``--publish`` would
    print there. The run's own word, evidence and record stay as the run made them. Returns
    the notebooks changed.

    Shapes: none.
    """
    changed = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        text = path.read_text()
        nb = json.loads(text)
        for cell in nb.get("cells", []):
            for out in cell.get("outputs", []):
                if out.get("output_type") != "stream":
                    continue
                old = "".join(out["text"])

                def quote(m: re.Match) -> str:
                    row = rows.get(m.group(2))
                    if row is None:
                        return m.group(0)
                    return f"{m.group(1)}the book ({row['basis']}): {row['word']}"

                new = BESIDE.sub(quote, old)
                if new != old:
                    out["text"] = new.splitlines(keepends=True)
        new_text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
        if new_text != text:
            path.write_text(new_text)
            changed.append(path.name)
    return changed


def _simulator(prim):
    """A draw of one seed's value under a model of the row's pooled seeds, and the effect of
    n such draws: normal per seed for a mean, normal on Fisher's scale for a correlation,
    Bernoulli at the pooled share for a share."""
    import math

    from multihead.analysis.effects import _EDGE, per_seed, solved_share

    e = prim.effect
    values = [x for s in e.sets for x in s.values]
    if e.kind == "share":
        p = sum(values) / len(values)
        return (lambda rng: rng.random() < p,
                lambda xs: solved_share(xs, claimed=e.claimed, reference=e.reference))  # fmt: skip
    corr = e.kind == "correlation"
    z = [math.atanh(max(-_EDGE, min(_EDGE, x))) if corr else x for x in values]  # as effects
    mean = sum(z) / len(z)
    sd = (sum((x - mean) ** 2 for x in z) / (len(z) - 1)) ** 0.5
    return (lambda rng: math.tanh(rng.gauss(mean, sd)) if corr else rng.gauss(mean, sd),
            lambda xs: per_seed(xs, claimed=e.claimed, reference=e.reference,
                                correlation=corr))  # fmt: skip


def power(rows: dict, notebooks: dict[str, dict], sweep: dict, sizes=(5, 10, 20),
          draws: int = 400, seed: int = 0) -> str:  # fmt: skip
    """What seed sets of each size in ``sizes`` would give, under a model of each row's pooled
    seeds (``_simulator``; ``draws`` simulated pairs of sets per size), for the row's primary
    condition judged at its level by its rule. Two columns per size: how often one set gives
    the word the book publishes now (*now*), and how often two sets both give the word that
    they give pooled (*agree*): the stability ``--counts`` measures, for a book whose every
    seed set had that size. A word that says the evidence is short (*no clear effect*,
    *partly*) becomes rarer as sets grow, so *now* may fall. *agree* is low where the effect
    lies within about an interval's half-width of a word's boundary (0 or plus or minus the
    minimal size); the half-width shrinks only as one over the root of the seeds, so a row
    whose effect lies near a boundary needs many times the seeds to keep its word.

    Shapes: none.
    """
    import random

    from multihead.analysis.verdict import judge, pool

    rng, glued, lines, now, agree = random.Random(seed), notebook_glue(notebooks), [], {}, {}
    for claim, row in rows.items():
        if row["word"] in STATED or row["effect"] is None or (row["seeds"] or 0) < 5:
            continue
        full = {BOOK_OFFSET: glued[claim]["record"], **{o: e["record"] for o, e in
                sweep.get(claim, {}).get("full", {}).items() if e.get("record")}}  # fmt: skip
        v = pool([full[o] for o in row["pooled"]])
        prim = dict(v.conditions)[v.primary] if v.conditions else v
        if prim.word == "not at this scale":
            continue
        draw, effect = _simulator(prim)

        def word(xs, effect=effect, prim=prim):
            e = effect(xs).at(prim.effect.level)
            return judge(e, minimal=prim.minimal, margin=prim.margin).word

        now[claim], agree[claim] = {}, {}
        for n in sizes:
            same = both = 0
            for _ in range(draws):
                a, b = [draw(rng) for _ in range(n)], [draw(rng) for _ in range(n)]
                wa, wb, wp = word(a), word(b), word(a + b)
                same += wa == prim.word
                both += wa == wb == wp
            now[claim][n], agree[claim][n] = same / draws, both / draws
        cells = " | ".join(f"{now[claim][n]:.2f} | {agree[claim][n]:.2f}" for n in sizes)
        lines.append(f"| {claim} | {prim.effect.kind} | {prim.word} | {cells} |")
    head = ["| claim | effect | published word | "
            + " | ".join(f"{n} seeds: now | {n}: agree" for n in sizes) + " |",
            "|---" * (3 + 2 * len(sizes)) + "|"]  # fmt: skip
    tail = [
        f"a set of {n} seeds gives the published word 9 times in 10 or more: "
        f"{sum(p[n] >= 0.9 for p in now.values())} of {len(now)} rows"
        for n in sizes
    ]
    # two independent sets agree with the published word with probability p squared
    tail += [
        f"two sets of {n} seeds would both give the published word on about "
        f"{sum(p[n] ** 2 for p in now.values()):.1f} of {len(now)} rows"
        for n in sizes
    ]
    tail += [
        f"two sets of {n} seeds would both give the word they give pooled on about "
        f"{sum(p[n] for p in agree.values()):.1f} of {len(agree)} rows"
        for n in sizes
    ]
    return "\n".join(head + lines + [""] + tail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.verdicts", description=__doc__)
    parser.add_argument("--publish", action="store_true", help=f"write {PACKAGE.name}")
    parser.add_argument("--counts", action="store_true", help="print counts and stability")
    parser.add_argument("--competence", action="store_true",
                        help="print how many seeds passed each competence check")  # fmt: skip
    parser.add_argument("--power", action="store_true",
                        help="how often 5, 10 or 20 seeds give each published word")  # fmt: skip
    parser.add_argument("--sweep", type=Path, default=SWEEP, help="the sweep's verdicts file")
    parser.add_argument("--notebooks-at", default=None, help="read the notebooks at a commit")
    args = parser.parse_args(argv)
    if not (args.publish or args.counts or args.competence or args.power):
        parser.error("give --publish, --counts, --competence or --power")
    notebooks, sweep = read_notebooks(ROOT, args.notebooks_at), load_sweep(args.sweep)
    if args.competence:
        print(competence_table(notebooks, sweep))
        if not (args.publish or args.counts):
            return 0
    rows = publish(notebooks, sweep)
    if args.publish:
        write_package(rows)
        print(f"published words of {len(rows)} claims in {PACKAGE.relative_to(ROOT)}")
        if args.notebooks_at is None:
            changed = quote_published(rows)
            print(f"the book's words quoted again in {len(changed)} notebooks' outputs")
        stale = {c: r["stale"] for c, r in rows.items() if r["stale"]}
        if stale:
            print(f"seed sets left out as judged by another rule: {stale}")
        recut = {c: r["recut"] for c, r in rows.items() if r["recut"]}
        if recut:
            print(f"seed sets that cut the same data into other folds, not pooled: {recut}")
    if args.counts:
        print(counts(rows))
    if args.power:
        print(power(rows, notebooks, sweep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
