"""Activation patching and ablation of heads: which parts of a model carry a behaviour.

*Patching* runs a model on a ``corrupted`` input with one activation replaced by its value on
a ``clean`` input, and measures how much of the clean behaviour comes back:

    recovered = (m_patched - m_corrupted) / (m_clean - m_corrupted)

for a scalar ``metric(logits)`` (a logit difference, the loss on some targets, ...): 1 when the
patched activation alone restores the clean metric, 0 when it changes nothing. ``patch_heads``
patches one head's output at a time, ``patch_set`` a set of heads together (heads that share a
job each recover part of it alone), ``patch_positions`` the residual stream at one layer and
position at a time. *Ablation* (``ablate_heads``) replaces one head's output by its mean over
the batch and positions, or by zero, and reports the metric; ``ablated`` does it for a set of
heads at once, and ``first_order_ablation`` estimates zero ablation of every head from one
backward pass; ``first_order_patching`` estimates every head's patch the same way.

Everything goes through the package's hooks (``run_with_cache``, ``run_with_hooks``). A head's
output is the hook point ``z`` of its attention module, ``(batch, heads, seq, d_head)``, taken
before ``W_O`` and the head mask; this works for ``core.decoder.Decoder`` (paths
``layers.{i}.attn``) and for the encoder models (``encoder.layers.{i}.attn``). Zero ablation
equals masking the head (``ablation.head_masks``). The head axis is 1, as everywhere in the
package (TransformerLens puts it at 2). Where query heads share a key/value head, a head is
a query head: patching or ablating its ``z`` leaves the shared keys and values alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from multihead._checks import check_callable, check_choice, check_int_tensor
from multihead.core.hooks import hook_points, hooks, run_with_cache, run_with_hooks

Metric = Callable[[Tensor], Tensor]


def _layer_paths(model: nn.Module, arg: str, template: object) -> list[str]:
    """``template.format(i)`` for the layers ``i = 0, 1, ...`` that ``model`` has."""
    if not isinstance(template, str) or template.count("{}") != 1:
        raise ValueError(f"{arg}={template!r} must contain '{{}}' where the layer index goes")
    points = hook_points(model)
    paths = []
    while template.format(len(paths)) in points:
        paths.append(template.format(len(paths)))
    if not paths:
        raise ValueError(
            f"{arg}={template!r}: the model has no hook point {template.format(0)!r} (see "
            "core.hooks.hook_points(model) for the paths it has)"
        )
    return paths


def _head_paths(model: nn.Module, layers_path: object, hook: object) -> list[str]:
    """The per-head hook point ``hook`` of every layer's attention at ``layers_path``."""
    if not isinstance(hook, str) or not hook:
        raise TypeError(f"hook must be the name of a hook point such as 'z', got {hook!r}")
    template = f"{layers_path}.{hook}" if isinstance(layers_path, str) else layers_path
    return _layer_paths(model, "layers_path", template)


def _inputs(clean: object, corrupted: object) -> None:
    for name, x in (("clean", clean), ("corrupted", corrupted)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (the model's input), got {type(x)}")
    if clean.shape != corrupted.shape:
        raise ValueError(
            f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} must have one "
            "shape, so that each activation of one run fits the other"
        )


def _value(metric: Metric, logits: object) -> float:
    m = metric(logits)
    if isinstance(m, Tensor) and m.numel() == 1:
        return float(m.detach().reshape(()))
    if isinstance(m, (int, float)) and not isinstance(m, bool):
        return float(m)
    got = f"shape {tuple(m.shape)}" if isinstance(m, Tensor) else type(m).__name__
    raise TypeError(f"metric must return a scalar tensor, got {got}")


def _positions(positions: object, seq: int) -> slice | Tensor:
    if positions is None:
        return slice(None)  # every position
    if not isinstance(positions, Tensor):
        if isinstance(positions, (str, bytes)) or not isinstance(positions, Sequence):
            raise TypeError(f"positions must be a list or tensor of ints, got {positions!r}")
        if not positions:
            raise ValueError("positions is empty: pass None to patch every position")
        positions = torch.tensor(list(positions))
    layout = "(n,) indices into seq"
    return check_int_tensor("positions", positions, ndim=1, lo=0, hi=seq, layout=layout)


@contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no gradients for the body; the model's mode comes back."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _both_runs(model, clean, corrupted, metric, paths) -> tuple[dict, float, float]:
    """The clean run's cache at ``paths``, the corrupted metric and the gap between them."""
    _inputs(clean, corrupted)
    check_callable("metric", metric, "metric(logits) -> scalar tensor")
    logits, cache = run_with_cache(model, clean, names_filter=paths)
    m_clean, m_corrupted = _value(metric, logits), _value(metric, model(corrupted))
    gap = m_clean - m_corrupted
    if not abs(gap) > 1e-6 * max(abs(m_clean), abs(m_corrupted)):  # also catches nan
        raise ValueError(
            f"clean and corrupted give the same metric ({m_clean:.6g} and "
            f"{m_corrupted:.6g}): there is nothing to recover; choose a corrupted input "
            "(or a metric) on which the model behaves differently"
        )
    return cache, m_corrupted, gap


def _recovered(model, clean, corrupted, metric, paths, units, replace, only=None) -> Tensor:
    """Patch each ``(layer, unit)`` of the corrupted run (those in ``only``, if given; the
    others are nan) with ``replace(value, clean value, unit)`` and return the fraction of
    the metric recovered. Shapes: -> (layers, units)."""
    with _evaluating(model):
        cache, m_corrupted, gap = _both_runs(model, clean, corrupted, metric, paths)
        sizes = {units(cache[path]) for path in paths}
        if len(sizes) > 1:
            raise ValueError(f"the layers at {paths} differ in size ({sorted(sizes)})")
        out = torch.zeros(len(paths), sizes.pop())
        if only is not None:
            out.fill_(float("nan"))
        for layer, path in enumerate(paths):
            for unit in range(out.shape[1]):
                if only is not None and (layer, unit) not in only:
                    continue

                def patch(value: Tensor, _name: str, unit=unit, path=path) -> Tensor:
                    return replace(value.clone(), cache[path], unit)

                patched = run_with_hooks(model, corrupted, fwd_hooks=[(path, patch)])
                out[layer, unit] = (_value(metric, patched) - m_corrupted) / gap
    return out


def patch_heads(
    model: nn.Module,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    *,
    layers_path: str = "layers.{}.attn",
    hook: str = "z",
    positions: Sequence[int] | Tensor | None = None,
    heads: Sequence[tuple[int, int]] | None = None,
) -> Tensor:
    """For each head, the fraction of ``metric`` recovered when its output in the corrupted
    run is replaced by its output in the clean run (at ``positions`` only, if given):
    ``(m_patched - m_corrupted) / (m_clean - m_corrupted)``. ``heads``: patch only these
    ``(layer, head)`` pairs (one run each; the other entries are nan), e.g. to check a
    cheaper estimate (``first_order_patching``) on a sample of a large model's heads.

    ``hook`` names a per-head hook point of the module at ``layers_path.format(layer)``,
    shaped ``(batch, heads, seq, d)``: ``z`` (each head's output before ``W_O``) by default.
    ``metric(logits)`` returns a scalar tensor; the two inputs must give different metrics.

    Shapes: clean, corrupted (batch, seq) token ids (any input the model takes, of one
    shape), positions (n,) indices into seq -> (layers, heads).
    """
    paths = _head_paths(model, layers_path, hook)
    _inputs(clean, corrupted)
    where = _positions(positions, clean.shape[1])

    def replace(value: Tensor, clean_value: Tensor, head: int) -> Tensor:
        at = where if isinstance(where, slice) else where.to(value.device)
        value[:, head, at] = clean_value[:, head, at]  # (batch, n, d)
        return value

    only = None if heads is None else _head_pairs(heads, len(paths))
    return _recovered(model, clean, corrupted, metric, paths, lambda z: z.shape[1], replace, only)


def _head_pairs(heads: object, n_layers: int) -> set[tuple[int, int]]:
    def pair(p: object) -> bool:
        ints = isinstance(p, (tuple, list)) and len(p) == 2
        return ints and all(isinstance(i, int) and not isinstance(i, bool) for i in p)

    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence) or not heads:
        raise TypeError(f"heads must be a non-empty list of (layer, head) pairs, got {heads!r}")
    for p in heads:
        if not pair(p):
            raise TypeError(f"heads must hold (layer, head) pairs of ints, got {p!r}")
        if not 0 <= p[0] < n_layers or p[1] < 0:
            raise ValueError(f"heads holds {tuple(p)}; layers run from 0 to {n_layers - 1}")
    return {(p[0], p[1]) for p in heads}


def patch_positions(
    model: nn.Module,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    *,
    hook_template: str = "layers.{}.resid_pre",
) -> Tensor:
    """For each layer and position, the fraction of ``metric`` recovered when the residual
    stream entering that layer (the hook point ``hook_template.format(layer)``, shaped
    ``(batch, seq, d_model)``) is replaced at that position by its clean value.

    Shapes: clean, corrupted (batch, seq) -> (layers, seq).
    """
    paths = _layer_paths(model, "hook_template", hook_template)

    def replace(value: Tensor, clean_value: Tensor, position: int) -> Tensor:
        value[:, position] = clean_value[:, position]  # (batch, d_model)
        return value

    return _recovered(model, clean, corrupted, metric, paths, lambda x: x.shape[1], replace)


def ablate_heads(
    model: nn.Module,
    tokens: Tensor,
    metric: Metric,
    how: str = "mean",
    *,
    layers_path: str = "layers.{}.attn",
    hook: str = "z",
) -> Tensor:
    """``metric`` of the model on ``tokens`` with one head at a time ablated: its output
    (``hook``, ``(batch, heads, seq, d)``) replaced by its mean over the batch and the
    positions (``how="mean"``) or by zero (``how="zero"``). Compare with the intact metric,
    ``metric(model(tokens))``.

    Shapes: tokens (batch, seq) -> (layers, heads).
    """
    check_choice("how", how, ("mean", "zero"))
    if not isinstance(tokens, Tensor):
        raise TypeError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
    check_callable("metric", metric, "metric(logits) -> scalar tensor")
    paths = _head_paths(model, layers_path, hook)
    with _evaluating(model):
        _, cache = run_with_cache(model, tokens, names_filter=paths)
        out = torch.zeros(len(paths), cache[paths[0]].shape[1])
        for layer, path in enumerate(paths):
            mean = cache[path].mean(dim=(0, 2), keepdim=True)  # (1, heads, 1, d)
            for head in range(out.shape[1]):

                def ablate(z: Tensor, _name: str, head=head, mean=mean) -> Tensor:
                    z = z.clone()
                    z[:, head] = mean[:, head] if how == "mean" else 0.0  # (batch, seq, d)
                    return z

                logits = run_with_hooks(model, tokens, fwd_hooks=[(path, ablate)])
                out[layer, head] = _value(metric, logits)
    return out


def head_means(
    model: nn.Module,
    tokens: Tensor,
    *,
    layers_path: str = "layers.{}.attn",
    hook: str = "z",
) -> dict[str, Tensor]:
    """Each head's mean output on ``tokens``, over the batch and the positions: what mean
    ablation puts in its place (``ablated``).

    Shapes: tokens (batch, seq) -> {hook path: (heads, d)}.
    """
    if not isinstance(tokens, Tensor):
        raise TypeError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
    paths = _head_paths(model, layers_path, hook)
    with _evaluating(model):
        _, cache = run_with_cache(model, tokens, names_filter=paths)
    return {path: cache[path].mean(dim=(0, 2)) for path in paths}  # (heads, d) each


def _head_set(model: nn.Module, heads: object) -> None:
    """Check ``heads``, a set of heads as ``{per-head hook path: [head, ...]}``."""
    if not isinstance(heads, dict):
        raise TypeError(f"heads must be a dict {{hook path: [heads]}}, got {type(heads).__name__}")
    points = hook_points(model)
    for path, idx in heads.items():
        if path not in points:
            raise ValueError(f"heads has key {path!r}, which is not a hook point of the model")
        if isinstance(idx, (str, bytes)) or not isinstance(idx, Sequence):
            raise TypeError(f"heads[{path!r}] must be a list of head indices, got {idx!r}")


def patch_set(
    model: nn.Module,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    heads: dict[str, Sequence[int]],
) -> float:
    """The fraction of ``metric`` recovered when a set of heads is patched together: the
    output of every listed head (``heads`` maps a per-head hook path such as
    ``"layers.1.attn.z"`` to head indices, as for ``ablated``) in the corrupted run replaced
    by its output in the clean run, ``(m_patched - m_corrupted) / (m_clean - m_corrupted)``.
    Heads that share a job each recover part of it alone (``patch_heads``); together they
    recover what the job is worth. An empty set recovers 0.

    Shapes: clean, corrupted (batch, seq); heads {hook path: [head, ...]} -> float.
    """
    _head_set(model, heads)
    paths = [path for path, idx in heads.items() if len(idx)]
    with _evaluating(model):
        cache, m_corrupted, gap = _both_runs(model, clean, corrupted, metric, paths)

        def patch(value: Tensor, path: str) -> Tensor:
            idx = list(heads[path])
            value = value.clone()
            value[:, idx] = cache[path][:, idx]  # (batch, n, seq, d)
            return value

        patched = run_with_hooks(model, corrupted, fwd_hooks=[(p, patch) for p in paths])
    return (_value(metric, patched) - m_corrupted) / gap


@contextmanager
def ablated(
    model: nn.Module,
    heads: dict[str, Sequence[int]],
    means: dict[str, Tensor] | None = None,
) -> Iterator[nn.Module]:
    """Run the body with a set of heads ablated together: the output of each listed head
    (``heads`` maps a per-head hook path such as ``"layers.1.attn.z"`` to head indices) is
    replaced by its mean (``means``, from ``head_means``) or, with ``means=None``, by zero.
    The hooks are removed afterwards.

    Shapes: heads {hook path: [head, ...]}, means {hook path: (heads, d)}.
    """
    _head_set(model, heads)
    for path in heads:
        if means is not None and path not in means:
            raise ValueError(f"means has no entry for {path!r}; compute them with head_means")

    def ablate(z: Tensor, path: str) -> Tensor:
        z, idx = z.clone(), list(heads[path])
        # (batch, n, seq, d): the mean of each listed head, or zero
        z[:, idx] = 0.0 if means is None else means[path][idx][None, :, None].to(z)
        return z

    with hooks(model, [(path, ablate) for path in heads]):
        yield model


def _with_grads(model, tokens, metric, paths) -> tuple[float, dict, tuple[Tensor, ...]]:
    """In eval mode: the metric on ``tokens``, the head outputs at ``paths`` and the metric's
    gradient with respect to each, from ``autograd.grad`` (the caller's ``.grad`` untouched)."""
    kept: dict[str, Tensor] = {}

    def keep(z: Tensor, name: str) -> None:
        kept[name] = z

    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            value = metric(run_with_hooks(model, tokens, fwd_hooks=[(p, keep) for p in paths]))
            if not isinstance(value, Tensor) or value.numel() != 1:
                got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise TypeError(f"metric must return a scalar tensor, got {got}")
            grads = torch.autograd.grad(value.reshape(()), [kept[p] for p in paths])
    finally:
        model.train(was_training)
    return float(value.detach()), {p: kept[p].detach() for p in paths}, grads


def first_order_ablation(
    model: nn.Module,
    tokens: Tensor,
    metric: Metric,
    *,
    layers_path: str = "layers.{}.attn",
    hook: str = "z",
    means: dict[str, Tensor] | None = None,
) -> Tensor:
    """The first-order estimate of how ``metric`` changes when each head's output is set to
    zero (zero ablation), from one backward pass: ``-sum <z, d metric / d z>`` over the batch,
    positions and dimensions of the head's output ``z`` (attribution patching with zero as the
    corrupted value); with ``means`` (from ``head_means``), when it is set to its mean (mean
    ablation): ``sum <mean - z, d metric / d z>``. Chapter 7's importance score differs: it
    takes the absolute value per example before averaging (``pruning.head_importance``). The
    caller's gradients (``.grad``) are left as they were.

    Shapes: tokens (batch, seq), means {hook path: (heads, d)} -> (layers, heads).
    """
    if not isinstance(tokens, Tensor):
        raise TypeError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
    check_callable("metric", metric, "metric(logits) -> scalar tensor")
    paths = _head_paths(model, layers_path, hook)
    if means is not None and (not isinstance(means, dict) or set(paths) - set(means)):
        raise ValueError(
            f"means must hold a (heads, d) mean for every hook path {paths[0]!r}, ...; compute "
            "them with head_means(model, tokens)"
        )
    _, kept, grads = _with_grads(model, tokens, metric, paths)
    rows = []
    for p, g in zip(paths, grads, strict=True):
        z = kept[p]  # (batch, heads, seq, d)
        target = torch.zeros_like(z) if means is None else means[p][None, :, None].to(z)
        rows.append(((target - z) * g).sum(dim=(0, 2, 3)))
    return torch.stack(rows).detach()  # (layers, heads)


def first_order_patching(
    model: nn.Module,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    *,
    layers_path: str = "layers.{}.attn",
    hook: str = "z",
) -> Tensor:
    """The first-order estimate of ``patch_heads`` for every head from one backward pass
    (*attribution patching*): the metric's change when head ``h``'s output moves from its
    corrupted to its clean value is about ``<z_clean - z_corrupted, d metric / d z>`` at the
    corrupted run (summed over the batch, positions and dimensions), divided by
    ``m_clean - m_corrupted`` as the exact fraction is. Exact where the metric is linear in
    the head's output; check it against ``patch_heads(..., heads=...)`` on a sample.

    Shapes: clean, corrupted (batch, seq) -> (layers, heads).
    """
    _inputs(clean, corrupted)
    check_callable("metric", metric, "metric(logits) -> scalar tensor")
    paths = _head_paths(model, layers_path, hook)
    with _evaluating(model):
        logits, cache = run_with_cache(model, clean, names_filter=paths)
        m_clean = _value(metric, logits)
    m_corrupted, kept, grads = _with_grads(model, corrupted, metric, paths)
    gap = m_clean - m_corrupted
    if not abs(gap) > 1e-6 * max(abs(m_clean), abs(m_corrupted)):
        raise ValueError(
            "clean and corrupted give the same metric: there is nothing to recover; choose a "
            "corrupted input (or a metric) on which the model behaves differently"
        )
    rows = [
        ((cache[p] - kept[p]) * g).sum(dim=(0, 2, 3)) / gap
        for p, g in zip(paths, grads, strict=True)
    ]
    return torch.stack(rows).detach().cpu()  # (layers, heads)
