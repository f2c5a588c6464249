"""The words the book publishes, on the claims page and in the chapters.

Every claim's published word is its seed sets pooled (``python -m tools.verdicts --publish``
writes them into the package, ``src/multihead/viz/book_verdicts.json``, where a reader's run
reads them too). This extension shows them:

* ``{verdict}`claim-id``` (a claims row's verdict cell): the published word; the pooled
  effect with its interval and the seeds it rests on; each full-mode seed set's own word
  beside it; the other conditions' words where the claim has several; fast mode's words;
* ``{word}`claim-id``` (prose): the published word alone;
* ``{verdict-counts}``: how many claims of each chapter get each published word.
"""

import json
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive

PUBLISHED = "src/multihead/viz/book_verdicts.json"
MIN_POOLED = 10  # full-mode seeds a published word rests on
ORDER = ["reproduced", "partly", "ruled out", "no clear effect", "contradicted",
         "not at this scale", "proved and checked", "open"]  # fmt: skip


def _set_name(offset: str) -> str:
    return "the book's seeds" if offset == "0" else f"offset {offset}"


def describe(row: dict) -> list[str]:
    """The lines under the word of a claims row: what it rests on and how it moves."""
    lines = []
    if row.get("effect"):
        basis = "pooled" if len(row.get("pooled") or ()) > 1 else "the book's run"
        lines.append(f"{basis}: {row['effect']}")
        if (row.get("seeds") or 0) < MIN_POOLED:
            lines.append(f"rests on {row['basis']}, fewer than the {MIN_POOLED} the book asks")
    else:
        lines.append("the book's run alone (no per-seed effects recorded yet)")
    sets = row.get("sets", {})
    if len(sets) > 1:
        words = [(o, w) for o, w in sorted(sets.items(), key=lambda t: int(t[0]))]
        same = [o for o, w in words if w == row["word"]]
        text = f"each seed set's word: same at {len(same)} of {len(words)}"
        other = [f"{w} at {_set_name(o)}" for o, w in words if w != row["word"]]
        lines.append(text + (f" ({'; '.join(other)})" if other else ""))
        if not row.get("recorded"):
            lines[-1] += ", by the rule before per-seed records"
    elif not row.get("effect"):
        lines.append("other seed sets not yet run in full mode")
    recut = row.get("recut") or []
    if recut:
        names = ", ".join(_set_name(o) for o in recut)
        lines.append(
            f"{names}: the same sentences cut into other folds, so its word is shown and not "
            "pooled (a new cut adds no data)"
        )
    earlier = row.get("earlier") or {}
    if earlier:
        runs = "; ".join(f"{w} at {_set_name(o)}" for o, w in sorted(earlier.items(),
                         key=lambda t: int(t[0])))  # fmt: skip
        lines.append(f"runs of an earlier design of the experiment, not pooled: {runs}")
    if row.get("loo") is False:
        lines.append("leaving out one seed set changes the pooled word")
    if row.get("others"):
        lines.append(f"other conditions: {row['others']}")
    fast = row.get("fast", {})
    if fast:
        same = sum(w == row["word"] for w in fast.values())
        lines.append(f"fast mode: same word at {same} of {len(fast)} seed sets")
    return lines


def _published(env) -> dict:
    cache = env.app.__dict__.setdefault("_multihead_published", {})
    if "rows" not in cache:
        path = Path(env.srcdir) / PUBLISHED
        cache["rows"] = json.loads(path.read_text()) if path.exists() else {}
    return cache["rows"]


def _row(inliner, rawtext, text):
    rows = _published(inliner.document.settings.env)
    claim = text.strip()
    if claim not in rows:
        msg = inliner.reporter.error(
            f"no published word for {claim!r}: python -m tools.verdicts --publish"
        )
        return None, ([inliner.problematic(rawtext, rawtext, msg)], [msg])
    return rows[claim], None


def verdict_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    row, failed = _row(inliner, rawtext, text)
    if failed:
        return failed
    out = [nodes.strong("", "", nodes.emphasis(text=row["word"]))]
    for line in describe(row):
        out += [nodes.raw("", "<br>", format="html"), nodes.inline(text=line, classes=["small"])]
    return out, []


def word_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    row, failed = _row(inliner, rawtext, text)
    if failed:
        return failed
    return [nodes.emphasis(text=row["word"])], []


def counts(words: dict) -> tuple[list[str], list[tuple[str, list[int]]]]:
    """The verdict words as columns, and per chapter (and in total) how many rows give each.

    A word is a column if some claim gives it, in the order of the rule's table.
    """
    columns = [w for w in ORDER if w in words.values()]
    columns += sorted(set(words.values()) - set(columns))
    chapters: dict[str, list[int]] = {}
    for claim, word in sorted(words.items()):
        row = chapters.setdefault(claim.split("-")[0], [0] * len(columns))
        row[columns.index(word)] += 1
    ordered = sorted(chapters.items(), key=lambda t: int(t[0][2:]))
    total = [sum(r[i] for _, r in ordered) for i in range(len(columns))]
    rows = [(f"chapter {ch[2:]}", r) for ch, r in ordered] + [("all chapters", total)]
    return columns, rows


class VerdictCounts(Directive):
    """``{verdict-counts}``: a table of how many claims of each chapter get each word."""

    def run(self):
        env = self.state.document.settings.env
        words = {c: r["word"] for c, r in _published(env).items()}
        columns, rows = counts(words)
        header = ["chapter", *columns, "claims"]
        table = nodes.table(classes=["verdict-counts"])
        group = nodes.tgroup(cols=len(header))
        table += group
        group.extend(nodes.colspec(colwidth=1) for _ in header)

        def row(cells):
            r = nodes.row()
            for c in cells:
                r += nodes.entry("", nodes.paragraph(text=str(c)))
            return r

        head, body = nodes.thead(), nodes.tbody()
        head += row(header)
        for name, values in rows:
            body += row([name, *values, sum(values)])
        group += head
        group += body
        return [table]


def setup(app):
    app.add_role("verdict", verdict_role)
    app.add_role("word", word_role)
    app.add_directive("verdict-counts", VerdictCounts)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "2.0"}
