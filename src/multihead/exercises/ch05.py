"""Checkers for the exercises of chapter 5: head roles."""

from __future__ import annotations

from collections.abc import Callable

import torch

from multihead.analysis.metrics import head_confidence
from multihead.analysis.roles import confidence, syntactic
from multihead.exercises._common import (
    checker,
    expect,
    ok,
    random_patterns,
    refuse_reference,
    require_callable,
)


@checker
def check_head_confidence(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """Check ``fn(pattern, query_mask) -> (heads,)``: the mean over the selected queries of
    each head's largest attention weight (Voita et al.'s confidence)."""
    require_callable("fn", fn)
    fn = refuse_reference(fn, head_confidence, confidence)
    for seed in range(3):
        p = random_patterns(seed)
        mask = torch.ones(p.shape[0], p.shape[2], dtype=torch.bool)
        mask[:, -1] = False  # leave out the end token
        mask[0, :3] = False  # and a few more queries, unevenly across the batch
        got = fn(p, mask)
        expect(isinstance(got, torch.Tensor), f"return a torch.Tensor, got {type(got).__name__}")
        expect(
            got.shape == (p.shape[1],),
            f"return one number per head, shape ({p.shape[1]},); got {tuple(got.shape)}",
        )
        want = head_confidence(p, mask)
        if not torch.allclose(got, head_confidence(p, mask), atol=1e-5):
            if torch.allclose(got, p.amax(-1).mean(dim=(0, 2)), atol=1e-5):
                raise AssertionError("you averaged over every query: use query_mask")
            raise AssertionError(
                f"expected {want.tolist()}, got {got.tolist()}; take the max over keys (last "
                "dimension), then average over the masked (batch, query) positions together"
            )
    return ok("your head confidence matches multihead.analysis.metrics.head_confidence.")


def _reference_share(pattern: torch.Tensor, offset: int) -> torch.Tensor:
    n = pattern.shape[-1]
    top = pattern.argmax(-1)  # (batch, heads, query)
    idx = torch.arange(n)
    valid = (idx + offset >= 0) & (idx + offset < n)  # (query,)
    hit = (top == (idx + offset)) & valid
    return hit.float().sum(dim=(0, 2)) / (valid.sum() * pattern.shape[0])


@checker
def check_positional_share(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check ``fn(pattern, offset) -> (heads,)``: for each head, the share of queries i
    (among those where key i + offset exists) whose largest weight is on key i + offset."""
    require_callable("fn", fn)
    n = 6
    idx = torch.arange(n)
    prev = torch.nn.functional.one_hot((idx - 1).clamp(0), n).float()  # previous token
    nxt = torch.nn.functional.one_hot((idx + 1).clamp(max=n - 1), n).float()
    uniform = torch.full((n, n), 1.0 / n)
    cases = [(torch.stack([prev, nxt])[None], o) for o in (-1, 1, 0, 2)]
    cases += [(random_patterns(s), o) for s, o in ((0, -1), (1, 1), (2, 3))]
    for pattern, offset in cases:
        got = fn(pattern, offset)
        expect(
            isinstance(got, torch.Tensor) and got.shape == (pattern.shape[1],),
            f"return a tensor with one share per head, shape ({pattern.shape[1]},)",
        )
        want = _reference_share(pattern, offset)
        if not torch.allclose(got.float(), want, atol=1e-5):
            hint = "count only queries i for which 0 <= i + offset < n, in the denominator too"
            raise AssertionError(
                f"offset {offset}: expected {want.tolist()}, got {got.tolist()}; {hint}"
            )
    expect(
        fn(uniform[None, None], -1).shape == (1,),
        "the function gives a wrong value on a simple input",
    )
    return ok("a perfect previous-token head has share 1 at offset -1.")


@checker
def check_subject_head(
    answer: tuple[int, int] | Callable[[torch.Tensor, object], tuple[int, int]],
    pattern: torch.Tensor,
    gold: object,
) -> str:
    """Check that ``answer = (layer, head)`` is the encoder head whose largest weight most
    often lands on the subject when the query is the verb (nsubj, head->dep). ``answer`` may
    also be a function ``answer(pattern, gold) -> (layer, head)``, which may use the package's
    analysis: applying ``multihead.analysis.roles.syntactic`` is the exercise."""
    if callable(answer):
        answer = answer(pattern, gold)
    acc = syntactic(pattern, gold, "nsubj", "head->dep")["accuracy"]  # (layers, heads)
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise AssertionError("answer must be a (layer, head) tuple of two ints")
    layer, head = answer
    if not (0 <= layer < acc.shape[0] and 0 <= head < acc.shape[1]):
        raise AssertionError(f"(layer, head) must lie within {tuple(acc.shape)}")
    best = acc.max().item()
    if acc[layer, head].item() < best - 1e-6:
        raise AssertionError(
            f"head {answer} finds the subject {acc[layer, head]:.0%} of the time, but another "
            f"head reaches {best:.0%}: use the verb as the query and the subject as the target"
        )
    return ok(f"layer {layer}, head {head} points from the verb to its subject {best:.0%}.")
