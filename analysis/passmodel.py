"""pass@k beyond the n samples drawn: the beta-binomial model, fitted by maximum likelihood, its
check on the study's own data (levels and contrasts, with parametric-bootstrap intervals), and the
boundary: problems one model solves and the other never does, against what chance alone gives.

Notation as in analysis/stats.py: n samples per problem, counts c_i of correct ones, N problems. Every value
beyond n this module produces is a model's, and the analysis labels it so. numpy and scipy only.
"""

from __future__ import annotations

import copy
import functools

import numpy as np

from analysis.stats import per_problem, percentile_interval

LOG_BOUND, S_BOUND = 15.0, 12.0  # the fit's search box (fit_betabinom)
REFIT_TOL = 1e-4  # the parametric bootstrap's refits (parametric_replicates)


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


def _starts(counts, n: int, plain: dict | None) -> list[tuple]:
    """fit_betabinom's starting points in (logit mu, log s[, logit pi]): the method of moments on c / n
    where it is defined, and the mean with s = 2 (a spread-out Beta); for the zero-inflated fit (plain:
    the plain fit) the plain optimum with three zero shares, and the mean with half the zero share."""
    from scipy.special import logit

    p = np.asarray(counts, float) / n
    m, v = p.mean(), p.var()
    mu0 = float(logit(np.clip(m, 1e-4, 1 - 1e-4)))
    starts = [(mu0, np.log(2.0))]  # the mean, s = 2 (alpha + beta = 2: a spread-out Beta)
    if 0 < m < 1 and v > 0:  # the method of moments on c / n
        starts.insert(0, (mu0, float(np.clip(np.log(max(m * (1 - m) / v - 1, 1e-3)), -10, 10))))
    if plain is None:
        return starts
    th0 = (
        logit(np.clip(plain["alpha"] / (plain["alpha"] + plain["beta"]), 1e-6, 1 - 1e-6)),
        np.log(plain["alpha"] + plain["beta"]),
    )
    zeros = float(np.mean(p == 0))
    return [(*th0, logit(q)) for q in (1e-3, max(zeros / 2, 1e-3), max(zeros * 0.9, 1e-3))] + [
        (*starts[0], logit(max(zeros / 2, 1e-3)))
    ]


def fit_betabinom(
    counts,
    n: int,
    zero_inflated: bool = False,
    plain: dict | None = None,
    start: tuple | None = None,
    tol: float = 1e-7,
) -> dict:
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
    and never reports a lower likelihood (pi -> 0 nests it). at_bound: mu or s ended on the box.
    start: (logit mu, log s) of the only start (a parametric bootstrap's refits start at the truth).
    tol: Nelder-Mead's tolerance on theta (and tol^1.5 on the likelihood); refits use 1e-4, which
    moves pass@k by less than 1e-4 (tested) at a fifth of the work."""
    from scipy.optimize import minimize
    from scipy.special import expit

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

    if zero_inflated:
        plain = plain or fit_betabinom(counts, n)
    starts = (
        [start] if start is not None and not zero_inflated else _starts(counts, n, plain if zero_inflated else None)
    )
    starts = [np.clip(np.array(s0, float), [b[0] for b in box], [b[1] for b in box]) for s0 in starts]
    best = min(
        (
            minimize(
                nll, s0, method="Nelder-Mead", bounds=box, options={"xatol": tol, "fatol": tol**1.5, "maxiter": 600}
            )
            for s0 in starts
        ),
        key=lambda r: r.fun,
    )
    th = best.x
    mu, sz = float(expit(th[0])), float(np.exp(th[1]))
    out = {
        "model": "zero-inflated beta-binomial" if zero_inflated else "beta-binomial",
        "alpha": mu * sz,
        "beta": (1 - mu) * sz,
        "pi": float(expit(th[2])) if zero_inflated else 0.0,
        "loglik": -float(best.fun),
        "params": 3 if zero_inflated else 2,
        "at_bound": bool(abs(th[0]) > LOG_BOUND - 1e-3 or th[1] < -LOG_BOUND + 1e-3 or th[1] > S_BOUND - 1e-3),
        "n": n,
        "n_problems": int(hist.sum()),
    }
    if zero_inflated and out["loglik"] < plain["loglik"]:  # the optimiser missed the nested point
        out.update(alpha=plain["alpha"], beta=plain["beta"], pi=0.0, loglik=plain["loglik"], at_bound=plain["at_bound"])
    out["aic"] = 2 * out["params"] - 2 * out["loglik"]
    return out


REGISTERED = "beta-binomial"  # PLAN_CHANGES.md change 29: the plain model, not a choice by AIC on 32 samples


def fit_pass_model(counts, n: int) -> dict:
    """Both fits; the registered model (REGISTERED, the plain beta-binomial) is the one used, and
    AIC's preference (the zero-inflated model when its AIC, 2 x 3 - 2 log L, is below the plain
    one's, 2 x 2 - 2 log L) is reported beside it, not used. Returns the plain fit's fields plus both
    fits. The fit depends on the counts only through their histogram, so it is cached on it."""
    return copy.deepcopy(_fit_pass_model(tuple(count_histogram(counts, n).tolist()), n))


@functools.lru_cache(maxsize=256)
def _fit_pass_model(hist: tuple, n: int) -> dict:
    counts = np.repeat(np.arange(n + 1), hist)
    bb = fit_betabinom(counts, n)
    zi = fit_betabinom(counts, n, zero_inflated=True, plain=bb)
    return {
        **bb,
        "chosen": REGISTERED,
        "aic_prefers": zi["model"] if zi["aic"] < bb["aic"] else bb["model"],
        "fits": {"beta-binomial": bb, "zero-inflated beta-binomial": zi},
        "rule": "the plain beta-binomial (registered); AIC's preference is reported, not used",
    }


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
    zi = fit["fits"]["zero-inflated beta-binomial"]
    return {
        "fit_n": n_small,
        "target_k": n_large,
        "model_used": fit["chosen"],
        "alpha": fit["alpha"],
        "beta": fit["beta"],
        "pi": fit["pi"],
        "predicted": predicted,
        "measured": measured,
        "error": predicted - measured,
        "predicted_zero_inflated": float(model_pass_at_k(zi, [n_large])[0]),
        "naive": naive,
        "naive_error": naive - measured,
    }


def parametric_replicates(fit: dict, n: int, N: int, ks, resamples: int, seed: int) -> np.ndarray:
    """(B, len(ks)) model-based pass@k of data sets drawn from the fitted model itself: N problems,
    p_i ~ Beta(alpha, beta), c_i ~ Binomial(n, p_i), refitted (the plain model, started at the
    truth) and evaluated at ks: the parametric bootstrap over problems of the model's prediction."""
    from scipy.special import logit

    rng = np.random.default_rng(seed)
    a, b = fit["alpha"], fit["beta"]
    start = (float(logit(np.clip(a / (a + b), 1e-6, 1 - 1e-6))), float(np.log(a + b)))
    out = np.empty((resamples, len(ks)))
    for r in range(resamples):
        c = rng.binomial(n, rng.beta(a, b, N))
        out[r] = model_pass_at_k(fit_betabinom(c, n, start=start, tol=REFIT_TOL), ks)
    return out


def contrast_check(
    base_small,
    n_base: int,
    rl_small,
    n_small: int,
    base_large,
    rl_large,
    n_large: int,
    resamples: int,
    seed: int,
    level: float,
) -> dict:
    """The model checked on what the question is about, a contrast: fitted to the base's counts of
    n_base samples and the trained model's of n_small, it predicts Delta pass@n_large (RL - base); the
    large set measures it on the same problems. A paired bootstrap over problems: `resamples` redraws of
    the problems (the same draws for both models and the large set), both models refitted (the plain
    model, started at the full fit); ci is the percentile interval of the predicted Deltas, error_ci
    that of the error (predicted - measured on the same redrawn problems), and the measured contrast
    is covered when error_ci contains 0. Also the zero-inflated model's prediction (not registered)."""
    from scipy.special import logit

    fb, fr = fit_pass_model(base_small, n_base), fit_pass_model(rl_small, n_small)
    b, r = np.asarray(base_small, int), np.asarray(rl_small, int)
    pb, pr = (float(model_pass_at_k(f, [n_large])[0]) for f in (fb, fr))

    def start(f):
        return (
            float(logit(np.clip(f["alpha"] / (f["alpha"] + f["beta"]), 1e-6, 1 - 1e-6))),
            float(np.log(f["alpha"] + f["beta"])),
        )

    idx = np.random.default_rng([seed, 271]).integers(0, len(b), size=(resamples, len(b)))
    reps = np.array(
        [
            model_pass_at_k(fit_betabinom(r[i], n_small, start=start(fr), tol=REFIT_TOL), [n_large])[0]
            - model_pass_at_k(fit_betabinom(b[i], n_base, start=start(fb), tol=REFIT_TOL), [n_large])[0]
            for i in idx
        ]
    )
    per = per_problem(rl_large, n_large, n_large) - per_problem(
        base_large, n_large, n_large
    )  # (N,) measured, per problem
    errors = reps - per[idx].mean(axis=1)  # the error on the same redrawn problems: what the check asks about
    lo, hi = percentile_interval(reps, level)
    elo, ehi = percentile_interval(errors, level)
    measured = float(per.mean())
    zi = [float(model_pass_at_k(f["fits"]["zero-inflated beta-binomial"], [n_large])[0]) for f in (fb, fr)]
    return {
        "fit_n": n_small,
        "fit_n_base": n_base,
        "target_k": n_large,
        "predicted_delta": pr - pb,
        "ci": [lo, hi],
        "measured_delta": measured,
        "error": pr - pb - measured,
        "error_ci": [elo, ehi],
        "covered": bool(elo <= 0 <= ehi),
        "predicted_delta_zero_inflated": zi[1] - zi[0],
        "error_zero_inflated": zi[1] - zi[0] - measured,
        "resamples": resamples,
        "naive_delta": float(
            per_problem(r, n_small, n_small).mean() - per_problem(b, n_base, min(n_base, n_small)).mean()
        ),
    }


def boundary(base_counts, rl_counts, ids) -> dict:
    """The edges of what each model can do, at one n: problems the base never solved (c = 0) that the
    trained model solved at least once, and the reverse, with their ids."""
    b, r = np.asarray(base_counts), np.asarray(rl_counts)
    only_rl = [ids[i] for i in np.flatnonzero((b == 0) & (r > 0))]
    only_base = [ids[i] for i in np.flatnonzero((b > 0) & (r == 0))]
    return {
        "only_rl": len(only_rl),
        "only_base": len(only_base),
        "only_rl_ids": only_rl,
        "only_base_ids": only_base,
        "solved_base": int(np.count_nonzero(b > 0)),
        "solved_rl": int(np.count_nonzero(r > 0)),
    }


def boundary_null(
    base_counts, rl_counts, n: int, fresh_counts, n_fresh: int, sims: int = 10000, seed: int = 0, level: float = 0.95
) -> dict:
    """How many problems chance alone would put on each side of the boundary if RL were the base
    (H0: the same per-problem rates). Problem i lands "only RL" when the base's n draws are all wrong
    and RL's n draws are not; its chance is q_i = E[(1 - p)^n] - E[(1 - p)^(2n)] over the base's rate
    p on that problem, taken from *fresh* base samples (fresh_counts of n_fresh, drawn apart from the
    base_counts that call a problem unsolved: from those, an unsolved problem's rate would be 0 and
    q_i = 0): p ~ Beta(alpha + f_i, beta + n_fresh - f_i), (alpha, beta) the beta-binomial fit to the
    fresh counts (empirical Bayes), so E[(1 - p)^k] = B(a_i, b_i + k) / B(a_i, b_i). "Only base" has
    the same chance under H0. The null count is a sum of independent Bernoulli(q_i), simulated
    `sims` times: its mean, range at `level`, and p = (1 + #{null >= observed}) / (sims + 1)."""
    from scipy.special import betaln

    b, r, f = (np.asarray(x, int) for x in (base_counts, rl_counts, fresh_counts))
    fit = fit_betabinom(f, n_fresh)
    ai, bi = fit["alpha"] + f, fit["beta"] + n_fresh - f
    q = np.exp(betaln(ai, bi + n) - betaln(ai, bi)) - np.exp(betaln(ai, bi + 2 * n) - betaln(ai, bi))
    null = (np.random.default_rng(seed).random((sims, len(q))) < q).sum(axis=1)
    lo, hi = np.quantile(null, [(1 - level) / 2, (1 + level) / 2])
    out = {
        "expected": float(q.sum()),
        "range": [int(lo), int(hi)],
        "level": level,
        "sims": sims,
        "fresh_n": n_fresh,
        "prior": {"alpha": fit["alpha"], "beta": fit["beta"]},
    }
    for side, obs in (
        ("only_rl", int(np.count_nonzero((b == 0) & (r > 0)))),
        ("only_base", int(np.count_nonzero((b > 0) & (r == 0)))),
    ):
        out[side] = {
            "observed": obs,
            "excess": obs - float(q.sum()),
            "p": float((1 + np.count_nonzero(null >= obs)) / (sims + 1)),
        }
    return out
