"""Named initialisation schemes of the course's models (chapter 2 asks how the start shapes
what heads become): Xavier, scaled, depth-scaled and heads that start as copies.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from multihead._checks import check_choice, check_number
from multihead.core.attention import MultiHeadAttention
from multihead.core.config import INIT_SCHEMES


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
    layers = [  # (depth l within its stack, layer): an encoder's or a decoder's layers
        (depth, layer)
        for stack in model.modules()
        if isinstance(getattr(stack, "layers", None), nn.ModuleList)
        for depth, layer in enumerate(stack.layers, start=1)
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
        for attn in [m for m in model.modules() if isinstance(m, MultiHeadAttention)]:
            for W in (attn.W_Q, attn.W_K, attn.W_V, attn.W_O):
                W.copy_(W[:1].expand_as(W) + epsilon * W.std() * torch.randn_like(W))
    return model
