"""Figures and an interactive explorer for head roles (matplotlib, ipywidgets).

``role_grid`` draws the layers x heads grid coloured by role (as in Voita et al.'s
Figure 1), ``value_grid`` a grid of numbers (confidence, importance), ``attention_map``
one head's pattern on one sentence, and ``head_explorer`` an ipywidgets browser over
sentences, layers and heads with ``explorer_figure`` as its static fallback (the rendered
book has no live kernel).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from torch import Tensor

ROLE_COLORS = {
    "positional": "#8e6bbf",
    "self": "#c9b3e6",
    "delimiter": "#9e9e9e",
    "syntactic": "#4caf50",
    "rare-word": "#ff9800",
    "none": "#f2f2f2",
}


def role_grid(roles: list[list[str]], labels: list[list[str]] | None = None, ax=None):
    """A layers x heads grid coloured by role, with an optional label in each cell.

    Shapes: roles and labels are nested lists (layers, heads). Returns the axes.
    """
    names = list(ROLE_COLORS)
    for row in roles:
        for r in row:
            if r not in ROLE_COLORS:
                raise ValueError(f"role {r!r} is not one of {names}")
    codes = torch.tensor([[names.index(r) for r in row] for row in roles])
    ax = ax or plt.subplots(figsize=(1 + 0.8 * codes.shape[1], 1 + 0.6 * codes.shape[0]))[1]
    ax.imshow(codes, cmap=ListedColormap(list(ROLE_COLORS.values())), vmin=0, vmax=len(names) - 1)
    for i, row in enumerate(labels or []):
        for h, text in enumerate(row):
            ax.text(h, i, text, ha="center", va="center", fontsize=7)
    _grid_ticks(ax, codes.shape)
    present = sorted({r for row in roles for r in row}, key=names.index)
    ax.legend(
        handles=[Patch(color=ROLE_COLORS[r], label=r) for r in present],
        loc="upper left",
        bbox_to_anchor=(1.02, 1),
        fontsize=8,
        frameon=False,
    )
    return ax


def value_grid(values: Tensor, title: str, ax=None, fmt: str = "{:.2f}", cmap: str = "viridis"):
    """A layers x heads heatmap of ``values`` with each number written in its cell.

    Shapes: values (layers, heads). Returns the axes.
    """
    if not isinstance(values, Tensor) or values.ndim != 2:
        raise ValueError("values must be a (layers, heads) tensor")
    ax = ax or plt.subplots(figsize=(1 + 0.8 * values.shape[1], 1 + 0.6 * values.shape[0]))[1]
    im = ax.imshow(values, cmap=cmap)
    mid = (values.max() + values.min()) / 2
    for (i, h), v in zip(
        torch.cartesian_prod(*map(torch.arange, values.shape)).tolist(),
        values.flatten().tolist(),
        strict=True,
    ):
        ax.text(
            h,
            i,
            fmt.format(v),
            ha="center",
            va="center",
            fontsize=7,
            color="black" if v > mid else "white",
        )
    _grid_ticks(ax, values.shape)
    ax.set_title(title, fontsize=10)
    plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def _grid_ticks(ax, shape) -> None:
    ax.set_xticks(range(shape[1]))
    ax.set_yticks(range(shape[0]))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")


def attention_map(
    pattern: Tensor,
    words: list[str] | tuple,
    title: str = "",
    ax=None,
    targets: Tensor | None = None,
):
    """One head's attention on one sentence; ``targets`` (bool (query, key)) are outlined.

    Shapes: pattern (query, key) with query = key = len(words). Returns the axes.
    """
    n = len(words)
    if not isinstance(pattern, Tensor) or pattern.ndim != 2 or pattern.shape[0] < n:
        raise ValueError(f"pattern must be (query, key) covering the {n} words")
    p = pattern[:n, :n]
    ax = ax or plt.subplots(figsize=(0.28 * n + 1.5, 0.28 * n + 1.2))[1]
    ax.imshow(p, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(n), words, rotation=90, fontsize=7)
    ax.set_yticks(range(n), words, fontsize=7)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if targets is not None:
        for q, k in targets[:n, :n].nonzero().tolist():
            ax.add_patch(plt.Rectangle((k - 0.5, q - 0.5), 1, 1, fill=False, ec="#e65100", lw=1.2))
    ax.set_title(title, fontsize=9)
    return ax


def explorer_figure(patterns: Tensor, words: list[str] | tuple, layer: int, roles=None):
    """Every head of one layer on one sentence, side by side (the explorer's static view).

    Shapes: patterns (layers, heads, seq, seq) for one sentence. Returns the figure.
    """
    if patterns.ndim != 4:
        raise ValueError("patterns must be (layers, heads, seq, seq) for one sentence")
    heads = patterns.shape[1]
    fig, axes = plt.subplots(1, heads, figsize=(2.3 * heads, 2.8), squeeze=False)
    for h, ax in enumerate(axes[0]):
        role = f" ({roles[layer][h]})" if roles is not None else ""
        attention_map(patterns[layer, h], words, f"L{layer} H{h}{role}", ax=ax)
        if h:
            ax.set_ylabel("")
            ax.set_yticks([])
    fig.tight_layout()
    return fig


def head_explorer(patterns: Tensor, sentences: list, roles=None):
    """An ipywidgets browser: choose a sentence and a layer, see every head's pattern.

    Without ipywidgets (or a live kernel) it returns the static figure for sentence 0,
    layer 0. Shapes: patterns (layers, batch, heads, seq, seq).
    """
    try:
        import ipywidgets as widgets
        from IPython.display import display
    except ImportError:  # the static fallback
        return explorer_figure(patterns[:, 0], sentences[0].words, 0, roles)
    out = widgets.Output()
    pick_sentence = widgets.IntSlider(0, 0, len(sentences) - 1, description="sentence")
    pick_layer = widgets.IntSlider(0, 0, patterns.shape[0] - 1, description="layer")

    def redraw(_=None) -> None:
        with out:
            out.clear_output(wait=True)
            s = pick_sentence.value
            fig = explorer_figure(patterns[:, s], sentences[s].words, pick_layer.value, roles)
            plt.show(fig)

    pick_sentence.observe(redraw, names="value")
    pick_layer.observe(redraw, names="value")
    redraw()
    box = widgets.VBox([widgets.HBox([pick_sentence, pick_layer]), out])
    display(box)
    return box
