"""Run the whole study in PLAN.md's registered order, skipping what is already done.

    python pipeline.py --config configs/smoke.yaml                # every stage, into results/smoke
    python pipeline.py --config configs/tiny.yaml --jobs 2        # training runs and evaluations two at a time
    python pipeline.py --config configs/tiny.yaml --dry-run       # the plan: done, to do, out of date; time left
    python pipeline.py --config configs/tiny.yaml --print-jobs    # what is left, as shell commands for a scheduler
    python pipeline.py --config configs/tiny.yaml --stage eval    # one stage by hand (skipped if done)
    python pipeline.py --config configs/tiny.yaml --stage train --condition 16 --force   # redo one condition

Stages (PLAN.md, "Order of stages"):
  base      (only when the config builds its model) the CPU world's tiny base or the rehearsal's -> base_model/
  probe     base-rate checks                                       -> probe_<task>.json
  select    pass rates of the first train problems; the select-N sets -> selection.json
  lr-sweep  short runs of the many condition per candidate         -> lr_sweep/, lr_choice.json
  train     every condition x training seed                        -> train_<cond>_s<seed>/
  eval      the base and every checkpoint                          -> eval_base.json, eval_<cond>_s<seed>_<step>.json
            and each registered evaluation set (eval_sets: wide, ood) -> evalsets/<set>/eval_*.json
  tokens    (tokens.enabled) each checkpoint against the base, token by token -> tokens_<cond>_s<seed>_<step>.json
  analyze   bootstrap verdicts, coverage, figures, report          -> verdicts.json, report.md, figures/

Jobs. Each training run (condition x seed) and each evaluation is a job: the same `grpo.py`
command a user could type (`--print-jobs` prints them). `--jobs N` runs up to N at once in
worker processes; an evaluation starts as soon as its training run is done. Every random draw
is seeded from explicit parts, never from the order in which jobs run, so `--jobs 2` writes the
same bytes as `--jobs 1` (tested). Jobs never change the thread count: set `threads` in the
config (the CPU configs use one torch thread per process).

One folder, one study. A stage is done when its outputs record the hash of the config keys and input
files it depends on. An output that records other *settings* was made under another config: before
anything is written or moved, the whole folder is checked (orchestration/foreign.py) and the run
refuses (one line naming the file and the setting a user fixes first, the model, then the task, then
the rest; exit 2; every file as it was) unless --force is given. --dry-run and --print-jobs say so
for every stage that reads such a file, and hash nothing from it. An output whose settings agree but
whose *inputs* changed (a stage upstream was redone) is out of date: it is moved aside to
RUN/superseded/<time>/ and redone, as are evaluations of adapters that no longer exist. A lock file
keeps a second pipeline out of the folder. Every output is written atomically and training resumes
from its last checkpoint, so a run killed at any point and started again ends with the same
adapters, counts and verdicts as one that never stopped (time stamps and timings aside).
RUN/manifest.json records the config, PLAN.md's sha256, the code revision, package versions, and
each stage's and job's status and wall time; a later run under another header keeps the earlier one
in `earlier`.
"""
from __future__ import annotations

import os
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path

from orchestration import cli, config, foreign, provenance, study
from orchestration.jobs import Job, Runner, assign_gpus, estimate_seconds, fmt_minutes, in_worker, log, now, run_grpo, visible_gpus
from orchestration.stages import (
    JOB_STAGES,
    STAGES,
    Aside,
    Lock,
    MissingInput,
    Plan,
    Refused,
    check_inputs,
    check_stage,
    kept_weights_note,
    registered_stages,
    remake_note,
)

ROOT = Path(__file__).resolve().parent


MANIFEST_HEADER = ("config", "config_hash", "plan_sha256", "changes_sha256", "revision", "versions")  # what made the files


def write_manifest(run: Path, cfg: config.Config, stages: dict, jobs: dict) -> None:
    """RUN/manifest.json: this pipeline run's config, PLAN.md's sha256, the code revision and the
    versions, with every stage's and job's state. The record of what made the files already there is
    never rewritten: when the manifest on disk was written under another header (another config
    record, revision, PLAN.md or versions: a stage run into an existing run by later code), that
    header is appended to `earlier`, with the stages and jobs that were done under it."""
    here = {"config": config.to_dict(cfg), "config_hash": config.digest(config.to_dict(cfg)),
            **provenance.plan_hashes(), "revision": provenance.code_revision(),
            "versions": provenance.versions()}
    old = provenance.read_json(run / "manifest.json") or {}
    earlier = list(old.get("earlier", []))
    if "config" in old and any(old.get(k) != here[k] for k in MANIFEST_HEADER):
        earlier.append({**{k: old[k] for k in MANIFEST_HEADER if k in old}, "stages_done": _done(old.get("stages")),
                        "jobs_done": _done(old.get("jobs"))})
    provenance.atomic_write_json(run / "manifest.json", {
        **here, **({"earlier": earlier} if earlier else {}), "stage_order": registered_stages(cfg), "stages": stages, "jobs": jobs})


def job_record(run: Path, job: Job, status: str, **more) -> dict:
    """A job's entry in manifest.json: its state, the command that makes its output, and that output
    (relative to the run folder), so "the command that makes this file again" is a lookup."""
    return {"status": status, "command": job.command(), "output": Path(job.output).relative_to(run).as_posix(), **more}


def _done(states: dict | None) -> list[str]:
    return sorted(k for k, r in (states or {}).items() if isinstance(r, dict) and r.get("status") == "done")


# ============================================================================= single stages


class StageFailed(Exception):
    """A stage ran and failed: the message names the file or command and what fixes it."""


def run_single(stage: str, plan: Plan, quiet: bool, gpu: str | None = None) -> None:
    """A stage before the jobs (base, probe, select, lr-sweep) is its `grpo.py` command, run in
    this process, or with a GPU in a worker that sees only that one (jobs.in_worker); analyze is
    analysis.assemble's (what analyze_b.py runs)."""
    cfg, run = plan.cfg, plan.run
    if stage == "analyze":
        from analysis import report
        from analysis.assemble import run_analysis
        from analysis.run_files import InputError

        try:
            out = run_analysis(run)
        except InputError as e:  # an input's fault: exit 2, as analyze_b.py's
            raise MissingInput(f"{e}; make it again: {remake_note(plan, e.path)}")
        print(report.headline(out), flush=True)
        return
    if stage == "lr-sweep" and not study.sweep_runs(cfg):
        log(f"lr-sweep: not needed, train.lr = {cfg.train.lr:g} is set in the config")
        return
    argv = plan.base_argv(stage) + (["--quiet"] if quiet else [])
    rc = in_worker(run_grpo, argv, gpu=gpu)
    if rc == study.EXIT_OUT_OF_MEMORY:
        raise StageFailed(f"`{Job(stage, stage, argv).command()}` ran out of memory; {study.memory_advice(cfg, stage)}")
    if rc != 0:
        raise StageFailed(f"`{Job(stage, stage, argv).command()}` exited with code {rc} (its line above says why)")


# ============================================================================= main


def dry_run(plan: Plan, todo: list[str], n: int) -> None:
    print(f"run folder: {plan.run}")
    found = foreign.foreign_outputs(plan)  # made under other settings: the run refuses before it writes
    refuses = []  # stages whose outputs were made under other settings: the run stops there without --force
    for s in todo:
        if s in JOB_STAGES:
            states = [plan.state(s, m, h) for _, m, h in plan.outputs(s)]
            counts = {k: states.count(k) for k in ("done", "missing", "damaged", "weightless", "stale", "foreign") if states.count(k)}
            words = {"foreign": "made under other settings (would refuse; --force)",
                     "weightless": "without their weights (would be remade)", "stale": "out of date"}
            state = "done" if counts.get("done") == len(states) else ", ".join(f"{v} {words.get(k, k)}" for k, v in counts.items())
            if counts.get("weightless") and counts["weightless"] + counts.get("done", 0) == len(states):
                state = kept_weights_note(plan, s, counts["weightless"]) or state
            if counts.get("foreign"):
                refuses.append(s)
        elif s == "analyze":
            state = "done" if plan.analyze_done() else ("out of date" if (plan.run / "verdicts.json").exists() else "to do")
        else:
            states = [plan.state(s, m, h) for _, m, h in plan.outputs(s)]
            state = ("done" if all(x == "done" for x in states) else "made under other settings (would refuse; --force)"
                     if "foreign" in states else "damaged (would be redone)" if "damaged" in states
                     else "without its weights (would be remade)" if "weightless" in states
                     else "out of date (made from other inputs)" if "stale" in states else "to do")
            if states == ["weightless"]:
                state = kept_weights_note(plan, s, 1) or state
            if "foreign" in states:
                refuses.append(s)
            if s == "lr-sweep" and state != "done" and (bad := plan.sweep_damage()):
                state += f"; {len(bad)} damaged candidate run(s) (would be moved aside and redone: {bad[0][1]})"
        reads = foreign.foreign_reads(s, found)
        print(f"  {s:<9} {state}" + (f"; reads what {', '.join(reads)} made under other settings" if reads else ""))
    if found:
        print(f"  the run would refuse before writing anything: {foreign.refusal_line(plan, found)}; "
              "the jobs below are what --force would run (it moves each such output aside and redoes it)")
    left = plan.jobs(todo)
    cost = plan.cost_model()
    eta = estimate_seconds(plan.run, left, n, cost)
    print(f"  {len(left)} train/eval jobs left, with --jobs {n}: {fmt_minutes(eta, cost)}"
          + (" (from this run's measured step and evaluation times)" if not eta[1] else ""))
    singles = [s for s in todo if s in ("probe", "select", "lr-sweep") and not plan.done(s)]
    if cost is not None and singles:
        print(f"  {', '.join(singles)} before them: {cost.describe(cost.both(lambda c: sum(c.single(s) for s in singles)))}")


def print_jobs(plan: Plan, todo: list[str], config_path: str, out: Path, sets: list[str]) -> None:
    """What is left, as shell commands, grouped by what they wait for."""
    def pipe(stage: str) -> str:
        return " ".join(shlex.quote(x) for x in ["python", "pipeline.py", "--config", config_path, "--run", str(out),
                                                    *sum((["--set", s] for s in sets), []), "--stage", stage])

    for line in foreign.notes(plan, todo):
        print(f"# {line}")
    singles = [s for s in todo if s in ("base", "probe", "select", "lr-sweep") and not plan.done(s)]
    if singles:
        print("# 1. one after another (each waits for the one before):")
        for s in singles:
            print(pipe(s))
    jobs = plan.jobs([s for s in todo if s in JOB_STAGES])
    if jobs and plan.cfg.device != "cpu":
        print("# every job wants one GPU of its own: a scheduler's one-GPU slot (Slurm --gres=gpu:1), or "
              "CUDA_VISIBLE_DEVICES=<one id> before the command")
    train = [j for j in jobs if j.stage == "train"]
    evals = [j for j in jobs if j.stage != "train"]
    if train:
        print(f"# 2. training runs: each waits for {'step 1' if singles else 'nothing'}; independent of each other")
        for j in train:
            print(j.command())
    if evals:
        print("# 3. evaluations (and token-level comparisons): each waits for its training run (the base's for nothing "
              "but the base); independent of each other")
        for j in evals:
            print(j.command())
    if "analyze" in todo and not plan.done("analyze"):
        print("# 4. then the analysis and report (it skips everything done):")
        print(" ".join(shlex.quote(x) for x in ["python", "pipeline.py", "--config", config_path, "--run", str(out),
                                                 *sum((["--set", s] for s in sets), [])]))


def parse_args(argv: list[str] | None):
    p = cli.Parser(description="Run the study's stages in PLAN.md's order.")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/smoke.yaml")
    p.add_argument("--run", "--out", dest="run", default=None,
                   help="run folder (default: results/<config name>); --out is the same option, as earlier commands wrote it")
    p.add_argument("--stage", choices=STAGES, default=None, help="run only this stage (its inputs must exist)")
    p.add_argument("--condition", default=None, help="with --stage train: only this condition (every seed)")
    p.add_argument("--force", action="store_true",
                   help="replace outputs made under other settings; with --stage, also redo that stage when it is done")
    p.add_argument("--jobs", type=int, default=1, help="training runs and evaluations to run at once (worker processes)")
    p.add_argument("--gpus", default=None, metavar="IDS",
                   help="GPUs for the jobs, one per job at a time (default: every visible GPU; e.g. 0,1)")
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="where jobs run: here, or on a Ray cluster")
    p.add_argument("--ray-address", default=None, help="with --executor ray: the cluster (default: a local Ray started here)")
    p.add_argument("--dry-run", action="store_true", help="print the plan (done / to do / out of date, time left) and exit")
    p.add_argument("--print-jobs", action="store_true", help="print what is left as shell commands (for a scheduler) and exit")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. train.steps=10")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def checked_config(a) -> config.Config:
    """The config, with the command line's own checks; sets a.gpu_slots. Raises ConfigError."""
    cfg = config.load(a.config, a.set)
    if a.condition and a.stage != "train":
        raise config.ConfigError("--condition goes with --stage train")
    if a.condition and a.condition not in cfg.conditions:
        raise config.ConfigError(f"--condition {a.condition!r}: not registered in conditions ({', '.join(cfg.conditions)})")
    if a.jobs < 1:
        raise config.ConfigError(f"--jobs {a.jobs}: must be >= 1")
    gpus = [] if cfg.device == "cpu" else [g.strip() for g in a.gpus.split(",")] if a.gpus else visible_gpus()
    a.gpu_slots = assign_gpus(a.jobs, gpus) if a.executor == "local" else gpus
    return cfg


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
            print_jobs(plan, todo, a.config, plan.run, a.set)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        cfg = checked_config(a)
    except config.ConfigError as e:
        print(f"pipeline.py: {e}", file=sys.stderr)
        return 2
    unreachable = None
    try:
        study.check_model_reachable(cfg)  # before anything is written
    except config.ConfigError as e:
        if not (a.dry_run or a.print_jobs):
            print(f"pipeline.py: {e}", file=sys.stderr)
            return 2
        unreachable = str(e)  # a plan needs the config only: say what the jobs will need
    run = Path(a.run) if a.run else ROOT / "results" / Path(a.config).stem
    plan = Plan(cfg, run, a.config, a.set)
    todo = [a.stage] if a.stage else registered_stages(cfg)
    if a.dry_run or a.print_jobs:
        return plan_only(plan, todo, a, unreachable)
    try:  # the whole folder, then the first stage's inputs (from earlier runs): checked before anything is written
        if not a.force:
            foreign.check_folder(plan)
        check_inputs(plan, todo[0], a.condition, tuple(x for x in todo if x in JOB_STAGES))
    except Refused as e:
        print(f"pipeline.py: {e}", file=sys.stderr)
        return 2
    except MissingInput as e:
        print(f"pipeline.py: stage {todo[0]} cannot run: {e}", file=sys.stderr)
        return 2

    def terminated(signum, frame):  # a scheduler's time limit (Slurm sends SIGTERM first), a closed terminal: end as Ctrl-C does
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, terminated)
    return Session(plan, todo, a).run()


class Session:
    """One pipeline run over a run folder: it takes the lock, keeps the manifest's stage and job
    states, runs the stages in order, and turns how it ended into an exit code and one line (ENDINGS)."""

    def __init__(self, plan: Plan, todo: list[str], a):
        self.plan, self.todo, self.a = plan, todo, a
        self.stages: dict = {}
        self.jobs: dict = {}
        self.current: str | None = None
        self.opened = False  # the folder is ours (made, locked, its manifest read): from here a failure is a stage's

    def manifest(self) -> None:
        write_manifest(self.plan.run, self.plan.cfg, self.stages, self.jobs)

    def run(self) -> int:
        run, lock, t_all = self.plan.run, Lock(self.plan.run), time.perf_counter()
        try:
            run.mkdir(parents=True, exist_ok=True)
            lock.acquire()
            old = provenance.read_json(run / "manifest.json") or {}
            self.stages, self.jobs = old.get("stages", {}), old.get("jobs", {})
            end_states(self.stages, self.jobs, "interrupted", "the pipeline that ran it ended without saying how (killed?)")
            aside = Aside(run)
            self.opened = True
            rc = self.stages_in_order(aside)
            if rc:
                return rc
            self.current = None
        except BaseException as e:  # every ending is recorded; ENDINGS says which end as what
            return self.ended(e)
        finally:
            lock.release()
        report = run / "report.md"
        log(f"all done in {time.perf_counter() - t_all:.1f} s" + (f"; see {report}" if "analyze" in self.todo and report.exists() else ""))
        return 0

    def stages_in_order(self, aside: Aside) -> int:
        """Every stage of todo in order; the job stages as one group. Returns a job group's exit code."""
        plan, a, todo = self.plan, self.a, self.todo
        group = [s for s in todo if s in JOB_STAGES]  # contiguous in PLAN.md's order
        for s in todo:
            if s in JOB_STAGES:
                if s != group[0]:
                    continue  # run with the first of its group
                self.current = s
                rc = run_jobs(plan, group, a, self.stages, self.jobs, aside)
                if rc:
                    end_states(self.stages, self.jobs, "failed", f"stage {self.current} failed", todo[todo.index(group[-1]) + 1:])
                    self.manifest()
                    return rc
                continue
            self.current = s
            self.single(s, aside)
        return 0

    def single(self, s: str, aside: Aside) -> None:
        plan, a = self.plan, self.a
        check_inputs(plan, s)
        check_stage(plan, s, a.force, aside)
        if plan.done(s) and not (a.force and a.stage == s):
            log(f"{s}: done, skipped")
            self.stages[s] = done_record(self.stages.get(s, {}))
            return
        if a.force and a.stage == s:
            for path, _, _ in plan.outputs(s):
                aside.move(path, "--force")
        log(f"{s}: running")
        self.stages[s] = {"status": "running", "started": now()}
        self.manifest()
        t0 = time.perf_counter()
        run_single(s, plan, a.quiet, a.gpu_slots[0] if a.gpu_slots else None)
        self.stages[s] = {"status": "done", "seconds": round(time.perf_counter() - t0, 1), "finished": now()}
        self.manifest()
        log(f"{s}: done in {self.stages[s]['seconds']:.1f} s")

    def ended(self, e: BaseException) -> int:
        """How an exception ends the run: its line, the manifest's states, the exit code (ENDINGS)."""
        run, cfg = self.plan.run, self.plan.cfg
        if isinstance(e, Refused):
            print(f"pipeline.py: {e}", file=sys.stderr)
            return 2
        if isinstance(e, OSError) and not self.opened:  # the run folder itself: not there to make, not writable, read-only
            print(f"pipeline.py: cannot write in {run}: {_os_words(e, run)}; give a folder you can write: --run DIR", file=sys.stderr)
            return 1
        stage = under_way(self.stages, self.todo, self.current)
        for types, code, status, words in ENDINGS:
            if isinstance(e, types):
                why = {"interrupted": "Ctrl-C or a signal"}.get(status) or (_os_words(e, run) if isinstance(e, OSError) else
                                                                            f"{type(e).__name__}: {e}" if types == (Exception,) else str(e))
                _mark(run, cfg, self.stages, self.jobs, self.todo, stage, status, why)
                if types == (Exception,):  # a bug: its traceback is for a report
                    traceback.print_exc()
                print("pipeline.py: " + words.format(stage=stage, e=e, why=why, resumes=resumes(cfg, stage), name=type(e).__name__,
                                                     manifest=run / "manifest.json"), file=sys.stderr)
                return code
        raise e  # SystemExit and the like: not ours to end


def _os_words(e: OSError, run: Path) -> str:
    return f"{e.strerror} ({e.filename or run})" if e.strerror else str(e)  # a system call's error, or ours with a message


# How the pipeline ends, in the order they are tried: the exception types, the exit code, the status the
# stage under way and everything after it get in the manifest, and the one line (Session.ended).
ENDINGS = (
    ((KeyboardInterrupt,), 130, "interrupted", "interrupted during stage {stage}; run the same command again: {resumes}"),
    ((OSError,), 1, "failed", "stage {stage} failed: {why}"),
    ((MissingInput,), 2, "failed", "stage {stage} cannot run: {e}"),  # an input's fault, as before any stage (README: exit codes)
    ((StageFailed, ValueError, RuntimeError, config.ConfigError), 1, "failed", "stage {stage} failed: {e}"),
    ((Exception,), 1, "failed", "stage {stage} failed with an unexpected {name} (the traceback above is for a bug report); "
                                "{manifest} records it as failed"),
)


def done_record(old: dict) -> dict:
    """A stage found done: its status, and its measured time if it has one (no error or start time
    left from a run that stopped)."""
    return {"status": "done", **{k: old[k] for k in ("seconds", "finished", "jobs", "parallel") if k in old}}


def resumes(cfg: config.Config, stage: str | None) -> str:
    """What running the same command again redoes, for the interrupted stage."""
    if stage == "base" and cfg.model.build is not None:
        return (f"the base's pre-training resumes from its last saved step (every {study.BASE_SAVE_EVERY} steps; "
                "from the start if it had not reached the first)")
    if stage in JOB_STAGES:
        return (f"finished jobs are kept, training runs resume from their last checkpoint (every {cfg.train.save_last_every} steps), "
                "evaluations that were under way are redone")
    if stage == "lr-sweep":
        return f"finished candidates are kept, the one under way resumes from its last checkpoint (every {cfg.train.save_last_every} steps)"
    return f"stage {stage} is redone" if stage else "nothing is lost"


def end_states(stages: dict, jobs: dict, status: str, why: str, later: list[str] = ()) -> None:
    """Give every stage and job still recorded as running an end state (`status`, with `why`), and
    what never began (the stages in `later`, stages and jobs still waiting) `not started`, so that
    the manifest never says `running` once no process runs it: done, interrupted, failed and not
    started are the end states."""
    for s in later:
        stages[s] = {"status": "not started", "error": f"not reached: {why}"}
    for part in (stages, jobs):
        for k, v in part.items():
            if v.get("status") == "running":
                part[k] = {**v, "status": status, "error": why}
            elif v.get("status") == "waiting":
                part[k] = {**v, "status": "not started", "error": why}


def under_way(stages: dict, todo: list[str], current: str | None) -> str | None:
    """The stage the pipeline was in when it stopped: the first one recorded as running (in a
    group of job stages, train may be done and eval under way), else the one it had begun."""
    return next((s for s in todo if stages.get(s, {}).get("status") == "running"), current)


def _mark(run: Path, cfg: config.Config, stages: dict, jobs: dict, todo: list[str], stage: str | None, status: str, why: str) -> None:
    """Record how the pipeline ended: the stage it was in, the stages it did not reach, every job
    that was running or waiting. Further signals are ignored while this is written; a read-only
    folder may refuse even this."""
    handlers = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if run.exists():
            if stage is not None and stages.get(stage, {}).get("status") != "done":
                stages[stage] = {**stages.get(stage, {}), "status": status, "error": why, "ended": now()}
            group = JOB_STAGES if stage in JOB_STAGES else ()  # stages run together: done or under way, not "not reached"
            later = [s for s in todo[todo.index(stage) + 1:]
                     if not (s in group and stages.get(s, {}).get("status") in ("running", "done"))] if stage in todo else []
            end_states(stages, jobs, status, why, later)
            write_manifest(run, cfg, stages, jobs)
    except OSError:
        pass
    finally:
        for sig, h in handlers.items():
            signal.signal(sig, h)


def job_stage(name: str) -> str:
    """The stage of a job named as Plan.jobs names it: train many s0 -> train, eval-wide base -> eval."""
    return name.split()[0].split("-")[0]


def run_jobs(plan: Plan, group: list[str], a, stages: dict, jobs_status: dict, aside: Aside) -> int:
    """The train and eval stages as one set of jobs (an evaluation starts when its training run is done)."""
    run, cfg = plan.run, plan.cfg
    jobs = prepare_jobs(plan, group, a, stages, jobs_status, aside)
    if not jobs:
        write_manifest(run, cfg, stages, jobs_status)
        return 0
    for s in group:
        if any(j.stage == s for j in jobs):
            stages[s] = {"status": "waiting"}  # running once its first job starts
    for j in jobs:
        jobs_status[j.name] = job_record(run, j, "waiting")
    write_manifest(run, cfg, stages, jobs_status)
    eta = estimate_seconds(plan.run, jobs, a.jobs, plan.cost_model())
    log(f"{len(jobs)} jobs ({sum(j.stage == 'train' for j in jobs)} training, {sum(j.stage != 'train' for j in jobs)} evaluation), "
        f"{a.jobs} at a time; ETA {fmt_minutes(eta, plan.cost_model())}; again every minute as jobs finish")
    t0 = time.perf_counter()

    def on_start(job: Job) -> None:
        if stages[job.stage].get("status") != "running":
            stages[job.stage] = {"status": "running", "started": now()}
        jobs_status[job.name] = job_record(run, job, "running", started=now())
        write_manifest(run, cfg, stages, jobs_status)

    def on_done(job: Job) -> None:
        jobs_status[job.name] = job_record(run, job, "done")
        if all(jobs_status[j.name]["status"] == "done" for j in jobs if j.stage == job.stage):
            stages[job.stage] = {**stages[job.stage], "status": "done"}  # e.g. every training run: an interrupt now is eval's
        if job.stage == "train":
            from analysis import figures

            try:
                figures.training_figure(run, plan.steps_of())  # look at it while evaluation runs
            except Exception as e:  # a figure must never stop the study; say so
                log(f"training figure not written: {e}")
        write_manifest(run, cfg, stages, jobs_status)

    status = Runner(run, cfg.threads, a.jobs, a.executor, a.ray_address, a.quiet, on_start, on_done, a.gpu_slots,
                    cost=plan.cost_model()).run(jobs)
    return finish_jobs(plan, group, jobs, status, a, stages, jobs_status, round(time.perf_counter() - t0, 1))


def prepare_jobs(plan: Plan, group: list[str], a, stages: dict, jobs_status: dict, aside: Aside) -> list[Job]:
    """Check the group's inputs and outputs (moving aside what is stale, and what --force redoes),
    bring the manifest's job states up to date with the outputs on disk, and return the jobs left."""
    for s in group:  # every input known good before anything is moved aside
        check_inputs(plan, s, a.condition, tuple(group))
    for s in group:
        check_stage(plan, s, a.force, aside)
    if a.force and a.stage in group:
        for path, _, _ in plan.outputs(a.stage):
            if a.stage != "train" or not a.condition or path.name.startswith(f"train_{a.condition}_s"):
                aside.move(path, "--force")
    jobs = plan.jobs(group, a.condition)
    not_done = {j.name for j in (plan.jobs(group) if a.condition else jobs)}  # every condition's, not only --condition's
    design = {j.name: j for j in plan.jobs(group, done_too=True)}
    for name in [k for k in jobs_status if job_stage(k) in group and k not in design]:
        del jobs_status[name]  # a job of another design: its outputs were moved aside (check_stage)
    for name, j in design.items():  # its output is done: so is the job, whatever an earlier run recorded
        if name not in not_done and jobs_status.get(name, {}).get("status") != "done":
            jobs_status[name] = job_record(plan.run, j, "done")
    for s in group:
        if not any(j.stage == s for j in jobs):
            log(f"{s}: done, skipped")
            stages[s] = done_record(stages.get(s, {}))
    return jobs


def finish_jobs(plan: Plan, group: list[str], jobs: list[Job], status: dict, a, stages: dict, jobs_status: dict, sec: float) -> int:
    """Record how each job and stage of the group ended; one line naming what failed (with the
    out-of-memory advice where a job ran out of memory). Returns the exit code."""
    run, cfg = plan.run, plan.cfg
    for name, st in status.items():
        jobs_status[name] = {**jobs_status.get(name, {}), **st}
    failed = [n for n, st in status.items() if st["status"] != "done"]
    not_run = [j.name for j in jobs if j.name not in status]
    for name in not_run:
        jobs_status[name] = {**jobs_status[name], "status": "not started", "error": "it waits for a job that failed"}
    for s in group:
        mine = [j for j in jobs if j.stage == s]
        if mine:
            began = [j for j in mine if j.name in status]
            ok = all(status.get(j.name, {}).get("status") == "done" for j in mine)
            stages[s] = ({"status": "not started", "error": "its jobs wait for jobs that failed"} if not began else
                         {"status": "done" if ok else "failed", "seconds": sec, "finished": now(), "jobs": len(mine), "parallel": a.jobs})
    write_manifest(run, cfg, stages, jobs_status)
    if failed or not_run:
        by_name = {j.name: j for j in jobs}
        oom = [n for n in failed if status[n].get("exit") == study.EXIT_OUT_OF_MEMORY]
        advice = ""
        if oom:
            j = by_name[oom[0]]
            es = j.argv[j.argv.index("--eval-set") + 1] if "--eval-set" in j.argv else "test"
            advice = f"; {oom[0]} ran out of memory: {study.memory_advice(cfg, j.stage, es, base='--adapter' not in j.argv)}"
        print(f"pipeline.py: {len(failed)} job(s) failed ({', '.join(failed)})"
              + (f"; {len(not_run)} not started because they wait for them" if not_run else "")
              + (advice or f"; each job's own line above says why; rerun one by hand: {by_name[failed[0]].command()}" if failed else ""),
              file=sys.stderr)
        return study.EXIT_OUT_OF_MEMORY if oom else 1  # the README's exit 3: out of memory, for the pipeline as for the job
    log(f"{', '.join(group)}: {len(jobs)} jobs done in {sec:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
