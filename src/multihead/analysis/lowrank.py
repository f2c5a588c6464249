"""The low-rank bottleneck of one attention head: constructions, rank tests and fitting.

This module uses the *column* convention of the derivation in chapter 3: the tokens are
the columns of ``X`` ``(d, n)`` and a head produces

    P = softmax_columns((W_k X)^T (W_q X) / sqrt(d_k)),   W_q, W_k of shape (d_k, d),

so ``P[key, query]`` and every column of ``P`` sums to 1. The package's attention modules
use the row convention ``(batch, heads, query, key)``: their pattern is ``P`` transposed.

* ``realize`` builds ``W_q, W_k`` that reproduce any positive column-stochastic ``P`` when
  ``d_k >= n`` (the chapter's expressivity theorem); ``realize_low_rank`` does it with the
  smallest possible key size, ``min_key_size(P)``, the rank of the column-centred ``log P``
  (the chapter's exact criterion).
* ``fit_key_sizes`` fits one head of each of several key sizes to targets, with
  ``multihead.analysis.patternfit.fit_pattern`` (re-exported here), which fits any differentiable
  ``pattern_fn(params) -> P``; ``fit_single_head`` is the one-size case.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from multihead._checks import check_choice, check_number, check_positive_int, check_tensor
from multihead.analysis.patternfit import (
    FitResult,
    check_column_stochastic,
    column_kl,
    fit_pattern,
    total_variation,
)

__all__ = [
    "FitResult",
    "best_fit_example",
    "centered_log",
    "check_column_stochastic",
    "column_kl",
    "column_softmax",
    "fit_key_sizes",
    "fit_pattern",
    "fit_single_head",
    "head_pattern",
    "left_inverse",
    "min_key_size",
    "numerical_rank",
    "random_column_stochastic",
    "realize",
    "realize_low_rank",
    "total_variation",
]


# ---------------------------------------------------------------------- the head
def column_softmax(logits: Tensor) -> Tensor:
    """Softmax over each column (over keys, the second-to-last axis).

    Shapes: logits (..., n_keys, n_queries) -> same, columns sum to 1.
    """
    return check_tensor("logits", logits, min_ndim=2, finite=True).softmax(dim=-2)


def head_pattern(X: Tensor, W_q: Tensor, W_k: Tensor) -> Tensor:
    """The pattern of one head in the column convention.

    Shapes: X (..., d, n), W_q and W_k (..., d_k, d) -> P (..., n, n), P[key, query].
    """
    if W_q.shape != W_k.shape:
        raise ValueError(f"W_q {tuple(W_q.shape)} and W_k {tuple(W_k.shape)} must match")
    if W_q.shape[-1] != X.shape[-2]:
        raise ValueError(f"W_q has {W_q.shape[-1]} columns but X has d={X.shape[-2]} rows")
    d_k = W_q.shape[-2]
    logits = (W_k @ X).transpose(-2, -1) @ (W_q @ X) / math.sqrt(d_k)  # (..., n, n)
    return logits.softmax(dim=-2)


def random_column_stochastic(
    n: int,
    generator: torch.Generator,
    *,
    batch: int | None = None,
    scale: float = 1.0,
    spectrum: str = "gaussian",
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """A random positive column-stochastic matrix: the column softmax of random logits.

    ``spectrum="gaussian"``: i.i.d. N(0, scale^2) logits. ``spectrum="flat"``: logits
    ``scale * sqrt(n) * Q`` with ``Q`` a random orthogonal matrix, so every singular value
    is the same and no low-rank approximation is good (entries still have size ~scale).
    Generic draws of either kind have ``min_key_size == n - 1``.

    Shapes: -> (n, n), or (batch, n, n) if ``batch`` is given.
    """
    check_positive_int("n", n)
    check_choice("spectrum", spectrum, ("gaussian", "flat"))
    shape = (n, n) if batch is None else (check_positive_int("batch", batch), n, n)
    logits = torch.randn(shape, generator=generator, dtype=dtype)
    if spectrum == "flat":
        Q, R = torch.linalg.qr(logits)
        # Fix the signs so that Q is Haar-distributed (QR alone is biased).
        logits = math.sqrt(n) * Q * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1))[..., None, :]
    return (scale * logits).softmax(dim=-2)


# ---------------------------------------------------------------------- expressivity, d_k >= n
def left_inverse(X: Tensor) -> Tensor:
    """``X^+ = (X^T X)^{-1} X^T`` of a full-column-rank ``X``, so ``X^+ X = I_n``.

    Shapes: X (d, n) with d >= n -> (n, d).
    """
    X = check_tensor("X", X, min_ndim=2, finite=True)
    if X.ndim != 2:
        raise ValueError(f"X must be a matrix (d, n), got shape {tuple(X.shape)}")
    d, n = X.shape
    if d < n:
        raise ValueError(
            f"X has d={d} rows and n={n} columns: with d < n it cannot have full column rank, "
            "so the expressivity theorem does not apply (use at least as many features as tokens)"
        )
    rank = int(torch.linalg.matrix_rank(X).item())
    if rank < n:
        raise ValueError(
            f"X must have full column rank n={n}, but its rank is {rank}: "
            "two tokens are linearly dependent (e.g. repeated); perturb or remove them"
        )
    return torch.linalg.solve(X.T @ X, X.T)  # (n, d)


def realize(
    X: Tensor, P: Tensor, d_k: int | None = None, D0: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The expressivity construction: ``W_q, W_k`` with ``head_pattern(X, W_q, W_k) == P``.

    Target logits ``W~ = sqrt(d_k) log(P D0)`` for the positive diagonal ``D0``
    (``D0`` given by its diagonal, default all ones), factored as ``W~_k^T W~_q`` with
    ``W~_k = [I_n; 0]`` and ``W~_q = [W~; 0]`` (``d_k x n`` each), then
    ``W_k = W~_k X^+`` and ``W_q = W~_q X^+``.

    Shapes: X (d, n) full column rank, P (n, n) positive column-stochastic, D0 (n,)
    -> W_q (d_k, d), W_k (d_k, d).
    """
    X = check_tensor("X", X, min_ndim=2, finite=True)
    P = check_tensor("P", P, min_ndim=2, finite=True)
    P = check_column_stochastic("P", P, atol=1e-6 if P.dtype == torch.float64 else 1e-4)
    if P.ndim != 2 or X.ndim != 2:
        raise ValueError("realize takes one X (d, n) and one P (n, n); loop over a batch")
    n = P.shape[0]
    if X.shape[1] != n:
        raise ValueError(f"X has {X.shape[1]} columns (tokens) but P is {n} x {n}")
    d_k = n if d_k is None else check_positive_int("d_k", d_k)
    if d_k < n:
        raise ValueError(
            f"d_k={d_k} < n={n}: the expressivity theorem needs d_k >= n; for smaller "
            "key sizes use realize_low_rank, which works iff d_k >= min_key_size(P)"
        )
    if D0 is None:
        D0 = torch.ones(n, dtype=P.dtype, device=P.device)
    D0 = check_tensor("D0", D0, min_ndim=1, finite=True)
    if D0.shape != (n,) or not (D0 > 0).all():
        raise ValueError(f"D0 must be the positive diagonal of an n x n matrix, shape ({n},)")
    X_plus = left_inverse(X.to(P.dtype))  # (n, d)
    W_tilde = math.sqrt(d_k) * torch.log(P * D0)  # P @ diag(D0) scales column j by D0[j]
    Wk_tilde = torch.zeros(d_k, n, dtype=P.dtype, device=P.device)
    Wk_tilde[:n] = torch.eye(n, dtype=P.dtype, device=P.device)
    Wq_tilde = torch.zeros(d_k, n, dtype=P.dtype, device=P.device)
    Wq_tilde[:n] = W_tilde
    return Wq_tilde @ X_plus, Wk_tilde @ X_plus  # (d_k, d) each


# ---------------------------------------------------------------------- the rank bound
def centered_log(P: Tensor) -> Tensor:
    """``J log P`` with ``J = I - 11^T/n``: ``log P`` minus each column's mean.

    Softmax over columns forgets exactly a per-column constant, so this is the part of
    the logits a pattern determines.

    Shapes: P (..., n, n) -> (..., n, n), columns sum to 0.
    """
    L = torch.log(check_column_stochastic("P", P, atol=1e-4))
    return L - L.mean(dim=-2, keepdim=True)


def numerical_rank(M: Tensor, rtol: float = 1e-8) -> int:
    """Number of singular values above ``rtol`` times the largest.

    Shapes: M (m, n) -> int.
    """
    M = check_tensor("M", M, min_ndim=2, finite=True)
    if M.ndim != 2:
        raise ValueError(f"M must be a matrix, got shape {tuple(M.shape)}")
    s = torch.linalg.svdvals(M)
    if s.numel() == 0 or s[0] == 0:
        return 0
    return int((s > rtol * s[0]).sum().item())


def min_key_size(P: Tensor, rtol: float = 1e-8) -> int:
    """The smallest ``d_k`` for which one head on a full-column-rank ``X`` gives ``P``.

    Equal to ``rank(J log P)`` (the exact criterion); at most ``n - 1``. Returns 0 for the uniform
    pattern, which needs no key at all (logits 0), though a head always has ``d_k >= 1``.

    Shapes: P (n, n) -> int.
    """
    return numerical_rank(centered_log(P), rtol)


def realize_low_rank(X: Tensor, P: Tensor, d_k: int, rtol: float = 1e-8) -> tuple[Tensor, Tensor]:
    """Weights with key size ``d_k`` giving ``P`` exactly, when ``d_k >= min_key_size(P)``.

    Factor ``J log P = U S V^T`` (SVD, rank ``r``): ``W~_k = [U_r^T; 0]`` and
    ``W~_q = sqrt(d_k) [S_r V_r^T; 0]``, then multiply by ``X^+`` on the right.

    Shapes: X (d, n), P (n, n) -> W_q (d_k, d), W_k (d_k, d).
    """
    check_positive_int("d_k", d_k)
    C = centered_log(P)
    if C.ndim != 2 or X.ndim != 2 or X.shape[1] != C.shape[0]:
        raise ValueError(f"need X (d, n) and P (n, n), got {tuple(X.shape)}, {tuple(P.shape)}")
    r = numerical_rank(C, rtol)
    if d_k < r:
        raise ValueError(
            f"d_k={d_k} is too small: P needs d_k >= min_key_size(P) = {r} (the rank bound)"
        )
    n = C.shape[0]
    U, S, Vh = torch.linalg.svd(C)
    Wk_tilde = torch.zeros(d_k, n, dtype=C.dtype)
    Wq_tilde = torch.zeros(d_k, n, dtype=C.dtype)
    Wk_tilde[:r] = U[:, :r].T
    Wq_tilde[:r] = math.sqrt(d_k) * S[:r, None] * Vh[:r]
    X_plus = left_inverse(X.to(C.dtype))  # (n, d)
    return Wq_tilde @ X_plus, Wk_tilde @ X_plus


def fit_key_sizes(
    target: Tensor,
    X: Tensor,
    d_keys: Sequence[int],
    generator: torch.Generator,
    *,
    steps: int = 1000,
) -> FitResult:
    """Best patterns one head reaches on ``X`` for each key size in ``d_keys``, in one fit.

    All key sizes are fitted together: the weights have ``max(d_keys)`` rows and the rows
    beyond each ``d_k`` are masked to zero, with the ``1/sqrt(d_k)`` scale of that size.

    Shapes: target (batch, n, n), X (batch, d, n) -> FitResult with P (len(d_keys),
    batch, n, n), kl and tv (len(d_keys), batch), params [W_q, W_k] masked,
    each (len(d_keys), batch, max(d_keys), d).
    """
    target = check_column_stochastic("target", target, atol=1e-4)
    X = check_tensor("X", X, min_ndim=3, finite=True)
    if target.ndim != 3 or target.shape[0] != X.shape[0] or target.shape[-1] != X.shape[-1]:
        raise ValueError(
            f"need target (batch, n, n) and X (batch, d, n), got "
            f"{tuple(target.shape)} and {tuple(X.shape)}"
        )
    if not d_keys:
        raise ValueError("d_keys must list at least one key size")
    for d_k in d_keys:
        check_positive_int("d_keys entry", d_k)
    batch, d, n = X.shape
    K, D = len(d_keys), max(d_keys)
    sizes = torch.tensor(list(d_keys), dtype=X.dtype)
    mask = (torch.arange(D)[None, :] < sizes[:, None]).to(X.dtype)  # (K, D)
    mask = mask[:, None, :, None]  # (K, 1, D, 1): broadcasts over batch and d
    scale = sizes.rsqrt()[:, None, None, None]  # (K, 1, 1, 1)

    def pattern_fn(p: Sequence[Tensor]) -> Tensor:
        Wq, Wk = p[0] * mask, p[1] * mask  # (K, batch, D, d)
        logits = (Wk @ X).transpose(-2, -1) @ (Wq @ X) * scale  # (K, batch, n, n)
        return logits.softmax(dim=-2)

    init = [
        torch.randn(K, batch, D, d, generator=generator, dtype=X.dtype) / math.sqrt(d)
        for _ in range(2)
    ]
    target = target.expand(K, batch, n, n)
    result = fit_pattern(target, pattern_fn, init, steps=steps)
    result.params = [p * mask for p in result.params]
    return result


def fit_single_head(
    target: Tensor, X: Tensor, d_k: int, generator: torch.Generator, *, steps: int = 1000
) -> FitResult:
    """Best pattern one head of key size ``d_k`` reaches on ``X`` (``fit_key_sizes``).

    Shapes: target (batch, n, n), X (batch, d, n) -> FitResult with P (batch, n, n),
    kl and tv (batch,), params [W_q, W_k] each (batch, d_k, d).
    """
    check_positive_int("d_k", d_k)
    r = fit_key_sizes(target, X, [d_k], generator, steps=steps)
    return FitResult(r.P[0], r.kl[0], r.tv[0], [p[0] for p in r.params], r.steps)


def best_fit_example(
    n: int, d_k: int, *, seed: int = 0, steps: int = 300
) -> tuple[Tensor, Tensor, float]:
    """A random flat-spectrum target and the best one-head pattern of key size ``d_k``.

    Shapes: -> target (n, n), fitted (n, n) (column convention), KL (float).
    """
    check_positive_int("n", n)
    check_positive_int("d_k", d_k)
    g = torch.Generator().manual_seed(seed)
    target = random_column_stochastic(n, g, batch=1, scale=2.0, spectrum="flat")
    X = torch.linalg.qr(torch.randn(1, 2 * n, n, generator=g, dtype=torch.float64))[0]
    res = fit_single_head(target, X, d_k, g, steps=steps)
    return target[0], res.P[0], res.kl.item()


# ---------------------------------------------------------------------- proof checks
def null_vector_defect(X: Tensor, P: Tensor, rtol: float = 1e-10) -> Tensor:
    """How far ``P`` is from the constraint that dependent tokens impose on every head.

    If ``X u = 0`` for some ``u != 0``, every pattern of every head on ``X`` (any key size)
    satisfies ``(J log P) u = 0`` (chapter 3, the null-vector proposition). This returns the
    largest ``||(J log P) u||`` over unit vectors ``u`` of the null space of ``X``: 0 (up to
    roundoff) for a pattern that some head produces, positive for one no head produces, and
    exactly 0 when ``X`` has full column rank (no constraint).

    Shapes: X (d, n), P (n, n) positive column-stochastic -> scalar tensor.
    """
    X = check_tensor("X", X, min_ndim=2, finite=True)
    if X.ndim != 2:
        raise ValueError(f"X must be a matrix (d, n), got shape {tuple(X.shape)}")
    P = check_column_stochastic("P", P, atol=1e-6 if P.dtype == torch.float64 else 1e-4)
    if P.ndim != 2 or P.shape[0] != X.shape[1]:
        raise ValueError(f"P must be ({X.shape[1]}, {X.shape[1]}) for X of shape {tuple(X.shape)}")
    check_number("rtol", rtol, 0.0, 1.0, "()")
    n = X.shape[1]
    _, s, Vh = torch.linalg.svd(X.to(P.dtype))  # full_matrices: Vh is (n, n)
    top = s[0] if s.numel() else torch.zeros((), dtype=P.dtype)
    rank = int((s > rtol * top).sum().item()) if top > 0 else 0
    if rank == n:
        return torch.zeros((), dtype=P.dtype)
    U = Vh[rank:].T  # (n, n - rank): orthonormal basis of the null space of X
    return torch.linalg.matrix_norm(centered_log(P) @ U, ord=2)


def realize_mixed_logits(
    X: Tensor, W: Tensor, d_k: int, weights: Tensor, rtol: float = 1e-8
) -> tuple[Tensor, Tensor]:
    """Weights of ``h_k`` key heads whose mixed logits give the row-stochastic pattern ``W``.

    Row convention (tokens are the rows of ``X``, as in chapter 4). With ``X`` of full row
    rank and ``rank(log W - row means) <= h_k d_k``, returns ``W_Q, W_K`` such that
    ``softmax_rows(sum_i weights[i] X W_Q[i] W_K[i]^T X^T / sqrt(d_k)) == W``: the target
    ``C = (log W) J`` is pulled back to ``M = X^+ C X^{+T}`` (``X X^+ = I``), ``M`` is
    factored as ``A B^T`` with ``h_k d_k`` columns, and the columns are split into heads.

    Shapes: X (n, d), W (n, n), weights (h_k,) all nonzero -> W_Q, W_K (h_k, d, d_k).
    """
    check_positive_int("d_k", d_k)
    X = check_tensor("X", X, min_ndim=2, finite=True)
    W = check_tensor("W", W, min_ndim=2, finite=True)
    weights = check_tensor("weights", weights, min_ndim=1, finite=True)
    if X.ndim != 2 or W.ndim != 2 or weights.ndim != 1:
        raise ValueError("need X (n, d), W (n, n) and weights (h_k,)")
    n, d = X.shape
    if W.shape != (n, n):
        raise ValueError(f"W must be ({n}, {n}) for X with n={n} rows, got {tuple(W.shape)}")
    if (weights == 0).any():
        raise ValueError("weights must all be nonzero: a head with weight 0 contributes nothing")
    # A row-stochastic W is the transpose of a column-stochastic one.
    C = centered_log(W.T).T  # (n, n): log W minus each row's mean
    h_k = weights.shape[0]
    r = numerical_rank(C, rtol)
    if r > h_k * d_k:
        raise ValueError(f"h_k * d_k = {h_k * d_k} is too small: the centred log of W has rank {r}")
    if d < n or numerical_rank(X.to(C.dtype), 1e-10) < n:
        raise ValueError(f"X must have full row rank n={n} (independent tokens, d >= n)")
    Xd = X.to(C.dtype)
    X_plus = torch.linalg.solve(Xd @ Xd.T, Xd).T  # (d, n), X @ X_plus = I_n
    M = X_plus @ C @ X_plus.T  # (d, d), rank r
    U, S, Vh = torch.linalg.svd(M)
    A = torch.zeros(d, h_k * d_k, dtype=C.dtype)
    B = torch.zeros(d, h_k * d_k, dtype=C.dtype)
    A[:, :r] = U[:, :r] * S[:r]
    B[:, :r] = Vh[:r].T
    w = weights.to(C.dtype)
    # Head i gets columns i*d_k..(i+1)*d_k-1; its weight and the scaling are undone in W_Q.
    W_Q = A.T.reshape(h_k, d_k, d).transpose(1, 2) * math.sqrt(d_k) / w[:, None, None]
    W_K = B.T.reshape(h_k, d_k, d).transpose(1, 2)  # (h_k, d, d_k)
    return W_Q, W_K
