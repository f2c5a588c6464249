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
    """One Transformer layer of the course (``core.model.Layer``), pre-norm and post-norm.

    Shapes: none.
    """
    fig, ax = canvas(8.4, 7.4)
    for col, (pre, title, rule) in enumerate(
        (
            (True, "pre-norm (the course's default)", r"$x + f(\mathrm{LN}(x))$"),
            (False, "post-norm (the original Transformer)", r"$\mathrm{LN}(x + f(x))$"),
        )
    ):
        x = 1.1 + col * 4.1
        text(ax, x + 1.1, 7.15, title, FONT + 0.5)
        text(ax, x + 1.1, 6.8, "each sublayer computes " + rule, SMALL + 0.5)
        box(ax, x, 0.95, 2.0, 0.6, "token + position\nembeddings", "grey", size=FONT - 1.5)
        y = _sublayer(ax, x, 1.6, "multi-head\nself-attention", "blue", pre)
        y = _sublayer(ax, x, y, "FFN\nLinear, GELU, Linear", "green", pre)
        line(ax, [x, x], [1.25, y], "black", lw=2.2)
        arrow(ax, (x, y), (x, 6.3), lw=2.2)
        note(ax, x, 6.47, "to the next layer")
        text(ax, x - 0.2, 2.0, "residual\nstream", SMALL, ha="right")
    note(ax, 1.3, 6.1, "(a pre-norm stack ends with one more LayerNorm)", SMALL - 0.5, ha="left")
    ffn = r"FFN width $d_{\mathrm{ff}} = 4d_{\mathrm{model}}$"
    note(ax, 4.2, 0.25, r"stream: $n\times d_{\mathrm{model}}$;  dropout on each branch;  " + ffn)
    return fig


def encoder_decoder() -> Figure:
    """The encoder-decoder of chapters 5 to 8: its three kinds of attention. Shapes: none."""
    fig, ax = canvas(7.9, 7.0)
    ex, dx = 1.8, 6.05
    # encoder: self-attention over the source (padding mask), FFN
    ax.add_patch(
        FancyBboxPatch(
            (ex - 1.45, 1.35), 2.9, 2.65, boxstyle="round,pad=0,rounding_size=0.12",
            facecolor=tint("grey", 0.08), edgecolor=tint("grey", 0.6),
        )
    )  # fmt: skip
    text(ax, ex + 1.4, 1.5, r"$\times N_{\mathrm{enc}}$ layers", SMALL, ha="right")
    box(ax, ex, 2.2, 2.45, 0.75, "self-attention", "blue", note="padding mask on the keys")
    box(ax, ex, 3.35, 2.45, 0.6, "FFN", "green")
    arrow(ax, (ex, 2.575), (ex, 3.05))
    box(ax, ex, 0.75, 2.45, 0.6, "source tokens + positions", "grey", size=FONT - 1)
    arrow(ax, (ex, 1.05), (ex, 1.825))
    box(ax, ex, 4.75, 2.45, 0.75, "memory", "sky", note=r"$n_k\times d_{\mathrm{model}}$")
    arrow(ax, (ex, 3.65), (ex, 4.375))
    text(ax, ex, 6.55, "encoder", FONT + 1)
    text(ax, ex, 6.2, "reads the whole source", SMALL, color=PALETTE["grey"])
    # decoder: causal self-attention, cross-attention, FFN, read-out
    ax.add_patch(
        FancyBboxPatch(
            (dx - 1.45, 1.35), 2.9, 4.05, boxstyle="round,pad=0,rounding_size=0.12",
            facecolor=tint("grey", 0.08), edgecolor=tint("grey", 0.6),
        )
    )  # fmt: skip
    text(ax, dx + 1.4, 1.5, r"$\times N_{\mathrm{dec}}$ layers", SMALL, ha="right")
    box(ax, dx, 2.2, 2.45, 0.75, "causal self-attention", "blue", note=r"query $i$ sees $j\leq i$")
    box(ax, dx, 3.5, 2.45, 0.95, "", "orange")
    text(ax, dx, 3.75, "cross-attention", FONT)
    note(ax, dx, 3.4, "queries: decoder\nkeys, values: memory", linespacing=1.4)
    box(ax, dx, 4.8, 2.45, 0.6, "FFN", "green")
    arrow(ax, (dx, 2.575), (dx, 2.975))
    arrow(ax, (dx, 3.925), (dx, 4.5))
    box(ax, dx, 0.75, 2.45, 0.6, "target tokens + positions", "grey", size=FONT - 1)
    text(ax, dx, 0.22, "shifted right (teacher forcing)", SMALL, color=PALETTE["grey"])
    arrow(ax, (dx, 1.05), (dx, 1.825))
    box(ax, dx, 5.95, 2.45, 0.6, "Linear: next-token logits", "purple", size=FONT - 1)
    arrow(ax, (dx, 5.1), (dx, 5.65))
    text(ax, dx, 6.55, "decoder", FONT + 1)
    # the memory feeds every decoder layer's cross-attention
    mx = (ex + dx) / 2
    line(ax, [ex + 1.225, mx, mx], [4.75, 4.75, 3.45], "orange", lw=1.8)
    arrow(ax, (mx, 3.45), (dx - 1.225, 3.45), "orange", lw=1.8)
    text(ax, mx, 5.2, "to every\ndecoder layer", SMALL, color=PALETTE["grey"])
    note(ax, ex, 0.22, "each sublayer: residual + LayerNorm")
    return fig


# ------------------------------------------------------------ chapter 4: talking heads
def talking_heads(n_key_heads: int = 3, n_softmax_heads: int = 4, n_value_heads: int = 3) -> Figure:
    """Where talking heads mix across the head axis: logits before the softmax (``P_l``),
    weights after it (``P_w``).

    Shapes: none."""
    counts = [
        check_int("n_key_heads", n_key_heads, 1, 7),
        check_int("n_softmax_heads", n_softmax_heads, 1, 7),
        check_int("n_value_heads", n_value_heads, 1, 7),
    ]
    fig, ax = canvas(8.3, 5.9)
    rng = np.random.default_rng(4)  # schematic maps: fixed, so the SVG is reproducible
    cols = [
        (0.95, r"$S_i = Q_iK_i^\top/\sqrt{d_k}$", r"$h_k$ key heads", "orange", counts[0]),
        (3.15, r"$\tilde S_j = \sum_i (P_l)_{ij} S_i$", r"$h$ mixed logits", "orange", counts[1]),
        (5.05, r"$\tilde A_j = \mathrm{softmax}(\tilde S_j)$", r"$h$ patterns", "blue", counts[1]),
        (7.25, r"$U_m = \sum_j (P_w)_{jm} \tilde A_j$", r"$h_v$ value heads", "blue", counts[2]),
    ]
    size, gap = 0.56, 0.16
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
        text(ax, x, 5.15, title, FONT - 0.5)
        text(ax, x, 4.8, sub, SMALL, color=PALETTE["grey"])
    # the two mixings connect every head to every head; the softmax acts map by map
    for a, b, col, name in ((0, 1, "vermillion", r"$P_l$"), (2, 3, "vermillion", r"$P_w$")):
        for y0 in centres[a]:
            for y1 in centres[b]:
                line(ax, [cols[a][0] + size / 2 + 0.05, cols[b][0] - size / 2 - 0.05], [y0, y1],
                     col, lw=0.9, alpha=0.7)  # fmt: skip
        mid = (cols[a][0] + cols[b][0]) / 2
        text(ax, mid, 0.95, name, FONT + 1, color=PALETTE[col])
    text(ax, 2.05, 0.95 - 0.35, r"$h_k\times h$: mix logits", SMALL)
    text(ax, 2.05, 0.95 - 0.65, "across heads", SMALL)
    text(ax, 6.15, 0.95 - 0.35, r"$h\times h_v$: mix weights", SMALL)
    text(ax, 6.15, 0.95 - 0.65, "across heads", SMALL)
    for y in centres[1]:
        arrow(ax, (cols[1][0] + size / 2 + 0.1, y), (cols[2][0] - size / 2 - 0.1, y), "blue")
    text(ax, 4.1, 0.95, "softmax", FONT, color=PALETTE["blue"])
    text(ax, 4.1, 0.6, "each map,", SMALL)
    text(ax, 4.1, 0.3, "row by row", SMALL)
    text(ax, 4.1, 4.45, rf"here $h_k = {counts[0]}$, $h = {counts[1]}$, $h_v = {counts[2]}$",
         SMALL, color=PALETTE["grey"])  # fmt: skip
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
    clip to [0, 1] (the clipped mass becomes point masses at 0 and 1).

    Shapes: none."""
    if isinstance(log_alpha, bool) or not isinstance(log_alpha, (int, float)):
        raise TypeError(f"log_alpha must be a number, got {type(log_alpha).__name__}")
    if not -3 <= log_alpha <= 3:
        raise ValueError(f"log_alpha={log_alpha} must lie in [-3, 3] for the picture to read")
    fig = Figure(figsize=(8.2, 4.2))
    axes = fig.subplots(1, 3, sharey=True)
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.19, top=0.74, wspace=0.15)
    s = np.linspace(1e-4, 1 - 1e-4, 300)
    dens = _concrete_density(s, log_alpha, BETA)
    ymax = 3.2
    stretched = GAMMA + (ZETA - GAMMA) * s
    p0, p1 = hard_concrete_masses(log_alpha)
    blue, orange, verm = PALETTE["blue"], PALETTE["orange"], PALETTE["vermillion"]
    titles = [
        r"1. sample $s\in(0,1)$",
        r"2. stretch to $(\gamma,\zeta)$",
        r"3. clip to $[0,1]$",
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
    axes[0].set_xlabel(r"$s = \sigma((\ell + \log\alpha)/\beta)$", fontsize=SMALL + 1)
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
            ax.set_xlabel(r"$\bar s = \gamma + (\zeta - \gamma)\,s$", fontsize=SMALL + 1)
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
            ax.set_xlabel(r"$g = \min(1, \max(0, \bar s))$", fontsize=SMALL + 1)
    fig.text(
        0.5, 0.95,
        rf"$\log\alpha = {log_alpha:g}$, $\beta = 2/3$, $\gamma = {GAMMA:g}$, $\zeta = {ZETA:g}$;  "
        r"$\ell = \log u - \log(1-u)$, $u\sim U(0,1)$",
        ha="center", va="top", fontsize=SMALL, color=PALETTE["grey"],
    )  # fmt: skip
    fig.text(
        0.5, 0.875, "arrows: point masses, their heights to scale with each other",
        ha="center", va="top", fontsize=SMALL, color=PALETTE["grey"],
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
    """Which chapter builds on which: an arrow points from a chapter to one that uses it.

    Shapes: none.
    """
    pos = {
        "1": (3.9, 6.9), "2": (1.35, 5.4), "3": (3.9, 5.4), "P": (6.45, 5.4),
        "4": (3.9, 3.9), "5": (6.45, 3.9), "6": (1.35, 2.4), "7": (5.15, 2.4),
        "8": (1.35, 0.9), "9": (6.45, 0.9),
    }  # fmt: skip
    parts = {
        "I": ("blue", "I. Mechanics"),
        "II": ("orange", "II. Capacity of a head"),
        "P": ("grey", "primer"),
        "III": ("green", "III. What heads do"),
        "IV": ("purple", "IV. Fewer heads"),
        "V": ("vermillion", "V. At scale"),
    }
    fig, ax = canvas(7.8, 8.6)
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
        x, y = 0.3 + (k % 3) * 2.55, 8.35 - (k // 3) * 0.4
        square = Rectangle((x, y - 0.12), 0.24, 0.24, facecolor=tint(fill, 0.25))
        ax.add_patch(square)
        square.set_edgecolor(PALETTE[fill])
        text(ax, x + 0.35, y, name, SMALL, ha="left")
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
    """``python -m multihead.viz.diagrams [OUTDIR]``: regenerate every SVG of the book.

    Shapes: none.
    """
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
