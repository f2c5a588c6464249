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


def _check_recovered(recovered: Callable[[float, float, float], float]) -> None:
    """``recovered(m_clean, m_corrupted, m_patched)`` on numbers whose answers are known,
    a fraction above 1 and one below 0 among them."""
    require_callable("recovered", recovered)
    for m_clean, m_bad, m_patched, want in (
        (2.0, 4.0, 3.0, 0.5),  # a loss: lower is better, half of the gap is back
        (1.0, 3.0, 0.5, 1.25),  # better than the clean run: more than all of it
        (5.0, 1.0, 0.0, -0.25),  # worse than the corrupted run: below 0
    ):
        got = recovered(m_clean, m_bad, m_patched)
        expect(isinstance(got, (float, int, torch.Tensor)), "recovered must return a number")
        if abs(float(got) - want) < 1e-9:
            continue
        if abs(float(got) - (1 - want)) < 1e-9:
            raise AssertionError(
                "recovered measures what comes back, not what is lost: "
                "(m_patched - m_corrupted) / (m_clean - m_corrupted)"
            )
        if abs(float(got) - min(max(want, 0.0), 1.0)) < 1e-9:
            raise AssertionError(
                f"recovered({m_clean}, {m_bad}, {m_patched}) is {want}: do not clip it to "
                "[0, 1]; a patch can overshoot the clean run or undershoot the corrupted one"
            )
        raise AssertionError(
            f"recovered({m_clean}, {m_bad}, {m_patched}) is {want}, got {float(got)}: "
            "(m_patched - m_corrupted) / (m_clean - m_corrupted)"
        )


@checker
def check_patch_head(
    fn: Callable[..., float], recovered: Callable[[float, float, float], float] | None = None
) -> str:
    """Check ``fn(model, clean, corrupted, metric, layer, head) -> float``: the fraction of the
    metric recovered when one head's output ``z`` is patched from the clean run; and, if
    given, ``recovered(m_clean, m_corrupted, m_patched) -> float``, that fraction."""
    require_callable("fn", fn)
    if recovered is not None:
        _check_recovered(recovered)
    fn = refuse_reference(fn, patching)
    model, clean, corrupted, metric = _tiny_model()
    want = patching.patch_heads(model, clean, corrupted, metric)  # (layers, heads)
    with torch.no_grad():
        m_clean, m_bad = float(metric(model(clean))), float(metric(model(corrupted)))
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
            if abs(got - w * (m_clean - m_bad)) < 1e-6:
                raise AssertionError(
                    "that is m_patched - m_corrupted, what the patch moved the metric by: divide "
                    "it by m_clean - m_corrupted, the whole gap, to get the fraction recovered"
                )
            if abs(got + w) < 1e-6:
                raise AssertionError(
                    "the sign is flipped: divide by m_clean - m_corrupted, not by "
                    "m_corrupted - m_clean"
                )
            name = f"layers.{layer}.attn.z"
            _, cache = run_with_cache(model, clean, names_filter=[name])

            def every_head(z, _name, clean_z=cache[name]):
                return clean_z

            m_all = metric(run_with_hooks(model, corrupted, fwd_hooks=[(name, every_head)]))
            if abs(got - float((m_all - m_bad) / (m_clean - m_bad))) < 1e-6:
                raise AssertionError(
                    "you patched every head of the layer: replace only z[:, head] by its clean "
                    "value and keep the others as the corrupted run computes them"
                )
            others = [
                (lo, ho)
                for lo in range(2)
                for ho in range(2)
                if (lo, ho) != (layer, head) and abs(got - float(want[lo, ho])) < 1e-6
            ]
            if others:
                lo, ho = others[0]
                raise AssertionError(
                    f"asked for layer {layer}, head {head}, you returned what patching layer {lo}, "
                    f"head {ho} recovers: z is (batch, heads, seq, d_head), so head {head} of "
                    f"layer {layer} is z[:, {head}] at the hook point layers.{layer}.attn.z"
                )
            raise AssertionError(
                f"layer {layer}, head {head}: expected {w:.4f}, got {got:.4f}; patch z[:, head] at "
                f"the hook point layers.{layer}.attn.z, then (m_patched - m_corrupted) / "
                "(m_clean - m_corrupted)"
            )
    return ok(
        "your patch recovers what the package's patch_heads measures, head by head. Some "
        "fractions are far from [0, 1]: a patched run is neither the clean nor the corrupted "
        "one, and nothing bounds its metric by theirs."
    )


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
