"""The learning-rate choice's noise (PLAN_CHANGES.md change 44 (e)): from a run whose conditions train one recipe
at several rates (`many`, `many-lr3e-4`, `many-lr3e-3` in configs/tiny_v5.yaml), each seed's held-out dev
loose pass@1 (train_eval.csv: 64 dev problems x 8 samples) at each dev step, and the rate the dev rule
(the highest dev pass@1, ties to the smaller rate) would pick on that seed at that step.

    python bench/lr_noise.py --run results/tiny_v5 --step 25

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path


def dev_rates(run: Path, step: int) -> dict[float, dict[int, float]]:
    """{rate: {seed: dev loose pass@1 at `step`}} over the run's `many`-recipe conditions."""
    manifest = json.loads((run / "manifest.json").read_text())
    conds, lr = manifest["config"]["conditions"], manifest["config"]["train"]["lr"]
    out: dict[float, dict[int, float]] = {}
    for name, c in conds.items():
        if not re.fullmatch(r"many(-lr.*)?", name):
            continue
        rate = (
            c.get("lr") or lr or json.loads((run / "lr_choice.json").read_text())["chosen"]
        )  # a fixed rate, else the sweep's
        for d in sorted(run.glob(f"train_{name}_s*")):
            with open(d / "train_eval.csv") as f:
                row = next((r for r in csv.DictReader(f) if int(r["step"]) == step), None)
            if row is not None:
                out.setdefault(float(rate), {})[int(d.name.rsplit("_s", 1)[1])] = float(row["loose_pass1"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--step", type=int, nargs="+", default=[25, 100])
    a = ap.parse_args(argv)
    result = {}
    for step in a.step:
        rates = dev_rates(Path(a.run), step)
        seeds = sorted(set.intersection(*(set(v) for v in rates.values()))) if rates else []
        picks = {s: min(r for r in rates if rates[r][s] == max(rates[x][s] for x in rates)) for s in seeds}
        result[str(step)] = {
            "dev_loose_pass1": {str(r): v for r, v in sorted(rates.items())},
            "mean": {str(r): sum(v.values()) / len(v) for r, v in sorted(rates.items())},
            "rule_picks_per_seed": {str(s): picks[s] for s in seeds},
        }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
