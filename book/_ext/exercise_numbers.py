"""Exercises numbered per chapter: the fifth exercise of chapter 3 is "Exercise 3.5".

sphinx-exercise numbers exercises across the whole book (chapter 3's would be Exercises
11-15), because Sphinx counts each kind of numbered node over the table of contents. After
Sphinx has counted, this extension gives every exercise of a chapter page ``book/NN_*.md``
the number ``(N, k)``, ``k`` its place on the page: ``book/03_low_rank_bottleneck`` gives
"3.k", the primer ``book/04b_transformer_primer`` "4b.k" (as its notebook's headings have
it), a later ``book/10_*`` "10.k". Everything that shows an exercise's number reads it from
that one table (``env.toc_fignumbers``): the exercise's title, its solution's title and
every ``{ref}``/``{numref}`` to it, on any page and in every edition (the editions remove
solutions only, never exercises). Pages outside ``book/NN_*`` keep Sphinx's numbers.

``tests/test_exercise_numbers.py`` checks the notebooks and the teaching guide against the
same rule, and the built pages against the chapter pages.
"""

import re

CHAPTER = re.compile(r"^book/0*(\d+[a-z]?)_")  # "book/04b_transformer_primer" -> "4b"


def chapter_number(docname: str) -> str | None:
    """The chapter a page belongs to ("3", "4b", "10"), or None for other pages."""
    m = CHAPTER.match(docname)
    return m.group(1) if m else None


def renumber(fignumbers: dict) -> list[str]:
    """Number each chapter's exercises (chapter, 1), (chapter, 2), ... in page order.

    ``fignumbers`` is Sphinx's ``{docname: {figtype: {node id: number tuple}}}``, changed in
    place; Sphinx's global numbers grow in page order, so they give the order on the page.
    Returns the pages whose numbers changed.
    """
    changed = []
    for docname, kinds in fignumbers.items():
        chapter = chapter_number(docname)
        exercises = kinds.get("exercise")
        if chapter is None or not exercises:
            continue
        in_order = sorted(exercises, key=exercises.get)
        numbers = {ident: (chapter, k) for k, ident in enumerate(in_order, 1)}
        if numbers != exercises:
            kinds["exercise"] = numbers
            changed.append(docname)
    return changed


def number_per_chapter(app, env) -> list[str]:
    # Runs after Sphinx's toctree collector (priority 500) has assigned its global numbers.
    return renumber(env.toc_fignumbers)


def setup(app):
    app.connect("env-get-updated", number_per_chapter, priority=800)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
