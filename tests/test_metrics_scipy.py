"""The hand-written statistics of ``analysis.metrics`` against SciPy, an independent oracle:
Jensen-Shannon divergence, Spearman's rank correlation (ties included) and classical MDS."""

import math
import warnings

import numpy as np
import pytest
import torch

from multihead.analysis.metrics import (
    classical_mds,
    js_divergence,
    rank_correlation,
    rank_correlation_by_row,
    within_group_rank_correlation,
)

scipy = pytest.importorskip("scipy")
from scipy.linalg import eigh  # noqa: E402
from scipy.spatial.distance import jensenshannon  # noqa: E402
from scipy.stats import rankdata, spearmanr  # noqa: E402


def _spearman(x, y) -> float:
    with warnings.catch_warnings():  # scipy warns on constant input and returns nan
        warnings.simplefilter("ignore")
        return float(spearmanr(np.asarray(x), np.asarray(y)).statistic)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


def test_js_divergence_is_the_square_of_scipys_js_distance():
    g = torch.Generator().manual_seed(0)
    p = torch.rand(6, 5, 7, generator=g, dtype=torch.float64)
    q = torch.rand(6, 5, 7, generator=g, dtype=torch.float64)
    p[0, 0, :3] = 0.0  # zero weights: 0 log 0 = 0
    q[1, 2] = 0.0
    q[1, 2, 4] = 1.0  # a one-hot row
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    want = jensenshannon(p.numpy(), q.numpy(), axis=-1) ** 2  # natural log, as ours
    np.testing.assert_allclose(js_divergence(p, q).numpy(), want, rtol=1e-10, atol=1e-14)
    in_bits = jensenshannon(p[0].numpy(), q[0].numpy(), axis=-1, base=2) ** 2
    np.testing.assert_allclose(js_divergence(p[0], q[0]).numpy() / math.log(2), in_bits)


@pytest.mark.parametrize("seed", range(5))
def test_rank_correlation_matches_spearmanr_with_ties(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, (12,), generator=g).double()  # many ties
    y = torch.randint(0, 6, (3, 4), generator=g).double()  # any shape, flattened
    assert _same(rank_correlation(x, y).item(), _spearman(x, y.flatten()))
    z = torch.randn(12, generator=g, dtype=torch.float64)
    assert _same(rank_correlation(z, x).item(), _spearman(z, x))


def test_constant_input_gives_nan_in_every_spearman_function_as_in_scipy():
    const, ramp = torch.ones(4), torch.arange(4.0)
    assert math.isnan(_spearman(const, ramp))
    assert math.isnan(rank_correlation(const, ramp).item())
    assert math.isnan(rank_correlation(ramp, const).item())
    assert math.isnan(within_group_rank_correlation(const, ramp, torch.zeros(4, dtype=int)))
    rows = rank_correlation_by_row(torch.stack([const, ramp]), torch.stack([ramp, ramp]))
    assert math.isnan(rows[0].item()) and rows[1].item() == pytest.approx(1.0)


def test_rank_correlation_by_row_is_spearmanr_row_by_row():
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 3, (4, 6), generator=g).double()
    y = torch.randn(4, 6, generator=g, dtype=torch.float64)
    got = rank_correlation_by_row(x, y)
    for row in range(4):
        assert _same(got[row].item(), _spearman(x[row], y[row]))


def _within_groups(x, y, groups) -> float:
    """Ranks (scipy's average ranks for ties) centred inside each group, then correlated."""
    x, y, groups = (np.asarray(t) for t in (x, y, groups))
    cx, cy = [], []
    for g in np.unique(groups):
        inside = groups == g
        if inside.sum() < 2:
            continue
        for t, out in ((x[inside], cx), (y[inside], cy)):
            r = rankdata(t)
            out.append(r - r.mean())
    rx, ry = np.concatenate(cx), np.concatenate(cy)
    denom = np.linalg.norm(rx) * np.linalg.norm(ry)
    return float("nan") if denom == 0 else float(rx @ ry / denom)


@pytest.mark.parametrize("seed", range(5))
def test_within_group_rank_correlation_matches_a_scipy_computation(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, (15,), generator=g).double()
    y = torch.randint(0, 5, (15,), generator=g).double()
    groups = torch.randint(0, 4, (15,), generator=g)
    got = within_group_rank_correlation(x, y, groups).item()
    assert _same(got, _within_groups(x, y, groups))
    one_group = within_group_rank_correlation(x, y, torch.zeros(15, dtype=torch.long)).item()
    assert _same(one_group, _spearman(x, y))  # one group: plain Spearman


def _scipy_mds(distances: np.ndarray, dim: int) -> np.ndarray:
    n = len(distances)
    J = np.eye(n) - 1.0 / n
    B = -J @ (distances**2) @ J / 2
    values, vectors = eigh(B, subset_by_index=[n - dim, n - 1])  # the top dim, ascending
    return vectors * np.sqrt(np.clip(values, 0, None))


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_classical_mds_matches_scipy_up_to_rotation_and_sign(dim):
    g = torch.Generator().manual_seed(dim)
    points = torch.randn(9, 5, generator=g, dtype=torch.float64) * torch.tensor(
        [5.0, 3.0, 2.0, 1.0, 0.5], dtype=torch.float64
    )  # distinct spreads: distinct eigenvalues
    euclid = torch.cdist(points, points)
    p = torch.rand(9, 6, generator=g, dtype=torch.float64)
    p = p / p.sum(-1, keepdim=True)
    js = js_divergence(p[:, None], p[None]).sqrt()  # a metric, not Euclidean
    for distances in (euclid, js):
        ours = classical_mds(distances, dim).numpy()
        ref = _scipy_mds(distances.numpy(), dim)
        # The Gram matrix (hence every distance) of the embedding ignores rotations and signs.
        np.testing.assert_allclose(ours @ ours.T, ref @ ref.T, atol=1e-9)
    full = classical_mds(euclid, 5)  # full rank: the configuration's distances come back
    torch.testing.assert_close(torch.cdist(full, full), euclid, atol=1e-9, rtol=0)
