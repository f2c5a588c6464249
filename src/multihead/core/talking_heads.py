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

from multihead._checks import check_positive_int
from multihead.core.attention import HookPoint, MultiHeadAttention


class TalkingHeadsAttention(MultiHeadAttention):
    """Multi-head attention with learned mixing of logits (``pre_mix``) and of weights
    (``post_mix``), each switchable.

    Args:
        d_model, d_key, d_value, bias, drophead: as ``MultiHeadAttention`` (DropHead
            acts on the value heads).
        n_heads: ``h``, the number of softmax heads.
        n_key_heads: ``h_k`` (default ``n_heads``); requires ``pre_mix`` if it differs.
        n_value_heads: ``h_v`` (default ``n_heads``); requires ``post_mix`` if it differs.
        pre_mix, post_mix: learn ``P_l`` of shape (h_k, h) and ``P_w`` of shape (h, h_v).

    Hook points: ``scores`` (J, per key head), ``logits`` (L), ``pattern`` (W, rows sum to
    1), ``mixed_pattern`` (U), ``z`` (per value head), plus ``q``, ``k``, ``v``.

    Shapes: forward(query (batch, q_len, d_model), ...) -> (batch, q_len, d_model).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_key: int | None = None,
        d_value: int | None = None,
        *,
        n_key_heads: int | None = None,
        n_value_heads: int | None = None,
        pre_mix: bool = True,
        post_mix: bool = True,
        bias: bool = True,
        drophead: float = 0.0,
    ) -> None:
        check_positive_int("n_heads", n_heads)
        h_k = n_heads if n_key_heads is None else check_positive_int("n_key_heads", n_key_heads)
        h_v = (
            n_heads if n_value_heads is None else check_positive_int("n_value_heads", n_value_heads)
        )
        if not isinstance(pre_mix, bool) or not isinstance(post_mix, bool):
            raise TypeError("pre_mix and post_mix must be bools")
        if h_k != n_heads and not pre_mix:
            raise ValueError(
                f"n_key_heads={h_k} differs from n_heads={n_heads}: that needs pre_mix=True "
                "(the logit mixing maps key heads to softmax heads)"
            )
        if h_v != n_heads and not post_mix:
            raise ValueError(
                f"n_value_heads={h_v} differs from n_heads={n_heads}: that needs post_mix=True "
                "(the weight mixing maps softmax heads to value heads)"
            )
        if (d_key is None or d_value is None) and d_model % n_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}; "
                "choose sizes that divide, or pass d_key and d_value explicitly"
            )
        d_key = d_model // n_heads if d_key is None else d_key
        d_value = d_model // n_heads if d_value is None else d_value
        # The parent builds h_v value heads and W_O; the query/key heads are rebuilt below.
        super().__init__(d_model, h_v, d_key, d_value, bias=bias, drophead=drophead)
        self.n_softmax_heads, self.n_key_heads = n_heads, h_k
        self.W_Q = nn.Parameter(torch.empty(h_k, d_model, d_key))
        self.W_K = nn.Parameter(torch.empty(h_k, d_model, d_key))
        if bias:
            self.b_Q = nn.Parameter(torch.zeros(h_k, d_key))
            self.b_K = nn.Parameter(torch.zeros(h_k, d_key))
        self.P_l = nn.Parameter(torch.eye(h_k, n_heads)) if pre_mix else None
        self.P_w = nn.Parameter(torch.eye(n_heads, h_v)) if post_mix else None
        self.logits, self.mixed_pattern = HookPoint(), HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier init of the projections (as the parent); identity mixing matrices."""
        super().reset_parameters()
        for P in (getattr(self, "P_l", None), getattr(self, "P_w", None)):
            if P is not None:
                with torch.no_grad():
                    P.copy_(torch.eye(*P.shape))

    def prune_heads(self, heads) -> None:
        raise NotImplementedError("pruning is defined for MultiHeadAttention only")

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
        query, key, value, mask = self._inputs(query, key, value, key_padding_mask, causal)
        batch, q_len, _ = query.shape
        q, k, v = self._qkv(query, key, value)
        scores = self.scores((q / math.sqrt(self.d_key)) @ k.transpose(-2, -1))  # (b, h_k, q, k)
        logits = scores if self.P_l is None else self.mix(scores, self.P_l)  # (b, h, q, k)
        if mask is not None:
            # Mask after mixing: a masked key must stay masked in every mixed head.
            logits = logits.masked_fill(mask, float("-inf"))
        logits = self.logits(logits)
        pattern = self.pattern(logits.softmax(dim=-1))  # (b, h, q, k)
        mixed = pattern if self.P_w is None else self.mix(pattern, self.P_w)  # (b, h_v, q, k)
        mixed = self.mixed_pattern(mixed)
        z = self.z(mixed @ v)  # (batch, h_v, q_len, d_value)
        return self._output(z, batch, q_len)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_key_heads={self.n_key_heads}, "
            f"n_heads={self.n_softmax_heads}, n_value_heads={self.n_heads}, d_key={self.d_key}, "
            f"d_value={self.d_value}, pre_mix={self.P_l is not None}, "
            f"post_mix={self.P_w is not None}"
        )


# ---------------------------------------------------------------------- fitting patterns
MIX_MODES = ("single", "pre", "post")


def mixed_head_pattern(X: Tensor, W_q: Tensor, W_k: Tensor, mix: Tensor, mode: str) -> Tensor:
    """One output pattern built from ``h`` heads, in the column convention of chapter 3.

    Each head has logits ``L_i = (W_k^i X)^T (W_q^i X) / sqrt(d_k)``. ``mode="single"`` uses
    head 0 alone; ``"pre"`` mixes the logits, ``softmax(sum_i mix_i L_i)`` (talking heads
    before the softmax); ``"post"`` mixes the distributions with convex weights,
    ``sum_i softmax(mix)_i softmax(L_i)`` (after the softmax).

    Shapes: X (..., d, n), W_q and W_k (..., h, d_k, d), mix (..., h) -> P (..., n, n),
    P[key, query], columns sum to 1.
    """
    from multihead._checks import check_choice

    check_choice("mode", mode, MIX_MODES)
    if W_q.shape != W_k.shape or W_q.ndim < 3:
        raise ValueError(
            f"W_q {tuple(W_q.shape)} and W_k {tuple(W_k.shape)} must match (..., h, d_k, d)"
        )
    if mix.shape[-1] != W_q.shape[-3]:
        raise ValueError(f"mix has {mix.shape[-1]} weights for {W_q.shape[-3]} heads")
    Xh = X.unsqueeze(-3)  # (..., 1, d, n): shared by the heads
    logits = (W_k @ Xh).transpose(-2, -1) @ (W_q @ Xh) / math.sqrt(W_q.shape[-2])  # (..., h, n, n)
    if mode == "single":
        return logits[..., 0, :, :].softmax(dim=-2)
    if mode == "pre":
        return (mix[..., :, None, None] * logits).sum(dim=-3).softmax(dim=-2)
    weights = mix.softmax(dim=-1)[..., :, None, None]  # (..., h, 1, 1), convex
    return (weights * logits.softmax(dim=-2)).sum(dim=-3)


def fit_mixed_heads(
    target: Tensor,
    X: Tensor,
    d_key: int,
    n_heads: int,
    mode: str,
    generator: torch.Generator,
    *,
    steps: int = 300,
):
    """Best fit of ``mixed_head_pattern`` to each target (L-BFGS on the column KL).

    Shapes: target (batch, n, n), X (batch, d, n) -> ``patternfit.FitResult`` with kl (batch,).
    """
    from multihead.analysis.patternfit import fit_pattern

    check_positive_int("d_key", d_key)
    check_positive_int("n_heads", n_heads)
    batch, d, _ = X.shape
    shape = (batch, n_heads, d_key, d)
    W_q = torch.randn(shape, generator=generator, dtype=X.dtype) / math.sqrt(d)
    W_k = torch.randn(shape, generator=generator, dtype=X.dtype) / math.sqrt(d)
    mix = torch.ones(batch, n_heads, dtype=X.dtype) / n_heads

    def pattern_fn(params):
        return mixed_head_pattern(X, params[0], params[1], params[2], mode)

    return fit_pattern(target, pattern_fn, [W_q, W_k, mix], steps=steps)
