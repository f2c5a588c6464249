"""Hook points and the one intervention API, in the style of TransformerLens.

A ``HookPoint`` is an identity module: a named place (its module path, e.g.
``"encoder.layers.0.attn.pattern"``) where a tensor can be read or replaced. Everything that
looks inside a model or changes what it computes goes through the functions below:

* ``run_with_cache(model, *inputs)`` records hook points;
* ``run_with_hooks(model, *inputs, fwd_hooks=[(name, fn)], bwd_hooks=[...])`` runs once
  with hooks; ``hooks(model, ...)`` keeps them for the body of a ``with`` block and
  ``add_hooks`` until ``.remove()`` (gates and DropHead, which live through training);
* ``stack_layers(cache, "layers.{}.attn.pattern")`` stacks one hook point over layers (and
  ``stack_layers(values)`` a ``{module path: (heads,)}`` dict).

A hook is ``fn(tensor, name) -> tensor or None``: returning a tensor replaces the
activation (forward) or the gradient (backward). ``name`` in ``(name, fn)`` is a module path
or a predicate on paths.

An attention module computes its ``scores`` and ``pattern`` only on its explicit path (a
fused kernel never stores them): such hook points have ``needs_materialize = True``. The
module takes that path while its switch ``materialize`` is True or ``explicit_requests > 0``;
the functions here count one request per live handle, so hooks can be added and removed in
any order. A torch hook registered by hand on such a point would be skipped on the fused
path, so the point refuses it and names these functions instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

Hook = Callable[[Tensor, str], Tensor | None]
NameFilter = str | Callable[[str], bool]


class HookPoint(nn.Identity):
    """An identity module: a named place where hooks read or replace a tensor.

    ``needs_materialize`` marks a point that exists only on its owner's explicit path; its
    owner (the parent module) has the switch ``materialize`` and the count
    ``explicit_requests``. Torch hooks registered on such a point directly raise a
    ``ValueError``: attach them with ``add_hooks``, ``hooks`` or ``run_with_hooks``.
    """

    def __init__(self, *, needs_materialize: bool = False) -> None:
        super().__init__()
        self.needs_materialize = needs_materialize

    def _refuse_direct(self, method: str) -> None:
        if self.needs_materialize:
            raise ValueError(
                f"{method} on this hook point would be skipped silently whenever its attention "
                "module takes the fused kernel, which never computes it. Use multihead's "
                "add_hooks / hooks / run_with_hooks (or run_with_cache to read it): they keep "
                "the explicit path on while the hook lives (the module's materialize = True "
                "keeps it on for good)"
            )

    def register_forward_hook(self, hook, *args, **kwargs):
        """As ``nn.Module.register_forward_hook``; refused if ``needs_materialize``."""
        self._refuse_direct("register_forward_hook")
        return super().register_forward_hook(hook, *args, **kwargs)

    def register_forward_pre_hook(self, hook, *args, **kwargs):
        """As ``nn.Module.register_forward_pre_hook``; refused if ``needs_materialize``."""
        self._refuse_direct("register_forward_pre_hook")
        return super().register_forward_pre_hook(hook, *args, **kwargs)

    def register_full_backward_hook(self, hook, *args, **kwargs):
        """As ``nn.Module.register_full_backward_hook``; refused if ``needs_materialize``."""
        self._refuse_direct("register_full_backward_hook")
        return super().register_full_backward_hook(hook, *args, **kwargs)

    def _attach(self, hook):
        """Register a forward hook for this module's functions, which count the request."""
        return nn.Module.register_forward_hook(self, hook)


def _check_model(model: object) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


def hook_points(model: nn.Module, names: NameFilter | None = None) -> dict[str, HookPoint]:
    """The hook points of ``model`` whose path is ``names`` (or passes it, if callable).

    Shapes: none.
    """
    _check_model(model)
    if names is not None and not (isinstance(names, str) or callable(names)):
        raise TypeError("names must be a module path or a callable taking a path -> bool")
    found = {
        path: m
        for path, m in model.named_modules()
        if isinstance(m, HookPoint)
        and (names is None or (names == path if isinstance(names, str) else names(path)))
    }
    if isinstance(names, str) and not found:
        raise ValueError(f"{names!r} is not a hook point of the model (see hook_points(model))")
    return found


def _owners(model: nn.Module, paths: Iterable[str]) -> list[nn.Module]:
    """The modules whose explicit path the hook points at ``paths`` need."""
    points = dict(model.named_modules())
    owners = []
    for path in paths:
        if getattr(points[path], "needs_materialize", False):
            owner = model.get_submodule(path.rpartition(".")[0])
            if owner not in owners:
                owners.append(owner)
    return owners


def _request(owners: list[nn.Module], step: int) -> None:
    """Count (``step=1``) or withdraw (``step=-1``) one request for each owner's explicit path."""
    for owner in owners:
        owner.explicit_requests += step


class HookHandles:
    """Hooks added by ``add_hooks``; ``remove()`` detaches them and withdraws their request
    for the explicit path (other live handles keep theirs)."""

    def __init__(self, handles: list, owners: list[nn.Module]) -> None:
        self._handles, self._owners = handles, owners

    def remove(self) -> None:
        """Detach every hook (safe to call twice). Shapes: none."""
        for handle in self._handles:
            handle.remove()
        _request(self._owners, -1)
        self._handles, self._owners = [], []


def add_hooks(
    model: nn.Module,
    fwd_hooks: Iterable[tuple[NameFilter, Hook]] = (),
    bwd_hooks: Iterable[tuple[NameFilter, Hook]] = (),
) -> HookHandles:
    """Attach forward hooks (on the activation) and backward hooks (on its gradient) to the
    hook points they name, until ``.remove()``.

    Shapes: as each hook point documents.
    """
    _check_model(model)
    handles, paths = [], []
    for kind, pairs in (("fwd", fwd_hooks), ("bwd", bwd_hooks)):
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2 and callable(pair[1])):
                raise TypeError(f"{kind}_hooks must hold (name, fn) pairs with fn(tensor, name)")
            names, fn = pair
            for path, point in hook_points(model, names).items():
                handles.append(point._attach(_wrap(fn, path, kind)))
                paths.append(path)
    owners = _owners(model, paths)
    _request(owners, 1)
    return HookHandles(handles, owners)


def _wrap(fn: Hook, path: str, kind: str):
    if kind == "fwd":

        def forward_hook(_module: nn.Module, _args: object, output: Tensor):
            return fn(output, path)

        return forward_hook

    def backward_via_tensor(_module: nn.Module, _args: object, output: Tensor) -> None:
        if output.requires_grad:
            output.register_hook(lambda grad: fn(grad, path))

    return backward_via_tensor


@contextmanager
def hooks(
    model: nn.Module,
    fwd_hooks: Iterable[tuple[NameFilter, Hook]] = (),
    bwd_hooks: Iterable[tuple[NameFilter, Hook]] = (),
) -> Iterator[nn.Module]:
    """``add_hooks`` for the body of a ``with`` block. Shapes: none."""
    handles = add_hooks(model, fwd_hooks, bwd_hooks)
    try:
        yield model
    finally:
        handles.remove()


def run_with_hooks(
    model: nn.Module,
    *inputs: object,
    fwd_hooks: Iterable[tuple[NameFilter, Hook]] = (),
    bwd_hooks: Iterable[tuple[NameFilter, Hook]] = (),
    **kwargs: object,
) -> object:
    """Run ``model(*inputs, **kwargs)`` once with the hooks attached; returns its output.
    Backward hooks fire when the caller later calls ``backward`` on that output.

    Shapes: as ``model``'s forward.
    """
    with hooks(model, fwd_hooks, bwd_hooks):
        return model(*inputs, **kwargs)


def run_with_cache(
    model: nn.Module,
    *inputs: object,
    names_filter: NameFilter | list[str] | tuple[str, ...] | None = None,
    **kwargs: object,
) -> tuple[object, dict[str, Tensor]]:
    """Run ``model(*inputs, **kwargs)`` and record every hook point it passes through.

    The cache maps module paths to detached tensors, e.g. ``"encoder.layers.0.attn.pattern"``
    of shape ``(batch, heads, query, key)``. ``names_filter`` keeps only some paths: one
    path, a list of paths, or a predicate on paths (and lets the layers whose pattern is not
    recorded keep their fused path).

    Shapes: as ``model``'s forward; cache values as documented at each hook point.
    """
    if names_filter is None:
        names: list[NameFilter] = [lambda _path: True]
    elif isinstance(names_filter, str) or callable(names_filter):
        names = [names_filter]
    elif isinstance(names_filter, (list, tuple)) and all(isinstance(n, str) for n in names_filter):
        names = list(names_filter)
    else:
        raise TypeError(
            "names_filter must be a module path, a list of module paths, or a callable taking "
            f"a path and returning bool; got {names_filter!r}"
        )
    cache: dict[str, Tensor] = {}

    def record(tensor: Tensor, name: str) -> None:
        cache[name] = tensor.detach()

    output = run_with_hooks(model, *inputs, fwd_hooks=[(n, record) for n in names], **kwargs)
    return output, cache


def stack_layers(values: dict[str, Tensor], template: str = "encoder.layers.{}.attn") -> Tensor:
    """Stack ``values[template.format(i)]`` over the layers ``i = 0, 1, ...``: a cache of
    ``run_with_cache`` (``stack_layers(cache, "encoder.layers.{}.attn.pattern")``) or a
    ``{module path: (heads,)}`` dict such as gradient norms or importances (the default
    template takes each encoder layer's attention module). Every layer from 0 up must be
    there; a gap is an error.

    Shapes: n tensors of shape S -> (n, *S).
    """
    if not isinstance(values, dict):
        raise TypeError(
            f"values must be a dict {{path: tensor}} (a cache), got {type(values).__name__}"
        )
    if not isinstance(template, str) or template.count("{}") != 1:
        raise ValueError(f"template={template!r} must contain '{{}}' where the layer index goes")
    before, after = template.split("{}")
    path = re.compile(re.escape(before) + r"(0|[1-9][0-9]*)" + re.escape(after))
    found = {int(m.group(1)): v for key, v in values.items() if (m := path.fullmatch(key))}
    if not found:
        raise ValueError(
            f"values has no {template.format(0)!r}; record it first, or pass the template of "
            "the paths it holds"
        )
    if sorted(found) != list(range(len(found))):
        raise ValueError(f"values holds layers {sorted(found)} of {template!r}, not 0 up to n - 1")
    return torch.stack([found[i] for i in range(len(found))])
