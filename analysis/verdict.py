"""One comparison of a trained model with its base, and its label (PLAN.md section 7): pass@1 rises
or falls, and the ceiling pass@k_max against the selection null (the base reweighted to the trained
model's pass@1, analysis/reweight.py). Every registered entry, every calibration arm and every simulation of
the design goes through `compare`, so they are judged by one piece of code.

The four labels, in this order of precedence:
  degradation        pass@1 falls (one-sided): the model got worse, whatever its ceiling does (the
                     null would then be the base reweighted away from its correct answers, w < 1)
  beyond selection   the ceiling lies above the selection null's (one-sided): more than any uniform
                     reweighting of the base's own answers at this pass@1 would reach
  selection          pass@1 rises (one-sided) and the ceiling is shown below the null's (one-sided),
                     or within +-selection_margin of it (TOST, asked only where the margin is at most
                     headroom_fraction of the null's headroom 1 - its pass@k_max)
  undecided          none of these, with the reason
Each one-sided p-value is the larger of the crossed bootstrap's and the random-effects t test's
(power.variance_components on the per-seed, per-problem differences): the bootstrap is liberal when
the seed variance dominates, the t test on sparse counts; the larger of the two is calibrated in
both regimes (tests/test_verdict.py simulates them).

Inputs are counts: the base's per-problem correct counts of n_base samples, the trained model's
(S, N) counts of n samples per seed. The crossed bootstrap draws problems and, independently, seeds
with replacement (analysis/stats.py); its replicate means are computed from multiplicities, M (B, N) how
often each problem is drawn and Q (B, S) how often each seed is, so a replicate is two matrix
products instead of a gather of S x B x N values. numpy and scipy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis import stats
from analysis.power import t_result, variance_components
from analysis.reweight import SelectionNull, count_histograms

LABELS = ("selection", "beyond selection", "degradation", "undecided")


@dataclass(frozen=True)
class Levels:
    """The levels and margins every registered test shares (config analyze.*)."""

    ci: float = 0.95  # two-sided intervals; one-sided tests at (1 - ci) / 2, TOST at 1 - ci
    margin: float = 0.10  # the base-null reading's equivalence margin (analyze.equivalence_margin)
    selection_margin: float = 0.05  # equivalence to the selection null (analyze.selection_margin)
    headroom_fraction: float = 1 / 3  # an equivalence test is asked only where margin <= this x headroom

    @property
    def one_sided(self) -> float:
        return round((1 - self.ci) / 2, 12)

    @property
    def tost(self) -> float:
        return round(1 - self.ci, 12)


@dataclass
class Draws:
    """The crossed bootstrap's draws: problems idx (B, N) from resample_indices(N, B, seed), seeds
    from seed_resample_indices(S, B, seed, stream) per number of seeds, and their multiplicities."""

    n_problems: int
    resamples: int
    seed: int
    idx: np.ndarray = field(init=False)
    m: np.ndarray = field(init=False)  # (B, N) how often replicate b draws problem i, over N
    _q: dict = field(default_factory=dict, init=False)

    def __post_init__(self):
        self.idx = stats.resample_indices(self.n_problems, self.resamples, self.seed)
        self.m = stats.multiplicities(self.idx, self.n_problems)

    def seeds(self, S: int, stream: int = 1) -> np.ndarray:
        """(B, S) how often replicate b draws seed s, over S."""
        if (S, stream) not in self._q:
            self._q[(S, stream)] = stats.multiplicities(
                stats.seed_resample_indices(S, self.resamples, self.seed, stream), S
            )
        return self._q[(S, stream)]

    def means(self, values: np.ndarray, stream: int = 1, per_seed: bool | None = None) -> np.ndarray:
        """(B, ...) replicate means (stats.crossed_means) of values (S, N, ...) per seed or (N, ...)
        shared by every seed; by default 2-d and more are per seed, 1-d shared."""
        v = np.asarray(values, float)
        per_seed = v.ndim >= 2 if per_seed is None else per_seed
        return stats.crossed_means(v, self.m, self.seeds(v.shape[0], stream) if per_seed else None)


def larger_p(boot: float, t: float) -> float:
    return float(max(boot, t))


def one_sided(reps: np.ndarray, d: np.ndarray, side: str) -> dict:
    """The one-sided test of 'Delta > 0' (side 'above') or '< 0' ('below'): the bootstrap p from the
    replicates, the t p from d (S, N)'s variance components, and the larger of the two."""
    vc = variance_components(np.atleast_2d(d))
    t = t_result(vc, 0.95)
    pb = stats.p_above(reps) if side == "above" else stats.p_below(reps)
    pt = t["p_above"] if side == "above" else t["p_below"]
    return {"p": larger_p(pb, pt), "p_boot": pb, "p_t": pt, "se": vc["se"], "df": vc["df"]}


def equivalence(reps: np.ndarray, d: np.ndarray, margin: float) -> dict:
    """TOST within +-margin: each one-sided part the larger of its bootstrap and t p-values
    (the t parts test d - (-margin) > 0 and d - margin < 0), and p = the larger part."""
    lo = one_sided(reps + margin, np.atleast_2d(d) + margin, "above")
    hi = one_sided(reps - margin, np.atleast_2d(d) - margin, "below")
    return {
        "p": max(lo["p"], hi["p"]),
        "p_boot": max(lo["p_boot"], hi["p_boot"]),
        "p_t": max(lo["p_t"], hi["p_t"]),
        "margin": margin,
    }


def pass_curves(counts: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """pass@1 and pass@k per row and problem from counts (..., N) of n samples."""
    c = np.asarray(counts, int)
    table = stats.pass_at_k_curves(np.arange(n + 1), n, k)  # (n + 1, k)
    return table[c, 0], table[c, k - 1]


def compare(
    base_counts, n_base: int, rl_counts, n: int, k: int, null: SelectionNull, draws: Draws, levels: Levels
) -> dict:
    """Every registered number of one trained model (rl_counts (S, N) of n samples) against its base
    (base_counts (N,) of n_base samples) at pass@1 and pass@k, and its label with the reason.
    null: reweight.selection_null of the same base counts at this k. Raw p-values; the analysis
    adjusts secondary entries within their Holm family and relabels them (label_from)."""
    base = np.asarray(base_counts, int)
    rl = np.atleast_2d(np.asarray(rl_counts, int))
    b1, bk = pass_curves(base, n_base, k)  # (N,)
    r1, rk = pass_curves(rl, n, k)  # (S, N)
    d1 = r1 - b1
    rep1, repk_rl = draws.means(r1), draws.means(rk)  # (B,)
    rep_d1 = rep1 - draws.means(b1)
    # the selection null at the trained pass@1, for the point estimate and in every replicate
    point = null.fit(np.bincount(base, minlength=n_base + 1)[None] / len(base), [r1.mean()])
    w = float(point["w"][0])
    fit = null.fit(count_histograms(base, draws.idx, n_base), rep1)
    rep_dsel = repk_rl - fit["passk"]
    _, nullk_i = null.per_problem(base, w)
    dsel = rk - nullk_i  # (S, N) against the null at the point estimate's w (the t test's view)
    null_k = float(point["passk"][0])
    headroom = 1.0 - null_k
    testable = bool(levels.selection_margin <= levels.headroom_fraction * headroom + 1e-12)
    a1 = levels.one_sided
    out = {
        "seeds": int(rl.shape[0]),
        "n_problems": int(len(base)),
        "n": n,
        "n_base": n_base,
        "k": k,
        "pass1_base": float(b1.mean()),
        "pass1_rl": float(r1.mean()),
        "pass1_diff": float(d1.mean()),
        "pass1_ci": list(stats.percentile_interval(rep_d1, levels.ci)),
        "passk_base": float(bk.mean()),
        "passk_rl": float(rk.mean()),
        "passk_diff": float((rk - bk).mean()),
        "rises": one_sided(rep_d1, d1, "above"),
        "falls": one_sided(rep_d1, d1, "below"),
        "null": {
            "w": w,
            "w_ci": list(np.exp(stats.percentile_interval(np.log(fit["w"]), levels.ci))),
            "pass1": float(point["pass1"][0]),
            "passk": null_k,
            "headroom": headroom,
            "out_of_range": bool(point["out_of_range"][0]),
            "replicates_out_of_range": float(fit["out_of_range"].mean()),
            "prior": list(null.prior),
        },
        "vs_null": {
            "diff": float(dsel.mean()),
            "ci": list(stats.percentile_interval(rep_dsel, levels.ci)),
            "ci90": list(stats.percentile_interval(rep_dsel, 1 - 2 * levels.tost)),
            "above": one_sided(rep_dsel, dsel, "above"),
            "below": one_sided(rep_dsel, dsel, "below"),
            "equivalence": equivalence(rep_dsel, dsel, levels.selection_margin) if testable else None,
            "testable": testable,
        },
    }
    out["label"], out["reason"] = label_from(out, a1, levels.tost)
    return out


def stratum_null(
    base_counts, n_base: int, rl_counts, n: int, k: int, null: SelectionNull, strata, draws: Draws, levels: Levels
) -> dict:
    """The selection null with one tilt per stratum: the base reweighted within each stratum to
    the trained model's pass@1 there, its pass@k averaged over every problem, and the trained pass@k
    against it (D_strata), with the same crossed bootstrap as compare (each replicate refits every
    stratum's w on its drawn problems) and the one-sided tests of D_strata above and below 0. A wider null
    than the uniform one: a model that tilts the hard stratum more than the easy ones is inside it.
    Descriptive beside the registered label (PLAN_CHANGES.md change 46); it changes no label."""
    base = np.asarray(base_counts, int)
    rl = np.atleast_2d(np.asarray(rl_counts, int))
    strata = np.asarray(strata, dtype=object)
    names = sorted({x for x in strata if x is not None})
    r1, rk = pass_curves(rl, n, k)  # (S, N)
    point_null, rep_null, dsel, per = 0.0, np.zeros(draws.resamples), np.zeros_like(rk, dtype=float), {}
    drawn = (
        base[draws.idx] + (n_base + 1) * np.arange(draws.resamples)[:, None]
    )  # (B, N) each replicate's counts, offset per row
    for name in names:
        inside = strata == name  # (N,)
        mask, share = inside.astype(float), inside.mean()
        # histograms of the stratum's counts by exact integer counting (a matrix product's rounding varied between runs)
        hist = (np.bincount(base[inside], minlength=n_base + 1) / inside.sum())[None]  # (1, n_base + 1)
        point = null.fit(hist, [float(rl[:, inside].sum() / (n * rl.shape[0] * inside.sum()))])
        kept = inside[draws.idx]  # (B, N) which drawn problems are in the stratum
        rep_n = kept.sum(axis=1)  # (B,)
        rep_hist = np.bincount(drawn[kept], minlength=draws.resamples * (n_base + 1)).reshape(
            draws.resamples, n_base + 1
        )
        rep_share = rep_n / len(base)
        fit = null.fit(rep_hist / np.maximum(rep_n, 1)[:, None], draws.means(r1 * mask) / np.maximum(rep_share, 1e-12))
        w = float(point["w"][0])
        point_null += share * float(point["passk"][0])
        rep_null += rep_share * fit["passk"]
        dsel += mask * (rk - null.per_problem(base, w)[1])
        per[name] = {
            "w": w,
            "n_problems": int(mask.sum()),
            "null_passk": float(point["passk"][0]),
            "out_of_range": bool(point["out_of_range"][0]),
        }
    rep_d = draws.means(rk) - rep_null
    return {
        "strata": per,
        "null_passk": point_null,
        "diff": float(rk.mean() - point_null),
        "ci": list(stats.percentile_interval(rep_d, levels.ci)),
        "above": one_sided(rep_d, dsel, "above"),
        "below": one_sided(rep_d, dsel, "below"),
    }


REASONS = (
    "above-null",
    "pass1-falls",
    "below-null",
    "within-null",
    "equivalence-not-asked",
    "ceiling-inconclusive",
    "pass1-unchanged",
)


def label_from(e: dict, a1: float, at: float, p: dict | None = None) -> tuple[str, dict]:
    """The label and its reason, {"code": one of REASONS, "p": the p-value it rests on}, from an
    entry's raw p-values or from `p` (adjusted ones, keys rises, falls, above, below, equivalence;
    None where not asked) for a secondary entry. analysis/report.py puts the reason into words."""
    p = p or {
        "rises": e["rises"]["p"],
        "falls": e["falls"]["p"],
        "above": e["vs_null"]["above"]["p"],
        "below": e["vs_null"]["below"]["p"],
        "equivalence": e["vs_null"]["equivalence"]["p"] if e["vs_null"]["equivalence"] else None,
    }
    if p["falls"] < a1:
        return "degradation", {"code": "pass1-falls", "p": p["falls"]}
    if p["above"] < a1:
        return "beyond selection", {"code": "above-null", "p": p["above"]}
    if p["rises"] >= a1:
        return "undecided", {"code": "pass1-unchanged", "p": p["rises"]}
    if p["below"] < a1:
        return "selection", {"code": "below-null", "p": p["below"]}
    if p["equivalence"] is not None and p["equivalence"] < at:
        return "selection", {"code": "within-null", "p": p["equivalence"]}
    if p["equivalence"] is None:
        return "undecided", {"code": "equivalence-not-asked", "p": None}
    return "undecided", {"code": "ceiling-inconclusive", "p": p["equivalence"]}


def base_null_label(e: dict) -> str:
    """The label of the base-null reading (PLAN_CHANGES.md change 29, the seed report's criterion)."""
    s = e["base_null"]["selection"]
    if s:
        return "selection (base null)"
    if s is None:
        return "undecided (base null)"
    return "no selection (base null)"


def registered_label(e: dict, ceiling_null: str) -> str:
    """The one label the run registered (analyze.ceiling_null: selection or base): verdicts.json's
    primary.label, the report's first sentence and the terminal headline all print this."""
    return e["label"] if ceiling_null == "selection" else base_null_label(e)
