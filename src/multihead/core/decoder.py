"""A small decoder-only language model whose attention shares or compresses keys and values,
with a KV cache for generation.

Each layer is pre-norm, ``x + attn(ln1(x))`` then ``x + ff(ln2(x))``, with causal
self-attention: ``GroupedQueryAttention`` (``n_kv_heads`` key/value heads; multi-head
attention by default, multi-query attention with one) or, when ``d_latent`` is given,
``LatentAttention``. Module paths (the keys of ``run_with_cache``): ``layers.{i}.attn``, so
``stack_layers(cache, "layers.{}.attn.pattern")`` stacks the patterns over layers.

With a cache (``new_cache()``: one ``KVCache`` per layer) ``forward`` takes only the new
tokens, continues at the position where the cache ends and returns their logits; the
answer is the one a forward pass over the whole sequence gives at those positions.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from multihead._checks import (
    check_bool,
    check_choice,
    check_int,
    check_positive_int,
    check_probability,
)
from multihead.core.model import FeedForward, check_tokens, init_model
from multihead.core.sharing import (
    GroupedQueryAttention,
    KVCache,
    LatentAttention,
    gqa_as_mha,
    mha_to_gqa,
)


class Block(nn.Module):
    """One pre-norm decoder layer: causal self-attention, then the MLP.

    Shapes: x (batch, seq, d_model), key_padding_mask (batch, seq) -> like x.
    """

    def __init__(self, attn: nn.Module, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d_model), attn
        self.ln2, self.ff = nn.LayerNorm(d_model), FeedForward(d_model, d_ff, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, cache: KVCache | None = None
    ) -> Tensor:
        a = self.attn(self.ln1(x), key_padding_mask=key_padding_mask, causal=True, cache=cache)
        x = x + self.drop(a)
        return x + self.drop(self.ff(self.ln2(x)))


class Decoder(nn.Module):
    """A decoder-only causal language model (GPT-style, learned positions, untied read-out).

    Args:
        vocab_size: number of token ids.
        max_len: longest sequence (prompt and generated tokens together).
        d_model, n_layers, n_heads: width, depth and query heads per layer.
        n_kv_heads: key/value heads of ``GroupedQueryAttention`` (default ``n_heads``).
        d_latent: if given, every layer is ``LatentAttention`` with this latent size.
        d_head: size of each head (default ``d_model // n_heads``).
        d_ff: hidden size of the MLP (default ``4 * d_model``).
        dropout: dropout on the residual branches and in the MLP (training only).

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
        d_ff = 4 * d_model if d_ff is None else check_positive_int("d_ff", d_ff)
        dropout = check_probability("dropout", dropout)
        self.vocab_size, self.max_len, self.d_model = vocab_size, max_len, d_model

        def attention() -> nn.Module:
            if d_latent is not None:
                return LatentAttention(d_model, n_heads, d_latent, d_head)
            return GroupedQueryAttention(d_model, n_heads, n_kv_heads or n_heads, d_head)

        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(
            Block(attention(), d_model, d_ff, dropout) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, vocab_size)
        init_model(self)  # embeddings N(0, 1), linear layers Xavier (attention: its own init)

    def forward(
        self,
        tokens: Tensor,
        key_padding_mask: Tensor | None = None,
        cache: list[KVCache] | None = None,
    ) -> Tensor:
        """Logits of every position of ``tokens``; with ``cache``, ``tokens`` continue the
        sequence the cache holds (positions start at its length) and the cache grows.

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
        positions = torch.arange(past, past + tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)  # (batch, seq, d_model)
        for i, layer in enumerate(self.layers):
            x = layer(x, key_padding_mask, None if cache is None else cache[i])
        return self.unembed(self.norm(x))  # (batch, seq, vocab_size)

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
        without, each step recomputes the whole prefix. Both give the same tokens.
        ``key_padding_mask`` marks padding in the prompt (left padding).

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

    def cache_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """Bytes the cache grows by per token and sequence, over all layers: keys and values
        of ``n_kv_heads`` heads (``2 n_layers n_kv_heads d_head``) or one latent per layer
        (``n_layers d_latent``) values, ``bytes_per_value`` each (2 for 16-bit floats).

        Shapes: none.
        """
        check_positive_int("bytes_per_value", bytes_per_value)
        attn = self.layers[0].attn
        if isinstance(attn, LatentAttention):
            per_layer = attn.d_latent
        else:
            per_layer = 2 * attn.n_kv_heads * attn.d_head
        return len(self.layers) * per_layer * bytes_per_value


@torch.no_grad()
def convert_decoder(decoder: Decoder, n_kv_heads: int, how: str = "mean") -> Decoder:
    """A copy of a trained grouped-query ``decoder`` whose every layer has ``n_kv_heads``
    key/value heads: each new head is the mean of the key/value heads of its group
    (``how="mean"``, Ainslie et al. 2023) or the group's first (``how="first"``). Everything
    else is copied; ``n_kv_heads`` must divide the query heads, and the conversion is exact
    when it equals them.

    Shapes: none (returns a model computing (batch, seq) -> (batch, seq, vocab_size)).
    """
    if not isinstance(decoder, Decoder):
        raise TypeError(f"decoder must be a Decoder, got {type(decoder).__name__}")
    check_choice("how", how, ("mean", "first"))
    new = copy.deepcopy(decoder)
    for layer in new.layers:
        if not isinstance(layer.attn, GroupedQueryAttention):
            raise TypeError("decoder must have grouped-query layers, not latent attention")
        layer.attn = mha_to_gqa(gqa_as_mha(layer.attn), n_kv_heads, how=how)
    return new
