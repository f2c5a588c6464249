"""Fitting attention patterns: distances between column-stochastic matrices, and a fitter.

A *pattern model* is any differentiable ``pattern_fn(params) -> P`` that returns positive
column-stochastic matrices (column convention of chapter 3: ``P[key, query]``, columns sum
to 1). ``fit_pattern`` finds the parameters whose pattern is closest to a target in mean
column KL divergence. Chapter 3 fits one head of each key size
(``multihead.analysis.lowrank.fit_key_sizes``); other models of attention plug in the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from multihead._checks import check_choice, check_positive_int, check_tensor


def _finite(name: str, x: object, min_ndim: int = 2) -> Tensor:
    return check_tensor(name, x, min_ndim=min_ndim, finite=True)


def check_column_stochastic(name: str, P: object, atol: float = 1e-6) -> Tensor:
    """Return ``P`` if it is square, strictly positive and its columns sum to 1.

    Shapes: P (..., n, n) -> P.
    """
    P = _finite(name, P)
    if P.shape[-1] != P.shape[-2]:
        raise ValueError(f"{name} must be square (..., n, n), got shape {tuple(P.shape)}")
    if not (P > 0).all():
        raise ValueError(
            f"{name} must be strictly positive (softmax never outputs 0); "
            f"its smallest entry is {P.min().item():.3g}"
        )
    err = (P.sum(dim=-2) - 1).abs().max().item()
    if err > atol:
        raise ValueError(
            f"the columns of {name} must sum to 1 (column convention P[key, query]); "
            f"largest deviation {err:.3g}. A row-stochastic pattern needs a transpose"
        )
    return P


# ---------------------------------------------------------------------- fitting
def column_kl(target: Tensor, P: Tensor) -> Tensor:
    """Mean over columns of ``KL(target[:, j] || P[:, j])`` (0 log 0 = 0).

    Shapes: target, P (..., n, n) -> (...).
    """
    if target.shape != P.shape:
        raise ValueError(f"target {tuple(target.shape)} and P {tuple(P.shape)} must match")
    log_ratio = torch.log(target.clamp_min(1e-300)) - torch.log(P.clamp_min(1e-300))
    return torch.where(target > 0, target * log_ratio, 0.0).sum(dim=-2).mean(dim=-1)


def total_variation(target: Tensor, P: Tensor) -> Tensor:
    """Mean over columns of the total-variation distance. Shapes: (..., n, n) -> (...)."""
    return 0.5 * (target - P).abs().sum(dim=-2).mean(dim=-1)


@dataclass
class FitResult:
    """What a fit found: the final pattern, its KL and TV per target, the parameters."""

    P: Tensor
    kl: Tensor
    tv: Tensor
    params: list[Tensor]
    steps: int


def fit_pattern(
    target: Tensor,
    pattern_fn: Callable[[Sequence[Tensor]], Tensor],
    params: Sequence[Tensor],
    *,
    steps: int = 1000,
    method: str = "lbfgs",
    lr: float | None = None,
) -> FitResult:
    """Fit ``pattern_fn(params)`` to ``target`` by minimising the mean column KL.

    The loss is summed over leading batch axes, so a batch of independent problems is
    fitted at once. ``method="lbfgs"`` (default; ``steps`` iterations with a strong-Wolfe
    line search) reaches ~1e-7 where an exact fit exists; ``"adam"`` is the plain
    first-order alternative (``lr`` default 0.05). Any model of attention can be fitted:
    pass a callable that builds its column-stochastic pattern.

    Shapes: target (..., n, n); pattern_fn(params) -> (..., n, n) -> FitResult with
    P (..., n, n), kl and tv (...).
    """
    target = check_column_stochastic("target", target, atol=1e-4)
    check_positive_int("steps", steps)
    check_choice("method", method, ("lbfgs", "adam"))
    if not callable(pattern_fn):
        raise TypeError("pattern_fn must be callable as pattern_fn(params) -> P")
    params = [p.detach().clone().requires_grad_(True) for p in params]

    def loss_fn() -> Tensor:
        return column_kl(target, pattern_fn(params)).sum()

    if method == "lbfgs":
        opt = torch.optim.LBFGS(
            params,
            lr=1.0 if lr is None else lr,
            max_iter=steps,
            history_size=50,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-14,
            tolerance_change=1e-16,
        )

        def closure() -> Tensor:
            opt.zero_grad()
            loss = loss_fn()
            loss.backward()
            return loss

        opt.step(closure)
        done = int(opt.state[opt.param_groups[0]["params"][0]].get("n_iter", steps))
    else:
        opt = torch.optim.Adam(params, lr=0.05 if lr is None else lr)
        for _ in range(steps):
            opt.zero_grad()
            loss_fn().backward()
            opt.step()
        done = steps
    with torch.no_grad():
        P = pattern_fn(params)
        kl, tv = column_kl(target, P), total_variation(target, P)
    return FitResult(P, kl, tv, [p.detach() for p in params], done)


# ----------------------------------------------- mixing heads (talking heads, chapter 4)
MIX_MODES = ("single", "pre", "post")


def mixed_head_pattern(X: Tensor, W_q: Tensor, W_k: Tensor, mix: Tensor, mode: str) -> Tensor:
    """One output pattern built from ``h`` heads, in the column convention of chapter 3.

    Each head has logits ``L_i = (W_k^i X)^T (W_q^i X) / sqrt(d_k)``. ``mode="single"`` uses
    head 0 alone; ``"pre"`` mixes the logits, ``softmax(sum_i mix_i L_i)`` (talking heads
    before the softmax); ``"post"`` mixes the distributions with convex weights,
    ``sum_i softmax(mix)_i softmax(L_i)`` (after the softmax).

    Shapes: X (..., d, n), W_q and W_k (..., h, d_k, d), mix (..., h) -> P (..., n, n),
    P[key, query], columns sum to 1.
    """
    check_choice("mode", mode, MIX_MODES)
    if W_q.shape != W_k.shape or W_q.ndim < 3:
        raise ValueError(
            f"W_q {tuple(W_q.shape)} and W_k {tuple(W_k.shape)} must match (..., h, d_k, d)"
        )
    if mix.shape[-1] != W_q.shape[-3]:
        raise ValueError(f"mix has {mix.shape[-1]} weights for {W_q.shape[-3]} heads")
    Xh = X.unsqueeze(-3)  # (..., 1, d, n): shared by the heads
    logits = (W_k @ Xh).transpose(-2, -1) @ (W_q @ Xh) / math.sqrt(W_q.shape[-2])  # (..., h, n, n)
    if mode == "single":
        return logits[..., 0, :, :].softmax(dim=-2)
    if mode == "pre":
        return (mix[..., :, None, None] * logits).sum(dim=-3).softmax(dim=-2)
    weights = mix.softmax(dim=-1)[..., :, None, None]  # (..., h, 1, 1), convex
    return (weights * logits.softmax(dim=-2)).sum(dim=-3)


def fit_mixed_heads(
    target: Tensor,
    X: Tensor,
    d_key: int,
    n_heads: int,
    mode: str,
    generator: torch.Generator,
    *,
    steps: int = 300,
):
    """Best fit of ``mixed_head_pattern`` to each target (L-BFGS on the column KL).

    Shapes: target (batch, n, n), X (batch, d, n) -> ``FitResult`` with kl (batch,).
    """
    check_positive_int("d_key", d_key)
    check_positive_int("n_heads", n_heads)
    batch, d, _ = X.shape
    shape = (batch, n_heads, d_key, d)
    W_q = torch.randn(shape, generator=generator, dtype=X.dtype) / math.sqrt(d)
    W_k = torch.randn(shape, generator=generator, dtype=X.dtype) / math.sqrt(d)
    mix = torch.ones(batch, n_heads, dtype=X.dtype) / n_heads

    def pattern_fn(params):
        return mixed_head_pattern(X, params[0], params[1], params[2], mode)

    return fit_pattern(target, pattern_fn, [W_q, W_k, mix], steps=steps)
