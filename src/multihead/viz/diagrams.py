"""The book's diagrams: each function draws one and returns a matplotlib ``Figure``.

They are schematic: shapes in the course's notation (``book/notation.md``), never a measured
number (those come from the notebooks). One command regenerates every SVG of the book,
byte for byte::

    python -m multihead.viz.diagrams [OUTDIR]      # default: book/figures

The chapter-opening pictures live in ``multihead.viz.chapter_pictures``; ``DIAGRAMS`` maps
every file name to its drawing function.
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
from multihead.viz import chapter_pictures as pictures
from multihead.viz.drawing import (
    FONT,
    PALETTE,
    SMALL,
    arrow,
    box,
    canvas,
    cells,
    line,
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
    """Multi-head attention with the shape of every tensor, and the hook points."""
    fig, ax = canvas(11.8, 5.3)
    # h stacked copies of the per-head part: the same computation for every head i
    for k, amount in ((2, 0.10), (1, 0.16), (0, 0.22)):
        off = 0.09 * k
        ax.add_patch(
            FancyBboxPatch(
                (1.95 + off, 0.75 + off),
                6.75,
                4.0,
                boxstyle="round,pad=0,rounding_size=0.12",
                facecolor=tint("grey", amount * 0.45),
                edgecolor=tint("grey", 0.6),
                linewidth=1.0,
            )
        )
    text(ax, 2.1, 4.5, r"head $i$, for $i = 1,\dots,h$ (all heads in parallel)", ha="left")
    w, h = 1.85, 0.72
    box(ax, 0.85, 2.6, 1.25, 0.85, r"$X$", "grey", note=r"$n\times d_{\mathrm{model}}$")
    rows = {"q": 3.75, "k": 2.6, "v": 1.6}
    labels = {
        "q": (r"$Q_i = XW_Q^{(i)}$", r"$n\times d_k$"),
        "k": (r"$K_i = XW_K^{(i)}$", r"$n\times d_k$"),
        "v": (r"$V_i = XW_V^{(i)}$", r"$n\times d_v$"),
    }
    for name, y in rows.items():
        box(ax, 3.15, y, w, h, labels[name][0], "blue", note=labels[name][1])
        arrow(ax, (1.48, 2.6), (3.15 - w / 2, y))
        _hook(ax, 3.15 + w / 2 - 0.12, y + h / 2 + 0.1, name)
    text(
        ax, 3.15, 0.98, r"$W_Q^{(i)}, W_K^{(i)}: d_{\mathrm{model}}\times d_k$", SMALL,
        color=PALETTE["grey"],
    )  # fmt: skip
    text(ax, 5.3, 0.98, r"$W_V^{(i)}: d_{\mathrm{model}}\times d_v$", SMALL, color=PALETTE["grey"])
    # scores from Q and K, the pattern, then z from the pattern and V
    box(ax, 5.2, 3.2, 1.85, h, r"$S_i = Q_iK_i^\top/\sqrt{d_k}$", "orange", note=r"$n\times n$")
    _hook(ax, 5.2 + 0.93 - 0.3, 3.2 + h / 2 + 0.1, "scores")
    arrow(ax, (3.15 + w / 2, 3.75), (5.2 - 0.925, 3.3))
    arrow(ax, (3.15 + w / 2, 2.6), (5.2 - 0.925, 3.1))
    box(
        ax, 7.35, 3.2, 2.05, h, r"$A_i = \mathrm{softmax}(S_i)$", "orange",
        note="each row sums to 1",
    )  # fmt: skip
    _hook(ax, 7.35 + 1.02 - 0.32, 3.2 + h / 2 + 0.1, "pattern")
    arrow(ax, (5.2 + 0.925, 3.2), (7.35 - 1.025, 3.2))
    box(ax, 7.35, 1.6, 1.6, h, r"$z_i = A_iV_i$", "green", note=r"$n\times d_v$")
    _hook(ax, 7.35 + 0.8 - 0.12, 1.6 + h / 2 + 0.1, "z")
    arrow(ax, (7.35, 3.2 - h / 2), (7.35, 1.6 + h / 2))
    arrow(ax, (3.15 + w / 2, 1.6), (7.35 - 0.8, 1.6))
    # concatenate the heads, then W_O
    box(ax, 9.55, 2.6, 1.4, 0.95, r"$[z_1\ \cdots\ z_h]$", "green", note=r"$n\times hd_v$")
    text(ax, 9.55, 3.3, "concatenate", SMALL, color=PALETTE["grey"])
    arrow(ax, (7.35 + 0.8, 1.6), (9.55 - 0.7, 2.45), rad=0.25)
    box(
        ax, 11.05, 2.6, 1.3, 0.95, r"$[z_1\cdots z_h]W_O$", "purple",
        note=r"$n\times d_{\mathrm{model}}$", size=FONT - 1,
    )  # fmt: skip
    text(ax, 11.05, 1.85, r"$W_O: hd_v\times d_{\mathrm{model}}$", SMALL, color=PALETTE["grey"])
    arrow(ax, (9.55 + 0.7, 2.6), (11.05 - 0.65, 2.6))
    text(
        ax, 5.9, 0.3,
        "in code (orange: hook names), with a batch axis: x, output (batch, seq, d_model);  "
        "q, k (batch, heads, seq, d_key);  v, z (batch, heads, seq, d_value);  "
        "scores, pattern (batch, heads, query, key)",
        SMALL - 0.5, color=PALETTE["grey"],
    )  # fmt: skip
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
    """Padding and causal masks on the ``n`` x ``n`` scores, and the two mask polarities."""
    m = mask_examples(n, n_padding)
    size = 0.36
    fig, ax = canvas(11.6, 2.9 + n * size)
    top = 1.75 + n * size
    panels = [
        ("padding", "key_padding_mask", f"the last {n_padding} tokens are padding"),
        ("causal", "causal=True", r"query $i$ sees keys $j\leq i$"),
        ("both", "padding and causal", "blocked if either blocks"),
        ("sdpa", "attn_mask of torch's SDPA", r"the same mask, inverted: $\sim$mask"),
    ]
    for p, (key, title, sub) in enumerate(panels):
        x0 = 0.55 + p * 2.85
        shown = m["both"] if key == "sdpa" else m[key]
        cells(
            ax, x0, top, n, n, size,
            fill=lambda i, j, s=shown: tint("vermillion", 0.75) if s[i, j] else tint("sky", 0.3),
            label=lambda i, j, v=m[key]: "T" if v[i, j] else "F",
        )  # fmt: skip
        text(ax, x0 + n * size / 2, top + 0.55, title, FONT, fontdict=MONO if p != 2 else None)
        text(ax, x0 + n * size / 2, top + 0.25, sub, SMALL, color=PALETTE["grey"])
        text(ax, x0 - 0.18, top - n * size / 2, "query", SMALL, rotation=90)
        text(ax, x0 + n * size / 2, top - n * size - 0.18, "key", SMALL)
    # the legend and the two polarities
    y = 0.95
    for k, (fill, what) in enumerate(
        (
            (tint("vermillion", 0.75), r"blocked: score set to $-\infty$, weight exactly 0"),
            (tint("sky", 0.3), "may attend: an ordinary softmax weight"),
        )
    ):
        x = 0.55 + k * 4.6
        ax.add_patch(Rectangle((x, y - 0.13), 0.26, 0.26, facecolor=fill, edgecolor="#555555"))
        text(ax, x + 0.4, y, what, SMALL + 0.5, ha="left")
    text(
        ax, 0.55, 0.42,
        "multihead (like torch.nn.MultiheadAttention): True = blocked.   "
        "F.scaled_dot_product_attention, boolean attn_mask: True = may attend.",
        SMALL + 0.5, ha="left",
    )  # fmt: skip
    text(
        ax, 0.55, 0.15,
        "MultiHeadAttention inverts the mask once, where it calls the fused kernel.",
        SMALL + 0.5, ha="left", color=PALETTE["grey"],
    )  # fmt: skip
    return fig


# ------------------------------------------------------ the Transformer block, encoder-decoder
def _plus(ax, x: float, y: float) -> None:
    """The residual addition on the stream."""
    ax.add_patch(
        FancyBboxPatch(
            (x - 0.16, y - 0.16), 0.32, 0.32, boxstyle="circle,pad=0",
            facecolor="white", edgecolor="black", zorder=3,
        )
    )  # fmt: skip
    text(ax, x, y - 0.01, "+", FONT + 1, zorder=4)


def _norm(ax, x: float, y: float) -> None:
    box(ax, x, y, 1.5, 0.46, "LayerNorm", "yellow", size=FONT - 1, amount=0.5, edge="grey")


def _sublayer(ax, x: float, y: float, label: str, fill: str, pre: bool) -> float:
    """One residual sublayer on the stream at ``x``, branching off at height ``y``; returns
    the height where the stream leaves it. Pre-norm: ``x + f(LN(x))``, the LayerNorm on the
    branch; post-norm: ``LN(x + f(x))``, the LayerNorm on the stream."""
    bx = x + 1.6  # the branch runs to the right of the stream
    top_f = y + (1.55 if pre else 0.95)  # the top of f's box
    line(ax, [x, bx, bx], [y, y, y + 0.25], "grey")
    if pre:
        _norm(ax, bx, y + 0.5)
        arrow(ax, (bx, y + 0.73), (bx, y + 0.95), "grey")
    box(ax, bx, top_f - 0.3, 1.95, 0.6, label, fill)
    back = top_f + 0.3  # the branch rejoins the stream here
    line(ax, [bx, bx, x + 0.3], [top_f, back, back], "grey")
    arrow(ax, (x + 0.3, back), (x + 0.16, back), "grey")
    _plus(ax, x, back)
    if pre:
        return back + 0.45
    _norm(ax, x, back + 0.6)
    return back + 1.05


def transformer_block() -> Figure:
    """One Transformer layer of the course (``core.model.Layer``), pre-norm and post-norm."""
    fig, ax = canvas(10.6, 7.2)
    for col, (pre, title, rule) in enumerate(
        (
            (True, "pre-norm (the course's default)", r"$x + f(\mathrm{LN}(x))$"),
            (False, "post-norm (the original Transformer)", r"$\mathrm{LN}(x + f(x))$"),
        )
    ):
        x = 1.5 + col * 5.3
        text(ax, x + 1.1, 6.95, title, FONT + 1)
        text(ax, x + 1.1, 6.6, "each sublayer computes " + rule, SMALL + 0.5)
        box(ax, x, 0.55, 2.3, 0.55, "token + position", "grey", size=FONT - 1)
        text(ax, x, 0.1, r"embeddings, $n\times d_{\mathrm{model}}$", SMALL, color=PALETTE["grey"])
        y = _sublayer(ax, x, 1.2, "multi-head\nself-attention", "blue", pre)
        y = _sublayer(ax, x, y, "FFN\nLinear, GELU, Linear", "green", pre)
        line(ax, [x, x], [0.83, y], "black", lw=2.2)
        arrow(ax, (x, y), (x, 6.0), lw=2.2)
        text(ax, x, 6.2, "to the next layer", SMALL, color=PALETTE["grey"])
        text(ax, x - 0.25, 1.6, "residual\nstream", SMALL, ha="right")
    text(ax, 4.2, 5.6, "a pre-norm stack ends\nwith one more LayerNorm", SMALL - 0.5, ha="left",
         color=PALETTE["grey"])  # fmt: skip
    ffn = r"FFN width $d_{\mathrm{ff}} = 4d_{\mathrm{model}}$"
    note(ax, 4.2, 0.55, "dropout on each branch;\n" + ffn, SMALL - 0.5, ha="left")
    return fig


def encoder_decoder() -> Figure:
    """The encoder-decoder of chapters 5 to 8: its three kinds of attention."""
    fig, ax = canvas(10.6, 7.0)
    ex, dx = 2.7, 7.6
    # encoder: self-attention over the source (padding mask), FFN
    ax.add_patch(
        FancyBboxPatch(
            (ex - 1.55, 1.45), 3.1, 2.55, boxstyle="round,pad=0,rounding_size=0.12",
            facecolor=tint("grey", 0.08), edgecolor=tint("grey", 0.6),
        )
    )  # fmt: skip
    text(ax, ex - 1.75, 2.7, r"$\times N_{\mathrm{enc}}$", FONT, ha="right")
    box(ax, ex, 2.2, 2.6, 0.75, "self-attention", "blue", note="padding mask on source keys")
    box(ax, ex, 3.35, 2.6, 0.6, "FFN", "green")
    arrow(ax, (ex, 2.575), (ex, 3.05))
    box(ax, ex, 0.75, 2.6, 0.6, "source tokens + positions", "grey", size=FONT - 1)
    arrow(ax, (ex, 1.05), (ex, 1.825))
    box(ax, ex, 4.75, 2.6, 0.75, "memory", "sky", note=r"$n_k\times d_{\mathrm{model}}$")
    arrow(ax, (ex, 3.65), (ex, 4.375))
    text(ax, ex, 6.55, "encoder", FONT + 1)
    text(ax, ex, 6.2, "reads the whole source", SMALL, color=PALETTE["grey"])
    # decoder: causal self-attention, cross-attention, FFN, read-out
    ax.add_patch(
        FancyBboxPatch(
            (dx - 1.55, 1.45), 3.1, 3.95, boxstyle="round,pad=0,rounding_size=0.12",
            facecolor=tint("grey", 0.08), edgecolor=tint("grey", 0.6),
        )
    )  # fmt: skip
    text(ax, dx + 1.75, 3.4, r"$\times N_{\mathrm{dec}}$", FONT, ha="left")
    box(ax, dx, 2.2, 2.6, 0.75, "causal self-attention", "blue", note=r"query $i$ sees $j\leq i$")
    box(ax, dx, 3.45, 2.6, 0.95, "cross-attention", "orange", note="queries: decoder\n")
    text(ax, dx, 3.17, "keys, values: memory", SMALL, color=PALETTE["grey"])
    box(ax, dx, 4.8, 2.6, 0.6, "FFN", "green")
    arrow(ax, (dx, 2.575), (dx, 2.975))
    arrow(ax, (dx, 3.925), (dx, 4.5))
    box(ax, dx, 0.75, 2.6, 0.6, "target tokens + positions", "grey", size=FONT - 1)
    text(ax, dx, 0.22, "shifted right (teacher forcing)", SMALL, color=PALETTE["grey"])
    arrow(ax, (dx, 1.05), (dx, 1.825))
    box(ax, dx, 5.95, 2.6, 0.6, "Linear: next-token logits", "purple", size=FONT - 1)
    arrow(ax, (dx, 5.1), (dx, 5.65))
    text(ax, dx, 6.55, "decoder", FONT + 1)
    # the memory feeds every decoder layer's cross-attention
    mx = (ex + dx) / 2
    line(ax, [ex + 1.3, mx, mx], [4.75, 4.75, 3.45], "orange", lw=1.8)
    arrow(ax, (mx, 3.45), (dx - 1.3, 3.45), "orange", lw=1.8)
    text(ax, mx, 5.0, "to every decoder layer", SMALL, color=PALETTE["grey"])
    text(ax, ex, 0.22, "every sublayer: residual + LayerNorm", SMALL, color=PALETTE["grey"])
    return fig


# ------------------------------------------------------------ chapter 4: talking heads
def talking_heads(n_key_heads: int = 3, n_softmax_heads: int = 4, n_value_heads: int = 3) -> Figure:
    """Where talking heads mix across the head axis: logits before the softmax (``P_l``),
    weights after it (``P_w``)."""
    counts = [
        check_int("n_key_heads", n_key_heads, 1, 7),
        check_int("n_softmax_heads", n_softmax_heads, 1, 7),
        check_int("n_value_heads", n_value_heads, 1, 7),
    ]
    fig, ax = canvas(11.4, 5.6)
    rng = np.random.default_rng(4)  # schematic maps: fixed, so the SVG is reproducible
    cols = [
        (1.35, r"$S_i = Q_iK_i^\top/\sqrt{d_k}$", r"$h_k$ key heads", "orange", counts[0]),
        (4.4, r"$\tilde S_j = \sum_i (P_l)_{ij} S_i$", r"$h$ mixed logits", "orange", counts[1]),
        (6.85, r"$\tilde A_j = \mathrm{softmax}(\tilde S_j)$", r"$h$ patterns", "blue", counts[1]),
        (9.9, r"$U_m = \sum_j (P_w)_{jm} \tilde A_j$", r"$h_v$ value heads", "blue", counts[2]),
    ]
    size, gap = 0.6, 0.18
    centres = []
    names = (("S", "left"), (r"\tilde S", None), (r"\tilde A", None), ("U", "right"))
    for (x, title, sub, fill, count), (symbol, side) in zip(cols, names, strict=True):
        span = count * size + (count - 1) * gap
        ys = [2.75 + span / 2 - size / 2 - k * (size + gap) for k in range(count)]
        centres.append(ys)
        for y in ys:
            maps = rng.random((4, 4))
            cells(
                ax, x - size / 2, y + size / 2, 4, 4, size / 4,
                fill=lambda i, j, v=maps, f=fill: tint(f, 0.15 + 0.6 * v[i, j]), edge="white",
            )  # fmt: skip
            if side is not None:
                k = ys.index(y) + 1
                dx = -size / 2 - 0.3 if side == "left" else size / 2 + 0.3
                text(ax, x + dx, y, rf"${symbol}_{k}$", FONT)
        text(ax, x, 5.15, title, FONT)
        text(ax, x, 4.8, sub, SMALL, color=PALETTE["grey"])
    # the two mixings connect every head to every head; the softmax acts map by map
    for a, b, col, name in ((0, 1, "vermillion", r"$P_l$"), (2, 3, "vermillion", r"$P_w$")):
        for y0 in centres[a]:
            for y1 in centres[b]:
                line(ax, [cols[a][0] + size / 2 + 0.05, cols[b][0] - size / 2 - 0.05], [y0, y1],
                     col, lw=0.9, alpha=0.7)  # fmt: skip
        mid = (cols[a][0] + cols[b][0]) / 2
        text(ax, mid, 0.95, name, FONT + 1, color=PALETTE[col])
    text(ax, 2.875, 0.6, r"$h_k\times h$: mix logits across heads", SMALL)
    text(ax, 8.375, 0.6, r"$h\times h_v$: mix weights across heads", SMALL)
    for y in centres[1]:
        arrow(ax, (cols[1][0] + size / 2 + 0.1, y), (cols[2][0] - size / 2 - 0.1, y), "blue")
    text(ax, 5.625, 0.95, "softmax", FONT, color=PALETTE["blue"])
    text(ax, 5.625, 0.6, "each map, row by row", SMALL)
    text(ax, 5.625, 4.45, rf"here $h_k = {counts[0]}$, $h = {counts[1]}$, $h_v = {counts[2]}$",
         SMALL, color=PALETTE["grey"])  # fmt: skip
    text(
        ax, 5.7, 0.18,
        r"then $O = [U_1V_1\ \cdots\ U_{h_v}V_{h_v}]\,W_O$.  "
        r"With $P_l = P_w = I$ (and $h_k = h = h_v$) this is plain multi-head attention.",
        SMALL + 0.5,
    )  # fmt: skip
    return fig


# -------------------------------------------------------------- chapter 7: Hard Concrete
# The gate's constants used in chapter 7 (Louizos et al. 2018); tests/test_diagrams.py
# checks them against multihead.interventions.gates, which this layer may not import.
BETA, GAMMA, ZETA = 2.0 / 3.0, -0.1, 1.1


def _concrete_density(s: np.ndarray, log_alpha: float, beta: float) -> np.ndarray:
    """Density of the binary Concrete s = sigmoid((logit u + log_alpha) / beta) on (0, 1)."""
    a = np.exp(log_alpha)
    num = beta * a * s ** (-beta - 1) * (1 - s) ** (-beta - 1)
    return num / (a * s ** (-beta) + (1 - s) ** (-beta)) ** 2


def _sigmoid(t: float) -> float:
    return float(1 / (1 + np.exp(-t)))


def hard_concrete_masses(log_alpha: float = 0.5) -> tuple[float, float]:
    """The point masses ``(P(g = 0), P(g = 1))`` drawn by ``hard_concrete``.

    Shapes: none (two floats)."""
    b = BETA
    p0 = _sigmoid(b * np.log(-GAMMA / ZETA) - log_alpha)
    p1 = _sigmoid(log_alpha - b * np.log((1 - GAMMA) / (ZETA - 1)))
    return p0, p1


def hard_concrete(log_alpha: float = 0.5) -> Figure:
    """The Hard Concrete gate in three steps: sample on (0, 1), stretch to (gamma, zeta),
    clip to [0, 1] (the clipped mass becomes point masses at 0 and 1)."""
    if isinstance(log_alpha, bool) or not isinstance(log_alpha, (int, float)):
        raise TypeError(f"log_alpha must be a number, got {type(log_alpha).__name__}")
    if not -3 <= log_alpha <= 3:
        raise ValueError(f"log_alpha={log_alpha} must lie in [-3, 3] for the picture to read")
    fig = Figure(figsize=(11.4, 3.9))
    axes = fig.subplots(1, 3, sharey=True)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.22, top=0.8, wspace=0.12)
    s = np.linspace(1e-4, 1 - 1e-4, 300)
    dens = _concrete_density(s, log_alpha, BETA)
    ymax = 3.2
    stretched = GAMMA + (ZETA - GAMMA) * s
    p0, p1 = hard_concrete_masses(log_alpha)
    blue, orange, verm = PALETTE["blue"], PALETTE["orange"], PALETTE["vermillion"]
    titles = [
        r"1. sample $s = \sigma((\log u - \log(1-u) + \log\alpha)/\beta)$",
        r"2. stretch $\bar s = \gamma + (\zeta - \gamma)\,s$",
        r"3. clip $g = \min(1, \max(0, \bar s))$",
    ]
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=FONT - 0.5)
        ax.set_ylim(0, ymax)
        ax.set_yticks([])
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        ax.tick_params(labelsize=SMALL)
    axes[0].fill_between(s, np.minimum(dens, ymax), color=tint("blue", 0.35), lw=0)
    axes[0].plot(s, np.minimum(dens, ymax), color=blue)
    axes[0].set_xlim(-0.2, 1.2)
    axes[0].set_xticks([0, 1])
    axes[0].set_xlabel(r"$s\in(0,1)$", fontsize=SMALL + 1)
    axes[0].set_ylabel("density", fontsize=SMALL + 1)
    d2 = np.minimum(dens / (ZETA - GAMMA), ymax)
    for ax, show_clip in ((axes[1], False), (axes[2], True)):
        ax.set_xlim(-0.2, 1.2)
        inside = (stretched > 0) & (stretched < 1)
        ax.fill_between(stretched, d2, where=inside, color=tint("blue", 0.35), lw=0)
        ax.plot(stretched[inside], d2[inside], color=blue)
        if not show_clip:
            for where, col in ((stretched <= 0, orange), (stretched >= 1, verm)):
                ax.fill_between(stretched, d2, where=where, color=col, alpha=0.55, lw=0)
                ax.plot(stretched[where], d2[where], color=col)
            ax.set_xticks([GAMMA, 0, 1, ZETA], [r"$\gamma$", "0", "1", r"$\zeta$"])
            ax.set_xlabel(r"$\bar s\in(\gamma,\zeta)$: shaded parts fall outside $[0, 1]$",
                          fontsize=SMALL + 1)  # fmt: skip
        else:
            # a point mass is drawn as an arrow whose height is proportional to its mass
            scale = 0.8 * ymax / max(p0, p1)
            for x0, p, col, name in ((0.0, p0, orange, r"$P(g=0)$"), (1.0, p1, verm, r"$P(g=1)$")):
                ax.annotate(
                    "", (x0, p * scale), (x0, 0),
                    arrowprops={"arrowstyle": "-|>", "color": col, "lw": 2.5},
                )  # fmt: skip
                ax.text(x0, p * scale + 0.12, name, ha="center", fontsize=SMALL + 1, color=col)
            ax.set_xticks([0, 1])
            ax.set_xlabel(r"$g\in[0,1]$: exact zeros and ones", fontsize=SMALL + 1)
    fig.text(
        0.5, 0.93,
        rf"$\log\alpha = {log_alpha:g}$, $\beta = 2/3$, $\gamma = {GAMMA:g}$, $\zeta = {ZETA:g}$"
        r", $u\sim U(0,1)$  (arrows: point masses, heights to scale with each other)",
        ha="center", fontsize=SMALL + 1, color=PALETTE["grey"],
    )  # fmt: skip
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
}
# (earlier, later): the later chapter uses what the earlier one teaches
CHAPTER_EDGES = [
    ("1", "2"), ("1", "3"), ("3", "4"), ("1", "P"), ("P", "5"), ("2", "6"), ("5", "6"),
    ("5", "7"), ("6", "8"), ("7", "8"), ("5", "9"), ("6", "9"), ("7", "9"),
]  # fmt: skip


def chapter_dependencies() -> Figure:
    """Which chapter builds on which: an arrow points from a chapter to one that uses it."""
    pos = {
        "1": (1.2, 3.0), "2": (3.75, 5.0), "3": (3.75, 3.0), "P": (3.75, 1.0),
        "4": (6.3, 3.0), "5": (6.3, 1.0), "6": (8.85, 5.0), "7": (8.85, 1.0),
        "8": (11.4, 5.0), "9": (11.4, 1.0),
    }  # fmt: skip
    parts = {
        "I": ("blue", "I. Mechanics"),
        "II": ("orange", "II. Capacity of a head"),
        "P": ("grey", "primer"),
        "III": ("green", "III. What heads do"),
        "IV": ("purple", "IV. Fewer heads"),
        "V": ("vermillion", "V. At scale"),
    }
    fig, ax = canvas(12.6, 6.6)
    w, h, rad = 2.05, 0.95, 0.0
    for a, b in CHAPTER_EDGES:
        (x0, y0), (x1, y1) = pos[a], pos[b]
        bend = (a, b) == ("5", "9")  # it would cross chapter 7: bend below it
        if bend:
            start, end, rad = (x0 + 0.3, y0 - h / 2), (x1 - 0.3, y1 - h / 2), 0.13
        elif y0 == y1:
            start, end = (x0 + w / 2, y0), (x1 - w / 2, y1)
        elif x0 == x1:
            start, end = (x0, y0 + np.sign(y1 - y0) * h / 2), (x1, y1 - np.sign(y1 - y0) * h / 2)
        else:
            start = (x0 + w / 2, y0 + np.sign(y1 - y0) * 0.2)
            end = (x1 - w / 2, y1 - np.sign(y1 - y0) * 0.2)
        arrow(ax, start, end, "grey", lw=1.4, rad=rad if bend else 0.0)
    for key, (num, title, part) in CHAPTER_NODES.items():
        x, y = pos[key]
        fill = parts[part][0]
        box(ax, x, y, w, h, "", fill, amount=0.25)
        head = f"chapter {num}" if num else "before chapter 5"
        text(ax, x, y + 0.27, head, SMALL, color=PALETTE["grey"])
        text(ax, x, y - 0.1, title, SMALL + 0.5, linespacing=1.1)
    for k, (fill, name) in enumerate(parts.values()):
        x = 0.3 + k * 2.1
        ax.add_patch(
            Rectangle((x, 6.15), 0.25, 0.25, facecolor=tint(fill, 0.25), edgecolor=PALETTE[fill])
        )
        text(ax, x + 0.35, 6.27, name, SMALL, ha="left")
    return fig


DIAGRAMS: dict[str, Callable[[], Figure]] = {
    "multihead_shapes.svg": multihead_shapes,
    "masks.svg": masks,
    "transformer_block.svg": transformer_block,
    "encoder_decoder.svg": encoder_decoder,
    "talking_heads.svg": talking_heads,
    "hard_concrete.svg": hard_concrete,
    "chapter_dependencies.svg": chapter_dependencies,
    **pictures.PICTURES,
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
    """``python -m multihead.viz.diagrams [OUTDIR]``: regenerate every SVG of the book."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print("usage: python -m multihead.viz.diagrams [OUTDIR]", file=sys.stderr)
        return 2
    for path in write_all(args[0] if args else "book/figures"):
        print(path)
    return 0


__all__ = ["DIAGRAMS", "main", "write_all"]

if __name__ == "__main__":
    sys.exit(main())
