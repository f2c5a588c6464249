"""The vocabularies of the toy translation task, and the target language's grammar.

The source side lists English-like words by class (each class in order of decreasing
frequency: the corpus draws them with Zipfian weights). The target words are invented,
pronounceable and fixed, so the target language never changes with the corpus seed.

``translate`` maps a parsed source sentence to its translation. The target language is
verb-final (subject, object, obliques, verb), puts adjectives after the noun and makes them
agree in number with it, marks each noun phrase with a case particle set by its role, makes
the verb agree with its *object*, and puts relative clauses before their noun.
"""

from __future__ import annotations

import random

EOS = "."

NOUNS = (
    "dog cat man woman child bird farmer king horse teacher friend doctor baker girl boy "
    "sailor fox wolf queen student singer painter rabbit monk otter heron falcon badger "
    "weaver potter cobbler tinker jester herald abbot vicar beetle lizard magpie osprey "
    "marmot lemur ferret tapir gecko bison"
).split()
ADJECTIVES = (
    "big small old young red happy tall quiet brave clever green sad lazy bright "
    "gentle proud gilded amber somber nimble wary stoic frugal ornate"
).split()
TRANSITIVE = "see like follow help find watch call meet greet praise".split()
INTRANSITIVE = "run sleep wait sing laugh dance rest shout".split()
ADVERBS = "often quickly rarely slowly never always quietly soon".split()
PREPOSITIONS = "in near with behind under beside".split()
DETERMINERS = {"sg": ("the", "a", "this"), "pl": ("the", "some", "these")}
DET_TARGET = {"the": "ka", "a": "ni", "some": "ni", "this": "so", "these": "so"}
CASE = {"nsubj": "ga", "dobj": "o"}
REL_MARKER = "ki"


def _invented_words(n: int, seed: int = 2019) -> list[str]:
    """``n`` distinct pronounceable target words (fixed: the target language never changes)."""
    rng = random.Random(seed)
    out: list[str] = []
    taken = set(DET_TARGET.values()) | set(CASE.values()) | {REL_MARKER}
    while len(out) < n:
        word = "".join(rng.choice("ptkmnslrvdbgz") + rng.choice("aeiou") for _ in range(3))
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


def _lexicon() -> tuple[dict[str, tuple[str, str, str]], dict[tuple[str, str], str]]:
    """Source word -> (POS, lemma, number) and (lemma, form) -> target word."""
    src: dict[str, tuple[str, str, str]] = {EOS: ("PUNCT", EOS, ""), "that": ("PRON", "that", "")}
    tgt: dict[tuple[str, str], str] = {}
    lemmas = NOUNS + ADJECTIVES + TRANSITIVE + INTRANSITIVE + ADVERBS + PREPOSITIONS
    stems = dict(zip(lemmas, _invented_words(len(lemmas)), strict=True))
    for noun in NOUNS:
        src[noun], src[noun + "s"] = ("NOUN", noun, "sg"), ("NOUN", noun, "pl")
        tgt[noun, "sg"], tgt[noun, "pl"] = stems[noun], stems[noun] + "ri"
    for adj in ADJECTIVES:
        src[adj] = ("ADJ", adj, "")
        tgt[adj, "sg"], tgt[adj, "pl"] = stems[adj], stems[adj] + "n"
    for verb in TRANSITIVE + INTRANSITIVE:
        src[verb + "s"], src[verb] = ("VERB", verb, "sg"), ("VERB", verb, "pl")
        if verb in TRANSITIVE:  # the target verb agrees with its object
            tgt[verb, "sg"], tgt[verb, "pl"] = stems[verb] + "t", stems[verb] + "tu"
        else:
            tgt[verb, ""] = stems[verb]
    for word, pos in [(a, "ADV") for a in ADVERBS] + [(p, "ADP") for p in PREPOSITIONS]:
        src[word], tgt[word, ""] = (pos, word, ""), stems[word]
    for det in DETERMINERS["sg"] + DETERMINERS["pl"]:
        src[det] = ("DET", det, "")
    return src, tgt


LEXICON, TARGET = _lexicon()


def translate(words: tuple[str, ...], heads: tuple[int, ...], rels: tuple[str, ...]) -> tuple:
    """The target sentence, computed from the parse alone.

    Order: [relative clause] subject ``ga`` [object ``o``] [oblique postposition]* [adverb]
    verb ``.``; a noun phrase is NOUN ADJ* DET with adjectives agreeing with the noun.

    Shapes: three sequences of one entry per source token -> a tuple of target words.
    """
    if not len(words) == len(heads) == len(rels):
        raise ValueError(
            f"words, heads and rels must have one entry per token, got lengths "
            f"{len(words)}, {len(heads)}, {len(rels)}"
        )
    kids: dict[int, list[int]] = {i: [] for i in range(-1, len(words))}
    for d, h in enumerate(heads):
        kids[h].append(d)

    def noun_phrase(n: int) -> list[str]:
        _, lemma, number = LEXICON[words[n]]
        out = [TARGET[lemma, number]]
        out += [TARGET[words[a], number] for a in kids[n] if rels[a] == "amod"]
        out += [DET_TARGET[words[d]] for d in kids[n] if rels[d] == "det"]
        return out

    def clause(v: int) -> list[str]:
        out: list[str] = []
        obj = [d for d in kids[v] if rels[d] == "dobj"]
        for s in (d for d in kids[v] if rels[d] == "nsubj"):
            for r in (d for d in kids[s] if rels[d] == "relcl"):
                out += clause(r) + [REL_MARKER]
            out += noun_phrase(s) + [CASE["nsubj"]]
        for o in obj:
            out += noun_phrase(o) + [CASE["dobj"]]
        for p in (d for d in kids[v] if rels[d] == "prep"):
            out += noun_phrase(kids[p][0]) + [TARGET[words[p], ""]]
        out += [TARGET[words[a], ""] for a in kids[v] if rels[a] == "advmod"]
        lemma = LEXICON[words[v]][1]
        agree = LEXICON[words[obj[0]]][2] if obj else ""
        return out + [TARGET[lemma, agree]]

    roots = kids[-1]
    if len(roots) != 1 or LEXICON.get(words[roots[0]], ("",))[0] != "VERB":
        raise ValueError("the parse must have exactly one root, a verb")
    return tuple(clause(roots[0]) + [EOS])
