"""How large each head's gradient is: the test of "upper layers' heads differ less because
their gradients are small".

``head_gradient_norms`` differentiates one loss with respect to every attention module's
per-head parameters and returns, per head, the Euclidean norm of that head's slice of the
gradient (its ``W_Q``, ``W_K``, ``W_V`` and ``W_O`` blocks and its query, key and value
biases). The task's loss comes in as a callable, as everywhere in ``interventions``. The
model's parameters keep their ``.grad``: the gradient is taken with ``torch.autograd.grad``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from multihead._checks import check_callable
from multihead.interventions.ablation import attention_modules_of

PER_HEAD = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")  # first dimension = head


def head_gradient_norms(
    model: nn.Module, loss_fn: Callable[[nn.Module], Tensor]
) -> dict[str, Tensor]:
    """The norm of the gradient of ``loss_fn(model)`` restricted to each head's parameters.

    The shared output bias ``b_O`` belongs to no head and is left out. The model's mode
    (train or eval) is the caller's choice.

    Shapes: -> {path: (heads,)} on the CPU, float64.
    """
    modules = attention_modules_of(model)
    check_callable("loss_fn", loss_fn, "loss_fn(model) -> scalar loss")
    loss = loss_fn(model)
    if not isinstance(loss, Tensor) or loss.numel() != 1 or not loss.requires_grad:
        raise ValueError(
            "loss_fn(model) must return a scalar tensor that depends on the model's weights"
        )
    params = [
        (path, getattr(m, name))
        for path, m in modules.items()
        for name in PER_HEAD
        if getattr(m, name) is not None
    ]
    grads = torch.autograd.grad(loss.reshape(()), [p for _, p in params], allow_unused=True)
    squares = {path: torch.zeros(m.n_heads, dtype=torch.float64) for path, m in modules.items()}
    for (path, _), g in zip(params, grads, strict=True):
        if g is not None:
            squares[path] += g.detach().double().cpu().pow(2).flatten(1).sum(1)
    return {path: s.sqrt() for path, s in squares.items()}
