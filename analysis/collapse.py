"""A collapsed training run, defined on its training log alone (PLAN_CHANGES.md change 59), and the collapse
rate as an estimand of its own. A run is collapsed when no step of its late part had a learning
signal: `no_signal` (every group of the step had one reward, so every advantage was 0) on at least
`share` of the steps after `late_from` x its last step. The primary analysis stays intention-to-treat
(every seed counts); the rate of collapse over a condition's seeds is reported with its exact
(Clopper-Pearson) 95% interval. numpy and scipy only."""

from __future__ import annotations

import math

from analysis.run_inputs import RunInputs
from analysis.stats import exact_interval


def collapsed(log: list[dict], late_from: float = 0.5, share: float = 0.9) -> dict:
    """{collapsed, late_steps, no_signal, share} of one training log (rows with step and no_signal)."""
    rows = [r for r in log if r.get("no_signal") is not None and not math.isnan(r["no_signal"])]
    if not rows:
        return {
            "collapsed": None,
            "late_steps": 0,
            "no_signal": 0,
            "share": None,
            "why": "the log records no no_signal column",
        }
    last = max(r["step"] for r in rows)
    late = [r for r in rows if r["step"] > late_from * last]
    quiet = sum(r["no_signal"] >= 1 for r in late)
    return {
        "collapsed": quiet >= share * len(late),
        "late_steps": len(late),
        "no_signal": quiet,
        "share": quiet / len(late),
    }


def rate(flags: list[bool | None], level: float = 0.95) -> dict:
    """The collapse rate over seeds (those with a readable log) and its exact two-sided interval."""
    known = [f for f in flags if f is not None]
    x, m = sum(known), len(known)
    if m == 0:
        return {"collapsed": 0, "seeds": 0, "rate": None, "ci": None}
    return {"collapsed": x, "seeds": m, "rate": x / m, "ci": exact_interval(x, m, level)}


def analyze(inputs: RunInputs) -> dict:
    """Per condition trained by gradient (a log with no_signal): each seed's reading and the rate (from the training
    logs in inputs.run); beside it, change 70's lock-in on the condition's test evaluations and on each evaluation
    set's, descriptive."""
    from analysis import concentration
    from analysis.run_files import read_csv
    from orchestration import study

    design, run = inputs.design, inputs.run
    spec = design.cfg.analyze.collapse
    if spec is None:
        return {"skipped": "not registered (analyze.collapse)"}
    out = {"skipped": None, "late_from": spec.late_from, "share": spec.share, "conditions": {}}
    for cond in design.conditions:
        if design.cfg.conditions[cond].method == "sft":
            continue  # gold answers, no rewards: every step has a gradient
        seeds = {
            s: collapsed(read_csv(study.train_dir(run, cond, s) / "train_log.csv"), spec.late_from, spec.share)
            for s in design.seeds_of(cond)
        }
        if all(r["collapsed"] is None for r in seeds.values()):
            continue  # no log
        out["conditions"][cond] = {
            "per_seed": {str(s): r for s, r in seeds.items()},
            **rate([r["collapsed"] for r in seeds.values()]),
        }
        locks = {"test": concentration.lock_in(inputs.docs_at(cond))} | {
            name: concentration.lock_in(inputs.docs_at(cond, name=name)) for name in inputs.sets
        }
        if any(v is not None for v in locks.values()):
            out["conditions"][cond]["lock_in"] = {k: v for k, v in locks.items() if v is not None}
    return out
