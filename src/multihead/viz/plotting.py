"""Figures of attention: one pattern, the heads of a layer, a layers x heads grid.

Every function takes tensors (or arrays), draws with matplotlib and returns the figure,
so a notebook can show it, save it or ``glue`` it.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from multihead._checks import check_pattern


def _np(x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def _check_tokens(name: str, tokens: Sequence[str] | None, n: int) -> None:
    if tokens is not None and len(tokens) != n:
        raise ValueError(f"{name} has {len(tokens)} entries but the pattern has {n}")


def plot_pattern(
    pattern: torch.Tensor,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    vmax: float = 1.0,
) -> Axes:
    """Heatmap of one attention pattern: row = query, column = key, darker = more weight.

    Shapes: pattern (query, key).
    """
    p = check_pattern("pattern", torch.as_tensor(pattern), ndim=2, layout="(query, key)")
    _check_tokens("query_tokens", query_tokens, p.shape[0])
    key_tokens = query_tokens if key_tokens is None and p.shape[0] == p.shape[1] else key_tokens
    _check_tokens("key_tokens", key_tokens, p.shape[1])
    if ax is None:
        _, ax = plt.subplots(figsize=(3.2, 3.2))
    ax.imshow(_np(p), cmap="Blues", vmin=0.0, vmax=vmax, interpolation="nearest")
    for axis, toks, setter in (
        (0, query_tokens, ax.set_yticks),
        (1, key_tokens, ax.set_xticks),
    ):
        if toks is not None:
            # "position:token", so that a repeated token keeps its place
            setter(range(len(toks)), labels=[f"{i}:{t}" for i, t in enumerate(toks)], fontsize=7)
            if axis == 1:
                ax.tick_params(axis="x", labelrotation=90)
        else:
            setter([])
    ax.set_xlabel("key", fontsize=8)
    ax.set_ylabel("query", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_heads(
    patterns: torch.Tensor,
    tokens: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    ncols: int | None = None,
    suptitle: str | None = None,
) -> Figure:
    """The patterns of several heads side by side (one example).

    Shapes: patterns (heads, query, key).
    """
    p = check_pattern("patterns", torch.as_tensor(patterns), ndim=3, layout="(heads, query, key)")
    h = p.shape[0]
    if titles is not None and len(titles) != h:
        raise ValueError(f"titles has {len(titles)} entries for {h} heads")
    ncols = min(h, 4) if ncols is None else ncols
    nrows = -(-h // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols, 2.6 * nrows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i < h:
            plot_pattern(p[i], tokens, ax=ax, title=titles[i] if titles else f"head {i}")
        else:
            ax.axis("off")
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return fig


def plot_grid(
    patterns: torch.Tensor,
    tokens: Sequence[str] | None = None,
    suptitle: str | None = None,
    cell: float = 1.6,
) -> Figure:
    """A layers x heads grid of patterns (one example), rows = layers.

    Shapes: patterns (layers, heads, query, key).
    """
    layout = "(layers, heads, query, key)"
    p = check_pattern("patterns", torch.as_tensor(patterns), ndim=4, layout=layout)
    n_layers, n_heads = p.shape[:2]
    _check_tokens("tokens", tokens, p.shape[-1])
    fig, axes = plt.subplots(
        n_layers, n_heads, figsize=(cell * n_heads, cell * n_layers), squeeze=False
    )
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            ax.imshow(_np(p[layer, head]), cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=8)
            if head == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=8)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return fig


def plot_head_stat(
    values: torch.Tensor,
    title: str = "",
    cmap: str = "viridis",
    fmt: str = "{:.2f}",
    ax: Axes | None = None,
) -> Axes:
    """A (layers, heads) statistic as an annotated heatmap.

    Shapes: values (layers, heads).
    """
    v = _np(values)
    if v.ndim != 2:
        raise ValueError(f"values must be (layers, heads), got shape {v.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.6 * v.shape[1] + 1.5, 0.5 * v.shape[0] + 1.0))
    im = ax.imshow(v, cmap=cmap, aspect="auto")
    for (i, j), x in np.ndenumerate(v):
        ax.text(j, i, fmt.format(x), ha="center", va="center", fontsize=9, color="w")
    ax.set_xticks(range(v.shape[1]))
    ax.set_yticks(range(v.shape[0]))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    ax.figure.colorbar(im, ax=ax, fraction=0.046)
    return ax
