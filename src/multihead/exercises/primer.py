"""Checkers for the exercises of the primer chapter: the Transformer block."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from multihead.core import positions
from multihead.core.attention import attention_pattern, blocked
from multihead.core.config import ModelConfig
from multihead.core.model import Layer
from multihead.core.positions import sinusoidal_positions
from multihead.exercises._common import expect, ok, refuse_reference, require_callable

_SINUSOIDAL = "column 2i of row t is sin(t / 10000 ** (2i / d_model)), column 2i + 1 its cos"
_CAUSAL = "an (n, n) bool tensor, True where key j lies in the future of query i (j > i)"
_PRENORM = "x + f(LN(x)) for the attention, then the same for the MLP, each with its own norm"


def _answer(fn: Callable, args: tuple, task: str) -> object:
    """``fn(*args)``, with a stub that still raises ``NotImplementedError`` reported as a
    failed check (an ``AssertionError`` saying what to write) rather than as a crash."""
    try:
        return fn(*args)
    except NotImplementedError as err:
        raise AssertionError(
            "your function still raises NotImplementedError: fill in the function body first "
            f"(replace the raise line with your code): {task}"
        ) from err


def _tensor(got: object, shape: tuple[int, ...], what: str) -> Tensor:
    expect(isinstance(got, Tensor), f"return a torch.Tensor ({what}), got {type(got).__name__}")
    expect(tuple(got.shape) == shape, f"{what} has shape {tuple(got.shape)}, expected {shape}")
    return got


def check_sinusoidal(fn: Callable) -> str:
    """Check ``fn(n, d_model)``: the sinusoidal encodings of positions ``0 .. n - 1``, with
    ``PE[t, 2i] = sin(t / 10000 ** (2i / d_model))`` and ``PE[t, 2i + 1] = cos(...)``.

    Shapes: -> (n, d_model).
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, positions)
    for n, d in ((10, 8), (50, 16), (7, 2), (33, 64)):
        answer = _answer(fn, (n, d), _SINUSOIDAL)
        got = _tensor(answer, (n, d), f"the encodings for n={n}, d_model={d}")
        got = got.detach().double()
        want = sinusoidal_positions(n, d, dtype=torch.float64)
        if (got - want).abs().max().item() <= 1e-5:
            continue
        row0 = torch.tensor([0.0, 1.0] * (d // 2), dtype=torch.float64)
        if (got[0] - row0).abs().max() > 1e-5:
            hint = (
                "row 0 (position 0) must be (0, 1, 0, 1, ...): positions count from 0, even "
                "columns hold sin and odd columns cos, interleaved pair by pair"
            )
        elif (got[:, 0] - want[:, 0]).abs().max() > 1e-5:
            hint = "column 0 must be sin(t): the first pair has frequency 1"
        else:
            hint = (
                "the first pair is right but a later one is not: pair i uses the frequency "
                "1 / 10000 ** (2i / d_model), where 2i is the even column's index"
            )
        raise AssertionError(f"wrong encodings for n={n}, d_model={d}; {hint}")
    return ok("your encodings match: sin in the even columns, cos in the odd ones.")


def check_causal_mask(fn: Callable) -> str:
    """Check ``fn(n)``: the causal mask of ``n`` queries and ``n`` keys in the package's
    polarity, **True = blocked**: query ``i`` may look at keys ``j <= i`` only.

    Shapes: -> (n, n) bool.
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, blocked)
    gen = torch.Generator().manual_seed(5)
    for n in (4, 9, 1):  # n = 1 last: its one entry cannot tell the mistakes apart
        got = _tensor(_answer(fn, (n,), _CAUSAL), (n, n), f"the mask for n={n}")
        expect(
            got.dtype == torch.bool,
            f"return a bool tensor (True = blocked), got dtype {got.dtype}: masked_fill and the "
            "package's masks take booleans",
        )
        want = blocked(None, True, n, n, "cpu")  # (n, n), True above the diagonal
        if torch.equal(got, want):
            continue
        if torch.equal(got, ~want):
            hint = (
                "the polarity is reversed: in this package True means *blocked*; you "
                "returned the keys a query may see"
            )
        elif torch.equal(got, want.T):
            hint = "row i is query i, and it may not see the keys j > i (above the diagonal)"
        elif torch.equal(got, want | torch.eye(n, dtype=torch.bool)):
            hint = "a query may look at itself: the diagonal must be False (use triu(1))"
        else:
            hint = "True exactly above the diagonal: entry (i, j) is True when j > i"
        raise AssertionError(f"wrong mask for n={n}; {hint}")
    q = torch.randn(2, 6, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 6, 4, generator=gen, dtype=torch.float64)
    pattern = attention_pattern(q, k, _answer(fn, (6,), _CAUSAL))  # (2, 6, 6)
    expect(bool(pattern.triu(1).eq(0).all()), "future keys must get exactly zero weight")
    return ok("your mask blocks exactly the future keys, in the package's polarity.")


def _random_layer(seed: int, d_model: int = 16) -> Layer:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=4, d_model=d_model, n_heads=4, d_ff=2 * d_model, norm="pre")
    layer = Layer(cfg).double().eval()
    with torch.no_grad():  # distinct norms, so that using the wrong one is caught
        for norm in layer.norms:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0, 0.3)
    return layer


def check_prenorm_block(fn: Callable) -> str:
    """Check ``fn(layer, x)``: the forward pass of a pre-norm ``multihead.core.model.Layer``
    (self-attention, then MLP; no cross-attention, no mask) written from its parts
    ``layer.attn``, ``layer.mlp``, ``layer.norms[0]`` (attention) and ``layer.norms[1]`` (MLP).

    Shapes: x (batch, seq, d_model) -> (batch, seq, d_model).
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, Layer.forward)  # its parts are allowed, the whole layer is not
    for seed, (batch, n) in enumerate(((2, 5), (3, 1), (1, 8))):
        layer = _random_layer(seed)
        x = torch.randn(batch, n, 16, dtype=torch.float64)
        with torch.no_grad():
            want = layer(x)
            answer = _answer(fn, (layer, x), _PRENORM)
            got = _tensor(answer, tuple(want.shape), "the layer's output")
        got = got.detach().double()
        if (got - want).abs().max().item() <= 1e-8:
            continue
        attn, mlp, (ln_a, ln_m) = layer.attn, layer.mlp, layer.norms
        with torch.no_grad():
            h = ln_a(x + attn(x))
            post = ln_m(h + mlp(h))
            no_residual = mlp(ln_m(attn(ln_a(x))))
        if (got - post).abs().max() <= 1e-8:
            hint = (
                "that is post-norm, LN(x + f(x)); pre-norm normalises each sublayer's input "
                "and adds its output to the unnormalised stream: x + f(LN(x))"
            )
        elif (got - no_residual).abs().max() <= 1e-8:
            hint = "add each sublayer's output to its input: the residual stream"
        else:
            hint = (
                "two residual steps: h = x + attn(norms[0](x)), then h + mlp(norms[1](h)); "
                "norms[0] belongs to attention and norms[1] to the MLP"
            )
        raise AssertionError(f"your block differs from the layer's forward; {hint}")
    return ok("your pre-norm block matches the course's Layer.")
