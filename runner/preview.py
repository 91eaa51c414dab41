"""--dry-run and --print-jobs: the plan from the config alone, nothing written. --dry-run says each
stage's state (done, to do, out of date, made under other settings) and the time left; --print-jobs
what is left as the shell commands a user or a scheduler runs, grouped by what they wait for.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from orchestration import eval_resume
from runner import foreign
from runner.cost_model import PRACTICE, breakdown, span
from runner.jobs import estimate_seconds, fmt_minutes
from runner.stages import JOB_STAGES, Plan, kept_weights_note

# a stage's state from its outputs' states: the first of these found in them, in this order
_OUTPUT_STATES = (
    ("foreign", "made under other settings (would refuse; --force)"),
    ("damaged", "damaged (would be redone)"),
    ("weightless", "without its weights (would be remade)"),
    ("stale", "out of date (made from other inputs)"),
)


def _outputs_state(states: list[str]) -> str:
    """A stage's state in words: done where every output is (or it has none), else its worst output's state."""
    if all(x == "done" for x in states):
        return "done"
    for state, words in _OUTPUT_STATES:
        if state in states:
            return words
    return "to do"


def dry_run(plan: Plan, todo: list[str], n: int) -> None:
    """--dry-run: each stage's state (done, to do, out of date, made under other settings), then the jobs
    left and their time (measured, the cost model's estimate, or a committed run's record)."""
    print(f"run folder: {plan.run}")
    found = foreign.foreign_outputs(plan)  # made under other settings: the run refuses before it writes
    for s in todo:
        state = job_stage_state(plan, s) if s in JOB_STAGES else stage_state(plan, s)
        reads = foreign.foreign_reads(s, found)
        print(f"  {s:<9} {state}" + (f"; reads what {', '.join(reads)} made under other settings" if reads else ""))
    if found:
        print(
            f"  the run would refuse before writing anything: {foreign.refusal_line(plan, found)}; "
            "the jobs below are what --force would run (it moves each such output aside and redoes it)"
        )
    time_lines(plan, todo, n)


STATE_WORDS = {
    "foreign": "made under other settings (would refuse; --force)",
    "unkept": "done without their weights (not committed; nothing still to do reads them)",
    "weightless": "without their weights, which a job still to do reads (would be remade)",
    "stale": "out of date",
}


def job_stage_state(plan: Plan, s: str) -> str:
    """A job stage's outputs counted by state, in words."""
    outputs = plan.outputs(s)
    states = [plan.state(s, m, h) for _, m, h in outputs]
    if "weightless" in states:  # a finished run is remade only where a job still to do reads its weights
        needed = plan.weights_needed()
        states = [
            "unkept" if st == "weightless" and m.name == "done.json" and path not in needed else st
            for (path, m, _), st in zip(outputs, states)
        ]
    counts = {
        k: states.count(k)
        for k in ("done", "unkept", "missing", "damaged", "weightless", "stale", "foreign")
        if states.count(k)
    }
    state = (
        "done"
        if counts.get("done") == len(states)
        else ", ".join(f"{v} {STATE_WORDS.get(k, k)}" for k, v in counts.items())
    )
    if counts.get("unkept") and counts["unkept"] + counts.get("done", 0) == len(states):
        state = kept_weights_note(plan, s, counts["unkept"]) or state
    if s == "eval" and (under := evals_under_way(plan)):
        state += f"; under way, resumed by the next run: {', '.join(under)}"
    return state


def stage_state(plan: Plan, s: str) -> str:
    """A stage run once (base, probe, select, lr-sweep, analyze), in words."""
    if s == "analyze":
        if plan.analyze_done():
            return "done"
        return "out of date" if (plan.run / "verdicts.json").exists() else "to do"
    states = [plan.state(s, m, h) for _, m, h in plan.outputs(s)]
    state = _outputs_state(states)
    if states == ["weightless"]:
        state = kept_weights_note(plan, s, 1) or state
    if s == "lr-sweep" and state != "done" and (bad := plan.sweep_damage()):
        state += f"; {len(bad)} damaged candidate run(s) (would be moved aside and redone: {bad[0][1]})"
    return state


def time_lines(plan: Plan, todo: list[str], n: int) -> None:
    """The jobs left and their time: measured, else the cost model's bound and where it goes (a GPU config),
    else a committed run's record (a CPU config); then the stages before the jobs."""
    left = plan.jobs(todo)
    cost = plan.cost_model()
    eta = estimate_seconds(plan.run, left, n, cost)
    print(
        f"  {len(left)} train/eval jobs left, with --jobs {n}: {fmt_minutes(eta, cost)}"
        + (" (from this run's measured step and evaluation times)" if not eta[1] else "")
    )
    if cost is not None and len(eta) > 2 and eta[2] is not None:
        priced = [j for j in left if ("training" if j.stage == "train" else "evaluation") in eta[1]]  # not measured
        print("\n".join(breakdown(cost, priced)))
        night = one_night(plan, eta[2][0] * PRACTICE[0], n)
        if night:
            print(night)
    if eta[1] and cost is None and left:  # a CPU config with nothing measured: a committed run of it, if any
        from runner import reference_times

        todo_singles = [s for s in todo if s in reference_times.SINGLE and not plan.done(s)]
        ref = reference_times.line(plan.config_path, [j.name for j in left], todo_singles, n)
        print(
            f"  before it runs: {ref}" if ref else "  before it runs: no committed run of this config records its times"
        )
    singles = [s for s in todo if s in ("probe", "select", "lr-sweep") and not plan.done(s)]
    if cost is not None and singles:
        print(
            f"  {', '.join(singles)} before them: {cost.describe(cost.both(lambda c: sum(c.single(s) for s in singles)))}"
        )


NIGHT_H = 12.0  # a night, in hours
SHORT = "configs/report.yaml"  # the seed report's own design: the short option


def one_night(plan: Plan, low_seconds: float, n: int) -> str | None:
    """What fits a night when even the low end of the estimate does not: the seed report's design (with its
    own estimate), or this study in parts to a deadline. None when the study fits."""
    if low_seconds < NIGHT_H * 3600:
        return None
    from orchestration import config

    words = []
    if Path(SHORT).resolve() != Path(plan.config_path).resolve() and Path(SHORT).exists():
        short = Plan(config.load(SHORT), plan.run.with_name(plan.run.name + "_report"), SHORT, [])
        c = short.cost_model()
        jobs = estimate_seconds(short.run, short.jobs(JOB_STAGES), n, c)[2][0]
        singles = c.both(lambda m: sum(m.single(s) for s in ("probe", "select", "lr-sweep")))[0]
        lo, hi = ((jobs + singles) * f for f in PRACTICE)
        words.append(f"the seed report's design fits one (~{span(lo, hi)} by the same estimate: --config {SHORT})")
    words.append(
        f"or this study in parts, one a night, each resuming the last: python pipeline.py --config "
        f"{plan.config_path} --run {plan.run} --jobs {n} --hours 10"
    )
    return f"  longer than a night ({NIGHT_H:g} h) even at the estimate's low end: " + "; ".join(words)


def evals_under_way(plan: Plan) -> list[str]:
    """'<file> k of K sampling calls done' for each evaluation an earlier run stopped in whose resume folder
    (orchestration/eval_resume.py) the next run continues: made under the stage hash the evaluation should record."""
    out = []
    for _, m, want in plan.outputs("eval"):
        done = eval_resume.progress(m)
        if done and not m.exists() and want is not None and eval_resume.recorded_hash(m) == want:
            out.append(f"{m.relative_to(plan.run)} {done[0]} of {done[1]} sampling calls done")
    return out


def print_jobs(plan: Plan, todo: list[str]) -> None:
    """What is left, as shell commands, grouped by what they wait for."""
    for line in foreign.notes(plan, todo):
        print(f"# {line}")
    singles = [
        s
        for s in todo
        if s in ("base", "probe", "select", "lr-sweep") and (not plan.done(s) or (s == "base" and plan.base_remade()))
    ]
    if singles:
        print("# 1. one after another (each waits for the one before):")
        for s in singles:
            print(plan.command(s))
    jobs = plan.jobs([s for s in todo if s in JOB_STAGES])
    if jobs and plan.cfg.device != "cpu":
        print(
            "# every job wants one GPU of its own: a scheduler's one-GPU slot (Slurm --gres=gpu:1), or "
            "CUDA_VISIBLE_DEVICES=<one id> before the command"
        )
    train = [j for j in jobs if j.stage == "train"]
    evals = [j for j in jobs if j.stage != "train"]
    if train:
        print(f"# 2. training runs: each waits for {'step 1' if singles else 'nothing'}; independent of each other")
        for j in train:
            print(j.command())
    if evals:
        print(
            "# 3. evaluations (and token-level comparisons): each waits for its training run (the base's for nothing "
            "but the base); independent of each other"
        )
        for j in evals:
            print(j.command())
    if "analyze" in todo and not plan.done("analyze"):
        print("# 4. then the analysis and report (it skips everything done):")
        print(plan.command())


def plan_only(plan: Plan, todo: list[str], a, unreachable: str | None) -> int:
    """--dry-run and --print-jobs: the plan from the config alone, nothing written."""
    if unreachable:
        print(f"# not here yet, and every stage needs it: {unreachable}")
    try:
        if not plan.run.exists():
            print(f"# run folder {plan.run} does not exist yet: every stage is to do")
        if a.dry_run:
            dry_run(plan, todo, a.jobs)
        else:
            print_jobs(plan, todo)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
