"""How many dimensions a trained causal head uses: the rank of its logits.

Chapter 3 proves that a head's centred log-pattern has rank at most its key size ``d_k``
(``analysis.lowrank``, column convention). In a causal decoder the pattern hides the scores of
future keys, so the functions here take the block of a head's scores that no mask touches
(``visible_block``: the second half's queries against the first half's keys, every key
visible to every query), subtract each row's mean (what a softmax forgets), and measure
it: its singular values (``centred_singular_values``: at most ``d_k`` of them are nonzero)
and the rank a head needs to reproduce every logit to within a tolerance (``needed_rank``).
Row convention ``(..., query, key)``, as the package's patterns.

Pure functions of tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from multihead._checks import check_number, check_tensor


def visible_block(scores: Tensor) -> Tensor:
    """The block of a causal head's scores (or log-pattern) that no mask touches: the
    queries of the second half of the sequence against the keys of the first half. In the
    package's row convention ``(..., query, key)``, so each row is one query.

    Shapes: scores (..., n, n) with n even -> (..., n / 2, n / 2).
    """
    check_tensor("scores", scores, min_ndim=2, layout="(..., query, key)")
    n = scores.shape[-1]
    if scores.shape[-2] != n or n % 2:
        raise ValueError(f"scores must be square over an even number of tokens, got {scores.shape}")
    block = scores[..., n // 2 :, : n // 2]
    if not torch.isfinite(block).all():
        raise ValueError(
            "scores has a masked (infinite) entry in the visible block: pass causal scores"
        )
    return block


def centred_singular_values(block: Tensor) -> Tensor:
    """The singular values (descending, float64) of each block after subtracting every row's
    mean: the part of a head's logits that its pattern determines, since a softmax over a row
    forgets a constant added to the row. For logits ``q k^T / sqrt(d_k)`` at most ``d_k`` of
    them are nonzero (the centred block is ``Q (K^T J) / sqrt(d_k)``, a product through
    ``d_k`` dimensions).

    Shapes: block (..., m, n) -> (..., min(m, n)).
    """
    check_tensor("block", block, min_ndim=2, finite=True, layout="(..., query, key)")
    b = block.double()
    return torch.linalg.svdvals(b - b.mean(dim=-1, keepdim=True))


def needed_rank(block: Tensor, tolerances: Sequence[float]) -> Tensor:
    """For each tolerance ``t`` (in the logits' units, nats), the smallest rank ``r`` whose
    truncated SVD of the row-centred ``block`` (its ``r`` largest singular directions) is
    within ``t`` of it in every entry: the number of dimensions a head needs to reproduce
    its logits, up to a constant per row, to within ``t`` each (a logit off by at most ``t``
    moves every weight of the row by a factor between ``exp(-2t)`` and ``exp(2t)``).

    Shapes: block (..., m, n), tolerances (k,) -> (..., k) int64, each in 0 .. min(m, n).
    """
    check_tensor("block", block, min_ndim=2, finite=True, layout="(..., query, key)")
    if isinstance(tolerances, (str, bytes)) or not isinstance(tolerances, Sequence):
        raise TypeError(f"tolerances must be a list of numbers > 0, got {tolerances!r}")
    tols = [check_number(f"tolerances[{i}]", t, 0.0, None, "()") for i, t in enumerate(tolerances)]
    if not tols:
        raise ValueError("tolerances is empty: give at least one tolerance (e.g. [0.1])")
    b = block.double()
    err = b - b.mean(dim=-1, keepdim=True)  # (..., m, n): the rank-0 truncation's error
    U, S, Vh = torch.linalg.svd(err, full_matrices=False)
    full = S.shape[-1]
    need = torch.full((*err.shape[:-2], len(tols)), full, dtype=torch.long, device=err.device)
    limit = torch.tensor(tols, dtype=err.dtype, device=err.device)
    for r in range(full + 1):  # need = the first r whose error is within the tolerance
        within = err.abs().amax(dim=(-2, -1))[..., None] <= limit  # (..., k)
        need = torch.where(within & (need == full), torch.clamp(need, max=r), need)
        if r < full:  # remove the next singular direction from the error
            err = err - S[..., r, None, None] * U[..., :, r, None] * Vh[..., r, None, :]
    return need
