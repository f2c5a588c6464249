"""Switching heads off at inference: masks for a whole model, and the layer-then-head drop
grid of the head-diversity and DropHead chapters.

A *mask* assigns every attention module of a model (by its path, as in
``multihead.core.model.attention_modules``) a ``(heads,)`` tensor of ones (kept) and zeros
(silenced). The masks act through each module's ``head_mask``, so no model code changes,
and ``head_masks`` restores the previous masks afterwards.

The drop grid follows the source notes: pick each layer (attention module) with probability
``p``, then, inside a picked layer, silence each head with probability ``q``. ``q = 1``
drops whole layers; ``p = 1`` drops heads uniformly everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from multihead.core.attention import MultiHeadAttention
from multihead.core.model import attention_modules

Masks = dict[str, Tensor]


def _modules(model: nn.Module) -> dict[str, MultiHeadAttention]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    found = dict(attention_modules(model))
    if not found:
        raise ValueError("model has no MultiHeadAttention module to mask")
    return found


def full_masks(model: nn.Module) -> Masks:
    """All-ones masks (every head kept), one per attention module.

    Shapes: -> {path: (heads,)}.
    """
    return {name: torch.ones(m.n_heads) for name, m in _modules(model).items()}


@contextmanager
def head_masks(model: nn.Module, masks: Masks) -> Iterator[nn.Module]:
    """Run the body with ``masks`` installed; the old masks come back afterwards.

    Modules missing from ``masks`` keep their current mask.

    Shapes: masks {path: (heads,)} of 0/1 (or any weights).
    """
    modules = _modules(model)
    if not isinstance(masks, dict):
        raise TypeError(f"masks must be a dict from module path to tensor, got {type(masks)}")
    for name, mask in masks.items():
        if name not in modules:
            raise ValueError(f"masks has key {name!r}, which is not an attention module of model")
        if not isinstance(mask, Tensor) or mask.shape != (modules[name].n_heads,):
            got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
            raise ValueError(
                f"masks[{name!r}] must be a tensor of shape ({modules[name].n_heads},), got {got}"
            )
    saved = {name: m.head_mask.clone() for name, m in modules.items()}
    try:
        for name, mask in masks.items():
            buf = modules[name].head_mask
            buf.copy_(mask.to(device=buf.device, dtype=buf.dtype))
        yield model
    finally:
        for name, m in modules.items():
            m.head_mask.copy_(saved[name])


def _check_rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name}={value!r} must be a number in [0, 1]")
    return float(value)


def layer_head_drop(uniforms: tuple[Tensor, Masks], p: float, q: float) -> Masks:
    """Masks from pre-drawn uniforms: module ``l`` is picked when ``u_layer[l] < p``;
    head ``h`` of a picked module is silenced when ``u_head[l][h] < q``.

    Drawing the uniforms once and thresholding them at every ``(p, q)`` (common random
    numbers) makes the damage grow monotonically across a grid.

    Shapes: uniforms = (u_layer (modules,), {path: (heads,)}) -> {path: (heads,)}.
    """
    p, q = _check_rate("p", p), _check_rate("q", q)
    u_layer, u_head = uniforms
    if u_layer.shape != (len(u_head),):
        raise ValueError(
            f"uniforms: u_layer has shape {tuple(u_layer.shape)}, expected "
            f"({len(u_head)},), one number per module"
        )
    masks = {}
    for picked, (name, u) in zip((u_layer < p).tolist(), u_head.items(), strict=True):
        masks[name] = 1.0 - (picked & (u < q)).float()
    return masks


def draw_uniforms(model: nn.Module, generator: torch.Generator) -> tuple[Tensor, Masks]:
    """One uniform per attention module and one per head, for ``layer_head_drop``.

    Shapes: -> (u_layer (modules,), {path: (heads,)}).
    """
    modules = _modules(model)
    u_layer = torch.rand(len(modules), generator=generator)
    u_head = {name: torch.rand(m.n_heads, generator=generator) for name, m in modules.items()}
    return u_layer, u_head


def drop_grid(
    model: nn.Module,
    evaluate: Callable[[nn.Module], float],
    ps: Sequence[float],
    qs: Sequence[float],
    *,
    trials: int = 8,
    seed: int = 0,
) -> Tensor:
    """Mean of ``evaluate(model)`` with layers picked at rate ``p`` and heads silenced at
    rate ``q`` inside picked layers, over ``trials`` random draws per grid cell.

    The same ``trials`` draws serve every cell, so the grid is smooth and monotone in both
    rates. The model's masks are restored afterwards.

    Shapes: -> (len(ps), len(qs)).
    """
    if not callable(evaluate):
        raise TypeError("evaluate must be callable as evaluate(model) -> float")
    ps = [_check_rate("ps", p) for p in ps]
    qs = [_check_rate("qs", q) for q in qs]
    if not ps or not qs:
        raise ValueError("ps and qs must each hold at least one rate")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials <= 0:
        raise ValueError(f"trials={trials!r} must be a positive int")
    generator = torch.Generator().manual_seed(seed)
    draws = [draw_uniforms(model, generator) for _ in range(trials)]
    grid = torch.zeros(len(ps), len(qs))
    was_training = model.training
    model.eval()
    try:
        for i, p in enumerate(ps):
            for j, q in enumerate(qs):
                total = 0.0
                for uniforms in draws:
                    with head_masks(model, layer_head_drop(uniforms, p, q)):
                        total += float(evaluate(model))
                grid[i, j] = total / trials
    finally:
        model.train(was_training)
    return grid
