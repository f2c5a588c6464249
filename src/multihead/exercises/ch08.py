"""Checkers for the exercises of chapter 8: DropHead."""

from __future__ import annotations

from collections.abc import Callable

import torch

from multihead.exercises._common import checker, ok, refuse_reference, require_callable
from multihead.interventions import drophead
from multihead.interventions.drophead import drophead_rate, gate_moments


@checker
def check_drophead_rescale(fn: Callable) -> str:
    """Check ``fn(keep) -> gates``: given which heads of each example are kept (at least one
    per row), return 0 for dropped heads and ``h / K`` for kept ones (``K`` kept in the row).

    Shapes: keep (batch, heads) bool -> (batch, heads) float.
    """
    require_callable("fn", fn)
    gen = torch.Generator().manual_seed(3)
    for batch, h in ((6, 4), (5, 8), (3, 1)):
        keep = torch.rand(batch, h, generator=gen) < 0.6
        keep[:, 0] |= ~keep.any(dim=1)  # at least one head per row
        got = fn(keep.clone())
        if not isinstance(got, torch.Tensor) or got.shape != (batch, h):
            raise AssertionError(f"return a tensor of shape ({batch}, {h}), one gate per head")
        want = keep.float() * h / keep.sum(dim=1, keepdim=True).float()
        if not torch.allclose(got.float(), want, atol=1e-6):
            if torch.allclose(got.float(), keep.float(), atol=1e-6):
                raise AssertionError("the kept heads need rescaling by h / K, not 1")
            raise AssertionError(
                "gates are wrong: a dropped head gets 0, a kept head h / K where K is the "
                "number kept in its own row (sum over the heads dimension)"
            )
        if not torch.allclose(got.float().sum(1), torch.full((batch,), float(h))):
            raise AssertionError("each row of gates must sum to h")
    return ok("kept heads carry h / K, so every row of gates sums to h.")


@checker
def check_gate_variance(fn: Callable) -> str:
    """Check ``fn(h, p) -> Var(g_i)`` for DropHead's ``h / K`` rule with the rescue of one
    head when all are dropped.

    Shapes: none.
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, drophead)
    for h, p in ((1, 0.3), (2, 0.5), (4, 0.3), (8, 0.1), (12, 0.6)):
        got, want = float(fn(h, p)), gate_moments(h, p)["variance"]
        if abs(got - want) > 1e-6:
            hint = ""
            if abs(got - p / (1 - p)) < 1e-6:
                hint = " (that is the variance of xi / (1 - p), the dropout rule)"
            raise AssertionError(
                f"for h={h}, p={p} expected {want:.6f}, got {got:.6f}{hint}; use "
                "Var = h E[1 / max(K, 1)] - 1 with K ~ Binomial(h, 1 - p)"
            )
    return ok("Var(g) = h E[1/max(K,1)] - 1 for every h and p tried.")


@checker
def check_v_schedule(fn: Callable) -> str:
    """Check ``fn(step, total, p, turn) -> rate``: the V-shaped DropHead schedule, ``p`` at
    step 0, 0 at step ``turn``, ``p`` again at the last step ``total - 1``, linear between.

    Shapes: none.
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, drophead)
    for total, p, turn in ((11, 0.2, 5), (100, 0.3, 10), (50, 0.1, 1)):
        for step in sorted({0, turn // 2, turn, (turn + total) // 2, total - 1}):
            got, want = float(fn(step, total, p, turn)), drophead_rate(step, total, p, "v", turn)
            if abs(got - want) > 1e-9:
                raise AssertionError(
                    f"step={step}, total={total}, p={p}, turn={turn}: expected {want:.4f}, "
                    f"got {got:.4f}; the last step is total - 1, not total"
                )
    return ok("the rate falls from p to 0 at the turn and climbs back to p at the end.")
