"""The book's diagrams of the model: the Transformer block, the encoder-decoder, talking
heads (chapter 4) and the Hard Concrete gate (chapter 7). Each function returns a matplotlib
``Figure``; ``tools.diagrams`` lists them and writes the SVGs.
"""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from multihead._checks import check_int
from multihead.interventions.gates import BETA, GAMMA, ZETA, prob_one, prob_zero
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
# The picture draws the gates of chapter 7: their constants and point masses come from
# multihead.interventions.gates.
def _concrete_density(s: np.ndarray, log_alpha: float, beta: float) -> np.ndarray:
    """Density of the binary Concrete s = sigmoid((logit u + log_alpha) / beta) on (0, 1)."""
    a = np.exp(log_alpha)
    num = beta * a * s ** (-beta - 1) * (1 - s) ** (-beta - 1)
    return num / (a * s ** (-beta) + (1 - s) ** (-beta)) ** 2


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
    t = torch.tensor(float(log_alpha), dtype=torch.float64)
    p0, p1 = float(prob_zero(t)), float(prob_one(t))  # the point masses at 0 and 1
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
