"""Which heads can go: Michel et al.'s gradient importance, iterative pruning curves, and
the physical removal of heads.

Every attention module of an ``EncoderDecoder`` (encoder self-attention, decoder
self-attention, decoder-encoder cross-attention) is addressed by its path, as in
``multihead.core.model.attention_modules``; a *mask* is ``{path: (heads,) tensor}`` with 1 for a
kept head and 0 for a removed one (``multihead.interventions.ablation``). Masking is reversible;
``prune_model`` slices the projections for good.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_choice, check_positive_int
from multihead.analysis.metrics import head_confidence
from multihead.core.attention import MultiHeadAttention, run_with_cache
from multihead.core.model import EncoderDecoder, attention_modules
from multihead.interventions.ablation import Masks, full_masks, head_masks
from multihead.tasks.translation import PAD_ID, Encoded, _trim, teacher_forced

ORDERS = ("importance", "random", "confidence")


def _check_model_data(model: object, data: object, data_name: str = "data") -> None:
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model must be a multihead.core.model.EncoderDecoder, got {type(model)}")
    if not isinstance(data, Encoded):
        raise TypeError(
            f"{data_name} must be a multihead.tasks.translation.Encoded (translation.encode), "
            f"got {type(data).__name__}"
        )


def _batches(data: Encoded, batch_size: int, dev: torch.device):
    for start in range(0, len(data.src), batch_size):
        src, tgt = _trim(data.src[start : start + batch_size], data.tgt[start : start + batch_size])
        yield src.to(dev), tgt.to(dev)


def _per_sentence_loss(model: EncoderDecoder, src: Tensor, tgt: Tensor) -> Tensor:
    """Teacher-forced cross-entropy of each sentence, averaged over its own target tokens.

    Shapes: src (batch, S), tgt (batch, T + 1) -> (batch,).
    """
    logits = model(src, tgt[:, :-1], src_padding_mask=src == PAD_ID)  # (batch, T, vocab)
    gold = tgt[:, 1:]  # (batch, T)
    keep = (gold != PAD_ID).to(logits.dtype)
    ce = F.cross_entropy(logits.transpose(1, 2), gold, reduction="none")  # (batch, T)
    return (ce * keep).sum(1) / keep.sum(1).clamp_min(1)


def head_importance(
    model: EncoderDecoder, data: Encoded, *, normalize: bool = True, batch_size: int = 500
) -> dict[str, Tensor]:
    """Michel et al.'s importance of every head: I_h = E_x |dL(x)/d xi_h| at the current mask.

    ``xi_h`` is the head's multiplier (``head_mask``). Because the head's output ``z_h``
    enters the model only through ``xi_h z_h W_O^h``, the chain rule gives
    ``xi_h dL/d xi_h = <z_h, dL/dz_h>`` (a sum over query positions and value dimensions),
    which we read through the ``z`` hook point. At ``xi_h = 1`` this is the gradient itself;
    a head already masked (``xi_h = 0``) scores 0. ``L(x)`` is one sentence's teacher-forced
    loss (mean over its target tokens) and the expectation is over the sentences of
    ``data``. With ``normalize`` each module's scores are divided by their l2 norm, as
    Michel et al. do per layer. The model (weights, masks, train/eval mode) is unchanged.

    Shapes: data of n sentences -> {module path: (heads,)}.
    """
    _check_model_data(model, data)
    check_positive_int("batch_size", batch_size)
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize must be a bool, got {type(normalize).__name__}")
    modules = dict(attention_modules(model))
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    totals = {name: torch.zeros(m.n_heads) for name, m in modules.items()}
    zs: dict[str, Tensor] = {}

    def make_hook(name: str):
        def hook(_module: nn.Module, _args: object, output: Tensor) -> None:
            zs[name] = output

        return hook

    handles = [m.z.register_forward_hook(make_hook(name)) for name, m in modules.items()]
    try:
        for src, tgt in _batches(data, batch_size, dev):
            zs.clear()
            with torch.enable_grad():
                # Sentences do not interact, so the gradient of the summed loss with respect
                # to sentence x's z is the gradient of L(x) alone: one backward pass gives
                # every per-sentence derivative.
                loss = _per_sentence_loss(model, src, tgt).sum()
                names = list(zs)
                grads = torch.autograd.grad(loss, [zs[n] for n in names])
            for name, g in zip(names, grads, strict=True):
                per_sentence = (zs[name].detach() * g).sum(dim=(2, 3))  # (batch, heads)
                totals[name] += per_sentence.abs().sum(0).cpu()
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    scores = {name: t / len(data.src) for name, t in totals.items()}
    if normalize:
        scores = {name: s / s.norm().clamp_min(1e-20) for name, s in scores.items()}
    return scores


@torch.no_grad()
def head_confidences(
    model: EncoderDecoder, data: Encoded, *, batch_size: int = 500
) -> dict[str, Tensor]:
    """Voita et al.'s confidence (mean over queries of the largest weight) of every head.

    Queries are the non-padding positions; in decoder self-attention the first query is
    left out, because it can only look at itself and has weight 1 in every head.

    Shapes: data of n sentences -> {module path: (heads,)}.
    """
    _check_model_data(model, data)
    check_positive_int("batch_size", batch_size)
    modules = dict(attention_modules(model))
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    sums = {name: torch.zeros(m.n_heads) for name, m in modules.items()}
    counts = dict.fromkeys(modules, 0)
    try:
        for src, tgt in _batches(data, batch_size, dev):
            _, cache = run_with_cache(
                model,
                src,
                tgt[:, :-1],
                src_padding_mask=src == PAD_ID,
                names_filter=lambda name: name.endswith("pattern"),
            )
            src_q = src != PAD_ID  # (batch, S)
            tgt_q = tgt[:, :-1] != PAD_ID  # (batch, T)
            for name in modules:
                pattern = cache[f"{name}.pattern"]  # (batch, heads, query, key)
                if name.startswith("encoder"):
                    queries = src_q
                elif name.endswith("cross_attn"):
                    queries = tgt_q
                else:
                    queries = tgt_q.clone()
                    queries[:, 0] = False
                n = int(queries.sum())
                if n:
                    sums[name] += head_confidence(pattern, queries).cpu() * n
                    counts[name] += n
    finally:
        model.train(was_training)
    return {name: sums[name] / max(counts[name], 1) for name in modules}


@dataclass
class PruningCurve:
    """Teacher-forced loss and token accuracy as heads are removed step by step.

    ``fraction[i]`` is the share of all heads pruned at point ``i`` (``fraction[0] == 0``),
    ``masks[i]`` the mask in force there (1 = kept).

    Shapes: lists of equal length; masks[i] {path: (heads,)}.
    """

    fraction: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    token_acc: list[float] = field(default_factory=list)
    masks: list[Masks] = field(default_factory=list)
    order: str = "importance"


def _check_fraction(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"fraction_per_step={value!r} must be a number in (0, 1], e.g. 0.1")
    return float(value)


def iterative_pruning(
    model: EncoderDecoder,
    score_data: Encoded,
    eval_data: Encoded,
    *,
    order: str = "importance",
    fraction_per_step: float = 0.1,
    seed: int = 0,
) -> PruningCurve:
    """Prune heads in steps of ``fraction_per_step`` of all heads and score each step.

    ``order`` chooses the heads to remove next, among those still kept:

    * ``"importance"``: the smallest Michel importance (per-module normalised), recomputed
      on ``score_data`` after every step with the current mask in place;
    * ``"confidence"``: the smallest confidence (``head_confidences`` on ``score_data``),
      also recomputed after every step;
    * ``"random"``: a random order drawn once from ``seed``.

    The last kept head of a module is never pruned (a module with no head would pass only
    its bias), so the curve ends when every module has one head left. Each point scores the
    masked model on ``eval_data`` with ``teacher_forced``. The model's own masks are
    restored afterwards.

    Shapes: -> PruningCurve with lists of length (number of steps + 1).
    """
    _check_model_data(model, score_data, "score_data")
    _check_model_data(model, eval_data, "eval_data")
    check_choice("order", order, ORDERS)
    step = _check_fraction(fraction_per_step)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    masks = full_masks(model)
    total = sum(int(m.numel()) for m in masks.values())
    per_step = max(1, round(step * total))
    heads = [(name, h) for name, m in masks.items() for h in range(m.numel())]
    ranking = torch.randperm(total, generator=torch.Generator().manual_seed(seed)).tolist()
    curve = PruningCurve(order=order)

    def record() -> None:
        with head_masks(model, masks):
            scores = teacher_forced(model, eval_data)
        pruned = sum(int((m == 0).sum()) for m in masks.values())
        curve.fraction.append(pruned / total)
        curve.loss.append(scores["loss"])
        curve.token_acc.append(scores["token_acc"])
        curve.masks.append({name: m.clone() for name, m in masks.items()})

    was_training = model.training
    try:
        record()
        while True:
            if order == "random":
                key = {heads[i]: rank for rank, i in enumerate(ranking)}
            else:
                with head_masks(model, masks):
                    if order == "importance":
                        stat = head_importance(model, score_data)
                    else:
                        stat = head_confidences(model, score_data)
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


def _check_masks(model: nn.Module, masks: object) -> dict[str, MultiHeadAttention]:
    modules = dict(attention_modules(model))
    if not isinstance(masks, dict):
        raise TypeError(f"masks must be a dict from module path to tensor, got {type(masks)}")
    for name, mask in masks.items():
        if name not in modules:
            raise ValueError(f"masks has key {name!r}, which is not an attention module of model")
        n = modules[name].n_heads
        if not isinstance(mask, Tensor) or mask.shape != (n,):
            got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
            raise ValueError(f"masks[{name!r}] must be a tensor of shape ({n},), got {got}")
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"masks[{name!r}] must hold only 0 (prune) and 1 (keep)")
        if not bool((mask == 1).any()):
            raise ValueError(
                f"masks[{name!r}] would prune every head of {name}; keep at least one head "
                "per attention module"
            )
    return modules


def prune_model(model: nn.Module, masks: Masks) -> nn.Module:
    """Remove the heads with mask 0 for good (``MultiHeadAttention.prune_heads``), in place.

    Modules missing from ``masks`` keep all their heads. Every mask is checked before any
    module is touched; a mask that removes every head of a module raises ``ValueError``.

    Shapes: masks {path: (heads,)} of 0/1 -> the same model with fewer heads.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    modules = _check_masks(model, masks)
    for name, mask in masks.items():
        drop = (mask == 0).nonzero().flatten().tolist()
        if drop:
            modules[name].prune_heads(drop)
    return model


def count_heads(masks: Masks) -> dict[str, int]:
    """Kept heads per attention type: ``encoder`` (self), ``decoder`` (self), ``cross``.

    Shapes: masks {path: (heads,)} -> {type: int}.
    """
    out = {"encoder": 0, "decoder": 0, "cross": 0}
    for name, mask in masks.items():
        kind = "cross" if name.endswith("cross_attn") else name.split(".")[0]
        if kind not in out:
            raise ValueError(f"masks has key {name!r}, not an encoder-decoder attention path")
        out[kind] += int((mask != 0).sum())
    return out


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
