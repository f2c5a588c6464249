"""Every argument check of the package, so each error names the argument and the fix.

Mask polarity, written down once for the whole package:

* ``key_padding_mask`` (batch, k_len) and the ``mask`` of ``attention_pattern``: **True =
  blocked** (a padding key, a future token), as in ``torch.nn.MultiheadAttention``;
  ``torch.nn.functional.scaled_dot_product_attention`` takes the opposite (True = may
  attend), and ``MultiHeadAttention`` inverts the mask once, where it calls that kernel.
  A query whose every key is blocked (left padding under a causal mask) reads nothing: its
  pattern row is all zeros and so is what each head writes there, on both paths
  (``core.attention.key_softmax``);
* query selections (``queries``, ``Gold.scored_queries()``, ``TaggingData.real_tokens``):
  **True = counted**;
* head masks and gates (``head_mask``, ``{path: (heads,)}`` dicts): **1 = kept**, 0 = removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an int > 0, else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value <= 0:
        raise ValueError(f"{name}={value} must be a positive integer")
    return value


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[lo, hi)``, else raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if (lo is not None and value < lo) or (hi is not None and value >= hi):
        where = f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi})"
        raise ValueError(f"{name}={value} must lie in {where}")
    return value


def check_number(
    name: str, value: Any, lo: float | None = None, hi: float | None = None, closed: str = "[]"
) -> float:
    """Return ``value`` as a float if it is a real number (not a bool) within the interval
    from ``lo`` to ``hi``; ``closed`` says which ends belong to it: ``"[]"``, ``"[)"``,
    ``"(]"`` or ``"()"``. ``None`` leaves that side open-ended.
    """
    where = f"{closed[0]}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{closed[1]}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number in {where}, got {type(value).__name__}")
    low_ok = lo is None or (value >= lo if closed[0] == "[" else value > lo)
    high_ok = hi is None or (value <= hi if closed[1] == "]" else value < hi)
    if not (low_ok and high_ok):
        raise ValueError(f"{name}={value} must lie in {where}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (not 0/1 or a tensor), else raise naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__}")
    return value


def check_seeds(
    name: str, seeds: Any, *, at_least: int = 1, count: int | None = None
) -> tuple[int, ...]:
    """Return ``seeds`` as a tuple if it is a sequence (not a string) of distinct ints >= 0
    (no bools), with at least ``at_least`` entries (exactly ``count``, when given)."""
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
        raise TypeError(f"{name} must be a sequence of ints such as [0, 1, 2], got {seeds!r}")
    seeds = tuple(check_int(f"{name}[{i}]", s, 0) for i, s in enumerate(seeds))
    if not seeds:
        raise ValueError(f"{name} is empty: pass at least {at_least} seed(s)")
    if len(seeds) < at_least:
        raise ValueError(f"{name} needs at least {at_least} seeds, got {list(seeds)}")
    if count is not None and len(seeds) != count:
        raise ValueError(f"{name} has {len(seeds)} entries, expected {count} (one per model)")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{name}={list(seeds)} repeats a seed; each seed must be different")
    return seeds


def check_probability(name: str, value: Any) -> float:
    """Return ``value`` as a float in [0, 1), else raise naming ``name``."""
    return check_number(name, value, 0.0, 1.0, "[)")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise listing them."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")
    return value


def check_setting(name: str, value: object, word: str) -> bool | str:
    """Return ``value`` if it is True, False or ``word``. Shapes: none."""
    if not isinstance(value, bool) and value != word:
        raise TypeError(f"{name} must be True, False or {word!r}, got {value!r}")
    return value


def check_tensor(
    name: str,
    x: Any,
    *,
    ndim: int | tuple[int, ...] | None = None,
    min_ndim: int | None = None,
    nonneg: bool = False,
    finite: bool = False,
    layout: str = "",
) -> Tensor:
    """Return ``x`` if it is a floating-point tensor with the required number of dimensions
    (``ndim``: exactly, or one of a tuple; ``min_ndim``: at least), and, if asked, no
    negative or non-finite entry. ``layout`` (e.g. ``"(batch, heads, query, key)"``) is
    quoted in the error.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    allowed = (ndim,) if isinstance(ndim, int) else ndim
    if (allowed is not None and x.ndim not in allowed) or (
        min_ndim is not None and x.ndim < min_ndim
    ):
        want = layout or (
            f"{' or '.join(map(str, allowed))} dimensions"
            if allowed is not None
            else f"at least {min_ndim} dimensions"
        )
        raise ValueError(f"{name} must be shaped {want}, got shape {tuple(x.shape)}")
    if nonneg and x.numel() and bool(x.min() < 0):
        raise ValueError(f"{name} has negative entries; expected attention probabilities")
    if finite and not bool(x.isfinite().all()):
        raise ValueError(f"{name} has inf or nan entries")
    return x


def check_int_tensor(
    name: str,
    x: Any,
    *,
    ndim: int | None = None,
    lo: int | None = None,
    hi: int | None = None,
    nonempty: bool = False,
    layout: str = "",
) -> Tensor:
    """Return ``x`` if it is an integer tensor (not bool) with ``ndim`` dimensions (when
    given), entries in ``[lo, hi)`` and, if ``nonempty``, at least one entry."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor (e.g. torch.long), got {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        want = layout or f"{ndim} dimensions"
        raise ValueError(f"{name} must be shaped {want}, got shape {tuple(x.shape)}")
    if nonempty and not x.numel():
        raise ValueError(f"{name} is empty")
    if x.numel() and ((lo is not None and x.min() < lo) or (hi is not None and x.max() >= hi)):
        where = f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi})"
        got = f"entries from {x.min().item()} to {x.max().item()}"
        raise ValueError(f"{name} must lie in {where}, got {got}")
    return x


def check_pattern(
    name: str, x: Any, min_ndim: int = 2, layout: str = "(..., query, key)", *, ndim=None
) -> Tensor:
    """An attention pattern: a non-negative float tensor with at least ``min_ndim`` (or
    exactly ``ndim``) dimensions, shaped ``layout``."""
    return check_tensor(
        name, x, ndim=ndim, min_ndim=None if ndim else min_ndim, nonneg=True, layout=layout
    )


def check_bool_mask(name: str, mask: Any, shape: tuple[int, ...] | None = None, meaning: str = ""):
    """Return ``mask`` if it is a bool tensor (of ``shape``, when given), else raise.
    ``meaning`` (e.g. ``"True at padding keys"``) is quoted in the error."""
    hint = f" ({meaning})" if meaning else ""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = f"dtype {mask.dtype}" if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a bool tensor{hint}, got {got}")
    if shape is not None and tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected {tuple(shape)}{hint}")
    return mask


def check_callable(name: str, value: Any, usage: str) -> Any:
    """Return ``value`` if it is callable, else raise quoting how it is called."""
    if not callable(value):
        raise TypeError(f"{name} must be callable as {usage}, got {type(value).__name__}")
    return value


def check_even(name: str, value: Any, why: str) -> int:
    """Return ``value`` if it is an even positive int, else raise naming ``name`` and ``why``
    it must be even (e.g. ``"for sinusoidal positions, which come in (sin, cos) pairs"``)."""
    check_positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name}={value} must be even {why}; choose an even size")
    return value


def check_attention_inputs(
    d_model: int,
    query: Any,
    key: Any,
    value: Any,
    key_padding_mask: Any,
    causal: Any,
    *,
    cached: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """Check the inputs of an attention layer of width ``d_model``; ``key`` defaults to
    ``query`` and ``value`` to ``key``. Returns ``(query, key, value)``. A layer that
    continues a cache of past tokens (``cached``) attends to itself, and its new tokens may
    all be padding (left padding decoded token by token: the past decides); otherwise a
    ``key_padding_mask`` that masks every key of an example is an error.

    Shapes: query (batch, q_len, d_model), key/value (batch, k_len, d_model),
    key_padding_mask (batch, k_len), True at padding keys.
    """
    query = check_tensor("query", query, ndim=3, layout="(batch, q_len, d_model)")
    key = query if key is None else check_tensor("key", key, ndim=3, layout="(batch, k_len, d)")
    value = key if value is None else check_tensor("value", value, ndim=3, layout="like key")
    batch, q_len, d = query.shape
    k_len = key.shape[1]
    if d != d_model:
        raise ValueError(f"query has last dimension {d}, expected d_model={d_model}")
    if key.shape[0] != batch or key.shape[2] != d:
        raise ValueError(f"key has shape {tuple(key.shape)}, expected ({batch}, k_len, {d})")
    if value.shape[:2] != key.shape[:2] or value.shape[2] != d:
        raise ValueError(f"value has shape {tuple(value.shape)}, expected {tuple(key.shape)}")
    if key_padding_mask is not None:
        check_bool_mask("key_padding_mask", key_padding_mask, (batch, k_len), "True at padding")
        if not cached and key_padding_mask.all(dim=1).any():
            raise ValueError("key_padding_mask masks every key of some example")
    check_bool("causal", causal)
    if causal and q_len != k_len:
        raise ValueError(f"causal=True needs q_len == k_len, got {q_len} and {k_len}")
    return query, key, value
