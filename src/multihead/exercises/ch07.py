"""Checkers for the exercises of chapter 7: head importance and pruning."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from multihead.exercises._common import checker, expect, ok, refuse_reference, require_callable
from multihead.interventions import gates
from multihead.interventions.gates import hard_concrete


@checker
def check_hard_concrete(fn: Callable[..., torch.Tensor]) -> str:
    """Check ``fn(log_alpha, u, beta, gamma, zeta) -> gates``: the Hard Concrete sample
    ``clip(gamma + (zeta - gamma) * sigmoid((log u - log(1 - u) + log_alpha) / beta), 0, 1)``."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, gates)
    gen = torch.Generator().manual_seed(0)
    for beta, gamma, zeta in ((2 / 3, -0.1, 1.1), (0.5, -0.2, 1.05)):
        log_alpha = 2 * torch.randn(50, generator=gen)
        u = torch.rand(50, generator=gen).clamp(1e-4, 1 - 1e-4)
        got = fn(log_alpha, u, beta, gamma, zeta)
        expect(isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}")
        expect(got.shape == u.shape, f"return one gate per u, shape {tuple(u.shape)}")
        want = hard_concrete(log_alpha, u, beta, gamma, zeta)
        if not torch.allclose(got, want, atol=1e-5):
            if got.min() < 0 or got.max() > 1:
                raise AssertionError("gates must lie in [0, 1]: clip after stretching")
            if not bool((got == 0).any() or (got == 1).any()):
                raise AssertionError(
                    "no gate is exactly 0 or 1: stretch s to (gamma, zeta) before clipping"
                )
            raise AssertionError(
                "values differ from the reference: the logistic noise is log u - log(1 - u), "
                "added to log_alpha and divided by beta inside the sigmoid"
            )
    return ok("your Hard Concrete sampler matches multihead.interventions.gates.hard_concrete.")


@checker
def check_expected_l0(fn: Callable[..., torch.Tensor]) -> str:
    """Check ``fn(log_alpha, beta, gamma, zeta) -> scalar``: the expected number of non-zero
    gates, ``sum_i (1 - P(g_i = 0))``."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, gates)  # gates.expected_l0 is the closed form
    gen = torch.Generator().manual_seed(1)
    for beta, gamma, zeta in ((2 / 3, -0.1, 1.1), (1.0, -0.5, 1.5)):
        log_alpha = 3 * torch.randn(8, generator=gen)
        got = fn(log_alpha, beta, gamma, zeta)
        got = float(got)
        want = torch.sigmoid(log_alpha - beta * math.log(-gamma / zeta)).sum().item()
        if abs(got - want) > 1e-4:
            p_open = torch.sigmoid(log_alpha).sum().item()
            if abs(got - p_open) < 1e-4:
                raise AssertionError(
                    "that is sum sigmoid(log_alpha), the unstretched P(s > 0) = 1; the stretch "
                    "moves the threshold: g > 0 iff s > -gamma / (zeta - gamma)"
                )
            raise AssertionError(
                f"expected {want:.4f}, got {got:.4f}; derive P(g = 0) = P(s <= -gamma/(zeta - "
                "gamma)) from the logistic distribution of log u - log(1 - u)"
            )
    return ok("your expected L0 penalty matches the closed form.")


@checker
def check_taylor_importance(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """Check ``fn(z, grad_z) -> (heads,)``: Michel importance from a batch of head outputs
    ``z`` (batch, heads, seq, d_value) and the gradients of each example's own loss with
    respect to them: the mean over examples of ``|sum_{seq, d} z * grad_z|``."""
    require_callable("fn", fn)
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(5, 3, 4, 2, generator=gen)
    g = torch.randn(5, 3, 4, 2, generator=gen)
    got = fn(z, g)
    expect(isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}")
    expect(got.shape == (3,), f"return one number per head, shape (3,); got {tuple(got.shape)}")
    want = (z * g).sum(dim=(2, 3)).abs().mean(0)
    if not torch.allclose(got, want, atol=1e-5):
        if torch.allclose(got, (z * g).sum(dim=(2, 3)).mean(0).abs(), atol=1e-5):
            raise AssertionError(
                "you took the absolute value after averaging: Michel et al. average |.| "
                "over examples, so that gains and losses on different examples do not cancel"
            )
        if torch.allclose(got, (z * g).abs().sum(dim=(2, 3)).mean(0), atol=1e-5):
            raise AssertionError("sum z * grad_z over positions and dimensions first, then |.|")
        raise AssertionError(f"expected {want.tolist()}, got {got.tolist()}")
    return ok("your Taylor importance matches Michel et al.'s definition.")
