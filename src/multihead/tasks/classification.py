"""Sentence classification on the grammar corpus: one label per sentence, read from the gold
parse, predicted by an encoder with a pooled output.

The label asks *which clause holds the direct object*. The corpus is drawn with a relative
clause on every subject (``classification_corpus``), and only sentences with exactly one
transitive verb are kept: either the main verb takes the object ("the dog that sleeps sees a
cat", label 1) or the relative-clause verb does ("the dog that sees a cat sleeps", label 0).
The grammar draws the two verbs independently from the same distribution and makes both agree
with the subject, so swapping which verb is transitive leaves the multiset of words unchanged:
the words occurring in a sentence carry no information about its label, and any bag-of-words
classifier is at chance by construction (``bag_of_words``). The label depends on word *order*
(is the object right after the verb that follows "that"?), which the model must get from
attention and the positions.

The pooled output is the mean over real tokens of ``EncoderModel``'s per-token logits. The
model's head is affine, so this equals the head applied to the mean-pooled final states: a
mean-pooled classifier that is still a plain ``EncoderModel``, which the batched seed ensemble
(``core.ensemble``) trains and the checkpoint cache keeps unchanged. Mean pooling, rather than a
``[CLS]``-style first token, lets every token contribute its own evidence: with a first-token
read-out the first position would have to gather the evidence through attention alone.

Shapes: src (n, seq) token ids, labels (n,) in {0, 1}; logits (n, 2).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_int, check_positive_int
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.ensemble import stack_seeds
from multihead.core.ensemble_train import seed_cross_entropy, train_seeds
from multihead.core.model import EncoderModel
from multihead.core.train import History, cached_train
from multihead.tasks.corpus import Corpus, GrammarConfig, Sentence, make_corpus
from multihead.tasks.seed_scores import SeedScores, seed_history
from multihead.tasks.translation import PAD_ID, encode

LABELS = ("object in the relative clause", "object in the main clause")
# Every subject gets a relative clause; half the verbs are transitive, so half the sentences
# have exactly one transitive verb. Sentences of at most 16 tokens keep the sweep cheap.
CLASSIFICATION_GRAMMAR = GrammarConfig(p_relative=1.0, p_transitive=0.5, max_len=16)


def classification_corpus(n: int, seed: int = 0) -> Corpus:
    """The grammar corpus with a relative clause on every subject (``CLASSIFICATION_GRAMMAR``);
    about half its sentences get a label (``object_clause``).

    Shapes: none.
    """
    check_positive_int("n", n)
    return make_corpus(n, seed, config=CLASSIFICATION_GRAMMAR)


def object_clause(sentence: Sentence) -> int | None:
    """1 if the sentence's only direct object belongs to the main verb, 0 if it belongs to
    the relative-clause verb, ``None`` if the sentence has no relative clause or not exactly
    one direct object (no label).

    Shapes: none.
    """
    if not isinstance(sentence, Sentence):
        raise TypeError(f"sentence must be a Sentence, got {type(sentence).__name__}")
    if "relcl" not in sentence.rels:
        return None
    objects = [sentence.heads[i] for i, r in enumerate(sentence.rels) if r == "dobj"]
    if len(objects) != 1:
        return None
    return int(sentence.rels[objects[0]] == "root")


@dataclass(frozen=True)
class ClassificationData:
    """Token ids of labelled sentences and their labels.

    Shapes: src (n, seq), labels (n,).
    """

    src: Tensor
    labels: Tensor

    def __len__(self) -> int:
        return len(self.labels)


def classification_data(corpus: Corpus, sentences: Sequence[Sentence]) -> ClassificationData:
    """Encode the sentences of ``sentences`` that have a label (``object_clause``).

    Shapes: n sentences -> ClassificationData(src (m, max_len), labels (m,)), m <= n.
    """
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus, got {type(corpus).__name__}")
    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, Sequence):
        raise TypeError("sentences must be a list of Sentence objects (e.g. corpus.train)")
    labelled = [(s, y) for s in sentences if (y := object_clause(s)) is not None]
    if not labelled:
        raise ValueError(
            "no sentence of sentences has a label: take them from classification_corpus"
        )
    enc = encode(corpus, [s for s, _ in labelled])
    return ClassificationData(enc.src, torch.tensor([y for _, y in labelled]))


def classifier_config(corpus: Corpus, **sizes: object) -> ModelConfig:
    """A ``ModelConfig`` with the corpus's vocabulary and two classes; ``sizes`` set the rest.

    Shapes: none.
    """
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus, got {type(corpus).__name__}")
    for fixed in ("vocab_size", "n_classes"):
        if fixed in sizes:
            raise ValueError(f"{fixed} comes from the corpus and the labels; do not pass it")
    sizes.setdefault("max_len", 32)
    return ModelConfig(vocab_size=len(corpus.src_vocab), n_classes=len(LABELS), **sizes)


def mean_pool(token_logits: Tensor, src: Tensor) -> Tensor:
    """The mean of the per-token logits over the real (non-padding) tokens.

    Shapes: token_logits (..., seq, classes), src (..., seq) -> (..., classes).
    """
    if not isinstance(token_logits, Tensor) or not isinstance(src, Tensor):
        raise TypeError("token_logits and src must be torch.Tensors")
    if token_logits.shape[:-1] != src.shape:
        raise ValueError(
            f"token_logits {tuple(token_logits.shape)} must be src {tuple(src.shape)} "
            "plus a class axis"
        )
    real = (src != PAD_ID).to(token_logits.dtype)[..., None]  # (..., seq, 1)
    if (real.sum(-2) == 0).any():
        raise ValueError("src holds a row of padding only: every sentence needs a token")
    return (token_logits * real).sum(-2) / real.sum(-2)


@torch.no_grad()
def classify(model: EncoderModel, src: Tensor) -> Tensor:
    """The pooled logits of ``model`` on ``src``.

    Shapes: src (n, seq) -> (n, classes).
    """
    if not isinstance(model, EncoderModel):
        raise TypeError(f"model must be an EncoderModel, got {type(model).__name__}")
    model.eval()
    src = src.to(next(model.parameters()).device)
    return mean_pool(model(src, key_padding_mask=src == PAD_ID), src)


def classification_sampler(data: ClassificationData):
    """A ``sample(batch_size, generator)`` drawing random rows of ``data``.

    Shapes: sample(b, g) -> (src (b, seq), labels (b,)), src trimmed to its longest row.
    """
    if not isinstance(data, ClassificationData):
        raise TypeError(f"data must be ClassificationData, got {type(data).__name__}")

    def sample(batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        idx = torch.randint(len(data), (batch_size,), generator=generator)
        src = data.src[idx]  # (batch, seq)
        n = int((src != PAD_ID).sum(1).max())  # drop all-padding columns
        return src[:, :n], data.labels[idx]

    return sample


def classification_seed_loss(ensemble: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Each seed's cross-entropy of the pooled logits against the sentence labels.

    Shapes: batch = (src (K, batch, seq), labels (K, batch)) -> (K,).
    """
    src, labels = batch
    pooled = mean_pool(ensemble(src, key_padding_mask=src == PAD_ID), src)  # (K, batch, 2)
    return seed_cross_entropy(pooled, labels)


CLASSIFICATION_PAD = (PAD_ID, None)  # the seeds' src batches are padded; labels have no seq


@torch.no_grad()
def classifier_scores(model: EncoderModel, data: ClassificationData) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on ``data``.

    Shapes: none.
    """
    if not isinstance(data, ClassificationData):
        raise TypeError(f"data must be ClassificationData, got {type(data).__name__}")
    logits = classify(model, data.src)
    labels = data.labels.to(logits.device)
    loss = F.cross_entropy(logits, labels).item()
    return loss, (logits.argmax(-1) == labels).float().mean().item()


def train_classifiers(
    corpus: Corpus,
    train_data: ClassificationData,
    valid_data: ClassificationData,
    cfg: ModelConfig,
    train_cfg: TrainConfig,
    seeds: Sequence[int],
    *,
    evals: int = 1,
    name: str = "classifier",
    progress: bool = False,
) -> SeedScores:
    """Train ``EncoderModel(cfg)`` for every seed at once (one batched model; seed ``s``
    starts from ``torch.manual_seed(s)`` and draws its own batches) and score each seed on
    ``valid_data`` ``evals`` times, evenly spaced, the last at the end. Seed ``s``'s first
    ``n`` steps are the same in a shorter run, so a short run's scores are those of a longer
    run at the same step. The ensemble and its scores are cached under ``name``.

    Shapes: none.
    """
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus, got {type(corpus).__name__}")
    for arg, value in (("train_data", train_data), ("valid_data", valid_data)):
        if not isinstance(value, ClassificationData):
            raise TypeError(f"{arg} must be ClassificationData, got {type(value).__name__}")
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    if cfg.n_classes != len(LABELS) or cfg.vocab_size != len(corpus.src_vocab):
        raise ValueError(
            "cfg must have the corpus's vocabulary and 2 classes: use classifier_config"
        )
    if not isinstance(train_cfg, TrainConfig):
        raise TypeError(f"train_cfg must be a TrainConfig, got {type(train_cfg).__name__}")
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or len(seeds) < 2:
        raise TypeError(f"seeds must be a list of at least 2 ints (replicates), got {seeds!r}")
    seeds = tuple(check_int(f"seeds[{i}]", s, 0) for i, s in enumerate(seeds))
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds={list(seeds)} repeats a seed; each seed must be different")
    evals = check_int("evals", evals, 1, train_cfg.steps + 1)
    if train_cfg.steps % evals:
        raise ValueError(f"evals={evals} must divide train_cfg.steps={train_cfg.steps}")
    ensemble = stack_seeds(lambda seed: EncoderModel(cfg), seeds)
    run_cfg = replace(train_cfg, eval_every=train_cfg.steps // evals)

    def evaluate(model: nn.Module) -> dict:
        loss, accuracy = classifier_scores(model, valid_data)
        return {"loss": loss, "accuracy": accuracy}

    def run() -> History:
        return seed_history(
            train_seeds(
                ensemble,
                classification_sampler(train_data),
                run_cfg,
                loss_fn=classification_seed_loss,
                pad=CLASSIFICATION_PAD,
                evaluate=evaluate,
                progress=progress,
                desc=f"classifiers {cfg.n_heads} heads {cfg.attention} ({len(seeds)} seeds)",
            )
        )

    sizes = (len(corpus.train), len(corpus.valid), len(corpus.test))
    data_key = (tuple(train_data.src.shape), int(train_data.labels.sum()))
    data_key += (tuple(valid_data.src.shape), int(valid_data.labels.sum()))
    key = ("classifier", sizes, corpus.seed, corpus.config, data_key, cfg, run_cfg, seeds)
    key += (_source_digest(),)  # this module is not among core.train's TRAINING_MODULES
    history = cached_train(name, ensemble, key, run)
    return SeedScores.from_history(seeds, history)


def _source_digest() -> str:
    """A hash of this module's source: editing the task or its loss retrains the models."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def bag_of_words(data: ClassificationData, vocab_size: int) -> Tensor:
    """How often each word occurs in each sentence (padding not counted): the features of a
    bag-of-words classifier, which sees which words occur and not in which order.

    Shapes: data.src (n, seq) -> counts (n, vocab_size).
    """
    if not isinstance(data, ClassificationData):
        raise TypeError(f"data must be ClassificationData, got {type(data).__name__}")
    vocab_size = check_positive_int("vocab_size", vocab_size)
    if int(data.src.max()) >= vocab_size:
        raise ValueError(
            f"data holds token id {int(data.src.max())}, not below vocab_size={vocab_size}"
        )
    counts = torch.zeros(len(data), vocab_size)
    counts.scatter_add_(1, data.src, torch.ones(data.src.shape))
    counts[:, PAD_ID] = 0.0
    return counts
