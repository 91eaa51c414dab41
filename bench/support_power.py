"""The support test's power table (PLAN_CHANGES.md change 42): how often each answer is given on synthetic
worlds whose truth is built in, at the CPU world's design and the Qwen design, for each w*. The worlds
are tests/test_support.py's (a Beta of base rates matched to a pass@1 / pass@32, counts at the design's
sizes); this runs more data sets than the tests do.

    python bench/support_power.py --sims 40 --w-star 14 94
    python bench/support_power.py --sims 40 --w-star 94 --designs cpu --old-rule   # with the old rule's labels

Prints one JSON object: per w*, design and truth, how often each answer was given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_support as worlds  # noqa: E402

from orchestration import config  # noqa: E402

KINDS = (*worlds.SELECTING, *worlds.TEACHING, "null")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sims", type=int, default=40)
    p.add_argument("--w-star", type=float, nargs="+", default=[14.0, 94.0])
    p.add_argument("--seed", type=int, default=3)
    p.add_argument(
        "--old-rule", action="store_true", help="also count the old one-label rule's labels (slower: a bootstrap each)"
    )
    p.add_argument("--designs", nargs="+", default=["cpu", "qwen"], choices=["cpu", "qwen"])
    a = p.parse_args(argv)
    cfg = config.load("configs/qwen05b.yaml")
    qwen = {
        "N": cfg.task.n_test,
        "S": len(config.seeds_of(cfg, "many")),
        "n_base": cfg.eval.n_base,
        "n_pool": cfg.eval_sets[cfg.analyze.calibration.pool_set].n,
        "world": (0.25, 0.84),
        "target": (0.66, 0.81),
    }
    designs = [(name, d) for name, d in (("cpu", worlds.CPU), ("qwen", qwen)) if name in a.designs]
    out = {
        str(w): {
            name: {
                kind: dict(worlds._answers(kind, a.sims, d, seed=a.seed, w_star=w, old_rule=a.old_rule))
                for kind in KINDS
            }
            for name, d in designs
        }
        for w in a.w_star
    }
    print(json.dumps({"sims": a.sims, "seed": a.seed, "table": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
