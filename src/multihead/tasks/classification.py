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
mean-pooled classifier that is still a plain ``EncoderModel``, which ``core.train`` trains and
the checkpoint cache keeps unchanged. Mean pooling, rather than a
``[CLS]``-style first token, lets every token contribute its own evidence: with a first-token
read-out the first position would have to gather the evidence through attention alone.

Shapes: src (n, seq) token ids, labels (n,) in {0, 1}; logits (n, 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_int, check_positive_int
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.model import EncoderModel
from multihead.core.train import train_seeds
from multihead.tasks.corpus import Corpus, GrammarConfig, Sentence, make_corpus
from multihead.tasks.seed_scores import SeedScores
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


@torch.no_grad()
def classifier_scores(model: EncoderModel, data: ClassificationData) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on ``data``.

    Shapes: none.
    """
    if not isinstance(data, ClassificationData):
        raise TypeError(f"data must be ClassificationData, got {type(data).__name__}")
    per_sentence, accuracy = _sentence_scores(model, data)
    return per_sentence.mean().item(), accuracy


def _sentence_scores(model: nn.Module, data: ClassificationData) -> tuple[Tensor, float]:
    """Each sentence's cross-entropy and the accuracy. The mean loss is always taken from
    these, so that a model scores the same bits wherever it is scored (the cross-entropy's
    own mean adds in another order).

    Shapes: -> (sentences,), float.
    """
    logits = classify(model, data.src)
    labels = data.labels.to(logits.device)
    per = F.cross_entropy(logits, labels, reduction="none")  # (sentences,)
    return per, (logits.argmax(-1) == labels).float().mean().item()


def classification_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Cross-entropy of the pooled logits against the sentence labels.

    Shapes: batch = (src (batch, seq), labels (batch,)) -> scalar.
    """
    src, labels = batch
    pooled = mean_pool(model(src, key_padding_mask=src == PAD_ID), src)  # (batch, 2)
    return F.cross_entropy(pooled, labels)


def train_classifiers(
    seeds: Sequence[int],
    corpus: Corpus,
    train_data: ClassificationData,
    valid_data: ClassificationData,
    model_config: ModelConfig,
    train_config: TrainConfig,
    *,
    evals: int = 1,
    name: str = "classifier",
    progress: bool = False,
) -> SeedScores:
    """Train ``EncoderModel(model_config)`` once per seed (``core.train.train_seeds``: seed
    ``s`` starts from ``torch.manual_seed(s)`` and draws its own batches) and score each seed
    on ``valid_data`` ``evals`` times, evenly spaced, the last at the end. Seed ``s``'s first
    ``n`` steps are the same in a shorter run, so a short run's scores are those of a longer
    run at the same step. Each seed's model and scores are cached under ``name``.

    Shapes: none.
    """
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus, got {type(corpus).__name__}")
    for arg, value in (("train_data", train_data), ("valid_data", valid_data)):
        if not isinstance(value, ClassificationData):
            raise TypeError(f"{arg} must be ClassificationData, got {type(value).__name__}")
    if not isinstance(model_config, ModelConfig):
        raise TypeError(f"model_config must be a ModelConfig, got {type(model_config).__name__}")
    if model_config.n_classes != len(LABELS) or model_config.vocab_size != len(corpus.src_vocab):
        raise ValueError(
            "model_config must have the corpus's vocabulary and 2 classes: use classifier_config"
        )
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    evals = check_int("evals", evals, 1, train_config.steps + 1)
    if train_config.steps % evals:
        raise ValueError(f"evals={evals} must divide train_config.steps={train_config.steps}")
    run_cfg = replace(train_config, eval_every=train_config.steps // evals)

    def evaluate(model: nn.Module) -> dict:
        per, accuracy = _sentence_scores(model, valid_data)  # each sentence's, for verdicts
        return {"loss": per.mean().item(), "accuracy": accuracy, "example_loss": per.tolist()}

    sizes = (len(corpus.train), len(corpus.valid), len(corpus.test))
    data_key = (tuple(train_data.src.shape), int(train_data.labels.sum()))
    data_key += (tuple(valid_data.src.shape), int(valid_data.labels.sum()))
    _, histories = train_seeds(
        seeds, lambda seed: EncoderModel(model_config), classification_sampler(train_data),
        run_cfg, loss_fn=classification_loss, evaluate=evaluate, progress=progress,
        desc=f"classifier {model_config.n_heads} heads {model_config.attention}", cache=name,
        key=("classifier", sizes, corpus.seed, corpus.config, data_key, model_config),
    )  # fmt: skip
    return SeedScores.from_histories(seeds, histories)


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
