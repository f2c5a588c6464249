"""Checkers for the exercises of chapter 3: the low-rank bottleneck."""

from __future__ import annotations

from collections.abc import Callable

import torch

from multihead.analysis import cost, lowrank
from multihead.analysis.cost import attention_cost
from multihead.analysis.lowrank import column_softmax, min_key_size
from multihead.core import attention
from multihead.core.model import count_parameters
from multihead.exercises._common import checker, ok, refuse_reference, require_callable


def _row_logits(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor) -> torch.Tensor:
    """Row convention: tokens are rows of X (n, d); the head's scaled logits (query, key)."""
    d_k = W_Q.shape[-1]
    return (X @ W_Q) @ (X @ W_K).T / d_k**0.5


def _realize_hint(S: torch.Tensor, P: torch.Tensor, d_k: int) -> str:
    """Name the mistake behind logits ``S`` that miss the target ``P``: a missing or doubled
    sqrt(d_k), queries and keys swapped, or both; else recite the construction.

    Shapes: S (query, key), P (query, key) -> hint.
    """

    def gives(logits: torch.Tensor) -> bool:
        return (logits.softmax(dim=-1) - P).abs().max().item() <= 1e-8

    root = d_k**0.5
    swap = (
        "queries index the rows of P and keys its columns, so (X W_Q)(X W_K)^T must be the "
        "target logits themselves, not their transpose: swap W_Q and W_K"
    )
    scale = (
        "the head divides (X W_Q)(X W_K)^T by sqrt(d_k), so the target logits must be "
        "sqrt(d_k) log(D0 P), not log P"
    )
    if gives(S * root):
        missing = "your logits are log P / sqrt(d_k), up to a constant per row"
        return f"the sqrt(d_k) is missing: {missing}; {scale}"
    if gives(S.T):
        return f"queries and keys are swapped: {swap}"
    if gives(S.T * root):
        return f"two mistakes: the sqrt(d_k) is missing ({scale}), and {swap}"
    if gives(S / root):
        return "sqrt(d_k) is applied twice: the target logits are sqrt(d_k) log(D0 P), once"
    return (
        "use the right inverse X^T (X X^T)^{-1} of the row matrix X and target "
        "logits sqrt(d_k) log(D0 P) (queries index the rows, keys the columns; "
        "the sqrt(d_k) must cancel)"
    )


@checker
def check_realize_rows(fn: Callable) -> str:
    """Check ``fn(X, P) -> (W_Q, W_K)``: the expressivity theorem in the row convention.

    ``X`` holds the tokens as rows, ``P`` is positive and row-stochastic (query, key); the
    answer must satisfy ``softmax((X W_Q)(X W_K)^T / sqrt(d_k), dim=-1) == P``.

    Shapes: X (n, d) with d >= n, P (n, n) -> W_Q (d, d_k), W_K (d, d_k), d_k >= n.
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, lowrank)  # realize() is the same construction, in columns
    gen = torch.Generator().manual_seed(31)
    for n, d in ((3, 3), (5, 8), (8, 8), (6, 20)):
        X = torch.randn(n, d, generator=gen, dtype=torch.float64)
        P = (2 * torch.randn(n, n, generator=gen, dtype=torch.float64)).softmax(dim=-1)
        got = fn(X.clone(), P.clone())
        if not isinstance(got, tuple) or len(got) != 2:
            raise AssertionError("return a tuple (W_Q, W_K)")
        W_Q, W_K = got
        if not all(isinstance(W, torch.Tensor) for W in got):
            raise AssertionError("W_Q and W_K must be tensors")
        if W_Q.shape != W_K.shape or W_Q.ndim != 2 or W_Q.shape[0] != d:
            raise AssertionError(
                f"W_Q and W_K must both be (d, d_k) = ({d}, d_k); got {tuple(W_Q.shape)} "
                f"and {tuple(W_K.shape)}. In the row convention the weights act on the right"
            )
        if W_Q.shape[1] < n:
            raise AssertionError(
                f"d_k={W_Q.shape[1]} < n={n}: the expressivity theorem needs d_k >= n"
            )
        S = _row_logits(X, W_Q.double(), W_K.double())
        err = (S.softmax(dim=-1) - P).abs().max().item()
        if err > 1e-8:
            hint = _realize_hint(S, P, W_Q.shape[1])
            raise AssertionError(f"for n={n}, d={d} the pattern is off by {err:.2e}; {hint}")
    return ok("your weights reproduce every row-stochastic target exactly.")


@checker
def check_min_key_size(fn: Callable) -> str:
    """Check ``fn(P) -> int``: the smallest key size of one head producing ``P``.

    ``P`` is positive and column-stochastic (column convention, ``P[key, query]``).

    Shapes: P (n, n) -> int.
    """
    require_callable("fn", fn)
    fn = refuse_reference(fn, lowrank)
    gen = torch.Generator().manual_seed(32)
    for n, r in ((5, 0), (5, 1), (6, 3), (8, 7), (9, 4)):
        L = torch.randn(n, r, generator=gen, dtype=torch.float64) @ torch.randn(
            r, n, generator=gen, dtype=torch.float64
        )
        shift = 3 * torch.randn(1, n, generator=gen, dtype=torch.float64)  # per-column
        P = column_softmax(L + shift)
        want = min_key_size(P)
        got = fn(P.clone())
        if isinstance(got, torch.Tensor):
            got = got.item()
        if got != want:
            logs = P.log()
            raw = lowrank.numerical_rank(logs)  # nothing centred
            rows = lowrank.numerical_rank(logs - logs.mean(dim=1, keepdim=True))
            if got == raw == rows:  # on these inputs centring the rows never gives another rank
                hint = (
                    "your rank still counts the per-column constant that softmax forgets: "
                    "subtract each column's mean (dim=0); centring the rows removes another one"
                )
            elif got == raw:
                hint = (
                    "rank(log P) counts the per-column constant that softmax forgets; "
                    "subtract each column's mean first"
                )
            else:
                hint = "compute the rank of log P after centring its columns"
            raise AssertionError(f"for a {n} x {n} P you gave {got}, expected {want}; {hint}")
    return ok("you found the exact rank criterion of the chapter.")


@checker
def check_bert_large_extra_params(answer: object) -> str:
    """Check the number of extra parameters of BERT-large with ``d_key = 128``.

    BERT-large: 24 layers, ``d_model = 1024``, 16 heads of size 64; only the query and key
    projections (weights and biases) grow, values keep 64 per head.

    ``answer`` is the number, or a function of no arguments returning it.

    Shapes: none.
    """
    if callable(answer):
        answer = refuse_reference(answer, cost, attention, count_parameters)()
    per_layer = (
        attention_cost(1024, 16, 128, 64, seq_len=1)["params"]
        - attention_cost(1024, 16, 64, 64, seq_len=1)["params"]
    )
    want = 24 * per_layer
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise AssertionError(f"give a number, got {type(answer).__name__}")
    if answer == want:
        return ok(f"{want:,} extra parameters, about 15% of BERT-large's 340M.")
    if answer == per_layer:
        hint = "that is one layer; BERT-large has 24"
    elif answer == 24 * 2 * 1024 * 1024:
        hint = "you counted the weights; add the biases of W_Q and W_K"
    elif answer == want // 2 or answer == 24 * 1024 * 1024:
        hint = "both W_Q and W_K grow (they must share d_key)"
    else:
        hint = "per layer, W_Q and W_K go from 1024 x 1024 to 1024 x (16 * 128), plus biases"
    raise AssertionError(f"{answer:,} is not right; {hint}")
