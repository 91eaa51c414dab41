"""The support test (PLAN_CHANGES.md change 42): did the trained model reach answers the base could not, at a
named sampler? And the two-axis answer it belongs to: sharpening (pass@1 up, the ceiling narrower than
uniform reweighting) and support (expanded / kept / not shown), each said on its own.

Z is the set of test problems the base never solves in its test samples. Choosing Z and measuring the
base's rate on it from the same draws makes that rate 0 by construction (a winner's curse), so the
base's rate on Z is measured on fresh draws: an evaluation set of the base alone under its own
sampling seeds (the calibration pool at the evaluation sampler, a second pool at the training sampler).
Pooled over Z, x successes in m draws give the exact one-sided Clopper-Pearson upper bound U of the
base's mean rate on Z at level alpha / 2 (for a mean of unequal rates the binomial bound stays valid:
Hoeffding 1956). A selection that tilts every correct answer by at most w* turns a rate p into at most
f_w*(p) = w* p / (w* p + 1 - p), and f_w* is concave, so the mean over Z of any such selection is at
most f_w*(mean p) <= f_w*(U). Then, on Z alone, the trained model's per-seed, per-problem rates r are
compared with that bound by the crossed bootstrap and the random-effects t test (verdict.one_sided,
the larger p), at alpha / 2:
    expanded    mean r above f_w*(U): more than any selection of tilt <= w* could give there
    kept        mean r below f_w*(U): within the reach of such a selection from a rate the pool allows
    not shown   neither
The two halves (U and the comparison) each spend alpha / 2, so "expanded" is wrong with probability at
most alpha when the truth is a selection of tilt <= w* (tests/test_support.py simulates it). w* is
registered before the run (tilt_quantile measures it on an earlier run, outside Z). numpy and scipy.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as st
from scipy.special import logit

from analysis import power, stats, verdict
from analysis.reweight import reweighted


def upper_bound(x: int, m: int, alpha: float) -> float:
    """The exact one-sided (1 - alpha) upper confidence bound of a binomial rate from x of m."""
    return 1.0 if x >= m else float(st.beta.ppf(1.0 - alpha, x + 1, m - x))


def support_answer(above: dict, below: dict, alpha: float) -> str:
    """expanded where the one-sided test above has p < alpha, else kept where the one below has,
    else not shown (below's p is read only where above's did not decide)."""
    if above["p"] < alpha:
        return "expanded"
    if below["p"] < alpha:
        return "kept"
    return "not shown"


def support_test(
    base_counts,
    pool_counts,
    n_pool: int,
    rl_counts,
    n: int,
    w_star: float,
    alpha: float,
    resamples: int,
    seed: int,
    chosen_on: str,
    measured_on: str,
) -> dict:
    """The support test of one trained model (rl_counts (S, N) of n samples) at one sampler: Z from
    base_counts (N,) (the base's test samples, named chosen_on), the base's rate on Z from pool_counts
    (N,) of n_pool fresh draws (named measured_on, e.g. "pool@seed-tag"). Raises ValueError when the
    two name the same draws. alpha is the test's whole one-sided level (each half spends alpha / 2)."""
    if chosen_on == measured_on:
        raise ValueError(
            f"the support test's base rate on Z is measured on {measured_on!r}, the draws Z was chosen on: "
            "it would be 0 by construction; measure it on a set of fresh base draws (its own seeds)"
        )
    base, pool = np.asarray(base_counts, int), np.asarray(pool_counts, int)
    rl = np.atleast_2d(np.asarray(rl_counts, int))
    z = base == 0
    out = {
        "chosen_on": chosen_on,
        "measured_on": measured_on,
        "w_star": float(w_star),
        "alpha": alpha,
        "n_z": int(z.sum()),
        "n_problems": int(len(base)),
        "n_pool": n_pool,
        "n": n,
        "seeds": int(rl.shape[0]),
    }
    if not z.any():
        return {
            **out,
            "answer": "not shown",
            "skipped": "the base solves every test problem in its test samples: Z is empty",
        }
    x, m = int(pool[z].sum()), int(n_pool * z.sum())
    u = upper_bound(x, m, alpha / 2)
    bound = float(reweighted(u, w_star))
    r = rl[:, z] / n  # (S, |Z|)
    draws = verdict.Draws(int(z.sum()), resamples, seed)
    reps = draws.means(r)
    above, below = (
        verdict.one_sided(reps - bound, r - bound, "above"),
        verdict.one_sided(reps - bound, r - bound, "below"),
    )
    own = verdict.one_sided(reps - u, r - u, "above")  # the model-free reading: above the base's own bound (w = 1)
    answer = support_answer(above, below, alpha / 2)
    deciding = below if answer == "kept" else above  # its p is the larger of the two parts': that part decided
    t = power.t_result(verdict.variance_components(r), 1 - alpha)
    return {
        **out,
        "skipped": None,
        "base_successes": x,
        "base_draws": m,
        "base_rate": x / m,
        "base_upper": u,
        "bound": bound,
        "rl_rate": float(r.mean()),
        "rl_ci": list(stats.percentile_interval(reps, 1 - alpha)),
        "rl_ci_level": 1 - alpha,
        "rl_ci_t": [float(v) for v in t["ci"]],
        "decided_by": "t" if deciding["p_t"] >= deciding["p_boot"] else "bootstrap",
        "rl_rate_per_seed": r.mean(axis=1).tolist(),
        "above": above,
        "below": below,
        "above_base_upper": own,
        "answer": answer,
    }


def support_changes(base_counts, rl_counts) -> dict:
    """The support changes the field reports, per seed and their mean: of the problems the base solves
    in its test samples, how many the trained model still solves (retained) and how many it never
    does (lost); of those it never solves (Z), how many the trained model solves (gained). Counts
    depend on the sample sizes (the base's n_base, the model's n), stated beside them."""
    base = np.asarray(base_counts, int)
    rl = np.atleast_2d(np.asarray(rl_counts, int))
    solved, z = base > 0, base == 0
    rows = [
        {
            "retained": int(np.count_nonzero(solved & (c > 0))),
            "lost": int(np.count_nonzero(solved & (c == 0))),
            "gained": int(np.count_nonzero(z & (c > 0))),
        }
        for c in rl
    ]
    mean = {key: float(np.mean([row[key] for row in rows])) for key in ("retained", "lost", "gained")}
    return {
        "base_solved": int(solved.sum()),
        "n_z": int(z.sum()),
        "per_seed": rows,
        **mean,
        "retention": mean["retained"] / max(int(solved.sum()), 1),
        "discovery": mean["gained"] / max(int(z.sum()), 1),
        "net": (mean["gained"] - mean["lost"]) / len(base),
    }


def tilt_quantile(base_counts, n_base: int, rl_counts, n: int, q: float = 0.95, min_count: int = 5) -> dict:
    """The q-quantile of per-problem logit tilts, logit(trained rate) - logit(base rate), over the
    problems both measure well (each rate's successes and failures at least min_count; the trained
    rate pooled over seeds), all of them outside Z. Returns it as log w and w."""
    base = np.asarray(base_counts, int)
    per_seed = np.atleast_2d(np.asarray(rl_counts, int))
    rl, m = per_seed.sum(axis=0), per_seed.shape[0] * n
    good = (base >= min_count) & (n_base - base >= min_count) & (rl >= min_count) & (m - rl >= min_count)
    tilt = logit(rl[good] / m) - logit(base[good] / n_base)
    lw = float(np.quantile(tilt, q)) if good.any() else float("nan")
    return {
        "q": q,
        "min_count": min_count,
        "problems": int(good.sum()),
        "log_w": lw,
        "w": float(np.exp(lw)),
        "median_log_w": float(np.median(tilt)) if good.any() else float("nan"),
    }


def two_axes(entry: dict, supports: dict, a1: float) -> dict:
    """The answer on two axes from a verdict.compare entry (raw or, under 'adjusted', Holm-adjusted
    p-values) and the support tests by sampler name. Sharpening: 'sharpened' where pass@1 rises and
    the ceiling is narrower than uniform reweighting (below the selection null), 'pass@1 up' where it
    only rises, 'pass@1 down' where it falls. Support: each sampler's answer. A net ceiling below the
    null is never read as 'no new solutions': that is the support axis' question alone."""
    p = entry.get("adjusted") or {
        "rises": entry["rises"]["p"],
        "falls": entry["falls"]["p"],
        "below": entry["vs_null"]["below"]["p"],
    }
    if p["falls"] < a1:
        sharp = "pass@1 down"
    elif p["rises"] < a1:
        sharp = "sharpened" if p["below"] < a1 else "pass@1 up"
    else:
        sharp = "not shown"
    return {"sharpening": sharp, "support": {name: s["answer"] for name, s in supports.items()}}
