"""DropHead (Zhou et al. 2020): the gate, the exact moments of its per-head multipliers, the
noise it adds to a layer's output, and the constant and V-shaped schedules of the drop rate.

In training, each head of each example is kept with probability ``1 - p``, the kept heads
are multiplied by ``h / K`` (``K`` = number kept) and, if all were dropped, one random head
is kept with factor ``h``. ``DropHead`` applies this gate to every attention module of a
model through a forward hook on its ``z`` hook point (``multihead.core.hooks``), so the
attention module itself knows nothing of it; in eval mode the hook does nothing.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from multihead._checks import check_choice, check_int, check_positive_int, check_probability
from multihead.core.attention import AttentionLayer
from multihead.core.hooks import HookHandles, add_hooks
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


def head_outputs(attn: AttentionLayer, z: Tensor) -> Tensor:
    """What each head writes into the residual stream: ``z_i W_O^i`` (masks applied).

    Shapes: z (batch, heads, seq, d_value) -> (batch, heads, seq, d_model).
    """
    if not isinstance(attn, AttentionLayer):
        raise TypeError(f"attn must be an attention layer, got {type(attn).__name__}")
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
        check_int(name, value, 0, total)
    if schedule == "constant":
        return p
    if step < turn:
        return p * (1 - step / turn)
    rest = total - 1 - turn
    return p * (step - turn) / rest if rest else p


def drophead_gate(
    batch: int,
    n_heads: int,
    p: float,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """DropHead's per-example, per-head multiplier at rate ``p``: 0 for a dropped head, and
    the kept heads rescaled by ``n_heads / n_kept``; if every head of an example was dropped,
    one of them (at random) is kept with factor ``n_heads``.

    Shapes: -> (batch, heads).
    """
    check_positive_int("batch", batch)
    check_positive_int("n_heads", n_heads)
    p = check_probability("p", p)
    keep = torch.rand(batch, n_heads, generator=generator, device=device) >= p
    # Never drop every head of an example: keep one at random instead.
    empty = ~keep.any(dim=1)
    if empty.any():
        n_empty = int(empty.sum())
        rescue = torch.randint(n_heads, (n_empty,), generator=generator, device=device)
        keep[empty.nonzero().squeeze(1), rescue] = True
    scale = n_heads / keep.sum(dim=1, keepdim=True).to(dtype)  # (batch, 1)
    return keep.to(dtype) * scale


class DropHead:
    """DropHead at rate ``p`` on every attention module of ``model`` (in training mode only),
    through a forward hook on each module's ``z``. Change ``p`` at any time (a schedule);
    ``remove()`` detaches the hooks.

    Shapes: z (batch, heads, seq, d_value) -> the same, each head times its gate.
    """

    def __init__(self, model: nn.Module, p: float) -> None:
        modules = attention_modules(model) if isinstance(model, nn.Module) else []
        if not modules:
            raise ValueError("model must be a torch.nn.Module with attention layers")
        self.p = check_probability("p", p)
        self._owners = {f"{path}.z": attn for path, attn in modules}
        self._handles: HookHandles = add_hooks(model, [(lambda n: n in self._owners, self._gate)])

    def _gate(self, z: Tensor, name: str) -> Tensor | None:
        if not (self._owners[name].training and self.p > 0):
            return None  # keep z as it is
        gate = drophead_gate(z.shape[0], z.shape[1], self.p, device=z.device, dtype=z.dtype)
        return z * gate[:, :, None, None]

    def remove(self) -> None:
        """Detach the hooks. Shapes: none."""
        self._handles.remove()


class DropHeadSchedule:
    """An ``on_step(model, step)`` callback for ``multihead.core.train.train``: on the first
    step it attaches ``DropHead`` to the model, and before every step it sets the rate
    ``drophead_rate(step, total, p, schedule, turn)``. Given another model (the next seed of
    ``train_seeds``), it moves DropHead to that model. ``remove()`` detaches DropHead.

    Shapes: none.
    """

    def __init__(self, p: float, total: int, schedule: str = "constant", turn: int = 0) -> None:
        drophead_rate(0, total, p, schedule, turn)  # validate once, up front
        self.p, self.total, self.schedule, self.turn = p, total, schedule, turn
        self.drophead: DropHead | None = None
        self.model: nn.Module | None = None

    def __call__(self, model: nn.Module, step: int) -> None:
        rate = drophead_rate(step, self.total, self.p, self.schedule, self.turn)
        if self.model is not model:
            self.remove()
            self.drophead, self.model = DropHead(model, rate), model
        self.drophead.p = rate

    def remove(self) -> None:
        """Detach the DropHead hooks, if attached. Shapes: none."""
        if self.drophead is not None:
            self.drophead.remove()
            self.drophead, self.model = None, None


def drophead_schedule(
    p: float, total: int, schedule: str = "constant", turn: int = 0
) -> DropHeadSchedule:
    """DropHead during training at rate ``p`` (``"constant"``) or on the V schedule: pass
    the result as ``on_step`` to ``train``, ``train_seeds`` or ``train_translation_models``.

    Shapes: none.
    """
    return DropHeadSchedule(p, total, schedule, turn)
