"""Interactive explorers (ipywidgets), each with a static fallback for the rendered book.

A live notebook shows the controls. The rendered book has no kernel, so each explorer
also carries a PNG of its initial view in the same output (the book is configured to
prefer it over the widget): readers of the book see a figure, not an empty box.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from multihead._checks import check_pattern
from multihead.viz.plotting import plot_pattern


def figure_png(fig: Figure, dpi: int = 80) -> str:
    """A figure as base64 PNG text (what a notebook output stores). Closes the figure."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


class WithStaticFallback:
    """Display a widget, with a PNG and a text note alongside for static renderers."""

    def __init__(self, widget: object, fallback: Figure, note: str) -> None:
        self.widget = widget
        self.png = figure_png(fallback)
        self.note = note

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        bundle = {}
        repr_widget = getattr(self.widget, "_repr_mimebundle_", None)
        if repr_widget is not None:
            data = repr_widget(include=include, exclude=exclude)
            bundle.update(data[0] if isinstance(data, tuple) else data or {})
        bundle["image/png"] = self.png
        bundle["text/plain"] = self.note
        return bundle


def _as_examples(patterns: object) -> list[torch.Tensor]:
    if isinstance(patterns, torch.Tensor):
        layout = "(examples, layers, heads, query, key) or a list of (layers, heads, q, k)"
        check_pattern("patterns", patterns, ndim=5, layout=layout)
        return list(patterns)
    if not isinstance(patterns, Sequence) or not patterns:
        raise TypeError("patterns must be a tensor or a non-empty list of tensors")
    out = [
        check_pattern(f"patterns[{i}]", p, 4, "(layers, heads, query, key)")
        for i, p in enumerate(patterns)
    ]
    shapes = {tuple(p.shape[:2]) for p in out}
    if any(p.ndim != 4 for p in out) or len(shapes) != 1:
        raise ValueError(
            "every example must be (layers, heads, query, key) with equal layers/heads"
        )
    return out


def explore_attention(
    patterns: object,
    tokens: Sequence[Sequence[str]] | None = None,
    key_tokens: Sequence[Sequence[str]] | None = None,
    title: str = "",
) -> WithStaticFallback:
    """An explorer of attention patterns: pick the example, the layer and the head.

    ``tokens[i]`` labels the queries of example ``i`` (and the keys, unless ``key_tokens``
    is given, as for cross-attention).

    Shapes: patterns (examples, layers, heads, query, key), or a list of
    (layers, heads, query_i, key_i) tensors of varying length.
    """
    import ipywidgets as w
    from IPython.display import display

    examples = _as_examples(patterns)
    if tokens is not None and len(tokens) != len(examples):
        raise ValueError(f"tokens has {len(tokens)} entries for {len(examples)} examples")
    if key_tokens is not None and len(key_tokens) != len(examples):
        raise ValueError(f"key_tokens has {len(key_tokens)} entries for {len(examples)} examples")
    n_layers, n_heads = examples[0].shape[:2]

    def draw(example: int, layer: int, head: int) -> Figure:
        fig, ax = plt.subplots(figsize=(4.2, 4.2))
        plot_pattern(
            examples[example][layer, head],
            None if tokens is None else tokens[example],
            None if key_tokens is None else key_tokens[example],
            ax=ax,
            title=f"{title} example {example}, layer {layer}, head {head}".strip(),
        )
        fig.tight_layout()
        return fig

    example = w.IntSlider(0, 0, len(examples) - 1, description="example")
    layer = w.Dropdown(options=list(range(n_layers)), value=0, description="layer")
    head = w.Dropdown(options=list(range(n_heads)), value=0, description="head")
    out = w.Output()

    def update(_change: object = None) -> None:
        with out:
            out.clear_output(wait=True)
            fig = draw(example.value, layer.value, head.value)
            display(fig)
            plt.close(fig)

    for control in (example, layer, head):
        control.observe(update, names="value")
    update()
    box = w.VBox([w.HBox([example, layer, head]), out])
    note = "Attention explorer: needs a live kernel. Static view: example 0, layer 0, head 0."
    return WithStaticFallback(box, draw(0, 0, 0), note)


# ---------------------------------------------------------------------------------
# Chapter 3: the low-rank bottleneck
# ---------------------------------------------------------------------------------
def plot_low_rank_fit(axes: Sequence, n: int, d_k: int, steps: int = 300) -> float:
    """Draw a random target pattern and the best fit by one head of key size ``d_k``.

    The patterns are drawn in the package's row convention (query rows, key columns).
    Returns the KL of the fit.

    Shapes: axes (2,) matplotlib axes -> float.
    """
    from multihead.analysis.lowrank import best_fit_example

    target, fitted, kl = best_fit_example(n, d_k, steps=steps)
    vmax = float(target.max())
    for ax, M, title in (
        (axes[0], target, f"target, n={n}"),
        (axes[1], fitted, f"best fit, d_k={d_k}\nKL {kl:.1e}"),
    ):
        ax.imshow(M.T.numpy(), cmap="viridis", vmin=0, vmax=vmax)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_xticks([])
        ax.set_yticks([])
    return kl


def explore_low_rank(
    n: int = 8, d_k: int = 3, max_n: int = 16, steps: int = 300
) -> WithStaticFallback:
    """Sliders for ``n`` and ``d_k``: a random target next to the best one-head fit.

    Shapes: none.
    """
    import ipywidgets as w
    from IPython.display import display

    def draw(n_: int, d_k_: int) -> Figure:
        fig, axes = plt.subplots(1, 2, figsize=(5.6, 3.0))
        plot_low_rank_fit(axes, n_, d_k_, steps)
        fig.tight_layout()
        return fig

    n_slider = w.IntSlider(n, 2, max_n, description="n")
    k_slider = w.IntSlider(d_k, 1, max_n + 2, description="d_k")
    out = w.Output()

    def update(_change: object = None) -> None:
        with out:
            out.clear_output(wait=True)
            fig = draw(n_slider.value, k_slider.value)
            display(fig)
            plt.close(fig)

    for control in (n_slider, k_slider):
        control.observe(update, names="value")
    update()
    box = w.VBox([w.HBox([n_slider, k_slider]), out])
    note = f"Low-rank explorer: needs a live kernel. Static view: n={n}, d_k={d_k}."
    return WithStaticFallback(box, draw(n, d_k), note)
