"""The verdict rule: t quantiles, intervals that cover, words that follow the interval and the
minimal size, non-inferiority, several conditions, competence, solved shares, pooling."""

import json

import pytest
import torch

from multihead.analysis.metrics import rank_correlation
from multihead.analysis.verdict import (
    COMPETENT_SHARE,
    LEVEL,
    NOT_AT_THIS_SCALE,
    WORDS,
    Effect,
    SeedSet,
    clopper_pearson,
    combine,
    competence,
    correlation,
    find_split,
    interval_word,
    judge,
    number_seeds,
    paired,
    per_seed,
    pool,
    pooled,
    solved_share,
    split_seeds,
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
    # Whichever source dominates, about 95% of intervals hold the true effect.
    g = torch.Generator().manual_seed(0)
    hits = 0
    for _ in range(300):
        d = _experiment(g, 4, 40, 0.2, seed_sd, example_sd)
        e = paired(d, torch.zeros_like(d), claimed="higher")
        hits += e.low <= 0.2 <= e.high
    assert 0.90 <= hits / 300 <= 0.99


def test_seed_only_interval_misses_shared_example_noise():
    g = torch.Generator().manual_seed(1)
    hits = 0
    for _ in range(300):
        d = _experiment(g, 4, 40, 0.2, 0.0, 1.0)
        e = per_seed(d.mean(1), claimed="higher")
        hits += e.low <= 0.2 <= e.high
    assert hits / 300 < 0.8


# ---- the words ------------------------------------------------------------------------


def _effect(lo, hi, claimed="higher", reference=0.0):
    return Effect((lo + hi) / 2, lo, hi, claimed, 5, 100, reference)


def test_every_interval_gets_exactly_one_word_by_the_table():
    # Every position of [lo, hi] against -m, 0 and +m, boundaries included.
    m = 0.1
    points = [-0.3, -0.1, -0.05, 0.0, 0.05, 0.1, 0.3]
    seen = set()
    for i, lo in enumerate(points):
        for hi in points[i:]:
            word = interval_word(lo, hi, minimal=m)
            table = [
                w
                for w, holds in (
                    ("contradicted", hi <= -m),
                    ("reproduced", lo >= m),
                    ("ruled out", -m < hi < m and lo < m),
                    ("partly", 0 < lo < m <= hi),
                    ("no clear effect", lo <= 0 and hi >= m),
                )
                if holds
            ]
            assert table == [word], (lo, hi, table, word)
            seen.add(word)
    assert seen == set(WORDS)


@pytest.mark.parametrize(
    "lo, hi, word",
    [  # minimal size 0.125 (exact in binary, so the boundaries are exact too)
        (0.125, 0.375, "reproduced"),  # lo at the minimal size
        (0.12, 0.375, "partly"),
        (0.0, 0.375, "no clear effect"),  # reaches no effect
        (0.0001, 0.125, "partly"),  # hi at the minimal size
        (0.0001, 0.12, "ruled out"),  # a real but smaller effect
        (-0.12, 0.12, "ruled out"),  # inside plus or minus m
        (-0.5, 0.12, "ruled out"),  # the claimed size excluded, the other side open
        (-0.5, -0.12, "ruled out"),  # the opposite sign, not its size
        (-0.5, -0.125, "contradicted"),  # beyond -m
        (-0.5, 0.5, "no clear effect"),
    ],
)
def test_word_boundaries(lo, hi, word):
    assert judge(_effect(lo, hi), minimal=0.125).word == word
    # claimed lower: the mirrored interval reads the same
    assert judge(_effect(-hi, -lo, "lower"), minimal=0.125).word == word
    # measured from a reference other than zero
    assert judge(_effect(0.5 + lo, 0.5 + hi, reference=0.5), minimal=0.125).word == word


def test_contradicted_needs_the_minimal_size_on_the_other_side():
    # ch4-best-8-16-subset's case: an effect half the minimal size the other way
    assert judge(_effect(-0.0089, -0.0016), minimal=0.01).word == "ruled out"
    assert judge(_effect(-0.03, -0.011), minimal=0.01).word == "contradicted"


def test_non_inferiority_with_a_stated_margin():
    assert judge(_effect(-0.04, 0.02), margin=0.05).word == "reproduced"
    assert judge(_effect(-0.04, -0.01), margin=0.05).word == "reproduced"  # worse, within
    assert judge(_effect(-0.08, 0.02), margin=0.05).word == "no clear effect"
    assert judge(_effect(-0.2, -0.06), margin=0.05).word == "contradicted"
    # for a loss (claimed lower): treatment - control up to +margin is still as good
    assert judge(_effect(-0.02, 0.04, "lower"), margin=0.05).word == "reproduced"
    assert judge(_effect(0.06, 0.2, "lower"), margin=0.05).word == "contradicted"
    assert "non-inferiority margin 0.050" in judge(_effect(-0.04, 0.02), margin=0.05).describe()


def test_every_verdict_states_a_minimal_size_or_a_margin():
    e = _effect(0.1, 0.3)
    with pytest.raises(ValueError, match="minimal size"):
        judge(e)
    with pytest.raises(ValueError, match="one of them"):
        judge(e, minimal=0.1, margin=0.1)
    with pytest.raises(ValueError, match="minimal"):
        judge(e, minimal=0.0)
    with pytest.raises(ValueError, match="margin"):
        judge(e, margin=-1.0)


def test_paired_reads_a_clear_difference_and_no_difference():
    g = torch.Generator().manual_seed(2)
    base = torch.rand(5, 300, generator=g, dtype=torch.float64)
    better = base - 0.1 + 0.01 * torch.randn(5, 300, generator=g, dtype=torch.float64)
    assert judge(paired(better, base, claimed="lower"), minimal=0.05).word == "reproduced"
    assert judge(paired(better, base, claimed="higher"), minimal=0.05).word == "contradicted"
    same = base + 0.01 * torch.randn(5, 300, generator=g, dtype=torch.float64)
    assert judge(paired(same, base, claimed="lower"), minimal=0.05).word == "ruled out"


def test_paired_with_own_examples_per_seed():
    g = torch.Generator().manual_seed(3)
    a = [torch.rand(n, generator=g) + 0.5 for n in (50, 60, 70)]
    b = [torch.rand(n, generator=g) for n in (50, 60, 70)]
    e = paired(a, b, claimed="higher", shared_examples=False)
    assert e.seeds == 3 and e.examples == 180
    assert judge(e, minimal=0.1).word == "reproduced"
    with pytest.raises(ValueError, match="shared_examples=False"):
        paired(a, b, claimed="higher")


def test_a_correlation_is_judged_by_its_interval_and_shows_its_chance_band():
    g = torch.Generator().manual_seed(4)
    xs = [torch.randn(4, 8, generator=g) for _ in range(5)]
    related = [x + 0.3 * torch.randn(4, 8, generator=g) for x in xs]
    unrelated = [torch.randn(4, 8, generator=g) for _ in range(5)]
    e = correlation(xs, related, rank_correlation, claimed="higher", permutations=60)
    assert e.chance[0] < 0 < e.chance[1] < 0.3 and e.reference == 0.0
    assert -1 < e.low < e.high < 1
    assert judge(e, minimal=0.3).word == "reproduced"
    assert "shuffled data give" in e.describe()
    e0 = correlation(xs, unrelated, rank_correlation, claimed="higher", permutations=60)
    assert judge(e0, minimal=0.3).word in ("ruled out", "no clear effect")
    within = correlation(xs, related, rank_correlation, claimed="higher", within=1, permutations=60)
    assert judge(within, minimal=0.3).word == "reproduced"
    # Fisher's scale keeps the interval inside (-1, 1) where a plain t-interval leaves it
    tight = per_seed([0.95, 0.99, 0.7, 0.98, 0.9], claimed="higher", correlation=True)
    plain = per_seed([0.95, 0.99, 0.7, 0.98, 0.9], claimed="higher")
    assert tight.high < 1 < plain.high
    # a seed whose two rankings agree exactly (r = 1) counts as a very high correlation, not
    # an infinite one that would spread the interval over most of (-1, 1)
    exact = per_seed([0.81, 0.86, 0.93, 1.0, 0.88], claimed="higher", correlation=True)
    assert 0.5 < exact.low < exact.estimate < exact.high < 1
    assert judge(exact, minimal=0.3).word == "reproduced"


# ---- several conditions ---------------------------------------------------------------


def test_combine_takes_the_primary_word_and_shows_the_others():
    def v(lo, hi):
        return judge(per_seed([lo, (lo + hi) / 2, hi], claimed="higher"), minimal=0.1)

    yes, rev, null = v(0.5, 0.6), v(-0.6, -0.5), v(-0.01, 0.01)
    c = combine({"a": yes, "b": rev, "c": null}, primary="a")
    assert c.word == "reproduced" and c.primary == "a"
    assert c.others() == "contradicted in b; ruled out in c"
    assert [n for n, _ in c.conditions] == ["a", "b", "c"]
    assert "primary a: reproduced" in c.describe()
    assert "the others at the Bonferroni level over 3 conditions" in c.describe()
    assert combine({"a": yes, "b": rev}, primary="b").word == "contradicted"
    # the primary is judged as a claim of one condition; the others' intervals are widened
    # to 1 - 0.05/3
    first, wide = dict(c.conditions)["a"].effect, dict(c.conditions)["b"].effect
    assert first.level == LEVEL and first.low == pytest.approx(yes.effect.low)
    assert wide.level == pytest.approx(1 - 0.05 / 3) and wide.high > rev.effect.high
    with pytest.raises(ValueError, match="primary"):
        combine({"a": yes}, primary="z")
    nested = combine({"x": c, "d": yes}, primary="x")  # a combined condition adds its own
    assert nested.primary == "x: a" and [n for n, _ in nested.conditions][1:] == [
        "x: b", "x: c", "d"]  # fmt: skip
    assert dict(nested.conditions)["d"].effect.level == pytest.approx(1 - 0.05 / 4)
    assert dict(nested.conditions)["x: a"].effect.level == LEVEL
    with pytest.raises(TypeError, match="primary"):
        combine({"a": yes})


def test_false_words_stay_at_their_level_over_null_conditions():
    # Four null conditions. A rule that let any clear condition decide gave a claimed word
    # (partly or better) 9.6% of the time. The primary alone decides, at 95%: a claimed word
    # about as often as for one condition (2.5%, one side), and the other three conditions'
    # Bonferroni intervals give a false contradicted one in at most 5% of the claims.
    g = torch.Generator().manual_seed(6)
    claimed = contradicted = 0
    n = 2000
    for _ in range(n):
        conds = {
            f"c{i}": judge(per_seed(torch.randn(5, generator=g), claimed="higher"), minimal=0.5)
            for i in range(4)
        }
        v = combine(conds, primary="c0")
        claimed += v.word in ("reproduced", "partly")
        contradicted += "contradicted" in v.others()
    assert 0.01 <= claimed / n <= 0.04  # 2.5% up to the simulation's noise
    assert contradicted / n <= 0.05


# ---- competence -----------------------------------------------------------------------


def test_competence_before_verdict():
    e = per_seed([0.5, 0.6, 0.7, 0.55, 0.65], claimed="higher")
    learned = competence(
        "the baseline learned the lookup",
        [0.004, 1.3, 1.2, 1.35, 1.1],
        measure="held-out loss",
        at_most=0.1,
    )
    v = judge(e, minimal=0.1, competence=learned)
    assert v.word == NOT_AT_THIS_SCALE
    assert v.reason == "the baseline learned the lookup on 1 of 5 seeds (held-out loss at most 0.1)"
    assert v.reason in v.describe()
    ok = competence("the baseline learned it", [0.99] * 5, measure="accuracy", at_least=0.95)
    assert judge(e, minimal=0.1, competence=ok).word == "reproduced"
    # 90% of the seeds must pass: 9 of 10 do, 4 of 5 do not
    assert COMPETENT_SHARE == 0.9
    nine = competence("it", [1.0] * 9 + [0.0], measure="m", at_least=0.5)
    four = competence("it", [1.0] * 4 + [0.0], measure="m", at_least=0.5)
    assert nine.ok and not four.ok
    with pytest.raises(ValueError, match="one value per seed"):
        judge(e, minimal=0.1, competence=nine)
    with pytest.raises(ValueError, match="at_least"):
        competence("it", [1.0], measure="m", at_least=1, at_most=2)
    with pytest.raises(TypeError, match="Competence"):
        judge(e, minimal=0.1, competence=[0.9])
    # several checks: any that fails decides
    v2 = judge(e, minimal=0.1, competence=[ok, learned])
    assert v2.word == NOT_AT_THIS_SCALE and "1 of 5" in v2.reason
    # one model, many text windows: the reason counts windows, and pooling keeps the unit
    read = competence("the model reads it", [4.0, 5.0, 3.0], measure="loss", at_most=4.6,
                      unit="window")  # fmt: skip
    w = judge(per_seed([0.2, 0.3, 0.25], claimed="higher"), minimal=0.1, competence=read)
    assert w.reason == "the model reads it on 2 of 3 windows (loss at most 4.6)"
    assert pool([w.record(), w.record()]).reason.endswith("on 4 of 6 windows (loss at most 4.6)")
    with pytest.raises(ValueError, match="unit"):
        competence("it", [1.0], measure="m", at_least=0.5, unit=" ")


# ---- seeds that split -----------------------------------------------------------------


@pytest.mark.parametrize("k, n", [(0, 5), (1, 5), (5, 5), (3, 10), (7, 15)])
def test_clopper_pearson_matches_the_beta_quantiles(k, n):
    lo = 0.0 if k == 0 else stats.beta.ppf(0.025, k, n - k + 1)
    hi = 1.0 if k == n else stats.beta.ppf(0.975, k + 1, n - k)
    assert clopper_pearson(k, n) == pytest.approx((lo, hi), abs=1e-9)


def test_solved_share_is_exact_where_the_t_interval_is_not():
    # Seeds that solve the task with probability 0.2 and then move by 1.3 (chapter 10's
    # pattern). The t-interval over 5 seeds covers the mean effect about 70% of the time;
    # the solved share's exact interval covers the solving probability at least 95%.
    g = torch.Generator().manual_seed(7)
    p, shift = 0.2, 1.3
    for K in (3, 5):
        t_hits = share_hits = 0
        for _ in range(400):
            solved = torch.rand(K, generator=g) < p
            values = shift * solved + 0.05 * torch.randn(K, generator=g)
            e = per_seed(values, claimed="higher")
            t_hits += e.low <= p * shift <= e.high
            s = solved_share(solved.tolist())
            share_hits += s.low <= p <= s.high
        assert t_hits / 400 < 0.8, (K, t_hits)
        assert share_hits / 400 >= 0.95, (K, share_hits)


def test_split_seeds_finds_or_is_told_the_split():
    losses = [0.004, 1.31, 1.29, 1.36, 1.33]
    assert find_split(losses) is not None
    assert split_seeds(losses) == (True, False, False, False, False)
    assert split_seeds(losses, threshold=0.1) == (True, False, False, False, False)
    assert split_seeds([0.9, 0.2], threshold=0.5, solved="above") == (True, False)
    assert paired(torch.tensor(losses)[:, None] + torch.zeros(5, 4), torch.zeros(5, 4),
                  claimed="lower").split  # fmt: skip
    g = torch.Generator().manual_seed(8)
    normal = sum(find_split(torch.randn(5, generator=g).tolist()) is not None for _ in range(200))
    assert normal <= 20  # about 4% of normal draws
    assert find_split([0.0, 1.0, 1.0]) is None  # 3 seeds never split
    with pytest.raises(ValueError, match="threshold"):
        split_seeds([0.1, 0.2, 0.3, 0.25, 0.15])
    e = solved_share(split_seeds(losses))
    assert e.estimate == pytest.approx(0.2) and e.kind == "share"
    assert judge(e, minimal=0.5).word == "partly"  # 1 of 5: 0.005 to 0.716
    assert judge(solved_share([False] * 5), minimal=0.6).word == "ruled out"  # 0 to 0.52
    assert "exact interval" in e.describe()


# ---- pooling seed sets ----------------------------------------------------------------


def _record(v, first_seed):
    return json.loads(json.dumps(number_seeds(v.record(), first_seed)))


def test_pooling_two_seed_sets_equals_the_union():
    g = torch.Generator().manual_seed(9)
    # two seed sets, each scored on its own test set shared by its seeds
    a = _experiment(g, 5, 60, 0.1, 0.3, 0.5)
    b = _experiment(g, 5, 60, 0.1, 0.3, 0.5)
    va = judge(paired(a, torch.zeros_like(a), claimed="higher"), minimal=0.05)
    vb = judge(paired(b, torch.zeros_like(b), claimed="higher"), minimal=0.05)
    union = paired(
        torch.cat([a, b]), torch.zeros(10, 60), claimed="higher", test_sets=[0] * 5 + [1] * 5
    )
    for records in ([_record(va, 0), _record(vb, 5)], [_record(vb, 5), _record(va, 0)]):
        p = pool(records)
        assert (p.effect.estimate, p.effect.low, p.effect.high) == pytest.approx(
            (union.estimate, union.low, union.high), abs=1e-12
        )
        assert p.effect.seeds == 10 and p.word == judge(union, minimal=0.05).word
    # one number per seed: the pool is the t-interval of the union
    x, y = torch.randn(5, generator=g), torch.randn(4, generator=g)
    px = pool([_record(judge(per_seed(x, claimed="higher"), minimal=0.1), s) for s in (0,)] +
              [_record(judge(per_seed(y, claimed="higher"), minimal=0.1), 5)])  # fmt: skip
    u = per_seed(torch.cat([x, y]), claimed="higher")
    assert (px.effect.low, px.effect.high) == pytest.approx((u.low, u.high), abs=1e-12)
    # a solved share: the exact interval of the union's count
    s1 = judge(solved_share([True, False, True]), minimal=0.2)
    s2 = judge(solved_share([True, True, True, False]), minimal=0.2)
    ps = pool([_record(s1, 0), _record(s2, 3)])
    assert (ps.effect.low, ps.effect.high) == pytest.approx(clopper_pearson(5, 7))


def test_pooling_keeps_the_rule_and_refuses_what_does_not_pool():
    v = judge(per_seed([0.2, 0.3, 0.25], claimed="higher"), minimal=0.1)
    with pytest.raises(ValueError, match="each seed counts once"):
        pool([_record(v, 0), _record(v, 2)])  # seeds 2 in both
    w = judge(per_seed([0.2, 0.3, 0.25], claimed="higher"), minimal=0.2)
    with pytest.raises(ValueError, match="minimal size"):
        pool([_record(v, 0), _record(w, 3)])
    comp = competence("it", [1.0, 0.0, 1.0], measure="m", at_least=0.5)
    vc = judge(per_seed([0.2, 0.3, 0.25], claimed="higher"), minimal=0.1, competence=comp)
    ok = competence("it", [1.0] * 3, measure="m", at_least=0.5)
    vok = judge(per_seed([0.2, 0.3, 0.25], claimed="higher"), minimal=0.1, competence=ok)
    both = pool([_record(vok, 0), _record(vc, 3)])
    assert both.word == NOT_AT_THIS_SCALE and "on 5 of 6 seeds" in both.reason
    # combined claims pool condition by condition, with the same primary
    c1 = combine({"a": v, "b": v}, primary="a")
    c2 = combine({"a": v, "b": v}, primary="b")
    assert pool([_record(c1, 0), _record(c1, 3)]).effect.seeds == 6
    with pytest.raises(ValueError, match="primary"):
        pool([_record(c1, 0), _record(c2, 3)])
    assert pooled([v.effect]).low == pytest.approx(v.effect.low)


def test_a_pooled_interval_covers_the_true_effect():
    # Two seed sets, each with its own test examples: seed and example noise both count.
    g = torch.Generator().manual_seed(10)
    hits = 0
    for _ in range(200):
        parts = []
        for _ in range(2):
            d = _experiment(g, 5, 30, 0.2, 0.3, 0.3)
            parts.append(paired(d, torch.zeros_like(d), claimed="higher"))
        e = pooled(parts)
        hits += e.low <= 0.2 <= e.high
    assert 0.90 <= hits / 200 <= 0.995


def test_seed_sets_record_what_pooling_needs():
    g = torch.Generator().manual_seed(11)
    d = _experiment(g, 3, 20, 0.0, 0.1, 0.1)
    e = paired(d, torch.zeros_like(d), claimed="higher")
    (s,) = e.sets
    assert isinstance(s, SeedSet) and s.shared and s.examples == 20
    assert s.values == pytest.approx(d.mean(1).tolist())
    assert s.example_var == pytest.approx(float(d.mean(0).var()) / 20)
    r = number_seeds(judge(e, minimal=0.1).record(), 100)
    assert r["effect"]["sets"][0]["ids"] == [100, 101, 102]


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
    with pytest.raises(ValueError, match="test_sets"):
        paired(ok, ok, claimed="higher", test_sets=[0, 1])
    with pytest.raises(TypeError, match="effect"):
        judge("reproduced", minimal=0.1)
    with pytest.raises(TypeError, match="conditions"):
        combine({}, primary="a")
    with pytest.raises(TypeError, match="solved"):
        solved_share([0.5, 1.0, 0.0])


def test_the_description_names_the_examples_and_the_replicates():
    g = torch.Generator().manual_seed(5)
    a = torch.rand(3, 20, generator=g, dtype=torch.float64)
    e = paired(a + 1, a, claimed="higher", example_name="test sentences")
    assert "3 seeds x 20 test sentences" in e.describe()
    with pytest.raises(ValueError, match="example_name"):
        paired(a, a, claimed="higher", example_name="")
    f = per_seed([0.2, 0.3, 0.25], claimed="higher", seed_name="folds")
    assert "3 folds" in f.describe() and "seeds" not in f.describe()
    with pytest.raises(TypeError, match="seed_name"):
        per_seed([0.2, 0.3, 0.25], claimed="higher", seed_name="")
