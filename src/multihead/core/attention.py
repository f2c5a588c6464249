"""Attention you can read in one screen: one kernel for every layout, one base class that
carries the hook points, and the grouped layer that is multi-head, grouped-query and
multi-query attention at once.

Conventions (see the notation page): per-head vectors are ``(batch, heads, seq, d_head)``;
patterns ``(batch, heads, query, key)``, rows summing to 1 (or 0 for a query that sees no
key); ``W_Q`` is ``(heads, d_model, d_key)``, ``W_K`` and ``W_V`` ``(kv_heads, d_model, d)``,
``W_O`` ``(heads, d_value, d_model)``; masks are True = blocked (``multihead._checks``).

A forward pass runs ``project`` (every head's q, k, v in one matrix product), ``blocked``
(the one mask builder), ``attend`` (the one kernel, like transformers'
``eager_attention_forward``) and ``AttentionLayer.write`` (mask heads, concatenate, ``W_O``).
Every layer (``GroupedQueryAttention``, its case ``MultiHeadAttention``, talking heads,
latent attention) derives from ``AttentionLayer``, so every head tool works on all of them.

**What "a head" is.** A query head: its pattern, its output ``z``, its entry of
``head_mask``. Where query heads share a key/value head, masking one zeroes what it writes
and leaves the shared keys and values, and so the rest of its group, untouched.

``forward`` returns only the output; the internals pass through identity ``HookPoint``s
(``q``, ``k``, ``v``, ``scores``, ``pattern``, ``z``: each head's output before the mask).
``attend`` calls the fused ``scaled_dot_product_attention``, which never stores the
pattern, unless ``materialize`` is set or ``run_with_cache`` / ``run_with_hooks`` count a
request in ``explicit_requests`` while they record or change ``scores`` or ``pattern``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import (
    check_attention_inputs,
    check_bool,
    check_int,
    check_number,
    check_positive_int,
    check_probability,
    check_tensor,
)
from multihead.core.cache import KVCache, check_cache
from multihead.core.config import head_sizes
from multihead.core.hooks import HookPoint
from multihead.core.rotary import check_d_head, continue_positions, rotate


def key_softmax(scores: Tensor) -> Tensor:
    """Softmax over the keys (last dimension), where blocked keys hold ``-inf``.

    A query whose every key is blocked reads nothing: its row is all zeros (softmax alone
    would give nan), as in the fused kernel. This is the course's convention for a fully
    masked row; gradients through such a row are zero, not nan.

    Shapes: scores (..., query, key) -> (..., query, key); each row sums to 1, or is 0.
    """
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., query, 1)
    return scores.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)


def attention_pattern(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """Softmax of scaled dot products: the textbook formula, nothing fused.

    ``mask`` is boolean, True where a query may NOT look (broadcast to the pattern). A row
    whose every key is masked is all zeros (see ``key_softmax``).

    Shapes: q (..., query, d_key), k (..., key, d_key), mask broadcastable to
    (..., query, key) -> pattern (..., query, key), rows sum to 1.
    """
    check_tensor("q", q, min_ndim=2, layout="(..., query, d_key)")
    check_tensor("k", k, min_ndim=2, layout="(..., key, d_key)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share the last dimension, got {q.shape[-1]} and {k.shape[-1]}"
        )
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., query, key)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return key_softmax(scores)


def blocked(key_padding_mask: Tensor | None, causal: bool, q_len: int, k_len: int, device):
    """The keys each query may not look at: padding keys and, if ``causal``, future ones.
    The queries are the last ``q_len`` of the ``k_len`` positions (the earlier keys come from
    a cache): query ``i`` sits at position ``k_len - q_len + i`` and sees the keys up to it.

    Shapes: key_padding_mask (batch, k_len) -> (batch or 1, 1, q_len, k_len) bool, or None.
    """
    mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
    if causal:
        future = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
        future = future.triu(k_len - q_len + 1)  # (q_len, k_len): True above the diagonal
        mask = future if mask is None else mask | future
    return mask


def project(x: Tensor, *weights: tuple[Tensor, Tensor | None]) -> list[Tensor]:
    """Every head of one or more projections ``(W, b)`` of ``x`` in a single matrix product
    (as nanoGPT's ``c_attn`` computes q, k and v at once).

    Shapes: x (batch, seq, d_model), each W (heads, d_model, d_head), b (heads, d_head)
    -> one (batch, heads, seq, d_head) tensor per projection.
    """
    d = x.shape[-1]
    flat = torch.cat([W.permute(1, 0, 2).reshape(d, -1) for W, _ in weights], dim=1)
    y = x @ flat  # (batch, seq, sum of heads * d_head)
    if all(b is not None for _, b in weights):
        y = y + torch.cat([b.flatten() for _, b in weights])
    parts = y.split([W.shape[0] * W.shape[2] for W, _ in weights], dim=-1)
    return [
        part.unflatten(-1, (W.shape[0], W.shape[2])).transpose(1, 2)  # (batch, heads, seq, d)
        for (W, _), part in zip(weights, parts, strict=True)
    ]


def repeat_kv(x: Tensor, group: int) -> Tensor:
    """Each key/value head once for every query head of its group: query head ``h`` reads
    key/value head ``h // group`` (groups of consecutive heads).

    Shapes: x (batch, kv_heads, len, d) -> (batch, kv_heads * group, len, d).
    """
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def attend(layer: AttentionLayer, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
           dropout: float = 0.0) -> Tensor:  # fmt: skip
    """The one attention kernel: each query head's ``softmax(q k^T / sqrt(d_key)) v``, where
    query head ``h`` reads key/value head ``h // group``.

    On the explicit path (``layer.materialize`` or ``layer.explicit_requests``) the scores
    and the pattern pass through ``layer.scores`` and ``layer.pattern``; otherwise the fused
    kernel computes the same output without storing them. The scale is ``1 / sqrt(
    layer.d_key)`` whatever the size of ``q`` (latent attention scores in another space).
    ``dropout`` drops pattern entries (training only).

    Shapes: q (batch, heads, q_len, d), k (batch, kv_heads, k_len, d), v (batch, kv_heads,
    k_len, d_v), mask (batch or 1, 1, q_len, k_len) -> (batch, heads, q_len, d_v).
    """
    group = q.shape[1] // k.shape[1]
    if layer.materialize or layer.explicit_requests:  # explicit: scores, pattern hooked
        scores = (q / math.sqrt(layer.d_key)) @ repeat_kv(k, group).transpose(-2, -1)
        scores = scores if mask is None else scores.masked_fill(mask, float("-inf"))
        pattern = layer.pattern(key_softmax(layer.scores(scores)))  # (batch, heads, q, k)
        pattern = F.dropout(pattern, dropout, training=True) if dropout else pattern
        return pattern @ repeat_kv(v, group)
    allowed = None if mask is None else ~mask  # the kernel's mask means "may attend"
    scale = 1 / math.sqrt(layer.d_key)
    return F.scaled_dot_product_attention(
        q, k, v, allowed, dropout, scale=scale, enable_gqa=group > 1
    )


def xavier_(W: Tensor, fan_in: int, fan_out: int) -> None:
    """Xavier-uniform init, as if ``W`` were one ``nn.Linear(fan_in, fan_out)``. Shapes: any."""
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    nn.init.uniform_(W, -bound, bound)


class AttentionLayer(nn.Module):
    """What every attention layer shares: ``n_heads`` query heads, each writing ``d_value``
    numbers through ``W_O``; ``head_mask`` (a buffer, 1 keeps a head, 0 silences it; change
    it with ``interventions.ablation.head_masks``); the hook points ``q``, ``scores`` and
    ``pattern`` (explicit path only) and ``z`` (each head's output before the mask); the
    explicit-path switch ``materialize`` and the count ``explicit_requests``. A subclass
    projects (and may rotate, cache or decompress), then calls ``attend`` and ``write``.

    Shapes: see ``write``.
    """

    def __init__(self, d_model: int, n_heads: int, d_key: int, d_value: int, *,
                 bias: bool, attn_dropout: float = 0.0) -> None:  # fmt: skip
        super().__init__()
        self.d_model, self.n_heads, self.d_key, self.d_value = d_model, n_heads, d_key, d_value
        self.attn_dropout = check_probability("attn_dropout", attn_dropout)
        self.materialize = False  # the public switch: always take the explicit path
        self.explicit_requests = 0  # live hooks that need it (counted by core.hooks)
        self.W_O = nn.Parameter(torch.empty(n_heads, d_value, d_model))
        self.register_parameter("b_O", nn.Parameter(torch.zeros(d_model)) if bias else None)
        self.register_buffer("head_mask", torch.ones(n_heads))  # 1 keeps a head, 0 silences it
        self.q, self.z = HookPoint(), HookPoint()
        self.scores = HookPoint(needs_materialize=True)  # explicit path only
        self.pattern = HookPoint(needs_materialize=True)

    def write(self, z: Tensor) -> Tensor:
        """Mask heads, concatenate them and apply ``W_O`` (and ``b_O``).

        Shapes: z (batch, heads, q_len, d_value) -> (batch, q_len, d_model).
        """
        z = self.z(z) * self.head_mask[:, None, None]  # masked heads write 0
        out = z.transpose(1, 2).flatten(2) @ self.W_O.flatten(0, 1)  # (batch, q_len, d_model)
        return out if self.b_O is None else out + self.b_O

    def check_heads(self, heads: Iterable[int]) -> list[int]:
        """``heads`` as a list, after checking each is a head index. Shapes: none."""
        return [check_int(f"heads[{j}]", i, 0, self.n_heads) for j, i in enumerate(heads)]

    def prune_heads(self, heads: Iterable[int]) -> None:
        """Removing heads for good is defined by the layers that can slice their weights.
        Shapes: none."""
        raise ValueError(f"a {type(self).__name__} cannot be pruned head by head; mask heads "
                         "instead (interventions.ablation.head_masks)")  # fmt: skip


class GroupedQueryAttention(AttentionLayer):
    """Attention whose ``n_heads`` query heads share ``n_kv_heads`` key/value heads
    (Shazeer 2019; Ainslie et al. 2023): ``n_kv_heads == n_heads`` is multi-head attention
    (``MultiHeadAttention``), ``n_kv_heads == 1`` multi-query attention. Consecutive query
    heads form a group: head ``h`` reads key/value head ``h // (n_heads // n_kv_heads)``.

    Args:
        d_model: width of the residual stream.
        n_heads: number of query heads.
        n_kv_heads: number of key/value heads; must divide ``n_heads``.
        d_head: size of each head's queries and keys (default ``d_model // n_heads``).
        d_value: size of each head's values (default ``d_head``).
        bias: add biases to the four projections.
        attn_dropout: dropout on the attention pattern (training only).
        rotary: rotate queries and keys by their positions after the projection (RoPE,
            ``core.rotary``; ``d_head`` must be even), with frequencies from ``rope_base``.

    ``forward(query, key=None, value=None, *, key_padding_mask=None, causal=False,
    cache=None, positions=None)`` attends from ``query`` to ``key``/``value``
    (self-attention when they are None). ``key_padding_mask`` is True at padding keys;
    ``causal=True`` lets each query see the keys up to its own position. With a ``KVCache``
    (self-attention only) the new keys and values (and padding mask) are appended to it and
    the queries attend over all of it; the cache stores rotated keys, so cached decoding
    equals the full pass. ``positions`` (rotary only) are the new tokens' positions,
    ``(seq,)`` or ``(batch, seq)``; by default they continue the cache (``0, 1, ...``
    without one). Hook points: ``q``, ``k`` (rotated, when ``rotary``) and ``v`` (the new
    tokens; ``n_kv_heads`` heads, not repeated), ``scores`` and ``pattern`` (explicit path),
    ``z``.

    Shapes: forward(query (batch, q_len, d_model), key/value (batch, k_len, d_model))
    -> (batch, q_len, d_model).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_head: int | None = None,
                 *, d_value: int | None = None, bias: bool = True, attn_dropout: float = 0.0,
                 rotary: bool = False, rope_base: float = 10000.0) -> None:  # fmt: skip
        d_key = head_sizes(d_model, n_heads, d_head, d_head)[0]
        d_value = d_key if d_value is None else check_positive_int("d_value", d_value)
        if n_heads % check_positive_int("n_kv_heads", n_kv_heads):
            raise ValueError(
                f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads} (each key/value head "
                "serves a group of the same number of query heads)"
            )
        if check_bool("rotary", rotary):
            check_d_head(d_key)
        bias = check_bool("bias", bias)
        super().__init__(d_model, n_heads, d_key, d_value, bias=bias, attn_dropout=attn_dropout)
        self.n_kv_heads, self.rotary = n_kv_heads, rotary
        self.rope_base = check_number("rope_base", rope_base, 1.0, None, "()")
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_key))
        self.W_K = nn.Parameter(torch.empty(n_kv_heads, d_model, d_key))
        self.W_V = nn.Parameter(torch.empty(n_kv_heads, d_model, d_value))
        sizes = {"b_Q": (n_heads, d_key), "b_K": (n_kv_heads, d_key), "b_V": (n_kv_heads, d_value)}
        for name, shape in sizes.items():
            self.register_parameter(name, nn.Parameter(torch.zeros(shape)) if bias else None)
        self.k, self.v = HookPoint(), HookPoint()
        self.reset_parameters()

    @property
    def d_head(self) -> int:
        """The size of each head's queries and keys (``d_key``). Shapes: none."""
        return self.d_key

    def forward(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
                key_padding_mask: Tensor | None = None, causal: bool = False,
                cache: KVCache | None = None, positions: Tensor | None = None,
                ) -> Tensor:  # fmt: skip
        """Shapes: query (batch, q_len, d_model), key/value (batch, k_len, d_model) -> as query."""
        check_cache(cache, key, value)
        query, key, value = check_attention_inputs(
            self.d_model, query, key, value, key_padding_mask, causal, cached=cache is not None
        )
        q, k, v = self.project_qkv(query, key, value)  # (batch, heads or kv_heads, len, d)
        if self.rotary:  # turn q and k by their positions; new tokens continue the cache
            at = continue_positions(cache, q.shape[2]) if positions is None else positions
            q, k = rotate(q, at, self.rope_base), rotate(k, at, self.rope_base)
        q, k, v = self.q(q), self.k(k), self.v(v)
        if cache is not None:  # the past tokens' keys and values, then the new ones
            k, v = cache.append(key_padding_mask, k=k, v=v)
            key_padding_mask = cache.key_padding_mask
        mask = blocked(key_padding_mask, causal, q.shape[2], k.shape[2], q.device)
        z = attend(self, q, k, v, mask, self.attn_dropout if self.training else 0.0)
        return self.write(z)  # z: (batch, heads, q_len, d_value)

    def project_qkv(self, query: Tensor, key: Tensor, value: Tensor) -> list[Tensor]:
        """Per-head queries, keys and values; inputs that are the same tensor (self-attention,
        or keys = values) share one matrix product. Shapes: -> (batch, heads, len, d_head)."""
        Q, K, V = (self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V)
        if key is query and value is query:
            return project(query, Q, K, V)
        if value is key:
            return project(query, Q) + project(key, K, V)
        return project(query, Q) + project(key, K) + project(value, V)

    def reset_parameters(self) -> None:
        """Xavier-uniform init, as if each projection were one ``nn.Linear``; zero biases."""
        d = self.d_model
        for W in (self.W_Q, self.W_K, self.W_V):
            xavier_(W, d, W.shape[0] * W.shape[2])
        xavier_(self.W_O, self.W_O.shape[0] * self.d_value, d)
        for b in (self.b_Q, self.b_K, self.b_V, self.b_O):
            if b is not None:
                nn.init.zeros_(b)

    @torch.no_grad()
    def prune_heads(self, heads: Iterable[int]) -> None:
        """Remove query heads for good by slicing the projections (fewer parameters and
        FLOPs); a key/value head goes with the last query head of its group. A grouped layer
        keeps its groups equal, so it prunes whole groups only. Masking (``head_mask``) is
        the reversible operation. Shapes: none."""
        drop = set(self.check_heads(heads))
        keep = [i for i in range(self.n_heads) if i not in drop]
        if not keep:
            raise ValueError(f"heads={sorted(drop)} would prune every head of the layer; keep one")
        group = self.n_heads // self.n_kv_heads
        kv_keep = sorted({i // group for i in keep})
        if len(keep) != group * len(kv_keep):
            raise ValueError(
                f"heads={sorted(drop)} would leave groups of unequal size in a layer whose "
                f"{self.n_kv_heads} key/value heads each serve {group} query heads; prune whole "
                "groups, or mask the heads instead (interventions.ablation.head_masks)"
            )
        for names, idx in ((("W_Q", "W_O", "b_Q"), keep), (("W_K", "W_V", "b_K", "b_V"), kv_keep)):
            rows = torch.tensor(idx, device=self.W_Q.device)
            for name in names:
                if getattr(self, name) is not None:
                    setattr(self, name, nn.Parameter(getattr(self, name)[rows].clone()))
        self.head_mask = self.head_mask[torch.tensor(keep, device=self.W_Q.device)].clone()
        self.n_heads, self.n_kv_heads = len(keep), len(kv_keep)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            f"d_key={self.d_key}, d_value={self.d_value}, rotary={self.rotary}, "
            f"materialize={self.materialize}"
        )


class MultiHeadAttention(GroupedQueryAttention):
    """Multi-head attention (Vaswani et al. 2017): the grouped layer with as many key/value
    heads as query heads, so every head has its own keys and values, with independent key
    size ``d_key`` and value size ``d_value``.

    Args:
        d_model: width of the residual stream.
        n_heads: number of heads.
        d_key: size of each head's queries and keys (default ``d_model // n_heads``).
        d_value: size of each head's values (default ``d_model // n_heads``).
        bias: add biases to the four projections.
        attn_dropout: dropout on the attention pattern (training only).

    ``forward(query, key=None, value=None, *, key_padding_mask=None, causal=False)`` as
    ``GroupedQueryAttention``.

    Shapes: forward(query (batch, q_len, d_model), key/value (batch, k_len, d_model))
    -> (batch, q_len, d_model).
    """

    def __init__(self, d_model: int, n_heads: int, d_key: int | None = None,
                 d_value: int | None = None, *, bias: bool = True,
                 attn_dropout: float = 0.0) -> None:  # fmt: skip
        d_key, d_value = head_sizes(d_model, n_heads, d_key, d_value)
        super().__init__(
            d_model, n_heads, n_heads, d_key, d_value=d_value, bias=bias, attn_dropout=attn_dropout
        )

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_key={self.d_key}, "
            f"d_value={self.d_value}, materialize={self.materialize}"
        )
