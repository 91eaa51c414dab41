"""analysis/stats.py: pass@k, the crossed bootstrap and its calibration by simulation, the bootstrap p-values,
Holm, the verdict pieces, the crossover and the band, contrasts and the token summary (the
beta-binomial model beyond n: test_passmodel.py; power: test_power.py). On arrays with a known
answer; a reference is written here independently (loops over the documented formulas, scipy,
exact fractions, hand-computed numbers), never stats compared with itself."""

import math
from fractions import Fraction

import numpy as np
import pytest

from analysis import stats

# ----------------------------------------------------------------------------- pass@k


def ref_pass1(counts, n):
    return np.asarray(counts, float) / n  # pass@1 = c / n


def _exact(n, c, k):
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def test_pass_at_k_matches_exact_fractions():
    cases = [(n, c, k) for n in range(1, 25) for c in range(n + 1) for k in range(1, n + 1)]
    cases += [
        (n, c, k)
        for n in (32, 64, 128)
        for c in (0, 1, 2, 5, n // 2, n - 3, n - 1, n)
        for k in (1, 2, 8, 16, 32, n - c, n)
        if 1 <= k <= n
    ]
    for n, c, k in cases:
        assert stats.pass_at_k(n, c, k) == pytest.approx(_exact(n, c, k), abs=1e-12), (n, c, k)
    assert stats.pass_at_k(32, 0, 32) == 0.0 and stats.pass_at_k(32, 32, 1) == 1.0 and stats.pass_at_k(32, 30, 3) == 1.0
    assert stats.pass_at_k(10, 1, 1) == pytest.approx(0.1)
    for n in (1, 5, 32, 100):  # non-decreasing in k
        for c in range(n + 1):
            curve = [stats.pass_at_k(n, c, k) for k in range(1, n + 1)]
            assert all(b >= a - 1e-15 for a, b in zip(curve, curve[1:])), (n, c)
    assert np.allclose(stats.per_problem([0, 4, 8], 8, 1), [0, 0.5, 1])
    curves = stats.pass_at_k_curves([0, 3, 8, 5], 8, 6)
    assert curves.shape == (4, 6)
    for i, c in enumerate([0, 3, 8, 5]):
        for k in range(1, 7):
            assert curves[i, k - 1] == pytest.approx(_exact(8, c, k), abs=1e-12)


@pytest.mark.parametrize("n,k", [(8, 9), (8, 0), (1, 2), (32, 33)])
def test_pass_at_k_rejects_k_outside_1_to_n(n, k):
    with pytest.raises(ValueError):
        stats.pass_at_k(n, 1, k)  # never a silent skip


def test_pass_at_k_rejects_counts_outside_0_to_n():
    for c in (-1, 9):
        with pytest.raises(ValueError):
            stats.pass_at_k(8, c, 1)


def _pass1_vectors(seed=0, n_problems=128, n=32):
    rng = np.random.default_rng(seed)
    p = rng.beta(0.6, 1.5, n_problems)  # problem difficulty, shared by both models
    return ref_pass1(rng.binomial(n, np.clip(p + 0.08, 0, 1)), n), ref_pass1(rng.binomial(n, p), n)


def paired_interval(rl: np.ndarray, base: np.ndarray, idx: np.ndarray, ci: float) -> tuple[float, tuple[float, float]]:
    """The first version's paired bootstrap over problems (one seed), written out as the reference:
    the mean difference and the percentile interval of mean_i rl[idx[b,i]] - mean_i base[idx[b,i]]."""
    diffs = rl[idx].mean(axis=1) - base[idx].mean(axis=1)  # (B,)
    lo, hi = np.quantile(diffs, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return float(rl.mean() - base.mean()), (float(lo), float(hi))


def test_paired_interval_agrees_with_scipy_bootstrap():
    import scipy.stats

    rl, base = _pass1_vectors()
    idx = stats.resample_indices(len(rl), 20000, seed=0)
    assert idx.shape == (20000, 128) and idx.min() >= 0 and idx.max() < 128
    d, (lo, hi) = paired_interval(rl, base, idx, 0.95)
    ref = scipy.stats.bootstrap(
        (rl, base),
        statistic=lambda a, b, axis=-1: a.mean(axis) - b.mean(axis),
        paired=True,
        vectorized=True,
        method="percentile",
        confidence_level=0.95,
        n_resamples=20000,
        random_state=np.random.default_rng(1),
    )
    assert d == pytest.approx(rl.mean() - base.mean(), abs=1e-12)
    assert lo == pytest.approx(ref.confidence_interval.low, abs=0.01) and hi == pytest.approx(
        ref.confidence_interval.high, abs=0.01
    )


def test_crossed_with_one_seed_equals_the_paired_bootstrap():
    """Crossed with one seed equals the paired bootstrap to the last digit."""
    rl, base = _pass1_vectors(seed=5)
    for seed in (0, 7):
        idx = stats.resample_indices(128, 2000, seed)
        sidx = stats.seed_resample_indices(1, 2000, seed)
        reps = stats.crossed_replicates(rl[None], base, idx, sidx)
        old = rl[idx].mean(axis=1) - base[idx].mean(axis=1)  # the first version's replicates, written out
        assert np.array_equal(reps, old)
        d, ci = paired_interval(rl, base, idx, 0.95)
        assert stats.percentile_interval(reps, 0.95) == ci
        assert stats.crossed_estimate(rl[None], base)[0] == d


def test_crossed_replicates_by_hand():
    rl = np.array([[1.0, 0.0, 0.5], [0.0, 0.0, 1.0]])  # (S=2, N=3)
    base = np.array([0.5, 0.5, 0.0])
    idx = np.array([[0, 0, 2], [1, 2, 2]])  # (B=2, N=3)
    sidx = np.array([[1, 1], [0, 1]])  # replicate 0 draws seed 1 twice; replicate 1 draws both
    reps = stats.crossed_replicates(rl, base, idx, sidx)
    # replicate 0: seed 1 on problems 0,0,2: (0+0+1)/3 - (0.5+0.5+0)/3 = 0
    # replicate 1: problems 1,2,2, base (0.5+0+0)/3 = 1/6: seed 0 (0+0.5+0.5)/3 - 1/6 = 1/6;
    # seed 1 (0+1+1)/3 - 1/6 = 1/2; their mean 1/3
    assert reps == pytest.approx([0.0, 1 / 3], abs=1e-15)
    d, per_seed = stats.crossed_estimate(rl, base)
    assert per_seed == pytest.approx([0.5 - 1 / 3, 1 / 3 - 1 / 3]) and d == pytest.approx((0.5 - 1 / 3) / 2)
    # a per-seed reference (H3: two checkpoints of the same seed)
    ref = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert stats.crossed_replicates(rl, ref, idx, sidx) == pytest.approx([1 / 3 - 1, (1 / 3 + (2 / 3 - 1)) / 2])


def test_resample_indices_seeded_and_seed_draws_independent():
    """Resample indices seeded and seed draws independent of problem draws."""
    a, b, c = stats.resample_indices(10, 50, 7), stats.resample_indices(10, 50, 7), stats.resample_indices(10, 50, 8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    s3 = stats.seed_resample_indices(3, 500, 7)
    assert s3.shape == (500, 3) and set(np.unique(s3)) == {0, 1, 2}
    assert np.array_equal(s3, stats.seed_resample_indices(3, 500, 7)) and not np.array_equal(
        s3, stats.seed_resample_indices(3, 500, 8)
    )
    assert not np.array_equal(stats.seed_resample_indices(10, 50, 7), a)  # its own generator
    assert not stats.seed_resample_indices(1, 50, 7).any()


def test_seed_spread_widens_the_interval():
    rng = np.random.default_rng(2)
    base = rng.uniform(0.1, 0.6, 128)
    same = np.stack([base + 0.05] * 3)  # three seeds that agree
    spread = np.stack([base + 0.05 + u for u in (-0.04, 0.0, 0.04)])  # the same mean, seeds disagree
    idx, sidx = stats.resample_indices(128, 2000, 0), stats.seed_resample_indices(3, 2000, 0)
    w_same = np.ptp(stats.percentile_interval(stats.crossed_replicates(same, base, idx, sidx), 0.95))
    w_spread = np.ptp(stats.percentile_interval(stats.crossed_replicates(spread, base, idx, sidx), 0.95))
    assert w_same < 1e-9 < 0.05 < w_spread  # identical shifts: no problem variance; seeds: +-0.04


def _coverage(S, seed_sd, D=200, Bsim=300, N=128, n=32, delta=0.10, seed=0):
    """Simulated data sets with a known true Delta pass@1 = delta: problem difficulty p_i ~ U(0.2, 0.55);
    each seed s adds u_s ~ N(0, seed_sd) and per-problem noise e_is ~ N(0, 0.05) (clipped to [0, 0.9],
    which binds only beyond 4 standard deviations); counts are binomial(n, .). Returns the shares of
    95% and 90% intervals covering delta, and the share with p_above < 0.025 when the truth is Delta = 0."""
    rng = np.random.default_rng(seed)
    cover95 = cover90 = false_rise = 0
    for t in range(D):
        p = rng.uniform(0.2, 0.55, N)
        q = np.clip(
            p + rng.normal(0, seed_sd, S)[:, None] + rng.normal(0, 0.05, (S, N)), 0, 0.9
        )  # (S, N), without the effect
        base = ref_pass1(rng.binomial(n, p), n)
        idx, sidx = stats.resample_indices(N, Bsim, t), stats.seed_resample_indices(S, Bsim, t)
        reps = stats.crossed_replicates(ref_pass1(rng.binomial(n, q + delta), n), base, idx, sidx)
        lo, hi = stats.percentile_interval(reps, 0.95)
        cover95 += lo <= delta <= hi
        lo, hi = stats.percentile_interval(reps, 0.90)
        cover90 += lo <= delta <= hi
        false_rise += stats.p_above(stats.crossed_replicates(ref_pass1(rng.binomial(n, q), n), base, idx, sidx)) < 0.025
    return cover95 / D, cover90 / D, false_rise / D


@pytest.mark.parametrize("S,seed_sd", [(1, 0.0), (3, 0.01)])
def test_crossed_interval_is_calibrated_by_simulation(S, seed_sd):
    """200 data sets x 300 replicates. Binomial tolerance, 3 standard errors: 95% -> [0.904, 0.996];
    90% -> [0.836, 0.964]; a one-sided level-0.025 test rejects a true null in at most 6.5% of data sets.
    (With 3 seeds and a seed spread as large as the problem-sampling error the coverage falls below
    nominal; PLAN.md section 7 says so.)"""
    c95, c90, false_rise = _coverage(S, seed_sd, seed=S)
    assert 0.904 <= c95 <= 0.996, c95
    assert 0.836 <= c90 <= 0.964, c90
    assert false_rise <= 0.065, false_rise


# ----------------------------------------------------------------------------- p-values and Holm


def test_bootstrap_p_values_by_hand():
    reps = np.array([-0.2, -0.1, 0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5])  # B = 9
    assert stats.p_above(reps) == pytest.approx((1 + 3) / 10)  # #{<= 0} = 3
    assert stats.p_below(reps) == pytest.approx((1 + 7) / 10)  # #{>= 0} = 7
    assert stats.p_above(reps, -0.15) == pytest.approx((1 + 1) / 10)
    # TOST, margin 0.1: p_lo = (1 + #{<= -0.1}) / 10 = 0.3; p_hi = (1 + #{>= 0.1}) / 10 = 0.6
    assert stats.p_equivalence(reps, 0.1) == pytest.approx(0.6)
    assert stats.p_equivalence(np.zeros(1999), 0.1) == pytest.approx(1 / 2000)
    assert stats.p_above(np.full(1999, 0.3)) == pytest.approx(1 / 2000) and stats.p_below(np.full(1999, 0.3)) == 1.0


@pytest.mark.parametrize(
    "p,expected",
    [
        ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02]),  # 4x0.005, 3x0.01, 2x0.03, max(0.06, 1x0.04)
        ([0.02, 0.02, 0.5], [0.06, 0.06, 0.5]),  # ties: 3x0.02 = 0.06, then max(0.06, 2x0.02)
        ([0.5, 0.02, 0.02], [0.5, 0.06, 0.06]),  # the same, in another order
        ([0.3, 0.4], [0.6, 0.6]),  # 2x0.3, max(0.6, 0.4): step-down monotone
        ([0.6, 0.9], [1.0, 1.0]),  # capped at 1
        ([0.04], [0.04]),  # one test: no correction
        ([0.001, 0.001, 0.001, 0.001], [0.004, 0.004, 0.004, 0.004]),
        ([], []),
    ],
)
def test_holm_hand_computed(p, expected):
    assert stats.holm(p).tolist() == pytest.approx(expected, abs=1e-15)


def test_holm_with_levels_by_hand():
    # levels 0.025 and 0.05: p' = p / level = [0.4, 0.6]; 2 x 0.4 = 0.8, max(0.8, 1 x 0.6) = 0.8;
    # back on each test's scale: [0.025 x 0.8, 0.05 x 0.8] = [0.02, 0.04], both below their levels.
    assert stats.holm([0.01, 0.03], [0.025, 0.05]).tolist() == pytest.approx([0.02, 0.04])
    # the same p-values, the first test now at level 0.05: p' = [0.2, 0.6] -> [0.4, 0.6] -> [0.02, 0.03]
    assert stats.holm([0.01, 0.03], [0.05, 0.05]).tolist() == pytest.approx([0.02, 0.03])
    # a TOST p of 0.04 ranks before a one-sided 0.015 (0.8 < 0.6? no: 0.015 / 0.025 = 0.6 ranks first):
    # 2 x 0.6 = 1.2 -> 0.025 x 1.2 = 0.03 (not rejected); max(1.2, 0.8) -> 0.05 x 1.2 = 0.06 (not rejected)
    assert stats.holm([0.015, 0.04], [0.025, 0.05]).tolist() == pytest.approx([0.03, 0.06])
    adj = stats.holm([0.001, 0.2, 0.03, 0.03, 0.8], [0.025, 0.05, 0.025, 0.05, 0.025])
    assert np.all(adj >= [0.001, 0.2, 0.03, 0.03, 0.8]) and np.all(adj <= 1)
    with pytest.raises(ValueError):
        stats.holm([0.1, 1.2])
    with pytest.raises(ValueError):
        stats.holm([0.1, 0.2], [0.05])


# ----------------------------------------------------------------------------- verdict pieces


@pytest.mark.parametrize(
    "rises,falls,equivalent,answer",
    [
        (True, False, True, True),  # rises, equivalent
        (True, True, False, True),  # rises, falls
        (True, True, True, True),  # both (a small significant fall inside the margin)
        (True, False, False, False),  # rises, the ceiling neither equivalent nor lower
        (False, True, True, False),  # pass@1 not shown to rise
        (True, True, None, True),  # equivalence not asked, but the ceiling falls: yes
        (True, False, None, None),  # not asked and no fall: cannot be decided on this set
        (False, False, None, False),  # not asked, pass@1 not shown to rise: no
    ],
)
def test_selection_answer_branches(rises, falls, equivalent, answer):
    assert stats.selection_answer(rises, falls, equivalent) is answer


def test_tie_tolerance_counts_rounding_error_replicates_as_ties():
    """Replicates that equal the null value in exact arithmetic but come out 1e-17 above it count
    against the alternative with the tolerance (PLAN_CHANGES.md change 29) and for it without (tie = 0)."""
    reps = np.array([1e-17] * 5 + [0.1] * 5)
    assert stats.p_above(reps) == pytest.approx(6 / 11) and stats.p_above(reps, tie=0.0) == pytest.approx(1 / 11)
    assert stats.p_below(-reps) == pytest.approx(6 / 11) and stats.p_below(-reps, tie=0.0) == pytest.approx(1 / 11)
    assert stats.p_above(np.array([1e-9] * 4)) == pytest.approx(1 / 5)  # a real difference, not a tie
    m = 0.1
    assert stats.p_equivalence(np.array([m - 1e-17, 0.0, 0.0]), m) == pytest.approx(2 / 4)
    assert stats.p_equivalence(np.array([m - 1e-17, 0.0, 0.0]), m, tie=0.0) == pytest.approx(1 / 4)


def test_mc_se_matches_the_spread_of_repeated_bootstrap_p_values():
    """2000 repetitions of a p-value from B = 400 replicates with true p = 0.03: their SD is the
    binomial sqrt(p (1 - p) / B) within 10%."""
    rng = np.random.default_rng(0)
    B, p = 400, 0.03
    ps = [stats.p_above(rng.normal(1.8808, 1.0, B)) for _ in range(2000)]  # P(N(1.88, 1) <= 0) = 0.03
    assert np.std(ps) == pytest.approx(stats.mc_se(p, B), rel=0.1)


def test_holm_mc_se_matches_the_spread_of_adjusted_p_values():
    """Three tests at levels (0.025, 0.025, 0.05) with true p = (0.004, 0.01, 0.2): 1500 repetitions
    of the raw p-values from B = 500 replicates each; each adjusted p's SD is holm_mc_se's within 20%
    (the third, 0.2 times 1, is not capped)."""
    rng = np.random.default_rng(1)
    B, true, lv = 500, np.array([0.004, 0.01, 0.2]), [0.025, 0.025, 0.05]
    adj = np.array([stats.holm(rng.binomial(B, true) / B, lv) for _ in range(1500)])
    se = stats.holm_mc_se(true, lv, B)
    assert adj.std(axis=0) == pytest.approx(se, rel=0.2)
    assert stats.holm_mc_se([0.5, 0.9], [0.025, 0.025], B).tolist() == [0.0, 0.0]  # both capped at 1


@pytest.mark.parametrize(
    "d1,ci1,dk,cik,rises,unchanged,falls",
    [
        (0.10, (0.02, 0.18), 0.00, (-0.05, 0.05), True, True, False),
        (0.05, (0.00, 0.10), 0.00, (-0.05, 0.05), False, True, False),  # lower bound exactly 0 is not "> 0"
        (0.10, (0.05, 0.15), 0.04, (0.00, 0.08), True, True, False),  # contains 0 (bound included)
        (0.30, (0.20, 0.40), 0.05, (0.01, 0.09), True, True, False),  # |dk| < |d1| / 3 though the interval excludes 0
        (0.30, (0.20, 0.40), 0.1001, (0.05, 0.15), True, False, False),
        (-0.30, (-0.40, -0.20), 0.05, (0.01, 0.09), False, True, False),  # v1's clause fired when pass@1 fell
        (0.20, (0.10, 0.30), -0.20, (-0.30, -0.10), True, False, True),
        (0.30, (0.20, 0.40), -0.05, (-0.08, -0.02), True, True, True),  # v1: unchanged and falls together
    ],
)
def test_verdict_v1_hand_picked(d1, ci1, dk, cik, rises, unchanged, falls):
    assert stats.verdict_v1(d1, ci1, dk, cik) == {
        "pass1_rises_v1": rises,
        "ceiling_unchanged_v1": unchanged,
        "ceiling_falls_v1": falls,
    }


def test_third_clause_interval_by_hand():
    reps1 = np.array([0.30, 0.30, 0.60, 0.60])
    repsk = np.array([0.05, -0.05, 0.10, 0.30])
    # T = |dk| - d1 / 3 = [-0.05, -0.05, -0.10, +0.10]; percentiles of 4 values by linear interpolation
    lo, hi = stats.third_clause_interval(reps1, repsk, 0.5)  # quartiles: positions 0.75 and 2.25
    assert lo == pytest.approx(-0.10 + 0.75 * 0.05) and hi == pytest.approx(-0.05 + 0.25 * 0.15)


@pytest.mark.parametrize(
    "curve,code",
    [
        ([0.2, 0.1, 0.0], 3),  # the first k not above is k = 3 (Delta <= 0 counts as caught up)
        ([0.2, -0.1, 0.3], 2),  # the first k counts, even if RL is above again later
        ([0.2, 0.1, 0.05], stats.ALWAYS_ABOVE),
        ([-0.1, 0.2, 0.3], stats.NEVER_ABOVE),
        ([0.0, 0.2, 0.3], stats.NEVER_ABOVE),  # equal at k = 1 is not above
        ([0.1], stats.ALWAYS_ABOVE),
    ],
)
def test_crossover_codes(curve, code):
    assert int(stats.crossover_codes(np.array(curve))) == code


def test_crossover_summary_distinguishes_the_outcomes():
    reps = np.array([[0.1, 0.0, 0.1]] * 5 + [[0.1, 0.1, -0.1]] * 3 + [[0.1, 0.1, 0.1]] * 1 + [[-0.1, 0.1, 0.1]] * 1)
    c = stats.crossover_summary(np.array([0.1, 0.1, 0.1]), reps, 0.95)
    assert c["point"] == {"outcome": "always above", "k": None}
    assert (c["cross_share"], c["always_share"], c["never_share"]) == pytest.approx((0.8, 0.1, 0.1))
    assert c["median"] == 2 and c["ci"] == pytest.approx([2, 3])
    c = stats.crossover_summary(np.array([-0.1, 0.1, 0.1]), np.array([[-0.1, 0.1, 0.1]] * 4), 0.95)
    assert c["point"] == {"outcome": "never above", "k": None} and c["never_share"] == 1
    assert c["median"] is None and c["ci"] is None and c["cross_share"] == 0
    assert stats.crossover_summary(np.array([0.1, 0.0]), reps[:5, :2], 0.95)["point"] == {"outcome": "crosses", "k": 2}


def test_simultaneous_band_covers_whole_curves():
    rng = np.random.default_rng(0)
    point = np.array([0.1, 0.2, 0.3, 0.3])
    reps = point + rng.normal(0, [0.01, 0.02, 0.05, 0.05], (4000, 4)) * np.array(
        [1, 1, 1, 0]
    )  # the last k has no spread
    lo, hi, crit = stats.simultaneous_band(point, reps, 0.95)
    inside = np.all((reps >= lo - 1e-12) & (reps <= hi + 1e-12), axis=1).mean()
    assert inside == pytest.approx(0.95, abs=0.002)  # by construction, whole curves
    # three independent normal k's (the fourth has no spread): P(max |Z| < c) = 0.95 at c = Phi^-1((1 + 0.95^(1/3)) / 2)
    assert crit == pytest.approx(2.3877, abs=0.05)
    assert lo[3] == hi[3] == 0.3
    # one k: the band is point +- the 95% quantile of |t|, i.e. about 1.96 standard errors
    lo1, hi1, crit1 = stats.simultaneous_band(point[:1], reps[:, :1], 0.95)
    assert crit1 == pytest.approx(1.96, abs=0.08)


# ----------------------------------------------------------------------------- contrasts, shares, tokens


def test_condition_contrast_by_hand_and_independent_seed_draws():
    """Two conditions (2 seeds each) on 3 problems, one k. The contrast's replicates equal
    mean_j a[sidx_a[b,j], idx[b]] - mean_j b[sidx_b[b,j], idx[b]], written out here; the base cancels."""
    a = np.array([[1.0, 0.0, 0.5], [0.5, 0.5, 0.5]])[..., None]  # (S=2, N=3, K=1)
    b = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])[..., None]
    base = np.array([0.2, 0.1, 0.0])[:, None]
    idx = np.array([[0, 0, 2], [1, 2, 2], [0, 1, 2]])
    sa, sb = np.array([[1, 1], [0, 1], [0, 0]]), np.array([[0, 0], [1, 0], [1, 1]])
    summ, ra, rb = stats.condition_contrast(a, b, base, idx, sa, sb, 0.95)
    ref = [
        np.mean([a[j, idx[r], 0].mean() for j in sa[r]]) - np.mean([b[j, idx[r], 0].mean() for j in sb[r]])
        for r in range(3)
    ]
    assert (ra - rb)[:, 0] == pytest.approx(ref, abs=1e-15)
    assert summ["diff"] == pytest.approx([0.5 - 0.5]) and summ["delta_a"] == pytest.approx([0.5 - 0.1])
    assert summ["ci_passk"] == pytest.approx(list(np.quantile(ref, [0.025, 0.975])))
    s1, s2 = stats.seed_resample_indices(3, 500, 0), stats.seed_resample_indices(3, 500, 0, stream=2)
    assert np.array_equal(s1, stats.seed_resample_indices(3, 500, 0, stream=1)) and not np.array_equal(s1, s2)


def test_ratio_estimate_and_when_it_is_not_estimable():
    num, den = np.array([0.1, 0.2, 0.3, 0.2]), np.array([0.2, 0.4, 0.3, 0.4])
    r = stats.ratio_estimate(0.2, 0.4, num, den, 0.5)
    assert r["estimable"] and r["share"] == 0.5 and r["ci"] == pytest.approx(list(np.quantile(num / den, [0.25, 0.75])))
    r = stats.ratio_estimate(0.2, 0.1, num, np.array([-0.1, 0.1, 0.2, 0.3]), 0.95)
    assert r == {"estimable": False, "share": None, "ci": None, "why": "the reference gain's 95% interval contains 0"}


def test_lead_crossover_from_either_side():
    rft = stats.lead_crossover(np.array([-0.25, -0.1, 0.0]), np.array([[-0.25, -0.1, 0.0]] * 3), 0.95)
    assert rft["leader_at_k1"] == "b" and rft["point"] == {"outcome": "crosses", "k": 3}
    sft = stats.lead_crossover(np.array([0.25, 0.1, -0.5]), np.array([[0.25, 0.1, -0.5]] * 3), 0.95)
    assert sft["leader_at_k1"] == "a" and sft["point"] == {"outcome": "crosses", "k": 3}
    assert stats.lead_crossover(np.zeros(3), np.zeros((3, 3)), 0.95)["leader_at_k1"] == "tie"


TOKEN_PROBLEMS = [
    {
        "id": 0,
        "classes": [0, 0, 1, 0, 2, 0, 0, 0, 0, 0],
        "ranks": [1, 1, 3, 1, 7, 1, 1, 1, 1, 1],
        "base_entropy": [0.2, 0.2, 2.0, 0.2, 2.0, 0.2, 0.2, 0.2, 0.2, 0.2],
    },
    {"id": 1, "classes": [0] * 10, "ranks": [1] * 10, "base_entropy": [0.2] * 10},
]


def test_token_summary_by_hand():
    s = stats.token_summary(TOKEN_PROBLEMS)
    assert (s["positions"], s["unchanged"], s["reranked"], s["shifted"]) == (20, 18, 1, 1)
    assert (s["share_unchanged"], s["share_reranked"], s["share_shifted"]) == pytest.approx((0.9, 0.05, 0.05))
    assert s["mean_rank_changed"] == 5 and s["base_entropy_changed"] == pytest.approx(2.0)
    assert s["base_entropy_unchanged"] == pytest.approx(0.2) and s["entropy_ratio"] == pytest.approx(10.0)
    same = stats.token_summary(
        [{"id": 0, "classes": [0] * 4, "ranks": [1] * 4, "base_entropy": [0.5] * 4}]
    )  # a model against itself
    assert same["share_unchanged"] == 1 and same["mean_rank_changed"] is None and same["entropy_ratio"] is None


def test_compare_conditions_against_a_reference_loop():
    """Counts in, the documented draws written out: problems default_rng(seed), condition a's seeds
    default_rng([seed, 1]), condition b's default_rng([seed, 2]); pass@1 = c / n."""
    rng = np.random.default_rng(9)
    a, b, base = rng.binomial(8, 0.5, (3, 25)), rng.binomial(8, 0.3, (2, 25)), rng.binomial(8, 0.2, 25)
    summ, ra, rb = stats.compare_conditions(a, b, base, 8, 8, 300, 4, 0.95)
    idx = np.random.default_rng(4).integers(0, 25, size=(300, 25))
    sa, sb = (
        np.random.default_rng([4, 1]).integers(0, 3, size=(300, 3)),
        np.random.default_rng([4, 2]).integers(0, 2, size=(300, 2)),
    )
    ref = [
        np.mean([a[j, idx[r]].mean() for j in sa[r]]) / 8 - np.mean([b[j, idx[r]].mean() for j in sb[r]]) / 8
        for r in range(300)
    ]
    assert (ra - rb)[:, 0] == pytest.approx(ref, abs=1e-12)
    assert summ["diff_pass1"] == pytest.approx(a.mean() / 8 - b.mean() / 8) and summ["delta_b"][0] == pytest.approx(
        (b.mean() - base.mean()) / 8
    )
    assert summ["ci_pass1"] == pytest.approx(list(np.quantile(ref, [0.025, 0.975])))
    same, r1, r2 = stats.compare_conditions(
        a[:1], a[:1], base, 8, 8, 300, 4, 0.95
    )  # one seed each, the same counts: exactly 0
    assert not np.any(r1 - r2) and same["ci_passk"] == [0.0, 0.0]
