"""Run the whole study in PLAN.md's registered order, skipping what is already done.

    python pipeline.py --config configs/smoke.yaml                # every stage, into results/smoke
    python pipeline.py --config configs/tiny.yaml --jobs 2        # training runs and evaluations two at a time
    python pipeline.py --config configs/tiny.yaml --dry-run       # the plan: done, to do, out of date; time left
    python pipeline.py --config configs/tiny.yaml --print-jobs    # what is left, as shell commands for a scheduler
    python pipeline.py --config configs/tiny.yaml --stage eval    # one stage by hand (skipped if done)
    python pipeline.py --config configs/tiny.yaml --stage train --condition 16 --force   # redo one condition
    python pipeline.py --config configs/smollm2_v3.yaml --run R --until 17:05 --jobs 2   # one part of a long study

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
anything is written or moved, the whole folder is checked (runner/foreign.py) and the run
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

import re
import sys
import time
from pathlib import Path

from orchestration import cli, config, provenance, study
from runner import foreign
from runner.folder import Refused
from runner.jobs import assign_gpus, log, visible_gpus
from runner.preview import plan_only
from runner.session import Session, done_line
from runner.stage_checks import MissingInput, check_inputs
from runner.stages import JOB_STAGES, STAGES, Plan, registered_stages

ROOT = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None):
    p = cli.Parser(description="Run the study's stages in PLAN.md's order.")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/smoke.yaml")
    p.add_argument(
        "--run",
        "--out",
        dest="run",
        default=None,
        help="run folder (default: results/<config name>); --out is the same option, as earlier commands wrote it",
    )
    p.add_argument("--stage", choices=STAGES, default=None, help="run only this stage (its inputs must exist)")
    p.add_argument("--condition", default=None, help="with --stage train: only this condition (every seed)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace outputs made under other settings; with --stage, also redo that stage when it is done",
    )
    p.add_argument(
        "--jobs", type=int, default=1, help="training runs and evaluations to run at once (worker processes)"
    )
    p.add_argument(
        "--gpus",
        default=None,
        metavar="IDS",
        help="GPUs for the jobs, one per job at a time (default: every visible GPU; e.g. 0,1)",
    )
    p.add_argument(
        "--executor", choices=["local", "ray"], default="local", help="where jobs run: here, or on a Ray cluster"
    )
    p.add_argument(
        "--ray-address", default=None, help="with --executor ray: the cluster (default: a local Ray started here)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan (done / to do / out of date, time left) and exit"
    )
    p.add_argument(
        "--print-jobs", action="store_true", help="print what is left as shell commands (for a scheduler) and exit"
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. train.steps=10"
    )
    part = p.add_mutually_exclusive_group()
    part.add_argument(
        "--until", default=None, metavar="HH:MM", help="one part of a long study: what is left, until this UTC time"
    )
    part.add_argument("--hours", type=float, default=None, help="one part of a long study, this many hours from now")
    p.add_argument(
        "--train-hours",
        type=float,
        default=1.0,
        help="with --until/--hours: a training run's length until a part measured one",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--tensorboard",
        action="store_true",
        help="training jobs also write live curves for TensorBoard (RUN/train_*/tensorboard/; needs the tensorboard package)",
    )
    return p.parse_args(argv)


GPU_IDS = re.compile(r"(\d+|(GPU|MIG)-[\w-]+)(,(\d+|(GPU|MIG)-[\w-]+))*")  # what CUDA_VISIBLE_DEVICES takes


def checked_config(a) -> tuple[config.Config, list[str]]:
    """The config, with the command line's own checks, and the GPU of each job slot (none on a CPU).
    Raises ConfigError."""
    cfg = config.load(a.config, a.set)
    if a.condition and a.stage != "train":
        raise config.ConfigError("--condition goes with --stage train")
    if a.condition and a.condition not in cfg.conditions:
        raise config.ConfigError(
            f"--condition {a.condition!r}: not registered in conditions ({', '.join(cfg.conditions)})"
        )
    if a.jobs < 1:
        raise config.ConfigError(f"--jobs {a.jobs}: must be >= 1")
    if a.gpus is not None and not GPU_IDS.fullmatch(a.gpus.replace(" ", "")):
        raise config.ConfigError(f"--gpus {a.gpus}: expected GPU indices or UUIDs separated by commas, e.g. 0,1")
    if cfg.device == "cpu":
        gpus = []
    elif a.gpus:
        gpus = [g.strip() for g in a.gpus.split(",")]
    else:
        gpus = visible_gpus()
    gpu_slots = assign_gpus(a.jobs, gpus) if a.executor == "local" else gpus
    return cfg, gpu_slots


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        cfg, gpu_slots = checked_config(a)
    except config.ConfigError as e:
        print(f"pipeline.py: {e}", file=sys.stderr)
        return 2
    if not a.run and not (a.dry_run or a.print_jobs) and (refusal := study.default_run_refusal(a.config)):
        print(f"pipeline.py: {refusal}", file=sys.stderr)
        return 2
    unreachable = None
    try:
        study.check_model_reachable(cfg)  # before anything is written
    except config.ConfigError as e:
        if not (a.dry_run or a.print_jobs):
            print(f"pipeline.py: {e}", file=sys.stderr)
            return 2
        unreachable = str(e)  # a plan needs the config only: say what the jobs will need
    run = Path(a.run) if a.run else study.default_run(a.config)
    if a.until is not None or a.hours is not None:
        return one_part(a, run)
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

    t0 = time.perf_counter()
    if not a.force and all_done(plan, todo):  # a finished run is read, not written: not even its manifest
        for s in todo:
            log(done_line(plan, s))
        log(f"all done in {time.perf_counter() - t0:.1f} s; nothing written")
        return 0
    cli.interrupt_on_signals()  # a scheduler's time limit (Slurm sends SIGTERM first), a closed terminal
    return Session(plan, todo, a, gpu_slots).run()


def one_part(a, run: Path) -> int:
    """--until / --hours: runner/parts.py, whole seeds and the evaluations that resume, until the deadline."""
    from runner import parts

    if a.set or a.stage or a.force or a.dry_run or a.print_jobs or a.gpus or a.executor != "local" or a.tensorboard:
        print(
            "pipeline.py: --until and --hours run the config as written, here: no --set, --stage, --force, --dry-run, "
            "--print-jobs, --gpus, --executor ray or --tensorboard",
            file=sys.stderr,
        )
        return 2
    when = ["--until", a.until] if a.until is not None else ["--hours", str(a.hours)]
    return parts.main(
        ["--config", a.config, "--run", str(run), "--jobs", str(a.jobs), "--train-hours", str(a.train_hours), *when]
    )


def all_done(plan: Plan, todo: list[str]) -> bool:
    """Every stage of todo done on disk (the job stages: no job left) and recorded done in the manifest, and no
    earlier run's pipeline cut short: only then is there nothing, not even a stage's state, to write. A base
    whose weights are not here (a fresh clone of a committed run) is not done while a stage still to do reads it."""
    if (plan.run / ".pipeline.lock").exists() or ("base" in todo and plan.base_remade()):
        return False
    stages = (provenance.read_json(plan.run / "manifest.json") or {}).get("stages", {})
    if any(stages.get(s, {}).get("status") != "done" for s in todo):
        return False
    return not plan.jobs(todo) and all(plan.done(s) for s in todo if s not in JOB_STAGES)


if __name__ == "__main__":
    sys.exit(main())
