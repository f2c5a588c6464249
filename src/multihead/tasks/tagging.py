"""A cheap relative of the translation model for sweeps: an encoder that tags every source
word of the translation corpus with its dependency relation.

Which relation a noun has (subject, object or object of a preposition) is exactly what the
translation needs to choose the case particle, and it is not visible in the noun itself, so
the encoder's heads must look at the context. An encoder-only tagger trains several times
faster than the encoder-decoder, which lets the head-diversity chapter train one model per
setting (number of heads, depth, seed, init scheme). Each trained tagger is cached with
``multihead.core.train.cached_train``; ``build_tagger`` rebuilds the exact untrained start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_int
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.ensemble import stack_seeds
from multihead.core.ensemble_train import seed_cross_entropy, train_seeds
from multihead.core.model import EncoderModel
from multihead.core.runtime import device as default_device
from multihead.core.train import IGNORE, History, cached_train, checkpoint_path, train
from multihead.tasks.corpus import RELATIONS, Corpus, Sentence, gold_tensors
from multihead.tasks.translation import PAD_ID, encode, stack_internals


@dataclass(frozen=True)
class TaggingData:
    """Source token ids and relation labels (``IGNORE`` at padding).

    Shapes: src (n, seq), labels (n, seq).
    """

    src: Tensor
    labels: Tensor

    @property
    def real_tokens(self) -> Tensor:
        """True at real tokens (every query a tagger is scored on). Shapes: (n, seq)."""
        return self.src != PAD_ID


def tagging_data(corpus: Corpus, sentences: tuple[Sentence, ...] | list[Sentence]) -> TaggingData:
    """Encode ``sentences`` for the relation tagger.

    Shapes: n sentences -> TaggingData(src (n, max_len), labels (n, max_len)).
    """
    enc = encode(corpus, sentences)  # checks corpus and sentences
    rels = gold_tensors(sentences, enc.src.shape[1])["rels"]
    labels = rels.masked_fill(rels < 0, IGNORE)  # (n, seq)
    return TaggingData(enc.src, labels)


def tagger_config(corpus: Corpus, **sizes: object) -> ModelConfig:
    """A ``ModelConfig`` whose vocabulary and classes fit the corpus; ``sizes`` set the rest.

    Shapes: none.
    """
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus, got {type(corpus).__name__}")
    sizes.setdefault("max_len", 32)
    return ModelConfig(vocab_size=len(corpus.src_vocab), n_classes=len(RELATIONS), **sizes)


def build_tagger(cfg: ModelConfig, seed: int) -> EncoderModel:
    """The untrained tagger: seeding torch with ``seed`` first makes the init reproducible,
    so this is exactly the start from which ``train_tagger`` trains with the same seed.

    Shapes: none.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    torch.manual_seed(seed)
    return EncoderModel(cfg)


def tagging_sampler(data: TaggingData):
    """A ``sample(batch_size, generator)`` drawing random rows of ``data`` (for ``train``).

    Shapes: sample(b, g) -> (src (b, seq), labels (b, seq)), trimmed to the longest row.
    """
    if not isinstance(data, TaggingData):
        raise TypeError(f"data must be TaggingData (tagging_data), got {type(data).__name__}")

    def sample(batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        idx = torch.randint(len(data.src), (batch_size,), generator=generator)
        src, labels = data.src[idx], data.labels[idx]  # (batch, seq)
        n = int((src != PAD_ID).sum(1).max())  # drop all-padding columns
        return src[:, :n], labels[:, :n]

    return sample


def tagging_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Cross-entropy of the relation of every real token.

    Shapes: batch = (src (batch, seq), labels (batch, seq)) -> scalar.
    """
    src, labels = batch
    logits = model(src, key_padding_mask=src == PAD_ID)  # (batch, seq, relations)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)


def tagging_seed_loss(ensemble: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """``tagging_loss`` for every seed of a ``SeedEnsemble`` (``core.ensemble``); train it
    with ``train_seeds(..., pad=TAGGING_PAD)``.

    Shapes: batch = (src (K, batch, seq), labels (K, batch, seq)) -> (K,).
    """
    src, labels = batch
    return seed_cross_entropy(ensemble(src, key_padding_mask=src == PAD_ID), labels)


TAGGING_PAD = (PAD_ID, IGNORE)  # how the seeds' batches (src, labels) are padded to one length


def train_tagger(
    corpus: Corpus,
    train_data: TaggingData,
    cfg: ModelConfig,
    train_cfg: TrainConfig,
    *,
    name: str = "relation_tagger",
    progress: bool = False,
) -> EncoderModel:
    """Train a tagger from ``build_tagger(cfg, train_cfg.seed)`` (or load it from the cache).

    Shapes: none.
    """
    if not isinstance(train_data, TaggingData):
        raise TypeError(f"train_data must be TaggingData, got {type(train_data).__name__}")
    if not isinstance(train_cfg, TrainConfig):
        raise TypeError(f"train_cfg must be a TrainConfig, got {type(train_cfg).__name__}")
    model = build_tagger(cfg, train_cfg.seed)

    def run():
        return train(
            model,
            tagging_sampler(train_data),
            train_cfg,
            loss_fn=tagging_loss,
            progress=progress,
            desc=f"tagger {cfg.n_layers}x{cfg.n_heads} {cfg.init}",
        )

    cached_train(name, model, _cache_key(corpus, train_data, cfg, train_cfg), run)
    return model.eval()


def _cache_key(corpus: Corpus, data: TaggingData, cfg: ModelConfig, train_cfg: TrainConfig):
    sizes = (len(corpus.train), len(corpus.valid), len(corpus.test))
    key = ("relation_tagger", sizes, corpus.seed, corpus.config, tuple(data.src.shape))
    return key + (cfg, train_cfg)


def train_taggers(
    corpus: Corpus,
    train_data: TaggingData,
    cfg: ModelConfig,
    train_cfg: TrainConfig,
    seeds: Sequence[int],
    *,
    name: str = "relation_tagger",
    progress: bool = False,
) -> list[EncoderModel]:
    """One tagger per seed, the seeds trained together as one batched model
    (``core.ensemble``), each kept in the checkpoint cache under ``name``.

    Seed ``s`` is the tagger ``train_tagger`` trains with ``train_cfg.seed = s`` (the start
    ``build_tagger(cfg, s)`` and its own batch order; equal to that run to about 1e-5, not
    bitwise), and it shares that run's cache entry. Only the seeds missing from the cache are
    trained. ``train_cfg.seed`` itself is ignored.

    Shapes: none.
    """
    if not isinstance(train_data, TaggingData):
        raise TypeError(f"train_data must be TaggingData, got {type(train_data).__name__}")
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    if not isinstance(train_cfg, TrainConfig):
        raise TypeError(f"train_cfg must be a TrainConfig, got {type(train_cfg).__name__}")
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise TypeError(f"seeds must be a non-empty list of ints, got {seeds!r}")
    seeds = [check_int(f"seeds[{i}]", s, 0) for i, s in enumerate(seeds)]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds={seeds} repeats a seed; each seed must be different")
    keys = {s: _cache_key(corpus, train_data, cfg, replace(train_cfg, seed=s)) for s in seeds}
    missing = [s for s in seeds if not checkpoint_path(name, keys[s]).exists()]
    trained: dict[int, tuple[nn.Module, History]] = {}
    if missing:
        ensemble = stack_seeds(lambda seed: EncoderModel(cfg), missing)
        histories = train_seeds(
            ensemble,
            tagging_sampler(train_data),
            train_cfg,
            loss_fn=tagging_seed_loss,
            pad=TAGGING_PAD,
            progress=progress,
            desc=f"taggers {cfg.n_layers}x{cfg.n_heads} {cfg.init} ({len(missing)} seeds)",
        )
        trained = {s: (ensemble.pick(k), histories[k]) for k, s in enumerate(missing)}
    models = []
    for seed in seeds:
        model = EncoderModel(cfg)

        def copy_trained(model: nn.Module = model, seed: int = seed) -> History:
            picked, history = trained[seed]
            model.load_state_dict(picked.state_dict())
            return history

        cached_train(name, model, keys[seed], copy_trained)
        models.append(model.to(default_device()).eval())
    return models


@torch.no_grad()
def tagger_accuracy(model: EncoderModel, data: TaggingData) -> float:
    """Fraction of real tokens whose relation the tagger gets right.

    Shapes: none.
    """
    model.eval()
    dev = next(model.parameters()).device
    src, labels = data.src.to(dev), data.labels.to(dev)
    pred = model(src, key_padding_mask=src == PAD_ID).argmax(-1)  # (n, seq)
    keep = labels != IGNORE
    return (pred[keep] == labels[keep]).float().mean().item()


@torch.no_grad()
def tagger_patterns(model: EncoderModel, src: Tensor) -> Tensor:
    """Every encoder head's attention pattern on ``src``.

    Shapes: src (batch, seq) -> (layers, batch, heads, seq, seq).
    """
    if not isinstance(model, EncoderModel):
        raise TypeError(f"model must be an EncoderModel, got {type(model).__name__}")
    model.eval()
    return stack_internals(model.encoder, src, ("pattern",))[0]
