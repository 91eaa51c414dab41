"""The real-model study's task rule (PLAN_CHANGES.md change 47), read from a folder's probe files.

Among the ladder tasks measured at the rule's size (>= 128 test problems x >= 64 samples, the
evaluation sampler), the candidates are those whose base has loose pass@1 in [0.10, 0.40] and loose
pass@32 <= 0.90; the chosen one is the candidate whose pass@1 is nearest 0.25, a tie going to the
harder task. No candidate: none is chosen (change 47: a new rung is registered before it is measured).

    python bench/task_rule.py results/smollm2_pilot     # prints one JSON object; exit 0 chosen, 1 none

Only base probes are read (probe_<task>.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LADDER = ("arith-2x1", "arith-1x1", "add-2x2", "add-1x1")  # hardest first
PASS1 = (0.10, 0.40)
PASS32_MAX = 0.90
TARGET = 0.25
MIN_PROBLEMS, MIN_SAMPLES = 128, 64


def choose(probes: dict[str, dict]) -> dict:
    """probes: task -> its probe_<task>.json. Returns each task's reading and the chosen task (None if none)."""
    rows = {}
    for task in LADDER:
        d = probes.get(task)
        if d is None:
            rows[task] = {"measured": False}
            continue
        loose = d["pass_at_k"]["loose"]
        big = d["n_problems"] >= MIN_PROBLEMS and d["n"] >= MIN_SAMPLES
        p1, p32 = loose["1"], loose.get("32")
        ok = big and p32 is not None and PASS1[0] <= p1 <= PASS1[1] and p32 <= PASS32_MAX
        rows[task] = {"measured": True, "at_rule_size": big, "pass1": p1, "pass32": p32, "candidate": ok}
    candidates = [t for t in LADDER if rows[t].get("candidate")]  # hardest first, so min() breaks a tie to the harder
    chosen = min(candidates, key=lambda t: abs(rows[t]["pass1"] - TARGET)) if candidates else None
    return {
        "rule": f"loose pass@1 in [{PASS1[0]}, {PASS1[1]}], pass@32 <= {PASS32_MAX}, on >= {MIN_PROBLEMS} x {MIN_SAMPLES}; "
        f"nearest {TARGET}, a tie to the harder",
        "tasks": rows,
        "chosen": chosen,
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python bench/task_rule.py RUN_FOLDER (holding probe_<task>.json)", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    probes = {
        t: json.loads((folder / f"probe_{t}.json").read_text()) for t in LADDER if (folder / f"probe_{t}.json").exists()
    }
    out = choose(probes)
    print(json.dumps(out, indent=1))
    return 0 if out["chosen"] else 1


if __name__ == "__main__":
    sys.exit(main())
