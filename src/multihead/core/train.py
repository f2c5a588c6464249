"""A small, seeded training loop with a progress bar, evaluation and a checkpoint cache.

``train`` is the one training loop of the package. ``train_seeds`` runs it once per seed,
one seed after another: each seed gets its own start (``torch.manual_seed(seed)`` before
the model is built) and its own batches (``train_config.seed = seed``), and so a replicate is
exactly the model ``train`` gives for that seed alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_callable, check_seeds
from multihead.core.config import TrainConfig
from multihead.core.progress import progress as progress_bar
from multihead.core.runtime import device as default_device

IGNORE = -100  # target id that losses and accuracies skip (torch's cross-entropy default)

# What a checkpoint depends on: every module of the layers that build, feed or train a cached
# model (found on disk, so a new module is covered), and the argument checks. An edit
# elsewhere (figures, analysis, exercises, tooling) keeps the cache; an edit here retrains.
TRAINING_LAYERS = ("core", "tasks", "interventions")
TRAINING_FILES = ("_checks.py",)

Batch = tuple[Tensor, ...]
Sampler = Callable[[int, torch.Generator], Batch]
LossFn = Callable[[nn.Module, Batch], Tensor]


@dataclass
class History:
    """What ``train`` recorded: loss per step, evaluations, wall time in seconds."""

    loss: list[float] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def token_loss(model: nn.Module, batch: Batch) -> Tensor:
    """Cross-entropy of ``model(x)`` against ``y``, skipping ``IGNORE`` targets.

    Shapes: batch = (x (batch, seq), y (batch, seq)) -> scalar.
    """
    x, y = batch
    logits = model(x)  # (batch, seq, classes)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE)


@torch.no_grad()
def token_accuracy(logits: Tensor, y: Tensor) -> float:
    """Fraction of non-ignored positions whose argmax is right.

    Shapes: logits (batch, seq, classes), y (batch, seq) -> float.
    """
    if logits.shape[:-1] != y.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and y {tuple(y.shape)} do not match")
    keep = y != IGNORE
    if not keep.any():
        raise ValueError("y has no position to score (all IGNORE)")
    return (logits.argmax(-1)[keep] == y[keep]).float().mean().item()


def _to(batch: Batch, dev: torch.device) -> Batch:
    return tuple(t.to(dev) for t in batch)


def train(
    model: nn.Module,
    sample: Sampler,
    train_config: TrainConfig,
    *,
    loss_fn: LossFn = token_loss,
    evaluate: Callable[[nn.Module], dict] | None = None,
    device: torch.device | None = None,
    progress: bool = True,
    desc: str = "training",
    on_step: Callable[[nn.Module, int], None] | None = None,
) -> History:
    """Train ``model`` with AdamW on batches from ``sample(batch_size, generator)``.

    The generator is seeded from ``train_config.seed``, so the batches (and, on the CPU, the whole
    run) are reproducible. ``evaluate(model)`` runs every ``train_config.eval_every`` steps and at
    the end, in eval mode; its dicts are kept in ``History.evals`` with the step added.
    ``on_step(model, step)`` runs before each step (0-based), e.g. to set a scheduled rate.

    Shapes: as ``sample`` and ``loss_fn`` define.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    if not callable(sample):
        raise TypeError("sample must be callable as sample(batch_size, generator)")
    if on_step is not None and not callable(on_step):
        raise TypeError("on_step must be callable as on_step(model, step) or None")
    dev = torch.device(device or default_device())
    model.to(dev)
    generator = torch.Generator().manual_seed(train_config.seed)
    # foreach: one update over all tensors at once; on the CPU bitwise the same steps as the
    # per-tensor default and faster for our many small tensors (torch picks it on CUDA anyway).
    foreach = True if dev.type in ("cpu", "cuda") else None
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=train_config.lr,
        weight_decay=train_config.weight_decay,
        foreach=foreach,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / train_config.warmup) if train_config.warmup else 1.0
    )
    history = History()
    start = time.perf_counter()
    bar = progress_bar(range(train_config.steps), desc=desc, disable=not progress)
    for step in bar:
        model.train()
        if on_step is not None:
            on_step(model, step)
        loss = loss_fn(model, _to(sample(train_config.batch_size, generator), dev))
        if not isinstance(loss, Tensor) or loss.ndim != 0:
            raise TypeError(f"loss_fn must return a scalar tensor, got {type(loss).__name__}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if train_config.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), train_config.grad_clip, foreach=foreach)
        opt.step()
        sched.step()
        history.loss.append(loss.item())
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
        last = step == train_config.steps - 1
        if evaluate is not None and (
            last or (train_config.eval_every and (step + 1) % train_config.eval_every == 0)
        ):
            model.eval()
            history.evals.append({"step": step + 1, **evaluate(model)})
    model.eval()
    history.seconds = time.perf_counter() - start
    return history


def train_seeds(
    seeds: Sequence[int],
    make: Callable[[int], nn.Module],
    sample: Sampler,
    train_config: TrainConfig,
    *,
    loss_fn: LossFn = token_loss,
    evaluate: Callable[[nn.Module], dict] | None = None,
    device: torch.device | None = None,
    progress: bool = False,
    desc: str = "training",
    on_step: Callable[[nn.Module, int], None] | None = None,
    cache: str | None = None,
    key: object = None,
) -> tuple[list[nn.Module], list[History]]:
    """One model per seed: ``torch.manual_seed(seed)``, ``model = make(seed)``, then
    ``train(model, sample, train_config with seed=seed, ...)``, seed after seed.

    With ``cache`` (a short name such as ``"ch6_tagger"``) each seed's model is kept in the
    checkpoint cache (``cached_train``) under ``key`` and the seed's config: ``key`` must
    describe whatever ``make``, ``sample``, ``loss_fn`` and ``on_step`` depend on (data
    sizes, model config...), and a seed found in the cache is loaded instead of trained.
    An ``on_step`` that attaches hooks (a DropHead schedule) must follow the model it is
    given, since every seed brings a new one.

    Returns the models (in eval mode, on ``device``) and their histories, in seed order.

    Shapes: as ``train``.
    """
    seeds = check_seeds("seeds", seeds)
    check_callable("make", make, "make(seed) -> a new model")
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    if cache is not None and (not isinstance(cache, str) or not cache.isidentifier()):
        raise ValueError(f"cache={cache!r} must be None or a short identifier such as 'ch6'")
    dev = torch.device(device or default_device())
    models, histories = [], []
    for seed in seeds:
        torch.manual_seed(seed)
        model = make(seed)
        if not isinstance(model, nn.Module):
            raise TypeError(f"make({seed}) must return a torch.nn.Module, got {type(model)}")
        seed_config = replace(train_config, seed=seed)

        def run(model: nn.Module = model, seed_config: TrainConfig = seed_config) -> History:
            return train(model, sample, seed_config, loss_fn=loss_fn, evaluate=evaluate,
                         device=dev, progress=progress, desc=f"{desc}, seed {seed_config.seed}",
                         on_step=on_step)  # fmt: skip

        histories.append(
            run() if cache is None else cached_train(cache, model, (key, seed_config), run)
        )
        models.append(model.to(dev).eval())
    return models, histories


def cache_dir() -> Path:
    """Where checkpoints are kept: ``$MULTIHEAD_CACHE_DIR`` or ``~/.cache/multihead``."""
    return Path(os.environ.get("MULTIHEAD_CACHE_DIR", Path.home() / ".cache" / "multihead"))


def training_modules(package_root: Path | None = None) -> list[str]:
    """The source files a checkpoint depends on, relative to ``package_root`` (default this
    package): every ``.py`` under ``TRAINING_LAYERS`` plus ``TRAINING_FILES``, sorted.

    Shapes: none.
    """
    root = Path(__file__).resolve().parents[1] if package_root is None else Path(package_root)
    found = [
        path.relative_to(root).as_posix()
        for layer in TRAINING_LAYERS
        for path in (root / layer).rglob("*.py")
    ]
    for rel in TRAINING_FILES:
        if not (root / rel).is_file():
            raise FileNotFoundError(f"{root / rel} is listed in TRAINING_FILES but does not exist")
    if not found:
        raise FileNotFoundError(f"{root} holds no module under {', '.join(TRAINING_LAYERS)}")
    return sorted(found + list(TRAINING_FILES))


def code_fingerprint(package_root: Path | None = None) -> str:
    """A hash of the paths and source of ``training_modules(package_root)``: editing, adding
    or removing one of them invalidates the cached checkpoints.

    Shapes: none.
    """
    root = Path(__file__).resolve().parents[1] if package_root is None else Path(package_root)
    h = hashlib.sha256()
    for rel in training_modules(root):
        h.update(rel.encode() + b"\0")
        h.update((root / rel).read_bytes())
    return h.hexdigest()[:12]


def checkpoint_path(name: str, key: object) -> Path:
    """The cache file ``cached_train(name, model, key, ...)`` reads and writes (it may not
    exist yet).

    Shapes: none.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name={name!r} must be a short identifier such as 'ch1_model'")
    digest = hashlib.sha256((repr(key) + code_fingerprint()).encode()).hexdigest()[:16]
    return cache_dir() / f"{name}-{digest}.pt"


def cached_train(name: str, model: nn.Module, key: object, train_fn: Callable[[], History]):
    """Load ``model`` from the checkpoint cache if present, else run ``train_fn`` and save.

    ``key`` is anything with a stable ``repr`` (configs, task, seed): it and the package
    source are hashed into the file name, so a changed setting never loads a stale model.
    Returns the ``History`` (loaded or fresh).

    Shapes: none.
    """
    path = checkpoint_path(name, key)
    if path.exists():  # tensors and plain data only: loading runs no pickled code
        saved = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(saved["state"])
        model.to(default_device()).eval()
        return History(**saved["history"])
    history = train_fn()
    plain = _plain(asdict(history))
    json.dumps(plain)  # fail before saving if a history is not plain data
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # workers may train the same model at once
    torch.save({"state": state, "history": plain}, tmp)
    tmp.replace(path)
    return history


def _plain(value: object) -> object:
    """``value`` with float subclasses (numpy's float64, which an evaluation may return) as
    Python floats, so that a saved history loads with ``weights_only=True``."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value] if isinstance(value, list) else tuple(map(_plain, value))
    return float(value) if isinstance(value, float) else value
