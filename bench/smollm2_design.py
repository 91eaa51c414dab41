"""The real-model study's design (PLAN_CHANGES.md changes 49-50): each candidate design's power on synthetic
worlds built on SmolLM2-135M's measured base (results/smollm2_pilot: add-2x2, loose pass@1 0.103, pass@32
0.507 on 128 x 64) and the training pilot's trained target, beside its CPU cost from the pilot's measured
rates. The worlds are tests/test_support.py's (the support test's calibration arms); each data set is
judged on both axes (sharpening / support).

    python bench/smollm2_design.py --sims 40 --designs 64x4x64x64 96x4x64x96 --target 0.05 0.15

A design is NxSxn_basexn_pool: test problems, `many` seeds, base samples per problem, pool samples per
problem at each sampler (the trained models: 32 per problem and seed). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_support as worlds  # noqa: E402

KINDS = ("sharpened", "tilt-at-w*", "hard-tilt", "sharpen+teach-hard", "gold", "null")


def job_minutes(N: int, S: int, n_base: int, n_pool: int, steps: int, cost: dict) -> dict:
    """CPU minutes (one job, one thread) per part of the design at the pilot's measured rates."""
    return {
        "base": N * n_base / cost["base_per_s"] / 60,
        "pools": N * n_pool * (1 / cost["base_per_s"] + 1 / cost["train_per_s"]) / 60,
        "train": S * steps * cost["step_s"] / 60,
        "eval": S * N * 32 / cost["trained_per_s"] / 60,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sims", type=int, default=40)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--w-star", type=float, default=94.0)
    p.add_argument("--world", type=float, nargs=2, default=[0.103, 0.507], help="the base's loose pass@1, pass@32")
    p.add_argument(
        "--target", type=float, nargs=2, required=True, help="the trained pass@1, pass@32 of the sharpened truth"
    )
    p.add_argument(
        "--gold-pass1", type=float, default=0.15, help="the gold mixture's trained pass@1 (above the base's)"
    )
    p.add_argument("--designs", nargs="+", required=True, help="NxSxn_basexn_pool")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument(
        "--cost",
        type=json.loads,
        default={"base_per_s": 2.2, "train_per_s": 1.8, "trained_per_s": 4.0, "step_s": 26.0},
        help="samples/s per job: base at the eval / training sampler, trained models; seconds per training step",
    )
    a = p.parse_args(argv)
    out = {
        "sims": a.sims,
        "seed": a.seed,
        "w_star": a.w_star,
        "world": a.world,
        "target": a.target,
        "cost": a.cost,
        "designs": {},
    }
    for spec in a.designs:
        N, S, n_base, n_pool = (int(x) for x in spec.split("x"))
        d = {"N": N, "S": S, "n_base": n_base, "n_pool": n_pool, "world": tuple(a.world), "target": tuple(a.target)}
        minutes = job_minutes(N, S, n_base, n_pool, a.steps, a.cost)
        answers = {}
        for kind in KINDS:
            world = d if kind != "gold" else {**d, "target": (a.gold_pass1, 1.0)}  # gold: a pass@1 above the base's
            answers[kind] = dict(worlds._answers(kind, a.sims, world, seed=a.seed, axes=True, w_star=a.w_star))
        out["designs"][spec] = {
            "job_minutes": {k: round(v, 1) for k, v in minutes.items()},
            "wall_minutes_2_jobs": round(sum(minutes.values()) / 2, 1),
            "answers": answers,
        }
        print(json.dumps({spec: out["designs"][spec]}), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
