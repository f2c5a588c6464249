"""The translation model of the head-roles chapter: tensors, training, evaluation, probes.

``train_translation_models(seeds)`` builds the corpus of ``multihead.tasks.corpus``, trains
an ``EncoderDecoder`` on it for every seed and keeps the checkpoints in the cache
(``multihead.core.train.cached_train``), so later chapters load the same models instead of
retraining them. The helpers below read the encoder's attention patterns and per-head outputs
and ablate heads one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_positive_int
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.hooks import run_with_cache, stack_layers
from multihead.core.model import EncoderDecoder
from multihead.core.runtime import pick, side_by_side
from multihead.core.train import IGNORE, History, checkpoint_path, train_seeds
from multihead.tasks.corpus import Corpus, GrammarConfig, Sentence, make_corpus

PAD_ID, BOS_ID = 0, 1


@dataclass(frozen=True)
class Encoded:
    """A split as padded tensors. ``src`` ends with the end token; ``tgt`` starts with ``<s>``.

    Shapes: src (n, src_len), tgt (n, tgt_len + 1), both padded with 0.
    """

    src: Tensor
    tgt: Tensor

    @property
    def src_padding_mask(self) -> Tensor:
        """True at padding. Shapes: (n, src_len)."""
        return self.src == PAD_ID


def encode(corpus: Corpus, sentences: tuple[Sentence, ...] | list[Sentence]) -> Encoded:
    """Token ids of ``sentences`` in ``corpus``'s vocabularies, padded to the longest.

    Shapes: n sentences -> Encoded(src (n, max_src), tgt (n, 1 + max_tgt)).
    """
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus, got {type(corpus).__name__}")
    if len(sentences) == 0:
        raise ValueError("sentences is empty; pass at least one Sentence")
    s_id = {w: i for i, w in enumerate(corpus.src_vocab)}
    t_id = {w: i for i, w in enumerate(corpus.tgt_vocab)}
    n = len(sentences)
    src = torch.zeros(n, max(len(s) for s in sentences), dtype=torch.long)
    tgt = torch.zeros(n, 1 + max(len(s.target) for s in sentences), dtype=torch.long)
    for i, s in enumerate(sentences):
        src[i, : len(s)] = torch.tensor([s_id[w] for w in s.words])
        tgt[i, : 1 + len(s.target)] = torch.tensor([BOS_ID] + [t_id[w] for w in s.target])
    return Encoded(src, tgt)


def trim(src: Tensor, tgt: Tensor) -> tuple[Tensor, Tensor]:
    """Cut the columns that are padding in every row (saves compute on short batches).

    Shapes: src (..., batch, S), tgt (..., batch, T + 1) -> the same, with fewer columns.
    """
    s_len = int((src != PAD_ID).sum(-1).max())
    t_len = int((tgt != PAD_ID).sum(-1).max())
    return src[..., :s_len], tgt[..., :t_len]


def seq2seq_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Teacher-forced cross-entropy of the next target token, padding ignored.

    Shapes: batch = (src (batch, S), tgt (batch, T + 1)) -> scalar.
    """
    src, tgt = batch
    logits = model(src, tgt[:, :-1], src_padding_mask=src == PAD_ID)  # (batch, T, vocab)
    gold = tgt[:, 1:].masked_fill(tgt[:, 1:] == PAD_ID, IGNORE)  # (batch, T)
    return F.cross_entropy(logits.flatten(0, 1), gold.flatten(), ignore_index=IGNORE)


class _Rows:
    """Random rows of ``data``: a class rather than a closure, so that it can go to a worker
    process (``runtime.side_by_side``)."""

    def __init__(self, data: Encoded):
        self.data = data

    def __call__(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        idx = torch.randint(len(self.data.src), (batch_size,), generator=generator)
        return trim(self.data.src[idx], self.data.tgt[idx])


def sampler(data: Encoded):
    """A ``sample(batch_size, generator)`` drawing random rows of ``data`` (for ``train``).

    Shapes: sample(b, g) -> (src (b, S), tgt (b, T + 1)), trimmed to the longest row.
    """
    return _Rows(data)


def batches(data: Encoded, batch_size: int = 500, device: torch.device | None = None):
    """The rows of ``data`` in order, ``batch_size`` at a time, trimmed, on ``device``.

    Shapes: -> (src (b, S), tgt (b, T + 1)) per batch.
    """
    check_positive_int("batch_size", batch_size)
    if not isinstance(data, Encoded):
        raise TypeError(f"data must be an Encoded (translation.encode), got {type(data).__name__}")
    for start in range(0, len(data.src), batch_size):
        src, tgt = trim(data.src[start : start + batch_size], data.tgt[start : start + batch_size])
        yield (src, tgt) if device is None else (src.to(device), tgt.to(device))


def run_batch(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """The model's teacher-forced logits on one batch (the gold prefix as decoder input).

    Shapes: batch = (src (b, S), tgt (b, T + 1)) -> (b, T, vocab).
    """
    src, tgt = batch
    return model(src, tgt[:, :-1], src_padding_mask=src == PAD_ID)


def per_sentence_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Teacher-forced cross-entropy of each sentence, averaged over its own target tokens.

    Shapes: batch = (src (b, S), tgt (b, T + 1)) -> (b,).
    """
    logits = run_batch(model, batch)  # (b, T, vocab)
    gold = batch[1][:, 1:]  # (b, T)
    keep = (gold != PAD_ID).to(logits.dtype)
    ce = F.cross_entropy(logits.transpose(1, 2), gold, reduction="none")  # (b, T)
    return (ce * keep).sum(1) / keep.sum(1).clamp_min(1)


def confidence_queries(path: str, batch: tuple[Tensor, Tensor]) -> Tensor:
    """The queries that count for a head's confidence in the attention module at ``path``:
    real source tokens (encoder), real target inputs (cross-attention), and real target
    inputs but the first in decoder self-attention (it can only see itself).

    Shapes: batch = (src (b, S), tgt (b, T + 1)) -> (b, S) or (b, T) bool, True = counted.
    """
    src, tgt = batch
    kind = attention_kind(path)
    if kind == "encoder":
        return src != PAD_ID
    queries = tgt[:, :-1] != PAD_ID
    if kind == "decoder":
        queries = queries.clone()
        queries[:, 0] = False
    return queries


def attention_kind(path: str) -> str:
    """``"encoder"`` (self), ``"decoder"`` (self) or ``"cross"`` for an attention path of an
    ``EncoderDecoder`` (``encoder.layers.{i}.attn``, ``decoder.layers.{i}.attn``,
    ``decoder.layers.{i}.cross_attn``). Shapes: none."""
    stack, _, rest = path.partition(".layers.")
    kind = "cross" if rest.endswith(".cross_attn") else stack
    if kind not in ("encoder", "decoder", "cross") or not rest:
        raise ValueError(f"path={path!r} is not an attention path of an EncoderDecoder")
    return kind


def count_heads(masks: dict[str, Tensor]) -> dict[str, int]:
    """Kept heads per attention type: ``encoder`` (self), ``decoder`` (self), ``cross``.

    Shapes: masks {path: (heads,)} -> {type: int}.
    """
    out = {"encoder": 0, "decoder": 0, "cross": 0}
    for name, mask in masks.items():
        out[attention_kind(name)] += int((mask != 0).sum())
    return out


def encoder_paths(model: EncoderDecoder) -> list[str]:
    """The paths of the encoder's self-attention modules, layer by layer. Shapes: none."""
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
    return [f"encoder.layers.{i}.attn" for i in range(len(model.encoder.layers))]


def by_length(data: Encoded) -> Encoded:
    """The sentences of ``data`` from the shortest to the longest (source plus target), so
    that batches taken in order are trimmed near their sentences' own length.

    Shapes: src (n, S), tgt (n, T + 1) -> the same, rows reordered.
    """
    if not isinstance(data, Encoded):
        raise TypeError(f"data must be an Encoded (translation.encode), got {type(data).__name__}")
    order = ((data.src != PAD_ID).sum(1) + (data.tgt != PAD_ID).sum(1)).argsort(stable=True)
    return Encoded(data.src[order], data.tgt[order])


@torch.no_grad()
def teacher_forced(model: nn.Module, data: Encoded, batch_size: int = 500) -> dict[str, float]:
    """Loss and next-token accuracy with the gold prefix given (cheap; used for ablations).

    The sentences go through in order of length (the sums are the same up to rounding), so
    that each batch is trimmed to a length near its sentences' own.

    Shapes: data of n sentences -> {"loss": float, "token_acc": float}.
    """
    model.eval()
    dev = next(model.parameters()).device
    data = by_length(data)
    total, correct, count = 0.0, 0, 0
    for src, tgt in batches(data, batch_size, dev):
        logits = run_batch(model, (src, tgt))
        gold = tgt[:, 1:]
        keep = gold != PAD_ID
        total += F.cross_entropy(logits[keep], gold[keep], reduction="sum").item()
        correct += (logits.argmax(-1)[keep] == gold[keep]).sum().item()
        count += int(keep.sum())
    return {"loss": total / count, "token_acc": correct / count}


@torch.no_grad()
def greedy_accuracy(model: EncoderDecoder, data: Encoded, batch_size: int = 500) -> dict:
    """Exact-match scores of greedy decoding: token accuracy (position by position against
    the reference, end token included) and sentence accuracy (every token right).

    Sentences are decoded in order of length, as in ``teacher_forced``.

    Shapes: data of n sentences -> {"token_acc": float, "sentence_acc": float}.
    """
    model.eval()
    dev = next(model.parameters()).device
    data = by_length(data)
    right_tokens, n_tokens, right_sentences = 0, 0, 0
    for src, tgt in batches(data, batch_size, dev):
        gold = tgt[:, 1:]  # (batch, T)
        out = model.greedy_decode(src, BOS_ID, gold.shape[1], src_padding_mask=src == PAD_ID)
        keep = gold != PAD_ID
        hit = (out == gold) & keep
        right_tokens += int(hit.sum())
        n_tokens += int(keep.sum())
        right_sentences += int((hit | ~keep).all(dim=1).sum())
    return {"token_acc": right_tokens / n_tokens, "sentence_acc": right_sentences / len(data.src)}


@dataclass
class TranslationSetup:
    """Everything a chapter needs: the corpus, its tensors, the trained model, its history."""

    corpus: Corpus
    train: Encoded
    valid: Encoded
    test: Encoded
    model: EncoderDecoder
    history: History
    model_config: ModelConfig
    train_config: TrainConfig


def default_configs(corpus: Corpus) -> tuple[ModelConfig, TrainConfig]:
    """The chapter's sizes: 3+3 layers of 4 heads, d_model 64 in full mode; smaller in fast.

    Shapes: none.
    """
    model_cfg = ModelConfig(
        vocab_size=len(corpus.src_vocab),
        n_classes=len(corpus.tgt_vocab),
        d_model=pick(full=64, fast=48),
        n_heads=4,
        n_layers=pick(full=3, fast=2),
        n_decoder_layers=pick(full=3, fast=2),
        d_ff=pick(full=128, fast=96),
        max_len=32,
    )
    train_cfg = TrainConfig(
        steps=pick(full=800, fast=400), batch_size=64, lr=3e-3, warmup=100, seed=0
    )
    return model_cfg, train_cfg


def translation_corpus(
    n_sentences: int | None = None, seed: int = 0, grammar: GrammarConfig | None = None
) -> Corpus:
    """The chapter's corpus: 20000 sentences in full mode, 6000 in fast mode.

    Shapes: none.
    """
    n = pick(full=20000, fast=6000) if n_sentences is None else n_sentences
    return make_corpus(n, seed, config=grammar)


def _setup_configs(
    corpus: Corpus | None, model_config: ModelConfig | None, train_config: TrainConfig | None
) -> tuple[Corpus, ModelConfig, TrainConfig]:
    corpus = translation_corpus() if corpus is None else corpus
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus (make_corpus), got {type(corpus).__name__}")
    model_default, train_default = default_configs(corpus)
    model_cfg = model_config or model_default
    train_cfg = train_config or train_default
    if not isinstance(model_cfg, ModelConfig) or not isinstance(train_cfg, TrainConfig):
        raise TypeError("model_config must be a ModelConfig and train_config a TrainConfig")
    if model_cfg.vocab_size < len(corpus.src_vocab) or (model_cfg.n_classes or 0) < len(
        corpus.tgt_vocab
    ):
        raise ValueError(
            f"model_config needs vocab_size >= {len(corpus.src_vocab)} and n_classes >= "
            f"{len(corpus.tgt_vocab)} for this corpus; start from default_configs(corpus)"
        )
    return corpus, model_cfg, train_cfg


def train_translation_models(
    seeds: Sequence[int],
    corpus: Corpus | None = None,
    model_config: ModelConfig | None = None,
    train_config: TrainConfig | None = None,
    *,
    name: str = "roles_translation",
    progress: bool = False,
    on_step: Callable[[nn.Module, int], None] | None = None,
    on_step_key: object = None,
    eval_split: str | None = None,
    workers: int = 1,
) -> list[TranslationSetup]:
    """The chapter's translation model, trained once per seed (``core.train.train_seeds``; with
    ``workers > 1``, the seeds missing from the cache side by side, ``train_translation_arms``)
    and kept in the checkpoint cache, so later chapters load the same models.

    ``corpus`` defaults to ``translation_corpus()``; the sizes default to
    ``default_configs(corpus)``, which follow the mode. Seed ``s`` starts from
    ``torch.manual_seed(s)`` and draws its own batches (``train_config.seed`` is replaced by
    ``s``). The checkpoint key covers the corpus (size, seed, grammar) and both configs, so
    a changed setting trains afresh. ``on_step(model, step)`` runs before every training
    step (e.g. ``interventions.drophead.drophead_schedule``); ``on_step_key`` must then
    describe it (it joins the checkpoint key). With ``eval_split`` (``"valid"``, say) and
    ``train_config.eval_every > 0``, each history's ``evals`` hold the teacher-forced loss and
    token accuracy on that split every ``eval_every`` steps (a learning curve).

    Shapes: none (one ``TranslationSetup`` per seed).
    """
    if on_step is not None and on_step_key is None:
        raise ValueError("on_step needs on_step_key, a description of it for the checkpoint key")
    if check_positive_int("workers", workers) > 1:
        kwargs = {"model_config": model_config, "train_config": train_config, "name": name,
                  "progress": progress, "on_step": on_step, "on_step_key": on_step_key,
                  "eval_split": eval_split}  # fmt: skip
        corpus = translation_corpus() if corpus is None else corpus
        return train_translation_arms({name: kwargs}, seeds, corpus, workers=workers)[name]
    if eval_split not in (None, "train", "valid", "test"):
        raise ValueError(f"eval_split={eval_split!r} must be None, 'train', 'valid' or 'test'")
    corpus, model_cfg, train_cfg = _setup_configs(corpus, model_config, train_config)
    data = {split: encode(corpus, corpus.split(split)) for split in ("train", "valid", "test")}
    key = _key(corpus, model_cfg, on_step_key, eval_split)
    evaluate = None if eval_split is None else lambda m: teacher_forced(m, data[eval_split])
    models, histories = train_seeds(
        seeds, lambda seed: EncoderDecoder(model_cfg), sampler(data["train"]), train_cfg,
        loss_fn=seq2seq_loss, evaluate=evaluate, progress=progress, desc="translation model",
        on_step=on_step, cache=name, key=key,
    )  # fmt: skip
    return [
        TranslationSetup(
            corpus,
            data["train"],
            data["valid"],
            data["test"],
            model,
            history,
            model_cfg,
            replace(train_cfg, seed=seed),
        )  # fmt: skip
        for seed, model, history in zip(seeds, models, histories, strict=True)
    ]


def _key(corpus: Corpus, model_cfg: ModelConfig, on_step_key: object, eval_split: str | None):
    sizes = (len(corpus.train), len(corpus.valid), len(corpus.test))
    key = ("translation", sizes, corpus.seed, corpus.config, model_cfg, on_step_key)
    if eval_split is not None:  # the curve is saved with the model: it joins the key
        key += (("evals on", eval_split),)
    return key


def _train_one(corpus: Corpus, job: tuple[int, dict]) -> None:
    seed, kwargs = job
    train_translation_models([seed], corpus, **kwargs)


def train_translation_arms(
    arms: Mapping[str, Mapping], seeds: Sequence[int], corpus: Corpus, *, workers: int = 1,
    **common,
) -> dict[str, list[TranslationSetup]]:  # fmt: skip
    """``train_translation_models(seeds, corpus, **common, **arms[arm])`` for every arm. With
    ``workers > 1``, the (arm, seed) pairs missing from the checkpoint cache are first trained
    in that many processes side by side (``runtime.side_by_side``; each saves its checkpoint)
    and then loaded in order: the same models as one after another, in less time.

    Shapes: none (one list of ``TranslationSetup`` per arm, one per seed).
    """
    check_positive_int("workers", workers)
    if not isinstance(arms, Mapping) or not arms:
        raise TypeError("arms must be a non-empty dict {arm name: train_translation_models kwargs}")
    jobs = []
    for kwargs in arms.values():
        every = {"name": "roles_translation", **common, **kwargs}
        _, model_cfg, train_cfg = _setup_configs(
            corpus, every.get("model_config"), every.get("train_config")
        )
        key = _key(corpus, model_cfg, every.get("on_step_key"), every.get("eval_split"))
        for seed in seeds:
            path = checkpoint_path(every["name"], (key, replace(train_cfg, seed=seed)))
            if not path.exists():
                jobs.append((seed, every))
    if workers > 1 and len(jobs) > 1:
        side_by_side(_train_one, [{"corpus": corpus, "job": job} for job in jobs], workers=workers)
    return {
        arm: train_translation_models(seeds, corpus, **{**common, **kw}) for arm, kw in arms.items()
    }


@torch.no_grad()
def stack_internals(encoder: nn.Module, src: Tensor, hooks: tuple[str, ...]) -> list[Tensor]:
    """Run an encoder stack (``model.encoder``) on padded token ids and return the requested
    hook points (``"pattern"``, ``"z"``, ...) of its self-attention, stacked over layers.

    Shapes: src (batch, seq) -> one (layers, batch, heads, ...) tensor per hook, on the CPU.
    """
    encoder.eval()
    dev = next(encoder.parameters()).device
    src = src.to(dev)
    suffixes = tuple(f"attn.{hook}" for hook in hooks)
    _, cache = run_with_cache(
        encoder, src, key_padding_mask=src == PAD_ID, names_filter=lambda n: n.endswith(suffixes)
    )
    return [stack_layers(cache, f"layers.{{}}.attn.{hook}").cpu() for hook in hooks]


@torch.no_grad()
def encoder_internals(model: EncoderDecoder, src: Tensor) -> tuple[Tensor, Tensor]:
    """The encoder's self-attention patterns and per-head outputs on ``src``.

    Shapes: src (batch, seq) -> pattern (layers, batch, heads, seq, seq),
    z (layers, batch, heads, seq, d_value).
    """
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
    model.eval()
    pattern, z = stack_internals(model.encoder, src, ("pattern", "z"))
    return pattern, z
