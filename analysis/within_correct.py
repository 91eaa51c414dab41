"""Which correct answers RL favours at the temperature it trains at (PLAN.md section 7e): the mix of correct
answers, read against the one thing every selection of the base keeps.

Every outcome reweighting of the base at T 1, pi(y) ∝ pi_base(y) w_x^r(y) (the optimum of KL-regularised RL
with reward r, at any tilt w_x per problem x), leaves the distribution of correct answers given that they are
correct the base's own: log pi(y) - log pi_base(y) is one constant over a problem's correct y. Two measures
follow, each exact under that null, whatever the tilt, problem by problem and seed by seed:

  the exponent alpha   within each (seed s, problem i) cell of the trained model's correct T 1 responses,
                       d = log pi_RL(y) - log pi_base(y) regressed on x = log pi_base(y) (and the length L,
                       a covariate): d = (alpha - 1) x + beta L + c_si. Every reweighting gives alpha = 1
                       exactly (d is constant in a cell); a power sharpening pi ∝ pi_base^a gives alpha = a;
                       alpha < 1 says RL favours correct answers the base finds unlikely. No correct base
                       sample is needed, so it reads the problems the base never solves too.
  the outside gap D    on problems where both hold correct T 1 responses: the share of the trained model's
                       that pass through a token outside the base's evaluation nucleus, minus the share of
                       the base's own; weighted per problem by n_i m_i / (n_i + m_i). Under every
                       reweighting both are draws of pi_base(. | correct): exchangeable within a problem,
                       so the stratified permutation null (labels exchanged within each problem; the
                       permuted count is hypergeometric) is exact for independent draws. The `matched`
                       draws share their uniforms across training seeds (keyed by problem and sample), so a
                       problem's trained responses are dependent: "more outside" is decided by each seed's
                       own exact permutation test against the base, combined as twice their mean p (valid
                       under any dependence; PLAN.md section 7e).

Intervals are the crossed bootstrap's (problems and seeds, verdict.Draws); alpha's from the replicates'
pooled within-cell moments. Arrays in, small dataclasses out; numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis import stats, verdict

TOWARD_RARE, SHARPENING, REWEIGHTING, NOT_SHOWN = "toward-rare", "sharpening", "reweighting", "not shown"
EXPONENT_READINGS = ("toward-rare by the exponent", "sharpening by the exponent", "within margin")  # change 77
PERMUTATION_STREAM = 3  # the permutation null's generator: (analysis seed, this stream); 1 and 2 draw seeds


@dataclass(frozen=True)
class Responses:
    """One model's (or one condition's seeds') correct responses at T 1, one entry per response (R,)."""

    seed: np.ndarray  # (R,) int: the seed's position (0 for the base)
    problem: np.ndarray  # (R,) int: the problem's position among the test problems
    base_logp: np.ndarray  # (R,) log pi_base(y) at T 1, untruncated
    self_logp: np.ndarray | None  # (R,) log pi_model(y) at T 1 (None: not recorded)
    length: np.ndarray  # (R,) response tokens
    outside: np.ndarray  # (R,) bool: a token outside the base's evaluation nucleus

    def __post_init__(self):
        R = len(self.seed)
        arrays = (self.problem, self.base_logp, self.length, self.outside)
        if any(len(a) != R for a in arrays) or (self.self_logp is not None and len(self.self_logp) != R):
            raise ValueError("Responses: every array needs one entry per response")


@dataclass(frozen=True)
class Exponent:
    """The within-correct exponent alpha with its crossed interval and one-sided bootstrap p-values."""

    alpha: float | None
    interval: list[float] | None
    p_above: float | None  # H0 alpha <= 1 + margin against alpha > 1 + margin
    p_below: float | None  # H0 alpha >= 1 - margin against alpha < 1 - margin
    p_within: float | None  # TOST: |alpha - 1| < margin (the larger of the two parts)
    margin: float
    with_length: bool
    cells: int  # informative (seed, problem) cells: >= 2 distinct correct responses
    responses: int


@dataclass(frozen=True)
class OutsideGap:
    """The outside gap D (trained minus base share of correct T 1 responses outside the evaluation nucleus)."""

    gap: float | None
    interval: list[float] | None  # crossed bootstrap
    p_more: float | None  # trained more outside: the seeds' own permutation p's combined (`combined`); decides
    p_more_seeds: list | None  # each seed against the base: the permutation p, exact (its draws are independent)
    p_more_permutation: float | None  # every seed pooled (descriptive: exact only for independent seeds)
    p_more_bootstrap: float | None  # H0 D <= 0, the crossed bootstrap (descriptive)
    p_less: float | None  # trained less outside: the seeds' permutation p's combined
    p_within: float | None  # bootstrap TOST: |D| < margin
    margin: float
    trained_share: float | None
    base_share: float | None
    problems: int  # problems with correct responses on both sides
    trained_responses: int
    base_responses: int


@dataclass(frozen=True)
class Answer:
    """The three-way answer at the training sampler and what decided it."""

    answer: str
    decided_by: str
    exponent: Exponent
    gap: OutsideGap


# ----------------------------------------------------------------------------- the exponent


def cell_moments(r: Responses, S: int, N: int) -> np.ndarray:
    """(S, N, 6) per cell (seed, problem): the centred sums S_xx, S_xL, S_LL, S_xd, S_Ld over its responses
    (x = base log-prob, L = length, d = self minus base log-prob; centred on the cell's means, two passes), and
    1 where the cell is informative: at least two distinct x. An uninformative cell (one response, or one
    response repeated) carries no slope, and its moments are 0 exactly rather than rounding."""
    if r.self_logp is None:
        raise ValueError("the exponent needs each response's own log-probability (self_logp)")
    x, L = np.asarray(r.base_logp, float), np.asarray(r.length, float)
    d = np.asarray(r.self_logp, float) - x
    cell = np.asarray(r.seed) * N + np.asarray(r.problem)
    k = np.maximum(np.bincount(cell, minlength=S * N), 1)
    hi, lo = np.full(S * N, -np.inf), np.full(S * N, np.inf)
    np.maximum.at(hi, cell, x)
    np.minimum.at(lo, cell, x)
    informative = (hi > lo)[cell]  # (R,)
    xc, Lc, dc = (v - (np.bincount(cell, weights=v, minlength=S * N) / k)[cell] for v in (x, L, d))  # centred
    prods = np.stack([xc * xc, xc * Lc, Lc * Lc, xc * dc, Lc * dc], axis=1) * informative[:, None]  # (R, 5)
    mom = np.zeros((S * N, 6))
    np.add.at(mom[:, :5], cell, prods)
    mom[:, 5] = hi > lo
    return mom.reshape(S, N, 6)


def exponent_from(m: np.ndarray, with_length: bool) -> np.ndarray:
    """alpha = 1 + the pooled within-cell slope of d on x (with L as a covariate), from summed moments (..., 6)."""
    sxx, sxl, sll, sxd, sld = (m[..., j] for j in range(5))
    if not with_length:
        return 1 + sxd / sxx
    det = sxx * sll - sxl * sxl
    return 1 + (sxd * sll - sld * sxl) / det


def uses_length(m: np.ndarray) -> bool:
    """Length enters as a covariate when it varies within cells and is not collinear with x."""
    sxx, sxl, sll = m[..., 0].sum(), m[..., 1].sum(), m[..., 2].sum()
    return bool(sll > 0 and sxx > 0 and (sxx * sll - sxl * sxl) > 1e-9 * sxx * sll)


def exponent(r: Responses, S: int, N: int, draws: verdict.Draws, margin: float, level: float) -> Exponent:
    """The exponent alpha of r's correct responses, its crossed-bootstrap interval and its p-values against
    1 +- margin (a p is (1 + #replicates on the null's side) / (B + 1))."""
    mom = cell_moments(r, S, N)
    cells = int(mom[..., 5].sum())
    if cells == 0:
        return Exponent(None, None, None, None, None, margin, False, cells, len(r.seed))
    with_length = uses_length(mom)
    point = float(exponent_from(mom.sum(axis=(0, 1)), with_length))
    with np.errstate(invalid="ignore", divide="ignore"):  # a replicate that draws no cell with two responses
        reps = exponent_from(draws.means(mom), with_length)  # (B,): the replicates' pooled moments
    reps = reps[np.isfinite(reps)]  # such replicates say nothing about the slope: left out
    above, below = stats.p_above(reps, 1 + margin), stats.p_below(reps, 1 - margin)
    return Exponent(
        alpha=point,
        interval=list(stats.percentile_interval(reps, level)),
        p_above=above,
        p_below=below,
        p_within=max(stats.p_above(reps, 1 - margin), stats.p_below(reps, 1 + margin)),
        margin=margin,
        with_length=with_length,
        cells=cells,
        responses=len(r.seed),
    )


# ----------------------------------------------------------------------------- the outside gap


def outside_counts(r: Responses, S: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    """(S, N) correct responses and those outside, per seed and problem."""
    cell = np.asarray(r.seed) * N + np.asarray(r.problem)
    correct = np.bincount(cell, minlength=S * N).reshape(S, N)
    out = np.bincount(cell, weights=np.asarray(r.outside, float), minlength=S * N).reshape(S, N)
    return correct.astype(float), out


def weighted_gap(t_out, t_corr, b_out, b_corr) -> np.ndarray:
    """D = sum_i w_i (t_out_i / t_corr_i - b_out_i / b_corr_i) / sum_i w_i over problems with both sides
    non-empty, w_i = t_corr_i b_corr_i / (t_corr_i + b_corr_i); arrays (..., N) broadcast."""
    both = (t_corr > 0) & (b_corr > 0)
    w = np.where(both, t_corr * b_corr / np.where(both, t_corr + b_corr, 1), 0.0)
    diff = np.where(both, t_out / np.where(both, t_corr, 1) - b_out / np.where(both, b_corr, 1), 0.0)
    return (w * diff).sum(-1) / w.sum(-1)


def outside_gap(
    trained: Responses,
    base: Responses,
    S: int,
    N: int,
    draws: verdict.Draws,
    margin: float,
    level: float,
    permutations: int,
) -> OutsideGap:
    """D with its crossed-bootstrap interval (seeds and problems drawn for the trained side, the same problems
    for the base's), the exact stratified permutation p-values, and the bootstrap TOST within +- margin."""
    t_corr, t_out = outside_counts(trained, S, N)  # (S, N)
    b_corr, b_out = (a[0] for a in outside_counts(base, 1, N))  # (N,)
    tc, to = t_corr.sum(0), t_out.sum(0)
    both = (tc > 0) & (b_corr > 0)
    sizes = dict(trained_responses=int(tc[both].sum()), base_responses=int(b_corr[both].sum()))
    if not both.any():
        return OutsideGap(None, None, None, None, None, None, None, None, margin, None, None, 0, **sizes)
    gap = float(weighted_gap(to, tc, b_out, b_corr))
    q = draws.seeds(S)  # (B, S)
    with np.errstate(invalid="ignore"):  # a replicate that draws no problem holding both sides
        reps = weighted_gap(draws.m * (S * q @ t_out), draws.m * (S * q @ t_corr), draws.m * b_out, draws.m * b_corr)
    reps = reps[np.isfinite(reps)]  # such replicates say nothing about D: left out
    key = (draws.seed, PERMUTATION_STREAM)
    more, less = permutation_p(to, tc, b_out, b_corr, permutations, key)  # every seed pooled
    per_seed = [permutation_p(t_out[s], t_corr[s], b_out, b_corr, permutations, key + (s,)) for s in range(S)]
    return OutsideGap(
        gap=gap,
        interval=list(stats.percentile_interval(reps, level)),
        p_more=combined([p[0] for p in per_seed]),
        p_more_seeds=[p[0] for p in per_seed],
        p_more_permutation=more,
        p_more_bootstrap=stats.p_above(reps),
        p_less=combined([p[1] for p in per_seed]),
        p_within=max(stats.p_above(reps, -margin), stats.p_below(reps, margin)),
        margin=margin,
        trained_share=float(to[both].sum() / tc[both].sum()),
        base_share=float(b_out[both].sum() / b_corr[both].sum()),
        problems=int(both.sum()),
        **sizes,
    )


def combined(ps: list[float]) -> float | None:
    """One p from the seeds' own: twice their mean (capped at 1), valid under any dependence between them
    (Rüschendorf 1982; Vovk & Wang 2020), as the seeds' `matched` draws share their uniforms; one seed's as it is."""
    ps = [p for p in ps if p is not None]
    if not ps:
        return None
    return ps[0] if len(ps) == 1 else min(1.0, 2 * float(np.mean(ps)))


def permutation_p(t_out, t_corr, b_out, b_corr, permutations: int, key) -> tuple[float | None, float | None]:
    """One-sided p-values (trained more outside, less outside) of D on arrays (N,) under the stratified
    permutation null, exact when every response is an independent draw; None where no problem holds both."""
    both = (t_corr > 0) & (b_corr > 0)
    if not both.any():
        return None, None
    gap = float(weighted_gap(t_out, t_corr, b_out, b_corr))
    perm = permuted_gaps(t_out[both], t_corr[both], b_out[both], b_corr[both], permutations, key)
    more = float((1 + np.count_nonzero(perm >= gap - stats.TIE)) / (permutations + 1))
    less = float((1 + np.count_nonzero(perm <= gap + stats.TIE)) / (permutations + 1))
    return more, less


def permuted_gaps(t_out, t_corr, b_out, b_corr, permutations: int, key) -> np.ndarray:
    """(permutations,) D under the labels exchanged within each problem: the trained side's outside count is
    hypergeometric (t_corr draws from t_corr + b_corr responses of which t_out + b_out lie outside). key: the
    generator's seed parts."""
    rng = np.random.default_rng(list(np.atleast_1d(key)))
    total, good = (t_corr + b_corr).astype(np.int64), (t_out + b_out).astype(np.int64)
    h = rng.hypergeometric(good, total - good, t_corr.astype(np.int64), size=(permutations, len(total)))
    return weighted_gap(h, t_corr, good - h, b_corr)


# ----------------------------------------------------------------------------- the three-way answer


def answer(exp: Exponent, gap: OutsideGap, level: float) -> Answer:
    """toward-rare where alpha < 1 - margin or the trained side is more outside (each at one-sided alpha);
    else sharpening where alpha > 1 + margin; else reweighting where alpha is within 1 +- margin and D within
    +- its margin (both TOSTs); else not shown; each at the one-sided `level`. A missing part decides nothing
    and blocks reweighting."""
    if exp.p_below is not None and exp.p_below < level:
        return Answer(TOWARD_RARE, "exponent below 1 - margin", exp, gap)
    if gap.p_more is not None and gap.p_more < level:
        return Answer(TOWARD_RARE, "more outside than the base's own correct answers", exp, gap)
    if exp.p_above is not None and exp.p_above < level:
        return Answer(SHARPENING, "exponent above 1 + margin", exp, gap)
    within = exp.p_within is not None and exp.p_within < level
    if within and gap.p_within is not None and gap.p_within < level:
        return Answer(REWEIGHTING, "exponent and outside gap both within their margins", exp, gap)
    return Answer(NOT_SHOWN, "no part decided", exp, gap)


def exponent_reading(p_below: float | None, p_above: float | None, p_within: float | None, level: float) -> str:
    """The exponent's own reading (PLAN.md section 12, change 77), from Exponent's p-values at the one-sided
    `level`: toward-rare by the exponent (alpha < 1 - margin), sharpening by the exponent (alpha > 1 + margin),
    within margin (its TOST: the log-ratio to the base does not vary with the base's log-probability beyond the
    margin, as under any reweighting; nothing about the outside gap), else not shown."""
    for p, reading in zip((p_below, p_above, p_within), EXPONENT_READINGS):
        if p is not None and p < level:
            return reading
    return NOT_SHOWN
