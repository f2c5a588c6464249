"""A ``{stability}`` role: how a claim's verdict fares on seed sets other than the book's.

``{stability}`ch5-confidence-importance``` becomes, e.g., "same word at 2 of 2 other seed
sets; same word at 1 of 3 seed sets in fast mode (no clear effect at 100, 300)". The book's
word is the notebook's committed full-mode verdict (the glue ``claim_<id>_verdict``); the
other words come from the seed sweep (``python -m tools.seedcheck --offsets ...
--verdicts book/_generated/verdicts.json``, in fast mode and with ``--full``), which records
every claim's verdict at every offset. Fast mode's offsets include 0 when the sweep ran it:
the book's seeds in fast mode, which is where fast and full mode differ if they do.
"""

import json
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive

VERDICTS = "book/_generated/verdicts.json"


def _book_words(root: Path) -> dict:
    """{claim id: the word the committed notebooks glue}."""
    words = {}
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text()).get("cells", []):
            for out in cell.get("outputs", []):
                name = out.get("metadata", {}).get("scrapbook", {}).get("name", "")
                if name.startswith("claim_") and name.endswith("_verdict"):
                    text = out["data"].get("application/papermill.record/text/plain", "")
                    claim = name[len("claim_") : -len("_verdict")].replace("_", "-")
                    words[claim] = text.strip("'\"")
    return words


def describe(book_word: str | None, modes: dict) -> str:
    """The role's text from the book's word and ``{"fast"|"full": {offset: word}}``."""
    parts = []
    for mode in ("full", "fast"):
        runs = modes.get(mode, {})
        if mode == "full":
            runs = {o: w for o, w in runs.items() if o != "0"}  # offset 0 is the book's run
        if not runs:
            continue
        same = [o for o, w in runs.items() if w == book_word]
        scope = "other seed sets" if mode == "full" else "seed sets in fast mode"
        text = f"same word at {len(same)} of {len(runs)} {scope}"
        other: dict[str, list[str]] = {}
        for o, w in sorted(runs.items(), key=lambda t: int(t[0])):
            if w != book_word:
                other.setdefault(w, []).append("the book's seeds" if o == "0" else o)
        if other:
            text += " (" + "; ".join(f"{w} at {', '.join(os)}" for w, os in other.items()) + ")"
        parts.append(text)
    if parts and not any(o != "0" for o in modes.get("full", {})):
        parts.insert(0, "other seed sets not yet run in full mode")
    return "; ".join(parts) if parts else "not swept yet"


def stability_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    env = inliner.document.settings.env
    root = Path(env.srcdir)
    cache = env.app.__dict__.setdefault("_multihead_stability", {})
    if "sweep" not in cache:
        path = root / VERDICTS
        cache["sweep"] = json.loads(path.read_text()) if path.exists() else {}
        cache["book"] = _book_words(root)
    claim = text.strip()
    if claim not in cache["book"]:
        msg = inliner.reporter.error(f"stability role: no notebook glues a verdict for {claim!r}")
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    words = describe(cache["book"][claim], cache["sweep"].get(claim, {}))
    return [nodes.Text(words)], []


def counts(words: dict) -> tuple[list[str], list[tuple[str, list[int]]]]:
    """The verdict words as columns, and per chapter (and in total) how many rows give each.

    A word is a column if some claim gives it: the computed words first, in the order of
    the rule, then the stated ones.
    """
    order = ["reproduced", "partly", "no clear effect", "contradicted", "proved and checked",
             "not at this scale", "open"]  # fmt: skip
    columns = [w for w in order if w in words.values()]
    columns += sorted(set(words.values()) - set(columns))  # any older word still in use
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
        columns, rows = counts(_book_words(Path(env.srcdir)))
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
    app.add_role("stability", stability_role)
    app.add_directive("verdict-counts", VerdictCounts)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
