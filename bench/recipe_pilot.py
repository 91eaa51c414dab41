"""A recipe pilot's reading under change 70's rule (analysis/recipe.py): per training run the dev checks
(loose pass@1, the share of dev problems locked on one answer and on a wrong one), the late entropy,
collapse and step costs; then the rule's choice of rate.

    python bench/recipe_pilot.py RUN --config configs/smollm2_v3_pilot.yaml [--json OUT.json]

RUN is the pilot's run folder. Prints Markdown; --json writes every number. Reads only; writes nothing
into RUN.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis import collapse, recipe  # noqa: E402
from analysis.run_files import DEV_COLUMNS, DEV_REQUIRED, read_csv  # noqa: E402
from orchestration import config  # noqa: E402


def read_run(folder: Path, cfg: config.Config) -> dict:
    log = read_csv(folder / "train_log.csv")
    dev = read_csv(folder / "train_eval.csv", required=DEV_REQUIRED, drawn=DEV_COLUMNS)
    spec = cfg.analyze.collapse
    fell = collapse.collapsed(log, spec.late_from, spec.share)
    return {
        "steps": len(log),
        "done": (folder / "done.json").exists(),
        "rule": recipe.seed_reading(log, dev, fell["collapsed"], cfg.train.steps),
        "dev": {
            int(r["step"]): {k: r.get(k) for k in ("loose_pass1", "loose_passn", "locked", "locked_wrong")} for r in dev
        },
        "len_late": recipe.last_third(log, "len_mean"),
        "kl_last": next((r["kl_mean"] for r in reversed(log) if r["kl_mean"] == r["kl_mean"]), None),
        "sec_step_median": round(statistics.median(r["sec_sampling"] + r["sec_fwd_bwd"] for r in log), 1)
        if log
        else None,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path)
    p.add_argument("--config", required=True)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    cfg = config.load(a.config)
    runs, by_rate = {}, {}
    for name, cond in cfg.conditions.items():
        mine = []
        for seed in cfg.train.seeds:
            folder = a.run / f"train_{name}_s{seed}"
            if (folder / "train_log.csv").exists():
                runs[f"{name} s{seed}"] = r = read_run(folder, cfg)
                mine.append(r["rule"])
        if mine:
            by_rate[name] = (cond.lr, mine)
    if not runs:
        print(f"recipe_pilot: {a.run}: no training log (train_<condition>_s<seed>/train_log.csv)", file=sys.stderr)
        return 2
    res = {"runs": runs, "rule": recipe.choose(by_rate)}
    print(
        "| run | steps | dev loose pass@1 by check | locked / locked wrong by check | late entropy | late length | KL last | s/step |"
    )
    print("|" + "---|" * 8)
    for key, r in runs.items():
        steps = sorted(r["dev"])
        p1 = " / ".join(f"{r['dev'][s]['loose_pass1']:.3f}" for s in steps)
        lk = " / ".join(f"{r['dev'][s]['locked']:.2f}:{r['dev'][s]['locked_wrong']:.2f}" for s in steps)
        kl = "-" if r["kl_last"] is None else f"{r['kl_last']:.3g}"
        print(
            f"| {key} | {r['steps']}{'' if r['done'] else ' (running)'} | {p1} | {lk} "
            f"| {r['rule']['entropy_late']:.2f} | {r['len_late']:.1f} | {kl} | {r['sec_step_median']} |"
        )
    rule = res["rule"]
    print(
        "\nrule: "
        + (
            f"{rule['chosen']} (lr {rule['lr']:g}; tied {rule['tied']})"
            if rule["chosen"]
            else f"no choice: {rule['why']}"
        )
    )
    for n, v in rule["by_rate"].items():
        print(f"- {n}: step 0 {v['mean_step0']:.4f}, last {v['mean_last']:.4f}; {'; '.join(v['out']) or 'admissible'}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
