"""What a reader sees of a MyST page before opening anything, for the tests that read prose.

``visible(md)`` keeps the running text of a page and drops what is folded or is not prose:
fenced code, math blocks (``$$ ... $$`` and the ``math`` directive), the body of a collapsed
block (a ``dropdown`` or ``toggle`` directive, any directive with ``:class: dropdown`` or
``toggle``, an HTML ``<details>`` element, which Jupyter and Colab fold too) with every block
nested in it, and directive option lines. A ``{glue...}`` role becomes the word ``N``, and a
``{word}`` or ``{verdict}`` role, which renders as a verdict word, the word ``W`` (unless
``keep_roles``): the claim id inside it is not shown to the reader.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(`{3,}|:{3,})\s*(?:\{([\w:-]+)\})?(.*)$")
_FOLDING = ("dropdown", "toggle")
_NOT_PROSE = ("", "code", "code-block", "code-cell", "math")


def visible(md: str, keep_roles: bool = False) -> str:
    """The visible prose of the MyST text ``md`` (see the module docstring)."""
    if not isinstance(md, str):
        raise TypeError(f"md must be the text of a page, got {type(md).__name__}")
    kept, open_blocks = [], []  # open_blocks: (fence, hidden) of the enclosing directives
    lines = re.sub(r"\$\$.*?\$\$", " ", md, flags=re.S).splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            fence, name, rest = m.group(1), m.group(2) or "", m.group(3).strip()
            top = open_blocks[-1] if open_blocks else None
            closes = top and fence[0] == top[0][0] and len(fence) >= len(top[0])
            if closes and not name and not rest:
                open_blocks.pop()
                i += 1
                continue
            j = i + 1  # the directive's option lines
            while (
                j < len(lines) and lines[j].lstrip().startswith(":") and not _FENCE.match(lines[j])
            ):
                j += 1
            classes = " ".join(o for o in lines[i + 1 : j] if o.strip().startswith(":class:"))
            hidden = (
                name in _FOLDING
                or any(c in classes for c in _FOLDING)
                or (fence[0] == "`" and name in _NOT_PROSE)
                or bool(top and top[1])
            )
            open_blocks.append((fence, hidden))
            i = j
            continue
        if not (open_blocks and open_blocks[-1][1]):
            kept.append(lines[i])
        i += 1
    text = "\n".join(kept)
    text = re.sub(r"<details\b.*?</details>", " ", text, flags=re.S | re.I)
    if keep_roles:
        return text
    text = re.sub(r"\{(?:word|verdict)\}`[^`]*`", " W ", text)
    return re.sub(r"\{glue:?\w*\}`[^`]*`", " N ", text)


def words(text: str) -> int:
    """Words of two letters or more (so numbers, symbols and single letters do not count)."""
    return len(re.findall(r"[A-Za-z]{2,}", text))
