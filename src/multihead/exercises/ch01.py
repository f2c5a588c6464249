"""Checkers for the exercises of chapter 1: multi-head attention from scratch."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from multihead.analysis import cost
from multihead.core import attention, convert, latent, talking_heads
from multihead.core.attention import MultiHeadAttention, attention_pattern, blocked
from multihead.core.convert import to_torch_multihead
from multihead.core.hooks import run_with_cache
from multihead.core.model import count_parameters
from multihead.exercises._common import checker, ok, refuse_reference, require_callable

# The package's attention layers already answer this chapter's exercises: an answer must not
# call into them.
_ATTENTION = (attention, convert, latent, talking_heads)

# A query whose every key is blocked reads nothing: its output row is zero (the course's
# convention, see multihead._checks), not nan.
_EMPTY_ROW = (
    "a query whose every key is masked must read nothing: the course's convention is a zero "
    "output row there (softmax of a row of -inf is nan; set such rows of the pattern to 0)"
)
# nan where no query has every key blocked: the code blocked whole queries, the usual bug of
# a padding mask broadcast along the query axis.
_QUERY_BROADCAST = (
    "no query of this mask has every key masked, so the nan comes from rows your code blocked "
    "whole: a padding mask marks *keys*, so it must vary along the last axis and be the same "
    "for every query: broadcast it as (batch, 1, 1, key), not as (batch, 1, key, 1) over the "
    "queries"
)
_POLARITY = (
    "the polarity is inverted: your output is attention under the opposite mask. Here True "
    "marks what a query may NOT look at (the polarity of torch.nn.MultiheadAttention); "
    "scaled_dot_product_attention's boolean mask means the opposite (True = may attend)"
)


def _same_but_nan(got: torch.Tensor, want: torch.Tensor, empty: torch.Tensor) -> bool:
    """``got`` equals ``want`` except for nan in rows that ``empty`` marks (rows whose every
    key is blocked: a textbook softmax gives nan there, the course's convention 0).

    Shapes: got, want (..., query, d); empty broadcastable to (..., query).
    """
    nan_rows = torch.isnan(got).any(dim=-1)  # (..., query)
    if (nan_rows & ~empty).any():
        return False
    close = (got.double() - want).abs() <= 1e-6
    return bool((close | nan_rows[..., None]).all())


def _mask_hint(got: torch.Tensor, inverted: list, has_empty_rows: bool) -> str:
    """The hint for a wrong output under a mask: the inverted polarity if ``got`` is the output
    under one of the ``inverted`` masks (pairs of that output and its rows with every key
    blocked), else what its nan means, else an empty string.

    Shapes: got (..., query, d); each pair (..., query, d) and (..., query).
    """
    for want, empty in inverted:
        if _same_but_nan(got, want, empty):
            return _POLARITY
    if torch.isnan(got).any():
        return _EMPTY_ROW if has_empty_rows else _QUERY_BROADCAST
    return ""


def _attention_cases(gen: torch.Generator):
    """(q, k, v, mask, what) cases: no mask, causal, padding, and rows with every key masked.
    The first has as many queries as keys, where swapped queries and keys still run."""
    for shape_q, shape_k, d_v in (((2, 3, 6, 8), (2, 3, 6, 8), 5), ((5, 4), (7, 4), 3)):
        q = torch.randn(*shape_q, generator=gen, dtype=torch.float64)
        k = torch.randn(*shape_k, generator=gen, dtype=torch.float64)
        v = torch.randn(*shape_k[:-1], d_v, generator=gen, dtype=torch.float64)
        n_q, n_k = shape_q[-2], shape_k[-2]
        yield q, k, v, None, "no mask"
        pad = torch.zeros(*shape_k[:-2], 1, n_k, dtype=torch.bool)  # (..., 1, key)
        pad[..., -2:] = True  # the last two keys are padding, for every query
        yield q, k, v, pad, "a padding mask"
        if n_q == n_k:
            causal = torch.ones(n_q, n_k, dtype=torch.bool).triu(1)
            yield q, k, v, causal, "a causal mask"
            left_pad = torch.zeros(n_k, dtype=torch.bool)
            left_pad[:2] = True  # left padding: queries 0 and 1 may look at nothing
            yield q, k, v, causal | left_pad, "left padding under a causal mask"


def _unmasked_bugs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list:
    """(output, hint) for the usual mistakes of attention without a mask.

    Shapes: q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> each (..., n_q, d_v).
    """
    scale = q.shape[-1] ** 0.5
    scores = q @ k.transpose(-2, -1)  # (..., n_q, n_k)
    found = [
        (
            (scores / scale).softmax(-2) @ v,
            "the softmax runs over the queries (dim=-2), or over k q^T transposed back: each "
            "query's weights over the keys must sum to 1, so take it over the last axis of "
            "q k^T, the keys (dim=-1)",
        ),
        (
            scores.softmax(-1) @ v,
            "the scores are not scaled: divide q k^T by sqrt(d_k) before the softmax",
        ),
        (
            (scores / q.shape[-1]).softmax(-1) @ v,
            "divide the scores by sqrt(d_k), not by d_k",
        ),
    ]
    if q.shape[-2] == k.shape[-2]:
        found.append(
            (
                (k @ q.transpose(-2, -1) / scale).softmax(-1) @ v,
                "the queries and the keys are swapped: row i of the scores is query i against "
                "every key, q k^T, not k q^T (with more keys than queries k q^T does not even "
                "fit v)",
            )
        )
    return found


@checker
def check_attention(fn: Callable) -> str:
    """Check ``fn(q, k, v, mask=None)``: scaled dot-product attention.

    ``mask`` is boolean, True where a query may not look, broadcast to (..., n_q, n_k); it
    may be causal, a padding mask, or block every key of some queries (their output row
    must be zero). Any leading batch dimensions.

    Shapes: q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v).
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, *_ATTENTION)
    gen = torch.Generator().manual_seed(1234)
    for q, k, v, mask, what in _attention_cases(gen):
        want = attention_pattern(q, k, mask) @ v
        try:
            got = fn(q, k, v) if mask is None else fn(q, k, v, mask=mask)
        except NotImplementedError:  # a RuntimeError too: the stub, for @checker to name
            raise
        except RuntimeError as exc:  # most often a mask reshaped so that it no longer fits
            if mask is None:
                raise AssertionError(
                    f"with {q.shape[-2]} queries and {k.shape[-2]} keys (q {tuple(q.shape)}, k "
                    f"{tuple(k.shape)}, v {tuple(v.shape)}) your function raised RuntimeError: "
                    f"{exc}. The scores are q @ k.transpose(-2, -1), one row per query and one "
                    "column per key; k @ q^T (queries and keys swapped) has the shape of its "
                    "transpose and no longer fits v"
                ) from exc
            raise AssertionError(
                f"with {what} of shape {tuple(mask.shape)} and scores of shape "
                f"{(*q.shape[:-1], k.shape[-2])} your function raised RuntimeError: {exc}. The "
                "mask comes ready to broadcast against the scores, so use it as it is: a padding "
                "mask marks keys and arrives as (..., 1, key), like (batch, 1, 1, key) with "
                "heads, the same for every query; do not move it onto the query axis"
            ) from exc
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"return a tensor, got {type(got).__name__}")
        if got.shape != want.shape:
            raise AssertionError(
                f"with {what}: output shape {tuple(got.shape)}, expected {tuple(want.shape)}"
            )
        err = (got.double() - want).abs().max().item()
        if mask is not None and (torch.isnan(got).any() or err > 1e-6):
            inverted = [(attention_pattern(q, k, ~mask) @ v, (~mask).all(dim=-1))]
            hint = _mask_hint(got, inverted, bool(mask.all(dim=-1).any()))
            if hint:
                nan = "your output has nan; " if hint != _POLARITY else ""
                raise AssertionError(f"with {what}: {nan}{hint}")
        if err > 1e-6:
            if mask is None:
                hint = next(
                    (h for out, h in _unmasked_bugs(q, k, v) if torch.allclose(got.double(), out)),
                    "the output differs from softmax(q k^T / sqrt(d_k)) v",
                )
            elif mask.all(dim=-1).any():
                hint = _EMPTY_ROW
            else:
                hint = "masked keys must get exactly zero weight (fill their scores with -inf)"
            raise AssertionError(f"with {what}: max difference {err:.2e}; {hint}")
    return ok("your attention matches the reference, with causal, padding and empty masks.")


def _missing_terms(want: int, got: object, parts: dict[str, int], what: str) -> str:
    """Name what an answer left out, counted twice or halved: the smallest set of ``parts``
    whose total is the gap between ``got`` and ``want``, else the list of every part."""
    every = ", ".join(parts)
    tail = " (2 FLOPs per multiply-add.)" if what == "FLOPs" else ""
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return f"Return a number: the {what} of {every}."
    if what == "FLOPs" and got * 2 == want:
        return (
            "That is half: you counted one FLOP per multiply-add, where PyTorch's counter "
            "(and the convention) counts 2, a multiply and an add."
        )
    for size in range(1, len(parts) + 1):
        for gap, verb in ((want - got, "left out"), (got - want, "counted twice")):
            found = [
                " and ".join(subset)
                for subset in itertools.combinations(parts, size)
                if sum(parts[n] for n in subset) == gap
            ]
            if found:  # several when parts of the same size could be the ones
                return f"You {verb} {' or '.join(found)} ({gap} {what}).{tail}"
    return f"Count {every}.{tail}"


@checker
def check_mha_parameter_count(fn: Callable) -> str:
    """Check ``fn(d_model, n_heads, d_key, d_value) -> int``: parameters of one MHA layer,
    biases included (as ``MultiHeadAttention`` with ``bias=True``).

    Shapes: none.
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, *_ATTENTION, count_parameters, cost)
    for d_model, h, d_k, d_v in (
        (96, 3, 7, 11),
        (64, 4, 16, 16),
        (128, 8, 32, 8),
        (512, 8, 64, 64),
    ):
        want = count_parameters(MultiHeadAttention(d_model, h, d_k, d_v))
        got = fn(d_model, h, d_k, d_v)
        if got != want:
            parts = {
                "W_Q": h * d_model * d_k,
                "W_K": h * d_model * d_k,
                "W_V": h * d_model * d_v,
                "W_O": h * d_v * d_model,
                "b_Q": h * d_k,
                "b_K": h * d_k,
                "b_V": h * d_v,
                "b_O": d_model,
            }
            raise AssertionError(
                f"for d_model={d_model}, n_heads={h}, d_key={d_k}, d_value={d_v} you gave "
                f"{got}, expected {want}. {_missing_terms(want, got, parts, 'parameters')}"
            )
    return ok("your formula counts every weight and bias.")


def _measured_flops(d_model: int, h: int, d_k: int, d_v: int, n: int) -> int:
    """Matmul FLOPs of one forward pass, as PyTorch's FLOP counter measures them."""
    layer = MultiHeadAttention(d_model, h, d_k, d_v)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        run_with_cache(layer, torch.zeros(1, n, d_model))  # the explicit path: plain matmuls
    return counter.get_total_flops()


@checker
def check_mha_flops(fn: Callable) -> str:
    """Check ``fn(d_model, n_heads, d_key, d_value, n) -> int``: matmul FLOPs of one
    self-attention forward pass over ``n`` tokens, counting 2 FLOPs per multiply-add. The
    reference is PyTorch's own FLOP counter run on ``MultiHeadAttention``.

    Shapes: none.
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, *_ATTENTION, cost)
    cases = ((96, 3, 7, 11, 33), (64, 4, 16, 16, 10), (128, 8, 32, 8, 50), (256, 8, 32, 32, 128))
    for d_model, h, d_k, d_v, n in cases:
        want = _measured_flops(d_model, h, d_k, d_v, n)
        got = fn(d_model, h, d_k, d_v, n)
        if got != want:
            parts = {
                "the query projection": 2 * n * d_model * h * d_k,
                "the key projection": 2 * n * d_model * h * d_k,
                "the value projection": 2 * n * d_model * h * d_v,
                "Q K^T": 2 * h * n * n * d_k,
                "the weighted sum of values (pattern @ V)": 2 * h * n * n * d_v,
                "W_O": 2 * n * h * d_v * d_model,
            }
            raise AssertionError(
                f"for d_model={d_model}, n_heads={h}, d_key={d_k}, d_value={d_v}, n={n} you "
                f"gave {got}, PyTorch's counter measures {want}. "
                f"{_missing_terms(want, got, parts, 'FLOPs')}"
            )
    return ok("your FLOP count matches, and grows like n^2 only through Q K^T and P V.")


_MODULE_SHAPES = {
    "W_Q": "(n_heads, d_model, d_head)",
    "W_K": "(n_heads, d_model, d_head)",
    "W_V": "(n_heads, d_model, d_head)",
    "W_O": "(n_heads, d_head, d_model)",
    "b_Q": "(n_heads, d_head)",
    "b_K": "(n_heads, d_head)",
    "b_V": "(n_heads, d_head)",
    "b_O": "(d_model,)",
}


def _under_mask(ref: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The course's layer with the reader's weights under any ``mask`` (True = blocked),
    for telling a wrong mask apart. Shapes: x (batch, seq, d_model), mask broadcastable to
    (batch, heads, seq, seq) -> (batch, seq, d_model)."""
    q, k, v = ref.project_qkv(x, x, x)  # (batch, heads, seq, d_head)
    return ref.write(attention_pattern(q, k, mask) @ v)


def _inverted_masks(pad: torch.Tensor | None, causal: bool, n: int) -> list[torch.Tensor]:
    """The masks of the usual polarity mistakes: everything inverted, only the padding, or
    only the causal part (tril used as the blocked keys). Shapes: -> (batch or 1, 1, n, n)."""
    full = blocked(pad, causal, n, n, "cpu")
    found = [~full]
    if pad is not None and causal:
        found.append(blocked(~pad, True, n, n, "cpu"))
        found.append(blocked(pad, False, n, n, "cpu") | ~blocked(None, True, n, n, "cpu"))
    found = [m if m.ndim == 4 else m[None, None] for m in found]  # (batch or 1, 1, q, k)
    return [m.expand(m.shape[0], 1, n, n) for m in found]


def _copy_into_reference(mine: torch.nn.Module, d_model: int, h: int) -> MultiHeadAttention:
    """The course's module with the reader's weights, checking their names and shapes."""
    ref = MultiHeadAttention(d_model, h).double()
    for name, layout in _MODULE_SHAPES.items():
        p = getattr(mine, name, None)
        if not isinstance(p, torch.Tensor):
            raise AssertionError(f"your module needs a parameter {name} of shape {layout}")
        want = getattr(ref, name).shape
        if p.shape != want:
            raise AssertionError(
                f"{name} has shape {tuple(p.shape)}, expected {layout} = {tuple(want)}"
            )
        with torch.no_grad():
            p.normal_(generator=torch.Generator().manual_seed(len(name) * 7 + h))
            getattr(ref, name).copy_(p)
    return ref


@checker
def check_mha_module(cls: Callable) -> str:
    """Check a batched multi-head attention module against ``torch.nn.MultiheadAttention``.

    ``cls(d_model, n_heads)`` builds a module with parameters ``W_Q, W_K, W_V``
    (n_heads, d_model, d_head), ``W_O`` (n_heads, d_head, d_model), ``b_Q, b_K, b_V``
    (n_heads, d_head) and ``b_O`` (d_model,), ``d_head = d_model // n_heads``;
    ``module(x, key_padding_mask=None, causal=False)`` is self-attention with the course's
    polarity (True = blocked). The checker sets random weights, copies them into PyTorch's
    layer (one stacked ``in_proj_weight`` applied as ``x @ W.T``) and compares the outputs
    with no mask, a causal mask, padding, and queries whose every key is blocked.

    Shapes: x (batch, seq, d_model), key_padding_mask (batch, seq) -> (batch, seq, d_model).
    """
    require_callable("cls", cls)
    build = refuse_reference(cls, *_ATTENTION)
    gen = torch.Generator().manual_seed(2024)
    for d_model, h, batch, n in ((8, 2, 3, 5), (12, 3, 2, 7), (16, 4, 4, 6)):
        mine = build(d_model, h)
        if not isinstance(mine, torch.nn.Module):
            raise AssertionError(f"cls(d_model, n_heads) must build an nn.Module, got {mine!r}")
        mine = mine.double()
        run = refuse_reference(mine, *_ATTENTION)
        ref = _copy_into_reference(mine, d_model, h)
        torch_layer = to_torch_multihead(ref)
        x = torch.randn(batch, n, d_model, generator=gen, dtype=torch.float64)
        pad = torch.zeros(batch, n, dtype=torch.bool)
        pad[0, -2:] = True  # right padding on example 0
        pad[1, :2] = True  # left padding on example 1: under causal, queries 0, 1 see nothing
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        for padding, causal, what in (
            (None, False, "no mask"),
            (None, True, "causal=True"),
            (pad, False, "a key_padding_mask"),
            (pad, True, "a key_padding_mask and causal=True"),
        ):
            kwargs = {"key_padding_mask": padding, "causal": causal}
            got = run(x, **{k: v for k, v in kwargs.items() if v is not None})
            want, _ = torch_layer(
                x,
                x,
                x,
                key_padding_mask=padding,
                attn_mask=future if causal else None,
                need_weights=False,
            )
            if not isinstance(got, torch.Tensor) or got.shape != want.shape:
                shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                raise AssertionError(
                    f"with {what}: expected shape {tuple(want.shape)}, got {shape}"
                )
            err = (got - want).abs().max().item()
            if (padding is not None or causal) and (torch.isnan(got).any() or err > 1e-8):
                inverted = [
                    (_under_mask(ref, x, m), m.all(dim=-1)[:, 0])  # (batch, seq, d), (batch, seq)
                    for m in _inverted_masks(padding, causal, n)
                ]
                empty = blocked(padding, causal, n, n, "cpu").all(dim=-1).any()
                hint = _mask_hint(got, inverted, bool(empty))
                if hint:
                    nan = "your output has nan; " if hint != _POLARITY else ""
                    raise AssertionError(f"with {what}: {nan}{hint}")
            if torch.isnan(got).any():
                raise AssertionError(f"with {what}: your output has nan; {_EMPTY_ROW}")
            if err > 1e-8:
                hint = {
                    "no mask": "split heads with view(batch, seq, heads, d_head).transpose(1, 2), "
                    "scale by sqrt(d_head), and sum the heads' z_h W_O[h] (plus b_O once)",
                    "causal=True": "block keys j > i (True above the diagonal: triu(1))",
                    "a key_padding_mask": "True marks padding *keys*: broadcast it as "
                    "(batch, 1, 1, key), not over the queries",
                }.get(what, _EMPTY_ROW)
                raise AssertionError(f"with {what}: max difference {err:.2e}; {hint}")
    return ok("your module matches torch.nn.MultiheadAttention, masks included.")
