"""Tests of multihead.analysis.lowrank: expressivity construction, rank test, fitting."""

import math

import pytest
import torch

from multihead.analysis.lowrank import (
    centered_log,
    check_column_stochastic,
    column_kl,
    column_softmax,
    fit_key_sizes,
    fit_pattern,
    fit_single_head,
    head_pattern,
    left_inverse,
    min_key_size,
    numerical_rank,
    random_column_stochastic,
    realize,
    realize_low_rank,
    total_variation,
)
from multihead.tasks.synthetic import SubsetCountTask


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed), dtype=torch.float64)


# ---------------------------------------------------------------- basics
def test_column_softmax_and_head_pattern_shapes() -> None:
    X, W = randn(5, 4), randn(3, 5, seed=1)
    P = head_pattern(X, W, W)
    assert P.shape == (4, 4)
    torch.testing.assert_close(P.sum(0), torch.ones(4, dtype=torch.float64))
    L = randn(2, 4, 4)
    torch.testing.assert_close(column_softmax(L).sum(-2), torch.ones(2, 4, dtype=torch.float64))


def test_head_pattern_is_transpose_of_row_convention() -> None:
    X, Wq, Wk = randn(6, 5), randn(3, 6, seed=1), randn(3, 6, seed=2)
    q, k = (Wq @ X).T, (Wk @ X).T  # (n, d_k), tokens as rows
    row = (q @ k.T / math.sqrt(3)).softmax(-1)  # (query, key)
    torch.testing.assert_close(head_pattern(X, Wq, Wk), row.T)


@pytest.mark.parametrize("spectrum", ["gaussian", "flat"])
def test_random_column_stochastic(spectrum: str) -> None:
    P = random_column_stochastic(6, gen(), batch=3, scale=2.0, spectrum=spectrum)
    assert P.shape == (3, 6, 6) and (P > 0).all()
    torch.testing.assert_close(P.sum(-2), torch.ones(3, 6, dtype=torch.float64))
    assert min_key_size(P[0]) == 5


def test_flat_spectrum_has_equal_singular_values() -> None:
    P = random_column_stochastic(8, gen(), scale=1.0, spectrum="flat")
    s = torch.linalg.svdvals(torch.log(P) - torch.log(P).mean(0))
    # Centering removes one direction; the other 7 singular values stay equal.
    assert s[:6].max() / s[:6].min() < 1 + 1e-6


# ---------------------------------------------------------------- expressivity
@pytest.mark.parametrize(("d", "n"), [(4, 4), (7, 4), (20, 12)])
def test_realize_reproduces_P_exactly(d: int, n: int) -> None:
    X = randn(d, n)
    P = random_column_stochastic(n, gen(1), scale=2.0)
    Wq, Wk = realize(X, P)
    assert Wq.shape == Wk.shape == (n, d)
    assert (head_pattern(X, Wq, Wk) - P).abs().max() < 1e-10


def test_realize_with_larger_key_and_any_D0() -> None:
    X, P = randn(6, 4), random_column_stochastic(4, gen(2))
    D0 = torch.tensor([0.5, 2.0, 3.0, 7.0], dtype=torch.float64)
    Wq, Wk = realize(X, P, d_k=9, D0=D0)
    assert Wq.shape == (9, 6)
    assert (head_pattern(X, Wq, Wk) - P).abs().max() < 1e-10


def test_left_inverse() -> None:
    X = randn(7, 3)
    torch.testing.assert_close(left_inverse(X) @ X, torch.eye(3, dtype=torch.float64))


def test_realize_rejects_bad_input() -> None:
    X, P = randn(5, 4), random_column_stochastic(4, gen())
    with pytest.raises(ValueError, match="full column rank"):
        realize(torch.cat([X[:, :3], X[:, :1]], dim=1), P)  # a repeated token
    with pytest.raises(ValueError, match="d=3 rows"):
        realize(randn(3, 4), P)
    with pytest.raises(ValueError, match="strictly positive"):
        bad = P.clone()
        bad[0, 0], bad[1, 0] = 0.0, bad[1, 0] + bad[0, 0]
        realize(X, bad)
    with pytest.raises(ValueError, match="sum to 1"):
        realize(X, P * 1.1)
    with pytest.raises(ValueError, match="sum to 1"):
        realize(X, random_column_stochastic(4, gen(3)).T + 0.0 * P)  # row-stochastic
    with pytest.raises(ValueError, match="d_k=3 < n=4"):
        realize(X, P, d_k=3)
    with pytest.raises(ValueError, match="columns"):
        realize(randn(5, 3), P)
    with pytest.raises(ValueError, match="square"):
        realize(X, P[:3])
    with pytest.raises(TypeError, match="P must be a torch.Tensor"):
        realize(X, P.tolist())
    with pytest.raises(TypeError, match="floating-point"):
        realize(X.long(), P)
    with pytest.raises(ValueError, match="D0"):
        realize(X, P, D0=-torch.ones(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="inf or nan"):
        realize(X, P.clone().fill_(float("nan")))


def test_row_stochastic_example_is_rejected_but_its_transpose_works() -> None:
    # A row-stochastic (but not column-stochastic) matrix, as the package's patterns are.
    rows = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]], dtype=torch.float64)
    X = randn(3, 3)
    with pytest.raises(ValueError, match="transpose"):
        realize(X, rows)
    Wq, Wk = realize(X, rows.T)
    assert (head_pattern(X, Wq, Wk).T - rows).abs().max() < 1e-10


# ---------------------------------------------------------------- the rank bound
def test_logits_of_key_size_r_give_min_key_size_r() -> None:
    n = 8
    for r in (1, 3, 5):
        L = randn(n, r) @ randn(r, n, seed=1)  # rank r logits
        P = column_softmax(L)
        assert min_key_size(P) == r
        # log P = L + 1 c^T: rank at most r + 1.
        assert numerical_rank(torch.log(P)) <= r + 1


def test_uniform_pattern_needs_no_key() -> None:
    assert min_key_size(torch.full((4, 4), 0.25, dtype=torch.float64)) == 0


def test_centered_log_columns_sum_to_zero() -> None:
    C = centered_log(random_column_stochastic(5, gen()))
    torch.testing.assert_close(C.sum(0), torch.zeros(5, dtype=torch.float64))


def test_realize_low_rank_exact_at_min_key_size() -> None:
    n, r = 7, 3
    X = randn(9, n)
    P = column_softmax(randn(n, r) @ randn(r, n, seed=1))
    Wq, Wk = realize_low_rank(X, P, d_k=r)
    assert Wq.shape == (r, 9)
    assert (head_pattern(X, Wq, Wk) - P).abs().max() < 1e-10
    with pytest.raises(ValueError, match="min_key_size"):
        realize_low_rank(X, P, d_k=r - 1)


def test_generic_P_needs_n_minus_1() -> None:
    n = 6
    X, P = randn(8, n), random_column_stochastic(n, gen(4), scale=2.0)
    Wq, Wk = realize_low_rank(X, P, d_k=n - 1)
    assert (head_pattern(X, Wq, Wk) - P).abs().max() < 1e-10


def test_d1_n2_counterexample() -> None:
    # With one feature, (W_k X)^T (W_q X) = w x x^T has rank 1 ...
    x = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    P = head_pattern(x, torch.tensor([[3.0]], dtype=torch.float64), torch.ones(1, 1).double())
    # ... and with x = [1, 0] the second column is always uniform.
    torch.testing.assert_close(P[:, 1], torch.tensor([0.5, 0.5], dtype=torch.float64))


# ---------------------------------------------------------------- distances and fitting
def test_kl_and_tv() -> None:
    P = random_column_stochastic(4, gen(), batch=2)
    assert column_kl(P, P).abs().max() < 1e-12
    assert total_variation(P, P).abs().max() < 1e-12
    Q = random_column_stochastic(4, gen(1), batch=2)
    assert (column_kl(P, Q) > 0).all() and (total_variation(P, Q) > 0).all()
    with pytest.raises(ValueError, match="must match"):
        column_kl(P, Q[0, :3])


def test_fit_key_sizes_drops_at_n_minus_1() -> None:
    n = 6
    target = random_column_stochastic(n, gen(), batch=2, scale=2.0, spectrum="flat")
    X = randn(2, 2 * n, n, seed=1)
    r = fit_key_sizes(target, X, [1, n - 2, n - 1, n], gen(2), steps=400)
    assert r.kl.shape == (4, 2) and r.P.shape == (4, 2, n, n)
    assert r.params[0].shape == (4, 2, n, 2 * n)
    assert (r.kl[:2] > 1e-3).all()  # below n - 1 no fit is exact (the rank bound)
    assert (r.kl[2:] < 1e-5).all()  # from n - 1 on it is


def test_fit_single_head_and_adam() -> None:
    n = 4
    target = random_column_stochastic(n, gen(), batch=1)
    X = randn(1, 6, n)
    r = fit_single_head(target, X, 3, gen(1), steps=200)
    assert r.kl.shape == (1,) and r.params[0].shape == (1, 3, 6) and r.kl.item() < 1e-5
    init = [torch.zeros(1, n, n, dtype=torch.float64)]
    r = fit_pattern(target, lambda p: column_softmax(p[0]), init, steps=300, method="adam")
    assert r.kl.item() < 1e-3


def test_fit_rejects_bad_input() -> None:
    target = random_column_stochastic(4, gen(), batch=1)
    X = randn(1, 6, 4)
    with pytest.raises(ValueError, match="d_keys"):
        fit_key_sizes(target, X, [], gen())
    with pytest.raises(ValueError, match="d_keys entry"):
        fit_key_sizes(target, X, [0], gen())
    with pytest.raises(ValueError, match="batch"):
        fit_key_sizes(target, randn(2, 6, 4), [1], gen())
    with pytest.raises(ValueError, match="method"):
        fit_pattern(target, lambda p: p[0], [target], method="sgd")
    with pytest.raises(TypeError, match="pattern_fn"):
        fit_pattern(target, None, [target])
    with pytest.raises(ValueError, match="sum to 1"):
        check_column_stochastic("target", target * 2)


# ---------------------------------------------------------------- the training task
def test_subset_count_task() -> None:
    task = SubsetCountTask(seq_len=8, subset_size=3, seed=0)
    M = task.membership()
    assert M.shape == (8, 8) and (M.sum(1) == 3).all()
    torch.testing.assert_close(task.gold_pattern().sum(1), torch.ones(8))
    x, y = task.sample(5, gen())
    assert x.shape == y.shape == (5, 8) and task.n_classes == 4
    torch.testing.assert_close(y, (x.float() @ M.T).long())
    # The gold pattern, softened, needs a key size close to n.
    soft = (0.9 * task.gold_pattern() + 0.1 / 8).double().T  # column convention
    assert min_key_size(soft) == 7
    with pytest.raises(ValueError, match="subset_size"):
        SubsetCountTask(seq_len=4, subset_size=4)
    with pytest.raises(ValueError, match="seed"):
        SubsetCountTask(seed=-1)
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, None)


# ---------------------------------------------------------------- cost and explorer
def test_attention_cost_matches_module() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from multihead.analysis.cost import attention_cost
    from multihead.core.attention import MultiHeadAttention
    from multihead.core.hooks import run_with_cache
    from multihead.core.model import count_parameters

    for args in ((32, 8, 4, 4), (32, 8, 16, 4), (768, 12, 128, 64)):
        cost = attention_cost(*args, seq_len=10)
        assert cost["params"] == count_parameters(MultiHeadAttention(*args))
        with FlopCounterMode(display=False) as counter:
            run_with_cache(MultiHeadAttention(*args), torch.zeros(1, 10, args[0]))
        assert cost["flops"] == counter.get_total_flops()
    with pytest.raises(ValueError, match="seq_len"):
        attention_cost(32, 8, 4, 4, seq_len=0)


def test_matched_key_size() -> None:
    from multihead.analysis.cost import attention_cost, matched_key_size

    base = attention_cost(32, 8, 4, 4, seq_len=1)["params"]  # 4224
    assert matched_key_size(32, 8, 4, base) == 4  # the layer itself
    for n_heads, d_value in ((8, 1), (8, 2), (4, 4), (2, 4)):
        d_key = matched_key_size(32, n_heads, d_value, base)
        gap = abs(attention_cost(32, n_heads, d_key, d_value, seq_len=1)["params"] - base)
        for other in (d_key - 1, d_key + 1):  # no other key size comes closer
            if other >= 1:
                assert gap <= abs(attention_cost(32, n_heads, other, d_value, 1)["params"] - base)
    assert matched_key_size(32, 8, 1, base) == 7
    with pytest.raises(ValueError, match="params"):
        matched_key_size(32, 8, 4, 100)
    with pytest.raises(ValueError, match="params"):
        matched_key_size(32, 8, 4, 0)
    with pytest.raises(ValueError, match="n_heads"):
        matched_key_size(32, 0, 4, base)
    with pytest.raises(ValueError, match="d_value"):
        matched_key_size(32, 8, -1, base)


def test_best_fit_example_and_explorer() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from multihead.analysis.lowrank import best_fit_example
    from multihead.viz.widgets import WithStaticFallback, explore_low_rank, plot_low_rank_fit

    target, fitted, kl = best_fit_example(4, 3, steps=100)
    assert target.shape == fitted.shape == (4, 4) and kl < 1e-4
    fig, axes = plt.subplots(1, 2)
    assert plot_low_rank_fit(axes, 4, 1, steps=20) > 0
    plt.close(fig)
    view = explore_low_rank(n=4, d_k=2, steps=20)
    assert isinstance(view, WithStaticFallback)
    assert "image/png" in view._repr_mimebundle_()
