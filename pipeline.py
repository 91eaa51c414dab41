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

One folder, one study. A stage is done when its outputs record the hash of the config keys and
input files it depends on. An output that records other *settings* was made under another
config: every stage refuses to overwrite it (one line naming the file and the setting; exit 2)
unless --force is given. An output whose settings agree but whose *inputs* changed (a stage
upstream was redone) is out of date: it is moved aside to RUN/superseded/<time>/ and redone, as
are evaluations of adapters that no longer exist. A lock file keeps a second pipeline out of
the folder. Every output is written atomically and training resumes from its last checkpoint,
so a run killed at any point and started again ends with the same adapters, counts and verdicts
as one that never stopped (time stamps and timings aside). RUN/manifest.json records the config,
PLAN.md's sha256, the code revision, package versions, and each stage's and job's status and
wall time.
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path

import config
import provenance
import study
from jobs import (Aside, Job, Lock, Refused, Runner, assign_gpus, estimate_seconds, fmt_minutes, in_worker, log, now, run_grpo,
                  visible_gpus)
from stages import JOB_STAGES, STAGES, Plan, check_stage, registered_stages

ROOT = Path(__file__).resolve().parent


def write_manifest(run: Path, cfg: config.Config, stages: dict, jobs: dict) -> None:
    provenance.atomic_write_json(run / "manifest.json", {
        "config": config.to_dict(cfg), "config_hash": config.digest(config.to_dict(cfg)),
        "plan_sha256": provenance.file_sha256(ROOT / "PLAN.md"), "revision": provenance.code_revision(), "versions": provenance.versions(),
        "stage_order": registered_stages(cfg), "stages": stages, "jobs": jobs,
    })


# ============================================================================= single stages


def run_single(stage: str, plan: Plan, quiet: bool, gpu: str | None = None) -> None:
    """A stage before the jobs (base, probe, select, lr-sweep) is its `grpo.py` command, run in
    this process, or with a GPU in a worker that sees only that one (jobs.in_worker); analyze is
    analyze_b.py's."""
    cfg, run = plan.cfg, plan.run
    if stage == "analyze":
        import analyze_b
        import report

        out = analyze_b.run_analysis(run)
        print(report.headline(out), flush=True)
        return
    if stage == "lr-sweep" and cfg.train.lr is not None:
        log(f"lr-sweep: not needed, train.lr = {cfg.train.lr:g} is set in the config")
        return
    argv = plan.base_argv(stage) + (["--quiet"] if quiet else [])
    rc = in_worker(run_grpo, argv, gpu=gpu)
    if rc != 0:
        raise RuntimeError(f"`{Job(stage, stage, argv).command()}` exited with code {rc}")


# ============================================================================= main


def dry_run(plan: Plan, todo: list[str], n: int) -> None:
    print(f"run folder: {plan.run}")
    for s in todo:
        if s in JOB_STAGES:
            states = [plan.state(s, m, h) for _, m, h in plan.outputs(s)]
            counts = {k: states.count(k) for k in ("done", "missing", "damaged", "stale", "foreign") if states.count(k)}
            state = "done" if counts.get("done") == len(states) else ", ".join(f"{v} {k}" for k, v in counts.items())
        elif s == "analyze":
            state = "done" if plan.analyze_done() else ("out of date" if (plan.run / "verdicts.json").exists() else "to do")
        else:
            states = [plan.state(s, m, h) for _, m, h in plan.outputs(s)]
            state = ("done" if all(x == "done" for x in states) else "made under other settings (would refuse; --force)"
                     if "foreign" in states else "damaged (would be redone)" if "damaged" in states
                     else "out of date (made from other inputs)" if "stale" in states else "to do")
        print(f"  {s:<9} {state}")
    left = plan.jobs(todo)
    eta = estimate_seconds(plan.run, left, n)
    print(f"  {len(left)} train/eval jobs left; estimated {fmt_minutes(eta)} with --jobs {n} (from this run's measured "
          "step and evaluation times)")


def print_jobs(plan: Plan, todo: list[str], config_path: str, out: Path, sets: list[str]) -> None:
    """What is left, as shell commands, grouped by what they wait for."""
    def pipe(stage: str) -> str:
        return " ".join(shlex.quote(x) for x in ["python", "pipeline.py", "--config", config_path, "--out", str(out),
                                                    *sum((["--set", s] for s in sets), []), "--stage", stage])

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
        print(" ".join(shlex.quote(x) for x in ["python", "pipeline.py", "--config", config_path, "--out", str(out),
                                                 *sum((["--set", s] for s in sets), [])]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run the study's stages in PLAN.md's order.")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/smoke.yaml")
    p.add_argument("--out", default=None, help="run folder (default: results/<config name>)")
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
    a = p.parse_args(argv)
    try:
        cfg = config.load(a.config, a.set)
        if a.condition and a.stage != "train":
            raise config.ConfigError("--condition goes with --stage train")
        if a.condition and a.condition not in cfg.conditions:
            raise config.ConfigError(f"--condition {a.condition!r}: not registered in conditions ({', '.join(cfg.conditions)})")
        if a.jobs < 1:
            raise config.ConfigError(f"--jobs {a.jobs}: must be >= 1")
        gpus = [] if cfg.device == "cpu" else [g.strip() for g in a.gpus.split(",")] if a.gpus else visible_gpus()
        a.gpu_slots = assign_gpus(a.jobs, gpus) if a.executor == "local" else gpus
        study.check_model_reachable(cfg)  # before anything is written
    except config.ConfigError as e:
        print(f"pipeline.py: {e}", file=sys.stderr)
        return 2
    run = Path(a.out) if a.out else ROOT / "results" / Path(a.config).stem
    plan = Plan(cfg, run, a.config, a.set)
    todo = [a.stage] if a.stage else registered_stages(cfg)
    if a.dry_run or a.print_jobs:
        if not run.exists():
            print(f"# run folder {run} does not exist yet: every stage is to do")
        if a.dry_run:
            dry_run(plan, todo, a.jobs)
        else:
            print_jobs(plan, todo, a.config, run, a.set)
        return 0

    def terminated(signum, frame):  # a scheduler's time limit (Slurm sends SIGTERM first), a closed terminal: end as Ctrl-C does
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, terminated)
    lock = Lock(run)
    stages: dict = {}
    jobs_status: dict = {}
    current = None
    t_all = time.perf_counter()
    try:
        run.mkdir(parents=True, exist_ok=True)
        lock.acquire()
        old = provenance.read_json(run / "manifest.json") or {}
        stages, jobs_status = old.get("stages", {}), old.get("jobs", {})
        end_states(stages, jobs_status, "interrupted", "the pipeline that ran it ended without saying how (killed?)")
        aside = Aside(run)
        i = 0
        while i < len(todo):
            s = todo[i]
            current = s
            if s in JOB_STAGES:
                group = [x for x in todo[i:] if x in JOB_STAGES]
                i += len(group)
                rc = run_jobs(plan, group, a, stages, jobs_status, aside)
                if rc:
                    end_states(stages, jobs_status, "failed", f"stage {current} failed", todo[i:])
                    write_manifest(run, cfg, stages, jobs_status)
                    return rc
                continue
            i += 1
            check_stage(plan, s, a.force, aside)
            if plan.done(s) and not (a.force and a.stage == s):
                log(f"{s}: done, skipped")
                stages[s] = {**stages.get(s, {}), "status": "done"}
                continue
            if a.force and a.stage == s:
                for path, _, _ in plan.outputs(s):
                    aside.move(path, "--force")
            log(f"{s}: running")
            stages[s] = {"status": "running", "started": now()}
            write_manifest(run, cfg, stages, jobs_status)
            t0 = time.perf_counter()
            run_single(s, plan, a.quiet, a.gpu_slots[0] if a.gpu_slots else None)
            stages[s] = {"status": "done", "seconds": round(time.perf_counter() - t0, 1), "finished": now()}
            write_manifest(run, cfg, stages, jobs_status)
            log(f"{s}: done in {stages[s]['seconds']:.1f} s")
        current = None
    except Refused as e:
        print(f"pipeline.py: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        current = under_way(stages, todo, current)
        _mark(run, cfg, stages, jobs_status, todo, current, "interrupted", "Ctrl-C or a signal")
        print(f"pipeline.py: interrupted during stage {current}; run the same command again: {resumes(cfg, current)}", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError, RuntimeError, config.ConfigError) as e:
        current = under_way(stages, todo, current)
        _mark(run, cfg, stages, jobs_status, todo, current, "failed", str(e))
        print(f"pipeline.py: stage {current} failed: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        current = under_way(stages, todo, current)
        _mark(run, cfg, stages, jobs_status, todo, current, "failed", str(e))
        print(f"pipeline.py: stage {current} failed: {e.strerror or e} ({e.filename or run})", file=sys.stderr)
        return 1
    finally:
        lock.release()
    log(f"all done in {time.perf_counter() - t_all:.1f} s; see {run / 'report.md'}")
    return 0


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
    """Give every stage and job still recorded as running or waiting an end state (`status`, with
    `why`), and the stages in `later` (not reached) the same, so that the manifest never says
    `running` once no process runs it: done, interrupted and failed are the only end states."""
    for s in later:
        stages[s] = {"status": status, "error": f"not reached: {why}"}
    for s, v in stages.items():
        if v.get("status") in ("running", "waiting"):
            stages[s] = {**v, "status": status, "error": why}
    for k, v in jobs.items():
        if v.get("status") in ("running", "waiting"):
            jobs[k] = {**v, "status": status, "error": why if v["status"] == "running" else f"not started: {why}"}


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


def run_jobs(plan: Plan, group: list[str], a, stages: dict, jobs_status: dict, aside: Aside) -> int:
    """The train and eval stages as one set of jobs (an evaluation starts when its training run is done)."""
    run, cfg = plan.run, plan.cfg
    for s in group:
        check_stage(plan, s, a.force, aside)
    if a.force and a.stage in group:
        for path, _, _ in plan.outputs(a.stage):
            if a.stage != "train" or not a.condition or path.name.startswith(f"train_{a.condition}_s"):
                aside.move(path, "--force")
    if "train" not in group:
        missing = [str(ad) for _, _, ad in plan.evals() + [(None, *x) for x in plan.tokens()]
                   if ad is not None and not (ad / "adapter_model.safetensors").exists()]
        if missing:
            raise FileNotFoundError(f"{missing[0]} is missing: run the train stage first")
    jobs = plan.jobs(group, a.condition)
    for s in group:
        if not any(j.stage == s for j in jobs):
            log(f"{s}: done, skipped")
            stages[s] = {**stages.get(s, {}), "status": "done"}
    if not jobs:
        write_manifest(run, cfg, stages, jobs_status)
        return 0
    for s in group:
        if any(j.stage == s for j in jobs):
            stages[s] = {"status": "running", "started": now()}
    for j in jobs:
        jobs_status[j.name] = {"status": "waiting", "command": j.command()}
    write_manifest(run, cfg, stages, jobs_status)
    eta = estimate_seconds(plan.run, jobs, a.jobs)
    log(f"{len(jobs)} jobs ({sum(j.stage == 'train' for j in jobs)} training, {sum(j.stage != 'train' for j in jobs)} evaluation), "
        f"{a.jobs} at a time; ETA {fmt_minutes(eta)}")
    t0 = time.perf_counter()

    def on_start(job: Job) -> None:
        jobs_status[job.name] = {"status": "running", "command": job.command(), "started": now()}
        write_manifest(run, cfg, stages, jobs_status)

    def on_done(job: Job) -> None:
        jobs_status[job.name] = {"status": "done", "command": job.command()}
        if all(jobs_status[j.name]["status"] == "done" for j in jobs if j.stage == job.stage):
            stages[job.stage] = {**stages[job.stage], "status": "done"}  # e.g. every training run: an interrupt now is eval's
        if job.stage == "train":
            import figures

            try:
                figures.training_figure(run, plan.steps_of())  # look at it while evaluation runs
            except Exception as e:  # a figure must never stop the study; say so
                log(f"training figure not written: {e}")
        write_manifest(run, cfg, stages, jobs_status)

    status = Runner(run, cfg.threads, a.jobs, a.executor, a.ray_address, a.quiet, on_start, on_done, a.gpu_slots).run(jobs)
    for name, st in status.items():
        jobs_status[name] = {**jobs_status.get(name, {}), **st}
    failed = [n for n, st in status.items() if st["status"] != "done"]
    not_run = [j.name for j in jobs if j.name not in status]
    for name in not_run:
        jobs_status[name] = {**jobs_status[name], "status": "failed", "error": "not started: it waits for a job that failed"}
    sec = round(time.perf_counter() - t0, 1)
    for s in group:
        mine = [j for j in jobs if j.stage == s]
        if mine:
            ok = all(status.get(j.name, {}).get("status") == "done" for j in mine)
            stages[s] = {"status": "done" if ok else "failed", "seconds": sec, "finished": now(),
                         "jobs": len(mine), "parallel": a.jobs}
    write_manifest(run, cfg, stages, jobs_status)
    if failed or not_run:
        print(f"pipeline.py: {len(failed)} job(s) failed ({', '.join(failed)})"
              + (f"; {len(not_run)} not run because they wait for them" if not_run else ""), file=sys.stderr)
        return 1
    log(f"{', '.join(group)}: {len(jobs)} jobs done in {sec:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
