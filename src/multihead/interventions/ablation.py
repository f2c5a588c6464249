"""Switching heads off at inference: masks for a whole model, and the layer-then-head drop
grid of the head-diversity and DropHead chapters.

A *mask* assigns every attention module of a model (by its path, as in
``multihead.core.model.attention_modules``) a ``(heads,)`` tensor of ones (kept) and zeros
(silenced). The masks act through each module's ``head_mask``, so no model code changes,
and ``head_masks`` restores the previous masks afterwards.

The drop grid: pick each layer (attention module) with probability
``p``, then, inside a picked layer, silence each head with probability ``q``. ``q = 1``
drops whole layers; ``p = 1`` drops heads uniformly everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from multihead._checks import check_callable, check_number, check_positive_int
from multihead.core.attention import AttentionLayer
from multihead.core.model import attention_modules

Masks = dict[str, Tensor]


def attention_modules_of(model: object) -> dict[str, AttentionLayer]:
    """The attention layers of ``model`` by path (multi-head, grouped-query, latent or
    talking-heads: every head tool works on each), or a clear error if it has none.

    Shapes: none.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    found = dict(attention_modules(model))
    if not found:
        raise ValueError(
            "model has no attention layer (a multihead.core.attention.AttentionLayer): the head "
            "tools work on the course's encoders, encoder-decoders and decoders"
        )
    return found


def full_masks(model: nn.Module, device: torch.device | str | None = None) -> Masks:
    """All-ones masks (every head kept), one per attention module.

    Shapes: -> {path: (heads,)}.
    """
    return {
        name: torch.ones(m.n_heads, device=device)
        for name, m in attention_modules_of(model).items()
    }


def check_masks(model: nn.Module, masks: object, *, binary: bool = False):
    """The attention modules of ``model`` by path, after checking that ``masks`` maps some of
    those paths to ``(heads,)`` tensors (of 0s and 1s, with one 1 at least, if ``binary``).

    Shapes: masks {path: (heads,)}.
    """
    modules = attention_modules_of(model)
    if not isinstance(masks, dict):
        raise TypeError(f"masks must be a dict from module path to tensor, got {type(masks)}")
    for name, mask in masks.items():
        if name not in modules:
            raise ValueError(f"masks has key {name!r}, which is not an attention module of model")
        n = modules[name].n_heads
        if not isinstance(mask, Tensor) or mask.shape != (n,):
            got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
            raise ValueError(f"masks[{name!r}] must be a tensor of shape ({n},), got {got}")
        if binary and not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"masks[{name!r}] must hold only 0 (remove) and 1 (keep)")
        if binary and not bool((mask == 1).any()):
            raise ValueError(
                f"masks[{name!r}] would remove every head of {name}; keep at least one head "
                "per attention module"
            )
    return modules


@contextmanager
def head_masks(model: nn.Module, masks: Masks) -> Iterator[nn.Module]:
    """Run the body with ``masks`` as the modules' head masks; the old masks come back
    afterwards. This is the one way the package changes head masks.

    Modules missing from ``masks`` keep their current mask. A mask may be any weights, and
    may require gradients: it is used as it is (moved to the module's device), so
    ``torch.autograd.grad(loss, mask)`` gives the derivative with respect to each head's
    multiplier ``xi_h``.

    Shapes: masks {path: (heads,)}, 1 = kept.
    """
    modules = check_masks(model, masks)
    saved = {name: m.head_mask for name, m in modules.items()}
    try:
        for name, mask in masks.items():
            buf = saved[name]
            modules[name].head_mask = mask.to(device=buf.device, dtype=buf.dtype)
        yield model
    finally:
        for name, m in modules.items():
            m.head_mask = saved[name]


def differentiable_masks(model: nn.Module) -> Masks:
    """All-ones masks that require gradients, on the model's device, for ``head_masks``.

    Shapes: -> {path: (heads,)}.
    """
    dev = next(model.parameters()).device
    return {n: m.requires_grad_(True) for n, m in full_masks(model, device=dev).items()}


@torch.no_grad()
def leave_one_out(
    model: nn.Module, evaluate: Callable[[nn.Module], dict], paths: Sequence[str]
) -> dict[str, Tensor]:
    """Mask each head of the modules at ``paths`` in turn, alone, and record how every
    score of ``evaluate(model)`` (a dict of floats) changes: masked minus intact. The
    model's masks are restored afterwards.

    Shapes: -> {score key: (len(paths), heads)}.
    """
    modules = attention_modules_of(model)
    check_callable("evaluate", evaluate, "evaluate(model) -> dict of floats")
    paths = list(paths)
    unknown = [p for p in paths if p not in modules]
    if not paths or unknown:
        raise ValueError(f"paths must name attention modules of model; unknown: {unknown}")
    heads = {modules[p].n_heads for p in paths}
    if len(heads) != 1:
        raise ValueError(f"the modules at paths have different head counts {sorted(heads)}")
    n_heads = heads.pop()
    base = evaluate(model)
    change = {key: torch.zeros(len(paths), n_heads) for key in base}
    for i, path in enumerate(paths):
        for h in range(n_heads):
            mask = torch.ones(n_heads)
            mask[h] = 0.0
            with head_masks(model, {path: mask}):
                scores = evaluate(model)
            for key in base:
                change[key][i, h] = scores[key] - base[key]
    return change


def layer_head_drop(uniforms: tuple[Tensor, Masks], p: float, q: float) -> Masks:
    """Masks from pre-drawn uniforms: module ``l`` is picked when ``u_layer[l] < p``;
    head ``h`` of a picked module is silenced when ``u_head[l][h] < q``.

    Drawing the uniforms once and thresholding them at every ``(p, q)`` (common random
    numbers) makes the damage grow monotonically across a grid.

    Shapes: uniforms = (u_layer (modules,), {path: (heads,)}) -> {path: (heads,)}.
    """
    p, q = check_number("p", p, 0, 1), check_number("q", q, 0, 1)
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
    modules = attention_modules_of(model)
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

    The same ``trials`` draws serve every cell, so a higher rate silences a superset of the
    heads and the grid is smooth. It need not be monotone: silencing one more head can lower
    the loss. The model's masks are restored afterwards.

    Shapes: -> (len(ps), len(qs)).
    """
    check_callable("evaluate", evaluate, "evaluate(model) -> float")
    ps = [check_number("ps", p, 0, 1) for p in ps]
    qs = [check_number("qs", q, 0, 1) for q in qs]
    if not ps or not qs:
        raise ValueError("ps and qs must each hold at least one rate")
    check_positive_int("trials", trials)
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
