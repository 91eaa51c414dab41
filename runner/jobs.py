"""Running the pipeline's jobs: a job is the `grpo.py` command a user could type; the runner runs
them in the registry's order, N at a time in worker processes or on a Ray cluster, each once the
jobs it waits for are done, with an ETA from the run's measured times (the run folder's lock and
move-aside are runner/folder.py's). This module imports no torch: with --jobs 1 a job's grpo.py runs
in this process, with N > 1 in a worker.
"""

from __future__ import annotations

import os
import runpy
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestration import cli, config, eval_resume, provenance, study

ROOT = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(f"[pipeline {time.strftime('%H:%M:%S')}] {msg}", flush=True)


now = provenance.now  # the manifest's time stamps


@dataclass
class Job:
    """One unit of work: the `grpo.py` command that makes `outputs`."""

    stage: str  # train | eval | tokens
    name: str  # e.g. "train many s0", "eval many s0 step 50", "eval base", "eval-wide base", "tokens many s0 step 50"
    argv: list[str]  # grpo.py's arguments
    needs: list[str] = field(default_factory=list)  # names of jobs that must finish first
    steps: int = 0  # training steps (for the ETA)
    samples: int = 0  # responses an evaluation draws (for the ETA)
    output: str = ""  # what it writes: an eval or tokens file, a training run's folder

    def command(self) -> str:
        return " ".join(shlex.quote(x) for x in ["python", "grpo.py", *self.argv])


def run_grpo(argv: list[str]) -> int:
    """A job: grpo.py's main(argv), the work of `python grpo.py <argv>`, in this process (a worker's), so
    torch is imported once per worker, not once per job. grpo.py is loaded by its path, not imported (the
    runner sits below the entry scripts), and not as __main__: a Ctrl-C is not the job's to report but
    reaches the pipeline, which records the run as interrupted. Returns the command's exit code."""
    try:
        return runpy.run_path(str(ROOT / "grpo.py"), run_name="grpo")["main"](argv)
    except SystemExit as e:  # argparse's own exits
        if isinstance(e.code, int):
            return e.code
        return 0 if e.code is None else 1


@dataclass(frozen=True)
class Workers:
    """Where a Runner's jobs run: n at a time (1: in this process; more: n worker processes, or ray's tasks at
    ray_address), each with `threads` threads (0: torch's default) and on GPUs one of `gpus` per worker."""

    n: int = 1
    threads: int = 0
    executor: str = "local"
    ray_address: str | None = None
    gpus: tuple[str, ...] = ()


class Runner:
    """Runs jobs in the registry's order, up to `n` at a time, each once the jobs it needs are
    done. n == 1 runs each job in this process; n > 1 in a pool of n worker processes. Either
    way a job is grpo.py's main run in-process (run_grpo) with the argv of the command a user would type. Prints what is
    running, done and left, with an ETA from the measured step and evaluation times."""

    def __init__(
        self,
        run: Path,
        workers: Workers,
        quiet: bool,
        on_start,
        on_done,
        cost=None,
        train_flags: tuple[str, ...] = (),
    ):
        self.folder, self.quiet = run, quiet
        self.threads, self.n, self.executor = workers.threads, workers.n, workers.executor
        self.train_flags = list(train_flags)  # added to every training job's command (--tensorboard)
        self.on_start, self.on_done = on_start, on_done
        self.gpus = list(workers.gpus)  # one per worker (assign_gpus); none on a CPU
        self.ray_address = workers.ray_address
        self.cost = cost  # cost_model.CostModel for what is not measured yet (GPU configs), or None
        self.report_every = 60.0  # seconds between progress lines (running, done, left, the ETA again)

    def argv(self, job: Job) -> list[str]:
        quiet = ["--quiet"] if (self.quiet or self.n > 1 or self.executor == "ray") else []
        return job.argv + quiet + (self.train_flags if job.stage == "train" else [])

    def run(self, jobs: list[Job]) -> dict[str, dict]:
        if self.executor == "ray":
            return self._run_ray(jobs)
        if self.n == 1:
            if self.gpus:
                os.environ["CUDA_VISIBLE_DEVICES"] = self.gpus[0]  # read when CUDA starts, which no job has done yet
            return self._schedule(jobs, None)
        pool = worker_pool(self.n, self.gpus)
        try:
            return self._schedule(jobs, pool)
        except BaseException:
            for proc in list(getattr(pool, "_processes", {}).values()):  # Ctrl-C: stop the workers now;
                proc.terminate()  # each training run keeps its last checkpoint
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _schedule(self, jobs: list[Job], pool) -> dict[str, dict]:
        from concurrent.futures import FIRST_COMPLETED, wait

        status: dict[str, dict] = {}
        waiting = list(jobs)
        running: dict = {}  # future -> job
        started: dict[str, float] = {}
        last_report = time.perf_counter()
        while waiting or running:
            ok = {k for k, v in status.items() if v["status"] == "done"}
            failed = len(ok) < len(status)
            ready = [] if failed else [j for j in waiting if all(x in ok for x in j.needs)]
            if not ready and not running:
                break  # what is left waits for a job that failed
            for job in ready[: self.n - len(running)]:
                waiting.remove(job)
                started[job.name] = time.perf_counter()
                log(f"start {job.name}")
                self.on_start(job)
                if pool is None:  # in this process, one at a time
                    status[job.name] = self._finish(job, run_grpo(self.argv(job)), started)
                    break
                running[pool.submit(run_grpo, self.argv(job))] = job
            if running:
                finished, _ = wait(list(running), timeout=60, return_when=FIRST_COMPLETED)
                for fut in finished:
                    job = running.pop(fut)
                    status[job.name] = self._finish(job, fut.result(), started)
            if time.perf_counter() - last_report > self.report_every and (
                waiting or running
            ):  # the ETA, from the times measured so far
                last_report = time.perf_counter()
                self.progress(jobs, status, [j.name for j in running.values()])
        return status

    def _finish(self, job: Job, rc: int, started: dict[str, float]) -> dict:
        sec = round(time.perf_counter() - started[job.name], 1)
        if rc == 0:
            log(f"done  {job.name} ({sec:.0f} s)")
            self.on_done(job)
            return {"status": "done", "seconds": sec, "finished": now()}
        if rc == cli.EXIT_INTERRUPTED:  # a signal reached the job's own grpo.py (--executor ray: a node's time limit)
            log(f"STOPPED {job.name} (interrupted, exit {rc}); the same command resumes it: {job.command()}")
            return {"status": "interrupted", "seconds": sec, "exit": rc}
        why = (
            "out of memory: its line above names the memory it had and the settings that lower it"
            if rc == study.EXIT_OUT_OF_MEMORY
            else f"exit {rc}"
        )
        log(f"FAILED {job.name} ({why}); rerun it by hand: {job.command()}")
        return {"status": "failed", "seconds": sec, "exit": rc}

    def progress(self, jobs: list[Job], status: dict[str, dict], running: list[str]) -> None:
        left = [j for j in jobs if j.name not in status and j.name not in running]
        done = sum(v["status"] == "done" for v in status.values())
        eta = estimate_seconds(self.folder, [j for j in jobs if j.name not in status], self.n, self.cost)
        log(
            f"jobs: running {', '.join(running) or '-'}; done {done}/{len(jobs)}; waiting {len(left)}; "
            f"ETA {fmt_minutes(eta, self.cost)}"
        )

    def _run_ray(self, jobs: list[Job]) -> dict[str, dict]:
        """The same commands on a Ray cluster (ray.init(address=...); an embedded local Ray when
        no address is given). Each task runs `python grpo.py ...` in this repository's folder,
        which must be the same path on every node (a shared file system)."""
        try:
            import ray
        except ImportError:
            raise config.ConfigError("--executor ray: ray is not installed (pip install -r requirements-optional.txt)")
        ray.init(address=self.ray_address, ignore_reinit_error=True, log_to_driver=False)

        @ray.remote(
            num_cpus=max(1, self.threads), num_gpus=1 if self.gpus else 0
        )  # Ray sets CUDA_VISIBLE_DEVICES itself
        def run_job(argv: list[str]) -> int:
            return subprocess.run([sys.executable, str(ROOT / "grpo.py"), *argv], cwd=ROOT).returncode

        status: dict[str, dict] = {}
        refs: dict[str, object] = {}
        started: dict[str, float] = {}
        waiting = list(jobs)
        by_ref: dict = {}
        try:
            while waiting or refs:
                done_names = {k for k, v in status.items() if v["status"] == "done"}
                for job in [j for j in waiting if all(x in done_names for x in j.needs)]:
                    waiting.remove(job)
                    started[job.name] = time.perf_counter()
                    log(f"submit {job.name}")
                    self.on_start(job)
                    refs[job.name] = run_job.remote(self.argv(job))
                    by_ref[job.name] = job
                if not refs:
                    break  # the rest wait for jobs that failed
                ready, _ = ray.wait(list(refs.values()), num_returns=1)
                for name, ref in list(refs.items()):
                    if ref in ready:
                        del refs[name]
                        status[name] = self._finish(by_ref[name], ray.get(ref), started)
        finally:
            for ref in refs.values():
                ray.cancel(ref, force=True)
        return status


def visible_gpus() -> list[str]:
    """The GPUs this process may use, found without torch: CUDA_VISIBLE_DEVICES when it is set,
    else one id per line of `nvidia-smi -L`, else none (a CPU machine)."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return [g for g in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip() and g.strip() != "-1"]
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(listed.splitlines()) if line.startswith("GPU ")]


def assign_gpus(n: int, gpus: list[str]) -> list[str]:
    """One GPU per worker: the first n of `gpus` (never two workers on one GPU unless `gpus` names
    one twice, as --gpus 0,0 asks). Raises ConfigError when there are fewer than n."""
    if not gpus:
        return []
    if len(gpus) < n:
        raise config.ConfigError(
            f"--jobs {n} with {len(gpus)} GPU(s) ({','.join(gpus)}): a job needs a GPU of its own; "
            f"use --jobs {len(gpus)}, or name a GPU twice to share it (--gpus {','.join(gpus + gpus[:1])})"
        )
    return gpus[:n]


def in_worker(fn, *args, gpu: str | None = None):
    """fn(*args) in a fresh worker process that sees only `gpu` (CUDA_VISIBLE_DEVICES, set before
    anything there starts CUDA), or here when gpu is None. The pipeline runs its single stages so
    when it has GPUs: CUDA reads CUDA_VISIBLE_DEVICES once, when it starts, so a stage run in this
    process would land on the first visible GPU and keep a context and its cached memory there
    while the workers use their own."""
    if gpu is None:
        return fn(*args)
    pool = worker_pool(1, [gpu])
    try:
        return pool.submit(fn, *args).result()
    except BaseException:
        for proc in list(getattr(pool, "_processes", {}).values()):  # Ctrl-C: stop the worker now
            proc.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _claim_gpu(slots) -> None:
    """A worker's initializer: this worker's GPU, before anything in it starts CUDA."""
    os.environ["CUDA_VISIBLE_DEVICES"] = slots.get()


def worker_pool(n: int, gpus: list[str]):
    """n worker processes, started fresh (spawn: no forked torch state), each seeing only its own
    GPU of `gpus` when there are any."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("spawn")
    if not gpus:
        return ProcessPoolExecutor(max_workers=n, mp_context=ctx)
    slots = ctx.Queue()
    for g in gpus:
        slots.put(g)
    return ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_claim_gpu, initargs=(slots,))


def train_seconds_per_step(run: Path) -> float | None:
    """The median measured seconds per training step in this run so far (sweep or training logs)."""
    import statistics

    secs = []
    for f in list(run.glob("train_*/train_log.csv")) + list(run.glob("lr_sweep/lr_*/train_log.csv")):
        try:
            secs += [float(r["sec_sampling"]) + float(r["sec_fwd_bwd"]) for r in provenance.read_csv_rows(f)]
        except (OSError, KeyError, ValueError):
            continue
    return statistics.median(secs) if secs else None


def estimate_seconds(run: Path, jobs: list[Job], n: int, cost=None) -> tuple[float, list[str], float | None]:
    """Seconds left for `jobs` on n workers, from this run's measured step and evaluation times;
    the kinds of job nothing has been measured for yet (left out of that figure); and for those,
    on a GPU config, the cost model's bound in seconds on its device and on an H200's class
    (cost_model.CostModel.both; None without one)."""
    sps = train_seconds_per_step(run)
    per = [
        d["seconds"] / (d["n_problems"] * d["sampling"]["n"])
        for f in run.glob("eval_*.json")
        if (d := provenance.read_json(f)) and "seconds" in d and "n_problems" in d
    ]
    per_sample = sum(per) / len(per) if per else None
    total, unknown, bound, fast = 0.0, set(), 0.0, 0.0
    for j in jobs:
        if j.stage == "train" and sps is not None:
            rows = provenance.read_json(study.train_dir(run, *_cond_seed(j)) / "last" / "state.json")
            total += (j.steps - (rows or {}).get("step", 0)) * sps
        elif j.stage != "train" and per_sample is not None:
            done = eval_resume.progress(j.output) if j.stage == "eval" else None  # calls an earlier run finished
            total += per_sample * j.samples * (1 - done[0] / done[1] if done else 1)
        else:
            unknown.add("training" if j.stage == "train" else "evaluation")
            if cost is not None:
                b = cost.both(lambda c: c.job(j))
                bound, fast = bound + b[0], fast + b[1]
    return (
        total / max(1, n),
        sorted(unknown),
        ((bound / max(1, n), fast / max(1, n)) if cost is not None and unknown else None),
    )


def _cond_seed(job: Job) -> tuple[str, int]:
    a = job.argv
    return a[a.index("--condition") + 1], int(a[a.index("--seed") + 1])


def fmt_minutes(est: tuple, cost=None) -> str:
    """An estimate_seconds figure as text: the measured part, and what is not measured yet (with the
    cost model's range, labelled an estimate, where there is one)."""
    sec, unknown, bound = (tuple(est) + (None,))[:3]
    if sec >= 2 * 3600:
        text = f"~{sec / 3600:.1f} h"
    elif sec >= 60:
        text = f"~{sec / 60:.0f} min"
    else:
        text = f"~{sec:.0f} s"
    if not unknown:
        return text
    kinds = " and ".join(unknown)
    first = " and ".join(
        {"training": "the first training step", "evaluation": "the first evaluation"}[k] for k in unknown
    )
    left = (
        f"{kinds} not measured yet, {cost.describe(bound)}"
        if cost is not None and bound is not None
        else f"{kinds} not measured yet (measured once {first} {'have' if len(unknown) > 1 else 'has'} run)"
    )
    return left if sec == 0 else f"{text}, plus {left}"
