"""Sharing and compressing keys and values: the KV cache, grouped-query attention (MQA/GQA),
multi-head latent attention (MLA) and exact attention computed in tiles.

A decoder that generates one token at a time keeps, in every layer, what each past token
contributes to attention: its keys and values (``KVCache``). The cache grows with the context,
and these layers shrink it:

* ``GroupedQueryAttention`` (Shazeer 2019; Ainslie et al. 2023): ``n_heads`` query heads share
  ``n_kv_heads`` key/value heads, so the cache holds ``n_kv_heads`` heads instead of
  ``n_heads`` (multi-query attention when ``n_kv_heads == 1``);
* ``LatentAttention`` (DeepSeek-AI 2024, without its rotary part): each token's keys and
  values are decompressed from one latent vector of size ``d_latent``, and the cache holds
  only that vector.

Exact attention computed in tiles of keys (the online softmax) is in ``core.tiles``.

Both layers follow ``MultiHeadAttention``: hook points, the ``materialize`` /
``explicit_requests`` switch, a ``head_mask`` buffer (1 = kept), masks True = blocked.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_number,
    check_positive_int,
    check_tensor,
)
from multihead._checks import check_self_attention_inputs as check_inputs
from multihead.core.attention import MultiHeadAttention, key_softmax, project
from multihead.core.config import head_sizes
from multihead.core.hooks import HookPoint
from multihead.core.rotary import check_d_head, rotate


class KVCache:
    """What one attention layer keeps per past token, so a decoder processes each token once.

    ``tensors`` maps names to tensors whose sequence dimension is the second to last: keys
    and values ``{"k", "v"}`` shaped ``(batch, kv_heads, seq, d_head)`` for grouped-query
    attention, one latent ``{"c"}`` shaped ``(batch, seq, d_latent)`` for latent attention.
    ``key_padding_mask`` (batch, seq), True at padding, accumulates the masks of the appended
    tokens (None while no appended block had one).

    Shapes: see ``append``.
    """

    def __init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.key_padding_mask: Tensor | None = None

    @property
    def length(self) -> int:
        """How many tokens the cache holds (0 when empty). Shapes: none."""
        return next(iter(self.tensors.values())).shape[-2] if self.tensors else 0

    def append(self, key_padding_mask: Tensor | None = None, **new: Tensor) -> tuple[Tensor, ...]:
        """Add a block of new tokens and return the full tensors (past then new), in the
        order of the keyword arguments. ``key_padding_mask`` covers the new tokens only; a
        block without one counts as no padding.

        Shapes: new tensors (..., new_len, d) -> (..., length + new_len, d);
        key_padding_mask (batch, new_len).
        """
        if not new or (self.tensors and set(new) != set(self.tensors)):
            raise ValueError(f"append needs the tensors {sorted(self.tensors)}, got {sorted(new)}")
        for name, t in new.items():
            check_tensor(name, t, min_ndim=3, layout="(batch, ..., new_len, d)")
        first = next(iter(new.values()))
        batch, new_len = first.shape[0], first.shape[-2]
        held = next(iter(self.tensors.values()), first).shape[0]
        if batch != held:
            raise ValueError(
                f"this KVCache holds a batch of {held} sequences, but the new tokens come in a "
                f"batch of {batch}; start a new cache for another batch (Decoder.new_cache())"
            )
        for name, t in new.items():
            old = self.tensors.get(name, t)  # all dimensions but the sequence must agree
            if (t.shape[0], t.shape[-2]) != (batch, new_len) or (
                (t.shape[:-2], t.shape[-1]) != (old.shape[:-2], old.shape[-1])
            ):
                raise ValueError(f"{name} has shape {tuple(t.shape)}, unlike the rest")
        if key_padding_mask is not None:
            check_bool_mask("key_padding_mask", key_padding_mask, (batch, new_len), "True at pad")
        if key_padding_mask is not None or self.key_padding_mask is not None:
            past, now = self.key_padding_mask, key_padding_mask  # None: no padding
            past = first.new_zeros(batch, self.length, dtype=torch.bool) if past is None else past
            now = first.new_zeros(batch, new_len, dtype=torch.bool) if now is None else now
            self.key_padding_mask = torch.cat([past, now], dim=1)  # (batch, seq)
        for name, t in new.items():
            old = self.tensors.get(name)
            self.tensors[name] = t if old is None else torch.cat([old, t], dim=-2)
        return tuple(self.tensors[name] for name in new)

    def nbytes(self) -> int:
        """Bytes of the stored tensors (not the padding mask). Shapes: none."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}={tuple(t.shape)}" for n, t in self.tensors.items())
        return f"KVCache(length={self.length}, {shapes or 'empty'})"


def check_cache(cache: object) -> None:
    """Raise a TypeError unless ``cache`` is a ``KVCache`` or None. Shapes: none."""
    if cache is not None and not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")


def blocked_after(key_padding_mask: Tensor | None, causal: bool, q_len: int, k_len: int, device):
    """The keys each query may not look at, when the queries are the last ``q_len`` of the
    ``k_len`` positions (the others come from a cache): padding keys and, if ``causal``,
    future ones (query ``i`` is position ``past + i`` and sees keys ``j <= past + i``).

    Shapes: key_padding_mask (batch, k_len) -> (batch or 1, 1, q_len, k_len) bool, or None.
    """
    mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
    if causal:
        future = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
        future = future.triu(k_len - q_len + 1)  # query i is at position past + i
        mask = future if mask is None else mask | future
    return mask


class CachedAttention(nn.Module):
    """What both layers share: the explicit path (hook points ``scores``, ``pattern``) or the
    fused kernel, the head outputs ``z``, ``head_mask`` and ``W_O`` (and ``b_O``).
    Shapes: see ``attend`` and ``write``."""

    def __init__(self, d_model: int, n_heads: int, d_head: int, bias: bool) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.materialize = False  # the public switch: always take the explicit path
        self.explicit_requests = 0  # live hooks that need it (counted by core.hooks)
        self.W_O = nn.Parameter(torch.empty(n_heads, d_head, d_model))
        self.register_parameter("b_O", nn.Parameter(torch.zeros(d_model)) if bias else None)
        self.register_buffer("head_mask", torch.ones(n_heads))  # 1 keeps a head, 0 silences it
        self.q, self.z = HookPoint(), HookPoint()
        self.scores = HookPoint(needs_materialize=True)  # explicit path only
        self.pattern = HookPoint(needs_materialize=True)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Each head's output ``softmax(q k^T / sqrt(d_head)) v``, explicit or fused; with
        fewer key/value heads than query heads, query head ``h`` reads ``h // group``.

        Shapes: q (batch, heads, q_len, d), k (batch, kv_heads, k_len, d), v (batch, kv_heads,
        k_len, d_v), mask (batch or 1, 1, q_len, k_len) -> (batch, heads, q_len, d_v).
        """
        group = q.shape[1] // k.shape[1]  # query heads per key/value head
        if self.materialize or self.explicit_requests:  # explicit: scores, pattern hooked
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            scores = (q / math.sqrt(self.d_head)) @ k.transpose(-2, -1)  # (batch, heads, q, k)
            scores = scores if mask is None else scores.masked_fill(mask, float("-inf"))
            return self.pattern(key_softmax(self.scores(scores))) @ v  # rows sum to 1 (or 0)
        allowed = None if mask is None else ~mask  # the kernel's mask means "may attend"
        scale, shared = 1 / math.sqrt(self.d_head), group > 1  # shared: read k, v in place
        return F.scaled_dot_product_attention(q, k, v, allowed, scale=scale, enable_gqa=shared)

    def write(self, z: Tensor) -> Tensor:
        """Mask heads, concatenate them and apply ``W_O`` (and ``b_O``).
        Shapes: z (batch, heads, q_len, d_head) -> (batch, q_len, d_model)."""
        z = self.z(z) * self.head_mask[:, None, None]  # masked heads write 0
        out = z.transpose(1, 2).flatten(2) @ self.W_O.flatten(0, 1)  # (batch, q_len, d_model)
        return out if self.b_O is None else out + self.b_O


def xavier_(W: Tensor, fan_in: int, fan_out: int) -> None:
    """Xavier-uniform init, as if ``W`` were one ``nn.Linear(fan_in, fan_out)``. Shapes: any."""
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    nn.init.uniform_(W, -bound, bound)


class GroupedQueryAttention(CachedAttention):
    """Self-attention whose ``n_heads`` query heads share ``n_kv_heads`` key/value heads.

    Consecutive heads form a group: head ``h`` reads key/value head ``h // group`` with
    ``group = n_heads // n_kv_heads``. ``n_kv_heads == n_heads`` is multi-head attention,
    ``n_kv_heads == 1`` multi-query attention.

    Args:
        d_model: width of the residual stream.
        n_heads: number of query heads.
        n_kv_heads: number of key/value heads; must divide ``n_heads``.
        d_head: size of every head (default ``d_model // n_heads``).
        bias: add biases to the four projections.
        rotary: rotate queries and keys by their positions after the projection (RoPE,
            ``core.rotary``; ``d_head`` must be even).
        rope_base: the base of the rotary frequencies (10,000 in RoFormer; Llama-family
            models often use larger ones).

    ``forward(x, *, key_padding_mask=None, causal=False, cache=None, positions=None)``: with a
    ``KVCache`` the new keys and values (and padding mask) are appended to it and the queries
    attend over all of it. With ``rotary`` the new tokens sit at ``positions``, (seq,) or
    (batch, seq), by default ``cache.length + 0, 1, ...`` (from 0 without a cache; without
    ``rotary`` positions are unused); the cache stores rotated keys, so cached decoding equals
    the full pass. Hook points: ``q``, ``k`` (rotated, when ``rotary``) and ``v`` (the new
    tokens; n_kv_heads heads, not repeated), ``scores``, ``pattern`` (explicit path), ``z``.

    Shapes: forward(x (batch, seq, d_model)) -> (batch, seq, d_model).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        d_head: int | None = None,
        *,
        bias: bool = True,
        rotary: bool = False,
        rope_base: float = 10000.0,
    ) -> None:
        d_head = head_sizes(d_model, n_heads, d_head, d_head)[0]
        check_positive_int("n_kv_heads", n_kv_heads)
        rope_base = check_number("rope_base", rope_base, 1.0, None, "()")
        if check_bool("rotary", rotary):
            check_d_head(d_head)
        if n_heads % n_kv_heads:
            raise ValueError(
                f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads} (each key/value head "
                "serves a group of the same number of query heads)"
            )
        super().__init__(d_model, n_heads, d_head, check_bool("bias", bias))
        self.n_kv_heads, self.rotary, self.rope_base = n_kv_heads, rotary, rope_base
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_K = nn.Parameter(torch.empty(n_kv_heads, d_model, d_head))
        self.W_V = nn.Parameter(torch.empty(n_kv_heads, d_model, d_head))
        for name, heads in (("b_Q", n_heads), ("b_K", n_kv_heads), ("b_V", n_kv_heads)):
            b = nn.Parameter(torch.zeros(heads, d_head)) if bias else None
            self.register_parameter(name, b)
        self.k, self.v = HookPoint(), HookPoint()
        self.reset_parameters()

    def forward(
        self,
        x: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Shapes: x (batch, seq, d_model), positions (seq,) or (batch, seq)
        -> (batch, seq, d_model)."""
        check_cache(cache)
        x = check_inputs(self.d_model, x, key_padding_mask, causal, cached=cache is not None)
        q, k, v = project(x, (self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V))
        if self.rotary:  # by default the new tokens continue the cache: past, past + 1, ...
            past = 0 if cache is None else cache.length
            positions = torch.arange(past, past + x.shape[1]) if positions is None else positions
            q, k = rotate(q, positions, self.rope_base), rotate(k, positions, self.rope_base)
        q, k, v = self.q(q), self.k(k), self.v(v)  # (batch, n_heads or n_kv_heads, seq, d_head)
        if cache is not None:  # the past tokens' keys and values, then the new ones
            k, v = cache.append(key_padding_mask, k=k, v=v)
            key_padding_mask = cache.key_padding_mask
        mask = blocked_after(key_padding_mask, causal, q.shape[2], k.shape[2], x.device)
        return self.write(self.attend(q, k, v, mask))  # query head h reads k, v head h // group

    def reset_parameters(self) -> None:
        """Xavier-uniform init, as if each projection were one ``nn.Linear``; zero biases."""
        d, hd, kvd = self.d_model, self.n_heads * self.d_head, self.n_kv_heads * self.d_head
        for W, fan_in, fan_out in (
            (self.W_Q, d, hd), (self.W_K, d, kvd), (self.W_V, d, kvd), (self.W_O, hd, d)
        ):  # fmt: skip
            xavier_(W, fan_in, fan_out)
        for b in (self.b_Q, self.b_K, self.b_V, self.b_O):
            if b is not None:
                nn.init.zeros_(b)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            f"d_head={self.d_head}, rotary={self.rotary}, materialize={self.materialize}"
        )


class LatentAttention(CachedAttention):
    """Multi-head latent attention (MLA, DeepSeek-V2) without its rotary part.

    Each token is compressed to one latent ``c = x @ W_DKV`` of size ``d_latent``; head ``h``
    decompresses keys ``c @ W_UK[h]`` and values ``c @ W_UV[h]`` from it, with queries
    ``x @ W_Q[h]``. A cache stores only ``c``. With ``absorb=True`` the layer never forms
    keys or values: ``W_UK[h]`` moves to the query side, ``(q_h W_UK[h]^T) c^T / sqrt(d_head)``,
    and ``W_UV[h]`` after the mix, ``(pattern c) W_UV[h]``; the output is the same.

    Args:
        d_model: width of the residual stream.
        n_heads: number of heads.
        d_latent: size of the latent that every head's keys and values come from.
        d_head: size of every head (default ``d_model // n_heads``).
        absorb: attend in the latent space (see above).

    ``forward(x, *, key_padding_mask=None, causal=False, cache=None)`` as in
    ``GroupedQueryAttention``. Hook points: ``latent`` (the new tokens' ``c``), ``q``,
    ``scores``, ``pattern`` (explicit path), ``z``.

    Shapes: forward(x (batch, seq, d_model)) -> (batch, seq, d_model).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_latent: int,
        d_head: int | None = None,
        *,
        absorb: bool = False,
    ) -> None:
        d_head = head_sizes(d_model, n_heads, d_head, d_head)[0]
        super().__init__(d_model, n_heads, d_head, bias=True)
        self.d_latent = check_positive_int("d_latent", d_latent)
        self.absorb = check_bool("absorb", absorb)
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_DKV = nn.Parameter(torch.empty(d_model, d_latent))
        self.W_UK = nn.Parameter(torch.empty(n_heads, d_latent, d_head))
        self.W_UV = nn.Parameter(torch.empty(n_heads, d_latent, d_head))
        self.latent = HookPoint()
        self.reset_parameters()

    def forward(
        self,
        x: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Shapes: x (batch, seq, d_model) -> (batch, seq, d_model)."""
        check_cache(cache)
        x = check_inputs(self.d_model, x, key_padding_mask, causal, cached=cache is not None)
        c = self.latent(x @ self.W_DKV)  # (batch, seq, d_latent): all a cache keeps
        q = self.q(project(x, (self.W_Q, None))[0])  # (batch, heads, seq, d_head)
        if cache is not None:  # the past tokens' latents, then the new ones
            (c,) = cache.append(key_padding_mask, c=c)
            key_padding_mask = cache.key_padding_mask
        mask = blocked_after(key_padding_mask, causal, q.shape[2], c.shape[1], x.device)
        c = c[:, None].expand(-1, self.n_heads, -1, -1)  # (batch, heads, k_len, d_latent), a view
        if self.absorb:  # scores and mix in the latent space: (q W_UK^T) c^T, (pattern c) W_UV
            z = self.attend(q @ self.W_UK.transpose(1, 2), c, c, mask) @ self.W_UV
        else:  # decompress each head's keys and values, (batch, heads, k_len, d_head)
            z = self.attend(q, c @ self.W_UK, c @ self.W_UV, mask)
        return self.write(z)  # z: (batch, heads, seq, d_head)

    def reset_parameters(self) -> None:
        """Xavier-uniform init, as if each projection were one ``nn.Linear``; zero ``b_O``."""
        d, hd, c = self.d_model, self.n_heads * self.d_head, self.d_latent
        for W, fan_in, fan_out in (
            (self.W_Q, d, hd), (self.W_DKV, d, c), (self.W_UK, c, hd), (self.W_UV, c, hd),
            (self.W_O, hd, d),
        ):  # fmt: skip
            xavier_(W, fan_in, fan_out)
        nn.init.zeros_(self.b_O)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_latent={self.d_latent}, "
            f"d_head={self.d_head}, absorb={self.absorb}, materialize={self.materialize}"
        )


def _check_mha(mha: object) -> MultiHeadAttention:
    if type(mha) is not MultiHeadAttention:  # a subclass (talking heads) computes more
        raise TypeError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    if mha.d_key != mha.d_value:
        raise ValueError(
            f"mha has d_key={mha.d_key} and d_value={mha.d_value}; grouped-query attention "
            "uses one head size d_head for both"
        )
    return mha


@torch.no_grad()
def mha_to_gqa(
    mha: MultiHeadAttention, n_kv_heads: int, how: str = "mean"
) -> GroupedQueryAttention:
    """Convert a trained multi-head self-attention layer to grouped-query attention.

    ``W_Q``, ``b_Q``, ``W_O``, ``b_O`` (and ``head_mask``) are copied; each group's ``W_K``,
    ``W_V``, ``b_K``, ``b_V`` are the mean over the group's consecutive heads (``how="mean"``,
    the mean pooling of Ainslie et al. 2023) or the group's first head (``how="first"``, the
    control). With ``n_kv_heads == n_heads`` the conversion is exact.

    Shapes: none (returns a module computing (batch, seq, d_model) -> same).
    """
    _check_mha(mha)
    check_choice("how", how, ("mean", "first"))
    gqa = GroupedQueryAttention(
        mha.d_model, mha.n_heads, n_kv_heads, mha.d_key, bias=mha.b_Q is not None
    ).to(mha.W_Q)
    group = mha.n_heads // n_kv_heads
    for name in ("W_Q", "b_Q", "W_O", "b_O", "head_mask"):
        if getattr(gqa, name) is not None:
            getattr(gqa, name).copy_(getattr(mha, name))
    for name in ("W_K", "W_V", "b_K", "b_V"):
        if getattr(gqa, name) is not None:
            W = getattr(mha, name).unflatten(0, (n_kv_heads, group))  # (kv_heads, group, ...)
            getattr(gqa, name).copy_(W.mean(dim=1) if how == "mean" else W[:, 0])
    return gqa


@torch.no_grad()
def gqa_as_mha(gqa: GroupedQueryAttention) -> MultiHeadAttention:
    """The same layer as a plain ``MultiHeadAttention`` whose key and value weights are
    repeated within each group: grouped-query attention is multi-head attention with the
    key/value projections tied inside groups.

    Shapes: none (returns a module computing (batch, seq, d_model) -> same).
    """
    if not isinstance(gqa, GroupedQueryAttention):
        raise TypeError(f"gqa must be a GroupedQueryAttention, got {type(gqa).__name__}")
    if gqa.rotary:
        raise ValueError("gqa is rotary; a MultiHeadAttention has no rotary positions")
    mha = MultiHeadAttention(
        gqa.d_model, gqa.n_heads, gqa.d_head, gqa.d_head, bias=gqa.b_Q is not None
    ).to(gqa.W_Q)
    group = gqa.n_heads // gqa.n_kv_heads
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "head_mask"):
        p = getattr(gqa, name)
        if p is not None:
            tied = name in ("W_K", "W_V", "b_K", "b_V")
            getattr(mha, name).copy_(p.repeat_interleave(group, dim=0) if tied else p)
    return mha
