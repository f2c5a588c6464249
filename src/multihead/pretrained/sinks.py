"""Sink heads of a pretrained encoder at the token level, and Clark et al.'s (2019) "no-op"
test: is the loss insensitive to the attention a head puts on the sink token?

``attention_gradients`` runs the encoder on a batch with ``output_attentions=True``. With
eager attention in eval mode, the tensors it returns are the very softmax outputs that
multiply the values (dropout is the identity), so they sit in the autograd graph and
``torch.autograd.grad(loss, attentions)`` is dL/d alpha for every weight of every head. The
loss is any function of the mean-pooled, unit-length sentence embeddings (the pooling
``load.sentence_embeddings`` uses), for example minus the paraphrase retrieval margin.
"""

from __future__ import annotations

import string
from collections.abc import Callable

import torch
from torch import Tensor

from multihead._checks import check_callable
from multihead.pretrained.load import SentenceAttention, check_maps, tokenize

PUNCTUATION = frozenset(string.punctuation)
GROUPS = ("cls", "sep", "punct", "other")


def token_groups(tokens: list[list[str]], seq: int) -> dict[str, Tensor]:
    """Which padded positions hold ``[CLS]`` (the first token), ``[SEP]`` (the last),
    punctuation (pieces made only of punctuation marks) and every other real token.

    Shapes: n token lists, seq >= the longest -> dict of (n, seq) bool.
    """
    if not isinstance(tokens, (list, tuple)) or not tokens:
        raise ValueError("tokens must be a non-empty list of token lists")
    if any(not isinstance(t, (list, tuple)) or len(t) < 2 for t in tokens):
        raise ValueError("every token list needs [CLS] and [SEP] (at least 2 tokens)")
    if max(len(t) for t in tokens) > seq:
        raise ValueError(f"seq={seq} is shorter than the longest token list")
    out = {k: torch.zeros(len(tokens), seq, dtype=torch.bool) for k in GROUPS}
    for i, toks in enumerate(tokens):
        n = len(toks)
        out["cls"][i, 0] = True
        out["sep"][i, n - 1] = True
        for j in range(1, n - 1):
            kind = "punct" if all(c in PUNCTUATION for c in toks[j].removeprefix("##")) else "other"
            out[kind][i, j] = True
    return out


def padded_tokens(maps: list[SentenceAttention]) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Token attention of all sentences padded into one stack, the lengths, and the token
    groups of ``token_groups``.

    Shapes: n sentences -> (layers, n, heads, seq, seq), (n,), dict of (n, seq) bool.
    """
    maps = check_maps(maps)
    seq = max(len(m.tokens) for m in maps)
    layers, heads = maps[0].token_attention.shape[:2]
    out = torch.zeros(layers, len(maps), heads, seq, seq)
    for i, m in enumerate(maps):
        n = len(m.tokens)
        out[:, i, :, :n, :n] = m.token_attention  # (layers, heads, n, n)
    lengths = torch.tensor([len(m.tokens) for m in maps])
    return out, lengths, token_groups([m.tokens for m in maps], seq)


Loss = Callable[[Tensor], Tensor]


def attention_gradients(
    model, tokenizer, sentences: list[str], loss: Loss
) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
    """dL/d alpha for every attention weight of every head, where ``L = loss(embeddings)``
    on the unit-length mean-pooled embeddings of ``sentences`` (one padded batch).

    Returns ``(grad, attention, lengths, groups)``: the gradient and the attention stacked
    over layers (padding included; use ``lengths`` to ignore it), the real tokens per
    sentence, and ``token_groups``. The parameters get no gradient.

    Shapes: n sentences -> (layers, n, heads, seq, seq) twice, (n,), dict of (n, seq) bool.
    """
    check_callable("loss", loss, "loss(embeddings (n, hidden)) -> scalar tensor")
    enc = tokenize(model, tokenizer, sentences).to(model.device)  # checks the sentences
    out = model(**enc, output_attentions=True)
    m = enc["attention_mask"][..., None].to(out.last_hidden_state.dtype)  # (n, tokens, 1)
    pooled = (out.last_hidden_state * m).sum(1) / m.sum(1).clamp_min(1)  # (n, hidden)
    value = loss(torch.nn.functional.normalize(pooled, dim=-1))
    if not isinstance(value, Tensor) or value.numel() != 1 or not value.requires_grad:
        raise ValueError("loss must return a scalar tensor computed from the embeddings")
    grads = torch.autograd.grad(value.reshape(()), out.attentions)  # layers x (n, h, t, t)
    grad = torch.stack(grads).float().cpu()  # (layers, n, heads, t, t)
    attention = torch.stack(out.attentions).detach().float().cpu()  # (layers, n, heads, t, t)
    lengths = enc["attention_mask"].sum(1).cpu()
    ids = enc["input_ids"].cpu()
    tokens = [tokenizer.convert_ids_to_tokens(ids[i, : int(n)].tolist()) for i, n in
              enumerate(lengths)]  # fmt: skip
    return grad, attention, lengths, token_groups(tokens, ids.shape[1])
