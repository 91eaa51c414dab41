"""One pipeline run over a run folder (Session): the lock, the stages in PLAN.md's order, a stage before
the jobs as its `grpo.py` command (run_single), the train/eval/token stages as one set of jobs
(run_jobs), the manifest's states as they change, and how the run ends (ENDINGS: the exit code and
one line). pipeline.py is its command line.
"""

from __future__ import annotations

import signal
import sys
import time
import traceback
from pathlib import Path

from orchestration import cli, config, provenance, study
from runner.folder import Aside, Lock, Refused
from runner.jobs import Job, Runner, Workers, estimate_seconds, fmt_minutes, in_worker, log, now, run_grpo
from runner.manifest import done_record, end_states, job_record, write_manifest
from runner.stage_checks import MissingInput, check_inputs, check_stage, remake_note
from runner.stages import JOB_STAGES, Plan, kept_weights_note

# The training figure is drawn again as training runs finish, at most once a minute (a draw is ~1 s of
# matplotlib), and always once the last one has: the same file as a draw after every run.
FIGURE_EVERY_S = 60.0


def figure_due(stage_done: bool, last_drawn: float, now: float) -> bool:
    """Whether the training figure is drawn after a training run ends: the first time, when the stage is
    done, and otherwise once FIGURE_EVERY_S have passed since the last draw."""
    return stage_done or now - last_drawn >= FIGURE_EVERY_S


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


def done_line(plan: Plan, s: str) -> str:
    """The line for a stage that is done and skipped; for a base or training runs made but whose weights were not
    kept (a committed run), what is missing and when it is made (runner/stages.kept_weights_note)."""
    if s in ("base", "train"):
        states = [plan.state(s, m, h) for _, m, h in plan.outputs(s)]
        note = kept_weights_note(plan, s, states.count("weightless")) if "weightless" in states else None
        if note:
            return f"{s}: {note}; skipped (--force makes them now)"
    return f"{s}: done, skipped"


class Session:
    """One pipeline run over a run folder: it takes the lock, keeps the manifest's stage and job
    states, runs the stages in order, and turns how it ended into an exit code and one line (ENDINGS)."""

    def __init__(self, plan: Plan, todo: list[str], a, gpu_slots: list[str]):
        self.plan, self.todo, self.a = plan, todo, a  # a: pipeline.py's arguments, read only
        self.gpu_slots = gpu_slots  # one GPU per job slot (jobs.assign_gpus); [] on a CPU
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
            end_states(
                self.stages, self.jobs, "interrupted", "the pipeline that ran it ended without saying how (killed?)"
            )
            aside = Aside(run)
            self.opened = True
            rc = self.stages_in_order(aside)
            if rc:
                return rc
            self.current = None
            self.manifest()  # a stage found done after the last one written (analyze) is recorded done too
        except BaseException as e:  # every ending is recorded; ENDINGS says which end as what
            return self.ended(e)
        finally:
            lock.release()
        report = run / "report.md"
        log(
            f"all done in {time.perf_counter() - t_all:.1f} s"
            + (f"; see {report}" if "analyze" in self.todo and report.exists() else "")
        )
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
                rc = run_jobs(plan, group, a, self.stages, self.jobs, aside, self.gpu_slots)
                if rc:
                    how = "interrupted" if rc == cli.EXIT_INTERRUPTED else "failed"
                    end_states(
                        self.stages, self.jobs, how, f"stage {self.current} {how}", todo[todo.index(group[-1]) + 1 :]
                    )
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
            log(done_line(plan, s))
            self.stages[s] = done_record(self.stages.get(s, {}))
            return
        if a.force and a.stage == s:
            for path, _, _ in plan.outputs(s):
                aside.move(path, "--force")
        log(f"{s}: running")
        self.stages[s] = {"status": "running", "started": now()}
        self.manifest()
        t0 = time.perf_counter()
        run_single(s, plan, a.quiet, self.gpu_slots[0] if self.gpu_slots else None)
        self.stages[s] = {"status": "done", "seconds": round(time.perf_counter() - t0, 1), "finished": now()}
        self.manifest()
        log(f"{s}: done in {self.stages[s]['seconds']:.1f} s")

    def ended(self, e: BaseException) -> int:
        """How an exception ends the run: its line, the manifest's states, the exit code (ENDINGS)."""
        run, cfg = self.plan.run, self.plan.cfg
        if isinstance(e, Refused):
            print(f"pipeline.py: {e}", file=sys.stderr)
            return 2
        if (
            isinstance(e, OSError) and not self.opened
        ):  # the run folder itself: not there to make, not writable, read-only
            print(
                f"pipeline.py: cannot write in {run}: {_os_words(e, run)}; give a folder you can write: --run DIR",
                file=sys.stderr,
            )
            return 1
        stage = under_way(self.stages, self.todo, self.current)
        for types, code, status, words in ENDINGS:
            if isinstance(e, types):
                if status == "interrupted":
                    why = "Ctrl-C or a signal"
                elif isinstance(e, OSError):
                    why = _os_words(e, run)
                elif types == (Exception,):
                    why = f"{type(e).__name__}: {e}"
                else:
                    why = str(e)
                _mark(run, cfg, self.stages, self.jobs, self.todo, stage, status, why)
                if types == (Exception,):  # a bug: its traceback is for a report
                    traceback.print_exc()
                print(
                    "pipeline.py: "
                    + words.format(
                        stage=stage,
                        e=e,
                        why=why,
                        resumes=resumes(cfg, stage),
                        name=type(e).__name__,
                        manifest=run / "manifest.json",
                    ),
                    file=sys.stderr,
                )
                return code
        raise e  # SystemExit and the like: not ours to end


def _os_words(e: OSError, run: Path) -> str:
    return (
        f"{e.strerror} ({e.filename or run})" if e.strerror else str(e)
    )  # a system call's error, or ours with a message


# How the pipeline ends, in the order they are tried: the exception types, the exit code, the status the
# stage under way and everything after it get in the manifest, and the one line (Session.ended).
ENDINGS = (
    (
        (KeyboardInterrupt,),
        130,
        "interrupted",
        "interrupted during stage {stage}; run the same command again: {resumes}",
    ),
    ((OSError,), 1, "failed", "stage {stage} failed: {why}"),
    (
        (MissingInput,),
        2,
        "failed",
        "stage {stage} cannot run: {e}",
    ),  # an input's fault, as before any stage (README: exit codes)
    ((StageFailed, ValueError, RuntimeError, config.ConfigError), 1, "failed", "stage {stage} failed: {e}"),
    (
        (Exception,),
        1,
        "failed",
        "stage {stage} failed with an unexpected {name} (the traceback above is for a bug report); "
        "{manifest} records it as failed",
    ),
)


def resumes(cfg: config.Config, stage: str | None) -> str:
    """What running the same command again redoes, for the interrupted stage."""
    if stage == "base" and cfg.model.build is not None:
        return (
            f"the base's pre-training resumes from its last saved step (every {study.BASE_SAVE_EVERY} steps; "
            "from the start if it had not reached the first)"
        )
    if stage in JOB_STAGES:
        return (
            f"finished jobs are kept, training runs resume from their last checkpoint (every {cfg.train.save_last_every} steps), "
            "evaluations under way continue from their last finished sampling call"
        )
    if stage == "lr-sweep":
        return f"finished candidates are kept, the one under way resumes from its last checkpoint (every {cfg.train.save_last_every} steps)"
    return f"stage {stage} is redone" if stage else "nothing is lost"


def under_way(stages: dict, todo: list[str], current: str | None) -> str | None:
    """The stage the pipeline was in when it stopped: the first one recorded as running (in a
    group of job stages, train may be done and eval under way), else the one it had begun."""
    return next((s for s in todo if stages.get(s, {}).get("status") == "running"), current)


def _mark(
    run: Path, cfg: config.Config, stages: dict, jobs: dict, todo: list[str], stage: str | None, status: str, why: str
) -> None:
    """Record how the pipeline ended: the stage it was in, the stages it did not reach, every job
    that was running or waiting. Further signals are ignored while this is written; a read-only
    folder may refuse even this."""
    handlers = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if run.exists():
            if stage is not None and stages.get(stage, {}).get("status") != "done":
                stages[stage] = {**stages.get(stage, {}), "status": status, "error": why, "ended": now()}
            group = (
                JOB_STAGES if stage in JOB_STAGES else ()
            )  # stages run together: done or under way, not "not reached"
            later = (
                [
                    s
                    for s in todo[todo.index(stage) + 1 :]
                    if not (s in group and stages.get(s, {}).get("status") in ("running", "done"))
                ]
                if stage in todo
                else []
            )
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


def run_jobs(
    plan: Plan, group: list[str], a, stages: dict, jobs_status: dict, aside: Aside, gpu_slots: list[str]
) -> int:
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
    log(
        f"{len(jobs)} jobs ({sum(j.stage == 'train' for j in jobs)} training, {sum(j.stage != 'train' for j in jobs)} evaluation), "
        f"{a.jobs} at a time; ETA {fmt_minutes(eta, plan.cost_model())}; again every minute as jobs finish"
    )
    t0 = time.perf_counter()

    def on_start(job: Job) -> None:
        if stages[job.stage].get("status") != "running":
            stages[job.stage] = {"status": "running", "started": now()}
        jobs_status[job.name] = job_record(run, job, "running", started=now())
        write_manifest(run, cfg, stages, jobs_status)

    drawn = [-float("inf")]  # when the training figure was last drawn

    def on_done(job: Job) -> None:
        jobs_status[job.name] = job_record(run, job, "done")
        if all(jobs_status[j.name]["status"] == "done" for j in jobs if j.stage == job.stage):
            stages[job.stage] = {
                **stages[job.stage],
                "status": "done",
            }  # e.g. every training run: an interrupt now is eval's
        if job.stage == "train" and figure_due(stages["train"]["status"] == "done", drawn[0], time.perf_counter()):
            from analysis import figures

            try:
                figures.training_figure(run, plan.steps_of())  # look at it while evaluation runs
                drawn[0] = time.perf_counter()
            except Exception as e:  # a figure must never stop the study; say so
                log(f"training figure not written: {e}")
        write_manifest(run, cfg, stages, jobs_status)

    workers = Workers(a.jobs, cfg.threads, a.executor, a.ray_address, tuple(gpu_slots or ()))
    status = Runner(
        run,
        workers,
        a.quiet,
        on_start,
        on_done,
        cost=plan.cost_model(),
        train_flags=("--tensorboard",) if getattr(a, "tensorboard", False) else (),
    ).run(jobs)
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
    not_done = {
        j.name for j in (plan.jobs(group) if a.condition else jobs)
    }  # every condition's, not only --condition's
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


def finish_jobs(
    plan: Plan, group: list[str], jobs: list[Job], status: dict, a, stages: dict, jobs_status: dict, sec: float
) -> int:
    """Record how each job and stage of the group ended; one line naming what failed (with the
    out-of-memory advice where a job ran out of memory) or what a signal stopped. Returns the exit code
    (1, or 3 for out of memory, where a job failed; 130 where jobs were only stopped)."""
    run, cfg = plan.run, plan.cfg
    for name, st in status.items():
        jobs_status[name] = {**jobs_status.get(name, {}), **st}
    stopped = [n for n, st in status.items() if st["status"] == "interrupted"]  # a signal reached the job alone
    failed = [n for n, st in status.items() if st["status"] not in ("done", "interrupted")]
    not_run = [j.name for j in jobs if j.name not in status]
    how = "failed" if failed else "interrupted"  # the stages' end, as the exit code says
    for name in not_run:
        jobs_status[name] = {
            **jobs_status[name],
            "status": "not started",
            "error": "it waits for a job that did not finish",
        }
    for s in group:
        mine = [j for j in jobs if j.stage == s]
        if mine:
            began = [j for j in mine if j.name in status]
            ends = {status.get(j.name, {}).get("status") for j in mine}
            stages[s] = (
                {"status": "not started", "error": "its jobs wait for jobs that did not finish"}
                if not began
                else {
                    "status": "done" if ends == {"done"} else how,
                    "seconds": sec,
                    "finished": now(),
                    "jobs": len(mine),
                    "parallel": a.jobs,
                }
            )
    write_manifest(run, cfg, stages, jobs_status)
    if not (failed or stopped or not_run):
        log(f"{', '.join(group)}: {len(jobs)} jobs done in {sec:.1f} s")
        return 0
    by_name = {j.name: j for j in jobs}
    oom = [n for n in failed if status[n].get("exit") == study.EXIT_OUT_OF_MEMORY]
    parts = []
    if failed:
        parts.append(f"{len(failed)} job(s) failed ({', '.join(failed)})")
    if stopped:
        parts.append(f"{len(stopped)} job(s) stopped by a signal ({', '.join(stopped)})")
    if not_run:
        parts.append(f"{len(not_run)} not started because they wait for them")
    if oom:
        j = by_name[oom[0]]
        es = j.argv[j.argv.index("--eval-set") + 1] if "--eval-set" in j.argv else "test"
        parts.append(
            f"{oom[0]} ran out of memory: {study.memory_advice(cfg, j.stage, es, base='--adapter' not in j.argv)}"
        )
    elif failed:
        parts.append(f"each job's own line above says why; rerun one by hand: {by_name[failed[0]].command()}")
    else:
        parts.append("the same pipeline command again resumes them")
    print(f"pipeline.py: {'; '.join(parts)}", file=sys.stderr)
    if failed:  # the README's exit 3: out of memory, for the pipeline as for the job
        return study.EXIT_OUT_OF_MEMORY if oom else 1
    return cli.EXIT_INTERRUPTED
