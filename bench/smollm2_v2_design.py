"""The second real-model study's power and cost (issue 52): the variance components of Delta pass@1 measured
on results/smollm2_study (every `many` seed against the base, per test problem), the power of the
registered one-sided test of "pass@1 rises" for designs of N problems x S seeds at the seed variance's
point estimate and at its 80% upper limit, and each design's CPU hours from measured rates.

    python bench/smollm2_v2_design.py --effect 0.05 0.1 0.2 --seeds 4 8 12 16 24 32 --problems 128 256 \
        --step-s 50 --steps 30 [--json OUT.json]

Power is analysis/power.py's closed form (noncentral t at the Satterthwaite df of design_se, one-sided
alpha 0.025). Costs: one job runs one thread; the rates are read from smollm2_study's own evaluation files
(samples per second: the base at the evaluation sampler, the base at T 1, the trained models), the
training step's seconds are given (--step-s: the pilot's measured median). Prints Markdown; reads only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis import power  # noqa: E402

ALPHA = 0.025  # the registered one-sided level (PLAN.md section 7)


def rates(d: dict) -> np.ndarray:
    return np.array([p["correct_loose"] / p["n"] for p in d["problems"]])


def components(study: Path, seeds: list[int], step: int = 30) -> dict:
    """variance_components of d[s, n] = loose rate of `many` seed s at `step` - the base's, on each test problem."""
    base = json.loads((study / "eval_base.json").read_text())
    rows = [rates(json.loads((study / f"eval_many_s{s}_{step:03d}.json").read_text())) - rates(base) for s in seeds]
    return power.variance_components(np.array(rows))


def samples_per_s(f: Path) -> float:
    d = json.loads(f.read_text())
    return sum(p["n"] for p in d["problems"]) / d["seconds"]


def cost_hours(N: int, S: int, a) -> dict:
    """Job-hours of a design: the base at the evaluation sampler (n_base) and at T 1 (n_base_t1), per seed
    training (steps x step_s), the evaluation (n per problem) and the matched T 1 evaluation (n)."""
    base = N * a.n_base / a.rate_base / 3600
    base_t1 = N * a.n_base_t1 / a.rate_base_t1 / 3600
    per_seed = (a.steps * a.step_s + 2 * N * a.n / a.rate_trained) / 3600
    total = base + base_t1 + S * per_seed
    return {
        "base_job_h": round(base, 2),
        "base_t1_job_h": round(base_t1, 2),
        "per_seed_job_h": round(per_seed, 2),
        "total_job_h": round(total, 1),
        "wall_h_2_jobs": round(max(total / 2, base), 1),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study", type=Path, default=ROOT / "results" / "smollm2_study")
    p.add_argument("--study-seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--effect", type=float, nargs="+", required=True, help="true Delta pass@1 values to power for")
    p.add_argument("--seeds", type=int, nargs="+", default=[4, 8, 12, 16, 24, 32])
    p.add_argument("--problems", type=int, nargs="+", default=[128, 256])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--step-s", type=float, required=True, help="seconds per training step (the pilot's median)")
    p.add_argument(
        "--n", type=int, default=32, help="samples per problem per trained model (and in the matched T 1 set)"
    )
    p.add_argument("--n-base", type=int, default=256)
    p.add_argument(
        "--n-base-t1", type=int, default=64, help="the base's samples per problem at T 1 (the matched comparison)"
    )
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    a.rate_base = samples_per_s(a.study / "eval_base.json")
    a.rate_base_t1 = samples_per_s(a.study / "evalsets" / "pool-train" / "eval_base.json")
    a.rate_trained = float(np.mean([samples_per_s(a.study / f"eval_many_s{s}_030.json") for s in a.study_seeds]))
    vc = components(a.study, a.study_seeds)
    upper = power.seed_var_upper(vc["V_B"], vc["seed_df"])
    out = {
        "components": {k: vc[k] for k in ("delta", "V_A", "V_B", "V_R", "seed_df")},
        "V_B_upper80": upper,
        "rates": {"base": a.rate_base, "base_t1": a.rate_base_t1, "trained": a.rate_trained},
        "designs": [],
    }
    print(
        f"components (smollm2_study, many seeds {a.study_seeds} vs the base): Delta {vc['delta']:.3f}, V_A {vc['V_A']:.4f}, "
        f"V_B {vc['V_B']:.4f} (80% upper {upper:.4f}, {vc['seed_df']} df), V_R {vc['V_R']:.4f}"
    )
    print(
        f"rates (samples/s, one thread, smollm2_study's files): base {a.rate_base:.2f}, base T 1 {a.rate_base_t1:.2f}, "
        f"trained {a.rate_trained:.2f}; step {a.step_s:g} s x {a.steps}"
    )
    print("\n| N | S | " + " | ".join(f"power Δ {e:g} (V_B / upper)" for e in a.effect) + " | job-h | wall h, 2 jobs |")
    print("|---|---|" + "---|" * (len(a.effect) + 2))
    for N in a.problems:
        for S in a.seeds:
            row = {"N": N, "S": S, "power": {}, **cost_hours(N, S, a)}
            cells = []
            for e in a.effect:
                pw = [
                    power.power_one_sided(e, *power.design_se(vc["V_A"], vb, vc["V_R"], N, S), ALPHA)
                    for vb in (vc["V_B"], upper)
                ]
                row["power"][f"{e:g}"] = pw
                cells.append(f"{pw[0]:.2f} / {pw[1]:.2f}")
            out["designs"].append(row)
            print(f"| {N} | {S} | " + " | ".join(cells) + f" | {row['total_job_h']} | {row['wall_h_2_jobs']} |")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
