"""How much a design can show: the variance components of a difference measured on every test
problem for every training seed, the random-effects (t-based) interval they give, the power of the
registered tests, and the coverage of the crossed bootstrap's interval, by simulation.

The model (PLAN.md section 7, "Planned power"): d[s, n] = Delta + a[n] + b[s] + e[s, n], the
per-problem difference RL - base (pass@1, or pass@k_max) of seed s on problem n, with problem
effects a ~ (0, V_A), seed effects b ~ (0, V_B) and residuals e ~ (0, V_R). The study's estimate is
the grand mean of d over N problems and S seeds, with variance V_A / N + V_B / S + V_R / (N S).
numpy and scipy only; tests check each formula on data with a known answer and by simulation.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as st

from analysis import stats


def variance_components(d: np.ndarray) -> dict:
    """Method-of-moments (ANOVA) estimates for d (S, N) of the two-way crossed model above,
    without replication. With mean squares MS_A = S var_n(mean_s d) (N - 1 df), MS_B = N var_s(mean_n d)
    (S - 1 df) and the residual MS_R ((N - 1)(S - 1) df), whose expectations are V_R + S V_A,
    V_R + N V_B and V_R:
        V_R = MS_R,  V_A = (MS_A - MS_R) / S,  V_B = (MS_B - MS_R) / N  (each floored at 0),
        SE^2 = (MS_A + MS_B - MS_R) / (N S) = V_A / N + V_B / S + V_R / (N S),
        df = SE^4 (N S)^2 / (MS_A^2 / (N - 1) + MS_B^2 / (S - 1) + MS_R^2 / ((N - 1)(S - 1)))  (Satterthwaite).
    With one seed the seed and residual terms cannot be told apart: SE^2 = var_n(d) / N, df = N - 1.
    With one problem the problem variance cannot be estimated at all: SE nan, df 0 (t_result: p = 1)."""
    d = np.asarray(d, float)
    S, N = d.shape
    grand = d.mean()
    if N == 1:
        return {
            "delta": float(grand),
            "V_A": float("nan"),
            "V_B": None,
            "V_R": None,
            "se": float("nan"),
            "df": 0.0,
            "seed_sd": None,
            "seed_df": S - 1,
            "S": S,
            "N": N,
        }
    if S == 1:
        va = float(d[0].var(ddof=1))
        return {
            "delta": float(grand),
            "V_A": va,
            "V_B": None,
            "V_R": None,
            "se": float(np.sqrt(va / N)),
            "df": float(N - 1),
            "seed_sd": None,
            "seed_df": 0,
            "S": 1,
            "N": N,
        }
    ms_a = S * d.mean(axis=0).var(ddof=1)
    ms_b = N * d.mean(axis=1).var(ddof=1)
    resid = d - d.mean(axis=0, keepdims=True) - d.mean(axis=1, keepdims=True) + grand
    ms_r = (resid**2).sum() / ((N - 1) * (S - 1))
    se2 = max(ms_a + ms_b - ms_r, 0.0) / (N * S)
    denom = ms_a**2 / (N - 1) + ms_b**2 / (S - 1) + ms_r**2 / ((N - 1) * (S - 1))
    df = (se2 * N * S) ** 2 / denom if denom > 0 else float(N - 1)  # every difference alike: no spread to estimate
    vb = max((ms_b - ms_r) / N, 0.0)
    return {
        "delta": float(grand),
        "V_A": float(max((ms_a - ms_r) / S, 0.0)),
        "V_B": float(vb),
        "V_R": float(ms_r),
        "se": float(np.sqrt(se2)),
        "df": float(df),
        "seed_sd": float(np.sqrt(vb)),
        "seed_df": S - 1,
        "S": S,
        "N": N,
    }


def t_result(vc: dict, level: float) -> dict:
    """The random-effects result beside the bootstrap's: Delta +- t_{df, (1+level)/2} SE, and the
    one-sided p of "Delta > 0", 1 - T_df(Delta / SE) (and of "Delta < 0"). With SE = 0 (every
    difference alike) a p is 0 where Delta lies on the alternative's side and 1 otherwise; with SE nan
    (one problem: no variance to estimate) nothing is tested: both p are 1, the interval nan."""
    d, se, df = vc["delta"], vc["se"], vc["df"]
    if not np.isfinite(se):
        return {"delta": d, "ci": [float("nan")] * 2, "se": se, "df": df, "p_above": 1.0, "p_below": 1.0}
    q = st.t.ppf((1 + level) / 2, df)
    if se > 0:
        above, below = float(st.t.sf(d / se, df)), float(st.t.cdf(d / se, df))
    else:
        above, below = float(d <= 0), float(d >= 0)
    return {"delta": d, "ci": [d - q * se, d + q * se], "se": se, "df": df, "p_above": above, "p_below": below}


def design_se(V_A: float, V_B: float, V_R: float, N: int, S: int) -> tuple[float, float]:
    """(SE, Satterthwaite df) of the grand mean of a design of N problems and S seeds with these
    components: the expected mean squares V_R + S V_A, V_R + N V_B, V_R in the formula above."""
    ms_a, ms_b, ms_r = V_R + S * V_A, V_R + N * V_B, V_R
    se2 = V_A / N + V_B / S + V_R / (N * S)
    df = (se2 * N * S) ** 2 / (
        ms_a**2 / (N - 1) + (ms_b**2 / (S - 1) if S > 1 else 0.0) + (ms_r**2 / ((N - 1) * (S - 1)) if S > 1 else 0.0)
    )
    return float(np.sqrt(se2)), float(df)


def power_one_sided(delta: float, se: float, df: float, alpha: float) -> float:
    """Power of the one-sided t test of "Delta > 0" at level alpha when the true value is delta:
    P(T' > t_{1-alpha, df}) with T' noncentral t(df, delta / se)."""
    return float(st.nct.sf(st.t.ppf(1 - alpha, df), df, delta / se))


def power_equivalence(delta: float, se: float, df: float, margin: float, alpha: float) -> float:
    """Power of TOST (both one-sided tests at alpha reject |Delta| >= margin) when the true value is
    delta, the estimate ~ delta + se T_df: P(margin - t se > est > -margin + t se), t = t_{1-alpha, df}."""
    if se <= 0:  # no spread at all: the estimate is the truth
        return float(abs(delta) < margin)
    t = st.t.ppf(1 - alpha, df)
    lo, hi = -margin + t * se, margin - t * se
    return float(max(st.t.cdf((hi - delta) / se, df) - st.t.cdf((lo - delta) / se, df), 0.0))


def equivalence_up_to(se: float, df: float, margin: float, alpha: float, power: float) -> float | None:
    """The largest true |Delta| at which TOST (both one-sided tests, power_equivalence) still has the
    given power; None when even Delta = 0 falls short (its power there is the most it can have)."""
    from scipy import optimize

    if not (np.isfinite(se) and np.isfinite(df)) or power_equivalence(0.0, se, df, margin, alpha) < power:
        return None  # (no finite SE or df: nothing varies, or a single value)
    if se <= 0:
        return float(margin)
    return float(
        optimize.brentq(lambda d: power_equivalence(d, se, df, margin, alpha) - power, 0.0, margin, xtol=1e-10)
    )


def simulate(V_A: float, V_B: float, V_R: float, N: int, S: int, delta: float, sims: int, seed: int) -> np.ndarray:
    """(sims, S, N) data sets of the model, normal effects: the ground truth of the simulations below."""
    rng = np.random.default_rng(seed)
    return (
        delta
        + rng.normal(0, np.sqrt(V_A), (sims, 1, N))
        + rng.normal(0, np.sqrt(V_B), (sims, S, 1))
        + rng.normal(0, np.sqrt(V_R), (sims, S, N))
    )


def crossed_coverage(
    V_A: float,
    V_B: float,
    V_R: float,
    N: int,
    S: int,
    level: float = 0.95,
    sims: int = 300,
    resamples: int = 400,
    seed: int = 0,
) -> dict:
    """How often the crossed bootstrap's percentile interval (stats.crossed_replicates, as the
    analysis runs it: the problems and, independently, the seeds drawn with replacement) covers
    the true Delta, over `sims` data sets of the model; the t-based interval's coverage beside it.
    Also the share of data sets where the lower tail misses (the one-sided test's error)."""
    data = simulate(V_A, V_B, V_R, N, S, 0.0, sims, seed)
    cover = miss_low = cover_t = 0
    for i, d in enumerate(data):
        idx = stats.resample_indices(N, resamples, seed + 1 + i)
        sidx = stats.seed_resample_indices(S, resamples, seed + 1 + i)
        lo, hi = stats.percentile_interval(stats.crossed_replicates(d, np.zeros(N), idx, sidx), level)
        cover += lo <= 0 <= hi
        miss_low += lo > 0
        t = t_result(variance_components(d), level)["ci"]
        cover_t += t[0] <= 0 <= t[1]
    return {
        "coverage": cover / sims,
        "lower_miss": miss_low / sims,
        "coverage_t": cover_t / sims,
        "sims": sims,
        "N": N,
        "S": S,
        "seed_sd": float(np.sqrt(V_B)),
    }


def seed_var_upper(seed_var: float, seed_df: int, level: float = 0.8) -> float:
    """The one-sided upper confidence limit of a seed variance estimated on seed_df degrees of
    freedom: seed_df V_B / chi2_{1 - level}(seed_df) (chi-square quantile). A pilot's seed variance on
    2 df is uncertain by a factor of ~4 at the 80% limit; a plan should hold there too."""
    return float(seed_df * seed_var / st.chi2.ppf(1 - level, seed_df))


def count_coverage(
    base_counts,
    n_base: int,
    delta: float,
    V_A: float,
    V_B: float,
    S: int,
    n: int,
    level: float = 0.95,
    sims: int = 2000,
    resamples: int = 400,
    seed: int = 0,
) -> dict:
    """Coverage of the crossed bootstrap's percentile interval for Delta pass@1, in count-level
    simulations of this design: per problem a base rate p_i drawn from the beta-binomial fit to the
    base's counts, a trained rate p_i + Delta + a_i + b_s (a_i ~ N(0, V_A) per problem, b_s ~ N(0, V_B)
    per seed, clipped to [0, 1]), then n_base and S x n binomial counts; the true Delta is the
    population's (the mean of the clipped trained rate minus the mean of p, over problems and seeds).
    Also how often the lower tail misses (the one-sided
    test's error) and the share where the t interval (variance_components) covers."""
    from analysis.passmodel import fit_betabinom

    c = np.asarray(base_counts, int)
    f = fit_betabinom(c, n_base)
    N = len(c)
    rng = np.random.default_rng([seed, 31337])
    big = rng.beta(f["alpha"], f["beta"], 400_000)  # the population Delta, over problems and seeds
    truth = float(
        np.clip(
            big + delta + rng.normal(0, np.sqrt(V_A), big.size) + rng.normal(0, np.sqrt(V_B), big.size), 0, 1
        ).mean()
        - big.mean()
    )
    cover = miss_low = cover_t = 0
    for i in range(sims):
        p = rng.beta(f["alpha"], f["beta"], N)
        r = np.clip(p + delta + rng.normal(0, np.sqrt(V_A), N) + rng.normal(0, np.sqrt(V_B), (S, 1)), 0.0, 1.0)
        b1, r1 = rng.binomial(n_base, p) / n_base, rng.binomial(n, r) / n
        idx = stats.resample_indices(N, resamples, seed + 1 + i)
        sidx = stats.seed_resample_indices(S, resamples, seed + 1 + i)
        lo, hi = stats.percentile_interval(stats.crossed_replicates(r1, b1, idx, sidx), level)
        cover += lo <= truth <= hi
        miss_low += lo > truth
        t = t_result(variance_components(r1 - b1), level)["ci"]
        cover_t += t[0] <= truth <= t[1]
    return {
        "coverage": cover / sims,
        "lower_miss": miss_low / sims,
        "coverage_t": cover_t / sims,
        "sims": sims,
        "N": N,
        "S": S,
        "seed_sd": float(np.sqrt(V_B)),
        "delta": truth,
        "mc_se": float(np.sqrt(0.95 * 0.05 / sims)),
    }
