"""The selection null: what the base itself, reweighted towards its correct answers, would give.

The optimum of KL-regularised RL with a 0/1 reward is the base reweighted, pi(y|x) ~ pi_base(y|x) w^r(y):
its support is the base's, so it is selection by construction. Per problem the success rate p
becomes
    f_w(p) = w p / (w p + 1 - p),   i.e. logit f_w(p) = logit p + log w,
so a uniform reweighting is a shift of every problem's logit by log w. The ceiling half of the
primary question (PLAN.md section 7) compares a trained model's pass@k_max with the base reweighted
by the w at which the reweighted base's pass@1 equals the trained model's, on the same problems.

The base's rates are known only through its counts c_i of n samples. A plug-in p = c / n would call
every problem with c = 0 unreachable, which biases the null towards "beyond selection" exactly where
the question lives. So the change reweighting makes is taken from each rate's empirical-Bayes posterior,
p_i | c_i ~ Beta(a + c_i, b + n - c_i), (a, b) the beta-binomial maximum-likelihood fit to the base's
counts (passmodel.fit_betabinom), and added to the base's own unbiased estimate (selection_null):
    T1[c, w] = c / n + E[f_w(p) - p | c],   TK[c, w] = pass_at_k(n, c, k) + E[g_w(p) - g_1(p) | c],
g_w(p) = 1 - (1 - f_w(p))^k, tabulated once on a grid of w (log-spaced) by quadrature on a grid of
logit p; at w = 1 the null is the base's own pass@1 and pass@k. A bootstrap replicate's
null is then a histogram of its drawn problems' counts times the table, and its w the point where
the mean of T1 equals the replicate's trained pass@1 (linear in log w between grid points).
numpy and scipy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, log_expit

W_GRID = np.geomspace(1e-3, 1e5, 241)  # w from 1/1000 to 1e5, 20 points per decade
T_GRID = np.linspace(-30.0, 30.0, 3001)  # logit p, spacing 0.02


def reweighted(p, w: float) -> np.ndarray:
    """f_w(p) = w p / (w p + 1 - p): a success rate after reweighting correct answers by w."""
    p = np.asarray(p, float)
    return w * p / (w * p + 1.0 - p)


@dataclass
class SelectionNull:
    """The tables of one base (its counts of n samples, its prior) at one k."""

    n: int
    k: int
    prior: tuple[float, float]  # (a, b) of the Beta prior
    t1: np.ndarray  # (n + 1, len(W_GRID)) the null's pass@1 of a problem with count c
    tk: np.ndarray  # (n + 1, len(W_GRID)) its pass@k

    def curves(self, counts_hist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean null pass@1 and pass@k over problems, on the w grid, for each row of problem-count
        weights counts_hist (R, n + 1) (a histogram of counts divided by the number of problems)."""
        return counts_hist @ self.t1, counts_hist @ self.tk

    def fit(self, counts_hist: np.ndarray, target1: np.ndarray) -> dict:
        """Per row: the w at which the null's mean pass@1 equals target1 (R,), the null's pass@1
        and pass@k there, and whether the target lay outside what the grid reaches (then w is the
        grid's end). Linear interpolation in log w between grid points."""
        m1, mk = self.curves(np.atleast_2d(counts_hist))
        target1 = np.atleast_1d(np.asarray(target1, float))
        j = np.clip((m1 < target1[:, None]).sum(axis=1), 1, len(W_GRID) - 1)  # m1 rises with w
        rows = np.arange(len(target1))
        lo, hi = m1[rows, j - 1], m1[rows, j]
        frac = np.clip((target1 - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0, 1.0)
        logw = np.log(W_GRID[j - 1]) + frac * (np.log(W_GRID[j]) - np.log(W_GRID[j - 1]))
        out_of_range = (target1 < m1[:, 0]) | (target1 > m1[:, -1])
        return {
            "w": np.exp(logw),
            "pass1": lo + frac * (hi - lo),
            "passk": mk[rows, j - 1] + frac * (mk[rows, j] - mk[rows, j - 1]),
            "out_of_range": out_of_range,
        }

    def per_problem(self, counts, w: float) -> tuple[np.ndarray, np.ndarray]:
        """(N,) each problem's null pass@1 and pass@k at one w (interpolated in log w)."""
        c = np.asarray(counts, int)
        lw = np.log(np.clip(w, W_GRID[0], W_GRID[-1]))
        j = int(np.clip(np.searchsorted(np.log(W_GRID), lw), 1, len(W_GRID) - 1))
        a = (lw - np.log(W_GRID[j - 1])) / (np.log(W_GRID[j]) - np.log(W_GRID[j - 1]))
        return ((1 - a) * self.t1[c, j - 1] + a * self.t1[c, j], (1 - a) * self.tk[c, j - 1] + a * self.tk[c, j])


def posterior_weights(n: int, prior: tuple[float, float]) -> np.ndarray:
    """(n + 1, len(T_GRID)) quadrature weights of logit p under Beta(a + c, b + n - c), one row per
    count c. In logit coordinates t the Beta(A, B) density is proportional to sigma(t)^A sigma(-t)^B."""
    a, b = prior
    c = np.arange(n + 1)[:, None]
    logw = (a + c) * log_expit(T_GRID)[None, :] + (b + n - c) * log_expit(-T_GRID)[None, :]
    logw -= logw.max(axis=1, keepdims=True)
    wt = np.exp(logw)
    return wt / wt.sum(axis=1, keepdims=True)


def selection_null(counts, n: int, k: int, prior: tuple[float, float] | None = None) -> SelectionNull:
    """The tables for a base with per-problem counts `counts` of n samples, at pass@k. The prior is
    the beta-binomial fit to those counts unless given. Each entry is the base's own unbiased estimate
    plus the posterior's expected change from reweighting,
        T1[c, w] = c / n + E[f_w(p) - p | c],   TK[c, w] = pass_at_k(n, c, k) + E[g_w(p) - g_1(p) | c],
    g_w(p) = 1 - (1 - f_w(p))^k: at w = 1 the null is the base exactly, whatever the
    prior, and only the amplification, which the counts cannot measure on a problem the base rarely
    solves, comes from the posterior."""
    from analysis.passmodel import fit_betabinom
    from analysis.stats import pass_at_k_curves

    if prior is None:
        f = fit_betabinom(counts, n)
        prior = (f["alpha"], f["beta"])
    wt = posterior_weights(n, prior)  # (n + 1, T)
    shifted = T_GRID[:, None] + np.log(W_GRID)[None, :]  # (T, W): logit f_w(p) = logit p + log w
    f1 = expit(shifted) - expit(T_GRID)[:, None]  # f_w(p) - p
    gk = (
        -np.expm1(k * log_expit(-shifted)) + np.expm1(k * log_expit(-T_GRID))[:, None]
    )  # g_w(p) - g_1(p), stable for tiny p
    own = pass_at_k_curves(np.arange(n + 1), n, k)  # (n + 1, k): the unbiased pass@1 and pass@k of each count
    t1 = own[:, :1] + wt @ f1  # not clipped to [0, 1]: a problem's value may leave it by a little, the mean over
    tk = (
        own[:, k - 1 : k] + wt @ gk
    )  # problems (what is compared) stays unbiased; clipping biased it by -0.006 (PLAN.md section 7)
    return SelectionNull(n, k, (float(prior[0]), float(prior[1])), t1, tk)


def count_histograms(counts, idx: np.ndarray, n: int) -> np.ndarray:
    """(B, n + 1) for each bootstrap replicate (a row of problem draws idx (B, N)) the share of its
    drawn problems with each count 0..n."""
    c = np.asarray(counts, int)[idx]  # (B, N)
    B, N = c.shape
    flat = (c + (n + 1) * np.arange(B)[:, None]).ravel()
    return np.bincount(flat, minlength=B * (n + 1)).reshape(B, n + 1) / N
