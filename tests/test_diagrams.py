"""The book's diagrams: regenerating them reproduces the committed SVGs byte for byte, every
label lies inside its figure, the mask picture has the package's polarity (and torch's), and
bad arguments are rejected."""

import re
from pathlib import Path

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg

from multihead.core.attention import MultiHeadAttention, attention_pattern
from multihead.core.hooks import run_with_cache
from tools import chapter_pictures, diagrams, drawing, model_diagrams

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "book" / "figures"


def test_the_command_reproduces_the_committed_files(tmp_path, capsys):
    # one regeneration (the slow part): the command writes every diagram and prints its path
    assert diagrams.main([str(tmp_path)]) == 0
    written = [Path(line) for line in capsys.readouterr().out.split()]
    assert [p.name for p in written] == list(diagrams.DIAGRAMS)
    assert sorted(p.name for p in written) == sorted(p.name for p in FIGURES.glob("*.svg"))
    changed = [p.name for p in written if p.read_bytes() != (FIGURES / p.name).read_bytes()]
    assert not changed, f"run `python -m tools.diagrams` and commit: {changed}"
    assert diagrams.main(["a", "b"]) == 2


@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_every_label_is_inside_its_figure_readable_and_apart(name):
    fig = diagrams.DIAGRAMS[name]()
    assert isinstance(fig, matplotlib.figure.Figure)
    agg = FigureCanvasAgg(fig)
    agg.draw()  # lays out the axis labels
    renderer = agg.get_renderer()
    box = fig.bbox
    texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()]
    assert texts
    for t in texts:
        assert t.get_fontsize() >= 7.5, f"{t.get_text()!r} is too small to read"
        ext = t.get_window_extent(renderer)
        inside = ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1
        inside = inside and ext.y0 >= box.y0 - 1 and ext.y1 <= box.y1 + 1
        assert inside, f"{name}: {t.get_text()!r} is cut off ({ext} outside {box})"
    # no two labels overlap (their boxes shrunk a little about their centres: touching is fine)
    boxes = [t.get_window_extent(renderer).expanded(0.96, 0.9) for t in texts]
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            pair = (texts[i].get_text(), texts[j].get_text())
            assert not a.overlaps(boxes[j]), f"{name}: labels {pair} overlap"


def test_mask_picture_has_the_package_polarity_and_torchs():
    m = diagrams.mask_examples(n=5, n_padding=2)
    assert m["padding"][:, 3:].all() and not m["padding"][:, :3].any()
    assert torch.equal(m["causal"], torch.ones(5, 5, dtype=torch.bool).triu(1))
    assert torch.equal(m["both"], m["padding"] | m["causal"])
    assert torch.equal(m["sdpa"], ~m["both"])
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(5, 4, generator=g) for _ in range(3))
    # the package: True = blocked, so exactly the True entries get weight 0
    pattern = attention_pattern(q, k, m["both"])
    assert torch.equal(pattern == 0, m["both"])
    # torch's fused kernel: True = may attend, so it needs the inverted mask of the picture
    fused = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=m["sdpa"][None])
    torch.testing.assert_close(fused[0], pattern @ v)
    wrong = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=m["both"][None])
    assert not torch.allclose(wrong[0], pattern @ v)
    # the module's key_padding_mask and causal flag block the picture's entries, on both paths
    mha = MultiHeadAttention(4, 1)
    x = torch.randn(1, 5, 4, generator=g)
    pad = torch.tensor([[False, False, False, True, True]])
    fused = mha(x, key_padding_mask=pad, causal=True)
    explicit, cache = run_with_cache(mha, x, key_padding_mask=pad, causal=True)
    torch.testing.assert_close(explicit, fused)
    assert torch.equal(cache["pattern"][0, 0] == 0, m["both"])


def test_chapter_graph_points_forward_and_reaches_every_chapter():
    nodes, edges = diagrams.CHAPTER_NODES, diagrams.CHAPTER_EDGES
    assert {str(i) for i in range(1, 13)} | {"P"} == set(nodes)
    rank = {str(i): float(i) for i in range(1, 13)} | {"P": 4.5}  # the primer sits before 5
    assert all(a in nodes and b in nodes and rank[a] < rank[b] for a, b in edges)
    assert {b for _, b in edges} == set(nodes) - {"1"}, "every chapter but 1 builds on one"
    assert ("1", "P") in edges and ("P", "5") in edges


def test_book_figures_exist_and_have_alt_text_and_a_label():
    for page in sorted((ROOT / "book").glob("*.md")):
        for block in re.findall(r"```\{figure\} (\S+)\n(.*?)```", page.read_text(), re.S):
            target, body = block
            if target.startswith("figures/"):
                assert (ROOT / "book" / target).exists(), f"{page.name}: {target} is missing"
                assert Path(target).name in diagrams.DIAGRAMS, target
            assert ":alt:" in body and ":name:" in body, f"{page.name}: {target}"


def test_bad_input():
    with pytest.raises(ValueError, match="n=1"):
        diagrams.masks(n=1)
    with pytest.raises(ValueError, match="n_padding"):
        diagrams.mask_examples(n=5, n_padding=5)
    with pytest.raises(TypeError, match="n_padding"):
        diagrams.masks(n_padding=1.5)
    with pytest.raises(ValueError, match="n_key_heads"):
        model_diagrams.talking_heads(n_key_heads=0)
    with pytest.raises(TypeError, match="n_softmax_heads"):
        model_diagrams.talking_heads(n_softmax_heads="4")
    with pytest.raises(TypeError, match="log_alpha"):
        model_diagrams.hard_concrete("0.5")
    with pytest.raises(ValueError, match="log_alpha"):
        model_diagrams.hard_concrete(10.0)
    with pytest.raises(ValueError, match="d_key"):
        chapter_pictures.ch03_low_rank(n=4, d_key=4)
    with pytest.raises(ValueError, match="n_heads"):
        chapter_pictures.ch06_head_distances(n_heads=1)
    with pytest.raises(ValueError, match="n_heads"):
        chapter_pictures.ch07_pruning(n_heads=20)
    with pytest.raises(ValueError, match="dropped"):
        chapter_pictures.ch08_drophead(n_heads=3, dropped=(0, 3))
    with pytest.raises(ValueError, match="never silences"):
        chapter_pictures.ch08_drophead(n_heads=2, dropped=(0, 1))
    with pytest.raises(TypeError, match="dropped"):
        chapter_pictures.ch08_drophead(dropped=[1])
    with pytest.raises(ValueError, match="n_layers"):
        chapter_pictures.ch09_minilm(n_layers=0)
    with pytest.raises(TypeError, match="outdir"):
        diagrams.write_all(3)
    with pytest.raises(TypeError, match="fig"):
        drawing.save_svg("not a figure", "x.svg")
    with pytest.raises(ValueError, match="amount"):
        drawing.tint("blue", 1.5)
    with pytest.raises(ValueError, match="width"):
        drawing.canvas(0, 1)


def test_write_all_rejects_a_file_as_folder(tmp_path):
    target = tmp_path / "file.svg"
    target.write_text("")
    with pytest.raises(ValueError, match="outdir"):
        diagrams.write_all(target)
