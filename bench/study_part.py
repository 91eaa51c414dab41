"""One part of a study that does not fit one sitting (PLAN_CHANGES.md change 62): what `pipeline.py
--print-jobs` says is left, run on --jobs workers until a deadline, in units that a later part, in a
fresh clone, continues from what was committed.

    python bench/study_part.py --config configs/smollm2_v2.yaml --run results/smollm2_v2 --until 03:48

The units: the stages of step 1 first (each skips what is done); then a *seed*, a training run and the
evaluations of its adapter, one after another, started only where its length (the longest seed this run's
parts have measured, this one's included; else --seed-hours) ends before the deadline: training and the adapter's weights are not
committed, so a seed cut in the middle is lost; and the evaluations with no adapter (the base's), which
resume call by call across parts (orchestration/eval_resume.py) and are stopped with SIGINT at the
deadline. Worker 0 takes those first, the others seeds; a worker with no seed that fits takes what
resumes. A part never runs the analysis: the pipeline does, in the last part, once nothing is left.

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestration import provenance  # noqa: E402

ADAPTER = re.compile(r"--adapter (\S+)/step_\d+")


def left(config: str, run: str) -> tuple[list[str], list[tuple[str, list[str]]], list[tuple[str, str]]]:
    """(step 1's commands, the seeds as (name, [its training command if not trained, its adapter's
    evaluations]), the evaluations with no adapter as (name, command)) from `pipeline.py --print-jobs`."""
    out = subprocess.run(
        [sys.executable, "pipeline.py", "--config", config, "--run", run, "--print-jobs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        sys.exit(f"study_part: pipeline.py --print-jobs failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
    first, seeds, resumable = [], {}, []
    for line in out.stdout.splitlines():
        if line.startswith("python pipeline.py") and "--stage" in line:
            first.append(line)
        elif line.startswith("python grpo.py train"):
            cond, seed = re.search(r"--condition (\S+) --seed (\d+)", line).groups()
            seeds.setdefault(f"{cond}_s{seed}", []).append(line)
        elif line.startswith("python grpo.py eval"):
            m = ADAPTER.search(line)
            if m is None:
                eval_set = re.search(r"--eval-set (\S+)", line)
                resumable.append(("eval_base" + (f"_{eval_set.group(1)}" if eval_set else ""), line))
            else:
                seeds.setdefault(Path(m.group(1)).name.removeprefix("train_"), []).append(line)
    return first, list(seeds.items()), resumable


SEED_LENGTH = re.compile(
    r"seed \S+ (?:done )?in (\d+) s"
)  # "seed many_s200 done in 4012 s" (part 1: "end seed 200 in 4012 s")


def measured_seed_s(run: Path) -> float | None:
    """The longest seed any earlier part of this run measured, in seconds (None before the first)."""
    lengths = [float(m) for log in run.glob("parts/part_*.log") for m in SEED_LENGTH.findall(log.read_text())]
    return max(lengths) if lengths else None


class Part:
    def __init__(self, run: Path, deadline: float, seed_s: float):
        self.deadline, self.seed_s, self.lock, self.failed = deadline, seed_s, threading.Lock(), False
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
        """Run one command; a resumable one gets SIGINT at the deadline. True when it ended well or was
        stopped there."""
        self.note(f"start {name}: {command}")
        t0 = time.time()
        with open(self.out_dir / f"{name}.out", "w") as out:
            p = subprocess.Popen(shlex.split(command), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            while p.poll() is None:
                if resumable and time.time() >= self.deadline:
                    p.send_signal(signal.SIGINT)
                    p.wait()
                    break
                time.sleep(5)
        rc = p.returncode
        self.note(
            f"end {name} rc={rc} in {time.time() - t0:.0f} s" + (" (stopped at the deadline)" if rc == 130 else "")
        )
        if rc not in (0, 130):
            self.failed = True
        return rc in (0, 130)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--until", required=True, help="the deadline, HH:MM in UTC (today, or tomorrow if past)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--seed-hours", type=float, default=1.25, help="a seed's length until a part of this run has measured one"
    )
    args = ap.parse_args()
    now = dt.datetime.now(dt.timezone.utc)
    try:
        hh, mm = (int(x) for x in args.until.split(":"))
        deadline = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    except ValueError:
        sys.exit(f"study_part: --until {args.until!r}: give HH:MM in UTC, e.g. 03:48")
    if deadline <= now:
        deadline += dt.timedelta(days=1)

    first, units, resumable = left(args.config, args.run)
    seed_s = measured_seed_s(ROOT / args.run) or args.seed_hours * 3600
    part = Part(ROOT / args.run, deadline.timestamp(), seed_s)
    part.note(f"part of {args.run} until {deadline:%Y-%m-%d %H:%M} UTC, {args.jobs} jobs")
    part.note(f"revision {provenance.code_revision()}; machine {json.dumps(provenance.machine())}")
    part.note(f"left: {len(units)} seeds, {len(resumable)} evaluations that resume; a seed is taken as {seed_s:.0f} s")
    for i, command in enumerate(first):
        if not part.job(command, f"step1_{i}", resumable=False):
            sys.exit(1)

    def next_unit(prefer_resumable: bool):
        with part.lock:
            if prefer_resumable and resumable:
                return resumable.pop(0), True
            if units and time.time() + part.seed_s <= part.deadline:
                return units.pop(0), False
            if resumable:
                return resumable.pop(0), True
            return None, False

    def worker(w: int) -> None:
        while time.time() < part.deadline:
            unit, is_resumable = next_unit(prefer_resumable=w == 0)
            if unit is None:
                return
            if is_resumable:
                part.job(unit[1], unit[0], resumable=True)
                continue
            t0 = time.time()
            name, commands = unit
            if not all(part.job(c, f"{name}_{i}", resumable=False) for i, c in enumerate(commands)):
                return
            took = time.time() - t0
            with part.lock:
                part.seed_s = max(took, measured_seed_s(part.log_file.parents[1]) or 0)
            part.note(f"seed {name} done in {took:.0f} s")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    part.note(f"part over: {len(units)} seeds and {len(resumable)} resumable evaluations not started")
    sys.exit(1 if part.failed else 0)


if __name__ == "__main__":
    main()
