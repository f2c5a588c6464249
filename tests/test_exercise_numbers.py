"""One number per exercise: "Exercise 3.5" is the fifth exercise on chapter 3's page, in the
rendered page, in the chapter's notebook and in the teaching guide.

The chapters are the pages ``book/NN_*.md`` (``NN`` a number, perhaps with a letter: the
primer ``04b`` numbers its exercises "4b.k") that ``_toc.yml`` lists, so a new chapter is
checked as soon as it is in the table of contents. An exercise is each ``{exercise}``
directive of a chapter page, in page order (``:nonumber:`` ones have no number). What is
checked against that list:

* every ``### Exercise N.k: <title>`` heading of a notebook: its own chapter, ``k`` in
  range, the page's title;
* every "Exercise N.k" written in a book page or a notebook's markdown: an exercise that
  exists, and where a title follows in parentheses, its title; a bare "Exercise 15" (the
  old book-wide numbering) fails;
* every ``{ref}``/``{numref}`` to an exercise label: the label exists; a written link text
  ("Exercise N.k (<title>)") names that exercise; the teaching guide always writes it;
* the built book, in every edition: each exercise's title and every link to an exercise show
  its number (``book/_ext/exercise_numbers.py`` numbers them).
"""

import html
import importlib.util
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = re.compile(r"^book/0*(\d+[a-z]?)_")  # book/04b_transformer_primer -> "4b"
GUIDE = ROOT / "book" / "teaching_guide.md"
EDITIONS = ("reader", "student", "instructor")

DIRECTIVE = re.compile(r"^\s*(?::{3,}|`{3,})\{exercise(?:-start)?\}[ \t]*(.*?)\s*$")
OPTION = re.compile(r"^\s*:([\w-]+):[ \t]*(.*?)\s*$")
HEADING = re.compile(r"^#+ .*\bexercise\s+\d.*$", re.IGNORECASE | re.MULTILINE)
NOTEBOOK_HEADING = re.compile(r"^### Exercise (\d+[a-z]?\.\d+): (.+?)\s*$")
# "Exercise 3.5", "exercise 1.5", "Exercise 1.k" (a placeholder), "Exercise 15" (bare)
MENTION = re.compile(r"\bexercises?\s+(\d+[a-z]?)(?:\.(\d+|[a-z]\b))?", re.IGNORECASE)
ROLE = re.compile(r"\{(ref|numref)\}`([^`]*?)`")


@dataclass(frozen=True)
class Exercise:
    number: str  # "3.5"
    title: str
    label: str | None
    page: str  # book/03_low_rank_bottleneck


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []))

    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    walk(toc.get("chapters", []))
    return files


def chapter_pages() -> dict[str, str]:
    """{"3": "book/03_low_rank_bottleneck", ...} for every chapter page in the toc."""
    found = {}
    for name in toc_files():
        m = CHAPTER.match(name)
        if m:
            found[m.group(1)] = name
    return found


def page_exercises(text: str, chapter: str, page: str) -> list[Exercise]:
    """The numbered exercises of one chapter page, in page order."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = DIRECTIVE.match(line)
        if not m:
            continue
        options = {}
        for option in lines[i + 1 :]:
            o = OPTION.match(option)
            if not o:
                break
            options[o.group(1)] = o.group(2)
        if "nonumber" in options:
            continue
        number = f"{chapter}.{len(found) + 1}"
        found.append(Exercise(number, m.group(1), options.get("label"), page))
    return found


@cache
def book() -> dict[str, list[Exercise]]:
    """{chapter: its exercises} for every chapter in the toc."""
    return {
        chapter: page_exercises((ROOT / f"{page}.md").read_text(), chapter, page)
        for chapter, page in chapter_pages().items()
    }


@cache
def by_number() -> dict[str, Exercise]:
    return {ex.number: ex for exercises in book().values() for ex in exercises}


@cache
def by_label() -> dict[str, Exercise]:
    return {ex.label: ex for exercises in book().values() for ex in exercises if ex.label}


def book_pages() -> list[Path]:
    return [ROOT / f"{name}.md" for name in toc_files() if name.startswith("book/")]


def notebooks() -> list[Path]:
    return [ROOT / f"{name}.ipynb" for name in toc_files() if name.startswith("notebooks/")]


def markdown_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def parenthesised(text: str) -> str | None:
    """The text inside a parenthesis that opens ``text`` (after spaces), nesting allowed."""
    stripped = text.lstrip(" ")
    if not stripped.startswith("("):
        return None
    depth = 0
    for i, char in enumerate(stripped):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return stripped[1:i]
    return None


def mention_errors(text: str, where: str) -> list[str]:
    """What is wrong with the "Exercise N.k" mentions of one text."""
    errors = []
    for m in MENTION.finditer(text):
        number = m.group(1) + (f".{m.group(2)}" if m.group(2) else "")
        if m.group(2) is None:
            errors.append(f"{where}: {m.group(0)!r} is a book-wide number; write 'Exercise N.k'")
        elif m.group(2).isdigit():
            if number not in by_number():
                errors.append(f"{where}: {m.group(0)!r} names no exercise (see {chapters_hint()})")
                continue
            title = parenthesised(text[m.end() :])
            if title is not None and title != by_number()[number].title:
                errors.append(
                    f"{where}: Exercise {number} is {by_number()[number].title!r}, not {title!r}"
                )
    return errors


def chapters_hint() -> str:
    return ", ".join(f"chapter {c}: {len(ex)}" for c, ex in book().items())


def test_every_chapter_in_the_toc_has_labelled_exercises():
    chapters = chapter_pages()
    assert {"1", "3", "4b", "9"} <= set(chapters), chapters
    labels = [ex.label for exercises in book().values() for ex in exercises]
    for chapter, exercises in book().items():
        assert exercises, f"chapter {chapter} ({chapters[chapter]}) has no exercise"
        for ex in exercises:
            assert ex.label, f"Exercise {ex.number} ({ex.title}) needs a :label:"
            assert ex.title, f"Exercise {ex.number} ({ex.page}) needs a title"
    assert len(labels) == len(set(labels)), "exercise labels must be unique"


def test_parsing_finds_exercises_in_page_order():
    page = """
:::{exercise} First
:label: ex-a

*★☆☆ · 5 min*
:::

::::{solution} ex-a
::::

::::{exercise} Unnumbered
:nonumber:
:label: ex-b
::::

```{exercise} Third, with $x$ (and a parenthesis)
:class: note
:label: ex-c
```
"""
    found = page_exercises(page, "10", "book/10_future")
    assert [(e.number, e.title, e.label) for e in found] == [
        ("10.1", "First", "ex-a"),
        ("10.2", "Third, with $x$ (and a parenthesis)", "ex-c"),
    ]
    assert CHAPTER.match("book/10_kv_sharing").group(1) == "10"
    assert CHAPTER.match("book/04b_transformer_primer").group(1) == "4b"
    assert CHAPTER.match("book/teaching_guide") is None


def test_the_extension_numbers_each_chapter_in_page_order():
    spec = importlib.util.spec_from_file_location(
        "exercise_numbers", ROOT / "book" / "_ext" / "exercise_numbers.py"
    )
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    fignumbers = {
        "book/03_low_rank_bottleneck": {"exercise": {"ex-b": (12,), "ex-a": (11,)}},
        "book/04b_transformer_primer": {"exercise": {"ex-c": (13,)}, "figure": {"f": (4,)}},
        "book/10_kv_sharing": {"exercise": {"ex-d": (14,)}},
        "book/claims": {"exercise": {"ex-e": (15,)}},
    }
    changed = ext.renumber(fignumbers)
    assert fignumbers["book/03_low_rank_bottleneck"]["exercise"] == {
        "ex-a": ("3", 1),
        "ex-b": ("3", 2),
    }
    assert fignumbers["book/04b_transformer_primer"] == {
        "exercise": {"ex-c": ("4b", 1)},
        "figure": {"f": (4,)},
    }
    assert fignumbers["book/10_kv_sharing"]["exercise"] == {"ex-d": ("10", 1)}
    assert fignumbers["book/claims"]["exercise"] == {"ex-e": (15,)}  # not a chapter
    assert sorted(changed) == sorted(list(fignumbers)[:3])
    assert ext.renumber(fignumbers) == []  # a second pass changes nothing
    for chapter, page in chapter_pages().items():
        assert ext.chapter_number(page) == chapter


def test_notebook_headings_match_their_chapter_page():
    errors = []
    for notebook in notebooks():
        chapter = CHAPTER.match(f"book/{notebook.stem}")
        for cell in markdown_cells(notebook):
            for line in HEADING.findall(cell):
                m = NOTEBOOK_HEADING.match(line)
                if not m:
                    errors.append(
                        f"{notebook.name}: {line!r} should read '### Exercise N.k: <title>'"
                    )
                    continue
                number, title = m.groups()
                ex = by_number().get(number)
                if chapter is None or number.rsplit(".", 1)[0] != chapter.group(1):
                    errors.append(f"{notebook.name}: {line!r} belongs to another chapter")
                elif ex is None:
                    errors.append(f"{notebook.name}: {line!r}: the page has no exercise {number}")
                elif title != ex.title:
                    errors.append(
                        f"{notebook.name}: {line!r}: exercise {number} is titled {ex.title!r}"
                    )
    assert not errors, "\n".join(errors)


def test_every_written_exercise_number_names_that_exercise():
    errors = []
    for page in book_pages():
        text = ROLE.sub(" ", page.read_text())  # the roles' texts are checked below
        errors += mention_errors(text, page.name)
    for notebook in notebooks():
        for cell in markdown_cells(notebook):
            errors += mention_errors(cell, notebook.name)
    assert not errors, "\n".join(errors)


def test_references_to_exercises_show_their_number_and_the_guide_their_title():
    errors = []
    for page in book_pages():
        for kind, text in ROLE.findall(page.read_text()):
            explicit = re.fullmatch(r"(.*?)\s*<([^<>]+)>", text, re.S)
            written, label = explicit.groups() if explicit else (None, text.strip())
            if not label.startswith("ex-"):
                continue
            ex = by_label().get(label)
            if ex is None:
                errors.append(f"{page.name}: {{{kind}}} to {label}, which no chapter defines")
                continue
            if written is None or "%s" in written or "{number}" in written:
                if page == GUIDE:
                    errors.append(
                        f"{page.name}: write {{ref}}`Exercise {ex.number} ({ex.title}) <{label}>`"
                    )
                continue
            want = f"Exercise {ex.number} ({ex.title})"
            if written != want and (page == GUIDE or written != f"Exercise {ex.number}"):
                errors.append(f"{page.name}: link text {written!r} for {label}; write {want!r}")
    assert not errors, "\n".join(errors)


def _text(fragment: str) -> str:
    """A rendered title as plain text: no tags, entities, typographic quotes or math marks."""
    text = html.unescape(re.sub(r"<[^>]+>", "", fragment))
    text = text.translate(str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"'}))
    return " ".join(re.sub(r"\\\(|\\\)|\$", "", text).split())


@pytest.mark.slow
@pytest.mark.parametrize("edition", EDITIONS)
def test_the_built_book_shows_the_same_numbers(edition, editions):
    editions.start(*EDITIONS)  # all three build at once
    site = editions.html(edition)
    for chapter, exercises in book().items():
        page = (site / f"{chapter_pages()[chapter]}.html").read_text()
        titles = [_text(t) for t in re.findall(r'class="admonition-title">(.*?)</p>', page, re.S)]
        shown = [t for t in titles if t.startswith("Exercise ")]
        assert shown == [_text(f"Exercise {ex.number} ({ex.title})") for ex in exercises], (
            f"{edition} edition, chapter {chapter}"
        )
        for t in titles:
            if t.startswith("Solution to Exercise "):
                assert t.removeprefix("Solution to ") in shown, f"{edition}: {t!r}"
    links = 0
    for path in sorted(site.glob("book/*.html")):
        text = path.read_text()
        for target, shown in re.findall(r'href="[^"]*#(ex-[\w-]+)"[^>]*>(.*?)</a>', text, re.S):
            if target in by_label():
                links += 1
                number = f"Exercise {by_label()[target].number}"
                assert re.match(rf"{re.escape(number)}\b", _text(shown)), (
                    f"{edition} edition, {path.name}: link to {target} reads {_text(shown)!r}"
                )
    assert links >= 20, f"{edition} edition: only {links} links to exercises"
