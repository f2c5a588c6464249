"""The book's diagrams: each function draws one and returns a matplotlib ``Figure``.

They are schematic: shapes in the course's notation (``book/notation.md``), never a measured
number (those come from the notebooks). One command regenerates every SVG of the book,
byte for byte::

    python -m tools.diagrams [OUTDIR]      # default: book/figures

The model's diagrams (block, encoder-decoder, talking heads, Hard Concrete) live in
``tools.model_diagrams``, the chapter-opening pictures in ``tools.chapter_pictures``;
``DIAGRAMS`` maps every file name to its drawing function.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Rectangle

from multihead._checks import check_int
from multihead.core.attention import blocked
from tools import chapter_pictures as pictures
from tools import model_diagrams as model
from tools import modern_pictures as modern
from tools.drawing import (
    FONT,
    PALETTE,
    SMALL,
    arrow,
    box,
    canvas,
    cells,
    note,
    save_svg,
    text,
    tint,
)

MONO = {"family": "monospace"}


def _hook(ax, x: float, y: float, name: str) -> None:
    """The name of a hook point, as a small tag (where ``run_with_cache`` reads the tensor)."""
    text(ax, x, y, name, SMALL - 1, color=PALETTE["vermillion"], fontdict=MONO)


# --------------------------------------------------------------- chapter 1: shapes, masks
def multihead_shapes() -> Figure:
    """Multi-head attention with the shape of every tensor, and the hook points.

    Shapes: none.
    """
    fig, ax = canvas(7.6, 7.7)
    # h stacked copies of the per-head part: the same computation for every head i
    for k, amount in ((2, 0.10), (1, 0.16), (0, 0.22)):
        off = 0.08 * k
        ax.add_patch(
            FancyBboxPatch(
                (0.2 + off, 2.3 + off), 7.0, 4.05,
                boxstyle="round,pad=0,rounding_size=0.12",
                facecolor=tint("grey", amount * 0.45), edgecolor=tint("grey", 0.6),
                linewidth=1.0,
            )
        )  # fmt: skip
    text(ax, 0.35, 2.55, r"head $i$, for $i = 1,\dots,h$ (all heads in parallel)", ha="left")
    w, h = 2.05, 0.72
    box(ax, 3.75, 7.15, 1.4, 0.75, r"$X$", "grey", note=r"$n\times d_{\mathrm{model}}$")
    cols = {"q": 1.4, "k": 3.75, "v": 6.1}
    labels = {
        "q": (r"$Q_i = XW_Q^{(i)}$", r"$n\times d_k$"),
        "k": (r"$K_i = XW_K^{(i)}$", r"$n\times d_k$"),
        "v": (r"$V_i = XW_V^{(i)}$", r"$n\times d_v$"),
    }
    y = 5.3
    for name, x in cols.items():
        box(ax, x, y, w, h, labels[name][0], "blue", note=labels[name][1])
        arrow(ax, (3.75, 6.77), (x, y + h / 2))
        _hook(ax, x + w / 2 - 0.12, y + h / 2 + 0.1, name)
    # scores from Q and K, the pattern, then z from the pattern and V
    box(ax, 2.55, 4.2, 2.3, h, r"$S_i = Q_iK_i^\top/\sqrt{d_k}$", "orange", note=r"$n\times n$")
    _hook(ax, 2.55 + 1.15 - 0.3, 4.2 + h / 2 + 0.1, "scores")
    arrow(ax, (1.4, y - h / 2), (2.05, 4.2 + h / 2))
    arrow(ax, (3.75, y - h / 2), (3.05, 4.2 + h / 2))
    box(ax, 2.55, 3.05, 2.3, h, r"$A_i = \mathrm{softmax}(S_i)$", "orange",
        note="each row sums to 1")  # fmt: skip
    _hook(ax, 2.55 + 1.15 - 0.32, 3.05 + h / 2 + 0.1, "pattern")
    arrow(ax, (2.55, 4.2 - h / 2), (2.55, 3.05 + h / 2))
    box(ax, 6.1, 3.05, 1.7, h, r"$z_i = A_iV_i$", "green", note=r"$n\times d_v$")
    _hook(ax, 6.1 + 0.85 - 0.12, 3.05 + h / 2 + 0.1, "z")
    arrow(ax, (6.1, y - h / 2), (6.1, 3.05 + h / 2))
    arrow(ax, (2.55 + 1.15, 3.05), (6.1 - 0.85, 3.05))
    note(ax, 4.85, 4.35, r"$W_Q^{(i)}, W_K^{(i)}: d_{\mathrm{model}}\times d_k$")
    note(ax, 4.85, 4.0, r"$W_V^{(i)}: d_{\mathrm{model}}\times d_v$")
    # concatenate the heads, then W_O
    box(ax, 6.1, 1.4, 2.0, 0.8, r"$[z_1\ \cdots\ z_h]$", "green", note=r"$n\times hd_v$")
    arrow(ax, (6.1, 3.05 - h / 2), (6.1, 1.8))
    note(ax, 6.0, 2.05, "concatenate the heads", ha="right")
    box(ax, 2.55, 1.4, 2.3, 0.8, r"$[z_1\cdots z_h]\,W_O$", "purple",
        note=r"$n\times d_{\mathrm{model}}$")  # fmt: skip
    note(ax, 4.3, 1.62, r"$W_O: hd_v\times d_{\mathrm{model}}$")
    arrow(ax, (6.1 - 1.0, 1.4), (2.55 + 1.15, 1.4))
    note(ax, 3.8, 0.55, "in code (orange: hook names), with a batch axis:  x, output (batch, seq, "
         "d_model);", SMALL - 0.5)  # fmt: skip
    note(ax, 3.8, 0.2, "q, k (batch, heads, seq, d_key);  v, z (batch, heads, seq, d_value);  "
         "scores, pattern (batch, heads, query, key)", SMALL - 0.5)  # fmt: skip
    return fig


def mask_examples(n: int = 5, n_padding: int = 2) -> dict[str, torch.Tensor]:
    """The masks of ``masks()``, computed by the package's own ``blocked`` (True = blocked):
    one sequence of ``n`` tokens whose last ``n_padding`` are padding.

    Shapes: each value (n, n) bool, row = query, column = key; ``"sdpa"`` is the combined
    mask in the polarity of ``torch.nn.functional.scaled_dot_product_attention``.
    """
    n = check_int("n", n, 2, 10)
    n_padding = check_int("n_padding", n_padding, 0, n)
    pad = torch.zeros(1, n, dtype=torch.bool)
    pad[0, n - n_padding :] = True  # key_padding_mask (batch, k_len): True at padding keys
    padding = blocked(pad, False, n, n, "cpu")[0, 0].expand(n, n)  # (n, n)
    causal = blocked(None, True, n, n, "cpu")
    both = blocked(pad, True, n, n, "cpu")[0, 0]
    return {"padding": padding, "causal": causal, "both": both, "sdpa": ~both}


def masks(n: int = 5, n_padding: int = 2) -> Figure:
    """Padding and causal masks on the ``n`` x ``n`` scores, and the two mask polarities.

    Shapes: none.
    """
    m = mask_examples(n, n_padding)
    size = 0.32
    panel_h = n * size + 1.15
    fig, ax = canvas(7.6, 2 * panel_h + 2.0)
    panels = [
        ("padding", "key_padding_mask", f"the last {n_padding} tokens are padding"),
        ("causal", "causal=True", r"query $i$ sees keys $j\leq i$"),
        ("both", "padding and causal", "blocked if either blocks"),
        ("sdpa", "attn_mask of torch's SDPA", r"the same mask, inverted: $\sim$mask"),
    ]
    for p, (key, title, sub) in enumerate(panels):
        cx = 1.95 + (p % 2) * 3.7
        x0, top = cx - n * size / 2, 2 * panel_h + 2.0 - 0.75 - (p // 2) * panel_h
        shown = m["both"] if key == "sdpa" else m[key]
        cells(
            ax, x0, top, n, n, size,
            fill=lambda i, j, s=shown: tint("vermillion", 0.75) if s[i, j] else tint("sky", 0.3),
            label=lambda i, j, v=m[key]: "T" if v[i, j] else "F",
        )  # fmt: skip
        text(ax, cx, top + 0.5, title, FONT, fontdict=MONO if p != 2 else None)
        note(ax, cx, top + 0.2, sub)
        text(ax, x0 - 0.18, top - n * size / 2, "query", SMALL, rotation=90)
        text(ax, cx, top - n * size - 0.18, "key", SMALL)
    # the legend and the two polarities
    for k, (fill, what) in enumerate(
        (
            (tint("vermillion", 0.75), r"blocked: score set to $-\infty$, weight exactly 0"),
            (tint("sky", 0.3), "may attend: an ordinary softmax weight"),
        )
    ):
        y = 1.75 - k * 0.38
        ax.add_patch(Rectangle((0.4, y - 0.13), 0.26, 0.26, facecolor=fill, edgecolor="#555555"))
        text(ax, 0.8, y, what, SMALL + 0.5, ha="left")
    for y, line_, say in (
        (0.92, "multihead (like torch.nn.MultiheadAttention): True = blocked.", text),
        (0.6, "F.scaled_dot_product_attention, boolean attn_mask: True = may attend.", text),
        (0.25, "MultiHeadAttention inverts the mask once, where it calls the fused kernel.", note),
    ):
        say(ax, 0.4, y, line_, SMALL + 0.5, ha="left")
    return fig


# ------------------------------------------------------------ the chapter dependencies
CHAPTER_NODES = {
    "1": ("1", "Multi-head attention\nfrom scratch", "I"),
    "2": ("2", "Symmetry: why\nheads differ", "I"),
    "3": ("3", "The low-rank\nbottleneck", "II"),
    "4": ("4", "Talking heads; how\nmany heads", "II"),
    "P": ("", "The Transformer\nblock (primer)", "P"),
    "5": ("5", "Head roles", "III"),
    "6": ("6", "Head diversity\nacross layers", "III"),
    "7": ("7", "Head importance\nand pruning", "IV"),
    "8": ("8", "DropHead", "IV"),
    "9": ("9", "The heads of a real\npretrained Transformer", "V"),
    "10": ("10", "Sharing keys\nand values", "VI"),
    "11": ("11", "Heads in a decoder\nas circuits", "VI"),
    "12": ("12", "The heads of a\nreal decoder", "VI"),
}
# (earlier, later): the later chapter uses what the earlier one teaches
CHAPTER_EDGES = [
    ("1", "2"), ("1", "3"), ("3", "4"), ("1", "P"), ("P", "5"), ("2", "6"), ("5", "6"),
    ("5", "7"), ("6", "8"), ("7", "8"), ("5", "9"), ("6", "9"), ("7", "9"), ("4", "10"),
    ("10", "11"), ("9", "12"), ("11", "12"),
]  # fmt: skip


def chapter_dependencies() -> Figure:
    """Which chapter builds on which: an arrow points from a chapter to one that uses it.

    Shapes: none.
    """
    lift = 1.5  # part VI's second row sits below the rest
    pos = {
        "1": (3.9, 6.9), "2": (1.35, 5.4), "3": (3.9, 5.4), "P": (6.45, 5.4),
        "4": (3.9, 3.9), "5": (6.45, 3.9), "6": (1.35, 2.4), "7": (5.15, 2.4),
        "8": (1.35, 0.9), "9": (6.45, 0.9), "10": (3.9, 0.9), "11": (3.9, 0.9 - lift),
        "12": (6.45, 0.9 - lift),
    }  # fmt: skip
    pos = {key: (x, y + lift) for key, (x, y) in pos.items()}
    parts = {
        "I": ("blue", "I. Mechanics"),
        "II": ("orange", "II. Capacity of a head"),
        "P": ("grey", "primer"),
        "III": ("green", "III. What heads do"),
        "IV": ("purple", "IV. Fewer heads"),
        "V": ("vermillion", "V. At scale"),
        "VI": ("sky", "VI. Today's models"),
    }
    fig, ax = canvas(7.8, 8.6 + lift)
    w, h = 2.2, 0.95
    for a, b in CHAPTER_EDGES:
        (x0, y0), (x1, y1) = pos[a], pos[b]
        if x0 == x1:  # straight down
            start, end = (x0, y0 - h / 2), (x1, y1 + h / 2)
        elif y0 == y1:
            start, end = (x0 + w / 2, y0), (x1 - w / 2, y1)
        else:  # from the bottom edge to the top edge, nearer the side it heads for
            shift = 0.45 * np.sign(x1 - x0)
            land = {("6", "9"): -0.8, ("7", "9"): -0.3}.get((a, b), -shift)  # heads apart
            start, end = (x0 + shift, y0 - h / 2), (x1 + land, y1 + h / 2)
        arrow(ax, start, end, "grey", lw=1.4)
    for key, (num, title, part) in CHAPTER_NODES.items():
        x, y = pos[key]
        fill = parts[part][0]
        box(ax, x, y, w, h, "", fill, amount=0.25)
        head = f"chapter {num}" if num else "before chapter 5"
        note(ax, x, y + 0.27, head, zorder=4)
        text(ax, x, y - 0.1, title, SMALL + 0.5, linespacing=1.1, zorder=4)
    for k, (fill, name) in enumerate(parts.values()):
        x, y = 0.3 + (k % 3) * 2.55, 8.35 + lift - (k // 3) * 0.4
        square = Rectangle((x, y - 0.12), 0.24, 0.24, facecolor=tint(fill, 0.25))
        ax.add_patch(square)
        square.set_edgecolor(PALETTE[fill])
        text(ax, x + 0.35, y, name, SMALL, ha="left")
    return fig


DIAGRAMS: dict[str, Callable[[], Figure]] = {
    "multihead_shapes.svg": multihead_shapes,
    "masks.svg": masks,
    "transformer_block.svg": model.transformer_block,
    "encoder_decoder.svg": model.encoder_decoder,
    "talking_heads.svg": model.talking_heads,
    "hard_concrete.svg": model.hard_concrete,
    "chapter_dependencies.svg": chapter_dependencies,
    **pictures.PICTURES,
    **modern.PICTURES,
}


def write_all(outdir: str | Path = "book/figures") -> list[Path]:
    """Draw every diagram of ``DIAGRAMS`` and write it as an SVG into ``outdir``.

    Shapes: none. Returns the written paths, in ``DIAGRAMS`` order."""
    if not isinstance(outdir, (str, Path)):
        raise TypeError(f"outdir must be a str or Path, got {type(outdir).__name__}")
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise ValueError(f"outdir={str(outdir)!r} is a file; pass a folder")
    outdir.mkdir(parents=True, exist_ok=True)
    return [save_svg(draw(), outdir / name) for name, draw in DIAGRAMS.items()]


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.diagrams [OUTDIR]``: regenerate every SVG of the book.

    Shapes: none.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print("usage: python -m tools.diagrams [OUTDIR]", file=sys.stderr)
        return 2
    for path in write_all(args[0] if args else "book/figures"):
        print(path)
    return 0


__all__ = ["DIAGRAMS", "main", "write_all"]

if __name__ == "__main__":
    sys.exit(main())
