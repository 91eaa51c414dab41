"""The recipe pilot's reading (PLAN_CHANGES.md change 61): per training run the dev checks, the training signal
and the costs; the collapse rate over the runs (change 59's rule); and the rule's choice of rate.

    python bench/smollm2_v2_pilot.py RUN [--log PIPELINE_LOG] [--json OUT.json]

RUN is the pilot's run folder (configs/smollm2_v2_pilot.yaml). --log is the pipeline's terminal output;
with it each job's wall seconds are read, and the seconds a dev check took are what the job spent
outside its training steps, shared over its dev checks. Prints a Markdown summary; --json writes every
number. Reads only; writes nothing into RUN.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis import collapse  # noqa: E402
from analysis.run_files import DEV_COLUMNS, DEV_REQUIRED, read_csv  # noqa: E402
from orchestration import config  # noqa: E402

TIE = 1 / 256  # change 61: dev means within this read as tied (one sample in 32 x 8)
JOB_DONE = re.compile(r"done\s+train (\S+) s(\d+) \(([\d,.]+) s\)")  # the pipeline's "done  train lr1e-4 s100 (3258 s)"


def mean(xs):
    xs = [x for x in xs if x == x]  # NaN out
    return sum(xs) / len(xs) if xs else float("nan")


def thirds(rows: list[dict], key: str) -> list[float]:
    """The column's mean over the first, middle and last third of the steps."""
    n = len(rows)
    cuts = [0, n // 3, 2 * n // 3, n]
    return [round(mean([r[key] for r in rows[cuts[i] : cuts[i + 1]]]), 4) for i in range(3)]


def read_run(folder: Path, cfg: config.Config, wall: float | None) -> dict:
    """One training run's reading from its train_log.csv and train_eval.csv."""
    log = read_csv(folder / "train_log.csv")
    dev = read_csv(folder / "train_eval.csv", required=DEV_REQUIRED, drawn=DEV_COLUMNS)
    spec = cfg.analyze.collapse
    step_s = [r["sec_sampling"] + r["sec_fwd_bwd"] for r in log]
    out = {
        "steps": len(log),
        "done": (folder / "done.json").exists(),
        "dev": {int(r["step"]): {"loose_pass1": r["loose_pass1"], "loose_passn": r["loose_passn"]} for r in dev},
        "reward_thirds": thirds(log, "reward_mean"),
        "zero_signal_thirds": thirds(log, "zero_signal_frac"),
        "skipped_steps": sum(r["updated"] == 0 for r in log),
        "no_signal_steps": sum(r["no_signal"] >= 1 for r in log),
        "truncated_thirds": thirds(log, "truncated_frac"),
        "len_thirds": thirds(log, "len_mean"),
        "entropy_thirds": thirds(log, "entropy_mean"),
        "kl": {int(r["step"]): round(r["kl_mean"], 6) for r in log if r["kl_mean"] == r["kl_mean"]},
        "collapse": collapse.collapsed(log, spec.late_from, spec.share),
        "sec_sampling_median": round(statistics.median(r["sec_sampling"] for r in log), 2) if log else None,
        "sec_fwd_bwd_median": round(statistics.median(r["sec_fwd_bwd"] for r in log), 2) if log else None,
        "sec_steps_total": round(sum(step_s), 1),
        "wall_s": wall,
    }
    if wall is not None and dev:
        out["sec_per_dev_check"] = round((wall - sum(step_s)) / len(dev), 1)
    return out


def choose(runs: dict, cfg: config.Config) -> dict:
    """Change 61's rule: the higher two-seed mean dev loose pass@1 at the last step; ties (within TIE) to the
    smaller rate; a rate with a collapsed seed loses to one without; no choice when no rate's mean rises
    above its step-0 mean."""
    last = cfg.train.steps
    by_rate = {}
    for name, cond in cfg.conditions.items():
        mine = [r for (c, _), r in runs.items() if c == name]
        at = [r["dev"].get(last, {}).get("loose_pass1", float("nan")) for r in mine]
        at0 = [r["dev"].get(0, {}).get("loose_pass1", float("nan")) for r in mine]
        by_rate[name] = {
            "lr": cond.lr,
            "mean_last": mean(at),
            "mean_step0": mean(at0),
            "collapsed": any(r["collapse"]["collapsed"] for r in mine),
        }
    rising = {n: v for n, v in by_rate.items() if v["mean_last"] > v["mean_step0"]}
    if not rising:
        return {
            "by_rate": by_rate,
            "chosen": None,
            "why": "no rate's mean dev loose pass@1 at the last step is above step 0's",
        }
    pool = {n: v for n, v in rising.items() if not v["collapsed"]} or rising
    best = max(v["mean_last"] for v in pool.values())
    tied = [n for n, v in pool.items() if v["mean_last"] >= best - TIE]
    chosen = min(tied, key=lambda n: pool[n]["lr"])
    return {"by_rate": by_rate, "chosen": chosen, "lr": pool[chosen]["lr"], "tied": sorted(tied)}


def job_walls(log: str) -> dict:
    """{(condition, seed): wall seconds} of every training job the pipeline's terminal output says is done."""
    return {(m.group(1), int(m.group(2))): float(m.group(3).replace(",", "")) for m in JOB_DONE.finditer(log)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path)
    p.add_argument("--config", default="configs/smollm2_v2_pilot.yaml")
    p.add_argument("--log", type=Path, default=None, help="the pipeline's terminal output (job wall times)")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    cfg = config.load(a.config)
    walls = job_walls(a.log.read_text()) if a.log is not None else {}
    runs = {}
    for name in cfg.conditions:
        for seed in cfg.train.seeds:
            folder = a.run / f"train_{name}_s{seed}"
            if (folder / "train_log.csv").exists():
                runs[(name, seed)] = read_run(folder, cfg, walls.get((name, seed)))
    if not runs:
        print(f"smollm2_v2_pilot: {a.run}: no training log (train_<condition>_s<seed>/train_log.csv)", file=sys.stderr)
        return 2
    res = {
        "runs": {f"{c} s{s}": r for (c, s), r in runs.items()},
        "collapse_rate": collapse.rate([r["collapse"]["collapsed"] for r in runs.values()]),
        "rule": choose(runs, cfg),
    }
    print(
        "| run | dev loose pass@1 by step | pass@8 by step | reward (thirds) | no-signal groups (thirds) "
        "| skipped | truncated (thirds) | length (thirds) | entropy (thirds) | KL | collapsed | s/step (sample + fwd/bwd) |"
    )
    print("|" + "---|" * 12)
    for key, r in res["runs"].items():
        steps = sorted(r["dev"])
        p1 = " / ".join(f"{r['dev'][s]['loose_pass1']:.3f}" for s in steps)
        pn = " / ".join(f"{r['dev'][s]['loose_passn']:.3f}" for s in steps)
        kl = ", ".join(f"{v:.2g}" for v in r["kl"].values())
        print(
            f"| {key} | {p1} | {pn} | {r['reward_thirds']} | {r['zero_signal_thirds']} | {r['skipped_steps']} "
            f"| {r['truncated_thirds']} | {r['len_thirds']} | {r['entropy_thirds']} | {kl} | {r['collapse']['collapsed']} "
            f"| {r['sec_sampling_median']} + {r['sec_fwd_bwd_median']} |"
        )
    cr = res["collapse_rate"]
    print(f"\ncollapse rate: {cr['collapsed']} of {cr['seeds']} runs, 95% CI {cr['ci']}")
    rule = res["rule"]
    print(
        "rule: "
        + (f"{rule['chosen']} (lr {rule['lr']:g})" if rule["chosen"] else f"no choice: {rule['why']}")
        + "; "
        + "; ".join(
            f"{n}: step-0 mean {v['mean_step0']:.4f}, last {v['mean_last']:.4f}"
            f"{', a collapsed seed' if v['collapsed'] else ''}"
            for n, v in rule["by_rate"].items()
        )
    )
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
