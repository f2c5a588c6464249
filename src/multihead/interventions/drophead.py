"""DropHead (Zhou et al. 2020): the exact moments of its per-head gates, the noise it adds
to a layer's output, and the constant and V-shaped schedules of the drop rate.

The gate itself lives in ``MultiHeadAttention`` (option ``drophead``): in training, each
head of each example is kept with probability ``1 - p``, the kept heads are multiplied by
``h / K`` (``K`` = number kept) and, if all were dropped, one random head is kept with
factor ``h``. This module holds what the DropHead chapter derives about that rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from multihead._checks import check_choice, check_positive_int, check_probability
from multihead.core.attention import MultiHeadAttention
from multihead.core.model import attention_modules

SCHEDULES = ("constant", "v")


def gate_moments(n_heads: int, p: float) -> dict[str, float]:
    """Exact moments of one DropHead gate ``g_i`` (``h / K`` if kept, else 0).

    ``mean`` is 1 (unbiased), ``sum`` is the sum of all gates (always ``h``),
    ``variance`` is ``h * E[1 / max(K, 1)] - 1`` with ``K ~ Binomial(h, 1 - p)``, and
    ``covariance`` (between two different gates) is ``-variance / (h - 1)``.
    ``dropout_variance`` is the variance ``p / (1 - p)`` of the independent rule
    ``xi / (1 - p)``, for comparison.

    Shapes: none.
    """
    h = check_positive_int("n_heads", n_heads)
    p = check_probability("p", p)
    inv_k = sum(math.comb(h, k) * (1 - p) ** k * p ** (h - k) / max(k, 1) for k in range(h + 1))
    variance = h * inv_k - 1.0
    return {
        "mean": 1.0,
        "sum": float(h),
        "variance": variance,
        "covariance": -variance / (h - 1) if h > 1 else 0.0,
        "dropout_variance": p / (1 - p),
    }


def head_outputs(attn: MultiHeadAttention, z: Tensor) -> Tensor:
    """What each head writes into the residual stream: ``z_i W_O^i`` (masks applied).

    Shapes: z (batch, heads, seq, d_value) -> (batch, heads, seq, d_model).
    """
    if not isinstance(attn, MultiHeadAttention):
        raise TypeError(f"attn must be a MultiHeadAttention, got {type(attn).__name__}")
    if not isinstance(z, Tensor) or z.ndim != 4 or z.shape[1] != attn.n_heads:
        got = tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__
        raise ValueError(
            f"z must have shape (batch, {attn.n_heads}, seq, {attn.d_value}) "
            f"(the module's z hook), got {got}"
        )
    W_O = attn.W_O * attn.head_mask[:, None, None]  # (heads, d_value, d_model)
    return torch.einsum("bhsv,hvd->bhsd", z.to(W_O.dtype), W_O)


def injected_variance(outputs: Tensor, p: float) -> Tensor:
    """The variance DropHead adds to a layer's output, per position (summed over features):
    ``Var(g) * h / (h - 1) * sum_i |o_i - mean_j o_j|^2``. Zero when all heads agree.

    Shapes: outputs (batch, heads, seq, d_model) -> (batch, seq).
    """
    if not isinstance(outputs, Tensor) or outputs.ndim != 4:
        got = tuple(outputs.shape) if isinstance(outputs, Tensor) else type(outputs).__name__
        raise ValueError(f"outputs must have shape (batch, heads, seq, d_model), got {got}")
    h = outputs.shape[1]
    if h < 2:
        raise ValueError("outputs must hold at least 2 heads (one head has no spread)")
    v = gate_moments(h, p)["variance"]
    spread = (outputs - outputs.mean(dim=1, keepdim=True)).pow(2).sum(dim=(1, 3))  # (b, s)
    return v * h / (h - 1) * spread


def drophead_rate(step: int, total: int, p: float, schedule: str = "constant", turn: int = 0):
    """The drop rate at ``step`` (0-based) of ``total`` steps.

    ``"constant"``: ``p`` throughout. ``"v"``: the V shape of Zhou et al. (2020): ``p`` at
    step 0, falling linearly to 0 at step ``turn``, then rising linearly back to ``p`` at
    the last step.

    Shapes: none.
    """
    check_choice("schedule", schedule, SCHEDULES)
    p = check_probability("p", p)
    total = check_positive_int("total", total)
    for name, value in (("step", step), ("turn", turn)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < total:
            raise ValueError(f"{name}={value!r} must be an int in [0, total={total})")
    if schedule == "constant":
        return p
    if step < turn:
        return p * (1 - step / turn)
    rest = total - 1 - turn
    return p * (step - turn) / rest if rest else p


def set_drophead(model: nn.Module, p: float) -> None:
    """Set the DropHead rate of every attention module of ``model``. Shapes: none."""
    p = check_probability("p", p)
    modules = attention_modules(model) if isinstance(model, nn.Module) else []
    if not modules:
        raise ValueError("model must be a torch.nn.Module with MultiHeadAttention modules")
    for _, attn in modules:
        attn.drophead = p


def drophead_schedule(
    p: float, total: int, schedule: str = "constant", turn: int = 0
) -> Callable[[nn.Module, int], None]:
    """An ``on_step(model, step)`` callback for ``multihead.core.train.train`` that sets the
    rate of ``drophead_rate`` before each step.

    Shapes: none.
    """
    drophead_rate(0, total, p, schedule, turn)  # validate once, up front

    def on_step(model: nn.Module, step: int) -> None:
        set_drophead(model, drophead_rate(step, total, p, schedule, turn))

    return on_step
