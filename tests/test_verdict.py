"""The verdict rule: t quantiles, intervals that cover, words that follow the interval."""

import pytest
import torch

from multihead.analysis.metrics import rank_correlation
from multihead.analysis.verdict import (
    Effect,
    combine,
    correlation,
    judge,
    paired,
    per_seed,
    t_quantile,
)

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("df", [1, 2, 2.5, 4, 9.3, 30, 1000])
@pytest.mark.parametrize("p", [0.025, 0.5, 0.9, 0.975, 0.999])
def test_t_quantile_matches_scipy(p, df):
    assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), abs=1e-6, rel=1e-6)


def _experiment(g, K, n, effect, seed_sd, example_sd):
    """Per-example differences: effect + a seed offset + an example offset shared by the
    seeds + noise."""
    seed_off = seed_sd * torch.randn(K, 1, generator=g, dtype=torch.float64)
    ex_off = example_sd * torch.randn(1, n, generator=g, dtype=torch.float64)
    noise = 0.5 * torch.randn(K, n, generator=g, dtype=torch.float64)
    return effect + seed_off + ex_off + noise


@pytest.mark.parametrize("seed_sd, example_sd", [(1.0, 0.0), (0.0, 1.0)])
def test_paired_interval_covers_the_true_effect(seed_sd, example_sd):
    # Whichever source dominates, about 95% of intervals hold the true effect. An interval
    # over seeds alone would miss the shared examples' noise (coverage far below 0.9 when
    # example_sd dominates); one over examples alone would miss the seeds'.
    g = torch.Generator().manual_seed(0)
    hits = 0
    for _ in range(300):
        d = _experiment(g, 4, 40, 0.2, seed_sd, example_sd)
        e = paired(d, torch.zeros_like(d), claimed="higher")
        hits += e.low <= 0.2 <= e.high
    assert 0.90 <= hits / 300 <= 0.99


def test_seed_only_interval_misses_shared_example_noise():
    # The failure the two-source interval fixes: per_seed on the seed means ignores the test
    # set that every seed shares.
    g = torch.Generator().manual_seed(1)
    hits = 0
    for _ in range(300):
        d = _experiment(g, 4, 40, 0.2, 0.0, 1.0)
        e = per_seed(d.mean(1), claimed="higher")
        hits += e.low <= 0.2 <= e.high
    assert hits / 300 < 0.8


def test_words_follow_the_interval():
    def effect(lo, hi, claimed="higher", ref=(0.0, 0.0)):
        return Effect((lo + hi) / 2, lo, hi, ref, claimed, 5, 100)

    assert judge(effect(0.1, 0.3)).word == "reproduced"
    assert judge(effect(0.1, 0.3), minimal=0.05).word == "reproduced"
    assert judge(effect(0.1, 0.3), minimal=0.2).word == "partly"
    assert judge(effect(-0.1, 0.3)).word == "no clear effect"
    assert judge(effect(-0.3, -0.1)).word == "contradicted"
    # claimed lower: the same intervals read the other way
    assert judge(effect(-0.3, -0.1, "lower")).word == "reproduced"
    assert judge(effect(-0.3, -0.1, "lower"), minimal=0.2).word == "partly"
    assert judge(effect(0.1, 0.3, "lower")).word == "contradicted"
    # a permutation band replaces zero
    assert judge(effect(0.2, 0.5, ref=(-0.35, 0.35))).word == "no clear effect"
    assert judge(effect(0.4, 0.6, ref=(-0.35, 0.35))).word == "reproduced"
    assert judge(effect(-0.6, -0.4, ref=(-0.35, 0.35))).word == "contradicted"


def test_paired_reads_a_clear_difference_and_no_difference():
    g = torch.Generator().manual_seed(2)
    base = torch.rand(5, 300, generator=g, dtype=torch.float64)
    better = base - 0.1 + 0.01 * torch.randn(5, 300, generator=g, dtype=torch.float64)
    assert judge(paired(better, base, claimed="lower")).word == "reproduced"
    assert judge(paired(better, base, claimed="higher")).word == "contradicted"
    same = base + 0.01 * torch.randn(5, 300, generator=g, dtype=torch.float64)
    assert judge(paired(same, base, claimed="lower")).word == "no clear effect"


def test_paired_with_own_examples_per_seed():
    g = torch.Generator().manual_seed(3)
    a = [torch.rand(n, generator=g) + 0.5 for n in (50, 60, 70)]
    b = [torch.rand(n, generator=g) for n in (50, 60, 70)]
    e = paired(a, b, claimed="higher", shared_examples=False)
    assert e.seeds == 3 and e.examples == 180
    assert judge(e).word == "reproduced"
    with pytest.raises(ValueError, match="shared_examples=False"):
        paired(a, b, claimed="higher")


def test_correlation_against_its_permutation_null():
    g = torch.Generator().manual_seed(4)
    xs = [torch.randn(4, 8, generator=g) for _ in range(5)]
    related = [x + 0.3 * torch.randn(4, 8, generator=g) for x in xs]
    unrelated = [torch.randn(4, 8, generator=g) for _ in range(5)]
    e = correlation(xs, related, rank_correlation, claimed="higher", permutations=60)
    assert e.reference[0] < 0 < e.reference[1] < 0.3
    assert judge(e).word == "reproduced"
    e0 = correlation(xs, unrelated, rank_correlation, claimed="higher", permutations=60)
    assert judge(e0).word == "no clear effect"
    within = correlation(xs, related, rank_correlation, claimed="higher", within=1, permutations=60)
    assert judge(within).word == "reproduced"


def test_combine():
    yes = judge(Effect(0.2, 0.1, 0.3, (0.0, 0.0), "higher", 5, 0))
    no = judge(Effect(0.0, -0.1, 0.1, (0.0, 0.0), "higher", 5, 0))
    rev = judge(Effect(-0.2, -0.3, -0.1, (0.0, 0.0), "higher", 5, 0))
    assert combine({"a": yes, "b": yes}).word == "reproduced"
    assert combine({"a": yes, "b": no}).word == "partly"
    assert combine({"a": rev, "b": rev}).word == "contradicted"
    assert combine({"a": no, "b": rev}).word == "contradicted"  # fails where it should hold
    assert combine({"a": no, "b": no}).word == "no clear effect"
    assert combine({"a": yes, "b": rev}).word == "partly"
    assert "a: reproduced" in combine({"a": yes, "b": no}).describe()


def test_bad_input_names_the_argument():
    ok = torch.rand(3, 10)
    with pytest.raises(ValueError, match="claimed"):
        paired(ok, ok, claimed="up")
    with pytest.raises(ValueError, match="at least 3"):
        paired(ok[:2], ok[:2], claimed="higher")
    with pytest.raises(ValueError, match="same seeds and examples"):
        paired(ok, ok[:, :5], claimed="higher")
    with pytest.raises(ValueError, match="per_seed"):
        paired(ok[:, 0], ok[:, 0], claimed="higher")
    with pytest.raises(ValueError, match="finite"):
        per_seed([1.0, float("nan"), 2.0], claimed="higher")
    with pytest.raises(ValueError, match="null"):
        per_seed([1.0, 2.0, 3.0], claimed="higher", null=[0.0] * 5)
    with pytest.raises(TypeError, match="effect"):
        judge("reproduced")
    with pytest.raises(ValueError, match="minimal"):
        judge(per_seed([1.0, 2.0, 3.0], claimed="higher"), minimal=-1.0)
    with pytest.raises(TypeError, match="conditions"):
        combine({})


def test_the_description_names_the_examples():
    g = torch.Generator().manual_seed(5)
    a = torch.rand(3, 20, generator=g, dtype=torch.float64)
    e = paired(a + 1, a, claimed="higher", example_name="test sentences")
    assert "3 seeds x 20 test sentences" in e.describe()
    with pytest.raises(ValueError, match="example_name"):
        paired(a, a, claimed="higher", example_name="")


def test_replicates_other_than_seeds_are_named_in_the_text():
    e = per_seed([0.2, 0.3, 0.25], claimed="higher", seed_name="folds")
    assert "3 folds" in e.describe() and "seeds" not in e.describe()
    with pytest.raises(TypeError, match="seed_name"):
        per_seed([0.2, 0.3, 0.25], claimed="higher", seed_name="")
