"""Tests of the toy translation corpus: annotations, agreement, translation, splits."""

import random
from dataclasses import replace

import pytest

from multihead.tasks.corpus import (
    EOS,
    LEXICON,
    POS_TAGS,
    RELATIONS,
    GrammarConfig,
    Sentence,
    generate_sentence,
    make_corpus,
    render,
    translate,
)


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(600, seed=3)


def test_splits_sizes_and_disjoint(corpus):
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (480, 60, 60)
    sets = [{s.words for s in corpus.split(n)} for n in ("train", "valid", "test")]
    assert len(sets[0] | sets[1] | sets[2]) == 600


def test_seeded_and_deterministic():
    a, b, c = make_corpus(50, 7), make_corpus(50, 7), make_corpus(50, 8)
    assert a.train == b.train
    assert a.train != c.train


def test_lengths_and_end_token(corpus):
    for s in corpus.train:
        assert 5 <= len(s) <= 25
        assert s.words[-1] == EOS and s.pos[-1] == "PUNCT" and s.target[-1] == EOS
        assert len(s.words) == len(s.pos) == len(s.heads) == len(s.rels) == len(s.ranks)


def test_annotations_form_a_tree(corpus):
    for s in corpus.train:
        roots = [i for i, h in enumerate(s.heads) if h == -1]
        assert len(roots) == 1 and s.pos[roots[0]] == "VERB" and s.rels[roots[0]] == "root"
        for i in range(len(s)):  # every token reaches the root without a cycle
            seen, j = set(), i
            while s.heads[j] != -1:
                assert j not in seen
                seen.add(j)
                j = s.heads[j]
        assert all(p in POS_TAGS for p in s.pos) and all(r in RELATIONS for r in s.rels)


def test_relation_labels_fit_the_pos_tags(corpus):
    expect = {
        "det": ("DET", "NOUN"),
        "amod": ("ADJ", "NOUN"),
        "nsubj": ("NOUN", "VERB"),
        "dobj": ("NOUN", "VERB"),
        "advmod": ("ADV", "VERB"),
        "prep": ("ADP", "VERB"),
        "pobj": ("NOUN", "ADP"),
        "relcl": ("VERB", "NOUN"),
        "mark": ("PRON", "VERB"),
    }
    seen = set()
    for s in corpus.train:
        for h, d, r in s.arcs():
            if r in expect:
                assert (s.pos[d], s.pos[h]) == expect[r], (s.words, r)
                seen.add(r)
    assert seen == set(expect)  # every relation occurs


def test_subject_verb_agreement(corpus):
    for s in corpus.train:
        for h, d, _ in s.arcs("nsubj"):
            noun_number = LEXICON[s.words[d]][2]
            assert s.words[h].endswith("s") == (noun_number == "sg")


def test_zipfian_frequencies_and_ranks(corpus):
    from collections import Counter

    nouns = Counter(LEXICON[w][1] for s in corpus.train for w in s.words if LEXICON[w][0] == "NOUN")
    top, *_ = nouns.most_common(1)
    assert top[0] == "dog" and top[1] > 5 * nouns.get("bison", 0)
    for s in corpus.train[:50]:
        for w, r in zip(s.words, s.ranks, strict=True):
            assert corpus.src_vocab[r + 2] == w  # ids are frequency ranks, after <pad>, <s>
    assert corpus.src_vocab[2] == EOS  # the end token is the most frequent word


def test_translation_is_deterministic_and_needs_syntax(corpus):
    for s in corpus.train[:100]:
        assert translate(s.words, s.heads, s.rels) == s.target
    # The target verb agrees with its object: change the object's number only.
    rng = random.Random(0)
    s = next(
        s
        for s in (generate_sentence(rng, GrammarConfig()) for _ in range(500))
        if s.arcs("dobj") and not s.arcs("relcl")
    )
    ((verb, obj, _),) = s.arcs("dobj")
    lemma = LEXICON[s.words[obj]][1]
    flipped = lemma if s.words[obj] != lemma else lemma + "s"
    words = s.words[:obj] + (flipped,) + s.words[obj + 1 :]
    assert translate(words, s.heads, s.rels)[-2] != s.target[-2]


def test_target_word_order_is_verb_final(corpus):
    from multihead.tasks.corpus import CASE

    for s in corpus.train[:100]:
        assert CASE["nsubj"] in s.target
        assert s.target.index(CASE["nsubj"]) < len(s.target) - 2


def test_simple_mode_has_no_relative_clauses():
    c = make_corpus(200, 0, config=GrammarConfig(relative_clauses=False))
    assert all("that" not in s.words for s in c.train)


def test_render_shows_words_and_arcs(corpus):
    text = render(corpus.test[0])
    assert corpus.test[0].words[0] in text and "ROOT" in text and "->" in text


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"p_plural": 1.5}, ValueError),
        ({"p_plural": "half"}, TypeError),
        ({"p_adjectives": (0.5, 0.5, 0.5)}, ValueError),
        ({"zipf": -1.0}, ValueError),
        ({"min_len": 3}, ValueError),
        ({"min_len": 10, "max_len": 8}, ValueError),
        ({"max_len": 0}, ValueError),
    ],
)
def test_grammar_config_rejects_bad_values(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        GrammarConfig(**kwargs)


def test_make_corpus_rejects_bad_arguments():
    with pytest.raises(TypeError, match="n"):
        make_corpus(10.5)
    with pytest.raises(ValueError, match="n=5"):
        make_corpus(5)
    with pytest.raises(ValueError, match="seed"):
        make_corpus(100, seed=-1)
    with pytest.raises(ValueError, match="fractions"):
        make_corpus(100, fractions=(0.5, 0.5, 0.5))
    with pytest.raises(TypeError, match="config"):
        make_corpus(100, config={"zipf": 1.0})
    tiny = GrammarConfig(
        p_adjectives=(1, 0, 0),
        p_transitive=0,
        p_adverb=0,
        p_pps=(1, 0, 0),
        relative_clauses=False,
        min_len=4,
        max_len=4,
    )
    with pytest.raises(ValueError, match="distinct"):  # about 2300 "DET NOUN VERB ." exist
        make_corpus(5000, config=tiny)


def test_translate_and_arcs_reject_bad_input(corpus):
    s = corpus.test[0]
    with pytest.raises(ValueError, match="one entry per token"):
        translate(s.words, s.heads[:-1], s.rels)
    with pytest.raises(ValueError, match="root"):
        translate(s.words, tuple(-1 for _ in s.heads), s.rels)
    with pytest.raises(ValueError, match="relation"):
        s.arcs("subject")
    with pytest.raises(TypeError, match="Sentence"):
        render(s.words)
    assert isinstance(replace(s, ranks=()), Sentence)
