"""Small Transformers built from ``MultiHeadAttention``: an encoder model and an
encoder-decoder, pre-norm by default, with named init schemes.

Module paths (the keys of ``run_with_cache``):
``encoder.layers.{i}.attn``, ``decoder.layers.{i}.attn`` (causal self-attention) and
``decoder.layers.{i}.cross_attn`` (decoder-encoder attention).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from multihead._checks import check_choice, check_number
from multihead.core.attention import MultiHeadAttention
from multihead.core.config import INIT_SCHEMES, ModelConfig
from multihead.core.talking_heads import TalkingHeadsAttention


def _mha(cfg: ModelConfig) -> MultiHeadAttention:
    if cfg.attention == "talking_heads":
        return TalkingHeadsAttention(cfg.d_model, cfg.n_heads, cfg.d_key, cfg.d_value)
    return MultiHeadAttention(
        cfg.d_model, cfg.n_heads, cfg.d_key, cfg.d_value, attn_dropout=cfg.attn_dropout
    )


class FeedForward(nn.Module):
    """Position-wise MLP. Shapes: (batch, seq, d_model) -> (batch, seq, d_model)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, bias: bool = True) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff, bias), nn.Linear(d_ff, d_model, bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.drop(torch.nn.functional.gelu(self.fc1(x))))


class Layer(nn.Module):
    """One Transformer layer: self-attention, optional cross-attention, MLP.

    Pre-norm computes ``x + f(LN(x))``; post-norm computes ``LN(x + f(x))``.

    Shapes: x (batch, seq, d_model), memory (batch, src_len, d_model) -> like x.
    """

    def __init__(self, cfg: ModelConfig, cross: bool = False) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.attn = _mha(cfg)
        self.cross_attn = _mha(cfg) if cross else None
        self.mlp = FeedForward(cfg.d_model, cfg.d_ff or 4 * cfg.d_model, cfg.dropout)
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.d_model) for _ in range(3 if cross else 2))
        self.drop = nn.Dropout(cfg.dropout)

    def _sub(self, x: Tensor, norm: nn.LayerNorm, f) -> Tensor:
        if self.pre:
            return x + self.drop(f(norm(x)))
        return norm(x + self.drop(f(x)))

    def forward(
        self,
        x: Tensor,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
    ) -> Tensor:
        x = self._sub(
            x,
            self.norms[0],
            lambda y: self.attn(y, key_padding_mask=key_padding_mask, causal=causal),
        )
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("memory is required by a layer with cross-attention")
            x = self._sub(
                x,
                self.norms[2],
                lambda y: self.cross_attn(y, memory, memory, key_padding_mask=memory_padding_mask),
            )
        return self._sub(x, self.norms[1], self.mlp)


class Stack(nn.Module):
    """Token + learned position embeddings, then ``n`` layers (and a final norm if pre-norm).

    Shapes: tokens (batch, seq) long -> (batch, seq, d_model).
    """

    def __init__(self, cfg: ModelConfig, n: int, vocab_size: int, cross: bool) -> None:
        super().__init__()
        self.max_len = cfg.max_len
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.layers = nn.ModuleList(Layer(cfg, cross=cross) for _ in range(n))
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()

    def forward(self, tokens: Tensor, key_padding_mask: Tensor | None = None, **kw) -> Tensor:
        check_tokens("tokens", tokens, self.vocab_size, self.max_len)
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)  # (batch, seq, d_model)
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask, **kw)
        return self.norm(x)


def check_tokens(name: str, tokens: object, vocab_size: int, max_len: int) -> None:
    """Raise a clear error unless ``tokens`` is a (batch, seq) integer tensor in range."""
    if not isinstance(tokens, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold integer token ids (int64), got dtype {tokens.dtype}")
    if tokens.ndim != 2:
        raise ValueError(f"{name} must have shape (batch, seq), got {tuple(tokens.shape)}")
    if tokens.shape[1] > max_len:
        raise ValueError(f"{name} has length {tokens.shape[1]} > max_len={max_len}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"{name} holds ids outside [0, {vocab_size})")


class EncoderModel(nn.Module):
    """An encoder with a per-token linear read-out (tagging / per-position prediction).

    Shapes: tokens (batch, seq) -> logits (batch, seq, n_classes).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.encoder = Stack(cfg, cfg.n_layers, cfg.vocab_size, cross=False)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes or cfg.vocab_size)
        init_model(self, cfg.init, gain=cfg.init_gain, epsilon=cfg.init_epsilon)

    def forward(self, tokens: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return self.head(self.encoder(tokens, key_padding_mask=key_padding_mask))


class EncoderDecoder(nn.Module):
    """A sequence-to-sequence Transformer (teacher forcing in ``forward``).

    ``cfg.vocab_size`` is the source vocabulary, ``cfg.n_classes`` the target one.

    Shapes: src (batch, src_len), tgt (batch, tgt_len) -> logits (batch, tgt_len, n_classes).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        tgt_vocab = cfg.n_classes or cfg.vocab_size
        self.encoder = Stack(cfg, cfg.n_layers, cfg.vocab_size, cross=False)
        self.decoder = Stack(cfg, cfg.n_decoder_layers, tgt_vocab, cross=True)
        self.head = nn.Linear(cfg.d_model, tgt_vocab)
        init_model(self, cfg.init, gain=cfg.init_gain, epsilon=cfg.init_epsilon)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_padding_mask: Tensor | None = None,
        tgt_padding_mask: Tensor | None = None,
    ) -> Tensor:
        memory = self.encoder(src, key_padding_mask=src_padding_mask)
        x = self.decoder(
            tgt,
            key_padding_mask=tgt_padding_mask,
            causal=True,
            memory=memory,
            memory_padding_mask=src_padding_mask,
        )
        return self.head(x)

    @torch.no_grad()
    def greedy_decode(
        self, src: Tensor, bos: int, max_len: int, src_padding_mask: Tensor | None = None
    ) -> Tensor:
        """Decode greedily from ``bos`` for ``max_len`` steps (the caller cuts at EOS).

        Shapes: src (batch, src_len) -> (batch, max_len) token ids, without the BOS.
        """
        memory = self.encoder(src, key_padding_mask=src_padding_mask)
        out = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            x = self.decoder(out, causal=True, memory=memory, memory_padding_mask=src_padding_mask)
            out = torch.cat([out, self.head(x[:, -1]).argmax(-1, keepdim=True)], dim=1)
        return out[:, 1:]


# ---------------------------------------------------------------------- init schemes
def attention_modules(model: nn.Module) -> list[tuple[str, MultiHeadAttention]]:
    """Every ``MultiHeadAttention`` in ``model`` with its path, in forward order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)]


@torch.no_grad()
def init_model(model: nn.Module, scheme: str = "xavier", gain: float = 1.0, epsilon: float = 0.0):
    """Initialise ``model`` in place by a named scheme.

    * ``"xavier"``: Xavier-uniform matrices, zero biases, N(0, 1) embeddings.
    * ``"scaled"``: Xavier times ``gain`` (small or large init).
    * ``"ds_init"``: depth-scaled (Zhang, Titov and Sennrich 2019): the matrices of layer
      ``l`` (1-based within its stack) are Xavier times ``gain / sqrt(l)``.
    * ``"shared_heads"``: Xavier, then in every attention module each head copies head 0
      (``W_Q``, ``W_K``, ``W_V`` and its block of ``W_O``), plus Gaussian noise of standard
      deviation ``epsilon`` times the weight's own standard deviation.

    Shapes: none (modifies parameters in place).
    """
    check_choice("scheme", scheme, INIT_SCHEMES)
    check_number("gain", gain, 0.0, None, "()")
    check_number("epsilon", epsilon, 0.0)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.reset_parameters()
        elif isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight)
    if scheme == "xavier":
        return model
    layers = [
        (depth, layer)
        for stack in model.modules()
        if isinstance(stack, Stack)
        for depth, layer in enumerate(stack.layers, start=1)  # depth l within its stack
    ]
    for depth, module in layers:
        if scheme == "scaled":
            factor = gain
        elif scheme == "ds_init":
            factor = gain / math.sqrt(depth)
        else:
            factor = 1.0
        for sub in module.modules():
            if isinstance(sub, MultiHeadAttention):
                for W in (sub.W_Q, sub.W_K, sub.W_V, sub.W_O):
                    W.mul_(factor)
            elif isinstance(sub, nn.Linear):
                sub.weight.mul_(factor)
    if scheme == "shared_heads":
        for _, attn in attention_modules(model):
            for W in (attn.W_Q, attn.W_K, attn.W_V, attn.W_O):
                W.copy_(W[:1].expand_as(W) + epsilon * W.std() * torch.randn_like(W))
    return model


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters. Shapes: none."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
