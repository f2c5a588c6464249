"""A toy translation corpus whose syntax we know: every sentence comes with its parse.

Source sentences come from a small probabilistic grammar (determiners, adjectives, nouns,
verbs, adverbs, prepositional phrases, relative clauses on the subject, singular/plural
agreement) with Zipfian word frequencies. Each ``Sentence`` carries POS tags, gold
dependency arcs with labels, every token's corpus frequency rank, and its translation.

The target language (``multihead.tasks.lexicon``) is verb-final (subject, object, obliques,
verb), puts adjectives after the noun, marks case with particles that depend on the noun's
role, makes adjectives agree in number with their noun and the verb agree with its *object*.
Relative clauses come before their noun. Translation is a deterministic function of the
parse (``translate``), so an output is either exactly right or wrong. The grammar never
attaches a prepositional phrase to a noun, which keeps every source sentence unambiguous.
"""

from __future__ import annotations

import random
from bisect import bisect
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import accumulate

import torch

from multihead._checks import check_int, check_number, check_positive_int
from multihead.tasks.lexicon import (
    ADJECTIVES,
    ADVERBS,
    CASE,
    DET_TARGET,
    DETERMINERS,
    EOS,
    INTRANSITIVE,
    LEXICON,
    NOUNS,
    PREPOSITIONS,
    REL_MARKER,
    TARGET,
    TRANSITIVE,
    translate,
)

PAD, BOS = "<pad>", "<s>"
POS_TAGS = ("DET", "ADJ", "NOUN", "VERB", "ADV", "ADP", "PRON", "PUNCT")
RELATIONS = ("root", "nsubj", "dobj", "det", "amod", "advmod", "prep", "pobj", "relcl", "mark")
RELATIONS += ("punct",)


@dataclass(frozen=True)
class GrammarConfig:
    """Probabilities of the grammar. ``relative_clauses=False`` gives the simpler corpus.

    ``zipf`` is the exponent s of the within-class word distribution p(rank r) ~ r^-s.
    """

    p_plural: float = 0.35
    p_adjectives: tuple[float, float, float] = (0.5, 0.35, 0.15)  # 0, 1 or 2 adjectives
    p_transitive: float = 0.6
    p_adverb: float = 0.4
    p_pps: tuple[float, float, float] = (0.45, 0.4, 0.15)  # 0, 1 or 2 PPs
    p_relative: float = 0.3
    relative_clauses: bool = True
    zipf: float = 1.1
    min_len: int = 5
    max_len: int = 25

    def __post_init__(self) -> None:
        for name in ("p_plural", "p_transitive", "p_adverb", "p_relative"):
            check_number(name, getattr(self, name), 0.0, 1.0)
        for name in ("p_adjectives", "p_pps"):
            probs = getattr(self, name)
            if len(probs) != 3 or min(probs) < 0 or abs(sum(probs) - 1) > 1e-9:
                raise ValueError(f"{name}={probs} must be 3 non-negative numbers summing to 1")
        check_number("zipf", self.zipf, 0.0, 3.0)
        check_positive_int("min_len", self.min_len)
        check_positive_int("max_len", self.max_len)
        if not 4 <= self.min_len <= self.max_len:
            raise ValueError(
                f"min_len={self.min_len}, max_len={self.max_len}: need 4 <= min_len <= max_len"
            )


@dataclass(frozen=True)
class Sentence:
    """A source sentence with its gold annotation and its translation.

    ``heads[i]`` is the index of token i's head (-1 for the root), ``rels[i]`` the label
    of that arc, ``ranks[i]`` the frequency rank of the word in the training split (0 = most
    frequent; unseen words get the vocabulary size).
    """

    words: tuple[str, ...]
    pos: tuple[str, ...]
    heads: tuple[int, ...]
    rels: tuple[str, ...]
    target: tuple[str, ...]
    ranks: tuple[int, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.words)

    def arcs(self, relation: str | None = None) -> list[tuple[int, int, str]]:
        """``(head, dependent, label)`` for every arc (or those with label ``relation``).

        Shapes: none (a list of index triples).
        """
        if relation is not None and relation not in RELATIONS:
            raise ValueError(f"relation={relation!r} is not one of {RELATIONS}")
        return [
            (h, d, r)
            for d, (h, r) in enumerate(zip(self.heads, self.rels, strict=True))
            if h >= 0 and (relation is None or r == relation)
        ]


class _Builder:
    """Grows one sentence token by token, recording POS, heads and labels."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.heads: list[int] = []
        self.rels: list[str] = []

    def add(self, word: str, head: int, rel: str) -> int:
        self.words.append(word)
        self.heads.append(head)
        self.rels.append(rel)
        return len(self.words) - 1


@lru_cache(maxsize=64)
def _zipf_cumulative(n: int, s: float) -> tuple[float, ...]:
    """Cumulative Zipf probabilities p(rank r) ~ (r + 1)^-s over ``n`` items."""
    weights = [(r + 1) ** -s for r in range(n)]
    total = sum(weights)
    return tuple(accumulate(w / total for w in weights))


def _zipf_choice(rng: random.Random, items: list[str] | tuple[str, ...], s: float) -> str:
    cum = _zipf_cumulative(len(items), s)
    return items[min(bisect(cum, rng.random()), len(items) - 1)]


def _choose(rng: random.Random, probs: tuple[float, ...]) -> int:
    u, acc = rng.random(), 0.0
    for i, p in enumerate(probs):
        acc += p
        if u < acc:
            return i
    return len(probs) - 1


def _noun_phrase(b: _Builder, rng: random.Random, config: GrammarConfig, rel: str) -> list[int]:
    """Append DET ADJ* NOUN; return [noun index placeholder fix-ups] (det, adjs, noun)."""
    number = "pl" if rng.random() < config.p_plural else "sg"
    idx = [b.add(rng.choice(DETERMINERS[number]), -2, "det")]
    for _ in range(_choose(rng, config.p_adjectives)):
        idx.append(b.add(_zipf_choice(rng, ADJECTIVES, config.zipf), -2, "amod"))
    noun = _zipf_choice(rng, NOUNS, config.zipf)
    noun_i = b.add(noun + ("s" if number == "pl" else ""), -2, rel)
    for i in idx:
        b.heads[i] = noun_i
    return [noun_i, *idx]


def _verb_form(lemma: str, subject_word: str) -> str:
    return lemma + ("s" if LEXICON[subject_word][2] == "sg" else "")


def generate_sentence(rng: random.Random, config: GrammarConfig) -> Sentence:
    """One sentence from the grammar (no length limits; see ``make_corpus``).

    Shapes: none (a ``Sentence`` of any length).
    """
    b = _Builder()
    subj = _noun_phrase(b, rng, config, "nsubj")[0]
    if config.relative_clauses and rng.random() < config.p_relative:
        that = b.add("that", -2, "mark")
        transitive = rng.random() < config.p_transitive
        lemma = _zipf_choice(rng, TRANSITIVE if transitive else INTRANSITIVE, config.zipf)
        rel_verb = b.add(_verb_form(lemma, b.words[subj]), subj, "relcl")
        b.heads[that] = rel_verb
        if transitive:
            b.heads[_noun_phrase(b, rng, config, "dobj")[0]] = rel_verb
    adverb = (
        b.add(_zipf_choice(rng, ADVERBS, config.zipf), -2, "advmod")
        if (rng.random() < config.p_adverb)
        else None
    )
    transitive = rng.random() < config.p_transitive
    lemma = _zipf_choice(rng, TRANSITIVE if transitive else INTRANSITIVE, config.zipf)
    verb = b.add(_verb_form(lemma, b.words[subj]), -1, "root")
    b.heads[subj] = verb
    if adverb is not None:
        b.heads[adverb] = verb
    if transitive:
        b.heads[_noun_phrase(b, rng, config, "dobj")[0]] = verb
    for _ in range(_choose(rng, config.p_pps)):
        prep = b.add(_zipf_choice(rng, PREPOSITIONS, config.zipf), verb, "prep")
        b.heads[_noun_phrase(b, rng, config, "pobj")[0]] = prep
    b.add(EOS, verb, "punct")
    pos = tuple(LEXICON[w][0] for w in b.words)
    words, heads, rels = tuple(b.words), tuple(b.heads), tuple(b.rels)
    return Sentence(words, pos, heads, rels, translate(words, heads, rels))


@dataclass(frozen=True)
class Corpus:
    """Train/validation/test splits of distinct sentences, and the two vocabularies.

    Vocabularies list the special tokens first (``<pad>`` = 0, ``<s>`` = 1) and then words
    by decreasing training frequency, so a source id is also a frequency order.
    """

    train: tuple[Sentence, ...]
    valid: tuple[Sentence, ...]
    test: tuple[Sentence, ...]
    src_vocab: tuple[str, ...]
    tgt_vocab: tuple[str, ...]
    seed: int
    config: GrammarConfig

    def split(self, name: str) -> tuple[Sentence, ...]:
        """The split called ``name`` (``"train"``, ``"valid"`` or ``"test"``). Shapes: none."""
        if name not in ("train", "valid", "test"):
            raise ValueError(f"split name={name!r} must be 'train', 'valid' or 'test'")
        return getattr(self, name)


def make_corpus(
    n: int,
    seed: int = 0,
    *,
    config: GrammarConfig | None = None,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> Corpus:
    """Generate ``n`` distinct sentences (seeded) and split them train/valid/test.

    Shapes: none (returns Python objects; see ``multihead.tasks.translation.encode`` for tensors).
    """
    check_positive_int("n", n)
    check_int("seed", seed, 0)
    config = GrammarConfig() if config is None else config
    if not isinstance(config, GrammarConfig):
        raise TypeError(f"config must be a GrammarConfig, got {type(config).__name__}")
    if len(fractions) != 3 or min(fractions) <= 0 or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions={fractions} must be 3 positive numbers summing to 1")
    if n < 10:
        raise ValueError(f"n={n} is too small for three splits; use n >= 10")
    rng, seen, sentences = random.Random(seed), set(), []
    stalled = 0  # draws since the last new sentence: give up when the grammar runs dry
    while len(sentences) < n:
        s = generate_sentence(rng, config)
        if config.min_len <= len(s) <= config.max_len and s.words not in seen:
            seen.add(s.words)
            sentences.append(s)
            stalled = 0
        elif (stalled := stalled + 1) > 2000:
            raise ValueError(
                f"could not draw n={n} distinct sentences (found {len(sentences)}); "
                "lower n or loosen the config's length limits"
            )
    n_train, n_valid = int(fractions[0] * n), int(fractions[1] * n)
    train = sentences[:n_train]
    counts = Counter(w for s in train for w in s.words)
    src_words = sorted(LEXICON, key=lambda w: (-counts[w], w))
    rank = {w: r for r, w in enumerate(src_words)}
    tgt_counts = Counter(w for s in train for w in s.target)
    tgt_words = sorted(
        set(TARGET.values()) | {EOS} | set(DET_TARGET.values()) | set(CASE.values()) | {REL_MARKER},
        key=lambda w: (-tgt_counts[w], w),
    )
    ranked = [replace(s, ranks=tuple(rank[w] for w in s.words)) for s in sentences]
    return Corpus(
        train=tuple(ranked[:n_train]),
        valid=tuple(ranked[n_train : n_train + n_valid]),
        test=tuple(ranked[n_train + n_valid :]),
        src_vocab=(PAD, BOS, *src_words),
        tgt_vocab=(PAD, BOS, *tgt_words),
        seed=seed,
        config=config,
    )


def render(sentence: Sentence) -> str:
    """A plain-text picture of a sentence: one token per line with its annotation.

    Shapes: none.
    """
    if not isinstance(sentence, Sentence):
        raise TypeError(f"sentence must be a Sentence, got {type(sentence).__name__}")
    lines = [" ".join(sentence.words), "  -> " + " ".join(sentence.target)]
    for i, (w, p, h, r) in enumerate(
        zip(sentence.words, sentence.pos, sentence.heads, sentence.rels, strict=True)
    ):
        head = "ROOT" if h < 0 else f"{h}:{sentence.words[h]}"
        rank = f"  rank {sentence.ranks[i]}" if sentence.ranks else ""
        lines.append(f"  {i:>2} {w:<10} {p:<5} {r:<6} <- {head}{rank}")
    return "\n".join(lines)


def gold_tensors(sentences: list[Sentence] | tuple, seq_len: int | None = None) -> dict:
    """Annotation tensors of ``sentences`` padded to ``seq_len`` (default: the longest), -1
    at padding and at the root's head: the fields of ``multihead.analysis.roles.Gold``.

    Shapes: n sentences -> lengths (n,); heads, rels, pos, ranks (n, seq_len); relations
    (the names ``rels`` indexes).
    """
    if len(sentences) == 0:
        raise ValueError("sentences is empty; pass at least one Sentence")
    if any(not isinstance(s, Sentence) for s in sentences):
        raise TypeError("sentences must hold multihead.tasks.corpus.Sentence objects")
    longest = max(len(s) for s in sentences)
    seq = longest if seq_len is None else seq_len
    if seq < longest:
        raise ValueError(f"seq_len={seq_len} is shorter than the longest sentence ({longest})")
    if any(not s.ranks for s in sentences):
        raise ValueError("sentences lack frequency ranks; take them from make_corpus")
    out = {k: torch.full((len(sentences), seq), -1) for k in ("heads", "rels", "pos", "ranks")}
    for i, s in enumerate(sentences):
        n = len(s)
        out["heads"][i, :n] = torch.tensor(s.heads)
        out["rels"][i, :n] = torch.tensor([RELATIONS.index(r) for r in s.rels])
        out["pos"][i, :n] = torch.tensor([POS_TAGS.index(p) for p in s.pos])
        out["ranks"][i, :n] = torch.tensor(s.ranks)
    lengths = torch.tensor([len(s) for s in sentences])
    return {"lengths": lengths, **out, "relations": RELATIONS}
