"""The chapter-4 checkers accept the reference answers and reject wrong ones."""

import pytest
import torch

from multihead import exercises as ex


def test_check_post_mix():
    assert ex.check_post_mix(lambda p, P: torch.einsum("bjqk,jm->bmqk", p, P)).startswith("Correct")
    with pytest.raises(AssertionError, match="index"):
        ex.check_post_mix(
            lambda p, P: torch.einsum("bjqk,mj->bmqk", p, P) if P.shape[0] == P.shape[1] else None
        )
    with pytest.raises(AssertionError, match="shape"):
        ex.check_post_mix(lambda p, P: p[:, :1])


def test_check_invisible_mixing():
    def permutation(h):
        perm = torch.eye(h)[torch.roll(torch.arange(h), 1)]
        return perm, perm.T

    assert ex.check_invisible_mixing(permutation).startswith("Correct")
    with pytest.raises(AssertionError, match="identity"):
        ex.check_invisible_mixing(lambda h: (torch.eye(h), torch.eye(h)))
    with pytest.raises(AssertionError, match="changed"):
        ex.check_invisible_mixing(lambda h: permutation(h)[:1] * 2)
    with pytest.raises(AssertionError, match="changed"):
        ex.check_invisible_mixing(lambda h: (permutation(h)[0], torch.eye(h)))


def test_check_talking_heads_flops():
    assert ex.check_talking_heads_flops(lambda h, n: 4 * n * n * h * h).startswith("Correct")
    with pytest.raises(AssertionError, match="expected"):
        ex.check_talking_heads_flops(lambda h, n: 2 * n * n * h * h)
