"""The KV cache: what one attention layer keeps per past token, so that a decoder generating
token after token processes each token once.

Grouped-query attention keeps the keys and values of its ``n_kv_heads`` heads (the keys
already rotated, for rotary layers); latent attention keeps one latent vector per token. A
``Decoder`` holds one ``KVCache`` per layer (``Decoder.new_cache()``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from multihead._checks import check_bool_mask, check_tensor


class KVCache:
    """What one attention layer keeps per past token.

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

        Shapes: new tensors (batch, ..., new_len, d) -> (batch, ..., length + new_len, d);
        key_padding_mask (batch, new_len).
        """
        if not new or (self.tensors and set(new) != set(self.tensors)):
            raise ValueError(f"append needs the tensors {sorted(self.tensors)}, got {sorted(new)}")
        for name, t in new.items():
            check_tensor(name, t, min_ndim=3, layout="(batch, ..., new_len, d)")
        first = next(iter(new.values()))
        batch, new_len = first.shape[0], first.shape[-2]
        if self.tensors and batch != (held := next(iter(self.tensors.values())).shape[0]):
            raise ValueError(
                f"this KVCache holds a batch of {held} sequences, but the new tokens come in a "
                f"batch of {batch}; start a new cache (Decoder.new_cache()) for another batch"
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


def check_cache(cache: object, key: object = None, value: object = None) -> None:
    """Raise unless ``cache`` is a ``KVCache`` or None, and, with a cache, the layer attends
    to itself (``key`` and ``value`` None). Shapes: none."""
    if cache is None:
        return
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
    if key is not None or value is not None:
        raise ValueError("cache is for self-attention: pass key=None and value=None with it")
