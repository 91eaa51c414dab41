"""One part of a study that does not fit one sitting (PLAN_CHANGES.md changes 62, 63 and 78): what
`pipeline.py --print-jobs` says is left, run on --jobs workers until a deadline, in units that a later
part, in a fresh clone, continues from what was committed.

    python pipeline.py --config configs/smollm2_v2.yaml --run results/smollm2_v2 --until 03:48
    python pipeline.py --config configs/qwen05b.yaml --run results/qwen05b_run1 --hours 10   # one night
    python bench/study_part.py ... (the same, at the path PLAN_CHANGES.md changes 62-64 and 77 cite)

The units: the stages of step 1 first (each skips what is done; in a fresh clone the base is built
again); then a *seed*, a training run and its adapter's evaluations and token comparisons, one after
another, started only where its training (the longest training any part of this run has measured, else
--train-hours) ends before the deadline: training's resume point is not committed, so a training run cut
in the middle is lost; the seed's evaluations then resume call by call across parts
(orchestration/eval_resume.py) and are stopped with SIGINT at the deadline, as are the evaluations with
no adapter (the base's): a later part continues them where the adapter is committed (or made again the
same); a seed whose training is done is its evaluations alone. Worker 0 takes the base's evaluations
first, the others seeds (with --jobs 1, seeds wait for the base's evaluations); a worker with no seed
that fits takes what resumes. A part never runs the analysis: the pipeline does, in the last part, once
nothing else is left. Ctrl-C starts no new job and stops a resumable one as the deadline does.

RUN/parts/part_<N>.log records the part: the code revision, the machine (orchestration/provenance.py's
record) and each job's start, end and exit status, a line each as it happens. Each job's own output
goes to RUN/parts/part_<N>/<job>.out. Exit 0 when every job started ended well or was stopped at the
deadline, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from orchestration import provenance, study

ROOT = Path(__file__).resolve().parents[1]


def option(argv: list[str], name: str) -> str | None:
    """The value of `name` in an argv list (--print-jobs quotes paths for the shell: read after shlex.split)."""
    return argv[argv.index(name) + 1] if name in argv else None


def left(config: str, run: str) -> tuple[list[str], list[tuple[str, list[str]]], list[tuple[str, str]]]:
    """(step 1's commands, the seeds as (name, [its training command if not trained, its adapter's
    evaluations and token comparisons]), the evaluations with no adapter as (name, command)) from
    `pipeline.py --print-jobs`; a line it does not know stops the tool, so nothing listed is left out."""
    out = subprocess.run(
        [sys.executable, "pipeline.py", "--config", config, "--run", run, "--print-jobs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        sys.exit(
            f"pipeline.py: a part reads --print-jobs, which failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    first, seeds, resumable = [], {}, []
    lines = [x for x in out.stdout.splitlines() if x.strip() and not x.startswith("#")]
    for line in lines:
        argv = shlex.split(line)
        script, command = argv[1], (argv[2] if len(argv) > 2 else None)
        if script == "pipeline.py" and "--stage" in argv:
            first.append(line)
        elif script == "pipeline.py":
            continue  # the analysis, once nothing else is left: the last part runs the pipeline itself
        elif script == "grpo.py" and command == "train":
            seeds.setdefault(f"{option(argv, '--condition')}_s{option(argv, '--seed')}", []).append(line)
        elif script == "grpo.py" and command in ("eval", "tokens") and option(argv, "--adapter"):
            who = study.adapter_identity(option(argv, "--adapter"))
            seeds.setdefault(f"{who['condition']}_s{who['train_seed']}", []).append(line)
        elif script == "grpo.py" and command == "eval":
            eval_set = option(argv, "--eval-set")
            resumable.append(("eval_base" + (f"_{eval_set}" if eval_set else ""), line))
        else:
            sys.exit(f"pipeline.py: a line of --print-jobs this tool does not know, so it would be left out: {line}")
    return first, list(seeds.items()), resumable


START = re.compile(r"start (\S+): (.*)$")
END = re.compile(r"end (\S+) rc=0 in (\d+) s$")


def measured_train_s(run: Path) -> float | None:
    """The longest training run any part of this run measured (a `grpo.py train` job that ended with
    rc 0), in seconds; None before the first."""
    lengths = []
    for log in run.glob("parts/part_*.log"):
        started = {}
        for line in log.read_text().splitlines():
            if m := START.search(line):
                started[m[1]] = m[2]
            elif (m := END.search(line)) and " grpo.py train " in f" {started.get(m[1], '')} ":
                lengths.append(float(m[2]))
    return max(lengths) if lengths else None


def trains(commands: list[str]) -> bool:
    """Does a seed's unit still hold its training run (its first command)?"""
    return bool(commands) and commands[0].startswith("python grpo.py train ")


def admits(commands: list[str], now: float, deadline: float, train_s: float) -> bool:
    """May a seed start now? Where it still trains, only if its training ends before the deadline."""
    return now + (train_s if trains(commands) else 0) <= deadline


def resumes(command: str) -> bool:
    """An evaluation resumes call by call across parts; a training run or a token comparison does not."""
    return command.startswith("python grpo.py eval ")


class Part:
    def __init__(self, run: Path, deadline: float, train_s: float):
        self.deadline, self.train_s, self.lock, self.failed = deadline, train_s, threading.Lock(), False
        self.stop = threading.Event()  # Ctrl-C: no new job; a resumable one is stopped as at the deadline
        # Started in the background of a non-interactive shell (nohup ... &), this process and so its jobs
        # would ignore SIGINT, and grpo.py could not be stopped at the deadline: Python's handler again, so
        # that each job starts with SIGINT at its default and installs its own (seen in part 1, change 63).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        parts = run / "parts"
        parts.mkdir(parents=True, exist_ok=True)
        n = 1 + sum(1 for _ in parts.glob("part_*.log"))
        self.log_file, self.out_dir = parts / f"part_{n}.log", parts / f"part_{n}"
        self.out_dir.mkdir(exist_ok=True)

    def note(self, text: str) -> None:
        line = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M:%S} {text}"
        with self.lock, open(self.log_file, "a") as f:
            f.write(line + "\n")
        print(line, flush=True)

    def job(self, command: str, name: str, resumable: bool) -> bool:
        """Run one command with this interpreter; a resumable one gets SIGINT at the deadline (or when the
        tool is stopped). True when it ended well or was stopped so (grpo.py then exits 130; at an older
        revision, which a part may run, it dies of the signal: -2 here)."""
        if self.stop.is_set():
            return False
        self.note(f"start {name}: {command}")
        t0, argv, stopped = time.time(), shlex.split(command), False
        argv[0] = sys.executable if argv[0] == "python" else argv[0]
        try:
            with open(self.out_dir / f"{name}.out", "w") as out:
                p = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
                while p.poll() is None:
                    if resumable and not stopped and (time.time() >= self.deadline or self.stop.is_set()):
                        p.send_signal(signal.SIGINT)
                        stopped = True
                    time.sleep(1)
        except OSError as e:
            self.note(f"end {name}: could not start ({e})")
            self.failed = True
            return False
        rc = p.returncode
        ok = rc == 0 or (stopped and rc in (130, -signal.SIGINT))
        self.note(f"end {name} rc={rc} in {time.time() - t0:.0f} s" + (" (stopped; it resumes)" if stopped else ""))
        if not ok:
            self.failed = True
        return ok


def deadline_of(until: str | None, hours: float | None, now: dt.datetime) -> dt.datetime:
    """--until HH:MM (UTC; tomorrow if already past) or --hours H from now; a bad value ends in one line."""
    if hours is not None:
        if not 0 < hours <= 48:
            sys.exit(f"pipeline.py: --hours {hours:g}: give hours from now, more than 0 and at most 48 (a night: 10)")
        return now + dt.timedelta(hours=hours)
    try:
        hh, mm = (int(x) for x in until.split(":"))
        deadline = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    except ValueError:
        sys.exit(f"pipeline.py: --until {until!r}: give HH:MM in UTC, e.g. 03:48 (or --hours H from now)")
    return deadline if deadline > now else deadline + dt.timedelta(days=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--run", required=True)
    when = ap.add_mutually_exclusive_group(required=True)
    when.add_argument("--until", help="the deadline, HH:MM in UTC (today, or tomorrow if past)")
    when.add_argument("--hours", type=float, help="the deadline as hours from now (a night: --hours 10)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--train-hours",
        type=float,
        default=1.0,
        help="a training run's length until a part of this run has measured one",
    )
    args = ap.parse_args(argv)
    deadline = deadline_of(args.until, args.hours, dt.datetime.now(dt.timezone.utc))

    first, units, resumable = left(args.config, args.run)
    train_s = measured_train_s(ROOT / args.run) or args.train_hours * 3600
    part = Part(ROOT / args.run, deadline.timestamp(), train_s)
    part.note(f"part of {args.run} until {deadline:%Y-%m-%d %H:%M} UTC, {args.jobs} jobs")
    part.note(f"revision {provenance.code_revision()}; machine {json.dumps(provenance.machine())}")
    part.note(
        f"left: {len(units)} seeds, {len(resumable)} evaluations that resume; a training run is taken as {train_s:.0f} s"
    )
    for i, command in enumerate(first):
        if not part.job(command, f"step1_{i}", resumable=False):
            return 1

    def next_unit(prefer_resumable: bool):
        with part.lock:
            if prefer_resumable and resumable:
                return resumable.pop(0), True
            if units and admits(units[0][1], time.time(), part.deadline, part.train_s):
                return units.pop(0), False
            if resumable:
                return resumable.pop(0), True
            return None, False

    def worker(w: int) -> None:
        while time.time() < part.deadline and not part.stop.is_set():
            unit, is_resumable = next_unit(prefer_resumable=w == 0)
            if unit is None:
                return
            if is_resumable:
                part.job(unit[1], unit[0], resumable=True)
                continue
            t0 = time.time()
            name, commands = unit
            for i, c in enumerate(commands):
                if i and (time.time() >= part.deadline or part.stop.is_set()):
                    part.note(f"seed {name}: {len(commands) - i} of its jobs left for a later part")
                    return
                if not part.job(c, f"{name}_{i}", resumable=resumes(c)):
                    return
                if i == 0 and trains(commands):
                    with part.lock:
                        part.train_s = max(time.time() - t0, part.train_s)
            if time.time() < part.deadline and not part.stop.is_set():
                part.note(f"seed {name} done in {time.time() - t0:.0f} s")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.jobs)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            time.sleep(1)
    except KeyboardInterrupt:  # the jobs got the terminal's SIGINT too: let them end, start none
        part.stop.set()
        part.note("stopped by Ctrl-C: no new job; the running ones end (a training run under way is lost)")
        for t in threads:
            t.join()
    part.note(f"part over: {len(units)} seeds and {len(resumable)} resumable evaluations not started")
    return 1 if part.failed else 0
