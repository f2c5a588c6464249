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


PICTURES: dict[str, Callable[[], Figure]] = {"ch10_layouts.svg": ch10_layouts}

__all__ = ["PICTURES", "ch10_layouts"]
