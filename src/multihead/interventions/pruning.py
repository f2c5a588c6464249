"""Which heads can go: Michel et al.'s gradient importance, Voita et al.'s confidence,
iterative pruning curves, and the physical removal of heads.

Every attention module of a model is addressed by its path, as in
``multihead.core.model.attention_modules``; a *mask* is ``{path: (heads,) tensor}`` with 1
for a kept head and 0 for a removed one (``multihead.interventions.ablation``). Masking is
reversible; ``prune_model`` slices the projections for good. Nothing here knows a task: the
data come as an iterable of batches, and the task's code as callables (for the translation
testbed, ``multihead.tasks.translation`` has ``batches``, ``per_sentence_loss``,
``run_batch``, ``confidence_queries`` and ``teacher_forced``).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn

from multihead._checks import check_callable, check_int, check_number
from multihead.analysis.metrics import head_confidence
from multihead.core.attention import GroupedQueryAttention, MultiHeadAttention
from multihead.core.config import TrainConfig
from multihead.core.hooks import hooks
from multihead.core.train import History, cached_train, train
from multihead.interventions.ablation import (
    Masks,
    attention_modules_of,
    check_masks,
    full_masks,
    head_masks,
)

Batch = tuple[Tensor, ...]


def _owner(path: str, point: str) -> str | None:
    """The attention module of hook point ``path`` if it is a ``point`` (e.g. ``".z"``)."""
    return path[: -len(point)] if path.endswith(point) else None


def head_importance(
    model: nn.Module,
    batches: Iterable[Batch],
    per_example_loss: Callable[[nn.Module, Batch], Tensor],
    *,
    normalize: bool = True,
) -> dict[str, Tensor]:
    """Michel et al.'s importance of every head: I_h = E_x |dL(x)/d xi_h| at the current mask.

    ``xi_h`` is the head's multiplier (``head_mask``). Because the head's output ``z_h``
    enters the model only through ``xi_h z_h W_O^h``, the chain rule gives
    ``xi_h dL/d xi_h = <z_h, dL/dz_h>`` (a sum over query positions and value dimensions),
    which we read through the ``z`` hook point. At ``xi_h = 1`` this is the gradient itself;
    a head already masked (``xi_h = 0``) scores 0. ``per_example_loss(model, batch)`` gives
    one loss per example (examples must not interact, so that one backward pass gives every
    per-example derivative), and the expectation is over all examples of ``batches``. With
    ``normalize`` each module's scores are divided by their l2 norm, as Michel et al. do
    per layer. The model (weights, masks, train/eval mode) is unchanged.

    Shapes: per_example_loss -> (batch,); -> {module path: (heads,)}.
    """
    modules = attention_modules_of(model)
    check_callable("per_example_loss", per_example_loss, "per_example_loss(model, batch)")
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize must be a bool, got {type(normalize).__name__}")
    was_training = model.training
    model.eval()
    totals = {name: torch.zeros(m.n_heads) for name, m in modules.items()}
    count = 0
    zs: dict[str, Tensor] = {}

    def keep(z: Tensor, path: str) -> None:
        zs[path[: -len(".z")]] = z

    try:
        with hooks(model, [(lambda path: _owner(path, ".z") in modules, keep)]):
            for batch in batches:
                zs.clear()
                with torch.enable_grad():
                    losses = per_example_loss(model, batch)  # (batch,)
                    names = list(zs)
                    grads = torch.autograd.grad(losses.sum(), [zs[n] for n in names])
                count += len(losses)
                for name, g in zip(names, grads, strict=True):
                    per_example = (zs[name].detach() * g).sum(dim=(2, 3))  # (batch, heads)
                    totals[name] += per_example.abs().sum(0).cpu()
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("batches is empty; pass at least one batch")
    scores = {name: t / count for name, t in totals.items()}
    if normalize:
        scores = {name: s / s.norm().clamp_min(1e-20) for name, s in scores.items()}
    return scores


@torch.no_grad()
def head_confidences(
    model: nn.Module,
    batches: Iterable[Batch],
    forward: Callable[[nn.Module, Batch], object],
    queries: Callable[[str, Batch], Tensor],
) -> dict[str, Tensor]:
    """Voita et al.'s confidence (mean over queries of the largest weight) of every head.

    ``forward(model, batch)`` runs the model; ``queries(path, batch)`` says which queries
    of the module at ``path`` count (True = counted), e.g. no padding.

    Shapes: queries -> (batch, q_len) bool; -> {module path: (heads,)}.
    """
    modules = attention_modules_of(model)
    check_callable("forward", forward, "forward(model, batch)")
    check_callable("queries", queries, "queries(module path, batch) -> (batch, q_len) bool")
    was_training = model.training
    model.eval()
    sums = {name: torch.zeros(m.n_heads) for name, m in modules.items()}
    counts = dict.fromkeys(modules, 0)
    cache: dict[str, Tensor] = {}

    def record(pattern: Tensor, path: str) -> None:
        cache[path[: -len(".pattern")]] = pattern

    try:
        with hooks(model, [(lambda path: _owner(path, ".pattern") in modules, record)]):
            for batch in batches:
                cache.clear()
                forward(model, batch)
                for name in modules:
                    picked = queries(name, batch)  # (batch, query)
                    n = int(picked.sum())
                    if n:
                        sums[name] += head_confidence(cache[name], picked).cpu() * n
                        counts[name] += n
    finally:
        model.train(was_training)
    return {name: sums[name] / max(counts[name], 1) for name in modules}


@dataclass
class PruningCurve:
    """The scores of ``evaluate`` as heads are removed step by step.

    ``fraction[i]`` is the share of all heads pruned at point ``i`` (``fraction[0] == 0``),
    ``scores[i]`` what ``evaluate`` returned there, ``masks[i]`` the mask in force (1 = kept);
    ``metric(key)`` is one score along the curve.

    Shapes: lists of equal length; masks[i] {path: (heads,)}.
    """

    fraction: list[float] = field(default_factory=list)
    scores: list[dict] = field(default_factory=list)
    masks: list[Masks] = field(default_factory=list)
    order: str = "score"

    def metric(self, key: str) -> list[float]:
        """``[scores[i][key] for every point]``. Shapes: none."""
        if not self.scores or key not in self.scores[0]:
            raise ValueError(f"key={key!r} is not a score of this curve")
        return [s[key] for s in self.scores]


def iterative_pruning(
    model: nn.Module,
    evaluate: Callable[[nn.Module], dict],
    score: Callable[[nn.Module], dict[str, Tensor]] | None = None,
    *,
    fraction_per_step: float = 0.1,
    seed: int = 0,
    until: float = 1.0,
) -> PruningCurve:
    """Prune heads in steps of ``fraction_per_step`` of all heads and score each step.

    The heads to remove next, among those still kept, are those with the smallest
    ``score(model)`` (``{path: (heads,)}``, e.g. ``head_importance`` or
    ``head_confidences``), recomputed after every step with the current mask in place; with
    ``score=None`` the order is random, drawn once from ``seed``.

    The last kept head of a module is never pruned (a module with no head would pass only
    its bias), so the curve ends when every module has one head left, or once at least
    ``until`` of all heads are pruned (a share in (0, 1]). Each point records
    ``evaluate(model)`` (a dict of floats) for the masked model. The model's own masks are
    restored afterwards.

    Shapes: -> PruningCurve with lists of length (number of steps + 1).
    """
    attention_modules_of(model)
    check_callable("evaluate", evaluate, "evaluate(model) -> dict of floats")
    if score is not None:
        check_callable("score", score, "score(model) -> {path: (heads,)}")
    step = check_number("fraction_per_step", fraction_per_step, 0, 1, "(]")
    check_int("seed", seed)
    until = check_number("until", until, 0, 1, "(]")
    masks = full_masks(model)
    total = sum(int(m.numel()) for m in masks.values())
    per_step = max(1, round(step * total))
    heads = [(name, h) for name, m in masks.items() for h in range(m.numel())]
    ranking = torch.randperm(total, generator=torch.Generator().manual_seed(seed)).tolist()
    curve = PruningCurve(order="random" if score is None else "score")

    def record() -> None:
        with head_masks(model, masks):
            scores = evaluate(model)
        pruned = sum(int((m == 0).sum()) for m in masks.values())
        curve.fraction.append(pruned / total)
        curve.scores.append(dict(scores))
        curve.masks.append({name: m.clone() for name, m in masks.items()})

    was_training = model.training
    try:
        record()
        while curve.fraction[-1] < until - 1e-12:
            if score is None:
                key = {heads[i]: rank for rank, i in enumerate(ranking)}
            else:
                with head_masks(model, masks):
                    stat = score(model)
                key = {(name, h): float(stat[name][h]) for name, h in heads}
            candidates = sorted(
                (hd for hd in heads if masks[hd[0]][hd[1]] == 1), key=lambda hd: key[hd]
            )
            removed = 0
            for name, h in candidates:
                if removed == per_step:
                    break
                if int(masks[name].sum()) > 1:  # keep the last head of every module
                    masks[name][h] = 0.0
                    removed += 1
            if removed == 0:
                break
            record()
    finally:
        model.train(was_training)
    return curve


def prune_model(model: nn.Module, masks: Masks) -> nn.Module:
    """Remove the heads with mask 0 for good (each layer's ``prune_heads``), in place.

    Modules missing from ``masks`` keep all their heads. Every mask is checked before any
    module is touched; a mask that removes every head of a module raises ``ValueError``.

    Shapes: masks {path: (heads,)} of 0/1 -> the same model with fewer heads.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    modules = check_masks(model, masks, binary=True)
    for name, mask in masks.items():
        drop = (mask == 0).nonzero().flatten().tolist()
        if drop:
            modules[name].prune_heads(drop)
    return model


def keep_one_head(masks: Masks, scores: dict[str, Tensor]) -> Masks:
    """A copy of ``masks`` in which a module with every head removed gets back its
    highest-scoring head (so that ``prune_model`` can slice it); other modules are unchanged.

    Shapes: masks and scores {path: (heads,)} -> {path: (heads,)}.
    """
    out = {}
    for name, mask in masks.items():
        if name not in scores or scores[name].shape != mask.shape:
            raise ValueError(f"scores must hold a tensor shaped like masks[{name!r}]")
        out[name] = mask.clone()
        if not bool((mask != 0).any()):
            out[name][int(scores[name].argmax())] = 1.0
    return out


def train_with_masks(
    models: Sequence[nn.Module],
    masks: Sequence[Masks],
    sample: Callable[[int, torch.Generator], Batch],
    train_config: TrainConfig,
    *,
    loss_fn: Callable[[nn.Module, Batch], Tensor],
    seeds: Sequence[int],
    progress: bool = False,
    cache: str | None = None,
) -> tuple[list[nn.Module], list[History]]:
    """Train a copy of each model with its fixed head mask ``masks[k]`` in force, one after
    another (``core.train.train``, batches drawn with ``seeds[k]``).

    A masked head writes nothing, so its projections get no gradient: this trains the
    pruned architecture (a fine-tune of a greedily pruned model, or, from fresh models, a
    pruned architecture from scratch). While it trains, the copy is sliced to its kept heads
    (a module with none keeps one, masked), so masked heads cost no computation; the trained
    weights then go back into a full-size copy that carries the mask as its head masks
    (talking-heads modules are not sliced). The inputs are not changed.

    With ``cache`` (a short name), each trained model goes to the checkpoint cache
    (``core.train.cached_train``) under a key made of its starting weights, its mask, its
    seed, ``train_config`` and the names of ``sample`` and ``loss_fn``; a model found there is
    loaded.

    Shapes: masks[k] {path: (heads,)} of 0/1 -> (K models, K histories).
    """
    if isinstance(models, nn.Module) or not isinstance(models, Sequence) or not models:
        raise TypeError("models must be a non-empty list of models (one per seed)")
    if isinstance(masks, dict) or not isinstance(masks, Sequence) or len(masks) != len(models):
        raise ValueError(f"masks must be a list of {len(models)} masks, one per model")
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
        raise TypeError(f"seeds must be a list of {len(models)} ints, got {seeds!r}")
    if len(seeds) != len(models):
        raise ValueError(f"seeds must hold {len(models)} ints (one per model), got {len(seeds)}")
    seeds = [check_int(f"seeds[{k}]", s, 0) for k, s in enumerate(seeds)]
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    check_callable("sample", sample, "sample(batch_size, generator)")
    check_callable("loss_fn", loss_fn, "loss_fn(model, batch) -> scalar loss")
    for k, (model, mask) in enumerate(zip(models, masks, strict=True)):
        if not isinstance(model, nn.Module):
            raise TypeError(f"models[{k}] must be a torch.nn.Module, got {type(model).__name__}")
        try:
            check_masks(model, mask, binary=True)
        except (TypeError, ValueError) as err:
            raise ValueError(f"masks[{k}]: {err}") from None
    if cache is not None and (not isinstance(cache, str) or not cache.isidentifier()):
        raise ValueError(
            f"cache={cache!r} must be None or a short identifier such as 'ch7_scratch'"
        )
    out, histories = [], []
    for model, mask, seed in zip(models, masks, seeds, strict=True):
        target = copy.deepcopy(model).cpu()

        def run(model=model, mask=mask, seed=seed, target=target) -> History:
            work = copy.deepcopy(model).cpu()
            modules = attention_modules_of(work)
            with torch.no_grad():
                for name, m in mask.items():
                    modules[name].head_mask.copy_(m)
            keep = _kept_heads(work)
            if keep is not None:
                for name, module in modules.items():
                    drop = sorted(set(range(module.n_heads)) - set(keep[name].tolist()))
                    if drop:
                        module.prune_heads(drop)
            torch.manual_seed(seed)  # dropout, if the model has any
            history = train(work, sample, replace(train_config, seed=seed), loss_fn=loss_fn,
                            progress=progress,
                            desc="masked model")  # fmt: skip
            _unslice(target, work.cpu(), mask, keep)
            return history

        if cache is None:
            histories.append(run())
        else:
            key = _masked_key(model, mask, seed, train_config, sample, loss_fn)
            histories.append(cached_train(cache, target, key, run))
        out.append(target)
    device = next(models[0].parameters()).device
    return [m.to(device).eval() for m in out], histories


_PER_HEAD = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")


def _kept_heads(model: nn.Module) -> dict[str, Tensor] | None:
    """Which heads of each module to keep while a masked model trains: its unmasked heads,
    or its first head if it has none. ``None`` unless every module can be sliced head by head
    (a multi-head layer: not talking heads, shared key/value heads or latent attention).

    Shapes: -> {path: (width,) head indices, ascending}.
    """
    modules = attention_modules_of(model)
    if any(
        type(m) not in (MultiHeadAttention, GroupedQueryAttention) or m.n_kv_heads != m.n_heads
        for m in modules.values()
    ):
        return None
    keep = {}
    for name, module in modules.items():
        on = (module.head_mask.cpu() != 0).nonzero().flatten()
        keep[name] = on if len(on) else torch.zeros(1, dtype=torch.long)
    return keep


@torch.no_grad()
def _unslice(target: nn.Module, trained: nn.Module, mask: Masks, keep: dict | None) -> nn.Module:
    """``target`` (the full-size starting model) with the weights of ``trained`` (its sliced
    copy after training) written back: each kept head to its own index, every other weight
    as it is; heads outside ``keep`` keep their starting weights, and ``mask`` is in force
    (a module missing from it keeps its own mask, as ``head_masks`` leaves it). With
    ``keep=None`` nothing was sliced and every weight is copied."""
    state = {name: t.clone() for name, t in target.state_dict().items()}
    for name, value in trained.state_dict().items():
        path, _, leaf = name.rpartition(".")
        if keep is not None and path in keep and leaf in _PER_HEAD:
            state[name][keep[path]] = value
        elif leaf != "head_mask":
            state[name] = value
    for path, m in mask.items():  # the other modules keep the mask they came with
        state[f"{path}.head_mask"] = m.cpu().to(state[f"{path}.head_mask"].dtype)
    target.load_state_dict(state)
    return target


def _masked_key(
    model: nn.Module, mask: Masks, seed: int, train_config: TrainConfig, sample, loss_fn
):
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    kept = tuple((n, tuple(int(v) for v in t.tolist())) for n, t in sorted(mask.items()))
    what = tuple(  # a function's name, or a callable object's class
        getattr(f, "__qualname__", type(f).__qualname__) for f in (sample, loss_fn)
    )
    return ("masked", h.hexdigest()[:16], kept, seed, train_config, what)
