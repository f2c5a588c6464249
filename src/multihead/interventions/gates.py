"""Hard Concrete gates (Louizos et al. 2018) on attention heads, and the expected-L0 penalty.

A gate is a random variable on [0, 1] with point masses at 0 and 1. With ``u ~ U(0, 1)``:

    s = sigmoid((log u - log(1 - u) + log_alpha) / beta)      (the binary Concrete)
    g = min(1, max(0, gamma + (zeta - gamma) s))               (stretched, then clipped)

With ``gamma < 0 < 1 < zeta`` the stretch pushes part of the mass past 0 and 1, and the clip
turns it into exact zeros and ones, while inside (0, 1) ``g`` is a smooth function of
``log_alpha`` (the reparameterisation trick). ``P(g > 0)`` has a closed form, so the expected
number of open gates, the L0 penalty, is differentiable.

Gates act on a model through the hook API (``attach_gates``): a forward hook on each gated
module's ``z`` multiplies every head's output by its gate, on top of the module's
``head_mask``, so no model code changes, and ``HeadGates.remove`` detaches the hooks.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from multihead._checks import check_positive_int
from multihead.core.hooks import add_hooks
from multihead.core.model import attention_modules
from multihead.core.progress import progress as progress_bar

BETA, GAMMA, ZETA = 2.0 / 3.0, -0.1, 1.1


def check_stretch(beta: float, gamma: float, zeta: float) -> None:
    """Raise a clear ``ValueError`` unless ``beta > 0``, ``gamma < 0`` and ``zeta > 1``."""
    for name, value in (("beta", beta), ("gamma", gamma), ("zeta", zeta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if beta <= 0:
        raise ValueError(f"beta={beta} must be > 0 (the temperature; 2/3 is usual)")
    if gamma >= 0:
        raise ValueError(f"gamma={gamma} must be < 0, or the gate can never be exactly 0")
    if zeta <= 1:
        raise ValueError(f"zeta={zeta} must be > 1, or the gate can never be exactly 1")


def hard_concrete(
    log_alpha: Tensor, u: Tensor, beta: float = BETA, gamma: float = GAMMA, zeta: float = ZETA
) -> Tensor:
    """Hard Concrete samples from uniforms ``u`` in (0, 1): differentiable in ``log_alpha``.

    Shapes: log_alpha (...), u broadcastable to it -> gates of the broadcast shape in [0, 1].
    """
    check_stretch(beta, gamma, zeta)
    logistic = torch.log(u) - torch.log1p(-u)  # a standard logistic variable
    s = torch.sigmoid((logistic + log_alpha) / beta)
    return (gamma + (zeta - gamma) * s).clamp(0.0, 1.0)


def prob_zero(
    log_alpha: Tensor, beta: float = BETA, gamma: float = GAMMA, zeta: float = ZETA
) -> Tensor:
    """P(g = 0) = sigmoid(beta log(-gamma / zeta) - log_alpha).

    Shapes: (...) -> (...).
    """
    check_stretch(beta, gamma, zeta)
    return torch.sigmoid(beta * math.log(-gamma / zeta) - log_alpha)


def prob_one(
    log_alpha: Tensor, beta: float = BETA, gamma: float = GAMMA, zeta: float = ZETA
) -> Tensor:
    """P(g = 1) = sigmoid(log_alpha - beta log((1 - gamma) / (zeta - 1))).

    Shapes: (...) -> (...).
    """
    check_stretch(beta, gamma, zeta)
    return torch.sigmoid(log_alpha - beta * math.log((1 - gamma) / (zeta - 1)))


def expected_l0(
    log_alpha: Tensor, beta: float = BETA, gamma: float = GAMMA, zeta: float = ZETA
) -> Tensor:
    """The expected number of non-zero gates: sum_i sigmoid(log_alpha_i - beta log(-gamma/zeta)).

    Shapes: (...) -> scalar.
    """
    check_stretch(beta, gamma, zeta)
    return torch.sigmoid(log_alpha - beta * math.log(-gamma / zeta)).sum()


def deterministic_gate(
    log_alpha: Tensor, beta: float = BETA, gamma: float = GAMMA, zeta: float = ZETA
) -> Tensor:
    """The test-time gate: 1 where P(g = 1) >= P(g = 0), else 0 (the more likely end wins).

    For the symmetric stretch gamma = -(zeta - 1) this is simply ``log_alpha >= 0``.

    Shapes: (...) -> (...) of 0.0 / 1.0.
    """
    return (prob_one(log_alpha, beta, gamma, zeta) >= prob_zero(log_alpha, beta, gamma, zeta)).to(
        log_alpha.dtype
    )


class HardConcreteGate(nn.Module):
    """``n_gates`` independent Hard Concrete gates with learnable ``log_alpha``.

    In training mode ``forward`` draws one sample per gate; in eval mode it returns the
    deterministic 0/1 gate (``deterministic_gate``). ``init_log_alpha`` (default 3.0, our
    choice) starts the gates open: the eval gate is 1 and P(g = 0) is about 0.01.

    Shapes: forward() -> (n_gates,).
    """

    def __init__(
        self,
        n_gates: int,
        *,
        beta: float = BETA,
        gamma: float = GAMMA,
        zeta: float = ZETA,
        init_log_alpha: float = 3.0,
    ) -> None:
        super().__init__()
        check_positive_int("n_gates", n_gates)
        check_stretch(beta, gamma, zeta)
        if isinstance(init_log_alpha, bool) or not isinstance(init_log_alpha, (int, float)):
            raise TypeError(f"init_log_alpha must be a float, got {type(init_log_alpha).__name__}")
        self.beta, self.gamma, self.zeta = float(beta), float(gamma), float(zeta)
        self.log_alpha = nn.Parameter(torch.full((n_gates,), float(init_log_alpha)))

    def _stretch(self) -> tuple[float, float, float]:
        return self.beta, self.gamma, self.zeta

    def forward(self) -> Tensor:
        if not self.training:
            return deterministic_gate(self.log_alpha.detach(), *self._stretch())
        # Keep u away from 0 and 1 so that the logistic transform stays finite.
        u = torch.rand_like(self.log_alpha).clamp(1e-6, 1 - 1e-6)
        return hard_concrete(self.log_alpha, u, *self._stretch())

    def prob_zero(self) -> Tensor:
        """P(g = 0) of each gate. Shapes: -> (n_gates,)."""
        return prob_zero(self.log_alpha, *self._stretch())

    def expected_l0(self) -> Tensor:
        """The expected number of open gates (differentiable). Shapes: -> scalar."""
        return expected_l0(self.log_alpha, *self._stretch())

    def extra_repr(self) -> str:
        n = self.log_alpha.numel()
        return f"n_gates={n}, beta={self.beta:.3g}, stretch=({self.gamma}, {self.zeta})"


class HeadGates(nn.Module):
    """One ``HardConcreteGate`` per attention module, wired into a model by forward hooks on
    each gated module's ``z`` hook point.

    Each head's output is multiplied by its gate (and, as always, by the module's
    ``head_mask``, the *base* mask); the gate samples while the attention module is in
    training mode and is 0/1 in eval mode. ``remove()`` detaches the hooks.

    Shapes: masks() -> {path: (heads,)}.
    """

    def __init__(self, model: nn.Module, names: list[str] | None = None, **gate_kwargs) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        modules = dict(attention_modules(model))
        names = list(modules) if names is None else list(names)
        unknown = [n for n in names if n not in modules]
        if unknown or not names:
            raise ValueError(
                f"names must list attention modules of model; unknown: {unknown}, "
                f"known: {list(modules)}"
            )
        self.names = names
        # ModuleDict keys may not contain dots.
        self.gates = nn.ModuleDict(
            {
                n.replace(".", "/"): HardConcreteGate(modules[n].n_heads, **gate_kwargs)
                for n in names
            }
        )
        self._modules_ref = {n: modules[n] for n in names}
        self.to(next(model.parameters()).device)
        points = {f"{n}.z": n for n in names}
        self._handles = add_hooks(model, [(lambda path: path in points, self._hook(points))])

    def gate(self, name: str) -> HardConcreteGate:
        """The gate of one attention module. Shapes: none."""
        return self.gates[name.replace(".", "/")]

    def _hook(self, points: dict[str, str]):
        def hook(z: Tensor, path: str) -> Tensor:
            name = points[path]
            gate = self.gate(name)
            gate.train(self._modules_ref[name].training)
            return z * gate()[:, None, None]  # (batch, heads, seq, d_value) times (heads,)

        return hook

    def expected_l0(self) -> Tensor:
        """Expected number of open heads over all gated modules. Shapes: -> scalar."""
        return sum(g.expected_l0() for g in self.gates.values())

    @torch.no_grad()
    def masks(self) -> dict[str, Tensor]:
        """The deterministic (test-time) gates times the base masks. Shapes: {path: (heads,)}."""
        return {
            n: (self._modules_ref[n].head_mask.cpu() * self.gate(n).eval()().cpu()).float()
            for n in self.names
        }

    def remove(self) -> None:
        """Detach the hooks (the modules' own head masks were never changed)."""
        self._handles.remove()


def attach_gates(model: nn.Module, names: list[str] | None = None, **gate_kwargs) -> HeadGates:
    """Gate every attention module of ``model`` (or those in ``names``); see ``HeadGates``.

    Train ``model.parameters()`` together with the returned gates' parameters and add
    ``lam * gates.expected_l0()`` to the loss; call ``gates.remove()`` when done.

    Shapes: none.
    """
    return HeadGates(model, names, **gate_kwargs)


@dataclass
class GatedRun:
    """What ``fine_tune_with_gates`` returns: the test-time masks (1 = kept) and, per step,
    the task loss and the expected number of open heads.

    Shapes: masks {path: (heads,)}; task_loss and expected_heads lists of length steps.
    """

    masks: dict[str, Tensor]
    task_loss: list[float] = field(default_factory=list)
    expected_heads: list[float] = field(default_factory=list)
    log_alpha: dict[str, Tensor] = field(default_factory=dict)


def fine_tune_with_gates(
    model: nn.Module,
    sample: Callable[[int, torch.Generator], tuple[Tensor, ...]],
    loss_fn: Callable[[nn.Module, tuple[Tensor, ...]], Tensor],
    *,
    lam: float,
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-3,
    gate_lr: float = 0.05,
    seed: int = 0,
    progress: bool = True,
    **gate_kwargs: float,
) -> GatedRun:
    """Fine-tune ``model`` in place with a gate on every head and the loss
    ``loss_fn(model, batch) + lam * expected_l0``, as Voita et al. do from a converged model.

    Model weights (Adam, ``lr``) and gates (Adam, ``gate_lr``) train together; the gates are
    removed at the end and their test-time values returned as masks (apply them with
    ``ablation.head_masks`` or ``pruning.prune_model``).

    Shapes: sample(batch_size, generator) -> batch; -> GatedRun.
    """
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or lam < 0:
        raise ValueError(f"lam={lam!r} must be a number >= 0 (the weight of the L0 penalty)")
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    gates = attach_gates(model, **gate_kwargs)
    dev = next(model.parameters()).device
    opt = torch.optim.Adam(
        [
            {"params": list(model.parameters()), "lr": lr},
            {"params": gates.parameters(), "lr": gate_lr},
        ]
    )
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the gates' noise
    run = GatedRun(masks={})
    try:
        model.train()
        for _ in progress_bar(range(steps), desc=f"gates, lambda={lam:g}", disable=not progress):
            batch = tuple(t.to(dev) for t in sample(batch_size, generator))
            task = loss_fn(model, batch)
            l0 = gates.expected_l0()
            loss = task + lam * l0
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            run.task_loss.append(task.item())
            run.expected_heads.append(l0.item())
    finally:
        model.eval()
        run.masks = gates.masks()
        run.log_alpha = {n: gates.gate(n).log_alpha.detach().cpu().clone() for n in gates.names}
        gates.remove()
    return run


def gated_copy(model: nn.Module, sample, loss_fn, **kwargs) -> tuple[nn.Module, GatedRun]:
    """``fine_tune_with_gates(copy, sample, loss_fn, **kwargs)`` on a copy of ``model``: the
    tuned copy and its run; ``model`` is unchanged. A function of the package, so that
    ``runtime.side_by_side`` can run a sweep of them in several processes.

    Shapes: -> (model, GatedRun).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    tuned = copy.deepcopy(model)
    return tuned, fine_tune_with_gates(tuned, sample, loss_fn, **kwargs)
