"""Calibration arms: conditions whose truth is known by construction, judged by the same code as the
trained models (verdict.compare), so the report can say how often each label is declared when the
answer is known (PLAN.md section 7, "Calibration").

The arms are made from one pool of base samples per test problem: the base's test-set counts (n_base
samples) together with the `pool` evaluation set's (n_pool more samples of the same problems under
the set's own sampling seeds). A re-split draws, per problem and at the count level, a random
n_base of the pool's samples as a pseudo-base and leaves the rest (n_pool samples, count c_rest);
the pseudo-trained models are then, per seed (S of them, n samples each, as the primary condition):
  null         further disjoint slices of the rest: base against fresh base samples
  selection w  Binomial(n, f_w(c_rest / n_pool)): the rest reweighted towards its correct answers
  teaching e   Binomial(n, e + (1 - e) c_rest / n_pool): a share e of answers replaced by gold ones
  mixed w, e   Binomial(n, e + (1 - e) f_w(c_rest / n_pool)): selection plus teaching
Slices without replacement make the null exact at the level of the pool (every k: a random subset of
a random subset is a random subset). The selection arms reweight the rest's own samples, so they can
never reach a problem the rest never solved: a conservative check that selection is not read as
beyond it (the simulations of tests/test_verdict.py check the other side, on rates known exactly).
Two more arms use the study's own trained models: the primary condition's seeds split in two halves
(no difference beyond the level), and a condition trained on written solutions of one stratum, judged
on the held-out test problems of that stratum that the pool set never solved (its ceiling must rise).
numpy and scipy only.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as st

from analysis import stats, verdict
from analysis.reweight import reweighted, selection_null

# what each arm may not be called, and the level its rate is held to
FORBIDDEN = {
    "null": {"selection": 0.025, "beyond selection": 0.025, "degradation": 0.025},
    "selection": {"beyond selection": 0.025, "degradation": 0.025},
    "teaching": {"selection": 0.05, "degradation": 0.025},
    "mixed": {"selection": 0.05, "degradation": 0.025},
}
EXPECTED = {"null": "undecided", "selection": "selection", "teaching": "beyond selection", "mixed": "beyond selection"}


def arm_list(cal) -> list[dict]:
    """The pool arms a config registers (analyze.calibration), in the report's order."""
    out = [{"arm": "null", "kind": "null"}]
    out += [{"arm": f"selection w={w:g}", "kind": "selection", "w": float(w)} for w in cal.selection_w]
    out += [{"arm": f"teaching ε={e:g}", "kind": "teaching", "eps": float(e)} for e in cal.teaching_eps]
    out += [
        {"arm": f"selection w={m.w:g} + teaching ε={m.eps:g}", "kind": "mixed", "w": float(m.w), "eps": float(m.eps)}
        for m in cal.mixed
    ]
    return out


def pseudo_trained(rng: np.random.Generator, rest: np.ndarray, left: int, seeds: int, n: int, arm: dict) -> np.ndarray:
    """(seeds, N) counts of n samples for one arm, from the rest of a re-split (rest (N,) correct
    counts of `left` samples per problem)."""
    if arm["kind"] == "null":
        out = []
        for _ in range(seeds):  # disjoint slices of the rest, without replacement
            c = rng.hypergeometric(rest, left - rest, n)
            out.append(c)
            rest, left = rest - c, left - n
        return np.stack(out)
    q = rest / left
    if arm["kind"] in ("selection", "mixed"):
        q = reweighted(q, arm["w"])
    if arm["kind"] in ("teaching", "mixed"):
        q = arm["eps"] + (1 - arm["eps"]) * q
    return rng.binomial(n, q, size=(seeds, len(rest)))


def clopper_pearson(x: int, m: int, level: float = 0.95) -> list[float]:
    a = (1 - level) / 2
    lo = 0.0 if x == 0 else float(st.beta.ppf(a, x, m - x + 1))
    hi = 1.0 if x == m else float(st.beta.ppf(1 - a, x + 1, m - x))
    return [lo, hi]


def pool_arms(
    base_counts,
    n_base: int,
    pool_counts,
    n_pool: int,
    seeds: int,
    n: int,
    k: int,
    levels: verdict.Levels,
    cal,
    seed: int,
) -> list[dict]:
    """Every pool arm of cal (config.CalibrationCfg: analyze.calibration), cal.resplits re-splits each:
    how often each label (and each test) was declared, with Clopper-Pearson intervals, and whether a
    forbidden label's rate is shown above its level (the lower end of its 95% interval above it: the
    arm fails)."""
    if seeds * n > n_pool:
        raise ValueError(
            f"the pool set has {n_pool} samples per problem; the null arm needs {seeds} seeds x {n} = {seeds * n}"
        )
    pool = np.asarray(base_counts, int) + np.asarray(pool_counts, int)
    size, N, R = n_base + n_pool, len(pool), cal.resplits  # the pool: n_base + n_pool samples per problem
    draws = verdict.Draws(N, cal.resamples, seed)
    arms = arm_list(cal)
    tally = {
        a["arm"]: {
            "labels": dict.fromkeys(verdict.LABELS, 0),
            "tests": dict.fromkeys(("rises", "falls", "above", "below"), 0),
            "pass1_diff": [],
            "vs_null_diff": [],
        }
        for a in arms
    }
    a1 = levels.one_sided
    for r in range(R):
        rng = np.random.default_rng([seed, 7919, r])
        b = rng.hypergeometric(pool, size - pool, n_base)  # the re-split's pseudo-base, shared by its arms
        null = selection_null(b, n_base, k)
        for arm in arms:
            c = pseudo_trained(rng, pool - b, n_pool, seeds, n, arm)
            e = verdict.compare(b, n_base, c, n, k, null, draws, levels)
            t = tally[arm["arm"]]
            t["labels"][e["label"]] += 1
            for name, p in (
                ("rises", e["rises"]["p"]),
                ("falls", e["falls"]["p"]),
                ("above", e["vs_null"]["above"]["p"]),
                ("below", e["vs_null"]["below"]["p"]),
            ):
                t["tests"][name] += p < a1
            t["pass1_diff"].append(e["pass1_diff"])
            t["vs_null_diff"].append(e["vs_null"]["diff"])
    out = []
    for arm in arms:
        t = tally[arm["arm"]]
        rates = {lab: {"count": x, "rate": x / R, "ci": clopper_pearson(x, R)} for lab, x in t["labels"].items()}
        bad = {lab: lv for lab, lv in FORBIDDEN[arm["kind"]].items() if rates[lab]["ci"][0] > lv}
        out.append(
            {
                **arm,
                "truth": arm["kind"],
                "resplits": R,
                "labels": rates,
                "tests": {k2: x / R for k2, x in t["tests"].items()},
                "expected": EXPECTED[arm["kind"]],
                "power": rates[EXPECTED[arm["kind"]]]["rate"],
                "forbidden": FORBIDDEN[arm["kind"]],
                "failed": sorted(bad),
                "passed": not bad,
                "pass1_diff_mean": float(np.mean(t["pass1_diff"])),
                "vs_null_diff_mean": float(np.mean(t["vs_null_diff"])),
            }
        )
    return out


def seed_split_arm(
    rl_counts, n: int, k: int, levels: verdict.Levels, resplits: int, resamples: int, seed: int
) -> dict | None:
    """The primary condition's seeds (S, N counts of n) split at random into two halves, R times: how
    often the two halves are declared different (pass@1, pass@k): the larger of the crossed bootstrap's
    two-sided p (the halves' seeds drawn independently, the problems shared) and Welch's t test on the
    per-seed means below 1 - ci. Both halves are one training recipe, so the rate should be at most
    1 - ci. None with fewer than 2 seeds."""
    rl = np.atleast_2d(np.asarray(rl_counts, int))
    S, N = rl.shape
    if S < 2:
        return None
    r1, rk = verdict.pass_curves(rl, n, k)
    draws = verdict.Draws(N, resamples, seed)
    hits = {"pass1": 0, "passk": 0}
    level = round(1 - levels.ci, 12)
    for r in range(resplits):
        perm = np.random.default_rng([seed, 104729, r]).permutation(S)
        a, b = perm[: S // 2], perm[S // 2 :]
        for name, v in (("pass1", r1), ("passk", rk)):
            reps = draws.means(v[a], stream=1) - draws.means(v[b], stream=2)
            p_boot = min(1.0, 2 * min(stats.p_above(reps), stats.p_below(reps)))
            m = v.mean(axis=1)  # per-seed means: the shared problems cancel in the difference
            p_t = st.ttest_ind(m[a], m[b], equal_var=False).pvalue if min(len(a), len(b)) > 1 else 1.0
            hits[name] += verdict.larger_p(p_boot, float(p_t)) < level
    rates = {name: {"count": x, "rate": x / resplits, "ci": clopper_pearson(x, resplits)} for name, x in hits.items()}
    bad = [name for name, v in rates.items() if v["ci"][0] > level]
    return {
        "arm": "seed split",
        "kind": "seed split",
        "truth": "no difference",
        "resplits": resplits,
        "seeds": S,
        "differences": rates,
        "level": level,
        "failed": bad,
        "passed": not bad,
    }


def taught_arm(
    condition: str,
    stratum: str,
    mask: np.ndarray,
    base_counts,
    n_base: int,
    rl_counts,
    n: int,
    k: int,
    levels: verdict.Levels,
    draws: verdict.Draws,
) -> dict:
    """The condition trained on written solutions of one stratum, on the test problems of that
    stratum the pool set never solved (mask): Delta pass@k (trained - base) must rise (one-sided,
    the larger of the bootstrap and t p-values). Its label by the selection null is reported beside."""
    idx = np.flatnonzero(mask)
    out = {
        "arm": f"taught ({condition})",
        "kind": "taught",
        "condition": condition,
        "stratum": stratum,
        "truth": "teaching",
        "n_problems": int(idx.size),
    }
    if idx.size < 2:
        return {**out, "passed": None, "why": "fewer than 2 test problems of the stratum that the pool never solved"}
    base = np.asarray(base_counts, int)[idx]
    rl = np.atleast_2d(np.asarray(rl_counts, int))[:, idx]
    sub = verdict.Draws(idx.size, draws.resamples, draws.seed)
    e = verdict.compare(base, n_base, rl, n, k, selection_null(base, n_base, k), sub, levels)
    _, bk = verdict.pass_curves(base, n_base, k)
    _, rk = verdict.pass_curves(rl, n, k)
    reps = sub.means(rk) - sub.means(bk)
    rise = verdict.one_sided(reps, rk - bk, "above")
    return {
        **out,
        "seeds": int(rl.shape[0]),
        "passk_base": e["passk_base"],
        "passk_rl": e["passk_rl"],
        "passk_diff": e["passk_diff"],
        "passk_ci": list(stats.percentile_interval(reps, levels.ci)),
        "rises": rise,
        "label": e["label"],
        "reason": e["reason"],
        "passed": bool(rise["p"] < levels.one_sided),
    }
