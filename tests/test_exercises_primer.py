"""The primer checkers accept the reference answers and reject wrong ones with a hint."""

import math

import pytest
import torch

from multihead import exercises as ex


def positions(n, d):
    t = torch.arange(n, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = (t * w).sin(), (t * w).cos()
    return pe


def test_check_sinusoidal():
    assert ex.check_sinusoidal(positions).startswith("Correct")
    assert ex.check_sinusoidal(lambda n, d: positions(n, d).float()).startswith("Correct")

    def from_one(n, d):
        return positions(n + 1, d)[1:]

    def concatenated(n, d):
        pe = positions(n, d)
        return torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)

    def swapped(n, d):
        pe = positions(n, d)
        return torch.stack([pe[:, 1::2], pe[:, 0::2]], dim=-1).flatten(1)

    def exponent_i_over_d(n, d):  # frequency 1 / 10000 ** (i / d) instead of (2i / d)
        t = torch.arange(n, dtype=torch.float64)[:, None]
        w = 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64) / d)
        return torch.stack([(t * w).sin(), (t * w).cos()], dim=-1).flatten(1)

    for wrong, hint in (
        (from_one, "row 0"),
        (concatenated, "interleaved"),
        (swapped, "row 0"),
        (exponent_i_over_d, "2i / d_model"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_sinusoidal(wrong)
    with pytest.raises(AssertionError, match="shape"):
        ex.check_sinusoidal(lambda n, d: positions(n, d).T)
    with pytest.raises(AssertionError, match="torch.Tensor"):
        ex.check_sinusoidal(lambda n, d: positions(n, d).tolist())


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize(
    "checker", [ex.check_sinusoidal, ex.check_causal_mask, ex.check_prenorm_block]
)
def test_a_stub_fails_with_a_hint_and_a_non_function_is_refused(checker):
    with pytest.raises(AssertionError, match="fill in the function body first"):
        checker(stub)
    with pytest.raises(TypeError, match="fn"):
        checker("not a function")


def test_check_causal_mask():
    def right(n):
        return torch.ones(n, n, dtype=torch.bool).triu(1)

    assert ex.check_causal_mask(right).startswith("Correct")
    for wrong, hint in (
        (lambda n: ~right(n), "polarity"),
        (lambda n: right(n).T, "row i is query i"),
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(0), "diagonal"),
        (lambda n: right(n).int(), "bool"),
        (lambda n: torch.zeros(n, n, dtype=torch.bool), "above the diagonal"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_causal_mask(wrong)


def prenorm(layer, x):
    h = x + layer.attn(layer.norms[0](x))
    return h + layer.mlp(layer.norms[1](h))


def test_check_prenorm_block():
    assert ex.check_prenorm_block(prenorm).startswith("Correct")

    def postnorm(layer, x):
        h = layer.norms[0](x + layer.attn(x))
        return layer.norms[1](h + layer.mlp(h))

    def no_residual(layer, x):
        return layer.mlp(layer.norms[1](layer.attn(layer.norms[0](x))))

    def norms_swapped(layer, x):
        h = x + layer.attn(layer.norms[1](x))
        return h + layer.mlp(layer.norms[0](h))

    def scaled(layer, x):  # an arbitrary wrong answer of the right shape
        return prenorm(layer, x) * (1 + 1 / math.pi)

    for wrong, hint in (
        (postnorm, "post-norm"),
        (no_residual, "residual"),
        (norms_swapped, "norms\\[0\\] belongs to attention"),
        (scaled, "two residual steps"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_prenorm_block(wrong)
    with pytest.raises(AssertionError, match="shape"):
        ex.check_prenorm_block(lambda layer, x: prenorm(layer, x)[:, :1])
