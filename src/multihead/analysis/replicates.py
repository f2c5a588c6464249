"""Choosing out of sample: the best candidate of each replicate, chosen on the others.

When a claim is about "the best head" (for a relation, for coreference...), picking the best
of many candidates on the data it is then scored on makes a winner out of noise.
``held_out_best`` chooses on the other folds and scores on the held-out one, once per fold,
so the folds stay replicates the verdict rule (``analysis.verdict``) can use.

Shapes: see the function.
"""

from __future__ import annotations

import torch
from torch import Tensor

from multihead._checks import check_tensor


def held_out_best(scores: Tensor, weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Pick the best candidate (a head, say) out of sample, once per replicate: for fold
    ``f``, the candidate with the highest score on the *other* folds (their mean, weighted by
    ``weights``, e.g. how many items each fold scored), and its score on fold ``f``. Choosing
    the best of many candidates on the data it is scored on makes a winner out of noise; a
    choice made elsewhere does not.

    Shapes: scores (folds, ...candidates), weights (folds,) -> chosen (folds,) flat index
    into the candidates, held_out (folds,).
    """
    check_tensor("scores", scores, layout="(folds, ...candidates)")
    if scores.ndim < 2 or scores.shape[0] < 2:
        raise ValueError(
            f"scores must be shaped (folds, ...candidates) with at least 2 folds (one to "
            f"score on, the others to choose on), got {tuple(scores.shape)}"
        )
    if not torch.isfinite(scores).all():
        raise ValueError("scores holds a value that is not finite")
    k = scores.shape[0]
    flat = scores.reshape(k, -1).double()  # (folds, candidates)
    w = torch.ones(k, dtype=torch.float64) if weights is None else torch.as_tensor(weights)
    if w.shape != (k,) or not torch.isfinite(w.double()).all() or bool((w < 0).any()):
        raise ValueError(f"weights must be {k} finite non-negative numbers, one per fold")
    w = w.double()
    chosen, held = [], []
    for f in range(k):
        others = torch.ones(k, dtype=torch.bool)
        others[f] = False
        if w[others].sum() <= 0:
            raise ValueError(f"weights give the folds other than fold {f} no weight")
        pooled = (flat[others] * w[others, None]).sum(0) / w[others].sum()  # (candidates,)
        best = int(pooled.argmax())
        chosen.append(best)
        held.append(float(flat[f, best]))
    return torch.tensor(chosen), torch.tensor(held, dtype=scores.dtype)
