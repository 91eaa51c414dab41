"""Synthetic worlds whose truth is built in: per-problem base rates, trained models that select
(the base reweighted, reweight.reweighted) or teach (gold answers mixed in), and their counts. The
analysis is checked on them (tests/test_verdict.py) and the Qwen design is sized with them
(design_check). numpy and scipy only; every draw from a generator seeded by explicit arguments.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize
from scipy.special import betaln

from analysis.reweight import reweighted


def beta_passk(a: float, b: float, k: int) -> float:
    """E[1 - (1 - p)^k] for p ~ Beta(a, b): 1 - B(a, b + k) / B(a, b)."""
    return float(-np.expm1(betaln(a, b + k) - betaln(a, b)))


def beta_for(pass1: float, passk: float, k: int) -> tuple[float, float]:
    """The Beta(a, b) of per-problem rates with mean pass1 and pass@k = passk (a + b found by root
    finding on log(a + b); pass@k falls as a + b grows at a fixed mean)."""

    def gap(log_s):
        s = np.exp(log_s)
        return beta_passk(pass1 * s, (1 - pass1) * s, k) - passk

    s = np.exp(optimize.brentq(gap, -8.0, 12.0, xtol=1e-12))
    return float(pass1 * s), float((1 - pass1) * s)


def rates(rng: np.random.Generator, n_problems: int, a: float, b: float) -> np.ndarray:
    """(N,) per-problem success rates p_i ~ Beta(a, b)."""
    return rng.beta(a, b, n_problems)


def selection(p: np.ndarray, w: float, seeds: int, seed_sd: float, rng: np.random.Generator) -> np.ndarray:
    """(S, N) trained rates that select: the base reweighted by w, each seed's log w shifted by
    N(0, seed_sd) (a training seed is another reweighting)."""
    ws = w * np.exp(rng.normal(0.0, seed_sd, seeds)) if seed_sd > 0 else np.full(seeds, float(w))
    return np.stack([reweighted(p, x) for x in ws])


def teaching(
    p: np.ndarray, eps: float, seeds: int, seed_sd: float, rng: np.random.Generator, w: float = 1.0
) -> np.ndarray:
    """(S, N) trained rates that teach: a share eps of every answer is a correct one the model has
    learned, whatever the base could do, on top of the base reweighted by w (w = 1: teaching alone).
    A seed's eps is shifted by N(0, seed_sd) on the logit scale."""
    from scipy.special import expit, logit

    es = expit(logit(eps) + rng.normal(0.0, seed_sd, seeds)) if seed_sd > 0 else np.full(seeds, float(eps))
    sel = reweighted(p, w)
    return np.stack([e + (1 - e) * sel for e in es])


def eps_for(p: np.ndarray, pass1: float) -> float:
    """The gold share eps at which teaching alone reaches mean pass@1 = pass1 on rates p."""
    return float((pass1 - p.mean()) / (1 - p.mean()))


def w_for(p: np.ndarray, pass1: float) -> float:
    """The uniform reweighting w at which the base's rates p reach mean pass@1 = pass1."""
    return float(np.exp(optimize.brentq(lambda lw: reweighted(p, np.exp(lw)).mean() - pass1, -12.0, 16.0, xtol=1e-12)))


def counts(rng: np.random.Generator, rate: np.ndarray, n: int) -> np.ndarray:
    """Correct counts of n samples at each rate."""
    return rng.binomial(n, np.clip(rate, 0.0, 1.0))


def sharpened(p: np.ndarray, gamma: float, shift: float) -> np.ndarray:
    """Rates made more extreme without new support: logit p' = gamma logit p + shift (gamma > 1 moves
    every rate away from its middle; p = 0 stays 0). What a trained model that selects and narrows
    looks like (the report's many at 150 steps: pass@1 up, pass@32 down)."""
    from scipy.special import expit, logit

    q = np.clip(p, 1e-12, 1 - 1e-12)
    return expit(gamma * logit(q) + shift)


def sharpening_for(p: np.ndarray, pass1: float, passk: float, k: int) -> tuple[float, float]:
    """(gamma, shift) at which sharpened(p) has mean pass@1 = pass1 and pass@k = passk."""

    def gap(x):
        q = sharpened(p, np.exp(x[0]), x[1])
        return [q.mean() - pass1, (-np.expm1(k * np.log1p(-np.clip(q, 0, 1 - 1e-15)))).mean() - passk]

    sol = optimize.root(gap, [0.0, 0.0], method="hybr")
    if not sol.success or max(abs(v) for v in gap(sol.x)) > 1e-6:
        raise ValueError(f"no sharpening reaches pass@1 {pass1} and pass@{k} {passk} from these rates")
    return float(np.exp(sol.x[0])), float(sol.x[1])
