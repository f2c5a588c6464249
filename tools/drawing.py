"""Drawing primitives for the book's diagrams: a canvas measured in inches, boxes, arrows,
grids of cells, a colour-blind-safe palette, and a byte-reproducible SVG writer.

A canvas's data units are inches and font sizes are points, so a label of 11 pt has the
same size on every diagram, whatever its shape. Diagrams are built from these pieces in
``tools.diagrams`` and ``tools.chapter_pictures``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from multihead._checks import check_number

# Okabe and Ito's palette: distinguishable with every common form of colour blindness.
PALETTE = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
    "grey": "#555555",
    "black": "#000000",
}
FONT = 11  # points: the body size of every diagram label
SMALL = 9.5  # points: shapes in code, side notes


def colour(name: str) -> str:
    """The palette colour called ``name`` (or ``name`` itself if it is already a colour).

    Shapes: none.
    """
    return PALETTE.get(name, name)


def tint(name: str, amount: float = 0.25) -> tuple[float, float, float]:
    """``name`` mixed with white: ``amount`` = 1 is the colour, 0 is white (light fills keep
    black text readable).

    Shapes: none."""
    amount = check_number("amount", amount, 0.0, 1.0)
    r, g, b = to_rgb(colour(name))
    return (1 - amount * (1 - r), 1 - amount * (1 - g), 1 - amount * (1 - b))


def canvas(width: float, height: float) -> tuple[Figure, Axes]:
    """A figure of ``width`` x ``height`` inches whose axes span it in inch units, no frame.

    It is a bare ``Figure`` (not pyplot's), so drawing many diagrams keeps no global state.

    Shapes: none.
    """
    width = check_number("width", width, 0.0, None, "(]")
    height = check_number("height", height, 0.0, None, "(]")
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def text(ax: Axes, x: float, y: float, s: str, size: float = FONT, **kw) -> None:
    """A label centred at ``(x, y)`` unless ``ha``/``va`` say otherwise. Shapes: none."""
    kw.setdefault("ha", "center")
    kw.setdefault("va", "center")
    kw.setdefault("color", PALETTE["black"])
    ax.text(x, y, s, fontsize=size, **kw)


def note(ax: Axes, x: float, y: float, s: str, size: float = SMALL, **kw) -> None:
    """A side note: ``text`` in grey, smaller by default. Shapes: none."""
    kw.setdefault("color", PALETTE["grey"])
    text(ax, x, y, s, size, **kw)


def box(
    ax: Axes,
    cx: float,
    cy: float,
    w: float,
    h: float,
    label: str = "",
    fill: str = "blue",
    size: float = FONT,
    note: str | None = None,
    edge: str | None = None,
    amount: float = 0.22,
    rounded: bool = True,
) -> None:
    """A light box of ``w`` x ``h`` inches centred at ``(cx, cy)``, with ``label`` inside and
    an optional smaller grey ``note`` (a shape) under the label.

    Shapes: none."""
    style = "round,pad=0,rounding_size=0.08" if rounded else "square,pad=0"
    ax.add_patch(
        FancyBboxPatch(
            (cx - w / 2, cy - h / 2),
            w,
            h,
            boxstyle=style,
            facecolor=tint(fill, amount),
            edgecolor=colour(edge or fill),
            linewidth=1.3,
            zorder=3,  # above the lines that run into it
        )
    )
    if note is None:
        text(ax, cx, cy, label, size, zorder=4)
    else:
        text(ax, cx, cy + 0.11, label, size, zorder=4)
        text(ax, cx, cy - 0.15, note, SMALL, color=PALETTE["grey"], zorder=4)


def arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    col: str = "black",
    lw: float = 1.3,
    rad: float = 0.0,
    style: str = "-|>",
    dashed: bool = False,
) -> None:
    """An arrow from ``start`` to ``end`` (straight, or bent by ``rad``). Shapes: none."""
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=12,
            color=colour(col),
            linewidth=lw,
            linestyle="--" if dashed else "-",
            connectionstyle=f"arc3,rad={rad}",
            shrinkA=0,
            shrinkB=0,
        )
    )


def line(ax: Axes, xs, ys, col: str = "black", lw: float = 1.3, **kw) -> None:
    """A polyline through the points ``zip(xs, ys)``. Shapes: none."""
    ax.plot(xs, ys, color=colour(col), linewidth=lw, solid_capstyle="butt", **kw)


def cells(
    ax: Axes,
    x: float,
    y: float,
    n_rows: int,
    n_cols: int,
    size: float,
    fill: Callable[[int, int], object],
    label: Callable[[int, int], str] | None = None,
    label_size: float = SMALL,
    edge: str = "grey",
) -> None:
    """A grid of square cells with its top-left corner at ``(x, y)``: row ``i`` (top to
    bottom), column ``j`` has colour ``fill(i, j)`` and text ``label(i, j)``.

    Shapes: none."""
    for i in range(n_rows):
        for j in range(n_cols):
            ax.add_patch(
                Rectangle(
                    (x + j * size, y - (i + 1) * size),
                    size,
                    size,
                    facecolor=fill(i, j),
                    edgecolor=colour(edge),
                    linewidth=0.6,
                )
            )
            if label is not None:
                text(ax, x + (j + 0.5) * size, y - (i + 0.5) * size, label(i, j), label_size)


def save_svg(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as an SVG whose bytes depend only on the drawing: fixed ids
    (``svg.hashsalt``), no date, and a creator line without a version number.

    Glyphs are stored as paths, so the picture does not depend on the reader's fonts.

    Shapes: none.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path, got {type(path).__name__}")
    path = Path(path)
    with mpl.rc_context({"svg.hashsalt": "multihead", "svg.fonttype": "path"}):
        fig.savefig(path, format="svg", metadata={"Date": None, "Creator": "tools.diagrams"})
    return path
