import pytest
import torch

from multihead.core.config import ModelConfig
from multihead.core.hooks import stack_layers
from multihead.core.model import EncoderModel
from multihead.interventions.gradients import head_gradient_norms


def _model():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=7, d_model=12, n_heads=3, n_layers=2, n_classes=4, max_len=6)
    return EncoderModel(cfg)


def _loss(x, y):
    def loss_fn(m):
        return torch.nn.functional.cross_entropy(m(x).flatten(0, 1), y.flatten())

    return loss_fn


def test_head_gradient_norms_match_the_gradient_slices():
    model = _model()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(7, (5, 6), generator=g), torch.randint(4, (5, 6), generator=g)
    norms = head_gradient_norms(model, _loss(x, y))
    assert all(p.grad is None for p in model.parameters())  # .grad untouched
    _loss(x, y)(model).backward()
    attn = model.encoder.layers[1].attn
    for h in range(3):
        parts = [
            getattr(attn, n).grad[h] for n in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")
        ]
        want = torch.sqrt(sum(t.double().pow(2).sum() for t in parts))
        assert torch.allclose(norms["encoder.layers.1.attn"][h], want)
    grid = stack_layers(norms)
    assert grid.shape == (2, 3) and torch.equal(grid[1], norms["encoder.layers.1.attn"])
    # a head that is masked writes nothing, so its W_O and V blocks get no gradient
    with torch.no_grad():
        attn.head_mask[2] = 0.0
    assert head_gradient_norms(model, _loss(x, y))["encoder.layers.1.attn"][2] == 0


def test_head_gradient_norms_bad_input():
    model = _model()
    x = torch.zeros(2, 6, dtype=torch.long)
    with pytest.raises(TypeError, match="model"):
        head_gradient_norms("model", _loss(x, x))
    with pytest.raises(ValueError, match="no attention layer"):
        head_gradient_norms(torch.nn.Linear(2, 2), _loss(x, x))
    with pytest.raises(TypeError, match="loss_fn"):
        head_gradient_norms(model, 3.0)
    with pytest.raises(ValueError, match="scalar"):
        head_gradient_norms(model, lambda m: torch.zeros(2))
    with pytest.raises(ValueError, match="encoder.layers"):
        stack_layers({})
    with pytest.raises(ValueError, match="encoder.layers"):
        stack_layers({"decoder.layers.0.attn": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"layers \[1\]"):
        stack_layers({"encoder.layers.1.attn": torch.zeros(3)})
