"""smollm2_v3's design at the training sampler (PLAN_CHANGES.md change 75): the power of section 7e's
within-correct answer for designs of S seeds x N problems x n `matched` samples, from the measurement of the v3
pilot's chosen rate (results/smollm2_v3_measure), and each design's hours on the 2-core machine.

    python bench/smollm2_v3_design.py [--json OUT.json]

The exponent alpha (analysis/within_correct.py) is a ratio of pooled cell moments; linearised at the pooled
moments, each (seed, problem) cell contributes z = grad(alpha) . moments (the gradient is exact to first order,
and its sum over cells is 0 as alpha is homogeneous of degree 0 in them), so a design's SE is that of the mean of
z under section 7's crossed model (analysis/power.py), the seed variance at its 80% upper limit (change 62).
n 32 is read from the first 32 samples of every cell (the draws are keyed per sample: an n 32 evaluation draws
exactly these), n 64 as measured, larger n by the residual scaled by 64 / n (an extrapolation, labelled).
The planned truth and the target are change 75's: delta = 0.7 x the smaller seed deviation |alpha_s - 1| with the
seeds' common sign (else 0); directional power at alpha = 1 + delta when |delta| > the margin, else reweighting
power (alpha's TOST at 1 + delta times D's at D = 0, D's SE from a problem bootstrap scaled by sqrt(64 / N)).
Normal approximations, one-sided 0.025. Costs: the measurement's own seconds per sample (T 1), smollm2_v2's base
at the evaluation sampler, the v3 pilot's training jobs; all beside other work on the cores. Reads only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import optimize, special, stats as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis import power, training_sampler, within_correct  # noqa: E402

MEASURE = ROOT / "results" / "smollm2_v3_measure"
SEEDS = (102, 103)
Z = st.norm.ppf(0.975)  # one-sided 0.025
MARGIN, GAP_MARGIN, TOLERANCE = 0.1, 0.02, 1e-4  # section 7e's registered margins; change 57's tolerance
SHRINK, TARGET, HOURS, POOL_HOURS = 0.7, 0.8, 12.0, 3.0  # change 75


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def first(doc: dict, n: int) -> dict:
    """doc's correct-response records restricted to samples 0..n-1 of every problem (what an n-sample evaluation
    draws, each sample from its own keyed stream)."""
    problems = []
    for p in doc["problems"]:
        b = p["base_support"]
        keep = [k for k, i in enumerate(b["index"]) if i < n]
        problems.append({**p, "base_support": {key: [v[k] for k in keep] for key, v in b.items()}})
    return {**doc, "problems": problems}


def exponent_parts(docs: list[dict]) -> dict:
    """alpha pooled and per seed, and each cell's linearised contribution z (S, N)."""
    r = training_sampler.responses(docs, "loose", TOLERANCE)
    S, N = len(docs), len(docs[0]["problems"])
    mom = within_correct.cell_moments(r, S, N)
    wl = within_correct.uses_length(mom)
    mean = mom.sum(axis=(0, 1)) / (S * N)
    grad = np.zeros(6)
    for j in range(5):  # central differences, relative step
        h = 1e-6 * max(abs(mean[j]), 1e-12)
        up, down = mean.copy(), mean.copy()
        up[j], down[j] = mean[j] + h, mean[j] - h
        grad[j] = (within_correct.exponent_from(up, wl) - within_correct.exponent_from(down, wl)) / (2 * h)
    z = mom @ grad
    per_seed = [float(within_correct.exponent_from(mom[s].sum(0), wl)) for s in range(S)]
    return {
        "alpha": float(within_correct.exponent_from(mom.sum(axis=(0, 1)), wl)),
        "alpha_seeds": per_seed,
        "with_length": wl,
        "cells": int(mom[..., 5].sum()),
        "responses": len(r.seed),
        "z": z,
    }


def gap_se(docs: list[dict], pool: dict, B: int = 2000) -> dict:
    """D on the measurement (seeds pooled) and its SE over a bootstrap of problems."""
    t = training_sampler.responses(docs, "loose", TOLERANCE)
    b = training_sampler.responses([pool], "loose", TOLERANCE)
    N = len(pool["problems"])
    tc, to = (a.sum(0) for a in within_correct.outside_counts(t, len(docs), N))
    bc, bo = (a[0] for a in within_correct.outside_counts(b, 1, N))
    idx = np.random.default_rng([75, 1]).integers(0, N, size=(B, N))
    with np.errstate(invalid="ignore"):
        reps = within_correct.weighted_gap(to[idx], tc[idx], bo[idx], bc[idx])
    both = (tc > 0) & (bc > 0)
    return {
        "gap": float(within_correct.weighted_gap(to, tc, bo, bc)),
        "se": float(np.nanstd(reps, ddof=1)),
        "problems_both": int(both.sum()),
        "trained_outside_share": float(to[both].sum() / max(tc[both].sum(), 1)),
        "base_outside_share": float(bo[both].sum() / max(bc[both].sum(), 1)),
    }


def planned_delta(alpha_seeds: list[float]) -> float:
    """Change 75: 0.7 x the smaller seed deviation from 1, with the seeds' common sign; none without one."""
    e = np.array(alpha_seeds) - 1
    if not (np.all(e > 0) or np.all(e < 0)):
        return 0.0
    return float(SHRINK * np.sign(e[0]) * np.abs(e).min())


def tost(delta: float, se: float, margin: float) -> float:
    return float(max(st.norm.cdf((margin - delta) / se - Z) + st.norm.cdf((margin + delta) / se - Z) - 1, 0.0))


def power_of(delta: float, se_alpha: float, se_gap: float) -> float:
    if abs(delta) > MARGIN:
        return float(st.norm.cdf((abs(delta) - MARGIN) / se_alpha - Z))
    return tost(delta, se_alpha, MARGIN) * tost(0.0, se_gap, GAP_MARGIN)


def pool_share(counts: np.ndarray, n: int) -> tuple[float, float, callable]:
    """Beta-binomial fit (maximum likelihood) to the base's correct counts out of n per problem; returns (a, b,
    share(m)): the expected share of problems holding at least one correct answer among m draws."""

    def nll(log_ab):
        a, b = np.exp(log_ab)
        return -st.betabinom.logpmf(counts, n, a, b).sum()

    a, b = np.exp(optimize.minimize(nll, np.log([0.5, 20.0]), method="Nelder-Mead").x)
    return a, b, lambda m: float(1 - np.exp(special.betaln(a, b + m) - special.betaln(a, b)))


def rate(doc: dict) -> float:
    """Samples per second of one evaluation file."""
    return sum(p["n"] for p in doc["problems"]) / doc["seconds"]


def costs(N: int, S: int, n: int, m: int, r: dict) -> dict:
    """Job-hours: the base at the evaluation sampler (n_base 64) and its T 1 pool (m), per seed the training job,
    the test evaluation (32) and `matched` (n); wall hours at two jobs."""
    base = N * 64 / r["eval"] + N * m / r["pool"]
    seed = r["train_s"] + N * 32 / r["eval"] + N * n / r["matched"]
    total = (base + S * seed) / 3600
    return {"job_h": round(total, 1), "wall_h": round(total / 2, 1), "seed_job_h": round(seed / 3600, 2)}


def check_linearisation(docs: list[dict]) -> dict:
    """The crossed bootstrap's SE of alpha on the measurement itself (analysis/within_correct.exponent's
    replicates) beside the linearised one at S 2 x N 64: the linearisation's check."""
    from analysis import verdict

    r = training_sampler.responses(docs, "loose", TOLERANCE)
    S, N = len(docs), len(docs[0]["problems"])
    mom = within_correct.cell_moments(r, S, N)
    wl = within_correct.uses_length(mom)
    draws = verdict.Draws(N, 4000, 75)
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = within_correct.exponent_from(draws.means(mom), wl)
    lin = draws.means(exponent_parts(docs)["z"])  # alpha's replicates to first order, less alpha
    return {"bootstrap_se": float(np.nanstd(reps, ddof=1)), "linearised_se": float(np.std(lin, ddof=1))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, default=MEASURE)
    p.add_argument("--seeds", type=int, nargs="+", default=[4, 6, 8, 12, 16])
    p.add_argument("--problems", type=int, nargs="+", default=[128, 192, 256])
    p.add_argument("--n", type=int, nargs="+", default=[32, 64, 128])
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    matched = [load(a.run / "evalsets" / "matched" / f"eval_lr3e-5_s{s}_030.json") for s in SEEDS]
    pool = load(a.run / "evalsets" / "pool-train" / "eval_base.json")
    pilot = load(ROOT / "results" / "smollm2_v3_pilot" / "manifest.json")["jobs"]
    v2_base = load(ROOT / "results" / "smollm2_v2" / "eval_base.json")
    r = {
        "train_s": float(np.mean([pilot[f"train lr3e-5 s{s}"]["seconds"] for s in SEEDS])),
        "eval": rate(v2_base),
        "matched": float(np.mean([rate(d) for d in matched])),
        "pool": rate(pool),
    }
    counts = np.array([q["correct_loose"] for q in pool["problems"]])
    fa, fb, share = pool_share(counts, pool["problems"][0]["n"])
    pools = {m: share(m) for m in (64, 128, 256, 512, 1024, 2048, 4096)}
    out = {"rates": r, "pool_fit": {"a": fa, "b": fb, "share": pools, "zero_of_128": int((counts == 0).sum())}}
    print(f"rates (samples/s, one thread, beside other work): {json.dumps({k: round(v, 2) for k, v in r.items()})}")
    print(
        f"base pool at T 1: pass@1 {counts.sum() / (128 * len(counts)):.4f}, {(counts == 0).sum()} of {len(counts)} "
        f"problems without a correct answer in 128; beta-binomial a {fa:.3f} b {fb:.1f}; share solved at m: "
        + ", ".join(f"{m} {s:.2f}" for m, s in pools.items())
    )
    out["check"] = check_linearisation(matched)
    print(f"linearisation check (S 2 x N 64, n 64): {out['check']}")
    out["n"] = {}
    for n in a.n:
        measured = min(n, 64)
        parts = exponent_parts([first(d, measured) for d in matched])
        vc = power.variance_components(parts["z"])
        V_R = vc["V_R"] * measured / n
        V_B = power.seed_var_upper(vc["V_B"], vc["seed_df"])
        g = gap_se([first(d, measured) for d in matched], pool)
        delta = planned_delta(parts["alpha_seeds"])
        entry = {k: parts[k] for k in ("alpha", "alpha_seeds", "with_length", "cells", "responses")}
        entry |= {"extrapolated": n > 64, "V_A": vc["V_A"], "V_B": vc["V_B"], "V_B_upper80": V_B, "V_R": V_R}
        entry |= {"gap": g, "planned_delta": delta, "designs": []}
        print(
            f"\nn {n}{' (extrapolated from 64)' if n > 64 else ''}: alpha {parts['alpha']:.3f} (seeds "
            + ", ".join(f"{x:.3f}" for x in parts["alpha_seeds"])
            + f"), {parts['cells']} informative cells, {parts['responses']} correct responses; components V_A "
            f"{vc['V_A']:.4g}, V_B {vc['V_B']:.4g} (80% upper {V_B:.4g}), V_R {V_R:.4g}; D {g['gap']:+.3f} "
            f"(SE {g['se']:.3f} at N 64, {g['problems_both']} problems hold both); planned delta {delta:+.3f}"
        )
        print("| N | S | SE alpha | SE D | power | job-h | wall h, 2 jobs |\n|---|---|---|---|---|---|---|")
        for N in a.problems:
            for S in a.seeds:
                se = float(np.sqrt(vc["V_A"] / N + V_B / S + V_R / (N * S)))
                se_gap = g["se"] * np.sqrt(64 / N)
                row = {"N": N, "S": S, "se_alpha": se, "se_gap": se_gap, "power": power_of(delta, se, se_gap)}
                row |= costs(N, S, n, 128, r)
                entry["designs"].append(row)
                print(
                    f"| {N} | {S} | {se:.3f} | {se_gap:.3f} | {row['power']:.2f} | {row['job_h']} | {row['wall_h']} |"
                )
        out["n"][n] = entry
    if a.json:
        a.json.write_text(json.dumps(out, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
