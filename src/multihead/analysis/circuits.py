"""Heads as circuits: pattern scores for previous-token and induction heads, and the QK and
OV circuits of an attention-only model read straight from its weights.

Induction heads (Olsson et al. 2022) come in pairs: a *previous-token head* in an early layer
writes into each position which token came just before it; an *induction head* in a later layer
uses that to find the position right after an earlier occurrence of the current token and
copies the token there. On a random segment repeated once, the second copy is then predicted.

For a model without MLPs or LayerNorm, Elhage et al. (2021) read each head as two circuits
over the vocabulary: the *QK circuit* ``W_E W_Q W_K^T W_E^T`` (which token attends to which)
and the *OV circuit* ``W_E W_V W_O W_U`` (what attending to a token does to the logits). A
copying head's OV circuit has mostly positive eigenvalues.

Weights use the package's layout: ``W_E`` (vocab, d_model), ``W_Q``/``W_K``/``W_V``
(heads, d_model, d_head), ``W_O`` (heads, d_head, d_model), ``W_U`` (d_model, vocab). Key and
value weights may have fewer heads than queries (grouped-query attention): head ``h`` uses
key/value head ``h // (heads // kv_heads)``. Biases are left out: the circuits are the
weight products alone (exact for a model without biases, or with zero ones).
"""

from __future__ import annotations

import torch
from torch import Tensor

from multihead._checks import (
    check_int,
    check_int_tensor,
    check_pattern,
    check_positive_int,
    check_tensor,
)


def _square(pattern: Tensor) -> Tensor:
    p = check_pattern("pattern", pattern, 2, "(..., n, n)")
    if p.shape[-1] != p.shape[-2] or p.shape[-1] < 2:
        raise ValueError(
            f"pattern must be self-attention over n >= 2 tokens, (..., n, n), got {tuple(p.shape)}"
        )
    return p


def previous_token_score(pattern: Tensor) -> Tensor:
    """Mean weight each query ``i = 1 .. n - 1`` puts on key ``i - 1``, the token just before
    it (query 0 has no previous token). A pure previous-token head scores 1.

    Shapes: pattern (..., n, n), e.g. (batch, heads, n, n) -> (...), e.g. (batch, heads).
    """
    p = _square(pattern)
    return p.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # entries (i, i - 1)


def induction_score(pattern: Tensor, segment: int | Tensor, prefix: int | Tensor = 0) -> Tensor:
    """On a sequence of ``prefix`` tokens, then a segment of ``segment`` tokens, then the same
    segment again (``tasks.repeats.RepeatTask``): the mean weight each query ``i`` of the
    second copy puts on key ``i - segment + 1``, the token right after the earlier copy of its
    own token. A pure induction head scores 1. ``segment`` and ``prefix`` may be one int for
    every sequence, or one per sequence (tensors ``(batch,)``, as ``sample_layout`` gives them,
    with a pattern whose first dimension is the batch).

    Shapes: pattern (..., n, n) with n >= prefix + 2 * segment -> (...); with per-sequence
    segment and prefix, pattern (batch, ..., n, n) -> (batch, ...).
    """
    p = _square(pattern)
    n = p.shape[-1]
    if isinstance(segment, Tensor) or isinstance(prefix, Tensor):
        L = check_int_tensor("segment", segment, ndim=1, lo=1, layout="(batch,)")
        P = check_int_tensor("prefix", prefix, ndim=1, lo=0, layout="(batch,)")
        if L.shape != P.shape or p.ndim < 3 or p.shape[0] != L.shape[0]:
            raise ValueError("per-sequence segment and prefix need a pattern (batch, ..., n, n)")
        if bool((P + 2 * L > n).any()):
            raise ValueError(f"pattern covers {n} tokens, fewer than some prefix + 2 * segment")
        j = torch.arange(int(L.max()), device=p.device)  # (m,)
        valid = j[None] < L[:, None]  # (batch, m): the second copy's queries of each sequence
        q = (P + L)[:, None] + j[None]  # (batch, m)
        q = torch.where(valid, q, torch.zeros_like(q))
        k = torch.where(valid, q - L[:, None] + 1, torch.zeros_like(q))
        lead = p.shape[1:-2]
        flat = p.reshape(p.shape[0], -1, n, n)  # (batch, units, n, n)
        b = torch.arange(p.shape[0], device=p.device)[:, None, None]
        u = torch.arange(flat.shape[1], device=p.device)[None, :, None]
        w = flat[b, u, q[:, None, :], k[:, None, :]] * valid[:, None, :]  # (batch, units, m)
        return (w.sum(-1) / L[:, None]).reshape(p.shape[0], *lead)
    check_positive_int("segment", segment)
    check_int("prefix", prefix, 0)
    if n < prefix + 2 * segment:
        raise ValueError(
            f"pattern covers {n} tokens, fewer than prefix + 2 * segment = "
            f"{prefix + 2 * segment}; pass the segment and prefix of the repeated sequence"
        )
    # diagonal entry j is (query j + segment - 1, key j); queries prefix + segment .. + 2S - 1
    diagonal = p.diagonal(offset=-(segment - 1), dim1=-2, dim2=-1)
    return diagonal[..., prefix + 1 : prefix + segment + 1].mean(dim=-1)


def duplicate_token_score(pattern: Tensor, segment: int, prefix: int = 0) -> Tensor:
    """On a sequence of ``prefix`` tokens, then a segment, then the same segment again: the
    mean weight each query ``i`` of the second copy puts on key ``i - segment``, the earlier
    copy of its own token (a *duplicate-token head*; the induction head looks one further).

    Shapes: pattern (..., n, n) with n >= prefix + 2 * segment -> (...).
    """
    p = _square(pattern)
    check_positive_int("segment", segment)
    check_int("prefix", prefix, 0)
    if p.shape[-1] < prefix + 2 * segment:
        raise ValueError(
            f"pattern covers {p.shape[-1]} tokens, fewer than prefix + 2 * segment = "
            f"{prefix + 2 * segment}; pass the segment and prefix of the repeated sequence"
        )
    # diagonal entry j is (query j + segment, key j); the keys of the first copy
    diagonal = p.diagonal(offset=-segment, dim1=-2, dim2=-1)
    return diagonal[..., prefix : prefix + segment].mean(dim=-1)


def first_token_score(pattern: Tensor) -> Tensor:
    """Mean weight each query ``i = 1 .. n - 1`` puts on key 0, the first token of the
    sequence (an attention *sink* when large; query 0 has no other key and is left out).

    Shapes: pattern (..., n, n) -> (...).
    """
    return _square(pattern)[..., 1:, 0].mean(dim=-1)


def uniform_causal_share(n: int) -> float:
    """What a causal head that spreads its weight evenly puts on one given earlier key (the
    first token, or the previous one), averaged over the queries ``i = 1 .. n - 1``:
    ``mean 1 / (i + 1)``, the chance level of ``first_token_score`` and
    ``previous_token_score``.

    Shapes: none.
    """
    check_int("n", n, 2)
    return sum(1.0 / (i + 1) for i in range(1, n)) / (n - 1)


def copy_scores(logits: Tensor, tokens: Tensor, segment: int, prefix: int = 0) -> dict[str, Tensor]:
    """How well a model continues the second copy of a repeated segment: at every position of
    the second copy that predicts a token of the second copy, the loss (nats) and whether the
    top logit is the right token, averaged per sequence.

    Shapes: logits (batch, n, vocab), tokens (batch, n) -> {"loss", "accuracy"}: (batch,).
    """
    check_tensor("logits", logits, ndim=3, layout="(batch, n, vocab)")
    check_int_tensor("tokens", tokens, ndim=2, lo=0, hi=logits.shape[-1], layout="(batch, n)")
    check_positive_int("segment", segment)
    check_int("prefix", prefix, 0)
    if tokens.shape != logits.shape[:2] or tokens.shape[1] < prefix + 2 * segment:
        raise ValueError(
            f"tokens {tuple(tokens.shape)} must match logits {tuple(logits.shape[:2])} and hold "
            f"prefix + 2 * segment = {prefix + 2 * segment} tokens"
        )
    at = torch.arange(prefix + segment, prefix + 2 * segment - 1, device=logits.device)
    pred, target = logits[:, at].float(), tokens[:, at + 1]  # (batch, segment - 1, vocab)
    loss = torch.nn.functional.cross_entropy(pred.transpose(1, 2), target, reduction="none")
    right = (pred.argmax(-1) == target).float()
    return {"loss": loss.mean(-1), "accuracy": right.mean(-1)}


def _per_head(name: str, W: Tensor, heads: int) -> Tensor:
    """``W`` (kv_heads, ...) repeated so that head ``h`` finds its key/value head at ``h``."""
    if heads % W.shape[0]:
        raise ValueError(
            f"{name} has {W.shape[0]} heads, which must divide the {heads} query heads "
            "(grouped-query attention)"
        )
    return W.repeat_interleave(heads // W.shape[0], dim=0)  # (heads, ...)


def _weights(**named: tuple[Tensor, str]) -> None:
    for name, (W, layout) in named.items():
        check_tensor(name, W, ndim=layout.count(",") + 1, layout=layout)


def qk_circuit(W_E: Tensor, W_Q: Tensor, W_K: Tensor) -> Tensor:
    """Each head's QK circuit ``W_E W_Q[h] W_K[h]^T W_E^T``: entry ``(a, b)`` is the score a
    query token ``a`` gives a key token ``b`` through the embeddings alone, before the
    ``1 / sqrt(d_head)`` scale, without positions or biases.

    Shapes: W_E (vocab, d_model), W_Q (heads, d_model, d_head), W_K (kv_heads, d_model,
    d_head) -> (heads, vocab, vocab), rows: query token, columns: key token.
    """
    _weights(
        W_E=(W_E, "(vocab, d_model)"),
        W_Q=(W_Q, "(heads, d_model, d_head)"),
        W_K=(W_K, "(kv_heads, d_model, d_head)"),
    )
    if W_Q.shape[1] != W_E.shape[1] or W_K.shape[1:] != W_Q.shape[1:]:
        raise ValueError(
            f"W_Q {tuple(W_Q.shape)} and W_K {tuple(W_K.shape)} must read d_model="
            f"{W_E.shape[1]} (W_E's width) into one d_head"
        )
    queries = W_E @ W_Q  # (heads, vocab, d_head): every token as a query
    keys = W_E @ _per_head("W_K", W_K, W_Q.shape[0])  # (heads, vocab, d_head)
    return queries @ keys.transpose(-2, -1)  # (heads, vocab, vocab)


def ov_circuit(W_E: Tensor, W_V: Tensor, W_O: Tensor, W_U: Tensor) -> Tensor:
    """Each head's OV circuit ``W_E W_V[h] W_O[h] W_U``: row ``a`` is what the head adds to
    the logits when it attends (with weight 1) to token ``a``, column ``b`` the logit of
    ``b``. A head that copies raises the diagonal. (Elhage et al. write the transpose,
    ``W_U W_O W_V W_E`` on column vectors; the eigenvalues are the same.)

    Shapes: W_E (vocab, d_model), W_V (kv_heads, d_model, d_head), W_O (heads, d_head,
    d_model), W_U (d_model, vocab) -> (heads, vocab, vocab), rows: source token, columns:
    output logits.
    """
    _weights(
        W_E=(W_E, "(vocab, d_model)"),
        W_V=(W_V, "(kv_heads, d_model, d_head)"),
        W_O=(W_O, "(heads, d_head, d_model)"),
        W_U=(W_U, "(d_model, vocab)"),
    )
    d_model, d_head = W_E.shape[1], W_O.shape[1]
    if W_V.shape[1:] != (d_model, d_head) or W_O.shape[2] != d_model or W_U.shape[0] != d_model:
        raise ValueError(
            f"W_V {tuple(W_V.shape)}, W_O {tuple(W_O.shape)} and W_U {tuple(W_U.shape)} must "
            f"share d_model={d_model} (W_E's width) and d_head={d_head}"
        )
    values = W_E @ _per_head("W_V", W_V, W_O.shape[0])  # (heads, vocab, d_head)
    return (values @ W_O) @ W_U  # (heads, vocab, vocab)


def copying_score(ov: Tensor) -> Tensor:
    """Elhage et al.'s copying score of a circuit: ``sum(lambda) / sum(|lambda|)`` over its
    eigenvalues (real part), from 1 (every eigenvalue positive: the identity) to -1 (every
    one negative). It is nan for a zero circuit, which has no eigenvalue to weigh.

    Shapes: ov (..., n, n), e.g. (heads, vocab, vocab) -> (...).
    """
    check_tensor("ov", ov, min_ndim=2, layout="(..., n, n)", finite=True)
    if ov.shape[-1] != ov.shape[-2]:
        raise ValueError(f"ov must be square, (..., n, n), got {tuple(ov.shape)}")
    eig = torch.linalg.eigvals(ov.to(torch.float64))  # (..., n), complex
    score = eig.sum(dim=-1).real / eig.abs().sum(dim=-1)
    return score.to(ov.dtype)
