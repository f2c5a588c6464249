"""Multi-head attention you can read in one screen, with hook points for its internals.

Conventions (see the notation page of the book):

* per-head vectors are ``(batch, heads, seq, d_head)``;
* attention patterns are ``(batch, heads, query, key)`` and each row sums to 1;
* weights are stored per head: ``W_Q, W_K`` are ``(heads, d_model, d_key)``, ``W_V`` is
  ``(heads, d_model, d_value)`` and ``W_O`` is ``(heads, d_value, d_model)``.

``forward`` returns only the output. The internals pass through identity ``HookPoint``
modules (``q``, ``k``, ``v``, ``scores``, ``pattern``, and ``z``, each head's output before the
head mask and DropHead); ``run_with_cache`` records them. When nothing listens to
``scores`` or ``pattern`` the module takes the fused
``torch.nn.functional.scaled_dot_product_attention`` path, which never stores the pattern.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multihead._checks import check_positive_int, check_probability


class HookPoint(nn.Identity):
    """An identity module: a named place where ``run_with_cache`` can read a tensor."""

    @property
    def is_hooked(self) -> bool:
        """Whether any forward hook is attached (then the slow, explicit path is used)."""
        return bool(self._forward_hooks)


def _check_float(name: str, x: object, ndim: int) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    return x


def attention_pattern(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """Softmax of scaled dot products: the textbook formula, nothing fused.

    ``mask`` is boolean, True where a query may NOT look (broadcast to the pattern).

    Shapes: q (..., query, d_key), k (..., key, d_key), mask broadcastable to
    (..., query, key) -> pattern (..., query, key), rows sum to 1.
    """
    _check_float("q", q, q.ndim if q.ndim >= 2 else 2)
    _check_float("k", k, k.ndim if k.ndim >= 2 else 2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share the last dimension, got {q.shape[-1]} and {k.shape[-1]}"
        )
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., query, key)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(dim=-1)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with independent key size ``d_key`` and value size ``d_value``.

    Args:
        d_model: width of the residual stream.
        n_heads: number of heads.
        d_key: size of each head's queries and keys (default ``d_model // n_heads``).
        d_value: size of each head's values (default ``d_model // n_heads``).
        bias: add biases to the four projections.
        attn_dropout: dropout on the attention pattern (training only).
        drophead: probability of dropping each whole head (training only, DropHead);
            the kept heads of an example are rescaled by ``n_heads / n_kept`` and at least
            one head per example is always kept.

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
        drophead: float = 0.0,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("n_heads", n_heads)
        if (d_key is None or d_value is None) and d_model % n_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}; "
                "choose sizes that divide, or pass d_key and d_value explicitly"
            )
        d_key = d_model // n_heads if d_key is None else d_key
        d_value = d_model // n_heads if d_value is None else d_value
        check_positive_int("d_key", d_key)
        check_positive_int("d_value", d_value)
        self.d_model, self.n_heads, self.d_key, self.d_value = d_model, n_heads, d_key, d_value
        self.attn_dropout = check_probability("attn_dropout", attn_dropout)
        self.drophead = check_probability("drophead", drophead)

        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_key))
        self.W_K = nn.Parameter(torch.empty(n_heads, d_model, d_key))
        self.W_V = nn.Parameter(torch.empty(n_heads, d_model, d_value))
        self.W_O = nn.Parameter(torch.empty(n_heads, d_value, d_model))
        if bias:
            self.b_Q = nn.Parameter(torch.zeros(n_heads, d_key))
            self.b_K = nn.Parameter(torch.zeros(n_heads, d_key))
            self.b_V = nn.Parameter(torch.zeros(n_heads, d_value))
            self.b_O = nn.Parameter(torch.zeros(d_model))
        else:
            for name in ("b_Q", "b_K", "b_V", "b_O"):
                self.register_parameter(name, None)
        # A reversible per-head multiplier on the head outputs: 1 keeps, 0 masks.
        self.register_buffer("head_mask", torch.ones(n_heads))

        self.q, self.k, self.v = HookPoint(), HookPoint(), HookPoint()
        self.scores, self.pattern, self.z = HookPoint(), HookPoint(), HookPoint()
        self.reset_parameters()

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

    # ------------------------------------------------------------------ masking heads
    def mask_heads(self, heads: Iterable[int]) -> None:
        """Silence the given heads (reversible; see ``prune_heads`` for the permanent cut)."""
        for i in self._check_heads(heads):
            self.head_mask[i] = 0.0

    def unmask_heads(self) -> None:
        """Turn every head back on."""
        self.head_mask.fill_(1.0)

    def _check_heads(self, heads: Iterable[int]) -> list[int]:
        heads = list(heads)
        for i in heads:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.n_heads:
                raise ValueError(f"heads contains {i!r}; valid heads are 0..{self.n_heads - 1}")
        return heads

    @torch.no_grad()
    def prune_heads(self, heads: Iterable[int]) -> None:
        """Remove heads for good by slicing the projections (fewer parameters and FLOPs)."""
        drop = set(self._check_heads(heads))
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

    # ------------------------------------------------------------------ forward
    def _project(self, x: Tensor, names: tuple[str, ...]) -> list[Tensor]:
        """Project ``x`` with several of W_Q/W_K/W_V in one matrix product (fewer passes)."""
        batch, seq, _ = x.shape
        Ws = [getattr(self, f"W_{n}") for n in names]
        # (d_model, sum of heads * d_head): all heads of all requested projections at once.
        flat = torch.cat([W.permute(1, 0, 2).reshape(self.d_model, -1) for W in Ws], dim=1)
        y = x @ flat  # (batch, seq, sum of heads * d_head)
        if self.b_Q is not None:
            y = y + torch.cat([getattr(self, f"b_{n}").flatten() for n in names])
        sizes = [W.shape[0] * W.shape[2] for W in Ws]
        outs = []
        for W, part in zip(Ws, y.split(sizes, dim=-1), strict=True):
            h, _, d_head = W.shape
            outs.append(part.reshape(batch, seq, h, d_head).transpose(1, 2))  # (b, h, s, d_head)
        return outs

    def drophead_gate(
        self,
        batch: int,
        device: torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """DropHead's per-example, per-head multiplier at rate ``self.drophead``: 0 for a
        dropped head, and the kept heads rescaled by ``n_heads / n_kept``; if every head of an
        example was dropped, one of them (at random) is kept with factor ``n_heads``.

        Shapes: -> (batch, heads).
        """
        check_positive_int("batch", batch)
        keep = torch.rand(batch, self.n_heads, generator=generator, device=device) >= self.drophead
        # Never drop every head of an example: keep one at random instead.
        empty = ~keep.any(dim=1)
        if empty.any():
            n_empty = int(empty.sum())
            rescue = torch.randint(self.n_heads, (n_empty,), generator=generator, device=device)
            keep[empty.nonzero().squeeze(1), rescue] = True
        scale = self.n_heads / keep.sum(dim=1, keepdim=True).to(dtype)  # (batch, 1)
        return keep.to(dtype) * scale

    def _inputs(
        self,
        query: Tensor,
        key: Tensor | None,
        value: Tensor | None,
        key_padding_mask: Tensor | None,
        causal: bool,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """Check the inputs; return them with a boolean mask (batch or 1, 1, q_len, k_len),
        True where a query may not look (None when nothing is masked)."""
        query = _check_float("query", query, 3)
        key = query if key is None else _check_float("key", key, 3)
        value = key if value is None else _check_float("value", value, 3)
        batch, q_len, d = query.shape
        k_len = key.shape[1]
        if d != self.d_model:
            raise ValueError(f"query has last dimension {d}, expected d_model={self.d_model}")
        if key.shape[0] != batch or key.shape[2] != d:
            raise ValueError(f"key has shape {tuple(key.shape)}, expected ({batch}, k_len, {d})")
        if value.shape[:2] != key.shape[:2] or value.shape[2] != d:
            raise ValueError(f"value has shape {tuple(value.shape)}, expected {tuple(key.shape)}")
        mask = None
        if key_padding_mask is not None:
            if not isinstance(key_padding_mask, Tensor) or key_padding_mask.dtype != torch.bool:
                raise TypeError("key_padding_mask must be a bool tensor, True at padding keys")
            if key_padding_mask.shape != (batch, k_len):
                raise ValueError(
                    f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, "
                    f"expected (batch, k_len) = ({batch}, {k_len})"
                )
            if key_padding_mask.all(dim=1).any():
                raise ValueError("key_padding_mask masks every key of some example")
            mask = key_padding_mask[:, None, None, :]
        if causal:
            if q_len != k_len:
                raise ValueError(f"causal=True needs q_len == k_len, got {q_len} and {k_len}")
            future = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).triu(1)
            mask = future if mask is None else mask | future
        return query, key, value, mask

    def _qkv(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per-head queries, keys and values, through their hook points."""
        if key is query and value is query:  # self-attention: one product for Q, K and V
            q, k, v = self._project(query, ("Q", "K", "V"))
        elif value is key:
            (q,), (k, v) = self._project(query, ("Q",)), self._project(key, ("K", "V"))
        else:
            (q,), (k,), (v,) = (
                self._project(t, (n,)) for t, n in ((query, "Q"), (key, "K"), (value, "V"))
            )
        q = self.q(q)  # (batch, heads, q_len, d_key)
        k = self.k(k)  # (batch, heads, k_len, d_key)
        v = self.v(v)  # (batch, heads, k_len, d_value)
        return q, k, v

    def _output(self, z: Tensor, batch: int, q_len: int) -> Tensor:
        """DropHead (training), the head mask, and the output projection W_O."""
        if self.training and self.drophead > 0:
            z = z * self.drophead_gate(batch, z.device, z.dtype)[:, :, None, None]
        # The head mask scales each head's block of W_O: a masked head writes nothing, and
        # the mask costs a (heads, d_value, d_model) product, not a pass over z.
        W_O = self.W_O * self.head_mask.to(z.dtype)[:, None, None]  # (heads, d_value, d_model)
        # Concatenate heads and apply W_O in one matmul.
        z_cat = z.transpose(1, 2).reshape(batch, q_len, self.n_heads * self.d_value)
        out = z_cat @ W_O.reshape(self.n_heads * self.d_value, self.d_model)
        return out if self.b_O is None else out + self.b_O

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are None).

        ``key_padding_mask`` is boolean, True at padding keys (never attended to), like
        ``torch.nn.MultiheadAttention``. ``causal=True`` lets query i see keys j <= i.

        Shapes: query (batch, q_len, d_model), key and value (batch, k_len, d_model),
        key_padding_mask (batch, k_len) -> (batch, q_len, d_model).
        """
        query, key, value, mask = self._inputs(query, key, value, key_padding_mask, causal)
        batch, q_len, _ = query.shape
        q, k, v = self._qkv(query, key, value)
        p_drop = self.attn_dropout if self.training else 0.0
        if not (self.scores.is_hooked or self.pattern.is_hooked):
            # Fused path: the pattern is never materialised.
            z = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None if mask is None else ~mask, dropout_p=p_drop
            )  # (batch, heads, q_len, d_value)
        else:
            # Scale q (n x d_key numbers) rather than the scores (n x n numbers).
            scores = (q / math.sqrt(self.d_key)) @ k.transpose(-2, -1)  # (batch, heads, q, k)
            if mask is not None:
                scores = scores.masked_fill(mask, float("-inf"))
            scores = self.scores(scores)
            pattern = self.pattern(scores.softmax(dim=-1))  # (batch, heads, q_len, k_len)
            z = F.dropout(pattern, p_drop, training=True) @ v if p_drop else pattern @ v
        z = self.z(z)  # (batch, heads, q_len, d_value): what each head computes
        return self._output(z, batch, q_len)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_key={self.d_key}, "
            f"d_value={self.d_value}, drophead={self.drophead}"
        )


def run_with_cache(
    model: nn.Module,
    *inputs: object,
    names_filter: Callable[[str], bool] | None = None,
    **kwargs: object,
) -> tuple[object, dict[str, Tensor]]:
    """Run ``model(*inputs, **kwargs)`` and record every ``HookPoint`` it passes through.

    The cache maps module paths to detached tensors, e.g. ``"encoder.layers.0.attn.pattern"``
    of shape ``(batch, heads, query, key)``. ``names_filter`` keeps only some paths (and
    lets the unrecorded layers keep their fused fast path).

    Shapes: as ``model``'s forward; cache values as documented at each hook point.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if names_filter is not None and not callable(names_filter):
        raise TypeError("names_filter must be a callable taking a module path and returning bool")
    cache: dict[str, Tensor] = {}
    handles = []

    def make_hook(name: str):
        def hook(_module: nn.Module, _args: object, output: Tensor) -> None:
            cache[name] = output.detach()

        return hook

    for name, module in model.named_modules():
        if isinstance(module, HookPoint) and (names_filter is None or names_filter(name)):
            handles.append(module.register_forward_hook(make_hook(name)))
    try:
        output = model(*inputs, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return output, cache


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
