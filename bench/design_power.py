"""How often a design gives the right label, by simulation on a base's own rates: the planning step
of a CPU world (PLAN.md section 9). The truth is the base evaluation's per-problem loose pass rates
(a trial's eval_base.json); a trained model is that base reweighted to a target pass@1 (selection)
or with gold answers mixed in to the same pass@1 (teaching), each seed its own reweighting (log w
shifted by N(0, seed_sd)); counts are drawn at the design's sizes (problems resampled from the base's,
the base sampled n_base times, S seeds x n) and judged by verdict.compare.

    python bench/design_power.py --base /tmp/trials/t6/eval_base.json --target 0.37 --designs 256x4 384x6 384x8

Prints one JSON object: per design and truth, how often each label was given.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis import synthetic as sy, verdict  # noqa: E402
from analysis.reweight import selection_null  # noqa: E402


def labels(
    p_all: np.ndarray,
    truth: str,
    N: int,
    S: int,
    n_base: int,
    n: int,
    k: int,
    target: float,
    seed_sd: float,
    sims: int,
    resamples: int,
    seed: int,
) -> dict:
    out = Counter()
    for i in range(sims):
        rng = np.random.default_rng([seed, i])
        p = p_all[rng.integers(0, len(p_all), N)]  # N problems like the base's
        if truth == "selection":
            rates = sy.selection(p, sy.w_for(p, target), S, seed_sd, rng)
        elif truth == "teaching":
            rates = sy.teaching(p, sy.eps_for(p, target), S, seed_sd, rng)
        else:
            rates = np.tile(p, (S, 1))
        base, rl = sy.counts(rng, p, n_base), sy.counts(rng, rates, n)
        e = verdict.compare(
            base, n_base, rl, n, k, selection_null(base, n_base, k), verdict.Draws(N, resamples, i), verdict.Levels()
        )
        out[e["label"]] += 1
        out["pass@1 rises"] += e["rises"]["p"] < 0.025
    return {k2: v / sims for k2, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Label rates of candidate designs on a base's own rates.")
    ap.add_argument("--base", required=True, help="an eval_base.json (its per-problem loose counts are the truth)")
    ap.add_argument("--target", type=float, required=True, help="the trained model's loose pass@1 to simulate")
    ap.add_argument(
        "--designs", nargs="+", default=["256x4", "384x6", "384x8", "384x12"], help="NxS: problems x primary seeds"
    )
    ap.add_argument("--n-base", type=int, default=256)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--seed-sd", type=float, default=0.2, help="SD of each seed's log w (and logit eps)")
    ap.add_argument("--sims", type=int, default=40)
    ap.add_argument("--resamples", type=int, default=1000)
    a = ap.parse_args(argv)
    d = json.loads(Path(a.base).read_text())
    p = np.array([q["correct_loose"] / q["n"] for q in d["problems"]])
    out = {
        "base": a.base,
        "base_pass1": float(p.mean()),
        "target": a.target,
        "seed_sd": a.seed_sd,
        "sims": a.sims,
        "designs": {},
    }
    for spec in a.designs:
        N, S = (int(x) for x in spec.split("x"))
        out["designs"][spec] = {
            t: labels(p, t, N, S, a.n_base, a.n, a.k, a.target, a.seed_sd, a.sims, a.resamples, seed=17)
            for t in ("selection", "teaching", "null")
        }
        print(json.dumps({spec: out["designs"][spec]}), flush=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
