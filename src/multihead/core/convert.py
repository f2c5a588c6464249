"""Converting trained attention layers: to another number of key/value heads (grouped-query
attention made from multi-head attention by pooling each group's keys and values, Ainslie et
al. 2023, and back), and to PyTorch's own ``nn.MultiheadAttention``.

The layers themselves live elsewhere: ``GroupedQueryAttention`` (and its special case
``MultiHeadAttention``) in ``core.attention``, ``LatentAttention`` in ``core.latent``, the
``KVCache`` in ``core.cache`` and exact attention in tiles in ``core.tiles``.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from multihead._checks import check_choice, check_positive_int
from multihead.core.attention import GroupedQueryAttention, MultiHeadAttention
from multihead.core.decoder import Decoder


@torch.no_grad()
def regroup(
    layer: GroupedQueryAttention, n_kv_heads: int, how: str = "mean"
) -> GroupedQueryAttention:
    """The layer with ``n_kv_heads`` key/value heads; its query heads, ``W_O``, settings and
    ``head_mask`` are copied.

    Each new group of consecutive query heads gets the mean (``how="mean"``, the mean pooling
    of Ainslie et al. 2023) or the first (``how="first"``) of the key/value heads its query
    heads read, or new random ones (``how="random"``, the paper's third start: the layer's own
    initialisation, drawn from torch's global generator, so seed it for a reproducible draw).
    With ``"mean"`` or ``"first"`` and at least as many key/value heads as the layer has,
    every query head reads what it read before, so the result computes the same function. With
    ``n_kv_heads == n_heads`` (and no rotary positions) the result is a ``MultiHeadAttention``:
    grouped-query attention is multi-head attention with the key/value projections tied
    within groups.

    Shapes: none (returns a module computing (batch, seq, d_model) -> same).
    """
    if type(layer) not in (GroupedQueryAttention, MultiHeadAttention):  # not talking heads
        raise TypeError(
            f"layer must be a GroupedQueryAttention or MultiHeadAttention, got "
            f"{type(layer).__name__}"
        )
    check_choice("how", how, ("mean", "first", "random"))
    h = layer.n_heads
    if h % check_positive_int("n_kv_heads", n_kv_heads):
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={h}")
    sizes, bias = (layer.d_model, h), layer.b_Q is not None
    if n_kv_heads == h and not layer.rotary:
        new = MultiHeadAttention(*sizes, layer.d_key, layer.d_value, bias=bias)
    else:
        rope = {"rotary": layer.rotary, "rope_base": layer.rope_base}
        new = GroupedQueryAttention(
            *sizes, n_kv_heads, layer.d_key, d_value=layer.d_value, bias=bias, **rope
        )
    new = new.to(layer.W_Q)
    new.attn_dropout, new.materialize = layer.attn_dropout, layer.materialize
    for name in ("W_Q", "b_Q", "W_O", "b_O", "head_mask"):
        if getattr(new, name) is not None:
            getattr(new, name).copy_(getattr(layer, name))
    # "random" keeps the new layer's own draw of its key/value weights (and zero biases)
    for name in () if how == "random" else ("W_K", "W_V", "b_K", "b_V"):
        if getattr(layer, name) is not None:  # the key/value head each query head reads
            read = getattr(layer, name).repeat_interleave(h // layer.n_kv_heads, dim=0)
            groups = read.unflatten(0, (n_kv_heads, h // n_kv_heads))  # (new kv, group, ...)
            getattr(new, name).copy_(groups.mean(dim=1) if how == "mean" else groups[:, 0])
    return new


@torch.no_grad()
def convert_decoder(decoder: Decoder, n_kv_heads: int, how: str = "mean") -> Decoder:
    """A copy of a trained grouped-query ``decoder`` whose every layer is ``regroup``-ed to
    ``n_kv_heads`` key/value heads (``how="mean"``, ``"first"`` or ``"random"``); everything
    else is copied. A ``"mean"`` or ``"first"`` conversion is exact when ``n_kv_heads`` is a
    multiple of the layers' own.

    Shapes: none (returns a model computing (batch, seq) -> (batch, seq, vocab_size)).
    """
    if not isinstance(decoder, Decoder):
        raise TypeError(f"decoder must be a Decoder, got {type(decoder).__name__}")
    if not all(isinstance(layer.attn, GroupedQueryAttention) for layer in decoder.layers):
        raise TypeError("decoder must have grouped-query layers, not latent attention")
    new = copy.deepcopy(decoder)
    for layer in new.layers:
        layer.attn = regroup(layer.attn, n_kv_heads, how=how)
    return new


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
