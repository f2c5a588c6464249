import pytest
import torch

from multihead.core.config import ModelConfig
from multihead.core.model import EncoderModel, attention_modules
from multihead.interventions.ablation import (
    draw_uniforms,
    drop_grid,
    full_masks,
    head_masks,
    layer_head_drop,
)


def _model():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=6, d_model=16, n_heads=4, n_layers=3, max_len=8)
    return EncoderModel(cfg).eval()


def test_full_masks_and_restore():
    model = _model()
    masks = full_masks(model)
    assert list(masks) == [n for n, _ in attention_modules(model)]
    assert all(m.shape == (4,) and bool((m == 1).all()) for m in masks.values())
    first = next(iter(masks))
    x = torch.randint(6, (2, 8))
    before = model(x)
    masks[first] = torch.tensor([0.0, 1.0, 1.0, 1.0])
    with head_masks(model, masks):
        assert dict(attention_modules(model))[first].head_mask[0] == 0
        assert not torch.allclose(model(x), before)
    assert torch.equal(model(x), before)  # restored


def test_all_heads_masked_equals_masking_by_hand():
    model = _model()
    x = torch.randint(6, (2, 8))
    masks = {name: torch.zeros(4) for name, _ in attention_modules(model)}
    with head_masks(model, masks):
        out = model(x)
    with torch.no_grad():  # by hand: a head that writes nothing has a zero block of W_O
        for _, m in attention_modules(model):
            m.W_O.zero_()
    assert torch.allclose(out, model(x))


def test_layer_head_drop_extremes_and_monotone():
    model = _model()
    u = draw_uniforms(model, torch.Generator().manual_seed(1))
    assert all(bool((m == 1).all()) for m in layer_head_drop(u, 0.0, 1.0).values())
    assert all(bool((m == 1).all()) for m in layer_head_drop(u, 1.0, 0.0).values())
    assert all(bool((m == 0).all()) for m in layer_head_drop(u, 1.0, 1.0).values())
    # q = 1: a picked layer loses every head, an unpicked one none.
    for m in layer_head_drop(u, 0.5, 1.0).values():
        assert bool((m == 0).all()) or bool((m == 1).all())
    kept = [sum(float(m.sum()) for m in layer_head_drop(u, p, 0.5).values()) for p in (0, 0.5, 1)]
    assert kept == sorted(kept, reverse=True)


def test_drop_grid_monotone_and_restores_masks():
    model = _model()
    grid = drop_grid(
        model,
        lambda m: sum(float(a.head_mask.sum()) for _, a in attention_modules(m)),
        [0.0, 0.5, 1.0],
        [0.0, 1.0],
        trials=4,
    )
    assert grid.shape == (3, 2)
    assert grid[0, 1] == grid[2, 0] == 12.0 and grid[2, 1] == 0.0
    assert grid[1, 1] <= 12.0
    assert all(bool((a.head_mask == 1).all()) for _, a in attention_modules(model))


def test_bad_input():
    model = _model()
    u = draw_uniforms(model, torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="p="):
        layer_head_drop(u, 1.5, 0.1)
    with pytest.raises(ValueError, match="q="):
        layer_head_drop(u, 0.1, -0.1)
    with pytest.raises(ValueError, match="masks"):
        with head_masks(model, {"nope": torch.ones(4)}):
            pass
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        with head_masks(model, {attention_modules(model)[0][0]: torch.ones(3)}):
            pass
    with pytest.raises(TypeError, match="evaluate"):
        drop_grid(model, 3, [0.1], [0.1])
    with pytest.raises(ValueError, match="trials"):
        drop_grid(model, lambda m: 0.0, [0.1], [0.1], trials=0)
    with pytest.raises(TypeError, match="model"):
        full_masks("not a model")
