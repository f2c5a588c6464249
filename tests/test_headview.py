"""The offline head viewer: input checks, quantisation, size, no external scripts."""

import base64
import json
import re

import numpy as np
import pytest
import torch

from multihead.viz.headview import HeadView, head_view, head_views, quantise


def _pattern(layers=2, heads=3, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(layers, heads, n, n, generator=g).softmax(-1)  # (layers, heads, q, k)


def _tokens(n=5):
    return [f"t{i}" for i in range(n)]


def _data(view: HeadView) -> dict:
    raw = re.search(r'<script type="application/json" class="mhv-data">(.*?)</script>', view.html)
    return json.loads(raw.group(1))


def test_returns_html_object_with_repr():
    view = head_view(_pattern(), _tokens())
    assert isinstance(view, HeadView)
    assert view._repr_html_() == view.html
    assert view.dom_id in view.html and view.n_bytes == len(view.html.encode())


def test_quantisation_roundtrip_within_half_a_level():
    a = _pattern()
    data = _data(head_view(a, _tokens()))
    raw = np.frombuffer(base64.b64decode(data["examples"][0]["w"]), dtype=np.uint8)
    back = raw.reshape(a.shape) / 255
    assert np.abs(back - a.numpy()).max() <= 0.5 / 255 + 1e-9
    assert quantise(np.array([0.0, 1.0, 0.5, 1.2, -0.1])).tolist() == [0, 255, 128, 255, 0]


def test_accepts_list_of_layers_with_batch_of_one_and_numpy():
    a = _pattern()
    per_layer = [a[0][None], a[1].numpy()]  # (1, heads, q, k) and (heads, q, k)
    assert _data(head_view(per_layer, _tokens()))["heads"] == [3, 3]
    assert _data(head_view(a[0], _tokens()))["heads"] == [3]  # one layer


def test_size_small_for_a_six_by_twelve_model():
    view = head_view(_pattern(layers=6, heads=12, n=14), _tokens(14))
    # 6 * 12 * 14 * 14 weights = 14 kB as bytes, ~19 kB in base64, plus ~12 kB of code
    assert view.n_bytes < 40_000


def test_no_external_scripts_or_styles():
    html = head_view(_pattern(), _tokens(), coords=torch.randn(2, 3, 2)).html
    assert not re.search(r"<script[^>]+src=", html)
    assert not re.search(r"<link", html)
    assert "@import" not in html and "url(" not in html


def test_unique_dom_ids_and_escaped_tokens():
    a, b = head_view(_pattern(), _tokens()), head_view(_pattern(), _tokens())
    assert a.dom_id != b.dom_id
    nasty = ["</script>", "<b>", '"', "&", "x"]
    html = head_view(_pattern(), nasty).html
    assert "</script><b>" not in html
    assert _data(head_view(_pattern(), nasty))["examples"][0]["tokens"] == nasty


def test_arcs_coords_and_several_examples():
    view = head_views(
        [(_pattern(n=4), _tokens(4), [(1, 0)]), (_pattern(n=6), _tokens(6))],
        names=["a", "b"],
        coords=torch.randn(6, 2),
    )
    data = _data(view)
    assert [e["name"] for e in data["examples"]] == ["a", "b"]
    assert data["examples"][0]["arcs"] == [[1, 0]] and data["examples"][1]["arcs"] == []
    assert len(data["coords"]) == 6


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"attention": [[0.5]]}, TypeError, r"attention\[0\] must be a torch tensor"),
        ({"attention": "x"}, TypeError, "attention must be a torch tensor"),
        ({"attention": torch.ones(2, 3, 5, 5, dtype=torch.long)}, TypeError, "floats"),
        ({"attention": torch.rand(5, 5)}, ValueError, "expected \\(layers, heads"),
        ({"attention": []}, ValueError, "empty list"),
        ({"attention": [torch.rand(5, 5)]}, ValueError, r"attention\[0\]"),
        ({"attention": _pattern() * 2}, ValueError, "outside \\[0, 1\\]"),
        ({"attention": _pattern() * float("nan")}, ValueError, "NaN"),
        ({"tokens": "abcde"}, TypeError, "tokens must be a list"),
        ({"tokens": [1, 2, 3, 4, 5]}, TypeError, "tokens must be a list of strings"),
        ({"tokens": _tokens(4)}, ValueError, "4 tokens"),
        ({"arcs": [(0, 9)]}, ValueError, "outside the 5 tokens"),
        ({"arcs": [(0, 1, 2)]}, ValueError, "arcs must be"),
        ({"coords": torch.randn(5, 2)}, ValueError, "coords has shape"),
        ({"coords": [[0.0, 1.0]]}, TypeError, "coords must be"),
    ],
)
def test_bad_inputs_name_the_argument(kwargs, error, match):
    args = {"attention": _pattern(), "tokens": _tokens(), **kwargs}
    with pytest.raises(error, match=match):
        head_view(args.pop("attention"), args.pop("tokens"), **args)


def test_head_views_checks_examples():
    with pytest.raises(TypeError, match="examples must be"):
        head_views([])
    with pytest.raises(TypeError, match=r"examples\[0\]"):
        head_views([_pattern()])
    with pytest.raises(ValueError, match="heads per layer"):
        head_views([(_pattern(heads=3), _tokens()), (_pattern(heads=2), _tokens())])
    with pytest.raises(ValueError, match="names has 1"):
        head_views([(_pattern(), _tokens()), (_pattern(), _tokens())], names=["a"])
