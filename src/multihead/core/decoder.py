"""A decoder-only language model whose attention may share or compress keys and values, with
a KV cache for generation: small GPT-style models trained in the course, and, with the
settings of the Llama family, a pretrained SmolLM2 (``multihead.pretrained.smollm``).

Each layer is pre-norm, ``x + attn(ln1(x))`` then ``x + ff(ln2(x))``, with causal
self-attention: ``GroupedQueryAttention`` (``n_kv_heads`` key/value heads) or, when
``d_latent`` is given, ``LatentAttention``. Module paths (the keys of ``run_with_cache``):
``layers.{i}.attn`` (``stack_layers(cache, "layers.{}.attn.pattern")`` stacks the patterns)
and ``layers.{i}.resid_pre``, the residual stream entering layer ``i``. Without MLP and norms
(chapter 11), each head's QK and OV circuits are exact products of weight matrices (Elhage et
al. 2021), e.g. ``W_E W_Q W_K^T W_E^T`` with ``W_E = embed.weight`` (vocab, d_model).

With a cache (``new_cache()``: one ``KVCache`` per layer) ``forward`` takes only the new
tokens, continues where the cache ends and returns their logits: those of a forward pass over
the whole sequence at those positions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from multihead._checks import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_even,
    check_int,
    check_number,
    check_positive_int,
    check_probability,
    check_setting,
)
from multihead.core.attention import GroupedQueryAttention
from multihead.core.cache import KVCache
from multihead.core.hooks import HookPoint
from multihead.core.latent import LatentAttention
from multihead.core.model import FeedForward, SwiGLU, check_tokens, init_model
from multihead.core.positions import sinusoidal_positions

POSITIONS = ("learned", "sinusoidal", "rotary", "none")
SINUSOIDAL = "for positions='sinusoidal' (sin, cos pairs)"


class Block(nn.Module):
    """One pre-norm decoder layer: causal self-attention, then the MLP (``ff`` is None
    without one; the norms are identities without LayerNorm). The hook point ``resid_pre``
    is the residual stream entering the layer; ``positions`` go to rotary attention.

    Shapes: x (batch, seq, d_model), key_padding_mask (batch, seq), positions (seq,) or
    (batch, seq) -> like x.
    """

    def __init__(
        self, attn: nn.Module, ff: nn.Module | None, norm: Callable[[], nn.Module], dropout: float
    ) -> None:
        super().__init__()
        self.resid_pre = HookPoint()
        self.ln1, self.attn = norm(), attn
        self.ln2 = None if ff is None else norm()
        self.ff, self.drop = ff, nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        key_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        x = self.resid_pre(x)
        rotary = {} if positions is None else {"positions": positions}  # for rotary layers
        a = self.attn(
            self.ln1(x), key_padding_mask=key_padding_mask, causal=True, cache=cache, **rotary
        )
        x = x + self.drop(a)
        return x if self.ff is None else x + self.drop(self.ff(self.ln2(x)))


class Decoder(nn.Module):
    """A decoder-only causal language model: GPT-style by default; a Llama-family model with
    ``positions="rotary", mlp="swiglu", norm="rms", bias=False, tie_embeddings=True``.

    Args:
        vocab_size: number of token ids.
        max_len: longest sequence (prompt and generated tokens together).
        d_model, n_layers, n_heads: width, depth and query heads per layer.
        n_kv_heads: key/value heads of ``GroupedQueryAttention`` (default ``n_heads``).
        d_latent: if given, every layer is ``LatentAttention`` with this latent size.
        d_head: size of each head (default ``d_model // n_heads``).
        d_ff: hidden size of the MLP (default ``4 * d_model``).
        dropout: dropout on the residual branches and in the MLP (training only).
        positions: ``"learned"`` (one trained vector per position, added to the token
            embedding), ``"sinusoidal"`` (the fixed encodings of ``core.positions``, added;
            a buffer, not trained), ``"rotary"`` (nothing added: every layer rotates its
            queries and keys, ``core.rotary``; grouped-query layers only) or ``"none"``.
        mlp: True gives each layer a GELU MLP, ``"swiglu"`` the gated MLP of Llama-family
            models (``SwiGLU``); False makes an attention-only model.
        norm: True puts LayerNorm before each sublayer and before the read-out, ``"rms"``
            RMSNorm (Zhang and Sennrich 2019, no mean, no bias); False leaves none.
        norm_eps: the epsilon either norm adds to the variance.
        bias: False drops the biases of the attention projections, the MLP and the read-out.
        tie_embeddings: read out with the embedding matrix (``unembed.weight`` is
            ``embed.weight``; it takes the read-out's init).
        rope_base: base of the rotary frequencies (``positions="rotary"``).

    Sequences are at most ``max_len`` tokens long whatever ``positions`` is.

    ``forward(tokens, key_padding_mask=None, cache=None)`` is always causal;
    ``generate(prompt, n_new)`` decodes greedily. Call ``eval()`` first where dropout is on.

    Shapes: forward(tokens (batch, seq)) -> logits (batch, seq, vocab_size).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        *,
        n_kv_heads: int | None = None,
        d_latent: int | None = None,
        d_head: int | None = None,
        d_ff: int | None = None,
        dropout: float = 0.0,
        positions: str = "learned",
        mlp: bool | str = True,
        norm: bool | str = True,
        norm_eps: float = 1e-5,
        bias: bool = True,
        tie_embeddings: bool = False,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("max_len", max_len)):
            check_positive_int(name, value)
        check_positive_int("d_model", d_model)
        check_positive_int("n_layers", n_layers)
        if d_latent is not None and n_kv_heads is not None:
            raise ValueError(
                f"n_kv_heads={n_kv_heads} and d_latent={d_latent}: pass one (latent attention "
                "has no key/value heads: every head decompresses its own from the latent)"
            )
        check_choice("positions", positions, POSITIONS)
        if positions == "rotary" and d_latent is not None:
            raise ValueError(
                f"positions='rotary' with d_latent={d_latent}: latent attention here has no "
                "rotary part (rotation breaks its absorption, chapter 10); use n_kv_heads"
            )
        if not check_setting("mlp", mlp, "swiglu") and d_ff is not None:
            raise ValueError(f"d_ff={d_ff} is the MLP's size, but mlp=False; leave d_ff out")
        check_setting("norm", norm, "rms")
        norm_eps = check_number("norm_eps", norm_eps, 0.0, None, "()")
        if not check_bool("bias", bias) and d_latent is not None:
            raise ValueError("bias=False with d_latent: latent attention here keeps its b_O")
        check_bool("tie_embeddings", tie_embeddings)
        d_ff = 4 * d_model if d_ff is None else check_positive_int("d_ff", d_ff)
        dropout = check_probability("dropout", dropout)
        self.vocab_size, self.max_len, self.d_model = vocab_size, max_len, d_model
        self.positions = positions

        def attention() -> nn.Module:
            if d_latent is not None:
                return LatentAttention(d_model, n_heads, d_latent, d_head)
            rotary = positions == "rotary"
            return GroupedQueryAttention(
                d_model, n_heads, n_kv_heads or n_heads, d_head,
                bias=bias, rotary=rotary, rope_base=rope_base,
            )  # fmt: skip

        def feed_forward() -> nn.Module | None:
            if mlp == "swiglu":
                return SwiGLU(d_model, d_ff)
            return FeedForward(d_model, d_ff, dropout, bias=bias) if mlp else None

        def make_norm() -> nn.Module:
            if norm == "rms":
                return nn.RMSNorm(d_model, eps=norm_eps)
            return nn.LayerNorm(d_model, eps=norm_eps) if norm else nn.Identity()

        self.embed = nn.Embedding(vocab_size, d_model)
        if positions == "learned":
            self.pos = nn.Embedding(max_len, d_model)
        elif positions == "sinusoidal":  # fixed: a buffer, not saved in the state dict
            pe = sinusoidal_positions(max_len, check_even("d_model", d_model, SINUSOIDAL))
            self.register_buffer("pos_table", pe, persistent=False)  # (max_len, d_model)
        self.layers = nn.ModuleList(
            Block(attention(), feed_forward(), make_norm, dropout) for _ in range(n_layers)
        )
        self.norm = make_norm()
        self.unembed = nn.Linear(d_model, vocab_size, bias=bias)
        if tie_embeddings:
            self.unembed.weight = self.embed.weight  # one matrix, (vocab_size, d_model)
        init_model(self)  # embeddings N(0, 1), linear layers Xavier (attention: its own init)

    def forward(
        self,
        tokens: Tensor,
        key_padding_mask: Tensor | None = None,
        cache: list[KVCache] | None = None,
    ) -> Tensor:
        """Logits of every position of ``tokens``; with ``cache``, ``tokens`` continue the
        sequence the cache holds (and the cache grows). Positions count real tokens only
        (``token_positions``): a left-padded sequence is the same sequence.

        Shapes: tokens (batch, seq), key_padding_mask (batch, seq), True at padding
        -> (batch, seq, vocab_size).
        """
        past = self.check_cache(cache)
        check_tokens("tokens", tokens, self.vocab_size, self.max_len)
        if past + tokens.shape[1] > self.max_len:
            raise ValueError(
                f"tokens continue a cache of {past} tokens to {past + tokens.shape[1]}, beyond "
                f"max_len={self.max_len}"
            )
        x = self.embed(tokens)  # (batch, seq, d_model)
        at = self.token_positions(tokens, key_padding_mask, cache)  # None: past, past + 1, ...
        if at is None and self.positions in ("learned", "sinusoidal"):
            at = torch.arange(past, past + tokens.shape[1], device=tokens.device)  # (seq,)
        if self.positions == "learned":
            x = x + self.pos(at)
        elif self.positions == "sinusoidal":
            x = x + self.pos_table[at]  # (seq or batch x seq, d_model)
        rotary = at if self.positions == "rotary" else None
        for i, layer in enumerate(self.layers):
            x = layer(x, key_padding_mask, None if cache is None else cache[i], rotary)
        return self.unembed(self.norm(x))  # (batch, seq, vocab_size)

    def token_positions(
        self, tokens: Tensor, key_padding_mask: Tensor | None, cache: list[KVCache] | None
    ) -> Tensor | None:
        """Where each new token sits when something is padded: positions count the real
        tokens before it (as transformers derives ``position_ids`` from the attention mask),
        so a left-padded prompt is the same prompt; a padding token takes 0. None when
        nothing in the cache or the new tokens is padded: positions ``past, past + 1, ...``.

        Shapes: tokens (batch, seq), key_padding_mask (batch, seq) -> (batch, seq) or None.
        """
        held = cache[0].key_padding_mask if cache else None  # (batch, past), True at pad
        if key_padding_mask is None and held is None:
            return None
        pad = torch.zeros_like(tokens, dtype=torch.bool) if key_padding_mask is None else (
            check_bool_mask("key_padding_mask", key_padding_mask, tokens.shape, "True at pad")
        )  # fmt: skip
        before = self.check_cache(cache) if held is None else (~held).sum(1, keepdim=True)
        return (before + (~pad).cumsum(1) - 1).clamp(min=0)  # (batch, seq)

    def new_cache(self) -> list[KVCache]:
        """An empty cache: one ``KVCache`` per layer. Shapes: none."""
        return [KVCache() for _ in self.layers]

    def check_cache(self, cache: object) -> int:
        """The number of tokens ``cache`` holds (0 for None), after checking it is a list of
        one ``KVCache`` per layer, all of the same length. Shapes: none."""
        if cache is None:
            return 0
        if not isinstance(cache, list) or not all(isinstance(c, KVCache) for c in cache):
            raise TypeError("cache must be a list of KVCache, as new_cache() returns, or None")
        if len(cache) != len(self.layers):
            raise ValueError(f"cache has {len(cache)} entries, expected one per layer (n_layers)")
        if len({c.length for c in cache}) > 1:
            raise ValueError(f"cache holds layers of lengths {[c.length for c in cache]}")
        return cache[0].length

    @torch.no_grad()
    def generate(
        self,
        prompt: Tensor,
        n_new: int,
        *,
        use_cache: bool = True,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Greedy decoding: append the most likely next token ``n_new`` times. With
        ``use_cache`` each step feeds only the newest token (the cache holds the rest);
        without, each step recomputes the whole prefix. Both give the same logits to roundoff,
        so the same tokens unless the top two are that close. ``key_padding_mask`` marks
        padding in the prompt (left padding); a padded prompt continues as it would alone.

        Shapes: prompt (batch, prompt_len) -> (batch, prompt_len + n_new).
        """
        check_tokens("prompt", prompt, self.vocab_size, self.max_len)
        if check_int("n_new", n_new, 0) + prompt.shape[1] > self.max_len:
            raise ValueError(
                f"n_new={n_new} would take the prompt of {prompt.shape[1]} tokens beyond "
                f"max_len={self.max_len}"
            )
        check_bool("use_cache", use_cache)
        cache = self.new_cache() if use_cache else None
        tokens, mask = prompt, key_padding_mask
        new, new_mask = prompt, key_padding_mask  # what the next step feeds
        for _ in range(n_new):
            logits = self(new, new_mask, cache) if use_cache else self(tokens, mask)
            token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (batch, 1)
            tokens = torch.cat([tokens, token], dim=1)  # (batch, seq + 1)
            if mask is not None:  # a generated token is never padding
                mask = torch.cat([mask, torch.zeros_like(token, dtype=torch.bool)], dim=1)
            new, new_mask = token, None
        return tokens

    def cache_shape(self) -> dict[str, int]:
        """What the cache keeps per token: ``n_layers`` and ``n_kv_heads``, ``d_head`` (keys and
        values of grouped-query layers) or ``d_latent`` (latent layers), the arguments of
        ``analysis.cost.kv_cache_bytes`` or ``latent_cache_bytes``. Shapes: none."""
        attn = self.layers[0].attn
        if isinstance(attn, LatentAttention):
            return {"n_layers": len(self.layers), "d_latent": attn.d_latent}
        return {"n_layers": len(self.layers), "n_kv_heads": attn.n_kv_heads, "d_head": attn.d_head}
