"""analysis/power.py: variance components of a problems x seeds design (against sums of squares written out
here and against simulations with known components), the random-effects t result, the power
formulas (against simulation), the crossed bootstrap's coverage, and the equivalence margin's
headroom rule (PLAN.md section 7) shown to do what it is for."""

import numpy as np
import pytest
from scipy import stats as st

from analysis import power, stats


def ms_by_loops(d):
    """The two-way ANOVA mean squares without replication, written as sums over cells."""
    S, N = d.shape
    g = d.mean()
    col = [sum(d[s][n] for s in range(S)) / S for n in range(N)]
    row = [sum(d[s][n] for n in range(N)) / N for s in range(S)]
    ms_a = S * sum((c - g) ** 2 for c in col) / (N - 1)
    ms_b = N * sum((r - g) ** 2 for r in row) / (S - 1)
    ms_r = sum((d[s][n] - col[n] - row[s] + g) ** 2 for s in range(S) for n in range(N)) / ((N - 1) * (S - 1))
    return ms_a, ms_b, ms_r


def test_variance_components_are_the_anova_estimates():
    d = np.random.default_rng(0).normal(size=(4, 9))
    ms_a, ms_b, ms_r = ms_by_loops(d)
    vc = power.variance_components(d)
    assert vc["V_R"] == pytest.approx(ms_r) and vc["V_A"] == pytest.approx(max((ms_a - ms_r) / 4, 0))
    assert vc["V_B"] == pytest.approx(max((ms_b - ms_r) / 9, 0))
    assert vc["se"] == pytest.approx(np.sqrt((ms_a + ms_b - ms_r) / 36)) and vc["delta"] == pytest.approx(d.mean())
    df = (ms_a + ms_b - ms_r) ** 2 / (ms_a**2 / 8 + ms_b**2 / 3 + ms_r**2 / 24)
    assert vc["df"] == pytest.approx(df)
    one = power.variance_components(d[:1])
    assert one["V_B"] is None and one["se"] == pytest.approx(d[0].std(ddof=1) / 3) and one["df"] == 8


def test_variance_components_recover_known_components_and_the_se():
    """Variance components recover known components and the se is the spread of the estimate.

    400 data sets of 128 problems x 3 seeds with V_A 0.02, V_B 0.0004, V_R 0.02: the mean estimates
    are within 10% (V_B within 30%: 2 df each), and the mean SE^2 equals the variance of the grand
    mean over the data sets within 15%."""
    data = power.simulate(0.02, 0.0004, 0.02, 128, 3, 0.0, 400, seed=2)
    vcs = [power.variance_components(d) for d in data]
    assert np.mean([v["V_A"] for v in vcs]) == pytest.approx(0.02, rel=0.1)
    assert np.mean([v["V_R"] for v in vcs]) == pytest.approx(0.02, rel=0.1)
    assert np.mean([v["V_B"] for v in vcs]) == pytest.approx(0.0004, rel=0.3)
    assert np.mean([v["se"] ** 2 for v in vcs]) == pytest.approx(data.mean(axis=(1, 2)).var(), rel=0.15)
    se, df = power.design_se(0.02, 0.0004, 0.02, 128, 3)
    assert se**2 == pytest.approx(0.02 / 128 + 0.0004 / 3 + 0.02 / 384)
    # Satterthwaite by hand from the expected mean squares (V_R + S V_A on N - 1, V_R + N V_B on S - 1, V_R)
    ms = np.array([0.02 + 3 * 0.02, 0.02 + 128 * 0.0004, 0.02])
    dfs = np.array([127, 2, 254])
    assert df == pytest.approx(
        (ms[0] + ms[1] - ms[2]) ** 2 / np.sum(ms**2 / dfs), rel=1e-9
    )  # 6.655: the seed term dominates


def test_t_interval_covers_at_its_level_with_three_seeds():
    """With a dominant seed term on 2 df the Satterthwaite t interval keeps its 95% (0.92-0.98 over
    500 data sets); a normal interval with the same SE would not (its coverage is printed beside)."""
    data = power.simulate(0.02, 0.0006, 0.02, 128, 3, 0.0, 500, seed=4)
    vcs = [power.variance_components(d) for d in data]
    cover_t = np.mean([r["ci"][0] <= 0 <= r["ci"][1] for r in (power.t_result(v, 0.95) for v in vcs)])
    cover_z = np.mean([abs(v["delta"]) <= 1.96 * v["se"] for v in vcs])
    assert 0.92 <= cover_t <= 0.98 and cover_z < cover_t, (cover_t, cover_z)


def test_one_sided_power_matches_simulation():
    """The noncentral-t power of the one-sided t test against the share of 600 simulated designs
    (256 problems x 6 seeds, the tiny pilot's components, Delta 0.04) whose t test rejects, within 0.06."""
    va, vb, vr, N, S, delta = 0.0187, 0.00038, 0.0222, 256, 6, 0.04
    se, df = power.design_se(va, vb, vr, N, S)
    want = power.power_one_sided(delta, se, df, 0.025)
    data = power.simulate(va, vb, vr, N, S, delta, 600, seed=5)
    got = np.mean([power.t_result(power.variance_components(d), 0.95)["p_above"] < 0.025 for d in data])
    assert got == pytest.approx(want, abs=0.06), (got, want)
    assert power.power_one_sided(0.0, se, df, 0.025) == pytest.approx(0.025, abs=1e-9)  # size at the null


def test_equivalence_power_by_simulation_and_its_size():
    """Equivalence power by simulation and its size at the margin."""
    se, df, m = 0.02, 30.0, 0.1
    rng = np.random.default_rng(6)
    for delta in (0.0, 0.05):
        est = delta + se * rng.standard_t(df, 20000)
        t = st.t.ppf(0.95, df)
        got = np.mean((est - t * se > -m) & (est + t * se < m))
        assert got == pytest.approx(power.power_equivalence(delta, se, df, m, 0.05), abs=0.01)
    assert power.power_equivalence(m, se, df, m, 0.05) <= 0.05 + 1e-9


def test_crossed_bootstrap_coverage_with_many_seeds_is_near():
    """Crossed bootstrap coverage with many seeds is near nominal.

    At 8 seeds the crossed bootstrap's 95% interval covers in 0.88-0.99 of 120 data sets."""
    c = power.crossed_coverage(0.02, 0.0004, 0.02, 64, 8, sims=120, resamples=300, seed=1)
    assert 0.88 <= c["coverage"] <= 0.99 and c["sims"] == 120


def test_headroom_rule_keeps_the_equivalence_test_able_to_fail():
    """PLAN.md section 7's rule: the +-m TOST is asked only when m <= headroom / 3. Simulated crossed
    data (64 problems x 4 seeds, SE about 0.02) whose true Delta pass@k is half the headroom h:
    with h = 0.3 (m = h / 3, the rule met) the bootstrap TOST shows 'equivalent' in at most 5% of
    40 data sets; with h = 0.102 (the tiny_seeds base, m ~ h) a rise of half the headroom is called
    equivalent in most of them: the test that could hardly fail."""
    m, rates = 0.1, {}
    for h in (0.3, 0.102):
        data = power.simulate(0.02, 0.0002, 0.02, 64, 4, h / 2, 40, seed=8)
        shown = 0
        for i, d in enumerate(data):
            reps = stats.crossed_replicates(
                d, np.zeros(64), stats.resample_indices(64, 400, i), stats.seed_resample_indices(4, 400, i)
            )
            shown += stats.p_equivalence(reps, m) < 0.05
        rates[h] = shown / len(data)
    assert rates[0.3] <= 0.05 and rates[0.102] >= 0.5, rates


@pytest.mark.parametrize("seeds", [1, 3])
def test_one_problem_cannot_be_tested(seeds):
    """Differences on one problem have no problem variance to estimate (no degrees of freedom): the t part
    of a one-sided test reads p = 1, so the larger of it and the bootstrap's p cannot call a one-problem
    difference shown (before, an undefined SE read as zero, p = 0 for any positive difference)."""
    from analysis import verdict

    d = np.array([[0.5 + 0.01 * s] for s in range(seeds)])  # (S, 1): positive on every seed
    vc = power.variance_components(d)
    assert vc["df"] == 0 and not np.isfinite(vc["se"])
    t = power.t_result(vc, 0.95)
    assert t["p_above"] == t["p_below"] == 1.0 and not np.isfinite(t["ci"]).any()
    reps = np.full(2000, d.mean())  # the bootstrap of one problem: every replicate the same positive value
    assert verdict.one_sided(reps, d, "above")["p"] == 1.0
    assert (
        power.t_result(power.variance_components(np.array([[0.5, 0.4]])), 0.95)["p_above"] < 0.05
    )  # two problems: testable
