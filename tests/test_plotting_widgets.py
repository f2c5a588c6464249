import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from multihead.viz.plotting import plot_grid, plot_head_stat, plot_heads, plot_pattern  # noqa: E402
from multihead.viz.widgets import WithStaticFallback, explore_attention  # noqa: E402


def _patterns(*shape):
    return torch.softmax(torch.randn(*shape), dim=-1)


def test_figures_have_one_panel_per_head():
    fig = plot_heads(_patterns(3, 5, 5), tokens=list("abcde"))
    assert sum(ax.has_data() for ax in fig.axes) == 3
    grid = plot_grid(_patterns(2, 4, 6, 6))
    assert len(grid.axes) == 8
    ax = plot_pattern(_patterns(4, 6), list("abcd"), list("uvwxyz"))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0:a", "1:b", "2:c", "3:d"]
    assert ax.get_xticklabels()[5].get_text() == "5:z"  # position, then token
    plot_head_stat(torch.rand(2, 3), title="confidence")
    plt.close("all")


def test_plotting_bad_input():
    with pytest.raises(ValueError, match="query, key"):
        plot_pattern(_patterns(2, 3, 3))
    with pytest.raises(ValueError, match="query_tokens"):
        plot_pattern(_patterns(3, 3), list("ab"))
    with pytest.raises(ValueError, match="titles"):
        plot_heads(_patterns(2, 3, 3), titles=["one"])
    with pytest.raises(ValueError, match="layers, heads"):
        plot_grid(_patterns(2, 3, 3))
    with pytest.raises(ValueError, match="values"):
        plot_head_stat(torch.rand(3))


def test_explorer_carries_a_static_fallback():
    view = explore_attention(_patterns(3, 2, 4, 5, 5), [list("abcde")] * 3)
    bundle = view._repr_mimebundle_()
    assert isinstance(view, WithStaticFallback)
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["image/png"] and "live kernel" in bundle["text/plain"]
    ragged = [_patterns(1, 2, 3, 3), _patterns(1, 2, 5, 5)]
    assert explore_attention(ragged)._repr_mimebundle_()["image/png"]
    plt.close("all")


def test_explorer_bad_input():
    with pytest.raises(ValueError, match="examples"):
        explore_attention(_patterns(2, 4, 5, 5))
    with pytest.raises(ValueError, match="tokens"):
        explore_attention(_patterns(3, 2, 4, 5, 5), [list("abcde")])
    with pytest.raises(TypeError, match="patterns"):
        explore_attention([])
    with pytest.raises(ValueError, match="layers"):
        explore_attention([_patterns(1, 2, 3, 3), _patterns(2, 2, 3, 3)])
