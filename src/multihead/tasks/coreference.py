"""Pronouns with gold antecedents: a two-sentence extension of the course grammar.

A source item is a sentence of the grammar (``multihead.tasks.corpus``) followed by a short
second sentence with one pronoun that refers back to a noun of the first:

* a **subject pronoun** (``it`` / ``they``) refers to the first sentence's subject:
  ``the dog that sees a cat sleeps in the barn . it runs .``
* an **object pronoun** (``it`` / ``them``) refers to the first sentence's object (only when
  the main verb has one): ``the dog sees a cat . these foxes like it .``

English pronouns show only the antecedent's number. The target language adds a **noun class**:
every noun has one of ``N_CLASSES`` classes (assigned here, deterministically, from its place
in the noun list) and the target pronoun is one word per (class, number). So the target
pronoun cannot be translated from the pronoun alone, nor from the nearest noun: it needs the
antecedent. Every item carries the gold antecedent's position (``Coref``), and
``coref_tensors`` gives the tensors the criterion of ``multihead.analysis.coreference`` reads.

This module only adds to the grammar: ``corpus``, ``lexicon`` and ``translation`` are
unchanged, so no cached model of the other chapters is touched. ``coref_corpus`` returns an
ordinary ``Corpus`` (with extended vocabularies), which ``translation.encode`` and
``translation.train_translation_models`` take as they are.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from multihead._checks import check_int, check_positive_int, check_probability
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.hooks import run_with_cache, stack_layers
from multihead.core.model import EncoderDecoder
from multihead.core.runtime import pick
from multihead.tasks.corpus import (
    BOS,
    PAD,
    Corpus,
    GrammarConfig,
    Sentence,
    generate_sentence,
)
from multihead.tasks.lexicon import (
    ADJECTIVES,
    CASE,
    DET_TARGET,
    DETERMINERS,
    EOS,
    INTRANSITIVE,
    LEXICON,
    NOUNS,
    REL_MARKER,
    TARGET,
    TRANSITIVE,
    translate,
)
from multihead.tasks.translation import (
    PAD_ID,
    Encoded,
    default_configs,
    train_translation_models,
)

N_CLASSES = 3
NOUN_CLASS = {noun: i % N_CLASSES for i, noun in enumerate(NOUNS)}  # lemma -> class
SUBJECT_PRONOUN = {"sg": "it", "pl": "they"}
OBJECT_PRONOUN = {"sg": "it", "pl": "them"}
# Target pronouns: one per (class, number). Vowel-initial, so never one of the lexicon's
# invented consonant-initial words.
PRONOUN_TARGET = {
    (c, n): stem + ("ri" if n == "pl" else "")
    for c, stem in enumerate(("ema", "ilu", "oko"))
    for n in ("sg", "pl")
}


@dataclass(frozen=True)
class CorefConfig(GrammarConfig):
    """The grammar's probabilities plus the pronoun's: ``p_object_pronoun`` is the chance
    of an object pronoun when the first sentence has a main-clause object. ``max_len`` caps
    the whole item (both sentences) and its translation; ``max_first`` the first sentence.
    """

    p_object_pronoun: float = 0.5
    max_first: int = 14
    max_len: int = 24
    version: str = "coref-1"  # joins the checkpoint key: bump it when the generator changes

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability("p_object_pronoun", self.p_object_pronoun)
        check_int("max_first", self.max_first, self.min_len)


@dataclass(frozen=True)
class Coref:
    """Where the pronoun of an item is and what it refers to: token positions in
    ``sentence.words``, its ``kind`` (``"subject"`` or ``"object"``) and the antecedent's
    class and number."""

    pronoun: int
    antecedent: int
    kind: str
    noun_class: int
    number: str


def noun_class(word: str) -> int:
    """The class of a source noun (singular or plural form). Shapes: none."""
    entry = LEXICON.get(word)
    if entry is None or entry[0] != "NOUN":
        raise ValueError(f"word={word!r} is not a noun of the lexicon")
    return NOUN_CLASS[entry[1]]


def _zipf(rng: random.Random, items: list[str] | tuple[str, ...], s: float) -> str:
    """A word drawn with p(rank r) ~ (r + 1)^-s, as the grammar draws its words."""
    return rng.choices(items, weights=[(r + 1) ** -s for r in range(len(items))])[0]


def _noun_phrase(rng: random.Random, config: CorefConfig, rel: str, start: int):
    """DET ADJ* NOUN of the second sentence at token ``start``: words, heads (absolute,
    the noun's left as -2 for the caller), rels, and the noun's position."""
    number = "pl" if rng.random() < config.p_plural else "sg"
    n_adj = rng.choices(range(3), weights=config.p_adjectives)[0]
    words = [rng.choice(DETERMINERS[number])] + [
        _zipf(rng, ADJECTIVES, config.zipf) for _ in range(n_adj)
    ]
    noun = start + len(words)
    words.append(_zipf(rng, NOUNS, config.zipf) + ("s" if number == "pl" else ""))
    rels = ["det"] + ["amod"] * n_adj + [rel]
    return words, [noun] * (len(words) - 1) + [-2], rels, noun


def _second_sentence(rng: random.Random, config: CorefConfig, first: Sentence):
    """Words, heads, rels, POS (positions relative to the second sentence), the pronoun's
    position in it, the antecedent's position in ``first``, and the pronoun's kind."""
    root = first.heads.index(-1)
    arcs = zip(first.heads, first.rels, strict=True)
    main = [(i, r) for i, (h, r) in enumerate(arcs) if h == root]
    subject = next(i for i, r in main if r == "nsubj")
    objects = [i for i, r in main if r == "dobj"]
    kind = "object" if objects and rng.random() < config.p_object_pronoun else "subject"
    antecedent = objects[0] if kind == "object" else subject
    number = LEXICON[first.words[antecedent]][2]
    if kind == "subject":  # PRON VERB [DET ADJ* NOUN] .
        transitive = rng.random() < config.p_transitive
        lemma = _zipf(rng, TRANSITIVE if transitive else INTRANSITIVE, config.zipf)
        words = [SUBJECT_PRONOUN[number], lemma + ("s" if number == "sg" else "")]
        heads, rels = [1, -1], ["nsubj", "root"]
        if transitive:
            w, h, r, _ = _noun_phrase(rng, config, "dobj", 2)
            words, heads, rels = words + w, heads + [1 if x == -2 else x for x in h], rels + r
        pronoun, verb = 0, 1
    else:  # DET ADJ* NOUN VERB PRON .
        w, h, r, noun = _noun_phrase(rng, config, "nsubj", 0)
        verb = len(w)
        lemma = _zipf(rng, TRANSITIVE, config.zipf)
        words = w + [lemma + ("s" if LEXICON[w[-1]][2] == "sg" else ""), OBJECT_PRONOUN[number]]
        heads = [verb if x == -2 else x for x in h] + [-1, verb]
        rels = r + ["root", "dobj"]
        pronoun = verb + 1
    pos = [LEXICON[x][0] if x in LEXICON else "PRON" for x in words]
    pos[pronoun] = "PRON"
    return (
        words + [EOS],
        heads + [verb],
        rels + ["punct"],
        pos + ["PUNCT"],
        pronoun,
        antecedent,
        kind,
    )


def _translate_second(
    words: list[str],
    heads: list[int],
    rels: list[str],
    pronoun: int,
    target_pronoun: str,
    number: str,
) -> tuple[str, ...]:
    """The second sentence's translation: translate it with a bare placeholder noun of the
    pronoun's number in the pronoun's place, then put the target pronoun there."""
    placeholder = "dog" + ("s" if number == "pl" else "")
    out = list(
        translate(
            tuple(words[:pronoun] + [placeholder] + words[pronoun + 1 :]), tuple(heads), tuple(rels)
        )
    )
    # a bare noun phrase is one target word, followed by its case particle
    at = 0 if rels[pronoun] == "nsubj" else out.index(CASE["dobj"]) - 1
    if out[at] != TARGET["dog", number]:
        raise AssertionError("the placeholder is not where the pronoun's translation goes")
    out[at] = target_pronoun
    return tuple(out)


def generate_item(rng: random.Random, config: CorefConfig) -> tuple[Sentence, Coref]:
    """One two-sentence item and its gold coreference (no length limits).

    Shapes: none.
    """
    first = generate_sentence(rng, config)
    words2, heads2, rels2, pos2, p2, antecedent, kind = _second_sentence(rng, config, first)
    offset = len(first)
    number = LEXICON[first.words[antecedent]][2]
    cls = noun_class(first.words[antecedent])
    target2 = _translate_second(words2, heads2, rels2, p2, PRONOUN_TARGET[cls, number], number)
    sentence = Sentence(
        words=first.words + tuple(words2),
        pos=first.pos + tuple(pos2),
        heads=first.heads + tuple(h + offset if h >= 0 else -1 for h in heads2),
        rels=first.rels + tuple(rels2),
        target=first.target + target2,
    )
    return sentence, Coref(offset + p2, antecedent, kind, cls, number)


@dataclass(frozen=True)
class CorefCorpus:
    """A ``Corpus`` of two-sentence items (``corpus``, for ``translation.encode`` and the
    trainers) and each split's gold coreference (``links``, in the same order)."""

    corpus: Corpus
    links: dict[str, tuple[Coref, ...]]
    digest: str  # a hash of every item: part of the checkpoint name of models trained on it

    def split(self, name: str) -> tuple[tuple[Sentence, ...], tuple[Coref, ...]]:
        """The sentences and gold links of split ``name``. Shapes: none."""
        return self.corpus.split(name), self.links[name]


def coref_corpus(
    n: int,
    seed: int = 0,
    *,
    config: CorefConfig | None = None,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> CorefCorpus:
    """``n`` distinct two-sentence items (seeded), split train/valid/test, with vocabularies
    that add the pronouns to the grammar's (``corpus.make_corpus``'s layout: specials first,
    then words by decreasing training frequency).

    Shapes: none (Python objects; ``coref_tensors`` and ``translation.encode`` give tensors).
    """
    check_positive_int("n", n)
    if n < 10:
        raise ValueError(f"n={n} is too small for three splits; use n >= 10")
    check_int("seed", seed, 0)
    config = CorefConfig() if config is None else config
    if not isinstance(config, CorefConfig):
        raise TypeError(f"config must be a CorefConfig, got {type(config).__name__}")
    if len(fractions) != 3 or min(fractions) <= 0 or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions={fractions} must be 3 positive numbers summing to 1")
    rng, seen, items, stalled = random.Random(seed), set(), [], 0
    while len(items) < n:
        s, link = generate_item(rng, config)
        first_len = link.antecedent < config.max_first and s.words.index(EOS) < config.max_first
        fits = len(s) <= config.max_len and len(s.target) <= config.max_len
        if first_len and fits and s.words not in seen:
            seen.add(s.words)
            items.append((s, link))
            stalled = 0
        elif (stalled := stalled + 1) > 2000:
            raise ValueError(f"could not draw n={n} distinct items (found {len(items)})")
    n_train, n_valid = int(fractions[0] * n), int(fractions[1] * n)
    train = [s for s, _ in items[:n_train]]
    counts = Counter(w for s in train for w in s.words)
    src_all = set(LEXICON) | set(SUBJECT_PRONOUN.values()) | set(OBJECT_PRONOUN.values())
    src_words = sorted(src_all, key=lambda w: (-counts[w], w))
    rank = {w: r for r, w in enumerate(src_words)}
    tgt_counts = Counter(w for s in train for w in s.target)
    tgt_all = set(TARGET.values()) | {EOS} | set(DET_TARGET.values()) | set(CASE.values())
    tgt_all |= {REL_MARKER} | set(PRONOUN_TARGET.values())
    tgt_words = sorted(tgt_all, key=lambda w: (-tgt_counts[w], w))
    ranked = [replace(s, ranks=tuple(rank[w] for w in s.words)) for s, _ in items]
    links = [link for _, link in items]
    cuts = {
        "train": (0, n_train),
        "valid": (n_train, n_train + n_valid),
        "test": (n_train + n_valid, n),
    }
    corpus = Corpus(
        train=tuple(ranked[:n_train]),
        valid=tuple(ranked[n_train : n_train + n_valid]),
        test=tuple(ranked[n_train + n_valid :]),
        src_vocab=(PAD, BOS, *src_words),
        tgt_vocab=(PAD, BOS, *tgt_words),
        seed=seed,
        config=config,
    )
    digest = hashlib.sha256(repr([s.words for s in ranked]).encode()).hexdigest()[:10]
    return CorefCorpus(corpus, {k: tuple(links[a:b]) for k, (a, b) in cuts.items()}, digest)


def coref_tensors(
    sentences: list[Sentence] | tuple, links: list[Coref] | tuple, seq_len: int | None = None
) -> dict:
    """The tensors of ``analysis.coreference``: for each item, the pronoun's position, the
    gold antecedent's, which tokens are nouns, and every token's class (the noun class for
    nouns, -1 elsewhere) and number (0 singular, 1 plural, -1 for non-nouns). Padded with
    -1 / False to ``seq_len`` (default: the longest item).

    Shapes: n items -> pronoun, antecedent (n,); is_noun (n, seq) bool; noun_class,
    number (n, seq); pronoun_class, pronoun_number (n,).
    """
    if len(sentences) == 0:
        raise ValueError("sentences is empty; pass at least one Sentence")
    if len(links) != len(sentences):
        raise ValueError(
            f"links has {len(links)} entries for {len(sentences)} sentences: "
            "pass the split's links in the same order"
        )
    if any(not isinstance(s, Sentence) for s in sentences):
        raise TypeError("sentences must hold multihead.tasks.corpus.Sentence objects")
    if any(not isinstance(c, Coref) for c in links):
        raise TypeError("links must hold Coref objects (from coref_corpus)")
    longest = max(len(s) for s in sentences)
    seq = longest if seq_len is None else check_positive_int("seq_len", seq_len)
    if seq < longest:
        raise ValueError(f"seq_len={seq_len} is shorter than the longest sentence ({longest})")
    n = len(sentences)
    is_noun = torch.zeros(n, seq, dtype=torch.bool)
    cls = torch.full((n, seq), -1)
    num = torch.full((n, seq), -1)
    for i, s in enumerate(sentences):
        for j, w in enumerate(s.words):
            if s.pos[j] == "NOUN":
                is_noun[i, j] = True
                cls[i, j] = noun_class(w)
                num[i, j] = int(LEXICON[w][2] == "pl")
    return {
        "pronoun": torch.tensor([c.pronoun for c in links]),
        "antecedent": torch.tensor([c.antecedent for c in links]),
        "is_noun": is_noun,
        "noun_class": cls,
        "number": num,
        "pronoun_class": torch.tensor([c.noun_class for c in links]),
        "pronoun_number": torch.tensor([int(c.number == "pl") for c in links]),
    }


def target_pronoun_positions(sentences: list[Sentence] | tuple) -> torch.Tensor:
    """Where each item's target pronoun is in its translation (its index in
    ``sentence.target``; in ``translation.encode``'s ``tgt`` it is that index + 1, after
    ``<s>``).

    Shapes: n items -> (n,).
    """
    pronouns = set(PRONOUN_TARGET.values())
    out = []
    for i, s in enumerate(sentences):
        if not isinstance(s, Sentence):
            raise TypeError(f"sentences[{i}] must be a Sentence, got {type(s).__name__}")
        at = [j for j, w in enumerate(s.target) if w in pronouns]
        if len(at) != 1:
            raise ValueError(
                f"sentences[{i}] has {len(at)} target pronouns; expected one "
                "(take the items from coref_corpus)"
            )
        out.append(at[0])
    return torch.tensor(out)


def coref_configs(corpus: Corpus) -> tuple[ModelConfig, TrainConfig]:
    """The coreference models: 2+2 layers, d_model 48; 800 steps of 64 items (fast: 400 of 32).

    Shapes: none.
    """
    model_cfg, train_cfg = default_configs(corpus)
    model_cfg = replace(model_cfg, d_model=48, n_layers=2, n_decoder_layers=2, d_ff=96)
    train_cfg = replace(
        train_cfg,
        steps=pick(full=800, fast=400),
        batch_size=pick(full=64, fast=32),
        warmup=pick(full=100, fast=50),
    )
    return model_cfg, train_cfg


def train_coref_models(
    seeds: Sequence[int], data: CorefCorpus, *, progress: bool = True, workers: int = 1
):
    """``translation.train_translation_models`` on the coreference corpus with ``coref_configs``:
    one model per seed (``workers > 1``: the missing ones side by side), each checkpoint cached
    under a name that holds the corpus digest (so a changed generator never loads a stale model).

    Shapes: none (a list of ``translation.TranslationSetup``, one per seed).
    """
    if not isinstance(data, CorefCorpus):
        raise TypeError(f"data must be a CorefCorpus (coref_corpus), got {type(data).__name__}")
    model_cfg, train_cfg = coref_configs(data.corpus)
    return train_translation_models(
        seeds,
        data.corpus,
        model_config=model_cfg,
        train_config=train_cfg,
        name=f"coref_{data.digest}",
        progress=progress,
        workers=workers,
    )


def coref_corpus_default(seed: int = 0) -> CorefCorpus:
    """The chapter's coreference corpus: 12000 items in full mode, 4000 in fast mode.

    Shapes: none.
    """
    return coref_corpus(pick(full=12000, fast=4000), seed)


@torch.no_grad()
def coref_readout(model: EncoderDecoder, data: Encoded, sentences: list[Sentence] | tuple):
    """One teacher-forced pass of a translation model over coreference items: whether the
    target pronoun is predicted right, the encoder's self-attention and the decoder's
    cross-attention stacked over layers, and the query row of each item's target pronoun
    (the decoder step that emits it).

    Shapes: n items -> correct (n,) bool; encoder (layers, n, heads, src, src); cross
    (layers, n, heads, tgt, src); step (n,).
    """
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
    if not isinstance(data, Encoded) or len(data.src) != len(sentences):
        raise ValueError("data must be translation.encode(corpus, sentences) of these sentences")
    model.eval()
    dev = next(model.parameters()).device
    src, tgt = data.src.to(dev), data.tgt.to(dev)
    logits, cache = run_with_cache(
        model,
        src,
        tgt[:, :-1],
        src_padding_mask=src == PAD_ID,
        names_filter=lambda name: name.endswith("attn.pattern"),
    )
    step = target_pronoun_positions(sentences)  # logits at step t predict tgt[:, t + 1]
    rows = torch.arange(len(sentences))
    correct = logits.argmax(-1).cpu()[rows, step] == data.tgt[rows, step + 1]
    return {
        "correct": correct,
        "encoder": stack_layers(cache, "encoder.layers.{}.attn.pattern").cpu(),
        "cross": stack_layers(cache, "decoder.layers.{}.cross_attn.pattern").cpu(),
        "step": step,
    }
