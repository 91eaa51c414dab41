"""Reward-free baselines beside RL's pass@k, and what the trained models' correct T 1 answers say about Z at T 1
(PLAN.md section 7e, PLAN_CHANGES.md change 71). Descriptive: nothing here decides a label.

- **The base at a sweep of temperatures** (eval sets with models: base): each file's own pass@k curve; the
  temperature with the highest pass@1 and the one with the highest pass@k_max are named.
- **The base's T 1 pool resampled** (the `pool` set, the base's own distribution): per problem, the share of
  correct samples p. Under the outcome reweighting pi ~ pi_base * w^correct a problem is solved with probability
  w p / (w p + 1 - p); w is set so the mean meets RL's own T 1 pass@1 (the `matched` set) and the curve is
  1 - (1 - p_w)^k averaged over problems. Under a power pi ~ pi_base^a the pool's samples are weighed by
  pi_base(y)^(a - 1) (self-normalised, from each response's recorded log-probability, eval.logp_all): p_a is the
  weighed share correct. Plug-in curves from 128-sample pools: a problem the pool never solves stays at 0.
Every curve and count is on the primary scoring (the study's pass@k), the base's and RL's alike.
- **Z at T 1**: the problems the pool never solves. Each distinct
  correct answer the trained models found there has a recorded base log-probability (eval.within_correct); their
  summed probability m is a lower bound on the base's T 1 rate, so odds(p_RL) / odds(m) bounds the tilt a
  reweighting would need to reach RL's rate there from above. A bound at or below the tilt RL's rate needs off Z
  (the same rule, the pool's p) puts the problem within that tilt's reach; a larger bound says nothing.
"""

from __future__ import annotations

import math

import numpy as np

from analysis.inference import counts
from analysis.run_inputs import RunInputs


def curve(p: np.ndarray, k_max: int) -> list[float]:
    """Mean over problems of 1 - (1 - p)^k, k = 1..k_max (p: (N,) per-problem success probabilities)."""
    k = np.arange(1, k_max + 1)
    return [float(x) for x in (1.0 - (1.0 - p[:, None]) ** k[None, :]).mean(0)]


def reweighted(p: np.ndarray, w: float) -> np.ndarray:
    return w * p / (w * p + 1.0 - p)


def tilt_for(p: np.ndarray, target: float) -> float | None:
    """The w >= 1 at which the reweighted mean meets `target` (bisection on log w); None when out of reach."""
    if reweighted(p, 1.0).mean() >= target:
        return 1.0
    lo, hi = 0.0, 30.0  # log w
    if reweighted(p, math.exp(hi)).mean() < target:
        return None
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if reweighted(p, math.exp(mid)).mean() < target else (lo, mid)
    return math.exp(hi)


def powered(logps: list[np.ndarray], correct: list[np.ndarray], a: float) -> np.ndarray:
    """(N,) the weighed share correct of each problem's pool under pi_base^a (weights pi_base^(a - 1))."""
    out = []
    for lp, c in zip(logps, correct):
        w = np.exp((a - 1.0) * (lp - lp.max()))
        out.append(float((w * c).sum() / w.sum()))
    return np.array(out)


def sample_correct(doc: dict, scoring: str) -> list[np.ndarray]:
    """Per problem, (n,) 1 where a sample is correct by `scoring` (from the responses' order in base_support's
    index and strict flags: loose-correct samples are listed there, strict ones flagged)."""
    out = []
    for p in doc["problems"]:
        c = np.zeros(p["n"])
        b = p["base_support"]
        for j, strict in zip(b["index"], b["strict"]):
            c[j] = 1.0 if (scoring == "loose" or strict) else 0.0
        out.append(c)
    return out


def z_at_t1(pool: dict, docs: list[dict], scoring: str, off_tilt: float | None) -> dict:
    """The Z-at-T 1 reading over the pool's unsolved problems, from the trained models' files `docs`."""
    pc = counts(pool, scoring)
    z = np.flatnonzero(pc == 0)
    rows = []
    for i in z:
        found, hits, total = {}, 0, 0
        for d in docs:
            p = d["problems"][i]
            b = p["base_support"]
            total += p["n"]
            for k, (j, strict) in enumerate(zip(b["index"], b["strict"])):
                if scoring == "loose" or strict:
                    hits += 1
                    found[p["responses"][j]] = b["logp_t1"][k]
        if not hits:
            continue
        m = float(sum(math.exp(v) for v in found.values()))
        p_rl = hits / total
        bound = (p_rl / (1 - p_rl)) / (m / (1 - m)) if p_rl < 1 else math.inf
        rows.append({"problem": int(i), "distinct": len(found), "base_mass": m, "rl_rate": p_rl, "tilt_bound": bound})
    bounds = np.array([r["tilt_bound"] for r in rows]) if rows else np.array([])
    return {
        "n_z": int(len(z)),
        "solved_by_rl": len(rows),
        "base_mass_median": float(np.median([r["base_mass"] for r in rows])) if rows else None,
        "tilt_bound_quartiles": [float(x) for x in np.percentile(bounds, [25, 50, 75])] if rows else None,
        "off_z_tilt": off_tilt,
        "within_off_z_tilt": int((bounds <= off_tilt).sum()) if rows and off_tilt else None,
        "problems": rows,
    }


def analyze(inputs: RunInputs, inf) -> dict:
    design, base, sets = inputs.design, inputs.base, inputs.sets
    spec = design.cfg.analyze.baselines
    if spec is None:
        return {"skipped": "not registered (analyze.baselines)"}
    cond, last, K = design.primary_condition, design.checkpoints[-1], inf.k
    sc = design.primary_scoring  # the study's measure of ability (pass@k), as RL's curves are read
    pool = sets[spec.pool].base
    docs, tests = inputs.docs_at(cond, name=spec.matched), inputs.docs_at(cond)
    if pool is None or not docs:
        return {"skipped": f"the {spec.pool} file or the {spec.matched} files of {cond} are missing"}

    every = [base, pool, *docs, *tests, *(sets[n].base for n in spec.sweep if sets[n].base)]
    K = min([K] + [max(int(k) for k in d["pass_at_k"][sc]) for d in every])  # the largest k every file holds

    def own(d):  # a file's own (unbiased) pass@k, k = 1..K
        return [float(d["pass_at_k"][sc][str(k)]) for k in range(1, K + 1)]

    def mean_of(ds):
        return [float(x) for x in np.mean([own(d) for d in ds], axis=0)]

    sweep = sorted(
        [(base["sampling"], own(base), "test")]
        + [(sets[n].base["sampling"], own(sets[n].base), n) for n in spec.sweep if sets[n].base],
        key=lambda t: t[0]["temperature"],
    )
    p = np.array([c / pool["sampling"]["n"] for c in counts(pool, sc)])
    rl_t1 = mean_of(docs)
    w = tilt_for(p, rl_t1[0])
    out = {
        "skipped": None,
        "condition": cond,
        "step": last,
        "scoring": sc,
        "k": list(range(1, K + 1)),
        "sweep": [
            {"set": n, "temperature": s["temperature"], "top_p": s["top_p"], "pass_at_k": c} for s, c, n in sweep
        ],
        "rl": {"test": mean_of(tests) if tests else None, "t1": rl_t1},
        "reweighting": {"w": w, "pass_at_k": curve(reweighted(p, w), K) if w else None},
        "powers": {},
        "z_t1": None,
    }
    best = max(out["sweep"], key=lambda r: r["pass_at_k"][0])
    out["best_pass1_temperature"] = best["temperature"]
    out["best_passk_temperature"] = max(out["sweep"], key=lambda r: r["pass_at_k"][-1])["temperature"]
    if spec.powers and all("logp_t1_all" in q for q in pool["problems"]):
        logps = [np.array(q["logp_t1_all"]) for q in pool["problems"]]
        correct = sample_correct(pool, sc)
        out["powers"] = {f"{a:g}": curve(powered(logps, correct, a), K) for a in spec.powers}
    elif spec.powers:
        out["powers_skipped"] = f"the {spec.pool} file records no logp_t1_all (eval.logp_all)"
    if all("base_support" in q and "logp_t1" in q["base_support"] for d in docs for q in d["problems"]):
        off = counts(pool, sc) > 0
        rl_off = np.mean([counts(d, sc)[off] / d["sampling"]["n"] for d in docs])
        out["z_t1"] = z_at_t1(pool, docs, sc, tilt_for(p[off], float(rl_off)))
    return out
