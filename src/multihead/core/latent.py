"""Multi-head latent attention (MLA, DeepSeek-AI 2024), without its rotary part: every head's
keys and values are decompressed from one latent vector per token, and a cache keeps only the
latent.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from multihead._checks import check_attention_inputs, check_bool, check_positive_int
from multihead.core.attention import AttentionLayer, attend, blocked, project, xavier_
from multihead.core.cache import KVCache, check_cache
from multihead.core.config import head_sizes
from multihead.core.hooks import HookPoint


class LatentAttention(AttentionLayer):
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
    ``GroupedQueryAttention`` (self-attention only). Hook points: ``latent`` (the new tokens'
    ``c``), ``q``, ``scores``, ``pattern`` (explicit path), ``z``.

    Shapes: forward(x (batch, seq, d_model)) -> (batch, seq, d_model).
    """

    def __init__(self, d_model: int, n_heads: int, d_latent: int, d_head: int | None = None,
                 *, absorb: bool = False) -> None:  # fmt: skip
        d_head = head_sizes(d_model, n_heads, d_head, d_head)[0]
        super().__init__(d_model, n_heads, d_head, d_head, bias=True)
        self.d_latent = check_positive_int("d_latent", d_latent)
        self.absorb = check_bool("absorb", absorb)
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_DKV = nn.Parameter(torch.empty(d_model, d_latent))
        self.W_UK = nn.Parameter(torch.empty(n_heads, d_latent, d_head))
        self.W_UV = nn.Parameter(torch.empty(n_heads, d_latent, d_head))
        self.latent = HookPoint()
        self.reset_parameters()

    @property
    def d_head(self) -> int:
        """The size of each head's queries, keys and values. Shapes: none."""
        return self.d_key

    def forward(self, x: Tensor, *, key_padding_mask: Tensor | None = None, causal: bool = False,
                cache: KVCache | None = None) -> Tensor:  # fmt: skip
        """Shapes: x (batch, seq, d_model) -> (batch, seq, d_model)."""
        check_cache(cache)
        x, _, _ = check_attention_inputs(
            self.d_model, x, None, None, key_padding_mask, causal, cached=cache is not None
        )
        c = self.latent(x @ self.W_DKV)  # (batch, seq, d_latent): all a cache keeps
        q = self.q(project(x, (self.W_Q, None))[0])  # (batch, heads, seq, d_head)
        if cache is not None:  # the past tokens' latents, then the new ones
            (c,) = cache.append(key_padding_mask, c=c)
            key_padding_mask = cache.key_padding_mask
        mask = blocked(key_padding_mask, causal, q.shape[2], c.shape[1], x.device)
        c = c[:, None].expand(-1, self.n_heads, -1, -1)  # (batch, heads, k_len, d_latent), a view
        if self.absorb:  # scores and mix in the latent space: (q W_UK^T) c^T, (pattern c) W_UV
            z = attend(self, q @ self.W_UK.transpose(1, 2), c, c, mask) @ self.W_UV
        else:  # decompress each head's keys and values, (batch, heads, k_len, d_head)
            z = attend(self, q, c @ self.W_UK, c @ self.W_UV, mask)
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
