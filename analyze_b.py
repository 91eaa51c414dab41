"""The registered verdicts (PLAN.md section 7): a crossed bootstrap over training seeds and test
problems, one primary question, Holm-corrected secondary tests, equivalence for the ceiling, and
the report and figures that show them.

Reads RUN/eval_base.json and RUN/eval_<condition>_s<seed>_<step>.json (older single-seed runs:
eval_<condition>_<step>.json, read as seed 0), the design from RUN/manifest.json's config (else
eval_base.json's), and, where present, train_*/train_log.csv, lr_choice.json, selection.json and
probe_*.json. Writes RUN/verdicts.json, RUN/report.md and RUN/figures/*.png.

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
This file imports no torch: it meets the rest of the pipeline only in JSON and CSV files.
"""
from __future__ import annotations

import argparse
import csv
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
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
EVAL_RE = re.compile(r"^eval_(?P<cond>.+)_s(?P<seed>\d+)_(?P<step>\d+)\.json$")
EVAL_RE_V1 = re.compile(r"^eval_(?P<cond>.+)_(?P<step>\d+)\.json$")  # single-seed runs before train.seeds
TRAIN_RE = re.compile(r"^train_(?P<cond>.+?)(?:_s(?P<seed>\d+))?$")
ANALYZE_DEFAULTS = {"resamples": 2000, "ci": 0.95, "seed": 0, "equivalence_margin": 0.10, "primary_condition": "many",
                    "primary_scoring": "loose", "power": 0.8}
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


def pass_at_k_curves(counts, n: int, k_max: int) -> np.ndarray:
    """(N, K) per-problem pass@k for k = 1..K: row i, column k-1 is pass_at_k(n, counts[i], k).
    Built from a table over the n + 1 possible counts, so each value is computed once."""
    table = np.array([[pass_at_k(n, c, k) for k in range(1, k_max + 1)] for c in range(n + 1)])  # (n+1, K)
    return table[np.asarray(counts, dtype=int)]


def resample_indices(n_problems: int, resamples: int, seed: int) -> np.ndarray:
    """(B, N) problem indices drawn with replacement from a generator seeded with `seed`."""
    return np.random.default_rng(seed).integers(0, n_problems, size=(resamples, n_problems))


def seed_resample_indices(n_seeds: int, resamples: int, seed: int) -> np.ndarray:
    """(B, S) seed positions drawn with replacement. A generator of its own, seeded with
    (seed, 1), so the problem draws are those of resample_indices(.., seed) whatever S is."""
    return np.random.default_rng([seed, 1]).integers(0, n_seeds, size=(resamples, n_seeds))


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

    def eval_name(self, cond: str, seed: int, step: int) -> str:
        return f"eval_{cond}_{step:03d}.json" if self.legacy else f"eval_{cond}_s{seed}_{step:03d}.json"

    def train_dir(self, cond: str, seed: int) -> str:
        return f"train_{cond}" if self.legacy else f"train_{cond}_s{seed}"

    def expected(self) -> list[tuple[str, int, int]]:
        return [(c, s, st) for c in self.conditions for s in self.seeds for st in self.checkpoints]


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
    return Design(conds, list(seeds), sorted(steps), "seeds" not in train, cfg, src.name, an["resamples"], an["ci"],
                  an["seed"], an["equivalence_margin"], an["primary_condition"], an["primary_scoring"], an["power"])


def load_eval(path: Path) -> dict:
    d = read_json(path)
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


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


# ============================================================================= analysis


def _boot_curves(rl: np.ndarray, base: np.ndarray, idx: np.ndarray, sidx: np.ndarray):
    """Point curve (K,), per-seed curves (S, K) and replicate curves (B, K) of Delta pass@k.
    rl: (S, N, K); base: (N, K) or (S, N, K). One k at a time keeps memory at S x B x N."""
    K = rl.shape[-1]
    point, per_seed, reps = np.empty(K), np.empty((rl.shape[0], K)), np.empty((idx.shape[0], K))
    for k in range(K):
        point[k], per_seed[:, k] = crossed_estimate(rl[..., k], base[..., k])
        reps[:, k] = crossed_replicates(rl[..., k], base[..., k], idx, sidx)
    return point, per_seed, reps


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
    if missing and not partial:
        raise InputError(f"{run}: {len(missing)} of {len(design.expected())} expected evaluations are missing "
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
    return {"entries": entries, "families": families, "h3": h3, "power": power, "design": design, "missing": missing,
            "resamples": B, "ci": ci, "seed": bseed, "n": n, "k_max": k_max, "n_problems": N, "alpha_one": a1, "alpha_tost": at,
            "margin": margin, "base": base, "rl": rl, "curves": curves, "primary": prim,
            "primary_sentence": primary_sentence(prim, design, last, k_max, a1, at, margin)}


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


def training_logs(run: Path) -> list[tuple[str, int | None, list[dict]]]:
    """[(condition, seed or None, rows)] for every RUN/train_*/train_log.csv, in the design's
    condition order where the design can be read, then by name; seeds ascending."""
    try:
        order = read_design(run).conditions
    except InputError:
        order = []
    found = []
    for f in run.glob("train_*/train_log.csv"):
        m = TRAIN_RE.match(f.parent.name)
        found.append((m["cond"], int(m["seed"]) if m["seed"] else None, f))
    found.sort(key=lambda t: (order.index(t[0]) if t[0] in order else len(order), t[0], t[1] or 0))
    return [(c, s, _read_csv(f)) for c, s, f in found]


TRAIN_PANELS = [("reward_mean", "mean reward (strict)"), ("zero_signal_frac", "groups with no signal (share)"),
                ("format_rate", "format rate"), ("len_mean", "mean response length (tokens)"),
                ("entropy_mean", "mean token entropy (nats)"), ("kl_mean", "mean k3 KL to the base")]


def training_figure(run: Path, checkpoints: list[int]) -> Path | None:
    """RUN/figures/training.png from RUN/train_*/train_log.csv: one line per condition x seed,
    coloured by condition, the checkpoints as vertical lines. Only step and reward_mean are
    required; each optional column (TRAIN_PANELS) gets a panel when some log has a number in it. Returns None
    (and writes nothing) when there is no log. Safe to call while training or evaluation runs."""
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


def figures(run: Path, res: dict) -> list[Path]:
    plt = _plt()
    out = run / "figures"
    out.mkdir(exist_ok=True)
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
    t = training_figure(run, design.checkpoints)
    if t:
        written.append(t)
    sweep = sorted((run / "lr_sweep").glob("lr_*/train_log.csv")) if (run / "lr_sweep").exists() else []
    if sweep:
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
        written.append(_save(fig, out / "lr_sweep.png"))
        plt.close(fig)
    return written


def _save(fig, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def _read_csv(path: Path) -> list[dict]:
    """A training log as a list of {column: float}. step and reward_mean are required in every
    row and must be numbers; the columns drawn (TRAIN_PANELS) must be numbers or empty (NaN); other
    columns may come and go and are kept only where they are numbers. A short or long row is an
    InputError naming the file."""
    if not path.exists():
        return []
    drawn = {c for c, _ in TRAIN_PANELS}

    def cell(k, v):
        if not v.strip() and k not in ("step", "reward_mean"):
            return float("nan")
        try:
            return float(v)
        except ValueError:
            if k in drawn or k in ("step", "reward_mean"):
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
        raise InputError(f"{path}: malformed training log ({e})")
    if any("step" not in r or "reward_mean" not in r for r in rows):
        raise InputError(f"{path}: malformed training log (no step or reward_mean column)")
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
        L += [f"**PARTIAL REPORT: {len(res['missing'])} of {len(design.expected())} expected evaluations are missing: "
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
    for f in sorted(run.glob("eval_*.json")) + probes + [p for p in (sel, lrc) if p.exists()]:
        p = read_json(f).get("provenance", {})
        L.append(f"| {f.name} | {file_sha256(f)[:12]} | {p.get('stage_hash')} | {(p.get('plan_sha256') or '')[:12]} | {p.get('revision')} | {p.get('time')} |")
    return "\n".join(L) + "\n"


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
    }


def run_analysis(run: Path, resamples: int | None = None, seed: int | None = None, make_figures: bool = True,
                 partial: bool = False) -> dict:
    """Everything is computed before anything is written: an input error leaves no partial output."""
    run = Path(run)
    res = analyze(run, resamples=resamples, seed=seed, partial=partial)
    check_extras(run)  # read every other input now: a bad one must stop us before anything is written
    out = verdicts_json(res, run)
    out["provenance"] = {"inputs": {f.name: file_sha256(f) for f in sorted(run.glob("eval_*.json"))},
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
