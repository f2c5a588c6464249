"""Self heads and sink (delimiter) heads, by attention *mass*, and the gradient of a loss
with respect to the attention on a group of keys: pure functions of padded token patterns.

Unlike the argmax criteria of ``analysis.roles``, these read how much weight a head puts on
a set of keys, averaged over queries, as Clark et al. (2019) measure attention to ``[SEP]``:

* a **self head** puts, on average over its queries, more than ``threshold`` of its
  attention on the query token itself;
* a **sink head** (delimiter head) puts, on average, more than ``threshold`` of its
  attention on the sink keys (``[CLS]``, ``[SEP]`` and punctuation, say).

Every real token is a query and a key; ``lengths`` marks the rest as padding. Patterns are
``(batch, heads, query, key)`` for one layer or ``(layers, batch, heads, query, key)`` for a
stack; statistics come back as ``(heads,)`` or ``(layers, heads)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from multihead._checks import (
    check_bool_mask,
    check_int_tensor,
    check_number,
    check_pattern,
    check_tensor,
)

_LAYOUT = "(batch, heads, query, key) or (layers, batch, heads, query, key)"


def _stack(name: str, x: object, lengths: object, *, nonneg: bool = True) -> tuple[Tensor, Tensor]:
    """``x`` as (layers, batch, heads, seq, seq) and the (batch, seq) mask of real tokens."""
    check = check_pattern if nonneg else check_tensor
    x = check(name, x, ndim=(4, 5), layout=_LAYOUT)
    x5 = x if x.ndim == 5 else x[None]
    batch, seq = x5.shape[1], x5.shape[-1]
    if x5.shape[-2] != seq:
        raise ValueError(f"{name} must have as many queries as keys, got {tuple(x.shape)}")
    check_int_tensor("lengths", lengths, ndim=1, layout="(batch,): real tokens per sentence")
    if len(lengths) != batch:
        raise ValueError(f"lengths has {len(lengths)} entries, {name} a batch of {batch}")
    if bool((lengths < 1).any()) or bool((lengths > seq).any()):
        raise ValueError(f"lengths must lie in [1, {seq}] (the padded length of {name})")
    real = torch.arange(seq)[None, :] < lengths[:, None]  # (batch, seq) True = real token
    return x5, real


def _query_mean(per_query: Tensor, real: Tensor) -> Tensor:
    """Mean of (layers, batch, heads, query) values over the real (batch, query)."""
    w = real[None, :, None, :].to(per_query.dtype)  # (1, batch, 1, query)
    return (per_query * w).sum(dim=(1, 3)) / w.sum(dim=(1, 3))


def self_share(pattern: Tensor, lengths: Tensor) -> Tensor:
    """Mean attention of each head on the query token itself (the diagonal).

    Shapes: pattern (layers?, batch, heads, seq, seq), lengths (batch,) -> (layers?, heads).
    """
    p, real = _stack("pattern", pattern, lengths)
    share = _query_mean(p.diagonal(dim1=-2, dim2=-1), real)  # diagonal: (l, b, h, seq)
    return share if pattern.ndim == 5 else share[0]


def key_mass(pattern: Tensor, keys: Tensor, lengths: Tensor) -> Tensor:
    """Mean attention mass of each head on the selected keys (True = in the group).

    Shapes: pattern (layers?, batch, heads, seq, seq), keys (batch, seq) bool,
    lengths (batch,) -> (layers?, heads).
    """
    p, real = _stack("pattern", pattern, lengths)
    check_bool_mask("keys", keys, (p.shape[1], p.shape[-1]), "True at the keys of the group")
    mass = (p * (keys & real)[None, :, None, None, :]).sum(-1)  # (layers, batch, heads, query)
    out = _query_mean(mass, real)
    return out if pattern.ndim == 5 else out[0]


def self_heads(pattern: Tensor, lengths: Tensor, threshold: float = 0.5) -> dict[str, Tensor]:
    """Self heads: mean attention on the token itself above ``threshold``.

    Shapes: -> {"share", "is_role"} each (layers?, heads).
    """
    check_number("threshold", threshold, 0.0, 1.0, "[)")
    share = self_share(pattern, lengths)
    return {"share": share, "is_role": share > threshold}


def sink_heads(
    pattern: Tensor, sink_keys: Tensor, lengths: Tensor, threshold: float = 0.5
) -> dict[str, Tensor]:
    """Sink (delimiter) heads: mean attention mass on ``sink_keys`` above ``threshold``.

    Shapes: sink_keys (batch, seq) bool -> {"mass", "is_role"} each (layers?, heads).
    """
    check_number("threshold", threshold, 0.0, 1.0, "[)")
    mass = key_mass(pattern, sink_keys, lengths)
    return {"mass": mass, "is_role": mass > threshold}


def key_gradient(grad: Tensor, keys: Tensor, lengths: Tensor) -> Tensor:
    """Mean |dL/d alpha| over the attention weights whose key is in the group: every real
    query, every head, every key of the group (Clark et al.'s Fig. 3 reads this per layer).

    Shapes: grad (layers?, batch, heads, seq, seq) (any sign), keys (batch, seq) bool,
    lengths (batch,) -> (layers?,).
    """
    g, real = _stack("grad", grad, lengths, nonneg=False)
    check_bool_mask("keys", keys, (g.shape[1], g.shape[-1]), "True at the keys of the group")
    sel = real[:, :, None] & (keys & real)[:, None, :]  # (batch, query, key)
    if not bool(sel.any()):
        raise ValueError("keys selects no real key: the group is empty in every sentence")
    w = sel[None, :, None].to(g.dtype)  # (1, batch, 1, query, key)
    out = (g.abs() * w).sum(dim=(1, 2, 3, 4)) / (w.sum() * g.shape[2])  # (layers,)
    return out if grad.ndim == 5 else out[0]
