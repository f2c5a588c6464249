"""Multi-head attention you can read in one screen, with hook points for its internals.

Conventions (see the notation page of the book):

* per-head vectors are ``(batch, heads, seq, d_head)``;
* attention patterns are ``(batch, heads, query, key)`` and each row sums to 1;
* weights are stored per head: ``W_Q, W_K`` are ``(heads, d_model, d_key)``, ``W_V`` is
  ``(heads, d_model, d_value)`` and ``W_O`` is ``(heads, d_value, d_model)``;
* masks: True = blocked (see ``multihead._checks`` for every polarity in the package).

``forward`` returns only the output. The internals pass through identity ``HookPoint``
modules (``q``, ``k``, ``v``, ``scores``, ``pattern``, and ``z``, each head's output before
the head mask). With ``materialize = False`` (the default) the module calls the fused
``torch.nn.functional.scaled_dot_product_attention``, which never stores the pattern;
``run_with_cache`` and ``run_with_hooks`` count a request in ``explicit_requests`` while they
record or change ``scores`` or ``pattern``, and the module takes the explicit path while
either is set, so that every hook on them fires.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_attention_inputs as check_inputs
from multihead._checks import check_int, check_probability, check_tensor
from multihead.core.config import head_sizes
from multihead.core.hooks import HookPoint


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

    Shapes: key_padding_mask (batch, k_len) -> (batch or 1, 1, q_len, k_len) bool, or None.
    """
    mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
    if causal:
        future = torch.ones(q_len, k_len, dtype=torch.bool, device=device).triu(1)
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


class MultiHeadAttention(nn.Module):
    """Multi-head attention with independent key size ``d_key`` and value size ``d_value``.

    Args:
        d_model: width of the residual stream.
        n_heads: number of heads.
        d_key: size of each head's queries and keys (default ``d_model // n_heads``).
        d_value: size of each head's values (default ``d_model // n_heads``).
        bias: add biases to the four projections.
        attn_dropout: dropout on the attention pattern (training only).

    ``forward(query, key=None, value=None, *, key_padding_mask=None, causal=False)`` attends
    from ``query`` to ``key``/``value`` (self-attention when they are None);
    ``key_padding_mask`` (batch, k_len) is True at padding keys and ``causal=True`` lets query
    ``i`` see keys ``j <= i``. ``head_mask`` (a buffer, 1 = kept) multiplies each head's
    output; change it with ``multihead.interventions.ablation.head_masks``. ``materialize``
    selects the explicit path (see the module docstring).

    Shapes: forward(query (batch, q_len, d_model), key/value (batch, k_len, d_model))
    -> (batch, q_len, d_model).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_key: int | None = None,
        d_value: int | None = None,
        *,
        bias: bool = True,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        d_key, d_value = head_sizes(d_model, n_heads, d_key, d_value)
        self.d_model, self.n_heads, self.d_key, self.d_value = d_model, n_heads, d_key, d_value
        self.attn_dropout = check_probability("attn_dropout", attn_dropout)
        self.materialize = False  # the public switch: always take the explicit path
        self.explicit_requests = 0  # live hooks that need it (counted by core.hooks)
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_key))
        self.W_K = nn.Parameter(torch.empty(n_heads, d_model, d_key))
        self.W_V = nn.Parameter(torch.empty(n_heads, d_model, d_value))
        self.W_O = nn.Parameter(torch.empty(n_heads, d_value, d_model))
        biases = {"b_Q": (n_heads, d_key), "b_K": (n_heads, d_key), "b_V": (n_heads, d_value)}
        for name, shape in {**biases, "b_O": (d_model,)}.items():
            self.register_parameter(name, nn.Parameter(torch.zeros(shape)) if bias else None)
        self.register_buffer("head_mask", torch.ones(n_heads))  # 1 keeps a head, 0 silences it
        self.q, self.k, self.v, self.z = HookPoint(), HookPoint(), HookPoint(), HookPoint()
        self.scores = HookPoint(needs_materialize=True)  # explicit path only
        self.pattern = HookPoint(needs_materialize=True)
        self.reset_parameters()

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        """Shapes: query (batch, q_len, d_model), key/value (batch, k_len, d_model) -> as query."""
        query, key, value = check_inputs(self.d_model, query, key, value, key_padding_mask, causal)
        mask = blocked(key_padding_mask, causal, query.shape[1], key.shape[1], query.device)
        q, k, v = self.project_qkv(query, key, value)
        q, k, v = self.q(q), self.k(k), self.v(v)  # (batch, heads, len, d_key or d_value)
        p_drop = self.attn_dropout if self.training else 0.0
        if self.materialize or self.explicit_requests:  # explicit: scores, pattern hooked
            scores = (q / math.sqrt(self.d_key)) @ k.transpose(-2, -1)  # (batch, heads, q, k)
            scores = scores if mask is None else scores.masked_fill(mask, float("-inf"))
            pattern = self.pattern(key_softmax(self.scores(scores)))  # rows sum to 1 (or 0)
            z = F.dropout(pattern, p_drop, training=True) @ v if p_drop else pattern @ v
        else:  # fused kernel (its mask means "may attend": the opposite polarity)
            z = F.scaled_dot_product_attention(q, k, v, None if mask is None else ~mask, p_drop)
        return self.write(self.z(z) * self.head_mask[:, None, None])  # masked heads write 0

    def write(self, z: Tensor) -> Tensor:
        """Concatenate the heads' outputs and apply ``W_O`` (and ``b_O``).

        Shapes: z (batch, heads, q_len, d_value) -> (batch, q_len, d_model).
        """
        out = z.transpose(1, 2).flatten(2) @ self.W_O.flatten(0, 1)  # (batch, q_len, d_model)
        return out if self.b_O is None else out + self.b_O

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
        for W, fan_in, fan_out in (
            (self.W_Q, d, self.W_Q.shape[0] * self.d_key),
            (self.W_K, d, self.W_K.shape[0] * self.d_key),
            (self.W_V, d, self.W_V.shape[0] * self.d_value),
            (self.W_O, self.W_O.shape[0] * self.d_value, d),
        ):
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            nn.init.uniform_(W, -bound, bound)
        for b in (self.b_Q, self.b_K, self.b_V, self.b_O):
            if b is not None:
                nn.init.zeros_(b)

    def check_heads(self, heads: Iterable[int]) -> list[int]:
        """``heads`` as a list, after checking each is a head index. Shapes: none."""
        return [check_int(f"heads[{j}]", i, 0, self.n_heads) for j, i in enumerate(heads)]

    @torch.no_grad()
    def prune_heads(self, heads: Iterable[int]) -> None:
        """Remove heads for good by slicing the projections (fewer parameters and FLOPs).
        Masking (``head_mask``) is the reversible operation. Shapes: none."""
        drop = set(self.check_heads(heads))
        keep = [i for i in range(self.n_heads) if i not in drop]
        if not keep:
            raise ValueError(f"heads={sorted(drop)} would prune every head of the layer; keep one")
        idx = torch.tensor(keep, device=self.W_Q.device)
        for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V"):
            p = getattr(self, name)
            if p is not None:
                setattr(self, name, nn.Parameter(p.index_select(0, idx).clone()))
        self.head_mask = self.head_mask.index_select(0, idx).clone()
        self.n_heads = len(keep)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_key={self.d_key}, "
            f"d_value={self.d_value}, materialize={self.materialize}"
        )


@torch.no_grad()
def to_torch_multihead(module: MultiHeadAttention) -> nn.MultiheadAttention:
    """The same layer as a ``torch.nn.MultiheadAttention`` with copied weights.

    PyTorch stores ``W_Q`` of all heads as one ``(d_model, d_model)`` matrix applied as
    ``x @ W.T``, so row ``h * d_key + j`` is column ``j`` of our ``W_Q[h]``. It needs
    ``d_key == d_value == d_model // n_heads`` and biases.

    Shapes: none (returns a module computing (batch, seq, d_model) -> same).
    """
    if not isinstance(module, MultiHeadAttention):
        raise TypeError(f"module must be a MultiHeadAttention, got {type(module).__name__}")
    h, d = module.n_heads, module.d_model
    if module.d_key * h != d or module.d_value * h != d or module.b_Q is None:
        raise ValueError(
            "module needs d_key == d_value == d_model // n_heads and biases to match "
            f"torch.nn.MultiheadAttention (got d_key={module.d_key}, d_value={module.d_value})"
        )
    ref = nn.MultiheadAttention(d, h, bias=True, batch_first=True)
    ref.to(device=module.W_Q.device, dtype=module.W_Q.dtype)

    def rows(W: Tensor) -> Tensor:  # (heads, d_model, d_head) -> (heads * d_head, d_model)
        return W.permute(0, 2, 1).reshape(-1, d)

    ref.in_proj_weight.copy_(torch.cat([rows(module.W_Q), rows(module.W_K), rows(module.W_V)]))
    ref.in_proj_bias.copy_(
        torch.cat([module.b_Q.flatten(), module.b_K.flatten(), module.b_V.flatten()])
    )
    ref.out_proj.weight.copy_(module.W_O.reshape(h * module.d_value, d).T)  # (d_model, h*d_v)
    ref.out_proj.bias.copy_(module.b_O)
    return ref
