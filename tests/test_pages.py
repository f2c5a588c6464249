"""Reading time of the long chapters: the core sections must read in about 45 minutes.

A section is optional when its heading ends with " (optional)"; a `###` under an optional
`##` is optional too. Everything else, including the text above the first `##`, is core.

`reading_words` counts the words a reader reads in a chapter, in its core and its optional
sections: the visible prose, headings, admonitions, theorems, exercises and figure captions. It
leaves out fenced code, math blocks (`$$ ... $$` and `{math}` directives), directive lines and
their option lines (`:class: ...`, `:name: ...`), HTML comments and the `(label)=` lines
(``support.prose.visible``). A `{glue...}` or `{cite...}` role counts as one word, and another
role (`{ref}`, `{doc}`, ...) as the words of its text. Collapsed blocks (a `dropdown` or
`toggle` directive, or any directive with `:class: dropdown`) do not count at all: they are
folded, so a reader who wants the core does not read them. A word is a run of non-space
characters with at least one letter or digit, so table rules and bullets are not words.
"""

import re
from pathlib import Path

import pytest
from support.prose import visible

BOOK = Path(__file__).resolve().parents[1] / "book"
LONG_CHAPTERS = ["05_head_roles", "06_head_diversity", "07_pruning", "09_pretrained_heads"]
CORE_WORDS_MAX = 4200  # about 45 minutes at 90 to 100 words a minute of technical reading


def _words(line: str) -> int:
    line = re.sub(r"\{(?:glue|cite)[\w:-]*\}`[^`]*`", " X ", line)
    line = re.sub(r"\{[\w:-]+\}`([^`<]*)(?:<[^>]*>)?`", r" \1 ", line)
    return sum(1 for w in line.split() if re.search(r"\w", w))


def reading_words(md: str) -> dict[str, int]:
    """Words a reader reads in the core and in the optional sections of a MyST page."""
    counts = {"core": 0, "optional": 0}
    part_opt = sect_opt = False
    prose = visible(re.sub(r"<!--.*?-->", " ", md, flags=re.S), keep_roles=True)
    for line in prose.splitlines():
        if re.match(r"\s*\([\w:-]+\)=\s*$", line):
            continue
        heading = re.match(r"(#{2,3}) (.*)", line)
        if heading:
            optional = heading.group(2).rstrip().endswith(" (optional)")
            if heading.group(1) == "##":
                part_opt = sect_opt = optional
            else:
                sect_opt = part_opt or optional
        counts["optional" if sect_opt else "core"] += _words(line.lstrip("#"))
    return counts


def test_reading_words_counts_what_a_reader_sees():
    md = """(sec-a)=
## 1.1 Two words

Visible {cite:t}`a, b` and {glue:text}`nb.ipynb::x:.2f` here.

```python
hidden code
```

$$
x = y
$$

:::{admonition} Shown
:class: dropdown
folded text
:::

## 1.2 Side topic (optional)

### Under it

three more words
"""
    assert reading_words(md) == {"core": 3 + 5, "optional": 4 + 2 + 3}


@pytest.mark.parametrize("chapter", LONG_CHAPTERS)
def test_long_chapter_has_a_short_core_and_optional_sections(chapter):
    counts = reading_words((BOOK / f"{chapter}.md").read_text())
    assert counts["core"] <= CORE_WORDS_MAX, f"{chapter}: core has {counts['core']} words"
    assert counts["optional"] > 0, f"{chapter}: no section is marked ' (optional)'"
