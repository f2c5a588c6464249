"""Training K seeds at once: ``train_seeds`` is ``train`` for a ``SeedEnsemble``.

Seed ``k`` draws its batches with its own generator (seeded with its seed, as ``train`` seeds
one with ``cfg.seed``), so it sees the batches it sees when trained alone; batches of
different lengths are padded to one (``stack_batches``). The loss is one number per seed and
their sum is minimised: the seeds share no parameter, so each gets the gradient of its own
loss. AdamW acts elementwise, so on stacked parameters it is K independent optimisers, weight
decay included; gradient clipping uses each seed's own norm (``clip_per_seed``).

Shapes: batches and losses carry the seed axis first: (K, batch, seq) -> losses (K,).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from multihead._checks import check_callable, check_number
from multihead.core.config import TrainConfig
from multihead.core.ensemble import SeedEnsemble
from multihead.core.runtime import device as default_device
from multihead.core.train import IGNORE, History

Batch = tuple[Tensor, ...]


def seed_cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int = IGNORE) -> Tensor:
    """Each seed's mean cross-entropy over its targets that are not ``ignore_index``.

    Shapes: logits (K, ..., classes), targets (K, ...) -> (K,).
    """
    if not isinstance(logits, Tensor) or not isinstance(targets, Tensor):
        raise TypeError("logits and targets must be torch.Tensors")
    if logits.shape[:-1] != targets.shape or logits.ndim < 3:
        raise ValueError(
            f"logits {tuple(logits.shape)} must be (K, ..., classes) over targets "
            f"{tuple(targets.shape)} of shape (K, ...)"
        )
    K = logits.shape[0]
    ce = F.cross_entropy(
        logits.flatten(0, -2), targets.flatten(), ignore_index=ignore_index, reduction="none"
    ).view(K, -1)  # (K, positions), 0 at ignored ones
    return ce.sum(1) / (targets != ignore_index).view(K, -1).sum(1)


def seed_token_loss(ensemble: nn.Module, batch: Batch) -> Tensor:
    """``token_loss`` for every seed: ``ensemble(x)`` against ``y``, ``IGNORE`` skipped.

    Shapes: batch = (x (K, batch, seq), y (K, batch, seq)) -> (K,).
    """
    x, y = batch
    return seed_cross_entropy(ensemble(x), y)


def stack_batches(batches: Sequence[Batch], pad: Sequence[int] | None = None) -> Batch:
    """One batch per seed -> one batch with a seed axis. Tensors whose last (sequence) axis
    differs between seeds are padded at the end with ``pad[i]`` (the ``i``-th tensor's
    padding id, e.g. ``(PAD_ID, IGNORE)``), which a padding mask and the loss then skip.

    Shapes: K tuples of (batch, seq_k) -> a tuple of (K, batch, max seq_k).
    """
    if isinstance(batches, Tensor) or not isinstance(batches, Sequence) or not batches:
        raise TypeError("batches must be a non-empty list of batches, one per seed")
    for k, batch in enumerate(batches):
        if not isinstance(batch, tuple) or not all(isinstance(t, Tensor) for t in batch):
            raise TypeError(f"batches[{k}] must be a tuple of tensors, as sample() returns")
        if len(batch) != len(batches[0]):
            raise ValueError(
                f"batches[{k}] holds {len(batch)} tensors, batches[0] {len(batches[0])}"
            )
    if pad is not None and (isinstance(pad, (str, bytes)) or not isinstance(pad, Sequence)):
        raise TypeError(f"pad must be a tuple of padding ids (one per tensor) or None, got {pad!r}")
    out = []
    for i, parts in enumerate(zip(*batches, strict=True)):
        longest = max(t.shape[-1] for t in parts)
        if any(t.shape != parts[0].shape for t in parts):
            if pad is None or i >= len(pad) or pad[i] is None:
                raise ValueError(
                    f"the seeds' batches differ in shape at tensor {i} "
                    f"({[tuple(t.shape) for t in parts]}); pass pad=(padding id per tensor)"
                )
            parts = [F.pad(t, (0, longest - t.shape[-1]), value=pad[i]) for t in parts]
        out.append(torch.stack(parts))
    return tuple(out)


@torch.no_grad()
def clip_per_seed(params: Sequence[Tensor], max_norm: float) -> Tensor:
    """``clip_grad_norm_`` for each seed alone: seed ``k``'s gradients are scaled by
    ``min(1, max_norm / (norm_k + 1e-6))``, ``norm_k`` the norm of all its gradients.

    Shapes: params each (K, ...) with ``.grad`` -> the norms before clipping (K,).
    """
    check_number("max_norm", max_norm, 0.0, None, "()")
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        raise ValueError("params have no gradient to clip; call backward() first")
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], dim=1)
    total = torch.linalg.vector_norm(norms, dim=1)  # (K,)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *(1,) * (g.ndim - 1)))
    return total


def train_seeds(
    ensemble: SeedEnsemble,
    sample: Callable[[int, torch.Generator], Batch],
    cfg: TrainConfig,
    *,
    loss_fn: Callable[[nn.Module, Batch], Tensor] = seed_token_loss,
    pad: Sequence[int] | None = None,
    evaluate: Callable[[nn.Module], dict] | None = None,
    device: torch.device | None = None,
    progress: bool = False,
    desc: str = "training seeds",
    on_step: Callable[[SeedEnsemble, int], None] | None = None,
) -> list[History]:
    """Train every seed of ``ensemble`` at once, as ``train`` trains one model.

    Seed ``k`` draws its batches with a generator seeded with ``ensemble.seeds[k]`` (which
    takes the place of ``cfg.seed``); ``stack_batches(..., pad)`` stacks them.
    ``loss_fn(ensemble, batch)`` returns one loss per seed (``seed_token_loss``,
    ``tasks.tagging.tagging_seed_loss``, ``tasks.translation.seq2seq_seed_loss``); their sum
    is minimised, which gives each seed the gradient of its own loss. AdamW is elementwise,
    so on stacked parameters it is K independent optimisers; clipping uses each seed's own
    norm (``clip_per_seed``). ``evaluate(model)`` sees ``ensemble.pick(k)`` for every seed.
    ``on_step(ensemble, step)`` runs before each step (0-based), as in ``train``: e.g. a
    per-seed DropHead schedule (``interventions.drophead.seed_drophead_schedule``).

    Returns one ``History`` per seed; ``seconds`` is the wall time of the whole batched run.

    Shapes: sample(batch_size, generator) -> one seed's batch; loss_fn -> (K,).
    """
    if not isinstance(ensemble, SeedEnsemble):
        raise TypeError(f"ensemble must be a SeedEnsemble (stack_seeds), got {type(ensemble)}")
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    check_callable("sample", sample, "sample(batch_size, generator)")
    check_callable("loss_fn", loss_fn, "loss_fn(ensemble, batch) -> (K,) losses")
    if evaluate is not None:
        check_callable("evaluate", evaluate, "evaluate(model) -> dict")
    if on_step is not None:
        check_callable("on_step", on_step, "on_step(ensemble, step)")
    dev = device or default_device()
    ensemble.to(dev)
    K = ensemble.n_seeds
    generators = [torch.Generator().manual_seed(s) for s in ensemble.seeds]
    params = list(ensemble.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / cfg.warmup) if cfg.warmup else 1.0
    )
    histories = [History() for _ in range(K)]
    start = time.perf_counter()
    for step in tqdm(range(cfg.steps), desc=desc, disable=not progress, mininterval=1.0):
        ensemble.train()
        if on_step is not None:
            on_step(ensemble, step)
        batch = stack_batches([sample(cfg.batch_size, g) for g in generators], pad)
        losses = loss_fn(ensemble, tuple(t.to(dev) for t in batch))
        if not isinstance(losses, Tensor) or losses.shape != (K,):
            raise ValueError(f"loss_fn must return one loss per seed, shape ({K},)")
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()  # the seeds share no parameter: each gets its own gradient
        if cfg.grad_clip:
            clip_per_seed(params, cfg.grad_clip)
        opt.step()
        sched.step()
        for history, loss in zip(histories, losses.tolist(), strict=True):
            history.loss.append(loss)
        last = step == cfg.steps - 1
        if evaluate is not None and (last or (cfg.eval_every and (step + 1) % cfg.eval_every == 0)):
            for k, history in enumerate(histories):
                history.evals.append({"step": step + 1, **evaluate(ensemble.pick(k))})
    ensemble.eval()
    seconds = time.perf_counter() - start
    for history in histories:
        history.seconds = seconds
    return histories
