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
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_int
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import EncoderModel
from multihead.core.train import IGNORE, train_seeds
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


def build_tagger(model_config: ModelConfig, seed: int) -> EncoderModel:
    """The untrained tagger: seeding torch with ``seed`` first makes the init reproducible,
    so this is exactly the start from which ``train_taggers`` trains seed ``seed``.

    Shapes: none.
    """
    if not isinstance(model_config, ModelConfig):
        raise TypeError(f"model_config must be a ModelConfig, got {type(model_config).__name__}")
    torch.manual_seed(check_int("seed", seed, 0))
    return EncoderModel(model_config)


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


def train_taggers(
    seeds: Sequence[int],
    corpus: Corpus,
    train_data: TaggingData,
    model_config: ModelConfig,
    train_config: TrainConfig,
    *,
    name: str = "relation_tagger",
    progress: bool = False,
) -> list[EncoderModel]:
    """One tagger per seed (``core.train.train_seeds``): seed ``s`` starts from
    ``build_tagger(model_config, s)`` and draws its own batches (``train_config.seed`` is
    replaced by ``s``); each is kept in the checkpoint cache under ``name``.

    Shapes: none.
    """
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus, got {type(corpus).__name__}")
    if not isinstance(train_data, TaggingData):
        raise TypeError(f"train_data must be TaggingData, got {type(train_data).__name__}")
    if not isinstance(model_config, ModelConfig):
        raise TypeError(f"model_config must be a ModelConfig, got {type(model_config).__name__}")
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    sizes = (len(corpus.train), len(corpus.valid), len(corpus.test))
    key = ("relation_tagger", sizes, corpus.seed, corpus.config, tuple(train_data.src.shape))
    models, _ = train_seeds(
        seeds, lambda seed: build_tagger(model_config, seed), tagging_sampler(train_data),
        train_config, loss_fn=tagging_loss, progress=progress, cache=name,
        key=(*key, model_config),
        desc=f"tagger {model_config.n_layers}x{model_config.n_heads} {model_config.init}",
    )  # fmt: skip
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
