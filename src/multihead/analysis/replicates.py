"""Is one statistic below another, seed by seed and beyond the seed noise?

A claim such as "one head is worse than eight" is tested on replicates: the same statistic
(a held-out loss, say) measured for both settings on the same seeds 0..K-1, each seed seeing
the same batches in both. ``seed_order(lower, higher)`` asks whether ``lower`` is below
``higher`` and answers with one rule, used for every such claim:

* ``"reproduced"``: below on every seed, and beyond the seed noise of the statistic: the
  largest ``lower`` of any seed is below the smallest ``higher`` of any seed (the two ranges
  over seeds do not overlap);
* ``"partly"``: below on every seed, but the ranges over seeds overlap (the order holds seed
  by seed, not beyond the spread of seeds);
* ``"mixed over seeds"``: below on some seeds and not on others;
* ``"not reproduced"``: below on no seed, and not above beyond the noise;
* ``"contradicted"``: above on every seed, with ranges that do not overlap.

``lower`` and ``higher`` may each hold several columns (settings): the claim is then that
every column of ``lower`` is below every column of ``higher`` (on a seed: the largest of
``lower`` below the smallest of ``higher``; beyond noise: that for the ranges over seeds).

``overall(verdicts)`` combines the verdicts of one claim tested at several settings.

Shapes: lower (K,) or (K, m), higher (K,) or (K, m') -> a ``SeedOrder``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from multihead._checks import check_tensor

ORDER_VERDICTS = ("reproduced", "partly", "mixed over seeds", "not reproduced", "contradicted")


class SeedOrder(NamedTuple):
    """The outcome of ``seed_order``: ``verdict`` (one of ``ORDER_VERDICTS``), the number of
    seeds on which ``lower`` is below ``higher`` (``n_below``) and above it (``n_above``),
    ``n_seeds``, and whether the ranges over seeds are apart (``apart``: lower below;
    ``apart_reversed``: lower above)."""

    verdict: str
    n_below: int
    n_above: int
    n_seeds: int
    apart: bool
    apart_reversed: bool

    def describe(self) -> str:
        """One line for an evidence cell, e.g. ``below on 5 of 5 seeds, ranges apart``."""
        where = "ranges apart" if self.apart or self.apart_reversed else "ranges overlap"
        return f"below on {self.n_below} of {self.n_seeds} seeds, {where}"


def _columns(name: str, values: object) -> Tensor:
    if not isinstance(values, Tensor):
        try:
            values = torch.as_tensor(values, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"{name} must be a tensor of replicates, (seeds,) or (seeds, m)"
            ) from None
    if not values.is_floating_point():
        values = values.double()
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] < 1:
        raise ValueError(f"{name} must be shaped (seeds,) or (seeds, m), got {tuple(values.shape)}")
    if not torch.isfinite(values).all():
        raise ValueError(f"{name} holds a value that is not finite")
    return values.double()


def seed_order(lower: Tensor, higher: Tensor) -> SeedOrder:
    """Test "``lower`` < ``higher``" on replicates paired by seed (see the module docstring
    for the rule). Row ``k`` of both must come from seed ``k``; at least two seeds.

    Shapes: lower (K,) or (K, m), higher (K,) or (K, m') -> SeedOrder.
    """
    lo, hi = _columns("lower", lower), _columns("higher", higher)
    if lo.shape[0] != hi.shape[0]:
        raise ValueError(
            f"lower has {lo.shape[0]} seeds and higher {hi.shape[0]}: pair them by seed"
        )
    K = lo.shape[0]
    if K < 2:
        raise ValueError("lower and higher hold one seed: a verdict needs at least two")
    below = lo.max(1).values < hi.min(1).values  # (K,) every lower column below every higher
    above = lo.min(1).values > hi.max(1).values  # (K,) every lower column above every higher
    apart = bool(lo.max() < hi.min())
    apart_reversed = bool(lo.min() > hi.max())
    n_below, n_above = int(below.sum()), int(above.sum())
    if n_below == K:
        verdict = "reproduced" if apart else "partly"
    elif n_below > 0:
        verdict = "mixed over seeds"
    elif n_above == K and apart_reversed:
        verdict = "contradicted"
    else:
        verdict = "not reproduced"
    return SeedOrder(verdict, n_below, n_above, K, apart, apart_reversed)


def overall(verdicts: Sequence[str]) -> str:
    """One verdict for a claim tested at several settings (e.g. at every number of heads),
    from their ``seed_order`` verdicts: ``"reproduced"`` if every setting reproduces it;
    ``"partly"`` if some setting does, or holds it seed by seed; ``"mixed over seeds"`` if
    the best any setting gives is that; ``"contradicted"`` if every setting contradicts it;
    ``"not reproduced"`` otherwise.

    Shapes: verdicts (settings,) -> one word of ``ORDER_VERDICTS``.
    """
    if isinstance(verdicts, (str, bytes)) or not isinstance(verdicts, Sequence) or not verdicts:
        raise TypeError(f"verdicts must be a non-empty list of verdicts, got {verdicts!r}")
    for i, v in enumerate(verdicts):
        if v not in ORDER_VERDICTS:
            raise ValueError(f"verdicts[{i}]={v!r} is not one of {ORDER_VERDICTS}")
    if all(v == "reproduced" for v in verdicts):
        return "reproduced"
    if any(v in ("reproduced", "partly") for v in verdicts):
        return "partly"
    if "mixed over seeds" in verdicts:
        return "mixed over seeds"
    if all(v == "contradicted" for v in verdicts):
        return "contradicted"
    return "not reproduced"


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
