"""Pictures for part VI (multi-head attention in today's models), drawn as schematics.

Nothing here is a result: every number is a count of the construction. ``PICTURES`` maps each
SVG name to its drawing function (``tools.diagrams`` writes them).
"""

from __future__ import annotations

from collections.abc import Callable

from matplotlib.figure import Figure

from multihead._checks import check_int
from tools.drawing import FONT, PALETTE, SMALL, box, canvas, line, note, text

CACHED, FORMED = 0.6, 0.12  # box tints: cached per token / computed, never stored


# ------------------------------------------------- chapter 10: what a layer caches
def ch10_layouts(n_heads: int = 8, groups: int = 2) -> Figure:
    """Three panels: MHA (a key/value head per query head), GQA (one per group of query heads)
    and MLA (keys and values decompressed from one cached latent). Shaded boxes are cached.

    Shapes: none.
    """
    h = check_int("n_heads", n_heads, 2, 12)
    g = check_int("groups", groups, 1, h)
    if h % g:
        raise ValueError(f"groups={g} must divide n_heads={h}")
    fig, ax = canvas(10.2, 4.0)
    width, top, kv_y = 3.0, 2.95, 1.75
    step = width / h

    def queries(x0: float) -> list[float]:
        xs = [x0 + (i + 0.5) * step for i in range(h)]
        for x in xs:
            box(ax, x, top, step * 0.8, 0.42, "q", "blue", SMALL, amount=FORMED)
        return xs

    panels = (
        ("multi-head (MHA)", rf"caches $2\cdot{h}\,d_h$ per token and layer"),
        (f"grouped-query (GQA, {g} groups)", rf"caches $2\cdot{g}\,d_h$"),
        ("multi-head latent (MLA)", r"caches $d_c$ (the latent)"),
    )
    for p, (title, cache) in enumerate(panels):
        x0 = 0.2 + p * 3.4
        text(ax, x0 + width / 2, 3.7, title, FONT)
        note(ax, x0 + width / 2, 0.3, cache, SMALL + 0.5)
        qx = queries(x0)
        if p == 0:  # one key/value head per query head, each cached
            for x in qx:
                line(ax, [x, x], [top - 0.21, kv_y + 0.3], "grey", lw=0.9)
                box(ax, x, kv_y, step * 0.8, 0.6, "k,v", "orange", SMALL - 1, amount=CACHED)
        elif p == 1:  # one cached key/value head per group of h/g query heads
            size = h // g
            for j in range(g):
                cx = x0 + (j + 0.5) * width / g
                for x in qx[j * size : (j + 1) * size]:
                    line(ax, [x, cx], [top - 0.21, kv_y + 0.3], "grey", lw=0.9)
                box(ax, cx, kv_y, width / g * 0.6, 0.6, "k, v", "orange", SMALL, amount=CACHED)
        else:  # keys and values formed from one cached latent, never stored
            for x in qx:
                line(ax, [x, x], [top - 0.21, kv_y + 0.3], "grey", lw=0.9)
                box(ax, x, kv_y, step * 0.8, 0.6, "k,v", "orange", SMALL - 1, amount=FORMED)
                line(ax, [x, x0 + width / 2], [kv_y - 0.3, 0.95], "grey", lw=0.7)
            box(ax, x0 + width / 2, 0.8, 1.3, 0.36, r"latent $c$", "green", SMALL, amount=CACHED)
    text(ax, 0.2 + width / 2, 1.05, "(each query head reads its own)", SMALL,
         color=PALETTE["grey"])  # fmt: skip
    text(ax, 3.6 + width / 2, 1.05, "(the heads of a group read one)", SMALL,
         color=PALETTE["grey"])  # fmt: skip
    return fig


# ------------------------------------------------- chapter 11: the induction circuit
def ch11_induction(tokens: tuple[str, ...] = ("A", "B", "C", "D", "A")) -> Figure:
    """The two-head induction circuit on a short sequence whose last token repeats the first:
    layer 0's previous-token head, layer 1's induction head, the predicted token.

    Shapes: none.
    """
    if (
        not isinstance(tokens, tuple)
        or len(tokens) < 3
        or not all(isinstance(t, str) for t in tokens)
    ):
        raise TypeError(f"tokens must be a tuple of at least 3 strings, got {tokens!r}")
    *body, last = tokens
    if last not in body[:-1]:
        raise ValueError(f"tokens={tokens}: the last token must repeat one before the second-last")
    p = body.index(last)  # the earlier copy; the circuit attends to p + 1
    n = len(tokens)
    fig, ax = canvas(9.4, 4.4)
    xs = [1.0 + 1.6 * i for i in range(n)]
    y_tok, y0, y1 = 0.75, 1.95, 3.25
    for i, (x, t) in enumerate(zip(xs, tokens, strict=True)):
        box(ax, x, y_tok, 0.7, 0.5, t, "grey", FONT + 1, amount=0.12)
        note(ax, x, y_tok - 0.45, f"position {i + 1}")
        line(ax, [x, x], [y_tok + 0.25, y0 - 0.28], "grey", lw=0.8)
        prev = f"after {tokens[i - 1]}" if i else "first"
        box(ax, x, y0, 1.2, 0.5, prev, "sky", SMALL, amount=0.25)
        if i in (p + 1, n - 1):  # the two positions layer 1 connects
            line(ax, [x, x], [y0 + 0.25, y1 - 0.25], "grey", lw=0.8)
    for i in range(1, n):  # layer 0: every position reads the one before it
        ax.annotate("", xy=(xs[i - 1] + 0.35, y0 - 0.05), xytext=(xs[i] - 0.35, y0 - 0.05),
                    arrowprops={"arrowstyle": "-|>", "color": PALETTE["blue"], "lw": 1.2,
                                "connectionstyle": "arc3,rad=0.35"})  # fmt: skip
    text(ax, xs[-1] + 0.95, y0, "layer 0:\nprevious-\ntoken head", SMALL, ha="left",
         color=PALETTE["blue"])  # fmt: skip
    box(ax, xs[-1], y1, 0.9, 0.5, "query", "orange", SMALL, amount=0.3)
    target = xs[p + 1]
    ax.annotate("", xy=(target, y1 + 0.3), xytext=(xs[-1], y1 + 0.3),
                arrowprops={"arrowstyle": "-|>", "color": PALETTE["vermillion"], "lw": 1.8,
                            "connectionstyle": "arc3,rad=0.25"})  # fmt: skip
    text(ax, (target + xs[-1]) / 2, y1 + 0.95,
         f"layer 1: induction head finds the position after {last}", SMALL + 0.5,
         color=PALETTE["vermillion"])  # fmt: skip
    box(ax, target, y1, 0.9, 0.5, "key", "orange", SMALL, amount=0.15)
    text(ax, xs[-1] + 0.95, y1, f"predicts\n{tokens[p + 1]}", FONT, ha="left",
         color=PALETTE["vermillion"])  # fmt: skip
    return fig


PICTURES: dict[str, Callable[[], Figure]] = {
    "ch10_layouts.svg": ch10_layouts,
    "ch11_induction.svg": ch11_induction,
}

__all__ = ["PICTURES", "ch10_layouts", "ch11_induction"]
