"""Chapter-opening pictures: what chapters 2, 3, 6, 7, 8 and 9 study, drawn as schematics.

Nothing here is a result: the little attention maps are fixed random arrays chosen to look
like patterns, and every number is a count or a rule of the construction. ``PICTURES`` maps
each SVG name to its drawing function (``tools.diagrams`` writes them).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle, Rectangle

from multihead._checks import check_int
from tools.drawing import (
    FONT,
    PALETTE,
    SMALL,
    arrow,
    box,
    canvas,
    cells,
    line,
    note,
    text,
    tint,
)


def _pattern(rng: np.random.Generator, n: int, sharp: float = 2.5) -> np.ndarray:
    """A fixed random row-stochastic n x n map (rows = queries), for illustration."""
    logits = sharp * rng.standard_normal((n, n))
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _draw_map(ax, x: float, y: float, p: np.ndarray, size: float, hue: str = "blue") -> None:
    """Draw pattern ``p`` with its top-left corner at ``(x, y)``, darker = more weight."""
    n = p.shape[0]
    cells(
        ax, x, y, n, n, size / n,
        fill=lambda i, j: tint(hue, 0.08 + 0.92 * min(1.0, p[i, j] / 0.7)), edge="white",
    )  # fmt: skip


# -------------------------------------------------------------- chapter 2: symmetry
def ch02_symmetry() -> Figure:
    """Heads started as exact copies stay copies; heads started a tiny bit apart drift apart.

    Shapes: none.
    """
    fig, ax = canvas(8.2, 4.6)
    rng = np.random.default_rng(2)
    base, later = _pattern(rng, 5), _pattern(rng, 5)
    other = _pattern(rng, 5)
    size = 0.85
    rows = [
        (3.55, "exact copies", "head 2 = head 1", (base, base), (later, later), "still copies"),
        (1.65, r"copies $+\,\epsilon$ noise", r"head 2 = head 1 $+\,\epsilon$",
         (base, base), (later, other), "as different as\nindependent heads"),
    ]  # fmt: skip
    text(ax, 2.5, 4.35, "at initialization", FONT + 1)
    text(ax, 5.35, 4.35, "after training", FONT + 1)
    for y, name, sub, start, end, verdict in rows:
        text(ax, 0.1, y, name, FONT, ha="left")
        text(ax, 0.1, y - 0.3, sub, SMALL - 1, ha="left", color=PALETTE["grey"])
        for k, p in enumerate(start):
            _draw_map(ax, 1.65 + k * 1.0, y + size / 2, p, size, "blue")
        arrow(ax, (3.62, y), (4.38, y), lw=1.6)
        text(ax, 4.0, y + 0.22, "train", SMALL)
        for k, p in enumerate(end):
            hue = "orange" if p is not end[0] else "blue"  # orange: a head that moved away
            _draw_map(ax, 4.5 + k * 1.0, y + size / 2, p, size, hue)
        text(ax, 6.5, y, verdict, SMALL + 0.5, ha="left")
    for x in (1.65, 2.65, 4.5, 5.5):
        for y in (3.55, 1.65):
            text(ax, x + size / 2, y - size / 2 - 0.15, "head 1" if x in (1.65, 4.5) else "head 2",
                 SMALL - 1, color=PALETTE["grey"])  # fmt: skip
    note(
        ax, 4.1, 0.15,
        "the swap of two heads is a symmetry of the loss: "
        "gradient descent and Adam keep copies equal",
    )  # fmt: skip
    return fig


# ------------------------------------------------------------ chapter 3: low rank
def ch03_low_rank(n: int = 8, d_key: int = 2) -> Figure:
    """The logit matrix as a product of an n x d_k and a d_k x n factor, so rank <= d_k.

    Shapes: none.
    """
    n = check_int("n", n, 2, 13)
    d_key = check_int("d_key", d_key, 1, n)
    fig, ax = canvas(8.4, 4.0)
    c = 0.26  # one cell
    top = 3.3
    rng = np.random.default_rng(3)
    left, right = rng.standard_normal((n, d_key)), rng.standard_normal((d_key, n))
    logits = left @ right  # shaded from the product itself: its rank is at most d_key

    def shade(values, hue):
        lo, hi = np.percentile(values, [5, 95])
        return lambda i, j: tint(hue, 0.1 + 0.8 * np.clip((values[i, j] - lo) / (hi - lo), 0, 1))

    x0 = 0.6
    cells(ax, x0, top, n, d_key, c, shade(left, "blue"))
    text(ax, x0 + d_key * c / 2, top + 0.35, r"$(W_kX)^\top$", FONT)
    text(ax, x0 + d_key * c / 2, top - n * c - 0.22, r"$n\times d_k$", SMALL)
    x1 = x0 + d_key * c + 0.6
    text(ax, x1 - 0.3, top - n * c / 2, r"$\times$", FONT + 3)
    cells(ax, x1, top, d_key, n, c, shade(right, "green"))
    text(ax, x1 + n * c / 2, top + 0.35, r"$W_qX$", FONT)
    text(ax, x1 + n * c / 2, top - d_key * c - 0.22, r"$d_k\times n$", SMALL)
    x2 = x1 + n * c + 0.7
    text(ax, x2 - 0.35, top - n * c / 2, "=", FONT + 3)
    cells(ax, x2, top, n, n, c, shade(logits, "orange"))
    text(ax, x2 + n * c / 2, top + 0.35, r"logits $\sqrt{d_k}\,S$", FONT)
    text(ax, x2 + n * c / 2, top - n * c - 0.22, r"$n\times n$, rank $\leq d_k$", SMALL)
    x3 = x2 + n * c + 0.25
    arrow(ax, (x3, top - n * c / 2), (x3 + 0.75, top - n * c / 2), lw=1.6)
    text(ax, x3 + 0.38, top - n * c / 2 + 0.42, "softmax", SMALL)
    text(ax, x3 + 0.38, top - n * c / 2 + 0.18, "per column", SMALL)
    text(ax, x3 + 0.52, top - n * c / 2 - 0.75,
         "which patterns\ncan one head\nmake? here\n" + rf"$d_k = {d_key} < n = {n}$",
         SMALL + 0.5, linespacing=1.3)  # fmt: skip
    note(
        ax, 4.2, 0.25,
        "tokens are the columns of X (chapter 3's convention); "
        "the code's patterns are the transpose",
    )  # fmt: skip
    return fig


# ------------------------------------------------------ chapter 6: heads as points
def ch06_head_distances(n_heads: int = 6) -> Figure:
    """A layer's heads as points: the Jensen-Shannon distance between their patterns, and the
    spread (mean pairwise distance) that summarises the layer.

    Shapes: none."""
    n_heads = check_int("n_heads", n_heads, 2, 9)
    fig, ax = canvas(8.2, 4.6)
    rng = np.random.default_rng(6)
    size = 0.7
    for k in range(n_heads):
        col, row = k % 3, k // 3
        x, y = 0.35 + col * 0.95, 3.95 - row * 1.2
        _draw_map(ax, x, y, _pattern(rng, 5), size)
        text(ax, x + size / 2, y - size - 0.17, f"head {k + 1}", SMALL)
    text(ax, 1.7, 4.3, "one layer's patterns on the same tokens", SMALL + 0.5)
    arrow(ax, (3.1, 2.6), (4.0, 2.6), lw=1.6)
    text(ax, 3.55, 2.95, "compare\nevery pair", SMALL)
    # the heads as points, with every pairwise distance drawn
    pts = np.array([[6.0, 3.6], [7.6, 3.9], [8.7, 2.8], [7.9, 1.5], [6.1, 1.4], [5.4, 2.5]])
    pts = pts[:n_heads] - np.array([0.95, 0.0])
    for a in range(n_heads):
        for b in range(a + 1, n_heads):
            line(ax, pts[[a, b], 0], pts[[a, b], 1], "grey", lw=0.8, alpha=0.6)
    a, b = 0, 2 if n_heads > 2 else 1
    line(ax, pts[[a, b], 0], pts[[a, b], 1], "vermillion", lw=2.2)
    mid = pts[[a, b]].mean(axis=0)
    text(ax, mid[0] + 0.3, mid[1] - 0.45, r"$\sqrt{\mathrm{JS}}$(head 1, head 3)", SMALL,
         color=PALETTE["vermillion"], zorder=4,
         bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5})  # fmt: skip
    for k, (x, y) in enumerate(pts):
        ax.add_patch(Circle((x, y), 0.2, facecolor=tint("blue", 0.5), edgecolor=PALETTE["blue"],
                            zorder=3))  # fmt: skip
        text(ax, x, y, str(k + 1), SMALL, zorder=4)
    text(ax, 6.1, 0.65, "spread of the layer = mean of the pairwise distances", SMALL + 0.5)
    note(ax, 6.1, 0.3, "points placed so that their distances match (MDS)")
    return fig


# -------------------------------------------------------- chapter 7: pruning heads
def ch07_pruning(n_heads: int = 8) -> Figure:
    """Two ways to choose heads to remove: rank by importance, or learn gates. Shapes: none."""
    n_heads = check_int("n_heads", n_heads, 2, 13)
    fig, ax = canvas(8.3, 4.4)
    scores = np.random.default_rng(7).random(n_heads) ** 2 * 0.85  # schematic bar heights
    order = np.argsort(scores)
    removed = set(order[: n_heads // 2].tolist())
    text(ax, 2.05, 4.15, "(a) score each head, remove the lowest", FONT)
    note(ax, 2.05, 3.85, r"importance $|\partial L/\partial\xi_i|$, $\xi_i$ a mask on head $i$")
    w = 3.4 / n_heads
    for i, s in enumerate(scores):
        x = 0.35 + i * w
        hue = "grey" if i in removed else "blue"
        ax.add_patch(Rectangle((x, 1.2), w * 0.7, 0.2 + 2.2 * s / scores.max(),
                               facecolor=tint(hue, 0.55), edgecolor=PALETTE[hue]))  # fmt: skip
        text(ax, x + w * 0.35, 0.95, str(i + 1), SMALL)
    text(ax, 2.05, 0.6, "head; grey = lowest scores, removed first", SMALL, color=PALETTE["grey"])
    line(ax, [4.1, 4.1], [0.4, 4.2], "grey", lw=0.8)
    text(ax, 6.2, 4.15, "(b) learn a gate on each head", FONT)
    text(ax, 6.2, 3.85, r"gates $g_i\in[0,1]$, loss $+\,\lambda\,\mathbb{E}\|g\|_0$", SMALL,
         color=PALETTE["grey"])  # fmt: skip
    for i in range(n_heads):
        x = 4.3 + i * (3.7 / n_heads)
        closed = i in removed
        box(ax, x + 0.2, 2.6, 0.42, 0.42, "", "grey" if closed else "green", amount=0.45)
        text(ax, x + 0.2, 2.6, "0" if closed else "1", SMALL)
        text(ax, x + 0.2, 2.05, str(i + 1), SMALL)
    text(ax, 6.2, 1.45, "training closes gates;", SMALL + 0.5)
    text(ax, 6.2, 1.15, "an exact 0 removes the head", SMALL + 0.5)
    text(ax, 6.2, 0.8, "(the Hard Concrete gate of section 7.2)", SMALL, color=PALETTE["grey"])
    return fig


# ------------------------------------------------------------ chapter 8: DropHead
def ch08_drophead(n_heads: int = 6, dropped: tuple[int, ...] = (1, 4)) -> Figure:
    """DropHead on one training example: dropped heads get gate 0, the K kept ones h/K.

    Shapes: none.
    """
    h = check_int("n_heads", n_heads, 2, 13)
    if not isinstance(dropped, tuple) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in dropped
    ):
        raise TypeError(f"dropped must be a tuple of head indices, got {dropped!r}")
    if any(not 0 <= i < h for i in dropped) or len(set(dropped)) != len(dropped):
        raise ValueError(f"dropped={dropped} must hold distinct heads in [0, {h})")
    if len(dropped) == h:
        raise ValueError("dropped must leave one head: DropHead never silences a whole layer")
    kept = h - len(dropped)
    fig, ax = canvas(7.8, 4.5)
    text(ax, 3.9, 4.25, "one training example, one layer", FONT + 1)
    step = 6.3 / (h - 1)
    for i in range(h):
        x = 0.75 + i * step
        off = i in dropped
        hue = "grey" if off else "blue"
        box(ax, x, 3.35, 0.8, 0.55, rf"$o_{{{i + 1}}}$", hue, amount=0.15 if off else 0.3)
        xi = 0 if off else 1
        text(ax, x, 2.75, rf"$\xi_{{{i + 1}}} = {xi}$", SMALL + 1)
        gate = "0" if off else f"{h}/{kept}"
        text(ax, x, 2.3, rf"$g_{{{i + 1}}} = {gate}$", SMALL + 1,
             color=PALETTE["grey" if off else "black"])  # fmt: skip
        if off:
            line(ax, [x - 0.4, x + 0.4], [3.1, 3.6], "vermillion", lw=2, zorder=5)
            line(ax, [x - 0.4, x + 0.4], [3.6, 3.1], "vermillion", lw=2, zorder=5)
        arrow(ax, (x, 2.05), (3.9 + (x - 3.9) * 0.3, 1.45), "grey", lw=1.0)
    box(ax, 3.9, 1.15, 3.4, 0.55, r"layer output $\sum_i g_i\, o_i + b_O$", "purple")
    text(ax, 3.9, 0.55, rf"$h = {h}$ heads, $K = {kept}$ kept: each kept head is scaled by $h/K$,",
         SMALL + 0.5)  # fmt: skip
    text(ax, 3.9, 0.22, r"so the gates sum to $h$; in evaluation every gate is 1", SMALL + 0.5)
    return fig


# ----------------------------------------------------- chapter 9: MiniLM's heads
def ch09_minilm(n_layers: int = 6, n_heads: int = 12) -> Figure:
    """The layers x heads grid of all-MiniLM-L6-v2, and the analyses run on it. Shapes: none."""
    n_layers = check_int("n_layers", n_layers, 1, 25)
    n_heads = check_int("n_heads", n_heads, 1, 25)
    fig, ax = canvas(7.4, 4.6)
    c = min(0.36, 4.4 / n_heads)
    x0, top = 1.45, 3.95
    row_hl, cell_hl = min(1, n_layers - 1), (n_layers - 2 if n_layers > 1 else 0, n_heads // 2)
    off = {(i, j) for i, j in ((5, 2), (5, 9), (4, 0), (3, 11)) if i < n_layers and j < n_heads}
    cells(
        ax, x0, top, n_layers, n_heads, c,
        fill=lambda i, j: tint("grey", 0.5) if (i, j) in off else (
            tint("orange", 0.8) if (i, j) == cell_hl else (
                tint("green", 0.45) if i == row_hl else tint("blue", 0.25))),
    )  # fmt: skip
    for i in range(n_layers):
        text(ax, x0 - 0.12, top - (i + 0.5) * c, f"{i + 1}", SMALL, ha="right")
    for j in range(n_heads):
        text(ax, x0 + (j + 0.5) * c, top + 0.15, f"{j + 1}", SMALL - 1)
    text(ax, x0 + n_heads * c / 2, top + 0.45, f"{n_heads} heads per layer", FONT)
    text(ax, x0 - 0.5, top - n_layers * c / 2, f"{n_layers} layers", FONT, rotation=90)
    notes = [
        ("orange", "one head: its pattern, entropy, attention to [CLS], [SEP], punctuation;"
         " role detectors"),
        ("green", "one layer: Jensen-Shannon distances between its heads, MDS, the spread"),
        ("grey", "masked heads (reversible): importance, ablation and pruning curves"),
    ]  # fmt: skip
    for k, (hue, what) in enumerate(notes):
        y = 1.17 - k * 0.33
        ax.add_patch(Rectangle((0.3, y - 0.11), 0.22, 0.22, facecolor=tint(hue, 0.7),
                               edgecolor=PALETTE[hue]))  # fmt: skip
        text(ax, 0.65, y, what, SMALL, ha="left")
    note(ax, x0 + n_heads * c / 2, top - n_layers * c - 0.25,
         "patterns read word by word: WordPiece rows merged into word rows")  # fmt: skip
    note(ax, 3.7, 0.17, "all-MiniLM-L6-v2: a pretrained BERT-style encoder, d_model = 384, "
         "run offline")  # fmt: skip
    return fig


PICTURES: dict[str, Callable[[], Figure]] = {
    "ch02_symmetry.svg": ch02_symmetry,
    "ch03_low_rank.svg": ch03_low_rank,
    "ch06_head_distances.svg": ch06_head_distances,
    "ch07_pruning.svg": ch07_pruning,
    "ch08_drophead.svg": ch08_drophead,
    "ch09_minilm.svg": ch09_minilm,
}
