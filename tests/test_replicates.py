"""analysis.replicates.seed_order: one rule for "lower < higher" on replicates."""

import pytest
import torch

from multihead.analysis.replicates import ORDER_VERDICTS, held_out_best, overall, seed_order
from multihead.viz.claims import VERDICTS


def test_every_order_verdict_is_a_claims_page_verdict():
    assert set(ORDER_VERDICTS) <= set(VERDICTS)


@pytest.mark.parametrize(
    ("lower", "higher", "verdict"),
    [
        ([0.1, 0.2, 0.3], [0.5, 0.6, 0.4], "reproduced"),  # below everywhere, ranges apart
        ([0.1, 0.5, 0.3], [0.2, 0.6, 0.4], "partly"),  # below seed by seed, ranges overlap
        ([0.1, 0.5, 0.3], [0.2, 0.4, 0.4], "mixed over seeds"),  # seed 1 the other way
        ([0.5, 0.6, 0.4], [0.1, 0.2, 0.3], "contradicted"),
        ([0.2, 0.6, 0.4], [0.1, 0.5, 0.3], "not reproduced"),  # above, but within the noise
        ([0.2, 0.2, 0.2], [0.2, 0.2, 0.2], "not reproduced"),  # ties are not "below"
    ],
)
def test_the_rule(lower, higher, verdict):
    out = seed_order(torch.tensor(lower), torch.tensor(higher))
    assert out.verdict == verdict
    assert out.n_seeds == 3


def test_columns_every_lower_below_every_higher():
    lower = torch.tensor([[0.1, 0.2], [0.1, 0.3]])  # (2 seeds, 2 settings)
    higher = torch.tensor([[0.5, 0.25], [0.6, 0.4]])
    out = seed_order(lower, higher)  # seed 0: 0.2 < 0.25; seed 1: 0.3 < 0.4; ranges overlap
    assert (out.verdict, out.n_below, out.apart) == ("partly", 2, False)
    assert seed_order(lower, higher + 0.2).verdict == "reproduced"
    assert "2 of 2 seeds" in out.describe()


def test_lists_are_accepted():
    assert seed_order([1.0, 2.0], [3.0, 4.0]).verdict == "reproduced"


@pytest.mark.parametrize(
    ("lower", "higher", "match"),
    [
        (torch.zeros(3), torch.zeros(4), "pair them by seed"),
        (torch.zeros(1), torch.zeros(1), "at least two"),
        (torch.zeros(2, 2, 2), torch.zeros(2), "lower must be shaped"),
        (torch.zeros(2), torch.zeros(2, 0), "higher must be shaped"),
        (torch.tensor([0.0, float("nan")]), torch.zeros(2), "lower holds a value"),
    ],
)
def test_bad_input_names_the_argument(lower, higher, match):
    with pytest.raises(ValueError, match=match):
        seed_order(lower, higher)


def test_bad_type_names_the_argument():
    with pytest.raises(TypeError, match="higher must be a tensor"):
        seed_order(torch.zeros(2), "abc")


@pytest.mark.parametrize(
    ("verdicts", "out"),
    [
        (["reproduced", "reproduced"], "reproduced"),
        (["reproduced", "not reproduced"], "partly"),
        (["partly", "contradicted"], "partly"),
        (["mixed over seeds", "not reproduced"], "mixed over seeds"),
        (["contradicted", "contradicted"], "contradicted"),
        (["contradicted", "not reproduced"], "not reproduced"),
    ],
)
def test_overall(verdicts, out):
    assert overall(verdicts) == out


def test_overall_bad_input():
    with pytest.raises(TypeError, match="verdicts must be"):
        overall("reproduced")
    with pytest.raises(ValueError, match=r"verdicts\[1\]"):
        overall(["reproduced", "maybe"])


def test_held_out_best_chooses_on_the_other_folds():
    # Candidate 2 wins on fold 0 only (noise); candidate 1 is best on the others.
    scores = torch.tensor([[0.1, 0.5, 0.9], [0.2, 0.6, 0.1], [0.3, 0.7, 0.2]])
    chosen, held = held_out_best(scores)
    assert chosen.tolist() == [1, 1, 1]
    assert torch.allclose(held, torch.tensor([0.5, 0.6, 0.7]))
    # Weights: fold 2 heavy, so for fold 0 the pooled choice follows fold 2.
    s2 = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    chosen, _ = held_out_best(s2, torch.tensor([1.0, 1.0, 3.0]))
    assert chosen.tolist() == [1, 1, 0]
    # Several candidate dimensions are flattened: (folds, layers, heads).
    chosen, _ = held_out_best(torch.zeros(2, 3, 4).index_fill_(2, torch.tensor([3]), 1.0))
    assert divmod(int(chosen[0]), 4)[1] == 3


def test_held_out_best_bad_input():
    with pytest.raises(TypeError, match="scores"):
        held_out_best([[0.1, 0.2], [0.3, 0.4]])
    with pytest.raises(ValueError, match="at least 2 folds"):
        held_out_best(torch.ones(1, 3))
    with pytest.raises(ValueError, match="not finite"):
        held_out_best(torch.tensor([[0.1, float("nan")], [0.2, 0.3]]))
    with pytest.raises(ValueError, match="weights"):
        held_out_best(torch.ones(3, 2), torch.ones(2))
    with pytest.raises(ValueError, match="no weight"):
        held_out_best(torch.ones(2, 2), torch.tensor([1.0, 0.0]))
