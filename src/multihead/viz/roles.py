"""Figures for head roles: the layers x heads role map and patterns with their targets.

``role_grid`` colours each encoder head by its role (as in Voita et al.'s Figure 1);
``pattern_with_targets`` draws one head's pattern (``plotting.plot_pattern``) and outlines
the keys a criterion wants the maximum on. Number grids and the interactive explorer come
from ``plotting.plot_head_stat`` and ``widgets.explore_attention``.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle
from torch import Tensor

from multihead.analysis.roles import ROLE_NAMES
from multihead.viz.plotting import plot_pattern

# One colour per role of ``analysis.roles.ROLE_NAMES``, in that order.
ROLE_COLORS = dict(
    zip(ROLE_NAMES, ("#8e6bbf", "#c9b3e6", "#9e9e9e", "#4caf50", "#ff9800", "#f2f2f2"), strict=True)
)


def role_grid(
    roles: Sequence[Sequence[str]],
    labels: Sequence[Sequence[str]] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """A layers x heads grid coloured by role, with an optional label in each cell.

    Shapes: roles and labels are nested lists (layers, heads).
    """
    names = list(ROLE_NAMES)
    bad = {r for row in roles for r in row} - set(names)
    if bad:
        raise ValueError(f"roles {sorted(bad)} are not among {names}")
    codes = torch.tensor([[names.index(r) for r in row] for row in roles])  # (layers, heads)
    if labels is not None and [len(r) for r in labels] != [len(r) for r in roles]:
        raise ValueError("labels must have the same (layers, heads) layout as roles")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.5 + 0.8 * codes.shape[1], 1 + 0.6 * codes.shape[0]))
    cmap = ListedColormap(list(ROLE_COLORS.values()))
    ax.imshow(codes.numpy(), cmap=cmap, vmin=0, vmax=len(names) - 1)
    for i, row in enumerate(labels or []):
        for h, text in enumerate(row):
            ax.text(h, i, text, ha="center", va="center", fontsize=9)
    ax.set_xticks(range(codes.shape[1]))
    ax.set_yticks(range(codes.shape[0]))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    present = [r for r in names if any(r in row for row in roles)]
    handles = [Patch(color=ROLE_COLORS[r], label=r) for r in present]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    return ax


def pattern_with_targets(
    pattern: Tensor,
    words: Sequence[str],
    targets: Tensor | None = None,
    title: str = "",
    ax: Axes | None = None,
) -> Axes:
    """One head's pattern on one sentence; ``targets`` (bool (query, key)) get outlined.

    Shapes: pattern (seq, seq) with seq >= len(words) (padding is cut off).
    """
    n = len(words)
    if not isinstance(pattern, Tensor) or pattern.ndim != 2 or min(pattern.shape) < n:
        raise ValueError(f"pattern must be a (query, key) tensor covering the {n} words")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.25 * n + 1.6, 0.25 * n + 1.4))
    plot_pattern(pattern[:n, :n], list(words), ax=ax, title=title)
    if targets is not None:
        for q, k in targets[:n, :n].nonzero().tolist():
            ax.add_patch(Rectangle((k - 0.5, q - 0.5), 1, 1, fill=False, ec="#e65100", lw=1.2))
    return ax
