import math

import pytest
import torch

from multihead.core.attention import MultiHeadAttention
from multihead.core.hooks import run_with_cache
from multihead.interventions.symmetry import parameter_spread, pattern_spread, tie_heads


def _layer(seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(16, 4)


def test_tied_heads_are_copies_and_attend_alike():
    attn = _layer()
    assert parameter_spread(attn) > 0.1
    tie_heads(attn)
    assert parameter_spread(attn) == 0.0
    _, cache = run_with_cache(attn, torch.randn(2, 5, 16))
    assert pattern_spread(cache["pattern"]).item() == 0.0


def test_tying_without_output_keeps_the_output_blocks():
    attn = _layer()
    W_O = attn.W_O.detach().clone()
    tie_heads(attn, output=False)
    assert parameter_spread(attn, output=False) == 0.0
    assert parameter_spread(attn, output=True) > 0.1
    assert torch.equal(attn.W_O, W_O)


def test_noise_sets_the_spread():
    small, large = _layer(), _layer()
    tie_heads(small, epsilon=1e-4, generator=torch.Generator().manual_seed(1))
    tie_heads(large, epsilon=1e-1, generator=torch.Generator().manual_seed(1))
    assert 0 < parameter_spread(small) < 1e-3 < parameter_spread(large)


def test_one_gradient_step_keeps_copies_only_with_tied_output():
    x = torch.randn(3, 6, 16)
    target = torch.randn(3, 6, 16)
    for output, stays in ((True, True), (False, False)):
        attn = _layer()
        tie_heads(attn, output=output)
        opt = torch.optim.Adam(attn.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            ((attn(x) - target) ** 2).mean().backward()
            opt.step()
        assert (parameter_spread(attn, output=False) < 1e-6) == stays


def test_pattern_spread_of_disjoint_heads():
    p = torch.zeros(1, 2, 3, 2)
    p[0, 0, :, 0] = 1.0
    p[0, 1, :, 1] = 1.0
    assert math.isclose(pattern_spread(p).item(), math.sqrt(math.log(2)), rel_tol=1e-5)


def test_bad_input():
    with pytest.raises(TypeError, match="attn"):
        tie_heads(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="epsilon"):
        tie_heads(_layer(), epsilon=-0.1)
    with pytest.raises(TypeError, match="output"):
        tie_heads(_layer(), output="yes")
    with pytest.raises(TypeError, match="attn"):
        parameter_spread("layer")
    with pytest.raises(ValueError, match="two"):
        pattern_spread(torch.full((1, 1, 2, 2), 0.5))
