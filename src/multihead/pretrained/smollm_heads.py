"""The course's head analyses on SmolLM2 (``pretrained.smollm``): the text it reads offline,
the synthetic probes, per-window losses and pattern statistics in batches, a model of the same
shape at initialisation, and the time of a decoding step.

**The text.** Every CPython ships the reference text that ``help()`` prints for the
language's keywords and statements in ``pydoc_data.topics`` (about 465,000 characters of
English prose with code: "The assert statement", "Augmented assignment statements", ...).
``python_docs()`` joins its topics in sorted order; ``text_windows`` cuts the tokenized
text into consecutive windows of a fixed length and draws some of them. The text differs a
little between Python versions, so another Python draws slightly other windows (as another
seed would). A model trained on web pages and code has very likely read text like it (the
documentation is public), so a loss on it measures a model reading familiar English, not
generalisation to new text.

**The probes.** ``repeated_tokens`` draws random segments of ordinary tokens (no special
token) and repeats each once, with a *control* that repeats nothing: the same second half
after a fresh first half. An induction head attends, from the second copy, to the token after
the earlier copy of the current token; on the control that position holds an unrelated token.

Nothing here stores every pattern of every layer at once: ``pattern_statistics`` reduces each
layer's pattern as soon as it is computed, batch by batch.

Shapes: see each function.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

import torch
from torch import Tensor, nn

from multihead._checks import check_int, check_positive_int
from multihead.core.decoder import Decoder
from multihead.core.hooks import hooks

DOCS_MODULE = "pydoc_data.topics"


def python_docs() -> str:
    """The text of ``pydoc_data.topics`` (shipped with every CPython): its topics in sorted
    order of their names, separated by blank lines.

    Shapes: none.
    """
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def _check_tokenizer(tokenizer: object) -> None:
    if not callable(tokenizer) or not hasattr(tokenizer, "all_special_ids"):
        raise TypeError(
            "tokenizer must be a transformers tokenizer (the second value load_smollm2() "
            f"returns), got {type(tokenizer).__name__}"
        )


@lru_cache(maxsize=2)
def docs_token_ids(tokenizer) -> Tensor:
    """``python_docs()`` tokenized (no special tokens), kept for the next call with the same
    tokenizer.

    Shapes: -> (n_tokens,) token ids.
    """
    _check_tokenizer(tokenizer)
    ids = tokenizer(python_docs(), add_special_tokens=False, verbose=False)["input_ids"]
    return torch.tensor(ids)


def text_windows(tokenizer, length: int, n: int, *, seed: int = 0) -> Tensor:
    """``n`` windows of ``length`` consecutive tokens of ``python_docs()``: the tokenized text
    is cut into consecutive windows, and ``n`` of them are drawn without replacement by
    ``seed`` (in the order drawn). A window starts wherever the cut falls, often inside a
    sentence.

    Shapes: -> (n, length) token ids.
    """
    _check_tokenizer(tokenizer)
    check_positive_int("length", length)
    check_positive_int("n", n)
    check_int("seed", seed, 0)
    ids = docs_token_ids(tokenizer)
    windows = ids[: len(ids) // length * length].view(-1, length)
    if n > len(windows):
        raise ValueError(
            f"n={n} windows of length={length} are more than the text holds ({len(windows)}); "
            "ask for fewer or shorter windows"
        )
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(seed))
    return windows[order[:n]]


def repeated_tokens(tokenizer, n: int, segment: int, *, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random segments of ``segment`` tokens, each followed by itself (``repeated``), and a
    ``control`` with the same second halves after fresh first halves, so that nothing in it
    repeats (up to chance coincidences). Tokens are drawn uniformly from the ids above the
    tokenizer's special tokens.

    Shapes: -> repeated, control (n, 2 * segment) token ids.
    """
    _check_tokenizer(tokenizer)
    check_positive_int("n", n)
    check_int("segment", segment, 2)
    check_int("seed", seed, 0)
    low = max(tokenizer.all_special_ids) + 1
    g = torch.Generator().manual_seed(seed)
    first, fresh = torch.randint(low, len(tokenizer), (2, n, segment), generator=g)
    return torch.cat([first, first], 1), torch.cat([fresh, first], 1)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _batches(tokens: object, batch_size: int) -> list[Tensor]:
    if not isinstance(tokens, Tensor) or tokens.ndim != 2 or tokens.dtype != torch.long:
        raise TypeError("tokens must be a (n, seq) tensor of token ids (torch.long)")
    check_positive_int("batch_size", batch_size)
    return list(tokens.split(batch_size))


@torch.no_grad()
def token_losses(model: nn.Module, tokens: Tensor, *, batch_size: int = 8) -> Tensor:
    """The next-token loss (nats) at every position of every sequence, in batches.

    Shapes: tokens (n, seq) -> (n, seq - 1): entry ``t`` is the loss of predicting token
    ``t + 1``.
    """
    out = []
    for batch in _batches(tokens, batch_size):
        x = batch.to(_device(model))
        logits = model(x)[:, :-1].float()  # (batch, seq - 1, vocab)
        out.append(nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none"))
    return torch.cat(out).cpu()


@torch.no_grad()
def pattern_statistics(
    model: nn.Module,
    tokens: Tensor,
    statistics: Mapping[str, Callable[[Tensor], Tensor]],
    *,
    scores: Mapping[str, Callable[[Tensor], Tensor]] | None = None,
    losses: bool = False,
    batch_size: int = 4,
) -> dict[str, Tensor]:
    """Statistics of every layer's attention, reduced as each layer computes it, in one pass
    over ``tokens``: for each ``name: fn`` of ``statistics``, ``fn(pattern)`` of every layer
    and batch, stacked over the layers; of ``scores``, ``fn(scores)`` of the scores before the
    softmax (future keys at ``-inf``); with ``losses``, also ``"loss"``, the next-token loss
    at every position (as ``token_losses``), and ``"correct"``, 1 where the top logit is the
    next token. The decoder's attention modules must sit at
    ``layers.{i}.attn``.

    Shapes: tokens (n, seq); fn: (batch, heads, seq, seq) -> (batch, ...) -> {name: (layers,
    n, ...)}, "loss" and "correct": (n, seq - 1).
    """
    every = {"pattern": statistics, "scores": scores or {}}
    for hook, fns in every.items():
        if not isinstance(fns, Mapping):
            raise TypeError(f"the {hook} statistics must be a dict {{name: fn(tensor)}}")
        for name, fn in fns.items():
            if not callable(fn):
                raise TypeError(f"{name!r} must map to a function fn({hook}) -> (batch, ...)")
    if not statistics and not scores:
        raise ValueError("give at least one statistic (statistics or scores)")
    names = set(statistics) | set(scores or {})
    if set(statistics) & set(scores or {}) or names & {"loss", "correct"}:
        raise ValueError("statistic names must differ, and 'loss' and 'correct' are taken")
    n_layers = len(model.layers)
    found = {name: [[] for _ in range(n_layers)] for fns in every.values() for name in fns}
    lost = []

    def reduce(value: Tensor, path: str) -> None:
        layer, hook = int(path.split(".")[1]), path.rsplit(".", 1)[1]
        for name, fn in every[hook].items():
            found[name][layer].append(fn(value.float()).cpu())

    def wanted(path: str) -> bool:
        return (
            path.startswith("layers.")
            and path.rsplit(".", 1)[1] in every
            and bool(every[path.rsplit(".", 1)[1]])
        )

    with hooks(model, [(wanted, reduce)]):
        for batch in _batches(tokens, batch_size):
            x = batch.to(_device(model))
            logits = model(x)
            if losses:
                pred = logits[:, :-1].float().transpose(1, 2)  # (batch, vocab, seq - 1)
                loss = nn.functional.cross_entropy(pred, x[:, 1:], reduction="none")
                lost.append(torch.stack([loss, (pred.argmax(1) == x[:, 1:]).float()]).cpu())
    out = {name: torch.stack([torch.cat(parts) for parts in per]) for name, per in found.items()}
    if losses:
        out["loss"], out["correct"] = torch.cat(lost, dim=1)
    return out


def initialised_like(model: Decoder, seed: int = 0) -> Decoder:
    """A ``Decoder`` of the same shape and settings as ``model`` (a Llama-family decoder such
    as SmolLM2), at the course's initialisation, drawn from ``seed``, in eval mode on
    ``model``'s device.

    Shapes: none (returns a model computing (batch, seq) -> (batch, seq, vocab_size)).
    """
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be a Decoder, got {type(model).__name__}")
    check_int("seed", seed, 0)
    attn, ff = model.layers[0].attn, model.layers[0].ff
    if model.positions != "rotary" or not hasattr(ff, "gate") or attn.b_Q is not None:
        raise ValueError("model must have the Llama family's settings (rotary, SwiGLU, no bias)")
    torch.manual_seed(seed)
    fresh = Decoder(
        model.vocab_size, model.max_len, model.d_model, len(model.layers), attn.n_heads,
        n_kv_heads=attn.n_kv_heads, d_head=attn.d_key, d_ff=ff.gate.out_features,
        positions="rotary", mlp="swiglu", norm="rms", norm_eps=model.norm.eps, bias=False,
        tie_embeddings=model.unembed.weight is model.embed.weight, rope_base=attn.rope_base,
    )  # fmt: skip
    return fresh.to(_device(model)).eval()


@torch.no_grad()
def decode_timings(
    model: Decoder, contexts: Sequence[int], *, steps: int = 4, rounds: int = 3, seed: int = 0
) -> dict[str, object]:
    """Seconds per decoding step of one sequence with ``n`` tokens in the cache, for each
    ``n`` of ``contexts``, and this machine's memory bandwidth, measured in interleaved rounds
    (a slow moment of the machine hits every measurement alike) and reported as medians.

    The cache is filled with random keys and values (a step's time does not depend on their
    values), then ``steps`` tokens are decoded one at a time. The bandwidth is the bytes that
    copying a buffer as large as the model's weights reads and writes, per second. Timings
    are measured, never asserted: they depend on the machine and on what else runs on it.

    Shapes: none -> {"step_seconds": {n: s}, "bandwidth": bytes per second, "weight_bytes"}.
    """
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be a Decoder, got {type(model).__name__}")
    if isinstance(contexts, (str, bytes)) or not isinstance(contexts, Sequence) or not contexts:
        raise TypeError("contexts must be a non-empty list of cache lengths")
    for k, n in enumerate(contexts):
        check_int(f"contexts[{k}]", n, 1, model.max_len - steps)  # room for the steps
    check_positive_int("steps", steps)
    check_positive_int("rounds", rounds)
    device, p = _device(model), next(model.parameters())
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    src = torch.empty(weight_bytes // 4, device=device).uniform_()
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch: the pages are mapped before any timing
    shape = model.cache_shape()
    g = torch.Generator(device=device).manual_seed(seed)
    times: dict[int, list[float]] = {n: [] for n in contexts}
    copies: list[float] = []

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        dst.copy_(src)
        sync()
        copies.append(time.perf_counter() - start)
        for n in contexts:
            cache = model.new_cache()
            size = (1, shape["n_kv_heads"], n, shape["d_head"])
            for c in cache:
                c.append(
                    k=torch.randn(size, generator=g, device=device, dtype=p.dtype),
                    v=torch.randn(size, generator=g, device=device, dtype=p.dtype),
                )
            token = torch.zeros(1, 1, dtype=torch.long, device=device)
            model(token, None, cache)  # one untimed step
            sync()
            start = time.perf_counter()
            for _ in range(steps):
                model(token, None, cache)
            sync()
            times[n].append((time.perf_counter() - start) / steps)
    return {
        "step_seconds": {n: statistics.median(t) for n, t in times.items()},
        "bandwidth": 2 * src.numel() * src.element_size() / statistics.median(copies),
        "weight_bytes": weight_bytes,
    }
