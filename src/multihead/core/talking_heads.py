"""Talking-heads attention (Shazeer et al. 2020): heads mix their logits before the softmax
and their weights after it.

With ``h_k`` query/key heads, ``h`` softmax heads and ``h_v`` value heads::

    J = Q K^T / sqrt(d_k)              (batch, h_k, query, key)   one score map per key head
    L = J mixed by P_l  (h_k -> h)     (batch, h,   query, key)   L_j = sum_i P_l[i, j] J_i
    W = softmax(L) over the keys       (batch, h,   query, key)
    U = W mixed by P_w  (h -> h_v)     (batch, h_v, query, key)   U_m = sum_j P_w[j, m] W_j
    O = U V                            (batch, h_v, query, d_v)   then W_O as usual

It is kept apart from ``MultiHeadAttention`` so the plain path stays one screen long. Both
mixing matrices start as the identity (a truncated identity when the head counts differ), so
with equal head counts the layer equals plain multi-head attention at init.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from multihead._checks import check_attention_inputs, check_bool, check_positive_int
from multihead.core.attention import MultiHeadAttention, blocked, key_softmax
from multihead.core.config import head_sizes
from multihead.core.hooks import HookPoint


class TalkingHeadsAttention(MultiHeadAttention):
    """Multi-head attention with learned mixing of logits (``pre_mix``) and of weights
    (``post_mix``), each switchable.

    Args:
        d_model, d_key, d_value, bias: as ``MultiHeadAttention``.
        n_softmax_heads: ``h``, the number of softmax heads.
        n_key_heads: ``h_k`` (default ``n_heads``); requires ``pre_mix`` if it differs from ``h``.
        n_value_heads: ``h_v`` (default ``n_heads``); requires ``post_mix`` if it differs.
        pre_mix, post_mix: learn ``P_l`` of shape (h_k, h) and ``P_w`` of shape (h, h_v).

    Hook points: ``scores`` (J, per key head), ``logits`` (L), ``pattern`` (W, rows sum to
    1, or are 0 for a query that sees no key, as ``key_softmax`` says), ``mixed_pattern``
    (U), ``z`` (per value head), plus ``q``, ``k``, ``v``. The three
    head counts are ``n_key_heads``, ``n_softmax_heads`` and ``n_value_heads``; ``n_heads``
    (inherited) counts the heads that write the output, so it equals ``n_value_heads``, and
    ``head_mask`` and gates act on those.

    Shapes: forward(query (batch, q_len, d_model), ...) -> (batch, q_len, d_model).
    """

    def __init__(
        self,
        d_model: int,
        n_softmax_heads: int,
        d_key: int | None = None,
        d_value: int | None = None,
        *,
        n_key_heads: int | None = None,
        n_value_heads: int | None = None,
        pre_mix: bool = True,
        post_mix: bool = True,
        bias: bool = True,
    ) -> None:
        h = check_positive_int("n_softmax_heads", n_softmax_heads)
        h_k = h if n_key_heads is None else check_positive_int("n_key_heads", n_key_heads)
        h_v = h if n_value_heads is None else check_positive_int("n_value_heads", n_value_heads)
        check_bool("pre_mix", pre_mix)
        check_bool("post_mix", post_mix)
        if h_k != h and not pre_mix:
            raise ValueError(
                f"n_key_heads={h_k} differs from n_softmax_heads={h}: that needs pre_mix=True "
                "(the logit mixing maps key heads to softmax heads)"
            )
        if h_v != h and not post_mix:
            raise ValueError(
                f"n_value_heads={h_v} differs from n_softmax_heads={h}: that needs "
                "post_mix=True (the weight mixing maps softmax heads to value heads)"
            )
        d_key, d_value = head_sizes(d_model, h, d_key, d_value)
        # The parent builds h_v value heads (the heads that write the output, which
        # ``n_heads`` and ``head_mask`` count); the query/key heads are rebuilt below.
        super().__init__(d_model, h_v, d_key, d_value, bias=bias)
        self.n_softmax_heads, self.n_key_heads, self.n_value_heads = h, h_k, h_v
        self.materialize = True  # there is no fused kernel for the mixing steps
        self.W_Q = nn.Parameter(torch.empty(h_k, d_model, d_key))
        self.W_K = nn.Parameter(torch.empty(h_k, d_model, d_key))
        if bias:
            self.b_Q = nn.Parameter(torch.zeros(h_k, d_key))
            self.b_K = nn.Parameter(torch.zeros(h_k, d_key))
        self.P_l = nn.Parameter(torch.eye(h_k, h)) if pre_mix else None
        self.P_w = nn.Parameter(torch.eye(h, h_v)) if post_mix else None
        self.logits, self.mixed_pattern = HookPoint(), HookPoint()
        self.scores, self.pattern = HookPoint(), HookPoint()  # on the only path: torch hooks fire
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier init of the projections (as the parent); identity mixing matrices."""
        super().reset_parameters()
        for P in (getattr(self, "P_l", None), getattr(self, "P_w", None)):
            if P is not None:
                with torch.no_grad():
                    P.copy_(torch.eye(*P.shape))

    def prune_heads(self, heads) -> None:
        """Not defined: the mixing matrices tie every head to every other one."""
        raise ValueError(
            "talking-heads attention cannot be pruned head by head, because P_l and P_w mix "
            "every head into every other one; mask heads instead (interventions.ablation."
            "head_masks), or train a plain MultiHeadAttention model with fewer heads"
        )

    @staticmethod
    def mix(x: Tensor, P: Tensor) -> Tensor:
        """Mix the head axis of ``x`` with ``P``: ``out_j = sum_i P[i, j] x_i``.

        Shapes: x (batch, heads_in, query, key), P (heads_in, heads_out)
        -> (batch, heads_out, query, key).
        """
        if P.ndim != 2 or x.shape[1] != P.shape[0]:
            raise ValueError(
                f"mixing matrix of shape {tuple(P.shape)} does not fit {x.shape[1]} heads"
            )
        return torch.einsum("bihk,ij->bjhk", x, P)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        """As ``MultiHeadAttention.forward``, with the two mixing steps.

        Shapes: query (batch, q_len, d_model), key/value (batch, k_len, d_model),
        key_padding_mask (batch, k_len) -> (batch, q_len, d_model).
        """
        query, key, value = check_attention_inputs(
            self.d_model, query, key, value, key_padding_mask, causal
        )
        mask = blocked(key_padding_mask, causal, query.shape[1], key.shape[1], query.device)
        q, k, v = self.project_qkv(query, key, value)
        q, k, v = self.q(q), self.k(k), self.v(v)  # q, k (b, h_k, len, d_key); v (b, h_v, ...)
        scores = self.scores((q / math.sqrt(self.d_key)) @ k.transpose(-2, -1))  # (b, h_k, q, k)
        logits = scores if self.P_l is None else self.mix(scores, self.P_l)  # (b, h, q, k)
        if mask is not None:
            # Mask after mixing: a masked key must stay masked in every mixed head.
            logits = logits.masked_fill(mask, float("-inf"))
        logits = self.logits(logits)
        pattern = self.pattern(key_softmax(logits))  # (b, h, q, k); a row with no key is 0
        mixed = pattern if self.P_w is None else self.mix(pattern, self.P_w)  # (b, h_v, q, k)
        mixed = self.mixed_pattern(mixed)
        return self.write(mixed @ v)  # each value head's output, (batch, h_v, q_len, d_value)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_key_heads={self.n_key_heads}, "
            f"n_softmax_heads={self.n_softmax_heads}, n_value_heads={self.n_value_heads}, "
            f"d_key={self.d_key}, "
            f"d_value={self.d_value}, pre_mix={self.P_l is not None}, "
            f"post_mix={self.P_w is not None}"
        )
