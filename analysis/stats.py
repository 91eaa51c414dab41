"""The study's statistics: pure functions on arrays, each with its formula in its docstring.

pass@k (the unbiased estimator), the crossed bootstrap over training seeds and test problems,
bootstrap p-values and their Monte-Carlo error, Holm's correction, TOST equivalence, the crossover
and a simultaneous band, the first version's criteria, contrasts between two conditions, and the
token-level summary. The beta-binomial model of pass@k beyond n and the boundary counts are
analysis/passmodel.py's; variance components and power are analysis/power.py's.

Notation: N test problems, S training seeds, B bootstrap replicates, K = k_max. "Delta" is always
RL - base. numpy and scipy only; tests check each piece on arrays with a known answer.
"""

from __future__ import annotations

import functools

import numpy as np

NEVER_ABOVE, ALWAYS_ABOVE = 0, -1  # crossover codes; a crossing is coded by its k (>= 2)


# ============================================================================= pass@k and the crossed bootstrap


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., arXiv 2107.03374): 1 - C(n-c, k) / C(n, k), in the stable
    product form 1 - prod_{i=n-c+1}^{n} (1 - k / i). k > n is an error, never a silent skip.
    The whole study uses this one function (evaluation and analysis alike)."""
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


def crossed_estimate(rl: np.ndarray, base: np.ndarray) -> tuple[float, np.ndarray]:
    """The point estimate and each seed's own difference.
    rl: (S, N); base: (N,), or (S, N) when each seed has its own reference (H3).
    per_seed[s] = mean_i rl[s, i] - mean_i base[(s,) i];  estimate = mean_s per_seed[s]."""
    rl, base = np.asarray(rl, float), np.asarray(base, float)
    per_seed = rl.mean(axis=1) - base.mean(axis=-1)  # (S,)
    return float(per_seed.mean()), per_seed


def multiplicities(idx: np.ndarray, n: int) -> np.ndarray:
    """(B, n) the share of each row of draws idx (B, m) that falls on each of 0..n-1: a bootstrap
    replicate's mean of values v over its draws is multiplicities(idx, n) @ v."""
    B, m = idx.shape
    flat = (idx + n * np.arange(B)[:, None]).ravel()
    return np.bincount(flat, minlength=B * n).reshape(B, n) / m


def crossed_means(values: np.ndarray, m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(B, ...) replicate means of values (S, N, ...), or of values (N, ...) shared by every seed when q is
    None: the mean over drawn seeds (q, (B, S) multiplicities) of the mean over drawn problems (m, (B, N)),
    sum_s q[b,s] sum_i m[b,i] values[s,i].
    Computed as matrix products, so S x B x N values are never gathered."""
    v = np.asarray(values, float)
    B, N = m.shape
    if q is None:  # values (N, ...) shared by every seed
        return (m @ v.reshape(N, -1)).reshape((B,) + v.shape[1:])
    S, rest = v.shape[0], v.shape[2:]
    per_seed = (m @ np.moveaxis(v, 1, 0).reshape(N, -1)).reshape((B, S) + rest)  # (B, S, ...): one matrix product
    return np.einsum("bs,bs...->b...", q, per_seed)


def crossed_replicates(rl: np.ndarray, base: np.ndarray, idx: np.ndarray, sidx: np.ndarray) -> np.ndarray:
    """Crossed bootstrap over seeds and problems: (B,) replicates of the mean difference.
    rl: (S, N) per-seed, per-problem values; base: (N,) shared by every seed, or (S, N) paired with
    each seed; idx: (B, N) problem draws (the same for the base and every seed); sidx: (B, S) seed
    draws, independent of idx. Replicate b:
        D*_b = (1/S) sum_j [ mean_i rl[sidx[b,j], idx[b,i]] - mean_i base[(sidx[b,j],) idx[b,i]] ]
    computed from the draws' multiplicities (crossed_means). With S = 1 (sidx all 0) this is the
    paired bootstrap over problems of the first version, mean_i rl[idx[b,i]] - mean_i base[idx[b,i]],
    up to rounding (the sums run in another order)."""
    rl, base = np.asarray(rl, float), np.asarray(base, float)
    m, q = multiplicities(idx, rl.shape[1]), multiplicities(sidx, rl.shape[0])
    return crossed_means(rl, m, q) - crossed_means(base, m, q if base.ndim == 2 else None)


def boot_curves(rl: np.ndarray, base: np.ndarray, idx: np.ndarray, sidx: np.ndarray):
    """Point curve (K,), per-seed curves (S, K) and replicate curves (B, K) of Delta pass@k.
    rl: (S, N, K); base: (N, K) or (S, N, K)."""
    rl, base = np.asarray(rl, float), np.asarray(base, float)
    m, q = multiplicities(idx, rl.shape[1]), multiplicities(sidx, rl.shape[0])
    per_seed = rl.mean(axis=1) - base.mean(axis=-2)  # (S, K)
    reps = crossed_means(rl, m, q) - crossed_means(base, m, q if base.ndim == 3 else None)
    return per_seed.mean(axis=0), per_seed, reps


def percentile_interval(reps: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval: the (1-level)/2 and 1-(1-level)/2 quantiles of the replicates."""
    alpha = (1 - level) / 2
    lo, hi = np.quantile(reps, [alpha, 1 - alpha])
    return float(lo), float(hi)


TIE = 1e-12  # a replicate within this of the null value counts as on it: exact-zero differences come out as +-1e-17


def p_above(reps: np.ndarray, value: float = 0.0, tie: float = TIE) -> float:
    """One-sided bootstrap p-value for H0: Delta <= value against Delta > value:
    p = (1 + #{D* <= value + tie}) / (B + 1). Below 0.025 <=> (up to interpolation) the 95%
    interval's lower bound is above `value`. Never 0: the smallest p is 1 / (B + 1). A replicate
    equal to `value` in exact arithmetic (two equal means) can land a rounding error above it;
    `tie` counts it where it belongs, against the alternative (tie = 0 gives the *_v2 verdicts)."""
    reps = np.asarray(reps)
    return float((1 + np.count_nonzero(reps <= value + tie)) / (reps.size + 1))


def p_below(reps: np.ndarray, value: float = 0.0, tie: float = TIE) -> float:
    """One-sided bootstrap p-value for H0: Delta >= value against Delta < value:
    p = (1 + #{D* >= value - tie}) / (B + 1)."""
    reps = np.asarray(reps)
    return float((1 + np.count_nonzero(reps >= value - tie)) / (reps.size + 1))


def p_equivalence(reps: np.ndarray, margin: float, tie: float = TIE) -> float:
    """TOST (two one-sided tests) p-value for H0: |Delta| >= margin against |Delta| < margin:
    p = max(p_lo, p_hi), p_lo = (1 + #{D* <= -m + tie}) / (B + 1), p_hi = (1 + #{D* >= m - tie}) / (B + 1).
    Below 0.05 <=> (up to interpolation) the 90% interval lies inside (-m, m)."""
    return max(p_above(reps, -margin, tie), p_below(reps, margin, tie))


def mc_se(p: float, resamples: int) -> float:
    """The Monte-Carlo standard error of a bootstrap p-value from `resamples` replicates: sqrt(p (1 - p) / B)."""
    return float(np.sqrt(p * (1 - p) / resamples))


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


def holm_mc_se(pvals, levels, resamples: int) -> np.ndarray:
    """The Monte-Carlo SE of each Holm-adjusted p-value (holm) whose raw p-values come from
    `resamples` bootstrap replicates: adj_i = a_i (m - l* + 1) p_(l*) / a_(l*) for the step l* that
    sets it, so its SE is a_i (m - l* + 1) / a_(l*) mc_se(p_(l*)); 0 where it is capped at 1."""
    p, lv = np.asarray(pvals, float), np.asarray(levels, float)
    m = p.size
    q = p / lv
    order = np.argsort(q, kind="stable")
    steps = q[order] * (m - np.arange(m))
    setter = np.array([int(np.argmax(steps[: j + 1])) for j in range(m)])  # the step whose value the running max holds
    out = np.empty(m)
    for j, i in enumerate(order):
        l = order[setter[j]]
        se = lv[i] * (m - setter[j]) / lv[l] * mc_se(p[l], resamples)
        out[i] = 0.0 if lv[i] * steps[setter[j]] >= 1.0 else se
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
        "ci": (
            [
                int(np.quantile(ks, (1 - level) / 2, method="lower")),
                int(np.quantile(ks, (1 + level) / 2, method="higher")),
            ]
            if ks.size
            else None
        ),
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


def selection_answer(rises: bool, falls: bool, equivalent: bool | None) -> bool | None:
    """The primary question as an intersection-union test:
        selection <=> pass@1 rises AND (the ceiling is equivalent OR it falls).
    The union needs no correction (either part rejects H0 of 'no selection' only if both hold).
    equivalent is None where the equivalence test was not asked (its margin exceeds the share of the
    base's headroom PLAN.md section 7 allows): then the answer is None ("cannot be decided on this
    set") unless pass@1 fails to rise (no) or the ceiling falls (yes)."""
    if not rises:
        return False
    if falls:
        return True
    return None if equivalent is None else bool(equivalent)


# ============================================================================= boundary, contrasts, tokens


def lead_crossover(point: np.ndarray, reps: np.ndarray, level: float) -> dict:
    """Where two curves cross, whichever leads. point: (K,) contrast a - b; reps: (B, K). The side
    above at k = 1 is the leader ('a', 'b' or 'tie'); crossover_summary is then asked from its side
    (for 'b' on -(a - b)): the first k at which the leader is no longer above."""
    if point[0] > 1e-12:
        lead = "a"
    elif point[0] < -1e-12:
        lead = "b"
    else:
        lead = "tie"
    sign = -1.0 if lead == "b" else 1.0
    return {"leader_at_k1": lead, **crossover_summary(sign * point, sign * reps, level)}


def condition_contrast(
    pa: np.ndarray,
    pb: np.ndarray,
    base: np.ndarray,
    idx: np.ndarray,
    sidx_a: np.ndarray,
    sidx_b: np.ndarray,
    level: float,
) -> tuple[dict, np.ndarray, np.ndarray]:
    """Two conditions against each other and the base, on the same problems.
    pa: (Sa, N, K), pb: (Sb, N, K) per-seed, per-problem pass@k; base: (N, K).
    idx: (B, N) problem draws shared by both; sidx_a: (B, Sa), sidx_b: (B, Sb) seed draws, drawn
    independently (different training runs). Replicate b of each Delta is crossed_replicates', and
        C*_bk = Delta*_a,bk - Delta*_b,bk = mean_j pa[sidx_a[b,j], idx[b], k] - mean_j pb[sidx_b[b,j], idx[b], k],
    the base cancelling on shared problems. Returns the summary (the point curves, percentile
    intervals at k = 1 and k = K, the simultaneous band of C, where the curves cross) and the
    replicates (B, K) of Delta_a and Delta_b, from which other statistics (a ratio) are formed."""
    da, _, ra = boot_curves(pa, base, idx, sidx_a)
    db, _, rb = boot_curves(pb, base, idx, sidx_b)
    c, rc = da - db, ra - rb
    lo, hi, crit = simultaneous_band(c, rc, level)
    return (
        {
            "k_max": len(c),
            "delta_a": da.tolist(),
            "delta_b": db.tolist(),
            "diff": c.tolist(),
            "lo": lo.tolist(),
            "hi": hi.tolist(),
            "crit": crit,
            "level": level,
            "diff_pass1": float(c[0]),
            "ci_pass1": list(percentile_interval(rc[:, 0], level)),
            "diff_passk": float(c[-1]),
            "ci_passk": list(percentile_interval(rc[:, -1], level)),
            "delta_a_ci_pass1": list(percentile_interval(ra[:, 0], level)),
            "delta_b_ci_pass1": list(percentile_interval(rb[:, 0], level)),
            "delta_a_ci_passk": list(percentile_interval(ra[:, -1], level)),
            "delta_b_ci_passk": list(percentile_interval(rb[:, -1], level)),
            "crossover": lead_crossover(c, rc, level),
        },
        ra,
        rb,
    )


def compare_conditions(
    counts_a,
    counts_b,
    base_counts,
    n: int,
    k_max: int,
    resamples: int,
    seed: int,
    level: float,
    n_base: int | None = None,
) -> tuple[dict, np.ndarray, np.ndarray]:
    """The controls' one entry point: two conditions' per-seed correct counts, counts_a (Sa, N) and
    counts_b (Sb, N), of n samples on the same N problems, and the base's (N,) of n_base (default n). pass@k curves for
    k = 1..k_max, then condition_contrast with the registered draws: problems from
    resample_indices(N, B, seed) (those of every entry), condition a's seeds from stream 1 (so its
    Delta replicates are its own entry's), condition b's from stream 2 (independent of a's)."""
    ca, cb = np.atleast_2d(counts_a), np.atleast_2d(counts_b)
    pa = np.stack([pass_at_k_curves(c, n, k_max) for c in ca])  # (Sa, N, K)
    pb = np.stack([pass_at_k_curves(c, n, k_max) for c in cb])  # (Sb, N, K)
    base = pass_at_k_curves(base_counts, n_base or n, k_max)  # (N, K)
    idx = resample_indices(base.shape[0], resamples, seed)
    return condition_contrast(
        pa,
        pb,
        base,
        idx,
        seed_resample_indices(len(ca), resamples, seed),
        seed_resample_indices(len(cb), resamples, seed, stream=2),
        level,
    )


def ratio_estimate(num: float, den: float, num_reps: np.ndarray, den_reps: np.ndarray, level: float) -> dict:
    """The share num / den with a percentile interval of the replicate ratios num*_b / den*_b.
    Not estimable when den's own interval contains 0 (the ratio's distribution is then unbounded)."""
    den_ci = percentile_interval(den_reps, level)
    if den_ci[0] <= 0 <= den_ci[1]:
        return {
            "estimable": False,
            "share": None,
            "ci": None,
            "why": f"the reference gain's {level:.0%} interval contains 0",
        }
    return {
        "estimable": True,
        "share": num / den,
        "ci": list(percentile_interval(np.asarray(num_reps) / np.asarray(den_reps), level)),
        "why": None,
    }


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
    return {
        "positions": int(P),
        "unchanged": int(np.count_nonzero(cls == 0)),
        "reranked": int(np.count_nonzero(cls == 1)),
        "shifted": int(np.count_nonzero(cls == 2)),
        "share_unchanged": float(np.count_nonzero(cls == 0) / P) if P else None,
        "share_reranked": float(np.count_nonzero(cls == 1) / P) if P else None,
        "share_shifted": float(np.count_nonzero(cls == 2) / P) if P else None,
        "mean_rank_changed": mean(rank[changed]),
        "base_entropy_changed": ec,
        "base_entropy_unchanged": eu,
        "entropy_ratio": ec / eu if ec is not None and eu else None,
    }


def exact_interval(x: int, m: int, level: float = 0.95) -> list[float]:
    """Clopper-Pearson: the exact two-sided interval of a binomial proportion x / m (m >= 1)."""
    from scipy import stats as st

    a = (1 - level) / 2
    lo = 0.0 if x == 0 else float(st.beta.ppf(a, x, m - x + 1))
    hi = 1.0 if x == m else float(st.beta.ppf(1 - a, x + 1, m - x))
    return [lo, hi]
