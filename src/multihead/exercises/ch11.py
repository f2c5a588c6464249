"""Checkers for the exercises of chapter 11: rotary positions, induction scores, patching and
the induction circuit built by hand."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from multihead.analysis import circuits
from multihead.core import rotary
from multihead.core.decoder import Decoder
from multihead.core.hooks import run_with_cache, run_with_hooks
from multihead.exercises._common import checker, expect, ok, refuse_reference, require_callable
from multihead.interventions import patching


@checker
def check_rope(fn: Callable[..., torch.Tensor]) -> str:
    """Check ``fn(x, position, base=10000.0)``: ``x`` (..., d_h) rotated to ``position``, plane
    ``j`` (coordinates 2j, 2j+1) by the angle ``position * base ** (-2j / d_h)``."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, rotary)
    gen = torch.Generator().manual_seed(11)
    d = 8
    x = torch.randn(3, d, dtype=torch.float64, generator=gen)
    for position in (0, 1, 5, 37):
        got = fn(x.clone(), position)
        expect(isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}")
        expect(got.shape == x.shape, f"return the shape of x, {tuple(x.shape)}")
        want = x @ rotary.rotary_matrix(position, d, dtype=torch.float64).T
        if torch.allclose(got, want, atol=1e-9):
            continue
        if torch.allclose(got, x @ rotary.rotary_matrix(-position, d, dtype=torch.float64).T):
            raise AssertionError(
                "you rotate the wrong way: the first coordinate of a plane becomes "
                "a cos - b sin, the second a sin + b cos"
            )
        if position and torch.allclose(got.norm(dim=-1), x.norm(dim=-1)):
            raise AssertionError(
                "the norm is kept, so it is a rotation, but not plane by plane as in 11.1: pair "
                "coordinates (2j, 2j+1) (x[..., 0::2] with x[..., 1::2]), and give plane j the "
                "frequency base ** (-2j / d_h)"
            )
        raise AssertionError(
            f"at position {position} the rotated vector differs: the angle of plane j is "
            "position * base ** (-2j / d_h)"
        )
    q, k = x[0], x[1]
    scores = [float(fn(q, t) @ fn(k, t + 3)) for t in (0, 4, 11)]
    expect(max(scores) - min(scores) < 1e-9, "scores at the same offset must be equal")
    return ok("your rotation matches 11.1, and the score depends on the offset only.")


@checker
def check_prefix_matching(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check ``fn(pattern, L)``: on a segment of length ``L`` and its repeat, the mean weight the
    second copy's queries put on the key just after the earlier copy of their token."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, circuits)
    gen = torch.Generator().manual_seed(12)
    for L in (4, 7):
        n = 2 * L
        pattern = (
            (2 * torch.randn(n, n, dtype=torch.float64, generator=gen))
            .masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            .softmax(-1)
        )
        got = float(fn(pattern, L))
        want = float(circuits.induction_score(pattern, L))
        if abs(got - want) < 1e-9:
            continue
        q = torch.arange(L, n)
        if abs(got - float(pattern[q, q - L].mean())) < 1e-9:
            raise AssertionError(
                "that is the weight on the earlier copy of the token itself (i - L); the "
                "induction head looks at the token after it, i - L + 1"
            )
        if abs(got - float(pattern[q[1:], q[1:] - L + 1].mean())) < 1e-9:
            raise AssertionError(
                f"include every query of the second copy, positions {L} to {n - 1}"
            )
        raise AssertionError(f"with L = {L} the score is {want:.4f}, got {got:.4f}")
    return ok("your prefix-matching score matches the induction score of the package.")


def _tiny_model() -> tuple[Decoder, torch.Tensor, torch.Tensor, Callable]:
    torch.manual_seed(13)
    model = Decoder(12, 10, 16, 2, 2, mlp=False, norm=False).double().eval()
    gen = torch.Generator().manual_seed(13)
    clean = torch.randint(12, (6, 10), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 3] = (clean[:, 3] + 5) % 12

    def metric(logits):
        return F.cross_entropy(logits[:, -1], clean[:, 4])

    return model, clean, corrupted, metric


@checker
def check_patch_head(fn: Callable[..., float]) -> str:
    """Check ``fn(model, clean, corrupted, metric, layer, head) -> float``: the fraction of the
    metric recovered when one head's output ``z`` is patched from the clean run."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, patching)
    model, clean, corrupted, metric = _tiny_model()
    want = patching.patch_heads(model, clean, corrupted, metric)  # (layers, heads)
    for layer in range(2):
        for head in range(2):
            got = fn(model, clean, corrupted, metric, layer, head)
            expect(isinstance(got, (float, int, torch.Tensor)), "return a number")
            got = float(got)
            w = float(want[layer, head])
            if abs(got - w) < 1e-6:
                continue
            if abs(got - (1 - w)) < 1e-6:
                raise AssertionError(
                    "you measured what is lost, not what comes back: recovered = "
                    "(m_patched - m_corrupted) / (m_clean - m_corrupted)"
                )
            name = f"layers.{layer}.attn.z"
            _, cache = run_with_cache(model, clean, names_filter=[name])

            def every_head(z, _name, clean_z=cache[name]):
                return clean_z

            m_all = metric(run_with_hooks(model, corrupted, fwd_hooks=[(name, every_head)]))
            m_clean, m_bad = metric(model(clean)), metric(model(corrupted))
            if abs(got - float((m_all - m_bad) / (m_clean - m_bad))) < 1e-6:
                raise AssertionError(
                    "you patched every head of the layer: replace only z[:, head] by its clean "
                    "value and keep the others as the corrupted run computes them"
                )
            raise AssertionError(
                f"layer {layer}, head {head}: expected {w:.4f}, got {got:.4f}; patch the hook "
                f"point layers.{layer}.attn.z"
            )
    return ok("your patch recovers what the package's patch_heads measures, head by head.")


@checker
def check_induction_build(fn: Callable[[int, int], Decoder]) -> str:
    """Check ``fn(vocab_size, seq_len) -> Decoder``: a two-layer attention-only model whose
    prediction at a repeated token is the token after the earlier copy."""
    require_callable("fn", fn)
    vocab, n = 8, 7
    model = fn(vocab, n)
    expect(isinstance(model, Decoder), f"return a Decoder, got {type(model).__name__}")
    expect(len(model.layers) == 2, f"the circuit needs 2 layers, the model has {len(model.layers)}")
    model = model.eval()
    gen = torch.Generator().manual_seed(14)
    wrong = 0
    for _ in range(100):
        seq = torch.randperm(vocab, generator=gen)[: n - 1]
        p = int(torch.randint(1, n - 3, (1,), generator=gen))  # 2 <= p (1-indexed)
        x = torch.cat([seq, seq[p : p + 1]])[None]  # the last token repeats t_p
        with torch.no_grad():
            wrong += int(model(x)[0, -1].argmax() != seq[p + 1])
    if wrong:
        raise AssertionError(
            f"{wrong} of 100 repeats predicted wrongly: check that layer 0's head attends to the "
            "previous position and writes the token there into a block of its own, and that "
            "layer 1's key reads that block"
        )
    return ok("your hand-built circuit predicts the token after the earlier copy every time.")
