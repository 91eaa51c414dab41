"""The registered verdicts (PLAN.md section 7): a crossed bootstrap over training seeds and test
problems, one primary question, Holm-corrected secondary tests, equivalence for the ceiling, and
the report and figures that show them.

Reads RUN/eval_base.json and RUN/eval_<condition>_s<seed>_<step>.json, the registered `test` set
(older single-seed runs: eval_<condition>_<step>.json, read as seed 0); every other registered
evaluation set (config eval_sets) from RUN/evalsets/<set>/ under the same names; the token-level
files RUN/tokens_<condition>_s<seed>_<step>.json; the design from RUN/manifest.json's config (else
eval_base.json's); and, where present, train_*/train_log.csv, train_*/train_eval.csv,
lr_choice.json, selection.json and probe_*.json. Writes RUN/verdicts.json, RUN/report.md and
RUN/figures/*.png.

    python analyze_b.py --run results/tiny [--partial]

In brief (every formula is in the docstring of the function that computes it):
- Every difference is (RL - base), averaged over the training seeds and the test problems. Its
  uncertainty comes from a crossed bootstrap: each replicate draws the seeds and, independently,
  the problems with replacement (the same problems for the base and every seed). With one seed it
  is the paired bootstrap over problems of the first version, to the last digit.
- The primary question, asked once (analyze.primary_condition, analyze.primary_scoring, the last
  checkpoint): does RL select? pass@1 rises AND (the ceiling pass@k_max is equivalent to the
  base's within +-margin OR falls). An intersection-union test: each part at its own level,
  one-sided 0.025 for "rises"/"falls", TOST 0.05 for "equivalent", no correction needed.
- Every other entry is secondary: per scoring one family of three tests per entry (pass@1 rises,
  ceiling falls, ceiling equivalent), Holm-corrected; adjusted verdicts use adjusted p-values.
- The first version's criteria are kept beside them as *_v1 fields.
- Controls (H4-H6, PLAN.md section 7b) are asked of the pairs of registered conditions their
  settings define (find_twins): H4 reads the entries' adjusted verdicts, H5 is a ratio estimate, H6
  a contrast curve with a simultaneous band; all skipped, with the reason, where not registered.
- Beyond n (issue 14): a beta-binomial (or zero-inflated) fit per model, labelled model-based
  wherever it appears and checked against the largest-n set; boundary counts, diversity, test vs
  out-of-distribution sets, and the token-level table. Descriptive, not adjusted.
This file imports no torch: it meets the rest of the pipeline only in JSON and CSV files.
"""
from __future__ import annotations

import argparse
import copy
import csv
import functools
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

ROOT = Path(__file__).resolve().parent
SCORINGS = ("strict", "loose")
EVAL_MODELS = ("all", "final", "final-first-seed")  # config.py's: which checkpoints a set evaluates
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
EVAL_RE = re.compile(r"^eval_(?P<cond>.+)_s(?P<seed>\d+)_(?P<step>\d+)\.json$")
EVAL_RE_V1 = re.compile(r"^eval_(?P<cond>.+)_(?P<step>\d+)\.json$")  # single-seed runs before train.seeds
TRAIN_RE = re.compile(r"^train_(?P<cond>.+?)(?:_s(?P<seed>\d+))?$")
ANALYZE_DEFAULTS = {"resamples": 2000, "ci": 0.95, "seed": 0, "equivalence_margin": 0.10, "primary_condition": "many",
                    "primary_scoring": "loose", "power": 0.8}
DEFAULT_CONDITION = {"problems": "all", "reward": "strict", "method": "grpo", "kl": 0.0, "entropy": 0.0, "lr": None}  # config.py's
NEVER_ABOVE, ALWAYS_ABOVE = 0, -1  # crossover codes; a crossing is coded by its k (>= 2)


class InputError(Exception):
    """A missing or malformed input: the message names the file and what is wrong."""


# ============================================================================= statistics
# Pure functions on arrays. Notation: N test problems, S training seeds, B bootstrap replicates,
# K = k_max. "Delta" is always RL - base.


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., arXiv 2107.03374): 1 - C(n-c, k) / C(n, k), in the stable
    product form 1 - prod_{i=n-c+1}^{n} (1 - k / i). k > n is an error, never a silent skip.
    The whole study uses this one function (grpo.py imports it)."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def per_problem(counts, n: int, k: int) -> np.ndarray:
    """(N,) per-problem pass@k from per-problem correct counts out of n."""
    return np.array([pass_at_k(n, int(c), k) for c in counts])


@functools.lru_cache(maxsize=16)
def _pass_table(n: int, k_max: int) -> np.ndarray:
    """(n+1, K) pass_at_k(n, c, k) for every count c and k = 1..K, computed once per (n, K): the
    wide set's 257 x 256 table takes seconds in this exact loop."""
    table = np.array([[pass_at_k(n, c, k) for k in range(1, k_max + 1)] for c in range(n + 1)])
    table.flags.writeable = False
    return table


def pass_at_k_curves(counts, n: int, k_max: int) -> np.ndarray:
    """(N, K) per-problem pass@k for k = 1..K: row i, column k-1 is pass_at_k(n, counts[i], k).
    Built from a table over the n + 1 possible counts, so each value is computed once."""
    return _pass_table(int(n), int(k_max))[np.asarray(counts, dtype=int)]


def resample_indices(n_problems: int, resamples: int, seed: int) -> np.ndarray:
    """(B, N) problem indices drawn with replacement from a generator seeded with `seed`."""
    return np.random.default_rng(seed).integers(0, n_problems, size=(resamples, n_problems))


def seed_resample_indices(n_seeds: int, resamples: int, seed: int, stream: int = 1) -> np.ndarray:
    """(B, S) seed positions drawn with replacement. A generator of its own, seeded with
    (seed, stream), so the problem draws are those of resample_indices(.., seed) whatever S is.
    Stream 1 draws every condition's seeds against the base; stream 2 draws the second condition
    of a contrast between two conditions (condition_contrast), independently of the first."""
    return np.random.default_rng([seed, stream]).integers(0, n_seeds, size=(resamples, n_seeds))


def paired_interval(rl: np.ndarray, base: np.ndarray, idx: np.ndarray, ci: float) -> tuple[float, tuple[float, float]]:
    """The first version's paired bootstrap over problems (one seed): the mean difference
    rl - base and its percentile interval, replicate b being mean_i rl[idx[b,i]] - mean_i base[idx[b,i]].
    crossed_replicates reduces to it with one seed; the tests hold them equal."""
    diffs = rl[idx].mean(axis=1) - base[idx].mean(axis=1)  # (B,)
    alpha = (1 - ci) / 2
    lo, hi = np.quantile(diffs, [alpha, 1 - alpha])
    return float(rl.mean() - base.mean()), (float(lo), float(hi))


def crossed_estimate(rl: np.ndarray, base: np.ndarray) -> tuple[float, np.ndarray]:
    """The point estimate and each seed's own difference.
    rl: (S, N); base: (N,), or (S, N) when each seed has its own reference (H3).
    per_seed[s] = mean_i rl[s, i] - mean_i base[(s,) i];  estimate = mean_s per_seed[s]."""
    rl, base = np.asarray(rl, float), np.asarray(base, float)
    per_seed = rl.mean(axis=1) - base.mean(axis=-1)  # (S,)
    return float(per_seed.mean()), per_seed


def crossed_replicates(rl: np.ndarray, base: np.ndarray, idx: np.ndarray, sidx: np.ndarray) -> np.ndarray:
    """Crossed bootstrap over seeds and problems: (B,) replicates of the mean difference.
    rl: (S, N) per-seed, per-problem values; base: (N,) shared by every seed, or (S, N) paired with
    each seed; idx: (B, N) problem draws (the same for the base and every seed); sidx: (B, S) seed
    draws, independent of idx. Replicate b:
        D*_b = (1/S) sum_j [ mean_i rl[sidx[b,j], idx[b,i]] - mean_i base[(sidx[b,j],) idx[b,i]] ]
    With S = 1 (sidx all 0) this is paired_interval's replicate, bit for bit."""
    rl, base = np.asarray(rl, float), np.asarray(base, float)
    rl_m = rl[:, idx].mean(axis=-1)  # (S, B): each seed's mean over replicate b's problems
    base_m = base[..., idx].mean(axis=-1)  # (B,) or (S, B)
    d = rl_m - base_m  # (S, B)
    return d[sidx.T, np.arange(idx.shape[0])].mean(axis=0)  # (S drawn, B) -> (B,)


def _boot_curves(rl: np.ndarray, base: np.ndarray, idx: np.ndarray, sidx: np.ndarray):
    """Point curve (K,), per-seed curves (S, K) and replicate curves (B, K) of Delta pass@k.
    rl: (S, N, K); base: (N, K) or (S, N, K). One k at a time keeps memory at S x B x N."""
    K = rl.shape[-1]
    point, per_seed, reps = np.empty(K), np.empty((rl.shape[0], K)), np.empty((idx.shape[0], K))
    for k in range(K):
        point[k], per_seed[:, k] = crossed_estimate(rl[..., k], base[..., k])
        reps[:, k] = crossed_replicates(rl[..., k], base[..., k], idx, sidx)
    return point, per_seed, reps


def percentile_interval(reps: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval: the (1-level)/2 and 1-(1-level)/2 quantiles of the replicates."""
    alpha = (1 - level) / 2
    lo, hi = np.quantile(reps, [alpha, 1 - alpha])
    return float(lo), float(hi)


def p_above(reps: np.ndarray, value: float = 0.0) -> float:
    """One-sided bootstrap p-value for H0: Delta <= value against Delta > value:
    p = (1 + #{D* <= value}) / (B + 1). Below 0.025 <=> (up to interpolation) the 95% interval's
    lower bound is above `value`. Never 0: the smallest p is 1 / (B + 1)."""
    reps = np.asarray(reps)
    return float((1 + np.count_nonzero(reps <= value)) / (reps.size + 1))


def p_below(reps: np.ndarray, value: float = 0.0) -> float:
    """One-sided bootstrap p-value for H0: Delta >= value against Delta < value:
    p = (1 + #{D* >= value}) / (B + 1)."""
    reps = np.asarray(reps)
    return float((1 + np.count_nonzero(reps >= value)) / (reps.size + 1))


def p_equivalence(reps: np.ndarray, margin: float) -> float:
    """TOST (two one-sided tests) p-value for H0: |Delta| >= margin against |Delta| < margin:
    p = max(p_lo, p_hi), p_lo = (1 + #{D* <= -m}) / (B + 1), p_hi = (1 + #{D* >= m}) / (B + 1).
    Below 0.05 <=> (up to interpolation) the 90% interval lies inside (-m, m)."""
    return max(p_above(reps, -margin), p_below(reps, margin))


def holm(pvals, levels=None) -> np.ndarray:
    """Holm's step-down adjustment (Holm 1979), monotone and capped at 1.
    Sort ascending, p_(1) <= ... <= p_(m):  adj_(j) = min(1, max_{l <= j} (m - l + 1) p_(l)).
    Tests judged at different levels a_i (here 0.025 one-sided, 0.05 TOST): the same on the scaled
    p'_i = p_i / a_i, which would be compared with 1, reported back on each test's own scale:
        adj_i = min(1, a_i * max_{l <= rank(i)} (m - l + 1) p'_(l)),  test i rejected <=> adj_i < a_i.
    This is the weighted Holm procedure; the family-wise error is at most max_i a_i. With equal
    levels it is the ordinary Holm adjustment. Ties get the same adjusted value."""
    p = np.asarray(pvals, dtype=float)
    lv = np.ones_like(p) if levels is None else np.asarray(levels, dtype=float)
    if p.shape != lv.shape or p.ndim != 1:
        raise ValueError("holm: pvals and levels must be 1-d and of the same length")
    if np.any((p < 0) | (p > 1)) or np.any(lv <= 0):
        raise ValueError("holm: p-values must lie in [0, 1] and levels be > 0")
    m = p.size
    q = p / lv
    order = np.argsort(q, kind="stable")
    stepped = np.maximum.accumulate(q[order] * (m - np.arange(m)))  # (m - l + 1) p'_(l), running max
    out = np.empty(m)
    out[order] = np.minimum(1.0, stepped * lv[order])
    return out


def simultaneous_band(point: np.ndarray, reps: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Simultaneous band for a curve (max-|t| over k). point: (K,), reps: (B, K) replicates.
    se_k = sd_b(D*_bk);  t*_b = max_k |D*_bk - point_k| / se_k;  c = level-quantile of t*;
    band_k = point_k +- c se_k. Points with se_k = 0 (no spread) get a band of width 0."""
    se = reps.std(axis=0, ddof=1)  # (K,)
    ok = se > 1e-12
    tmax = (np.abs(reps[:, ok] - point[ok]) / se[ok]).max(axis=1) if ok.any() else np.zeros(len(reps))  # (B,)
    crit = float(np.quantile(tmax, level))
    half = np.where(ok, crit * se, 0.0)
    return point - half, point + half, crit


def crossover_codes(diff: np.ndarray) -> np.ndarray:
    """Where the base catches up. diff: (..., K) curves of Delta pass@k, k = 1..K.
    The code is the first k at which RL is no longer above the base (Delta <= 0) after being above
    at k = 1 (so k >= 2); NEVER_ABOVE (0) when RL is not above at k = 1; ALWAYS_ABOVE (-1) when it
    is above at every k <= K. |Delta| below 1e-12 counts as equal: two curves that agree in exact
    arithmetic can differ by rounding (pass@1 of 3 of 8 is not exactly 0.375 in the product form)."""
    above = np.asarray(diff) > 1e-12
    first_not = np.argmax(~above, axis=-1) + 1  # 1-based k of the first k not above (meaningless when all are above)
    return np.where(~above[..., 0], NEVER_ABOVE, np.where(above.all(axis=-1), ALWAYS_ABOVE, first_not))


def crossover_summary(point: np.ndarray, reps: np.ndarray, level: float) -> dict:
    """The crossover of the point curve, and its distribution over the replicates (B, K): the
    shares that cross, stay above and are never above, and for the crossing ones the median k
    and the range at `level` (its quantiles rounded outwards to whole k)."""
    outcome = {NEVER_ABOVE: "never above", ALWAYS_ABOVE: "always above"}
    c0 = int(crossover_codes(point))
    codes = crossover_codes(reps)  # (B,)
    ks = codes[codes >= 2]
    B = len(codes)
    return {
        "point": {"outcome": outcome.get(c0, "crosses"), "k": c0 if c0 >= 2 else None},
        "median": float(np.median(ks)) if ks.size else None,
        "ci": [int(np.quantile(ks, (1 - level) / 2, method="lower")), int(np.quantile(ks, (1 + level) / 2, method="higher"))] if ks.size else None,
        "cross_share": ks.size / B,
        "always_share": float(np.count_nonzero(codes == ALWAYS_ABOVE) / B),
        "never_share": float(np.count_nonzero(codes == NEVER_ABOVE) / B),
    }


def third_clause_interval(reps1: np.ndarray, repsk: np.ndarray, level: float) -> tuple[float, float]:
    """Interval of the one-third clause's statistic, T = |Delta pass@k| - Delta pass@1 / 3, from the
    same replicates. The clause holds when the upper bound is < 0 (asked only when pass@1 rises)."""
    return percentile_interval(np.abs(repsk) - np.asarray(reps1) / 3, level)


def verdict_v1(d1: float, ci1, dk: float, cik) -> dict:
    """The first version's criteria, on 95% intervals and point estimates, unadjusted:
    pass@1 rises <=> ci1 low > 0; ceiling unchanged <=> cik contains 0 or |dk| < |d1| / 3;
    ceiling falls <=> cik high < 0."""
    return {
        "pass1_rises_v1": bool(ci1[0] > 0),
        "ceiling_unchanged_v1": bool((cik[0] <= 0 <= cik[1]) or abs(dk) < abs(d1) / 3),
        "ceiling_falls_v1": bool(cik[1] < 0),
    }


def selection_answer(p_rise: float, p_fall: float, p_equiv: float, alpha_one: float, alpha_tost: float) -> bool:
    """The primary question as an intersection-union test:
    selection <=> p_rise < alpha_one AND (p_equiv < alpha_tost OR p_fall < alpha_one).
    The union needs no correction (either part rejects H0 of 'no selection' only if both hold)."""
    return bool(p_rise < alpha_one and (p_equiv < alpha_tost or p_fall < alpha_one))


def detectable(se1: float, sek: float, alpha_one: float, alpha_tost: float, power: float, margin: float) -> dict:
    """Normal-approximation design sensitivity from the bootstrap SEs of the primary Deltas:
    smallest Delta detected with the given power by a one-sided test at alpha_one:
        mde = (z_{1-alpha_one} + z_power) * se;
    the equivalence test (TOST at alpha_tost) has that power when the true |Delta pass@k| is at most
        margin - (z_{1-alpha_tost} + z_power) * se_k   (None when that is negative)."""
    z = NormalDist().inv_cdf
    eq = margin - (z(1 - alpha_tost) + z(power)) * sek
    return {"mde_pass1": (z(1 - alpha_one) + z(power)) * se1, "mde_passk": (z(1 - alpha_one) + z(power)) * sek,
            "equivalence_up_to": eq if eq >= 0 else None}


# ----------------------------------------------------------------------------- pass@k beyond n: a model


LOG_BOUND, S_BOUND = 15.0, 12.0  # the fit's search box (fit_betabinom)


def count_histogram(counts, n: int) -> np.ndarray:
    """(n+1,) how many problems had each count c = 0..n."""
    c = np.asarray(counts, dtype=int)
    if c.size == 0 or c.min() < 0 or c.max() > n:
        raise ValueError(f"need counts in 0..n={n}")
    return np.bincount(c, minlength=n + 1)


def betabinom_pass_at_k(alpha: float, beta: float, ks, pi: float = 0.0) -> np.ndarray:
    """Model-based pass@k. Each problem's success probability p ~ Beta(alpha, beta), so
        pass@k = E[1 - (1 - p)^k] = 1 - B(alpha, beta + k) / B(alpha, beta);
    the zero-inflated model adds a share pi of problems with p = 0:
        pass@k = (1 - pi) (1 - B(alpha, beta + k) / B(alpha, beta)).
    Defined for every k >= 1 (that is the point: k beyond the n samples drawn). For k <= n it is
    also the expectation of the unbiased estimator pass_at_k(n, c, k) over c ~ the fitted
    beta-binomial, so at k <= n the model and the data estimate the same quantity."""
    from scipy.special import betaln

    ks = np.asarray(ks, dtype=float)
    return (1.0 - pi) * -np.expm1(betaln(alpha, beta + ks) - betaln(alpha, beta))


def betabinom_logpmf(c, n: int, alpha: float, beta: float) -> np.ndarray:
    """log P(c) under BetaBinomial(n, alpha, beta) = log C(n, c) + log B(c + alpha, n - c + beta)
    - log B(alpha, beta). Written out because scipy.stats.betabinom.logpmf, which the tests hold it
    equal to, costs ~0.5 ms a call in the optimiser's inner loop."""
    from scipy.special import betaln, gammaln

    c = np.asarray(c, dtype=float)
    return gammaln(n + 1) - gammaln(c + 1) - gammaln(n - c + 1) + betaln(c + alpha, n - c + beta) - betaln(alpha, beta)


def fit_betabinom(counts, n: int, zero_inflated: bool = False, plain: dict | None = None) -> dict:
    """Maximum-likelihood fit of a beta-binomial to per-problem counts c_i of n:
        c_i ~ BetaBinomial(n, alpha, beta)                       (2 parameters), or
        P(c = 0) = pi + (1 - pi) BB(0), P(c) = (1 - pi) BB(c)    (zero-inflated, 3 parameters).
    scipy.optimize.minimize (Nelder-Mead, bounded) over theta = (logit mu, log s) with
    mu = alpha / (alpha + beta), s = alpha + beta (and logit pi): in these coordinates the ridge of
    near-binomial data (s -> infinity at fixed mu) runs along one axis, which the search follows in
    a few steps. The box: |logit mu|, |logit pi| <= 15, -15 <= log s <= 12 (s = 1.6e5 is already a
    binomial for every n we use). Several starts (the method of moments among them); the best
    likelihood wins. The likelihood is summed over the n + 1 possible counts, weighted by how often
    each occurs. The zero-inflated fit starts from the plain one (`plain`, fitted here if not given)
    and never reports a lower likelihood (pi -> 0 nests it). at_bound: mu or s ended on the box."""
    from scipy.optimize import minimize
    from scipy.special import expit, logit

    hist = count_histogram(counts, n)
    cs = np.arange(n + 1)
    used = hist > 0
    box = [(-LOG_BOUND, LOG_BOUND), (-LOG_BOUND, S_BOUND)] + ([(-LOG_BOUND, LOG_BOUND)] if zero_inflated else [])

    def nll(theta):
        mu, sz = expit(theta[0]), np.exp(theta[1])
        lp = betabinom_logpmf(cs[used], n, mu * sz, (1 - mu) * sz)
        if zero_inflated:
            pi = expit(theta[2])
            lp = np.log1p(-pi) + lp
            if used[0]:
                lp[0] = np.logaddexp(np.log(pi), lp[0])
        v = -float(hist[used] @ lp)
        return v if np.isfinite(v) else 1e300

    p = np.asarray(counts, float) / n
    m, v = p.mean(), p.var()
    mu0 = float(logit(np.clip(m, 1e-4, 1 - 1e-4)))
    starts = [(mu0, np.log(2.0))]  # the mean, s = 2 (alpha + beta = 2: a spread-out Beta)
    if 0 < m < 1 and v > 0:  # the method of moments on c / n
        starts.insert(0, (mu0, float(np.clip(np.log(max(m * (1 - m) / v - 1, 1e-3)), -10, 10))))
    if zero_inflated:
        plain = plain or fit_betabinom(counts, n)
        th0 = (logit(np.clip(plain["alpha"] / (plain["alpha"] + plain["beta"]), 1e-6, 1 - 1e-6)), np.log(plain["alpha"] + plain["beta"]))
        zeros = float(np.mean(p == 0))
        starts = [(*th0, logit(q)) for q in (1e-3, max(zeros / 2, 1e-3), max(zeros * 0.9, 1e-3))] + [(*starts[0], logit(max(zeros / 2, 1e-3)))]
    starts = [np.clip(np.array(s0, float), [b[0] for b in box], [b[1] for b in box]) for s0 in starts]
    best = min((minimize(nll, s0, method="Nelder-Mead", bounds=box, options={"xatol": 1e-7, "fatol": 1e-10, "maxiter": 600})
                for s0 in starts), key=lambda r: r.fun)
    th = best.x
    mu, sz = float(expit(th[0])), float(np.exp(th[1]))
    out = {"model": "zero-inflated beta-binomial" if zero_inflated else "beta-binomial",
           "alpha": mu * sz, "beta": (1 - mu) * sz, "pi": float(expit(th[2])) if zero_inflated else 0.0,
           "loglik": -float(best.fun), "params": 3 if zero_inflated else 2,
           "at_bound": bool(abs(th[0]) > LOG_BOUND - 1e-3 or th[1] < -LOG_BOUND + 1e-3 or th[1] > S_BOUND - 1e-3),
           "n": n, "n_problems": int(hist.sum())}
    if zero_inflated and out["loglik"] < plain["loglik"]:  # the optimiser missed the nested point
        out.update(alpha=plain["alpha"], beta=plain["beta"], pi=0.0, loglik=plain["loglik"], at_bound=plain["at_bound"])
    out["aic"] = 2 * out["params"] - 2 * out["loglik"]
    return out


def fit_pass_model(counts, n: int) -> dict:
    """Both fits and the registered choice between them: the zero-inflated model is used when its
    AIC (2 x 3 parameters - 2 log L) is lower than the plain model's (2 x 2 - 2 log L), i.e. when it
    raises the log-likelihood by more than 1. Returns the chosen fit's fields plus both fits.
    The fit depends on the counts only through their histogram, so it is cached on it."""
    return copy.deepcopy(_fit_pass_model(tuple(count_histogram(counts, n).tolist()), n))


@functools.lru_cache(maxsize=256)
def _fit_pass_model(hist: tuple, n: int) -> dict:
    counts = np.repeat(np.arange(n + 1), hist)
    bb = fit_betabinom(counts, n)
    zi = fit_betabinom(counts, n, zero_inflated=True, plain=bb)
    chosen = zi if zi["aic"] < bb["aic"] else bb
    return {**chosen, "chosen": chosen["model"], "fits": {"beta-binomial": bb, "zero-inflated beta-binomial": zi},
            "rule": "AIC: the zero-inflated model (3 parameters) when its AIC is lower than the beta-binomial's (2)"}


def model_pass_at_k(fit: dict, ks) -> np.ndarray:
    """pass@k for k in ks from a fit_betabinom / fit_pass_model result."""
    return betabinom_pass_at_k(fit["alpha"], fit["beta"], ks, fit["pi"])


def extrapolation_check(small_counts, n_small: int, large_counts, n_large: int) -> dict:
    """The model validated on the study's own data: fit on the counts of n_small samples per problem
    and predict pass@n_large, measured on the same problems with n_large samples (the unbiased
    estimator, which at k = n is the share of problems with c > 0). error = predicted - measured.
    naive: the measured pass@n_small, what one would say without a model (a floor for pass@n_large)."""
    fit = fit_pass_model(small_counts, n_small)
    predicted = float(model_pass_at_k(fit, [n_large])[0])
    measured = float(per_problem(large_counts, n_large, n_large).mean())
    naive = float(per_problem(small_counts, n_small, n_small).mean())
    return {"fit_n": n_small, "target_k": n_large, "model_used": fit["chosen"], "alpha": fit["alpha"], "beta": fit["beta"],
            "pi": fit["pi"], "predicted": predicted, "measured": measured, "error": predicted - measured,
            "naive": naive, "naive_error": naive - measured}


# ----------------------------------------------------------------------------- boundary, contrasts, tokens


def boundary(base_counts, rl_counts, ids) -> dict:
    """The edges of what each model can do, at one n: problems the base never solved (c = 0) that the
    trained model solved at least once, and the reverse, with their ids."""
    b, r = np.asarray(base_counts), np.asarray(rl_counts)
    only_rl = [ids[i] for i in np.flatnonzero((b == 0) & (r > 0))]
    only_base = [ids[i] for i in np.flatnonzero((b > 0) & (r == 0))]
    return {"only_rl": len(only_rl), "only_base": len(only_base), "only_rl_ids": only_rl, "only_base_ids": only_base,
            "solved_base": int(np.count_nonzero(b > 0)), "solved_rl": int(np.count_nonzero(r > 0))}


def lead_crossover(point: np.ndarray, reps: np.ndarray, level: float) -> dict:
    """Where two curves cross, whichever leads. point: (K,) contrast a - b; reps: (B, K). The side
    above at k = 1 is the leader ('a', 'b' or 'tie'); crossover_summary is then asked from its side
    (for 'b' on -(a - b)): the first k at which the leader is no longer above."""
    lead = "a" if point[0] > 1e-12 else "b" if point[0] < -1e-12 else "tie"
    sign = -1.0 if lead == "b" else 1.0
    return {"leader_at_k1": lead, **crossover_summary(sign * point, sign * reps, level)}


def condition_contrast(pa: np.ndarray, pb: np.ndarray, base: np.ndarray, idx: np.ndarray, sidx_a: np.ndarray,
                       sidx_b: np.ndarray, level: float) -> tuple[dict, np.ndarray, np.ndarray]:
    """Two conditions against each other and the base, on the same problems.
    pa: (Sa, N, K), pb: (Sb, N, K) per-seed, per-problem pass@k; base: (N, K).
    idx: (B, N) problem draws shared by both; sidx_a: (B, Sa), sidx_b: (B, Sb) seed draws, drawn
    independently (different training runs). Replicate b of each Delta is crossed_replicates', and
        C*_bk = Delta*_a,bk - Delta*_b,bk = mean_j pa[sidx_a[b,j], idx[b], k] - mean_j pb[sidx_b[b,j], idx[b], k],
    the base cancelling on shared problems. Returns the summary (the point curves, percentile
    intervals at k = 1 and k = K, the simultaneous band of C, where the curves cross) and the
    replicates (B, K) of Delta_a and Delta_b, from which other statistics (a ratio) are formed."""
    da, _, ra = _boot_curves(pa, base, idx, sidx_a)
    db, _, rb = _boot_curves(pb, base, idx, sidx_b)
    c, rc = da - db, ra - rb
    lo, hi, crit = simultaneous_band(c, rc, level)
    return {"k_max": len(c), "delta_a": da.tolist(), "delta_b": db.tolist(), "diff": c.tolist(), "lo": lo.tolist(), "hi": hi.tolist(),
            "crit": crit, "level": level,
            "diff_pass1": float(c[0]), "ci_pass1": list(percentile_interval(rc[:, 0], level)),
            "diff_passk": float(c[-1]), "ci_passk": list(percentile_interval(rc[:, -1], level)),
            "delta_a_ci_pass1": list(percentile_interval(ra[:, 0], level)), "delta_b_ci_pass1": list(percentile_interval(rb[:, 0], level)),
            "delta_a_ci_passk": list(percentile_interval(ra[:, -1], level)), "delta_b_ci_passk": list(percentile_interval(rb[:, -1], level)),
            "crossover": lead_crossover(c, rc, level)}, ra, rb


def compare_conditions(counts_a, counts_b, base_counts, n: int, k_max: int, resamples: int, seed: int,
                       level: float) -> tuple[dict, np.ndarray, np.ndarray]:
    """The controls' one entry point: two conditions' per-seed correct counts, counts_a (Sa, N) and
    counts_b (Sb, N), of n samples on the same N problems, and the base's (N,). pass@k curves for
    k = 1..k_max, then condition_contrast with the registered draws: problems from
    resample_indices(N, B, seed) (those of every entry), condition a's seeds from stream 1 (so its
    Delta replicates are its own entry's), condition b's from stream 2 (independent of a's)."""
    ca, cb = np.atleast_2d(counts_a), np.atleast_2d(counts_b)
    pa = np.stack([pass_at_k_curves(c, n, k_max) for c in ca])  # (Sa, N, K)
    pb = np.stack([pass_at_k_curves(c, n, k_max) for c in cb])  # (Sb, N, K)
    base = pass_at_k_curves(base_counts, n, k_max)  # (N, K)
    idx = resample_indices(base.shape[0], resamples, seed)
    return condition_contrast(pa, pb, base, idx, seed_resample_indices(len(ca), resamples, seed),
                              seed_resample_indices(len(cb), resamples, seed, stream=2), level)


def ratio_estimate(num: float, den: float, num_reps: np.ndarray, den_reps: np.ndarray, level: float) -> dict:
    """The share num / den with a percentile interval of the replicate ratios num*_b / den*_b.
    Not estimable when den's own interval contains 0 (the ratio's distribution is then unbounded)."""
    den_ci = percentile_interval(den_reps, level)
    if den_ci[0] <= 0 <= den_ci[1]:
        return {"estimable": False, "share": None, "ci": None, "why": f"the reference gain's {level:.0%} interval contains 0"}
    return {"estimable": True, "share": num / den, "ci": list(percentile_interval(np.asarray(num_reps) / np.asarray(den_reps), level)),
            "why": None}


def token_summary(problems: list[dict]) -> dict:
    """The token-level summary (arXiv 2605.06241 §3), pooled over every response position of every
    problem: classes 0 unchanged, 1 reranked, 2 shifted; shares of each; mean base rank of the
    trained model's choice at changed positions (class > 0); mean base entropy at changed and at
    unchanged positions, and their ratio (None where a group is empty or the denominator is 0)."""
    cls = np.concatenate([np.asarray(p["classes"], int) for p in problems]) if problems else np.zeros(0, int)
    rank = np.concatenate([np.asarray(p["ranks"], float) for p in problems]) if problems else np.zeros(0)
    ent = np.concatenate([np.asarray(p["base_entropy"], float) for p in problems]) if problems else np.zeros(0)
    P = cls.size
    changed = cls > 0

    def mean(x):
        return float(x.mean()) if x.size else None
    ec, eu = mean(ent[changed]), mean(ent[~changed])
    return {"positions": int(P), "unchanged": int(np.count_nonzero(cls == 0)), "reranked": int(np.count_nonzero(cls == 1)),
            "shifted": int(np.count_nonzero(cls == 2)),
            "share_unchanged": float(np.count_nonzero(cls == 0) / P) if P else None,
            "share_reranked": float(np.count_nonzero(cls == 1) / P) if P else None,
            "share_shifted": float(np.count_nonzero(cls == 2) / P) if P else None,
            "mean_rank_changed": mean(rank[changed]), "base_entropy_changed": ec, "base_entropy_unchanged": eu,
            "entropy_ratio": ec / eu if ec is not None and eu else None}


def find_twins(settings: dict[str, dict], varied: str, is_treated) -> list[tuple[str, str]]:
    """(treated, twin) pairs of registered conditions: treated satisfies is_treated(its settings);
    its twin is the first condition (config order) whose settings equal the treated one's on every
    key but `varied` and lr (a per-condition rate is a tuning, not a different recipe), and whose
    `varied` value is the default (DEFAULT_CONDITION). The controls are found from the registry's
    settings, never from a condition's name."""
    ignore = {varied, "lr"}
    pairs = []
    for name, s in settings.items():
        if not is_treated(s):
            continue
        for other, t in settings.items():
            if other != name and t[varied] == DEFAULT_CONDITION[varied] and \
                    all(t[k] == s[k] for k in DEFAULT_CONDITION if k not in ignore):
                pairs.append((name, other))
                break
    return pairs


# ============================================================================= design and inputs


@dataclass
class Design:
    """The evaluations a run is expected to hold, and the analysis settings, from its config."""
    conditions: list[str]  # in the config's order (PLAN.md's)
    seeds: list[int]
    checkpoints: list[int]
    legacy: bool  # a single-seed run before train.seeds: eval_<cond>_<step>.json, read as seed 0
    config: dict
    source: str  # the file the config came from
    resamples: int
    ci: float
    seed: int
    margin: float
    primary_condition: str
    primary_scoring: str
    power: float
    settings: dict = None  # condition -> its recipe, DEFAULT_CONDITION filled in (older runs: all defaults)
    eval_sets: dict = None  # set name -> {task, n, k_max, n_problems, models}, the sets besides `test`
    tokens_enabled: bool = False  # config tokens.enabled: the token files are then expected
    extrapolate_to: int = 1024  # analyze.extrapolate_to: the largest k of the model-based curve

    def eval_name(self, cond: str, seed: int, step: int) -> str:
        return f"eval_{cond}_{step:03d}.json" if self.legacy else f"eval_{cond}_s{seed}_{step:03d}.json"

    def train_dir(self, cond: str, seed: int) -> str:
        return f"train_{cond}" if self.legacy else f"train_{cond}_s{seed}"

    def expected(self) -> list[tuple[str, int, int]]:
        return [(c, s, st) for c in self.conditions for s in self.seeds for st in self.checkpoints]

    def set_expected(self, name: str) -> list[tuple[str, int, int]]:
        """The trained models a set evaluates besides the base: models all (every checkpoint), final
        (every seed at the last checkpoint) or final-first-seed (the first seed at the last one)."""
        models, last = self.eval_sets[name]["models"], self.checkpoints[-1]
        if models == "all":
            return self.expected()
        return [(c, s, last) for c in self.conditions for s in (self.seeds if models == "final" else self.seeds[:1])]

    def set_file(self, name: str, key: tuple[str, int, int] | None) -> str:
        """A set's file, relative to the run: evalsets/<set>/eval_base.json or .../eval_<c>_s<s>_<step>.json."""
        return f"evalsets/{name}/" + ("eval_base.json" if key is None else self.eval_name(*key))

    def token_name(self, cond: str, seed: int, step: int) -> str:
        return f"tokens_{cond}_s{seed}_{step:03d}.json"

    def n_expected(self) -> int:
        """Every file the completeness check counts: the test set's RL evaluations, each set's base
        and models, and the token files when tokens.enabled."""
        return (len(self.expected()) + sum(1 + len(self.set_expected(s)) for s in self.eval_sets)
                + (len(self.expected()) if self.tokens_enabled else 0))


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: missing")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})")


def read_design(run: Path, base: dict | None = None) -> Design:
    """The design from RUN/manifest.json's config if it exists, else from eval_base.json's
    provenance. config["conditions"] (a mapping, in order) or, in older runs, train.conditions
    (a list); train.seeds (absent in older runs: one seed, 0); train.checkpoints; analyze.*."""
    src = run / "manifest.json"
    if src.exists():
        cfg = read_json(src).get("config")
    else:
        src = run / "eval_base.json"
        cfg = (base if base is not None else read_json(src)).get("provenance", {}).get("config")
    if not isinstance(cfg, dict):
        raise InputError(f"{src}: no config recorded, so the expected design is unknown")
    train = cfg.get("train", {})
    conds = cfg.get("conditions", train.get("conditions"))
    conds = list(conds) if isinstance(conds, (dict, list)) else None
    seeds = train.get("seeds", [0])
    steps = train.get("checkpoints")
    an = {**ANALYZE_DEFAULTS, "seed": cfg.get("seed", 0), **cfg.get("analyze", {})}  # older runs: the bootstrap used the top-level seed

    def need(ok, key, what):
        if not ok:
            raise InputError(f"{src}: config {key} {what}")
    need(conds and all(isinstance(c, str) for c in conds), "conditions", "must name the conditions")
    need(isinstance(seeds, list) and seeds and all(isinstance(s, int) and s >= 0 for s in seeds), "train.seeds", "must be a list of seeds")
    need(isinstance(steps, list) and steps and all(isinstance(s, int) and s >= 1 for s in steps), "train.checkpoints", "must be a list of steps")

    def unit(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1
    need(isinstance(an["resamples"], int) and an["resamples"] >= 1, "analyze.resamples", "must be an integer >= 1")
    need(unit(an["ci"]), "analyze.ci", "must be in (0, 1)")
    need(isinstance(an["seed"], int), "analyze.seed", "must be an integer")
    need(unit(an["equivalence_margin"]), "analyze.equivalence_margin", "must be in (0, 1)")
    need(an["primary_condition"] in conds, "analyze.primary_condition", f"must be one of the conditions ({', '.join(conds)})")
    need(an["primary_scoring"] in SCORINGS, "analyze.primary_scoring", "must be strict or loose")
    need(unit(an["power"]), "analyze.power", "must be in (0, 1)")
    ext = an.get("extrapolate_to", 1024)
    need(isinstance(ext, int) and not isinstance(ext, bool) and ext >= 1, "analyze.extrapolate_to", "must be an integer >= 1")
    raw = cfg.get("conditions")
    settings = {}
    for c in conds:
        v = raw.get(c) if isinstance(raw, dict) else None
        need(v is None or isinstance(v, dict), f"conditions.{c}", "must be a mapping of settings")
        settings[c] = {**DEFAULT_CONDITION, **{k: x for k, x in (v or {}).items() if k in DEFAULT_CONDITION}}
        need(isinstance(settings[c]["kl"], (int, float)) and isinstance(settings[c]["entropy"], (int, float)),
             f"conditions.{c}.kl", "and entropy must be numbers")
    sets = {}
    raw_sets = cfg.get("eval_sets") or {}
    need(isinstance(raw_sets, dict), "eval_sets", "must be a mapping of set name to settings")
    for name, es in raw_sets.items():
        need(isinstance(es, dict) and name != "test", f"eval_sets.{name}", "must be a mapping (and 'test' is the eval section)")
        spec = {"task": es.get("task"), "n": es.get("n", 256), "k_max": es.get("k_max", 256), "n_problems": es.get("n_problems", 64),
                "models": es.get("models", "final-first-seed")}
        need(spec["models"] in EVAL_MODELS, f"eval_sets.{name}.models", f"must be one of {', '.join(EVAL_MODELS)}")
        need(all(isinstance(spec[k], int) and spec[k] >= 1 for k in ("n", "k_max", "n_problems")) and spec["k_max"] <= spec["n"],
             f"eval_sets.{name}.k_max", "needs integers n, n_problems >= 1 and 1 <= k_max <= n")
        spec["task"] = spec["task"] or cfg.get("task", {}).get("name")
        spec["ood"] = spec["task"] != cfg.get("task", {}).get("name")  # another task than the one trained on
        sets[name] = spec
    tokens = cfg.get("tokens") or {}
    return Design(conds, list(seeds), sorted(steps), "seeds" not in train, cfg, src.name, an["resamples"], an["ci"],
                  an["seed"], an["equivalence_margin"], an["primary_condition"], an["primary_scoring"], an["power"],
                  settings, sets, bool(isinstance(tokens, dict) and tokens.get("enabled")), ext)


def load_eval(path: Path, eval_set: str = "test") -> dict:
    """One eval file, its counts and fields checked. Its "eval_set" field, where present (older
    test-set files have none), must name the set whose folder holds it. The per-problem diversity
    fields (distinct_answers, answer_entropy, token_entropy) are optional; where present they must
    be numbers (token_entropy may be null)."""
    d = read_json(path)
    if d.get("eval_set", "test") != eval_set:
        raise InputError(f"{path}: its eval_set field is {d.get('eval_set')!r} but it lies in the folder of set {eval_set!r}")
    try:
        n = int(d["sampling"]["n"])
        probs = d["problems"]
        for p in probs:
            for s in SCORINGS:
                c = p[f"correct_{s}"]
                if not (isinstance(c, int) and 0 <= c <= p["n"] == n):
                    raise InputError(f"{path}: problem {p.get('id')}: correct_{s}={c!r} is not a count in 0..n={n}")
        if not probs:
            raise InputError(f"{path}: no problems")
        for p in probs:
            if p.get("id") is None:
                raise InputError(f"{path}: a problem has no id")
        if not isinstance(d["format_rate"], (int, float)):
            raise InputError(f"{path}: format_rate is not a number")
        for p in probs:
            for k, lo in (("distinct_answers", 1), ("answer_entropy", 0), ("token_entropy", 0)):
                x = p.get(k)
                if x is not None and not (isinstance(x, (int, float)) and not isinstance(x, bool) and (np.isnan(x) or x >= lo)):
                    raise InputError(f"{path}: problem {p.get('id')}: {k}={x!r} is not a number >= {lo}")
    except (KeyError, TypeError) as e:
        raise InputError(f"{path}: malformed eval file (missing or wrong field {e})")
    d["_file"] = path.name
    return d


def parse_eval_name(path: Path, design: Design) -> tuple[str, int, int] | None:
    """(condition, seed, step) from an eval file's name, or None for names that are not RL
    evaluations. In a single-seed (legacy) design eval_<cond>_<step>.json is seed 0; in a seeded
    design that name is a file from an earlier layout, an error."""
    m = EVAL_RE.match(path.name)
    if m and (not design.legacy or m["cond"] in design.conditions):
        return m["cond"], int(m["seed"]), int(m["step"])
    m = EVAL_RE_V1.match(path.name)
    if m:
        if not design.legacy:
            raise InputError(f"{path}: a file name without a training seed (an earlier layout); "
                             f"this design expects eval_<condition>_s<seed>_<step>.json")
        return m["cond"], 0, int(m["step"])
    return None


def find_evals(run: Path, design: Design | None = None, base: dict | None = None):
    """(base, rl, missing, design): rl maps (condition, seed, step) to a loaded eval file; missing
    names the expected files not found. A file the design does not expect is an error."""
    base = load_eval(run / "eval_base.json") if base is None else base
    design = read_design(run, base) if design is None else design
    rl, where = {}, {}
    for f in sorted(run.glob("eval_*.json")):
        key = parse_eval_name(f, design)
        if key is None:
            continue
        cond, seed, step = key
        if cond not in design.conditions or seed not in design.seeds or step not in design.checkpoints:
            raise InputError(f"{run / f.name}: condition {cond!r}, seed {seed}, step {step} is not in the design of "
                             f"{design.source} (conditions {design.conditions}, seeds {design.seeds}, checkpoints "
                             f"{design.checkpoints}): a stale file from another design?")
        if key in where:
            raise InputError(f"{run / f.name}: a second eval file for {cond} seed {seed} step {step} (also {where[key]})")
        where[key] = f.name
    if not where:
        raise InputError(f"{run}: no eval_<condition>_s<seed>_<step>.json files to compare with the base")
    if base.get("eval_set", "test") != "test":
        raise InputError(f"{run / 'eval_base.json'}: its eval_set field is {base['eval_set']!r}; the top-level files are the test set")
    for key, name in where.items():
        d = load_eval(run / name)
        for field, want in zip(("condition", "train_seed", "step"), key):
            if field in d and d[field] != want:
                raise InputError(f"{run / name}: its {field} field is {d[field]!r} but its name says {want!r}")
        rl[key] = d
    ids = [p["id"] for p in base["problems"]]
    for d in rl.values():
        if [p["id"] for p in d["problems"]] != ids:
            raise InputError(f"{run}/{d['_file']}: its test problems differ from eval_base.json's")
        if d["sampling"]["n"] != base["sampling"]["n"]:
            raise InputError(f"{run}/{d['_file']}: n={d['sampling']['n']} but the base has n={base['sampling']['n']}")
    missing = [design.eval_name(*key) for key in design.expected() if key not in rl]
    return base, rl, missing, design


def find_set(run: Path, design: Design, name: str) -> tuple[dict | None, dict, list[str]]:
    """(base or None, rl, missing) of the registered set `name` in RUN/evalsets/<name>/, checked
    like the test set: every file records this set and its task, n and number of problems are the
    config's, every RL file has the base's problems, and a file the set does not expect is an error."""
    spec, folder = design.eval_sets[name], run / "evalsets" / name
    expected = design.set_expected(name)
    missing, rl = [], {}

    def check(d: dict, f: Path):
        if d.get("eval_set") != name:
            raise InputError(f"{f}: its eval_set field is {d.get('eval_set')!r}, not {name!r}")
        if d.get("task", spec["task"]) != spec["task"]:
            raise InputError(f"{f}: task {d.get('task')!r}, but eval_sets.{name} evaluates {spec['task']!r}")
        if d["sampling"]["n"] != spec["n"] or len(d["problems"]) != spec["n_problems"]:
            raise InputError(f"{f}: {len(d['problems'])} problems x n={d['sampling']['n']}, but eval_sets.{name} registers "
                             f"{spec['n_problems']} x {spec['n']}")
    base = None
    if (folder / "eval_base.json").exists():
        base = load_eval(folder / "eval_base.json", name)
        check(base, folder / "eval_base.json")
    else:
        missing.append(design.set_file(name, None))
    for f in sorted(folder.glob("eval_*.json")) if folder.is_dir() else []:
        key = parse_eval_name(f, design)
        if key is None:
            continue
        if key not in expected:
            raise InputError(f"{f}: {key[0]} seed {key[1]} step {key[2]} is not among the models of eval_sets.{name} "
                             f"(models: {spec['models']}): a stale file from another design?")
        d = load_eval(f, name)
        check(d, f)
        for field, want in zip(("condition", "train_seed", "step"), key):
            if field in d and d[field] != want:
                raise InputError(f"{f}: its {field} field is {d[field]!r} but its name says {want!r}")
        if base is not None and [p["id"] for p in d["problems"]] != [p["id"] for p in base["problems"]]:
            raise InputError(f"{f}: its problems differ from {design.set_file(name, None)}'s")
        rl[key] = d
    missing += [design.set_file(name, key) for key in expected if key not in rl]
    return base, rl, missing


TOKENS_RE = re.compile(r"^tokens_(?P<cond>.+)_s(?P<seed>\d+)_(?P<step>\d+)\.json$")
TOKEN_SUMMARY = ("positions", "unchanged", "reranked", "shifted", "share_unchanged", "share_reranked", "share_shifted",
                 "mean_rank_changed", "base_entropy_changed", "base_entropy_unchanged", "entropy_ratio")


def find_tokens(run: Path, design: Design) -> tuple[dict, list[str], list[str]]:
    """(docs, missing, warnings): RUN/tokens_<cond>_s<seed>_<step>.json by (condition, seed, step).
    Each file's summary is recomputed from its per-problem detail (token_summary); the recomputed
    values are the ones reported, and a file whose own summary differs says so in a warning. Missing
    files count only when tokens.enabled (otherwise the report shows what exists)."""
    docs, warnings = {}, []
    for f in sorted(run.glob("tokens_*.json")):
        m = TOKENS_RE.match(f.name)
        key = (m["cond"], int(m["seed"]), int(m["step"])) if m else None
        if key is None or key not in design.expected():
            raise InputError(f"{f}: not a checkpoint of the design (conditions {design.conditions}, seeds {design.seeds}, "
                             f"checkpoints {design.checkpoints})")
        d = read_json(f)
        try:
            probs = d["problems"]
            for p in probs:
                L = len(p["classes"])
                if len(p["ranks"]) != L or len(p["base_entropy"]) != L or any(c not in (0, 1, 2) for c in p["classes"]):
                    raise InputError(f"{f}: problem {p.get('id')}: classes (0, 1, 2), ranks and base_entropy must be lists of one length")
            own = {k: d["summary"][k] for k in TOKEN_SUMMARY}
        except (KeyError, TypeError) as e:
            raise InputError(f"{f}: malformed token file (missing or wrong field {e})")
        for field, want in zip(("condition", "train_seed", "step"), key):
            if field in d and d[field] != want:
                raise InputError(f"{f}: its {field} field is {d[field]!r} but its name says {want!r}")
        d["_summary"] = token_summary(probs)
        d["_file"] = f.name
        off = [k for k in TOKEN_SUMMARY if not _close(own[k], d["_summary"][k])]
        if off:
            warnings.append(f"{f.name}: its summary differs from its per-problem detail in {', '.join(off)}; the report recomputes them")
        docs[key] = d
    missing = [design.token_name(*k) for k in design.expected() if k not in docs] if design.tokens_enabled else []
    return docs, missing, warnings


def _close(a, b) -> bool:
    """Equal within 1e-5 + 1e-4 relative (the per-position entropies are stored to 5 decimals);
    None and NaN are the same 'no value'."""
    na, nb = a is None or (isinstance(a, float) and np.isnan(a)), b is None or (isinstance(b, float) and np.isnan(b))
    if na or nb:
        return na and nb
    return abs(a - b) <= 1e-5 + 1e-4 * max(abs(a), abs(b))


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


# ============================================================================= analysis


def _entry(cond: str, step: int, sc: str, seeds: list[int], docs: list[dict], base: dict, base_curves: np.ndarray,
           pr: np.ndarray, idx: np.ndarray, sidx: np.ndarray, ci: float, at: float, margin: float) -> tuple[dict, np.ndarray]:
    """One condition x checkpoint x scoring: its estimates, intervals, raw p-values, crossover,
    band and counts (the adjusted p-values and verdicts come later, once the families are known).
    base_curves: (N, K) the base's per-problem pass@k; pr: (S, N, K) each seed's. Returns the
    entry and its replicate curves (B, K)."""
    point, per_seed, reps = _boot_curves(pr, base_curves, idx, sidx)
    d1, dk = float(point[0]), float(point[-1])
    ci1, cik = percentile_interval(reps[:, 0], ci), percentile_interval(reps[:, -1], ci)
    band_lo, band_hi, crit = simultaneous_band(point, reps, ci)
    cb = np.array([p[f"correct_{sc}"] for p in base["problems"]])
    cr = np.array([[p[f"correct_{sc}"] for p in d["problems"]] for d in docs])  # (S, N)
    cover = [int(np.count_nonzero(c > 0)) for c in cr]
    only_rl = [int(np.count_nonzero((c > 0) & (cb == 0))) for c in cr]
    only_base = [int(np.count_nonzero((cb > 0) & (c == 0))) for c in cr]
    return {
        "condition": cond, "step": step, "scoring": sc, "k_max": len(point), "seeds": seeds,
        "pass1_base": float(base_curves[:, 0].mean()), "pass1_rl": float(pr[:, :, 0].mean(axis=1).mean()),
        "pass1_diff": d1, "pass1_ci": list(ci1),
        "passk_base": float(base_curves[:, -1].mean()), "passk_rl": float(pr[:, :, -1].mean(axis=1).mean()),
        "passk_diff": dk, "passk_ci": list(cik), "passk_ci90": list(percentile_interval(reps[:, -1], 1 - 2 * at)),
        "equivalence_margin": margin,
        "p_pass1": p_above(reps[:, 0]), "p_passk_fall": p_below(reps[:, -1]), "p_equiv": p_equivalence(reps[:, -1], margin),
        "ceiling_rises": bool(cik[0] > 0),
        **verdict_v1(d1, ci1, dk, cik),
        "crossover": crossover_summary(point, reps, ci),
        "band": {"level": ci, "crit": crit, "diff": point.tolist(), "lo": band_lo.tolist(), "hi": band_hi.tolist()},
        "per_seed": [{"seed": s, "pass1_diff": float(ps[0]), "passk_diff": float(ps[-1]), "coverage_rl": cv, "only_rl": o_rl,
                      "only_base": o_b, "format_rl": d["format_rate"]}
                     for s, ps, cv, o_rl, o_b, d in zip(seeds, per_seed, cover, only_rl, only_base, docs)],
        "coverage_base": int(np.count_nonzero(cb > 0)), "coverage_rl": float(np.mean(cover)),
        "only_rl": float(np.mean(only_rl)), "only_base": float(np.mean(only_base)),
        "format_base": base["format_rate"], "format_rl": float(np.mean([d["format_rate"] for d in docs])),
    }, reps


def _judge(entries: list[dict], boot: dict, a1: float, at: float, ci: float, margin: float) -> dict:
    """Holm within each secondary family (three tests per entry, each on its own level), then the
    verdicts of every entry from its adjusted p-values (the primary entry: raw p-values), and the
    one-third clause. Returns the family definitions."""
    families = {}
    for sc in SCORINGS:
        fam = [e for e in entries if e["family"] == f"secondary-{sc}"]
        p = [x for e in fam for x in (e["p_pass1"], e["p_passk_fall"], e["p_equiv"])]
        adj = holm(p, [a1, a1, at] * len(fam))
        for i, e in enumerate(fam):
            e["p_pass1_adj"], e["p_passk_fall_adj"], e["p_equiv_adj"] = (float(x) for x in adj[3 * i:3 * i + 3])
        families[f"secondary-{sc}"] = {
            "scoring": sc, "size": 3 * len(fam), "entries": [f"{e['condition']}/{e['step']}" for e in fam],
            "tests": [f"pass@1 rises (one-sided, level {a1:g})", f"ceiling falls (one-sided, level {a1:g})",
                      f"ceiling equivalent within ±{margin:g} (TOST, level {at:g})"]}
    for e in entries:
        if e["primary"]:
            e["p_pass1_adj"], e["p_passk_fall_adj"], e["p_equiv_adj"] = e["p_pass1"], e["p_passk_fall"], e["p_equiv"]
        e["pass1_rises"] = e["p_pass1_adj"] < a1
        e["ceiling_falls"] = e["p_passk_fall_adj"] < a1
        e["ceiling_equivalent"] = e["p_equiv_adj"] < at
        e["selection"] = selection_answer(e["p_pass1_adj"], e["p_passk_fall_adj"], e["p_equiv_adj"], a1, at)
        reps = boot[(e["condition"], e["step"], e["scoring"])]
        tc = third_clause_interval(reps[:, 0], reps[:, -1], ci) if e["pass1_rises"] else None
        e["third_clause_ci"] = list(tc) if tc else None
        e["third_clause"] = bool(tc[1] < 0) if tc else None
    return families


def analyze(run: Path, resamples: int | None = None, seed: int | None = None, partial: bool = False) -> dict:
    """Every statistic of the run, nothing written. Raises InputError for a malformed input, an
    evaluation outside the design, or (unless partial) an expected evaluation that is missing."""
    base, rl, missing, design = find_evals(run)
    sets = {}
    for name in design.eval_sets:
        sb, srl, smiss = find_set(run, design, name)
        sets[name] = (sb, srl, f"evalsets/{name}/")
        missing = missing + smiss
    tokens, tok_missing, tok_warnings = find_tokens(run, design)
    missing = missing + tok_missing
    if missing and not partial:
        raise InputError(f"{run}: {len(missing)} of {design.n_expected()} expected evaluations are missing "
                         f"({', '.join(missing)}); rerun the eval stage, or analyse what is there with --partial")
    B = resamples or design.resamples
    bseed = design.seed if seed is None else seed
    ci, margin = design.ci, design.margin
    a1, at = round((1 - ci) / 2, 12), round(1 - ci, 12)  # one-sided level (0.025), TOST level (0.05: the 90% interval)
    n, N = base["sampling"]["n"], len(base["problems"])
    k_max = design.config.get("eval", {}).get("k_max", n)
    if not (isinstance(k_max, int) and 1 <= k_max <= n):
        raise InputError(f"{design.source}: config eval.k_max={k_max!r} must be an integer in 1..n={n}")
    idx = resample_indices(N, B, bseed)  # one set of problem draws for every entry, H3 and the band
    seed_draws = {}

    def draws(S: int) -> np.ndarray:  # one set of seed draws per number of seeds
        if S not in seed_draws:
            seed_draws[S] = seed_resample_indices(S, B, bseed)
        return seed_draws[S]

    first, last = design.checkpoints[0], design.checkpoints[-1]
    curves = {sc: {"base": pass_at_k_curves([p[f"correct_{sc}"] for p in base["problems"]], n, k_max)} for sc in SCORINGS}
    entries, boot = [], {}
    for cond in design.conditions:
        for step in design.checkpoints:
            seeds = [s for s in design.seeds if (cond, s, step) in rl]
            if not seeds:  # a partial run
                continue
            docs = [rl[(cond, s, step)] for s in seeds]
            for sc in SCORINGS:
                pr = np.stack([pass_at_k_curves([p[f"correct_{sc}"] for p in d["problems"]], n, k_max) for d in docs])  # (S, N, K)
                curves[sc][(cond, step)] = (seeds, pr)
                e, boot[(cond, step, sc)] = _entry(cond, step, sc, seeds, docs, base, curves[sc]["base"], pr, idx,
                                                   draws(len(seeds)), ci, at, margin)
                e["primary"] = (cond, step, sc) == (design.primary_condition, last, design.primary_scoring)
                e["family"] = "primary" if e["primary"] else f"secondary-{sc}"
                entries.append(e)
    families = _judge(entries, boot, a1, at, ci, margin)
    # H3: Delta pass@k_max at the last minus the first checkpoint, the same seeds and problems in each replicate
    h3 = []
    for cond in design.conditions if last != first else []:
        for sc in SCORINGS:
            if (cond, first) not in curves[sc] or (cond, last) not in curves[sc]:
                continue
            (s1, p1), (s2, p2) = curves[sc][(cond, first)], curves[sc][(cond, last)]
            common = [s for s in s1 if s in s2]
            if not common:  # a partial run: no seed has both checkpoints yet
                continue
            a = p1[[s1.index(s) for s in common], :, -1]  # (S, N) pass@k_max at the first checkpoint
            b = p2[[s2.index(s) for s in common], :, -1]  # ... at the last
            reps = crossed_replicates(b, a, idx, draws(len(common)))
            p = p_below(reps)
            h3.append({"condition": cond, "scoring": sc, "first_step": first, "last_step": last, "seeds": common,
                       "passk_diff_first": crossed_estimate(a, curves[sc]["base"][:, -1])[0],
                       "passk_diff_last": crossed_estimate(b, curves[sc]["base"][:, -1])[0],
                       "diff": crossed_estimate(b, a)[0], "ci": list(percentile_interval(reps, ci)), "p_narrows": p, "narrows": p < a1})
    prim = next((e for e in entries if e["primary"]), None)
    if prim:
        reps = boot[(prim["condition"], prim["step"], prim["scoring"])]
        se1, sek = float(reps[:, 0].std(ddof=1)), float(reps[:, -1].std(ddof=1))
        power = {"power": design.power, "alpha_one_sided": a1, "alpha_tost": at, "n_problems": N, "seeds": len(prim["seeds"]),
                 "n_samples": n, "se_pass1": se1, "se_passk": sek, **detectable(se1, sek, a1, at, design.power, margin),
                 "method": "(z_{1-a} + z_power) x SE, SE = the crossed-bootstrap SE of the observed primary Delta "
                           "(normal approximation; the SE includes the RL model's spread, not only the base's)"}
        power["statement"] = power_sentence(power, k_max, margin)
    else:
        power = {"statement": "No power statement: the primary entry's evaluations are missing."}
    controls = analyze_controls(design, base, rl, entries, B, bseed, ci, last, k_max)
    beyond = analyze_beyond(design, base, rl, sets, last, n)
    diversity = analyze_diversity(design, base, rl, sets)
    ood = analyze_ood(design, sets, entries, curves, B, bseed, ci, draws, last, k_max)
    return {"entries": entries, "families": families, "h3": h3, "power": power, "design": design, "missing": missing,
            "controls": controls, "beyond": beyond, "diversity": diversity, "ood": ood, "tokens": analyze_tokens(design, tokens, tok_warnings),
            "sets": sets,
            "resamples": B, "ci": ci, "seed": bseed, "n": n, "k_max": k_max, "n_problems": N, "alpha_one": a1, "alpha_tost": at,
            "margin": margin, "base": base, "rl": rl, "curves": curves, "primary": prim,
            "primary_sentence": primary_sentence(prim, design, last, k_max, a1, at, margin)}


# ----------------------------------------------------------------------------- controls (H4-H6) and issue 14's measurements

CONTROL_SCORING = {"H4": "loose", "H5": "strict", "H6": "loose"}  # PLAN.md section 7b
DIVERSITY = (("distinct_answers", "distinct answers"), ("answer_entropy", "answer entropy (nats)"),
             ("token_entropy", "token entropy at T = 1 (nats)"))
PAPER_TABLE2 = {"source": "arXiv 2605.06241, Table 2 (a different model and task)", "share_reranked": [0.01, 0.04],
                "share_shifted": [0.0001, 0.0012], "entropy_ratio": [7.6, 12.6], "mean_rank_changed": [2.1, 2.4]}
MODEL_BASED = "model-based (beta-binomial)"


def _key_fields(key) -> dict:
    return {"condition": "base", "seed": None, "step": None} if key is None else {"condition": key[0], "seed": key[1], "step": key[2]}


def _label(key) -> str:
    return "base" if key is None else f"{key[0]} s{key[1]} step {key[2]}"


def _counts(doc: dict, sc: str) -> np.ndarray:
    return np.array([p[f"correct_{sc}"] for p in doc["problems"]])


def _ordered(design: Design, docs: dict, step: int | None = None) -> list[tuple]:
    """The keys of docs in the design's order (conditions as registered, then seeds, then steps)."""
    return [k for k in design.expected() if k in docs and (step is None or k[2] == step)]


def analyze_controls(design: Design, base: dict, rl: dict, entries: list[dict], B: int, bseed: int, ci: float, last: int,
                     k_max: int) -> dict:
    """H4-H6 (PLAN.md section 7b), each asked of every registered pair its settings define
    (find_twins), at the last checkpoint; a hypothesis whose conditions are not registered, or whose
    evaluations are missing, is listed as skipped with the reason. Seeds of the two conditions are
    drawn independently (compare_conditions), problems shared."""
    out = {"step": last, "scorings": dict(CONTROL_SCORING), "h4": [], "h5": [], "h6": [], "skipped": []}
    by_key = {(e["condition"], e["step"], e["scoring"]): e for e in entries}
    n = base["sampling"]["n"]

    def seeds_of(c):
        return [s for s in design.seeds if (c, s, last) in rl]

    def contrast(sc, a, b):
        sa, sb = seeds_of(a), seeds_of(b)
        summ, ra, rb = compare_conditions([_counts(rl[(a, s, last)], sc) for s in sa], [_counts(rl[(b, s, last)], sc) for s in sb],
                                          _counts(base, sc), n, k_max, B, bseed, ci)
        return summ, ra, rb, sa, sb

    def ready(h, sc, a, b) -> bool:
        lacking = [c for c in (a, b) if not seeds_of(c)]
        if lacking:
            out["skipped"].append({"hypothesis": h, "conditions": [a, b], "why": f"no evaluation of {', '.join(lacking)} at step {last}"})
        return not lacking

    st = design.settings
    pairs = find_twins(st, "kl", lambda s: s["kl"] > 0)
    if not pairs:
        out["skipped"].append({"hypothesis": "H4", "conditions": [], "why": "no registered condition with a KL anchor (kl > 0) and an unanchored twin"})
    for anchored, plain in pairs:
        sc = CONTROL_SCORING["H4"]
        if not ready("H4", sc, anchored, plain):
            continue
        ea, eb = by_key[(anchored, last, sc)], by_key[(plain, last, sc)]
        summ, _, _, sa, sb = contrast(sc, anchored, plain)
        out["h4"].append({
            "anchored": anchored, "unanchored": plain, "kl": st[anchored]["kl"], "step": last, "scoring": sc, "k_max": k_max,
            "anchored_passk_diff": ea["passk_diff"], "anchored_passk_ci90": ea["passk_ci90"], "anchored_p_equiv_adj": ea["p_equiv_adj"],
            "anchored_ceiling_equivalent": ea["ceiling_equivalent"],
            "unanchored_passk_diff": eb["passk_diff"], "unanchored_passk_ci": eb["passk_ci"],
            "unanchored_p_falls_adj": eb["p_passk_fall_adj"], "unanchored_ceiling_falls": eb["ceiling_falls"],
            "holds": bool(ea["ceiling_equivalent"] and eb["ceiling_falls"]),
            "contrast": summ["diff_passk"], "contrast_ci": summ["ci_passk"], "seeds_anchored": sa, "seeds_unanchored": sb,
            "contrast_curve": {k: summ[k] for k in ("diff", "lo", "hi", "crit", "level")},
            "test": f"anchored: TOST within ±{design.margin:g} on its Holm-adjusted p (entry {anchored}/{last}/{sc}); unanchored: "
                    f"ceiling falls on its Holm-adjusted p (entry {plain}/{last}/{sc}); H4 holds when both do. The contrast "
                    f"Δpass@{k_max}({anchored}) − Δpass@{k_max}({plain}) is descriptive (crossed bootstrap, seeds of the two "
                    f"conditions drawn independently, problems shared)"})
    pairs = find_twins(st, "reward", lambda s: s["reward"] == "format")
    if not pairs:
        out["skipped"].append({"hypothesis": "H5", "conditions": [], "why": "no registered format-reward condition with a strict-reward twin"})
    for fmt, ref in pairs:
        sc = CONTROL_SCORING["H5"]
        if not ready("H5", sc, fmt, ref):
            continue
        summ, ra, rb, sa, sb = contrast(sc, ref, fmt)  # a = the reference (its replicates are its entry's)
        d_ref, d_fmt = summ["delta_a"][0], summ["delta_b"][0]
        out["h5"].append({
            "condition": fmt, "reference": ref, "step": last, "scoring": sc, "gain": d_fmt, "gain_ci": summ["delta_b_ci_pass1"],
            "reference_gain": d_ref, "reference_gain_ci": summ["delta_a_ci_pass1"], **ratio_estimate(d_fmt, d_ref, rb[:, 0], ra[:, 0], ci),
            "seeds_condition": sb, "seeds_reference": sa,
            "statistic": f"share = Δ{sc} pass@1({fmt}) / Δ{sc} pass@1({ref}); percentile interval of the replicate ratios; an estimate, not a test"})
    pairs = find_twins(st, "method", lambda s: s["method"] in ("rft", "sft"))
    if not pairs:
        out["skipped"].append({"hypothesis": "H6", "conditions": [], "why": "no registered rft or sft condition with a GRPO twin"})
    for other, rlc in pairs:
        sc = CONTROL_SCORING["H6"]
        if not ready("H6", sc, other, rlc):
            continue
        summ, _, _, sa, sb = contrast(sc, rlc, other)
        lead = summ["crossover"]["leader_at_k1"]
        summ["crossover"]["leader_at_k1"] = {"a": rlc, "b": other}.get(lead, "tie")
        out["h6"].append({"rl": rlc, "other": other, "method": st[other]["method"], "step": last, "scoring": sc, **summ,
                          "seeds_rl": sa, "seeds_other": sb,
                          "statistic": f"Δ_k = pass@k({rlc}) − pass@k({other}), k = 1..{k_max}; simultaneous {ci:.0%} band (max-|t|); "
                                       "descriptive, secondary, not adjusted"})
    return out


def _largest_set(design: Design, sets: dict, n_test: int) -> str | None:
    """The set on the trained task with the most samples per problem, if it has more than the test set."""
    cands = [(spec["n"], name) for name, spec in design.eval_sets.items() if not spec["ood"] and sets[name][0] is not None]
    return max(cands)[1] if cands and max(cands)[0] > n_test else None


def analyze_beyond(design: Design, base: dict, rl: dict, sets: dict, last: int, n_test: int) -> dict:
    """pass@k beyond n (the beta-binomial fits, per model and scoring, on the largest-n set), the
    model's check against the study's own data (fit on the test set's counts of the large set's
    problems, predict the large set's measured pass@n) and the boundary counts at that n."""
    big = _largest_set(design, sets, n_test)
    if big:
        bdoc, brl, n, prefix = sets[big][0], sets[big][1], design.eval_sets[big]["n"], f"evalsets/{big}/"
    else:
        bdoc, brl, n, prefix = base, rl, n_test, ""
    ext = design.extrapolate_to
    models = [(None, bdoc)] + [(k, brl[k]) for k in _ordered(design, brl, last)]
    fits, curves_out, check, bound = [], {}, [], []
    for key, d in models:
        for sc in SCORINGS:
            c = _counts(d, sc)
            f = fit_pass_model(c, n)
            ks = np.unique(np.geomspace(n, max(ext, n), 64).round().astype(int))
            curves_out[(key, sc)] = {"measured": pass_at_k_curves(c, n, n).mean(axis=0), "ks_model": ks, "model": model_pass_at_k(f, ks)}
            fits.append({**_key_fields(key), "model": _label(key), "scoring": sc, "file": prefix + d["_file"], "n": n,
                         "n_problems": len(c), "chosen": f["chosen"], "alpha": f["alpha"], "beta": f["beta"], "pi": f["pi"],
                         "aic": {m: g["aic"] for m, g in f["fits"].items()}, "loglik": {m: g["loglik"] for m, g in f["fits"].items()},
                         "at_bound": f["at_bound"], "measured_pass_at_n": float(per_problem(c, n, n).mean()),
                         "model_pass_at_n": float(model_pass_at_k(f, [n])[0]), "extrapolate_to": ext,
                         "model_pass_at_extrapolated": float(model_pass_at_k(f, [ext])[0])})
            if key is not None:
                bound.append({**_key_fields(key), "model": _label(key), "scoring": sc, "n": n, "file": prefix + d["_file"],
                              "base_file": prefix + bdoc["_file"], **boundary(_counts(bdoc, sc), c, [p["id"] for p in d["problems"]])})
    skipped = None
    if big:
        pos = {p["id"]: i for i, p in enumerate(base["problems"])}
        ids = [p["id"] for p in bdoc["problems"]]
        if design.eval_sets[big]["task"] != (design.config.get("task") or {}).get("name") or any(i not in pos for i in ids):
            skipped = f"the problems of {prefix}eval_base.json are not all test problems"
        else:
            sub = [pos[i] for i in ids]
            for key, d in models:
                td = base if key is None else rl.get(key)
                if td is None:
                    continue
                for sc in SCORINGS:
                    r = extrapolation_check(_counts(td, sc)[sub], n_test, _counts(d, sc), n)
                    check.append({**_key_fields(key), "model": _label(key), "scoring": sc, "fit_file": td["_file"],
                                  "target_file": prefix + d["_file"], "n_problems": len(ids), **r})
    else:
        skipped = "no evaluation set has more samples per problem than the test set"
    return {"set": big or "test", "n": n, "extrapolate_to": ext,
            "rule": "maximum likelihood (scipy Nelder-Mead on logit μ, log(α + β), logit π; fit_betabinom); the zero-inflated "
                    "beta-binomial (3 parameters) when its AIC is lower than the beta-binomial's (2)", "label": MODEL_BASED, "fits": fits, "check": check, "check_skipped": skipped, "boundary": bound,
            "_curves": curves_out}


def _diversity_means(doc: dict) -> dict:
    """Mean over problems of each diversity field (None when no problem carries it)."""
    out = {}
    for k, _ in DIVERSITY:
        v = [p[k] for p in doc["problems"] if p.get(k) is not None and not np.isnan(p[k])]
        out[k] = float(np.mean(v)) if v else None
    return out


def analyze_diversity(design: Design, base: dict, rl: dict, sets: dict) -> dict:
    """Per model (every set that carries the fields) the mean over problems of distinct answers,
    answer entropy and token entropy; per set, condition and checkpoint the mean over seeds."""
    models, conds = [], []
    for name, (b, docs, prefix) in [("test", (base, rl, ""))] + [(s, (v[0], v[1], f"evalsets/{s}/")) for s, v in sets.items()]:
        if b is None:
            continue
        rows = [(None, b)] + [(k, docs[k]) for k in _ordered(design, docs)]
        got = [(k, d, _diversity_means(d)) for k, d in rows]
        if all(v is None for _, _, m in got for v in m.values()):
            continue  # files from before the diversity fields
        for k, d, m in got:
            models.append({"set": name, **_key_fields(k), "model": _label(k), "file": prefix + d["_file"], **m})
        conds.append({"set": name, "condition": "base", "step": None, "seeds": [], **got[0][2]})
        for c in design.conditions:
            for st in design.checkpoints:
                ms = [(k[1], m) for k, _, m in got[1:] if (k[0], k[2]) == (c, st)]
                if ms:
                    conds.append({"set": name, "condition": c, "step": st, "seeds": [s for s, _ in ms],
                                  **{f: (float(np.mean([m[f] for _, m in ms if m[f] is not None])) if any(m[f] is not None for _, m in ms) else None)
                                     for f, _ in DIVERSITY}})
    return {"models": models, "conditions": conds, "fields": {k: w for k, w in DIVERSITY}}


def analyze_ood(design: Design, sets: dict, entries: list[dict], curves: dict, B: int, bseed: int, ci: float, draws,
                last: int, k_test: int) -> dict:
    """Test vs each out-of-distribution set (a set whose task is not the trained one), per condition at
    the last checkpoint and scoring: pass@1 and pass@k_max with Delta vs base; the test side from the
    registered entries, the out-of-distribution side from its own crossed bootstrap (its problems
    drawn by resample_indices(N_ood, B, seed)), percentile intervals, not adjusted: descriptive."""
    by_key = {(e["condition"], e["step"], e["scoring"]): e for e in entries}
    out = {}
    for name, spec in design.eval_sets.items():
        b, docs, _ = sets[name]
        if not spec["ood"] or b is None:
            continue
        n, K = spec["n"], spec["k_max"]
        idx = resample_indices(len(b["problems"]), B, bseed)
        rows, figure = [], {}
        for sc in SCORINGS:
            bc = pass_at_k_curves(_counts(b, sc), n, K)  # (N, K)
            figure[(sc, "base")] = (curves[sc]["base"].mean(axis=0), bc.mean(axis=0))
            rows.append({"condition": "base", "step": None, "scoring": sc, "seeds": [],
                         "test_pass1": float(curves[sc]["base"][:, 0].mean()), "test_passk": float(curves[sc]["base"][:, -1].mean()),
                         "ood_pass1": float(bc[:, 0].mean()), "ood_passk": float(bc[:, -1].mean())})
            for c in design.conditions:
                keys = [k for k in _ordered(design, docs, last) if k[0] == c]
                e = by_key.get((c, last, sc))
                if not keys or e is None:
                    continue
                pr = np.stack([pass_at_k_curves(_counts(docs[k], sc), n, K) for k in keys])  # (S, N, K)
                point, _, reps = _boot_curves(pr[..., [0, K - 1]], bc[:, [0, K - 1]], idx, draws(len(keys)))
                figure[(sc, c)] = (curves[sc][(c, last)][1].mean(axis=1).mean(axis=0), pr.mean(axis=1).mean(axis=0))
                rows.append({"condition": c, "step": last, "scoring": sc, "seeds": [k[1] for k in keys],
                             "test_pass1": e["pass1_rl"], "test_pass1_diff": e["pass1_diff"], "test_pass1_ci": e["pass1_ci"],
                             "test_passk": e["passk_rl"], "test_passk_diff": e["passk_diff"], "test_passk_ci": e["passk_ci"],
                             "ood_pass1": float(pr[:, :, 0].mean()), "ood_pass1_diff": float(point[0]),
                             "ood_pass1_ci": list(percentile_interval(reps[:, 0], ci)),
                             "ood_passk": float(pr[:, :, -1].mean()), "ood_passk_diff": float(point[1]),
                             "ood_passk_ci": list(percentile_interval(reps[:, 1], ci))})
        out[name] = {"task": spec["task"], "n": n, "k_max": K, "test_k_max": k_test, "n_problems": len(b["problems"]), "rows": rows,
                     "note": "Secondary and descriptive: percentile intervals of the crossed bootstrap, not adjusted for multiplicity",
                     "_figure": figure}
    return out


def analyze_tokens(design: Design, docs: dict, warnings: list[str]) -> dict:
    """One row per token file (condition x seed x checkpoint), its summary recomputed from the
    per-problem detail, beside the paper's ranges."""
    rows = [{**_key_fields(k), "file": docs[k]["_file"], **docs[k]["_summary"]} for k in _ordered(design, docs)]
    return {"enabled": design.tokens_enabled, "rows": rows, "paper": PAPER_TABLE2, "warnings": warnings,
            "note": "summaries pooled over every response position of every problem, recomputed from each file's per-problem detail"}


# ----------------------------------------------------------------------------- sentences


def _ci(x) -> str:
    return f"[{x[0]:+.3f}, {x[1]:+.3f}]"


def _p(p: float) -> str:
    return f"{p:.4f}"


def primary_sentence(e: dict | None, design: Design, last: int, k: int, a1: float, at: float, margin: float) -> str:
    """The primary question and its answer in one sentence, with the intervals behind it."""
    q = (f"Does RL on `{design.primary_condition}` select ({design.primary_scoring} scoring, step {last}"
         + (f", {len(e['seeds'])} seed{'s' if len(e['seeds']) > 1 else ''}" if e else "") + ")?")
    if e is None:
        return f"{q} Not answered: its evaluations are missing (partial report)."
    rise = (f"pass@1 {'rises' if e['pass1_rises'] else 'does not rise'}: {e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])} "
            f"(one-sided p = {_p(e['p_pass1'])} {'<' if e['pass1_rises'] else '≥'} {a1:g})")
    ceil = (f"pass@{k} {e['passk_diff']:+.3f}, 90% CI {_ci(e['passk_ci90'])}, "
            + ("within" if e["ceiling_equivalent"] else "not shown within")
            + f" ±{margin:g} (TOST p = {_p(e['p_equiv'])} {'<' if e['ceiling_equivalent'] else '≥'} {at:g}) and "
            + ("lower" if e["ceiling_falls"] else "not shown lower")
            + f" (one-sided p = {_p(e['p_passk_fall'])} {'<' if e['ceiling_falls'] else '≥'} {a1:g})")
    if e["selection"]:
        return f"{q} **Yes**: {rise}, and the ceiling is {'equivalent' if e['ceiling_equivalent'] else 'lower'}: {ceil}."
    why = "pass@1 is not shown to rise" if not e["pass1_rises"] else "the ceiling is neither shown equivalent nor lower"
    return f"{q} **No** ({why}): {rise}; {ceil}."


def power_sentence(pw: dict, k: int, margin: float) -> str:
    eq = (f"the equivalence test has {pw['power']:.0%} power when the true |Δpass@{k}| is at most {pw['equivalence_up_to']:.3f}"
          if pw["equivalence_up_to"] is not None else
          f"no true Δpass@{k} gives the equivalence test {pw['power']:.0%} power (the SE is too large for the ±{margin:g} margin)")
    return (f"With {pw['n_problems']} problems, {pw['seeds']} seed{'s' if pw['seeds'] > 1 else ''} and n = {pw['n_samples']} samples, "
            f"the crossed-bootstrap SE of the primary Δpass@1 is {pw['se_pass1']:.3f} and of Δpass@{k} {pw['se_passk']:.3f}; "
            f"with {pw['power']:.0%} power at one-sided level {pw['alpha_one_sided']:g} the design detects Δpass@1 ≥ {pw['mde_pass1']:.3f} "
            f"and |Δpass@{k}| ≥ {pw['mde_passk']:.3f} ((z_{{1-α}} + z_power) × SE, the SE of the observed primary Δ); {eq}.")


def ceiling_words(e: dict) -> str:
    words = [w for w, on in (("equivalent", e["ceiling_equivalent"]), ("falls", e["ceiling_falls"]),
                             ("ceiling rises", e["ceiling_rises"])) if on]
    return ", ".join(words) or "inconclusive"


def _share(x: float) -> str:
    return "<1%" if 0 < x < 0.005 else ">99%" if 0.995 < x < 1 else f"{x:.0%}"


def crossover_words(c: dict) -> str:
    pt = c["point"]
    head = f"k = {pt['k']}" if pt["outcome"] == "crosses" else pt["outcome"]
    cross = f"crosses {_share(c['cross_share'])}" + (f" (median k {c['median']:g}, 95% {c['ci'][0]:g}–{c['ci'][1]:g})" if c["median"] is not None else "")
    return f"{head}; replicates: {cross}, always above {_share(c['always_share'])}, never above {_share(c['never_share'])}"


def headline(verdicts: dict) -> str:
    """A short plain-text table for the terminal: the primary answer, then per condition and
    checkpoint on the primary scoring: Delta pass@1 [95% CI], adjusted verdict, Delta pass@k [95% CI],
    and what the ceiling did (equivalent / falls / ceiling rises / inconclusive)."""
    sc = verdicts["primary"]["scoring"]
    k = verdicts["k_max"]
    rows = [("condition", "step", "Δpass@1 [95% CI]", "p adj", "pass@1", f"Δpass@{k} [95% CI]", "ceiling")]
    for e in verdicts["entries"]:
        if e["scoring"] == sc:
            rows.append((e["condition"] + (" *" if e["primary"] else ""), str(e["step"]), f"{e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])}",
                         _p(e["p_pass1_adj"]), "rises" if e["pass1_rises"] else "-", f"{e['passk_diff']:+.3f} {_ci(e['passk_ci'])}",
                         ceiling_words(e)))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [verdicts["primary"]["sentence"].replace("**", ""), f"{sc} scoring (* primary; others Holm-adjusted):"]
    lines += ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    if verdicts.get("partial"):
        lines.insert(0, f"PARTIAL: missing {', '.join(verdicts['missing'])}")
    return "\n".join(lines)


# ============================================================================= figures


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_ticks(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _k_axis(ax, k_max: int) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    ax.set_xscale("log", base=2)
    ticks = [2 ** i for i in range(int(np.log2(k_max)) + 1)] + ([k_max] if k_max & (k_max - 1) else [])
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("k (samples)")


def training_files(run: Path, name: str) -> list[tuple[str, int | None, Path]]:
    """[(condition, seed or None, path)] for every RUN/train_*/<name>, in the design's condition
    order where the design can be read, then by name; seeds ascending."""
    try:
        order = read_design(run).conditions
    except InputError:
        order = []
    found = []
    for f in run.glob(f"train_*/{name}"):
        m = TRAIN_RE.match(f.parent.name)
        found.append((m["cond"], int(m["seed"]) if m["seed"] else None, f))
    found.sort(key=lambda t: (order.index(t[0]) if t[0] in order else len(order), t[0], t[1] or 0))
    return found


def training_logs(run: Path) -> list[tuple[str, int | None, list[dict]]]:
    """[(condition, seed or None, rows)] for every RUN/train_*/train_log.csv (training_files' order)."""
    return [(c, s, _read_csv(f)) for c, s, f in training_files(run, "train_log.csv")]


TRAIN_PANELS = [("reward_mean", "mean reward (strict)"), ("zero_signal_frac", "groups with no signal (share)"),
                ("format_rate", "format rate"), ("len_mean", "mean response length (tokens)"),
                ("entropy_mean", "mean token entropy (nats)"), ("kl_mean", "mean k3 KL to the base")]


def training_figure(run: Path, checkpoints: list[int], dev: bool = True) -> Path | None:
    """RUN/figures/training.png from RUN/train_*/train_log.csv: one line per condition x seed,
    coloured by condition, the checkpoints as vertical lines. Only step and reward_mean are
    required; each optional column (TRAIN_PANELS) gets a panel when some log has a number in it. Returns None
    (and writes nothing) when there is no log. Safe to call while training or evaluation runs.
    With dev (the pipeline's call) it also draws training_dev.png where train_eval.csv files exist."""
    if dev:
        training_dev_figure(run, checkpoints)
    logs = [(c, s, rows) for c, s, rows in training_logs(Path(run)) if rows]
    if not logs:
        return None
    plt = _plt()
    panels = [(col, t) for col, t in TRAIN_PANELS  # a column no log has a number in (kl_mean when not logged) gets no panel
              if any(np.isfinite(r.get(col, np.nan)) for _, _, rows in logs for r in rows)]
    ncol = 2 if len(panels) > 1 else 1
    nrow = -(-len(panels) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.2 * nrow), squeeze=False)
    conds = list(dict.fromkeys(c for c, _, _ in logs))
    for ax, (col, title) in zip(axes.flat, panels):
        labelled = set()
        for c, s, rows in logs:
            if col not in rows[0]:
                continue
            color = COLORS[conds.index(c) % len(COLORS)]
            ax.plot([r["step"] for r in rows], [r[col] for r in rows], color=color, lw=1, alpha=0.8,
                    label=None if c in labelled else c)
            labelled.add(c)
        for st in checkpoints:
            ax.axvline(st, color="grey", ls="--", lw=0.8)
        ax.set_ylabel(title)
        ax.set_xlabel("training step")
        _integer_ticks(ax)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes[0, 0].legend(title="condition", fontsize=8)
    seeds = sorted({s for _, s, _ in logs if s is not None})
    fig.suptitle("training" + (f" ({len(seeds)} seeds per condition, one line each)" if seeds else "")
                 + (f"; dashed: checkpoints {', '.join(map(str, checkpoints))}" if checkpoints else ""), fontsize=10)
    fig.tight_layout()
    out = Path(run) / "figures"
    out.mkdir(exist_ok=True)
    path = _save(fig, out / "training.png")
    plt.close(fig)
    return path


def training_dev_figure(run: Path, checkpoints: list[int]) -> Path | None:
    """RUN/figures/training_dev.png from RUN/train_*/train_eval.csv (the held-out dev problems every
    train.dev_every steps): loose pass@1 and loose pass@n over steps, per condition a thick line for
    the mean over seeds (at the steps every seed has) and a thin line per seed. None when no file."""
    run = Path(run)
    logs = [(c, s or 0, rows) for c, s, f in training_files(run, "train_eval.csv")
            if (rows := _read_csv(f, required=DEV_REQUIRED, drawn=DEV_COLUMNS))]
    if not logs:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    conds = list(dict.fromkeys(c for c, _, _ in logs))
    ns = sorted({int(r["n"]) for _, _, rows in logs for r in rows if np.isfinite(r.get("n", np.nan))})
    for ax, (col, title) in zip(axes, (("loose_pass1", "loose pass@1 (dev)"), ("loose_passn", "loose pass@n (dev)"))):
        for c in conds:
            color = COLORS[conds.index(c) % len(COLORS)]
            runs = [{r["step"]: r.get(col, np.nan) for r in rows} for cc, _, rows in logs if cc == c]
            for r in runs:
                ax.plot(list(r), list(r.values()), color=color, lw=0.7, alpha=0.35)
            common = sorted(set.intersection(*(set(r) for r in runs)))
            ax.plot(common, [np.mean([r[s] for r in runs]) for s in common], color=color, lw=2,
                    label=f"{c} (mean of {len(runs)} seed{'s' if len(runs) > 1 else ''})")
        for st in checkpoints:
            ax.axvline(st, color="grey", ls="--", lw=0.8)
        ax.set_ylabel(title)
        ax.set_xlabel("training step")
        _integer_ticks(ax)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"held-out dev problems during training (train_eval.csv; n = {', '.join(map(str, ns)) or '?'} samples each; "
                 "thin: one seed)", fontsize=10)
    fig.tight_layout()
    out = run / "figures"
    out.mkdir(exist_ok=True)
    path = _save(fig, out / "training_dev.png")
    plt.close(fig)
    return path


def beyond_figure(out: Path, res: dict) -> Path | None:
    """pass@k on a log-k axis to analyze.extrapolate_to: measured (solid) to the largest n, the
    beta-binomial beyond it (dashed, labelled model-based), for the base and each condition's last
    checkpoint (its first seed in the large set)."""
    bz = res["beyond"]
    if not bz["fits"]:
        return None
    plt = _plt()
    n, ext = bz["n"], bz["extrapolate_to"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    shown = [None] + list(dict.fromkeys((f["condition"], f["seed"], f["step"]) for f in bz["fits"] if f["condition"] != "base"))
    firsts = {}
    for key in shown[1:]:
        firsts.setdefault(key[0], key)
    keys = [None] + list(firsts.values())
    for ax, sc in zip(axes, SCORINGS):
        for i, key in enumerate(keys):
            cv = bz["_curves"][(key, sc)]
            color = "black" if key is None else COLORS[(i - 1) % len(COLORS)]
            ax.plot(np.arange(1, n + 1), cv["measured"], color=color, lw=1.5, label=_label(key))
            if ext > n:
                ax.plot(cv["ks_model"], cv["model"], color=color, lw=1.5, ls="--")
        if ext > n:
            ax.plot([], [], color="grey", ls="--", label=MODEL_BASED)
            ax.axvline(n, color="grey", ls=":", lw=0.8)
        _k_axis(ax, max(ext, n))
        ax.set_ylabel(f"pass@k ({sc})")
        ax.set_title(f"{sc} scoring")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    src = "test set" if bz["set"] == "test" else f"set {bz['set']}"
    fig.suptitle(f"pass@k measured to n = {n} ({src}, solid) and {MODEL_BASED} to k = {ext} (dashed)", fontsize=10)
    fig.tight_layout()
    path = _save(fig, out / "passk_beyond_n.png")
    plt.close(fig)
    return path


def ood_figures(out: Path, res: dict) -> list[Path]:
    """Per out-of-distribution set: pass@k on the test set (left) and on the set (right), per scoring,
    the base and each condition's last checkpoint (mean over seeds)."""
    plt = _plt()
    paths = []
    for name, o in res["ood"].items():
        fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
        conds = [c for c in res["design"].conditions if ("loose", c) in o["_figure"]]
        for i, sc in enumerate(SCORINGS):
            for j, (where, K) in enumerate((("test", o["test_k_max"]), (name, o["k_max"]))):
                ax = axes[i, j]
                for c in ["base"] + conds:
                    if (sc, c) not in o["_figure"]:
                        continue
                    y = o["_figure"][(sc, c)][j]
                    ax.plot(np.arange(1, K + 1), y, color="black" if c == "base" else COLORS[conds.index(c) % len(COLORS)],
                            marker="o", ms=2, label=c)
                _k_axis(ax, K)
                ax.set_ylabel(f"pass@k ({sc})")
                ax.set_title(f"{where} ({o['task'] if j else 'in distribution'}), {sc}")
                ax.grid(alpha=0.3)
        axes[0, 0].legend(fontsize=7)
        fig.suptitle(f"in vs out of distribution: test vs {name}; step {res['design'].checkpoints[-1]}, mean over seeds", fontsize=10)
        fig.tight_layout()
        paths.append(_save(fig, out / f"ood_{name}.png"))
        plt.close(fig)
    return paths


def diversity_figure(out: Path, res: dict) -> Path | None:
    """Test set, last checkpoint: per condition the mean over seeds of each diversity field (bars),
    each seed a dot, the base a horizontal line."""
    dv, last = res["diversity"], res["design"].checkpoints[-1]
    rows = [r for r in dv["conditions"] if r["set"] == "test" and r["step"] == last]
    base = next((r for r in dv["conditions"] if r["set"] == "test" and r["condition"] == "base"), None)
    if not rows or base is None:
        return None
    plt = _plt()
    fields = [(k, t) for k, t in DIVERSITY if base[k] is not None]
    fig, axes = plt.subplots(1, len(fields), figsize=(4.2 * len(fields), 4), squeeze=False)
    for ax, (k, title) in zip(axes[0], fields):
        x = np.arange(len(rows))
        ax.bar(x, [np.nan if r[k] is None else r[k] for r in rows], color=[COLORS[i % len(COLORS)] for i in range(len(rows))], alpha=0.6)
        for i, r in enumerate(rows):
            ys = [m[k] for m in dv["models"] if m["set"] == "test" and (m["condition"], m["step"]) == (r["condition"], last) and m[k] is not None]
            ax.plot([i] * len(ys), ys, "k.", ms=5)
        ax.axhline(base[k], color="black", ls="--", lw=1, label="base")
        ax.set_xticks(x, [r["condition"] for r in rows], rotation=30)
        ax.set_ylabel(title)
        ax.grid(alpha=0.3, axis="y")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"diversity per problem, test set, step {last} (bars: mean over seeds; dots: seeds; dashed: base)", fontsize=10)
    fig.tight_layout()
    path = _save(fig, out / "diversity.png")
    plt.close(fig)
    return path


def controls_figure(out: Path, res: dict) -> Path | None:
    """H6: the contrast curves pass@k(GRPO) - pass@k(other) with their simultaneous bands."""
    h6 = res["controls"]["h6"]
    if not h6:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(h6), figsize=(5.5 * len(h6), 4), squeeze=False)
    for ax, h in zip(axes[0], h6):
        ks = np.arange(1, h["k_max"] + 1)
        ax.plot(ks, h["diff"], color="tab:blue", marker="o", ms=3, label=f"{h['rl']} − {h['other']}")
        ax.fill_between(ks, h["lo"], h["hi"], color="tab:blue", alpha=0.15, lw=0, label=f"{h['level']:.0%} simultaneous band")
        ax.axhline(0, color="black", lw=0.8)
        _k_axis(ax, h["k_max"])
        ax.set_ylabel(f"Δ pass@k ({h['scoring']}), GRPO − {h['method'].upper()}")
        ax.set_title(f"H6: {h['rl']} vs {h['other']}, step {h['step']}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = _save(fig, out / "controls_h6.png")
    plt.close(fig)
    return path


def figures(run: Path, res: dict) -> list[Path]:
    """Every figure of the report, in its order; each drawing function returns None (or []) when
    its inputs are absent."""
    out = run / "figures"
    out.mkdir(exist_ok=True)
    written = passk_figures(out, res)
    for f in (beyond_figure(out, res), *ood_figures(out, res), diversity_figure(out, res), controls_figure(out, res),
              training_figure(run, res["design"].checkpoints, dev=False), training_dev_figure(run, res["design"].checkpoints),
              lr_sweep_figure(run, out, res["design"])):
        if f:
            written.append(f)
    return written


def passk_figures(out: Path, res: dict) -> list[Path]:
    """figures/passk_<condition>.png: per scoring, pass@k of the base and each checkpoint (mean over
    seeds), and Delta pass@k with its simultaneous band."""
    plt = _plt()
    written = []
    design, k_max, n = res["design"], res["k_max"], res["n"]
    ks = np.arange(1, k_max + 1)
    for cond in design.conditions:
        steps = [st for st in design.checkpoints if (cond, st) in res["curves"]["loose"]]
        if not steps:
            continue
        fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
        for j, sc in enumerate(SCORINGS):
            top, bot = axes[0, j], axes[1, j]
            top.plot(ks, res["curves"][sc]["base"].mean(axis=0), color="black", marker="o", ms=3, label="base")
            for i, st in enumerate(steps):
                seeds, pr = res["curves"][sc][(cond, st)]
                color = COLORS[i % len(COLORS)]
                top.plot(ks, pr.mean(axis=1).mean(axis=0), color=color, marker="o", ms=3,
                         label=f"{cond} step {st} (mean of {len(seeds)} seed{'s' if len(seeds) > 1 else ''})")
                e = next(e for e in res["entries"] if (e["condition"], e["step"], e["scoring"]) == (cond, st, sc))
                b = e["band"]
                bot.plot(ks, b["diff"], color=color, marker="o", ms=3, label=f"step {st}")
                bot.fill_between(ks, b["lo"], b["hi"], color=color, alpha=0.15, lw=0)
            bot.axhline(0, color="black", lw=0.8)
            for m in (-res["margin"], res["margin"]):
                bot.axhline(m, color="grey", ls=":", lw=0.8)
            top.set_title(f"{sc} scoring")
            top.set_ylabel("pass@k")
            bot.set_ylabel(f"Δ pass@k (RL − base), {int(res['ci'] * 100)}% simultaneous band")
            for ax in (top, bot):
                _k_axis(ax, k_max)
                ax.grid(alpha=0.3)
            top.legend(fontsize=7)
            bot.legend(fontsize=7, title=f"dotted: ±{res['margin']:g} margin", title_fontsize=7)
        fig.suptitle(f"pass@k: condition {cond} vs base ({res['n_problems']} test problems, n = {n})")
        fig.tight_layout()
        written.append(_save(fig, out / f"passk_{cond}.png"))
        plt.close(fig)
    return written


def lr_sweep_figure(run: Path, out: Path, design: Design) -> Path | None:
    """figures/lr_sweep.png: the sweep's mean reward per step and rate, the scoring window shaded."""
    sweep = sorted((run / "lr_sweep").glob("lr_*/train_log.csv")) if (run / "lr_sweep").exists() else []
    if sweep:
        plt = _plt()
        lrs = design.config.get("lr_sweep", {})
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for f in sweep:
            rows = _read_csv(f)
            ax.plot([r["step"] for r in rows], [r["reward_mean"] for r in rows], label=f.parent.name.replace("lr_", "lr "))
        if isinstance(lrs.get("steps"), int) and isinstance(lrs.get("last"), int):
            ax.axvspan(lrs["steps"] - lrs["last"] + 0.5, lrs["steps"] + 0.5, color="grey", alpha=0.15,
                       label=f"scoring window (last {lrs['last']} of {lrs['steps']} steps)")
        ax.set_xlabel("training step")
        ax.set_ylabel("mean reward (strict)")
        _integer_ticks(ax)
        ax.set_title("learning-rate sweep (PLAN.md section 5)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = _save(fig, out / "lr_sweep.png")
        plt.close(fig)
        return path
    return None


def _save(fig, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


DEV_COLUMNS = ("n_problems", "n", "strict_pass1", "loose_pass1", "strict_passn", "loose_passn", "format_rate")  # train_eval.csv
DEV_REQUIRED = ("step",)


def _read_csv(path: Path, required: tuple = ("step", "reward_mean"), drawn: tuple | None = None) -> list[dict]:
    """A training log (train_log.csv; with required=DEV_REQUIRED, drawn=DEV_COLUMNS the dev
    evaluation train_eval.csv) as a list of {column: float}. The required columns must be in every
    row and be numbers ("nan" is a number: an sft run has no reward); the columns drawn
    (TRAIN_PANELS, or `drawn`) must be numbers or empty (NaN); other columns may come and go and are
    kept only where they are numbers. A short or long row is an InputError naming the file."""
    if not path.exists():
        return []
    drawn = {c for c, _ in TRAIN_PANELS} if drawn is None else set(drawn)

    def cell(k, v):
        if not v.strip() and k not in required:
            return float("nan")
        try:
            return float(v)
        except ValueError:
            if k in drawn or k in required:
                raise ValueError(f"column {k}: {v!r} is not a number")
            return None  # an unknown text column: left out

    try:
        with open(path) as f:
            rows = []
            for r in csv.DictReader(f):
                if None in r or None in r.values():  # a long row gives a None key, a short one None values
                    raise ValueError(f"row {len(rows) + 1} has {'more' if None in r else 'fewer'} cells than the header")
                rows.append({k: x for k, x in ((k, cell(k, v)) for k, v in r.items()) if x is not None})
    except (ValueError, csv.Error) as e:
        raise InputError(f"{path}: malformed {'training log' if 'reward_mean' in required else 'dev evaluation'} ({e})")
    if any(any(c not in r for c in required) for r in rows):
        raise InputError(f"{path}: malformed {'training log' if 'reward_mean' in required else 'dev evaluation'} "
                         f"(no {' or '.join(required)} column)")
    return rows


# ============================================================================= report


def _f(x: float) -> str:
    return f"{x:.3f}"


def _yn(b) -> str:
    return "—" if b is None else ("yes" if b else "no")


def _seed_note(e: dict) -> str:
    return ", ".join(map(str, e["seeds"]))


def report(run: Path, res: dict, figs: list[Path]) -> str:
    base, rl, n, k = res["base"], res["rl"], res["n"], res["k_max"]
    design: Design = res["design"]
    prov = base.get("provenance", {})
    entries = res["entries"]
    ps, other = design.primary_scoring, [s for s in SCORINGS if s != design.primary_scoring][0]
    L = []
    if res["missing"]:
        L += [f"**PARTIAL REPORT: {len(res['missing'])} of {design.n_expected()} expected evaluations are missing: "
              f"{', '.join(res['missing'])}.**", ""]
    L += [f"# Report: {run.name}", "", res["primary_sentence"], "",
          f"Written by `analyze_b.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. {res['n_problems']} test problems, "
          f"n = {n} samples each; design: conditions {', '.join(design.conditions)}; seeds {', '.join(map(str, design.seeds))}; "
          f"checkpoints {', '.join(map(str, design.checkpoints))}. Crossed bootstrap over seeds and problems, {res['resamples']} "
          f"replicates (seed {res['seed']}), percentile intervals.", ""]
    L += _warnings(run, res)
    # --- H1, H2, H3 on the primary scoring
    a1, at, m = res["alpha_one"], res["alpha_tost"], res["margin"]
    L += [f"## H1 and H2 by condition ({ps} scoring)", "",
          f"| condition | step | seeds | pass@1 base → RL | Δpass@1 [95% CI] | p (adj) | H1: pass@1 rises | pass@{k} base → RL | "
          f"Δpass@{k} [95% CI] | 90% CI | p equiv (adj) | p falls (adj) | H2: ceiling | selection | base catches up |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in [e for e in entries if e["scoring"] == ps]:
        L.append(f"| {e['condition']}{' **(primary)**' if e['primary'] else ''} | {e['step']} | {_seed_note(e)} | "
                 f"{_f(e['pass1_base'])} → {_f(e['pass1_rl'])} | {e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])} | "
                 f"{_p(e['p_pass1'])} ({_p(e['p_pass1_adj'])}) | {_yn(e['pass1_rises'])} | {_f(e['passk_base'])} → {_f(e['passk_rl'])} | "
                 f"{e['passk_diff']:+.3f} {_ci(e['passk_ci'])} | {_ci(e['passk_ci90'])} | {_p(e['p_equiv'])} ({_p(e['p_equiv_adj'])}) | "
                 f"{_p(e['p_passk_fall'])} ({_p(e['p_passk_fall_adj'])}) | {ceiling_words(e)} | {_yn(e['selection'])} | "
                 f"{crossover_words(e['crossover'])} |")
    L += ["", f"*pass@1 rises*: one-sided p < {a1:g}. *equivalent*: TOST p < {at:g} (the 90% interval inside ±{m:g}). "
          f"*falls*: one-sided p < {a1:g}. *ceiling rises*: the 95% interval of Δpass@{k} lies above 0 (descriptive, not a "
          f"registered test). *selection*: pass@1 rises and the ceiling is equivalent or falls. The primary entry is judged on raw "
          f"p-values (an intersection-union test); every other row is secondary, its verdicts on Holm-adjusted p-values (in "
          f"parentheses) within the family *secondary-{ps}*. *base catches up*: the first k at which RL is no longer above the base "
          f"(point estimate), then over the bootstrap replicates the shares that cross, stay above at every k ≤ {k}, and are never "
          f"above (not above at k = 1).", ""]
    if res["h3"]:
        L += [f"## H3: does the ceiling narrow with longer training? ({ps} scoring)", "",
              f"| condition | seeds | Δpass@{k} at step {design.checkpoints[0]} | at step {design.checkpoints[-1]} | difference [95% CI] | one-sided p | narrows |",
              "|---|---|---|---|---|---|---|"]
        for h in [h for h in res["h3"] if h["scoring"] == ps]:
            L.append(f"| {h['condition']} | {', '.join(map(str, h['seeds']))} | {h['passk_diff_first']:+.3f} | {h['passk_diff_last']:+.3f} | "
                     f"{h['diff']:+.3f} {_ci(h['ci'])} | {_p(h['p_narrows'])} | {_yn(h['narrows'])} |")
        L += ["", f"The paired difference (last − first checkpoint) of Δpass@{k}, with the same seeds and problems in each replicate. "
              f"*narrows*: one-sided p < {a1:g}; secondary and not adjusted.", ""]
    L += report_controls(res)
    L += [f"## The {other} scoring", "",
          f"| condition | step | format rate base → RL | Δpass@1 [95% CI] | p (adj) | pass@1 rises | Δpass@{k} [95% CI] | 90% CI | "
          f"p equiv (adj) | p falls (adj) | ceiling | selection |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in [e for e in entries if e["scoring"] == other]:
        L.append(f"| {e['condition']}{' **(primary)**' if e['primary'] else ''} | {e['step']} | {_f(e['format_base'])} → {_f(e['format_rl'])} | "
                 f"{e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])} | {_p(e['p_pass1'])} ({_p(e['p_pass1_adj'])}) | {_yn(e['pass1_rises'])} | "
                 f"{e['passk_diff']:+.3f} {_ci(e['passk_ci'])} | {_ci(e['passk_ci90'])} | {_p(e['p_equiv'])} ({_p(e['p_equiv_adj'])}) | "
                 f"{_p(e['p_passk_fall'])} ({_p(e['p_passk_fall_adj'])}) | {ceiling_words(e)} | {_yn(e['selection'])} |")
    if res["h3"]:
        L += ["", "H3 on this scoring: " + "; ".join(
            f"{h['condition']} {h['diff']:+.3f} {_ci(h['ci'])}, narrows {_yn(h['narrows'])}" for h in res["h3"] if h["scoring"] == other) + "."]
    L += ["", f"Verdicts as above, within the family *secondary-{other}*. The {other} scoring also counts the output format.", "",
          "## Per-seed spread", "", f"| condition | step | scoring | seed | Δpass@1 | Δpass@{k} | coverage RL | format RL |", "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        for s in e["per_seed"]:
            L.append(f"| {e['condition']} | {e['step']} | {e['scoring']} | {s['seed']} | {s['pass1_diff']:+.3f} | {s['passk_diff']:+.3f} | "
                     f"{s['coverage_rl']} | {_f(s['format_rl'])} |")
    L += ["", "## Power", "", res["power"]["statement"], "",
          "## The original criteria (first version) and the one-third clause", "",
          "The first version's criteria, on the same 95% intervals, unadjusted: *pass@1 rises* ⇔ lower bound > 0; *ceiling "
          f"unchanged* ⇔ the pass@{k} interval contains 0, or |Δpass@{k}| < |Δpass@1| / 3 (point estimates); *ceiling falls* ⇔ "
          f"upper bound < 0. The one-third clause, now inferential: asked only when pass@1 rises; the 95% interval of "
          f"|Δpass@{k}| − Δpass@1 / 3; it holds when the upper bound is below 0.", "",
          "| condition | step | scoring | pass@1 rises (v1) | ceiling unchanged (v1) | ceiling falls (v1) | abs(Δpass@k) − Δpass@1/3 [95% CI] | one-third clause |",
          "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        L.append(f"| {e['condition']} | {e['step']} | {e['scoring']} | {_yn(e['pass1_rises_v1'])} | {_yn(e['ceiling_unchanged_v1'])} | "
                 f"{_yn(e['ceiling_falls_v1'])} | {_ci(e['third_clause_ci']) if e['third_clause_ci'] else 'not asked (pass@1 does not rise)'} | "
                 f"{_yn(e['third_clause'])} |")
    L += ["", "## Coverage (problems with at least one correct answer; RL: mean over seeds)", "",
          "| condition | step | scoring | base | RL | only RL | only base | format base → RL |", "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        L.append(f"| {e['condition']} | {e['step']} | {e['scoring']} | {e['coverage_base']} | {e['coverage_rl']:g} | {e['only_rl']:g} | "
                 f"{e['only_base']:g} | {_f(e['format_base'])} → {_f(e['format_rl'])} |")
    L += [""] + report_issue14(res)
    sel, lrc = run / "selection.json", run / "lr_choice.json"
    if lrc.exists():
        d = read_json(lrc)
        L += ["", "## Learning rate", "", f"Rule: {d['rule']}. Mean reward: "
              + ", ".join(f"{kk}: {v:.3f}" for kk, v in d["mean_reward_last"].items()) + f". Chosen: **{d['chosen']:g}**."]
    if sel.exists():
        d = read_json(sel)
        L += ["", "## Problem selection", "", f"Rule: {d['rule']}. {len(d['informative'])} of {len(d['pass_rates'])} problems informative. "
              + "; ".join(f"set {z}: {', '.join(map(str, ids))}" + (" (fewer than asked)" if d["short"][z] else "") for z, ids in d["sets"].items())]
    probes = sorted(run.glob("probe_*.json"))
    if probes:
        L += ["", "## Base-rate probes (the checks behind PLAN.md's change log)", "",
              "| task | samples | strict pass@1 | loose pass@1 | strict pass@n | loose pass@n | format |", "|---|---|---|---|---|---|---|"]
        for f in probes:
            d = read_json(f)
            kk = str(d["n"])
            L.append(f"| {d['task']} | {d['n_problems']} × {d['n']} | {_f(d['pass_at_k']['strict']['1'])} | {_f(d['pass_at_k']['loose']['1'])} | "
                     f"{_f(d['pass_at_k']['strict'][kk])} | {_f(d['pass_at_k']['loose'][kk])} | {_f(d['format_rate'])} |")
    first = base["problems"][0]
    if "responses" in first:
        L += ["", f"## The first test problem side by side: `{first['question']}` = {first['answer']}", ""]
        shown = [("base", base)]
        for c in design.conditions:  # each condition's last checkpoint present, its first seed
            keys = sorted((st, s) for cc, s, st in rl if cc == c)
            if keys:
                st = keys[-1][0]
                s = min(s for stt, s in keys if stt == st)
                shown.append((f"{c} seed {s} step {st}", rl[(c, s, st)]))
        for label, d in shown:
            p = d["problems"][0]
            L.append(f"**{label}** — strict {p['correct_strict']}/{p['n']}, loose {p['correct_loose']}/{p['n']}")
            L += ["```"] + [r.replace("```", "'''")[:300] for r in p.get("responses", [])[:3]] + ["```", ""]
    if figs:
        L += ["## Figures", ""] + [f"![{f.stem}](figures/{f.name})" for f in figs]
    L += ["", "## Provenance of the inputs", "", "| file | sha256 | stage hash | PLAN.md sha256 | revision | made |", "|---|---|---|---|---|---|"]
    for f in (sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")) + sorted(run.glob("tokens_*.json")) + probes
              + [p for p in (sel, lrc) if p.exists()]):
        p = read_json(f).get("provenance", {})
        L.append(f"| {f.relative_to(run).as_posix()} | {file_sha256(f)[:12]} | {p.get('stage_hash')} | {(p.get('plan_sha256') or '')[:12]} | {p.get('revision')} | {p.get('time')} |")
    return "\n".join(L) + "\n"


def _opt(x, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def _ids(ids: list, most: int = 12) -> str:
    """Problem ids, their shared 'task/split/' prefix left off (arith-2x1/test/7 -> 7)."""
    ids = [str(i) for i in ids]
    cut = os.path.commonprefix(ids).rfind("/") + 1 if len(ids) > 0 and all("/" in i for i in ids) else 0
    ids = [i[cut:] if cut else i[i.rfind("/") + 1:] if "/" in i else i for i in ids]
    shown = ", ".join(ids[:most])
    return (shown + f", … ({len(ids) - most} more)") if len(ids) > most else (shown or "—")


def report_controls(res: dict) -> list[str]:
    """H4-H6 (PLAN.md section 7b): the tables and what each is computed from."""
    c, k, m = res["controls"], res["k_max"], res["margin"]
    last = c["step"]
    L = [f"## Controls and baselines: H4–H6 (step {last})", ""]
    if c["h4"] or c["h5"] or c["h6"]:
        L += [f"From the test-set files `eval_<condition>_s<seed>_{last:03d}.json` and `eval_base.json`, the same crossed bootstrap "
              f"({res['resamples']} replicates, seed {res['seed']}); in a contrast of two conditions their seeds are drawn independently "
              f"and the problems shared. H4's verdicts are the registered entries' Holm-adjusted tests above; H5 is an estimate and H6 "
              f"a description, neither adjusted.", ""]
    if c["h4"]:
        L += [f"**H4 (anchoring, {c['scorings']['H4']} scoring):** with the KL anchor the ceiling pass@{k} is equivalent to the "
              f"base's (TOST within ±{m:g}), without it the ceiling falls.", "",
              f"| anchored (β) | Δpass@{k} 90% CI | p equiv (adj) | equivalent | unanchored | Δpass@{k} [95% CI] | p falls (adj) | falls | "
              f"H4 holds | Δ(anchored) − Δ(unanchored) [95% CI] |", "|---|---|---|---|---|---|---|---|---|---|"]
        for h in c["h4"]:
            L.append(f"| {h['anchored']} ({h['kl']:g}) | {h['anchored_passk_diff']:+.3f} {_ci(h['anchored_passk_ci90'])} | "
                     f"{_p(h['anchored_p_equiv_adj'])} | {_yn(h['anchored_ceiling_equivalent'])} | {h['unanchored']} | "
                     f"{h['unanchored_passk_diff']:+.3f} {_ci(h['unanchored_passk_ci'])} | {_p(h['unanchored_p_falls_adj'])} | "
                     f"{_yn(h['unanchored_ceiling_falls'])} | **{_yn(h['holds'])}** | {h['contrast']:+.3f} {_ci(h['contrast_ci'])} |")
        L.append("")
    if c["h5"]:
        L += [f"**H5 (format share, {c['scorings']['H5']} scoring):** the share of the reference's pass@1 gain that a reward "
              f"for the format alone reaches. An estimate, not a test; not estimable when the reference gain's 95% interval contains 0.", "",
              "| format-only condition | Δpass@1 [95% CI] | reference | Δpass@1 [95% CI] | share [95% CI] |", "|---|---|---|---|---|"]
        for h in c["h5"]:
            share = f"{h['share']:.2f} [{h['ci'][0]:.2f}, {h['ci'][1]:.2f}]" if h["estimable"] else f"not estimable ({h['why']})"
            L.append(f"| {h['condition']} | {h['gain']:+.3f} {_ci(h['gain_ci'])} | {h['reference']} | "
                     f"{h['reference_gain']:+.3f} {_ci(h['reference_gain_ci'])} | {share} |")
        L.append("")
    if c["h6"]:
        L += [f"**H6 (RL vs RFT and SFT, {c['scorings']['H6']} scoring):** Δ_k = pass@k(GRPO) − pass@k(other), k = 1…{k}, with a "
              f"simultaneous 95% band (figure `controls_h6.png`). Descriptive, secondary, not adjusted.", "",
              f"| GRPO | other (method) | Δpass@1 [95% CI] | Δpass@{k} [95% CI] | band half-width at k = 1, {k} | above at k = 1 | where the curves cross |",
              "|---|---|---|---|---|---|---|"]
        for h in c["h6"]:
            cr = h["crossover"]
            lead = cr["leader_at_k1"]
            cross = "—" if lead == "tie" else f"{lead} leads: " + crossover_words(cr)
            L.append(f"| {h['rl']} | {h['other']} ({h['method']}) | {h['diff_pass1']:+.3f} {_ci(h['ci_pass1'])} | "
                     f"{h['diff_passk']:+.3f} {_ci(h['ci_passk'])} | {(h['hi'][0] - h['lo'][0]) / 2:.3f}, {(h['hi'][-1] - h['lo'][-1]) / 2:.3f} | "
                     f"{lead} | {cross} |")
        L.append("")
    for s in c["skipped"]:
        L.append(f"- {s['hypothesis']} not asked: {s['why']}.")
    return L + ([""] if c["skipped"] else [])


def report_issue14(res: dict) -> list[str]:
    """Evaluation sets, pass@k beyond n, boundary, diversity, in vs out of distribution, tokens."""
    design: Design = res["design"]
    L = ["## Evaluation sets", "", "| set | task | problems × n | k_max | models | files found |", "|---|---|---|---|---|---|",
         f"| test | {res['base'].get('task', (design.config.get('task') or {}).get('name'))} | {res['n_problems']} × {res['n']} | "
         f"{res['k_max']} | all | {1 + len(res['rl'])} (eval_*.json) |"]
    for name, spec in design.eval_sets.items():
        b, docs, prefix = res["sets"][name]
        L.append(f"| {name} | {spec['task']}{' (out of distribution)' if spec['ood'] else ''} | {spec['n_problems']} × {spec['n']} | "
                 f"{spec['k_max']} | {spec['models']} | {(b is not None) + len(docs)} ({prefix}) |")
    bz = res["beyond"]
    n, ext = bz["n"], bz["extrapolate_to"]
    src = "test set, eval_*.json" if bz["set"] == "test" else f"set {bz['set']}, evalsets/{bz['set']}/"
    L += ["", f"## pass@k beyond n = {n}: {MODEL_BASED}", "",
          f"Fitted by maximum likelihood to each model's per-problem counts in the {src} (the base and each condition's last "
          f"checkpoint); pass@k = (1 − π)(1 − B(α, β + k) / B(α, β)). "
          f"The zero-inflated model (a share π of problems never solved) is used when its AIC is lower. "
          f"Every value in the last column is **{MODEL_BASED}**, not measured. *at bound*: the fit ran to the edge of its search box "
          f"(counts all alike: a binomial or a point mass), so its extrapolation is the limit of the model, not a measurement.", "",
          f"| model | scoring | model used | α | β | π | AIC plain / zero-inflated | measured pass@{n} | model pass@{n} | "
          f"pass@{ext} ({MODEL_BASED}) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for f in bz["fits"]:
        L.append(f"| {f['model']} | {f['scoring']} | {f['chosen']}{' (at bound)' if f['at_bound'] else ''} | {f['alpha']:.3g} | "
                 f"{f['beta']:.3g} | {f['pi']:.3f} | {f['aic']['beta-binomial']:.1f} / {f['aic']['zero-inflated beta-binomial']:.1f} | "
                 f"{_f(f['measured_pass_at_n'])} | {_f(f['model_pass_at_n'])} | {_f(f['model_pass_at_extrapolated'])} |")
    if bz["check"]:
        ch = bz["check"]
        nt = ch[0]["fit_n"]
        L += ["", f"**Check of the model on this study's data.** Fitted to the test set's {nt} samples on the {ch[0]['n_problems']} "
              f"problems of set {bz['set']}, the model predicts pass@{n}; the set measures it on the same problems. error = predicted − "
              f"measured; *naive* is the measured pass@{nt}, what one would say without a model.", "",
              f"| model | scoring | fitted to | model used | predicted pass@{n} ({MODEL_BASED}) | measured pass@{n} | error | naive pass@{nt} (error) |",
              "|---|---|---|---|---|---|---|---|"]
        for r in ch:
            L.append(f"| {r['model']} | {r['scoring']} | {r['fit_file']} | {r['model_used']} | {_f(r['predicted'])} | {_f(r['measured'])} | "
                     f"{r['error']:+.3f} | {_f(r['naive'])} ({r['naive_error']:+.3f}) |")
        for sc in SCORINGS:
            errs = [abs(r["error"]) for r in ch if r["scoring"] == sc]
            if errs:
                L += ["", f"Mean |error| ({sc}): {np.mean(errs):.3f}, largest {max(errs):.3f}, over {len(errs)} models."]
    elif bz["check_skipped"]:
        L += ["", f"No check of the model: {bz['check_skipped']}."]
    L += ["", f"## Boundary at n = {n} ({src})", "",
          f"Problems the base never solved in {n} samples that the trained model solved at least once (*only RL*), and the reverse "
          f"(*only base*), with their ids (without their task/split/ prefix; the full ids are in verdicts.json).", "",
          "| model | scoring | solved: base / RL | only RL | ids | only base | ids |", "|---|---|---|---|---|---|---|"]
    for r in bz["boundary"]:
        L.append(f"| {r['model']} | {r['scoring']} | {r['solved_base']} / {r['solved_rl']} | {r['only_rl']} | {_ids(r['only_rl_ids'])} | "
                 f"{r['only_base']} | {_ids(r['only_base_ids'])} |")
    dv = res["diversity"]
    if dv["conditions"]:
        L += ["", "## Diversity", "",
              "Per problem, from each eval file's fields: the number of distinct final answers among its samples (the answer block's integer, "
              "else the last integer; no integer is one class), the entropy of that answer distribution, and the mean full-vocabulary token "
              "entropy of the untempered (T = 1) distribution over the response tokens. Mean over problems; trained models: mean over seeds "
              "(each model's own row is in verdicts.json).", "",
              "| set | condition | step | seeds | distinct answers | answer entropy (nats) | token entropy (nats) |", "|---|---|---|---|---|---|---|"]
        for r in dv["conditions"]:
            L.append(f"| {r['set']} | {r['condition']} | {r['step'] or '—'} | {', '.join(map(str, r['seeds'])) or '—'} | "
                     f"{_opt(r['distinct_answers'], '{:.2f}')} | {_opt(r['answer_entropy'])} | {_opt(r['token_entropy'])} |")
    for name, o in res["ood"].items():
        K, kt = o["k_max"], o["test_k_max"]
        L += ["", f"## In vs out of distribution: test vs {name} ({o['task']}, {o['n_problems']} × {o['n']})", "",
              f"Test columns: the entries above (eval_*.json); {name} columns: evalsets/{name}/, its own crossed bootstrap. Each cell: "
              f"RL (mean over seeds), Δ vs base [95% CI]. {o['note']}.", "",
              f"| condition | scoring | test pass@1 | {name} pass@1 | test pass@{kt} | {name} pass@{K} |", "|---|---|---|---|---|---|"]
        for r in o["rows"]:
            if r["condition"] == "base":
                L.append(f"| base | {r['scoring']} | {_f(r['test_pass1'])} | {_f(r['ood_pass1'])} | {_f(r['test_passk'])} | {_f(r['ood_passk'])} |")
            else:
                L.append(f"| {r['condition']} | {r['scoring']} | {_f(r['test_pass1'])}, {r['test_pass1_diff']:+.3f} {_ci(r['test_pass1_ci'])} | "
                         f"{_f(r['ood_pass1'])}, {r['ood_pass1_diff']:+.3f} {_ci(r['ood_pass1_ci'])} | "
                         f"{_f(r['test_passk'])}, {r['test_passk_diff']:+.3f} {_ci(r['test_passk_ci'])} | "
                         f"{_f(r['ood_passk'])}, {r['ood_passk_diff']:+.3f} {_ci(r['ood_passk_ci'])} |")
    tk = res["tokens"]
    if tk["rows"] or tk["enabled"]:
        pp = tk["paper"]
        L += ["", "## The token level (arXiv 2605.06241 §3)", "",
              "The base decodes each test problem greedily; the trained model reads the same prefixes. A position is *unchanged* when the two "
              "argmaxes agree, *reranked* when the trained choice is in the base's top 5 but not first, *shifted* otherwise. Pooled over "
              "every position; recomputed from each tokens_<condition>_s<seed>_<step>.json's per-problem detail. The last row is the "
              f"paper's range: {pp['source']}, not a target.", "",
              "| condition | seed | step | positions | unchanged | reranked | shifted | mean base rank (changed) | base entropy changed / unchanged | ratio |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for r in tk["rows"]:
            pct = lambda x: "—" if x is None else f"{100 * x:.3f}%"
            L.append(f"| {r['condition']} | {r['seed']} | {r['step']} | {r['positions']} | {pct(r['share_unchanged'])} | {pct(r['share_reranked'])} | "
                     f"{pct(r['share_shifted'])} | {_opt(r['mean_rank_changed'], '{:.2f}')} | {_opt(r['base_entropy_changed'])} / "
                     f"{_opt(r['base_entropy_unchanged'])} | {_opt(r['entropy_ratio'], '{:.1f}×')} |")
        L.append(f"| *paper (another model and task)* | | | | | {100 * pp['share_reranked'][0]:g}–{100 * pp['share_reranked'][1]:g}% | "
                 f"{100 * pp['share_shifted'][0]:g}–{100 * pp['share_shifted'][1]:g}% | {pp['mean_rank_changed'][0]:g}–{pp['mean_rank_changed'][1]:g} | | "
                 f"{pp['entropy_ratio'][0]:g}–{pp['entropy_ratio'][1]:g}× |")
        if not tk["rows"]:
            L.append("\nNo token files yet.")
    return L


def _warnings(run: Path, res: dict) -> list[str]:
    """Inputs made under another PLAN.md, other evaluation settings or another config, and
    optional inputs that are missing."""
    base, rl, design = res["base"], res["rl"], res["design"]
    prov = base.get("provenance", {})
    plan_now = file_sha256(ROOT / "PLAN.md")
    warnings = []

    def settings(d: dict) -> dict:  # what must match between the models compared (the adapter may not)
        c = d.get("provenance", {}).get("config", {})
        return {kk: c.get(kk) for kk in ("seed", "model", "task", "eval")}

    for d in rl.values():
        p = d.get("provenance", {})
        if p.get("plan_sha256") != prov.get("plan_sha256"):
            warnings.append(f"{d['_file']} was made under a different PLAN.md than eval_base.json")
        if settings(d) != settings(base):
            warnings.append(f"{d['_file']} records other evaluation settings (seed, model, task or eval) than eval_base.json")
    if prov.get("plan_sha256") and plan_now and prov["plan_sha256"] != plan_now:
        warnings.append("PLAN.md has changed since the base was evaluated")
    cfg = design.config
    expected = ["selection.json"] + (["lr_choice.json"] if cfg.get("train", {}).get("lr") is None else [])
    expected += [f"probe_{t}.json" for t in cfg.get("probe", {}).get("tasks", [])]
    expected += [f"{design.train_dir(c, s)}/train_log.csv" for c in design.conditions for s in design.seeds
                 if any(key[:2] == (c, s) for key in rl)]
    if (cfg.get("train", {}).get("dev_every") or 0) > 0:
        expected += [f"{design.train_dir(c, s)}/train_eval.csv" for c in design.conditions for s in design.seeds
                     if any(key[:2] == (c, s) for key in rl)]
    for name, (b, docs, prefix) in res["sets"].items():
        for d in docs.values():
            if b is not None and {**settings(d), "sets": d.get("provenance", {}).get("config", {}).get("eval_sets")} != \
                    {**settings(b), "sets": b.get("provenance", {}).get("config", {}).get("eval_sets")}:
                warnings.append(f"{prefix}{d['_file']} records other evaluation settings than {prefix}eval_base.json")
        for d in ([b] if b is not None else []) + list(docs.values()):
            if d.get("provenance", {}).get("config_hash") != prov.get("config_hash"):
                warnings.append(f"{prefix}{d['_file']} was made with another config (hash {d.get('provenance', {}).get('config_hash')}) "
                                f"than eval_base.json ({prov.get('config_hash')})")
    if (run / "evalsets").is_dir():
        for f in sorted((run / "evalsets").iterdir()):
            if f.is_dir() and f.name not in design.eval_sets:
                warnings.append(f"evalsets/{f.name}/ is not a registered evaluation set (config eval_sets): left out")
    warnings += res["tokens"]["warnings"]
    if not design.tokens_enabled and res["tokens"]["rows"]:
        warnings.append("token files are present but config tokens.enabled is off: they are reported as found, not checked for completeness")
    for name in expected:
        if not (run / name).exists():
            warnings.append(f"{name} is missing: what it would show is left out of this report")
        elif name.endswith(".json"):
            h = read_json(run / name).get("provenance", {}).get("config_hash")
            if h != prov.get("config_hash"):
                warnings.append(f"{name} was made with another config (hash {h}) than eval_base.json ({prov.get('config_hash')})")
    for d in rl.values():
        if d.get("provenance", {}).get("config_hash") != prov.get("config_hash"):
            warnings.append(f"{d['_file']} was made with another config (hash {d.get('provenance', {}).get('config_hash')}) "
                            f"than eval_base.json ({prov.get('config_hash')})")
    return (["## Warnings", ""] + [f"- {w}" for w in warnings] + [""]) if warnings else []


def check_extras(run: Path) -> None:
    """Read (and so validate) the training logs and the JSON files the figures and report use."""
    for f in list(run.glob("train_*/train_log.csv")) + list(run.glob("lr_sweep/lr_*/train_log.csv")):
        _read_csv(f)
    for f in run.glob("train_*/train_eval.csv"):
        _read_csv(f, required=DEV_REQUIRED, drawn=DEV_COLUMNS)
    for f in [run / "lr_choice.json", run / "selection.json"] + sorted(run.glob("probe_*.json")):
        if f.exists():
            d = read_json(f)
            need = {"lr_choice.json": ("rule", "mean_reward_last", "chosen"), "selection.json": ("rule", "informative", "sets", "short", "pass_rates")}.get(
                f.name, ("task", "n", "n_problems", "pass_at_k", "format_rate"))
            missing = [kk for kk in need if kk not in d]
            if missing:
                raise InputError(f"{f}: malformed (missing {', '.join(missing)})")


def _atomic_write(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder, then rename: a reader never sees half a
    file. mkstemp makes the file 0600; it is opened to 0644 like the figures."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def verdicts_json(res: dict, run: Path) -> dict:
    """What verdicts.json holds (the bulky per-k band stays in; the raw replicates do not)."""
    d: Design = res["design"]
    prim = res["primary"]
    return {
        "primary": {"condition": d.primary_condition, "scoring": d.primary_scoring, "step": d.checkpoints[-1],
                    "question": "selection: pass@1 rises AND (ceiling equivalent OR ceiling falls)",
                    "test": f"intersection-union: pass@1 rises (one-sided p < {res['alpha_one']:g}) and (TOST p < {res['alpha_tost']:g} "
                            f"or ceiling falls (one-sided p < {res['alpha_one']:g})), raw p-values, no correction",
                    "answer": prim["selection"] if prim else None, "sentence": res["primary_sentence"]},
        "bootstrap": {"scheme": "crossed: each replicate draws the training seeds and, independently, the test problems with "
                                "replacement (the same problems for the base and every seed); statistic = mean over drawn seeds of "
                                "(RL − base) averaged over the drawn problems; percentile intervals; with one seed it is the paired "
                                "bootstrap over problems",
                      "resamples": res["resamples"], "seed": res["seed"], "interval": "percentile",
                      "p_values": "one-sided (1 + #{D* <= 0}) / (B + 1) for a rise, (1 + #{D* >= 0}) / (B + 1) for a fall; "
                                  "TOST max((1 + #{D* <= -m}) / (B + 1), (1 + #{D* >= m}) / (B + 1))"},
        "resamples": res["resamples"], "ci": res["ci"], "seed": res["seed"],
        "equivalence_margin": res["margin"],
        "alpha": {"one_sided": res["alpha_one"], "tost": res["alpha_tost"], "interval": res["ci"], "tost_interval": 1 - 2 * res["alpha_tost"],
                  "band": res["ci"]},
        "families": res["families"],
        "multiplicity": "Holm within each family, on p / level (weighted Holm), reported on each test's own scale: adjusted p = "
                        "level × Holm-adjusted(p / level), capped at 1; a test is passed when its adjusted p < its level. The "
                        "primary entry is in no family (intersection-union test on raw p-values). H3 and the one-third clause "
                        "are not adjusted.",
        "power": res["power"],
        "h3": res["h3"],
        "design": {"conditions": d.conditions, "seeds": d.seeds, "checkpoints": d.checkpoints, "source": d.source,
                   "layout": "single-seed (eval_<condition>_<step>.json, read as seed 0)" if d.legacy else "eval_<condition>_s<seed>_<step>.json"},
        "partial": bool(res["missing"]), "missing": res["missing"],
        "entries": res["entries"], "n": res["n"], "k_max": res["k_max"], "n_problems": res["n_problems"],
        "controls": {**res["controls"], "registered": {
            "H4": "with the KL anchor the few-problem condition's loose pass@k_max is equivalent to the base's (TOST, the entry's "
                  "Holm-adjusted p), while without it the ceiling falls (the entry's Holm-adjusted p); holds when both do",
            "H5": "share of the strict pass@1 gain of the twin strict-reward condition reached by the format-only reward: an estimate",
            "H6": "GRPO vs RFT and SFT on the loose pass@k curve: contrast curves with simultaneous bands and where they cross; descriptive"}},
        "eval_sets": {"test": {"task": res["base"].get("task"), "n": res["n"], "k_max": res["k_max"], "n_problems": res["n_problems"],
                               "models": "all", "files": ["eval_base.json"] + [d["_file"] for d in res["rl"].values()]},
                      **{name: {**spec, "files": ([f"evalsets/{name}/eval_base.json"] if res["sets"][name][0] is not None else [])
                                + [f"evalsets/{name}/{x['_file']}" for x in res["sets"][name][1].values()]}
                         for name, spec in d.eval_sets.items()}},
        "beyond_n": {k: v for k, v in res["beyond"].items() if not k.startswith("_") and k != "boundary"},
        "boundary": {"set": res["beyond"]["set"], "n": res["beyond"]["n"], "rows": res["beyond"]["boundary"]},
        "diversity": res["diversity"],
        "ood": {name: {k: v for k, v in o.items() if not k.startswith("_")} for name, o in res["ood"].items()},
        "tokens": res["tokens"],
    }


def run_analysis(run: Path, resamples: int | None = None, seed: int | None = None, make_figures: bool = True,
                 partial: bool = False) -> dict:
    """Everything is computed before anything is written: an input error leaves no partial output."""
    run = Path(run)
    res = analyze(run, resamples=resamples, seed=seed, partial=partial)
    check_extras(run)  # read every other input now: a bad one must stop us before anything is written
    out = verdicts_json(res, run)
    inputs = sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")) + sorted(run.glob("tokens_*.json"))
    out["provenance"] = {"inputs": {f.relative_to(run).as_posix(): file_sha256(f) for f in inputs},
                         "plan_sha256": file_sha256(ROOT / "PLAN.md"), "config_hash": res["base"].get("provenance", {}).get("config_hash"),
                         "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    text = json.dumps(out, indent=1) + "\n"
    figs = figures(run, res) if make_figures else []
    rep = report(run, res, figs)
    _atomic_write(run / "report.md", rep)
    _atomic_write(run / "verdicts.json", text)  # last: the pipeline's "done" marker
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Crossed-bootstrap verdicts, coverage, crossover, figures and a report for one run.")
    p.add_argument("--run", required=True, help="the run folder holding eval_*.json")
    p.add_argument("--resamples", type=int, default=None, help="bootstrap resamples (default: the run's config, analyze.resamples)")
    p.add_argument("--seed", type=int, default=None, help="bootstrap seed (default: the run's config, analyze.seed)")
    p.add_argument("--partial", action="store_true", help="analyse a run with expected evaluations missing (the report says so)")
    p.add_argument("--no-figures", action="store_true")
    a = p.parse_args(argv)
    run = Path(a.run)
    if not run.is_dir():
        print(f"analyze_b.py: --run {run}: no such folder", file=sys.stderr)
        return 2
    try:
        out = run_analysis(run, a.resamples, a.seed, not a.no_figures, partial=a.partial)
    except InputError as e:
        print(f"analyze_b.py: {e}", file=sys.stderr)
        return 1
    print(headline(out))
    print(f"wrote {run / 'verdicts.json'} and {run / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
