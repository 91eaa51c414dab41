"""Is a trial base admissible as a CPU world with a skill to select? PLAN_CHANGES.md change 33's rules R1-R6 (R2 as
change 39 replaced it),
read from a trial folder's base evaluation (eval_base.json, the test set at >= 128 samples per
problem) and its select stage (selection.json: 128 train problems x 16 samples at T 1.0, strict).

    python bench/world_admission.py --run /tmp/trials/t1      # prints one JSON object; exit 0 admitted, 1 not

Only base evaluations are read: no trained model enters any rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import countdown  # noqa: E402
from analysis.reweight import reweighted  # noqa: E402
from analysis.stats import per_problem  # noqa: E402


def admission(base: dict, selection: dict) -> dict:
    """The six rules with their measured values (PLAN_CHANGES.md change 33)."""
    n = base["sampling"]["n"]
    probs = base["problems"]
    p = np.array([q["correct_loose"] / n for q in probs])
    loose = np.array([q["correct_loose"] for q in probs])
    top = [
        Counter(countdown.final_answer(r) for r in q["responses"]).most_common(1)[0][0] == q["answer"] for q in probs
    ]
    strict = np.array(list(selection["pass_rates"].values()))
    g = selection["sampling"].get("n", 16)
    signal = float(np.mean(1 - strict**8 - (1 - strict) ** 8))
    w2 = float(reweighted(p, 2.0).mean() - p.mean())
    strata = Counter(countdown.stratum(countdown.Problem.from_row(q, base["task"])) for q in probs)
    values = {
        "R1 loose pass@1 in [0.12, 0.35]": (float(p.mean()), 0.12 <= p.mean() <= 0.35),
        # R2 as change 39 replaced it (the first version, [0.55, 0.80], is printed beside: no trial base met it)
        "R2 loose pass@32 <= 0.90": (float(per_problem(loose, n, 32).mean()), per_problem(loose, n, 32).mean() <= 0.90),
        "R3a share of problems with a rate in [0.05, 0.95] >= 0.40": (
            float(np.mean((p >= 0.05) & (p <= 0.95))),
            np.mean((p >= 0.05) & (p <= 0.95)) >= 0.40,
        ),
        "R3b share with a rate >= 0.5 >= 0.15": (float(np.mean(p >= 0.5)), np.mean(p >= 0.5) >= 0.15),
        "R4 share where the correct answer is the most frequent >= 0.20": (float(np.mean(top)), np.mean(top) >= 0.20),
        "R5 step-0 groups of 8 with reward variance >= 0.15": (signal, signal >= 0.15),
        "R6 selection arm at w = 2 raises pass@1 by >= 0.05": (w2, w2 >= 0.05),
    }
    return {
        "rules": {k: {"value": round(v, 4), "met": bool(ok)} for k, (v, ok) in values.items()},
        "admitted": all(ok for _, ok in values.values()),
        "R2 as first registered, in [0.55, 0.80]": bool(0.55 <= per_problem(loose, n, 32).mean() <= 0.80),
        "n_problems": len(probs),
        "n": n,
        "select_samples": g,
        "strata": dict(sorted(strata.items())),
        "strict_pass1": float(np.mean([q["correct_strict"] / n for q in probs])),
        "format_rate": base["format_rate"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="PLAN_CHANGES.md change 33's admission rules on a trial base.")
    ap.add_argument("--run", required=True, help="the trial folder (eval_base.json and selection.json)")
    a = ap.parse_args(argv)
    run = Path(a.run)
    try:
        base, sel = (json.loads((run / f).read_text()) for f in ("eval_base.json", "selection.json"))
    except (OSError, json.JSONDecodeError) as e:
        print(
            f"world_admission.py: {run}: {e}; run the trial's base evaluation and select stage first", file=sys.stderr
        )
        return 2
    out = admission(base, sel)
    print(json.dumps(out, indent=1))
    return 0 if out["admitted"] else 1


if __name__ == "__main__":
    sys.exit(main())
