"""The model stages' command line (`python grpo.py <command>`): each command's arguments, their checks
before anything is written, moving aside what a rerun replaces, and one line for every fault (exit
2 a wrong argument or input, 1 a failed command, study.EXIT_OUT_OF_MEMORY out of memory). The
method's own commands, `train` and `lr-sweep`, run method/training.py; the others method/evaluate.py
and the bases'.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from method import evaluate, training
from method.model import bf16_problem, memory_state, out_of_memory, pick_device, setup_torch
from orchestration import cli, config, curves, provenance, study
from orchestration.provenance import stage_hash
from runner import foreign
from runner.folder import Refused
from runner.stages import Plan

COMMANDS = {
    "base": "build the base model of a config that builds its own (the CPU world, the rehearsal, a GGUF file converted) -> RUN/base_model/",
    "probe": "base rates of the base model on the probe tasks -> RUN/probe_<task>.json",
    "select": "pass rates of the first train problems and the registered few-problem sets -> RUN/selection.json",
    "lr-sweep": "short runs per candidate learning rate and the registered choice -> RUN/lr_sweep/, RUN/lr_choice.json",
    "train": "one training run: a condition with a training seed -> RUN/train_<condition>_s<seed>/",
    "eval": "sample and score an evaluation set for the base or one adapter -> RUN/[evalsets/<set>/]eval_*.json",
    "tokens": "the token-level comparison of one adapter with the base -> RUN/tokens_<condition>_s<seed>_<step>.json",
}


def build_base(cfg: config.Config, run: Path, progress: bool) -> str:
    """The `base` stage: the CPU world's tiny base (bases/tiny_base.py), the rehearsal's Qwen-shaped one
    (bases/qwen_shape.py) or a GGUF model converted (bases/gguf_base.py), written to RUN/base_model/ with the
    stage hash it was made under."""
    setup_torch(cfg)
    out, h = run / "base_model", stage_hash(cfg, "base")
    if cfg.model.gguf is not None:
        from bases import gguf_base

        info = gguf_base.build_base(cfg, out, progress, stage_hash=h)
        return f"{out}: {info['architecture']} from {Path(info['source']).name}, {info['params']:,} parameters (dequantized to float32)"
    if cfg.model.qwen_shape is not None:
        from bases import qwen_shape

        info = qwen_shape.build_base(cfg, out, progress, stage_hash=h)
        return f"{out}: Qwen2.5-0.5B shape, {cfg.model.qwen_shape.layers} layers, {info['params']:,} parameters (random, bf16)"
    if cfg.model.base_from is not None:
        from bases import reuse

        info = reuse.copy_base(cfg, out, h)
        return f"{out}: copied from {info['reused_from']} (stage hash {h}, sha256 {info['sha256'][:16]}… checked), not trained again"
    from bases import tiny_base

    info = tiny_base.train_base(cfg, out, progress, stage_hash=h)
    return f"{out}: {info['params']:,} parameters, loss {info['loss_first']:.2f} -> {info['loss_last_50']:.2f}"


def parser() -> argparse.ArgumentParser:
    p = cli.Parser(
        prog="grpo.py",  # also when a pipeline job runs it (sys.argv[0] is then pipeline.py)
        description="The model stages of the study, one command each (pipeline.py runs them in PLAN.md's order).",
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, what in COMMANDS.items():
        q = sub.add_parser(name, help=what, description=what[0].upper() + what[1:] + ".")
        q.add_argument(
            "--config",
            default=None,
            help="YAML config (default: orchestration/config.py's defaults, the registered study, which "
            "configs/qwen05b.yaml writes out)",
        )
        q.add_argument("--run", default=None, help="run folder (default: results/<config name>)")
        q.add_argument(
            "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. train.steps=10"
        )
        q.add_argument("--quiet", action="store_true", help="no progress bars")
        if name == "train":
            q.add_argument(
                "--condition",
                required=True,
                help="a condition registered in the config's `conditions` (many, 16, 1, ...)",
            )
            q.add_argument(
                "--seed", type=int, default=None, help="a training seed from train.seeds (default: the first)"
            )
            q.add_argument("--out", default=None, help="output folder (default: RUN/train_<condition>_s<seed>)")
            q.add_argument(
                "--tensorboard",
                action="store_true",
                help="also write live training curves for TensorBoard into OUT/tensorboard/ (the CSV logs stay the record)",
            )
        if name == "eval":
            q.add_argument("--adapter", default=None, help="a PEFT adapter folder (default: evaluate the base)")
            q.add_argument(
                "--eval-set",
                default="test",
                help="test (the eval section), or a set registered in eval_sets (wide, ood)",
            )
            q.add_argument(
                "--out",
                default=None,
                help="output JSON (default: RUN[/evalsets/<set>]/eval_base.json or eval_<cond>_s<seed>_<step>.json)",
            )
        if name == "tokens":
            q.add_argument(
                "--adapter", required=True, help="a PEFT adapter folder RUN/train_<cond>_s<seed>/step_<step>"
            )
            q.add_argument("--out", default=None, help="output JSON (default: RUN/tokens_<cond>_s<seed>_<step>.json)")
    return p


def checked(a) -> tuple[config.Config, Path, str | None, Path | None, int | None]:
    """(config, run folder, base model, output file, training seed) of a command, every argument and
    input checked before anything is written, the run folder's outputs it reads or replaces among them (made
    under other settings: foreign.check_command, the pipeline's refusal). Raises ConfigError or Refused (one
    line, exit 2)."""
    cfg = config.load(a.config, a.set)
    if not a.run and (refusal := study.default_run_refusal(a.config)):
        raise config.ConfigError(refusal)
    run = Path(a.run) if a.run else study.default_run(a.config)
    seed = None
    if a.cmd != "base" and (bad := bf16_problem(cfg, pick_device(cfg))):
        raise config.ConfigError(bad)
    if a.cmd == "base" and not study.builds_base(cfg):
        raise config.ConfigError(
            "model.build / model.qwen_shape: this config builds no base model (it loads model.path)"
        )
    if a.cmd == "train":
        if a.condition not in cfg.conditions:
            raise config.ConfigError(
                f"--condition {a.condition!r}: not registered in conditions ({', '.join(cfg.conditions)})"
            )
        seeds = config.seeds_of(cfg, a.condition)
        seed = seeds[0] if a.seed is None else a.seed
        if seed not in seeds:
            raise config.ConfigError(
                f"--seed {seed}: not a seed of condition {a.condition} {seeds} (train.seeds, train.seeds_by_condition)"
            )
    if a.cmd == "eval" and a.eval_set != "test" and a.eval_set not in cfg.eval_sets:
        raise config.ConfigError(
            f"--eval-set {a.eval_set!r}: not registered "
            f"(test, or one of eval_sets: {', '.join(cfg.eval_sets) or 'none'})"
        )
    if a.cmd in ("eval", "tokens") and a.adapter and not Path(a.adapter).exists():
        raise config.ConfigError(missing_adapter(Path(a.adapter)))
    if a.cmd in ("eval", "tokens") and a.adapter and (bad := provenance.adapter_problem(a.adapter)):
        identity = study.adapter_identity(a.adapter)
        redo = (
            f"run the pipeline on its folder ({cli.pipeline_command(a.config, Path(a.adapter).parent.parent, a.set)}): "
            f"it moves that training run aside and retrains it, and redoes what reads it"
            if identity["condition"]
            else "give an intact adapter folder"
        )
        raise config.ConfigError(f"--adapter {a.adapter}: {bad}; {redo}")
    out = None
    if a.cmd == "eval":
        out = Path(a.out) if a.out else study.eval_dir(run, a.eval_set) / study.adapter_eval_name(a.adapter)
    if a.cmd == "tokens":
        out = Path(a.out) if a.out else run / study.adapter_tokens_name(a.adapter)
    if a.cmd == "train":
        writes = [Path(a.out) if a.out else study.train_dir(run, a.condition, seed)]
    elif out is None:
        writes = None
    else:
        writes = [out]
    foreign.check_command(
        Plan(cfg, run, a.config, a.set), a.cmd, writes
    )  # what it reads and writes: before anything is written
    study.check_model_reachable(cfg)
    if getattr(a, "tensorboard", False):
        try:
            curves.writer_class()
        except ImportError as e:
            raise config.ConfigError(str(e)) from None
    base = None if a.cmd == "base" else study.model_path(cfg, run)
    if (
        base is not None
        and study.builds_base(cfg)
        and (bad := provenance.model_folder_problem(base) or provenance.weights_problem(base, cfg.model.base_sha256))
    ):
        raise config.ConfigError(
            f"{bad}; build the base again ({cli.pipeline_command(a.config, run, stage='base', force=True)})"
        )
    return cfg, run, base, out, seed


def missing_adapter(adapter: Path) -> str:
    """The line for an --adapter folder that is not there: the checkpoints its training run holds (or the
    training runs its run folder holds), not advice to retrain what may be whole."""
    there = sorted(d.name for d in adapter.parent.glob("step_*") if d.is_dir()) if adapter.parent.is_dir() else []
    if there:
        return f"--adapter {adapter}: no such checkpoint; {adapter.parent} holds {', '.join(there)}"
    runs = (
        sorted(d.name for d in adapter.parent.parent.glob("train_*") if d.is_dir())
        if adapter.parent.parent.is_dir()
        else []
    )
    if runs:
        return f"--adapter {adapter}: no such training run; {adapter.parent.parent} holds {', '.join(runs)}"
    return f"--adapter {adapter}: no such folder"


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        cfg, run, base, out_eval, seed = checked(a)
    except (config.ConfigError, Refused) as e:
        print(f"grpo.py: {e}", file=sys.stderr)
        return 2
    replaced = {
        "eval": [out_eval],
        "tokens": [out_eval],
        "select": [run / "selection.json"],
        "lr-sweep": [run / "lr_choice.json"],
        "probe": [run / f"probe_{t}.json" for t in cfg.probe.tasks],
    }.get(a.cmd, [])
    when = provenance.stamp()
    moved = []  # (old place, where it went): put back if this command fails before writing it again
    try:
        run.mkdir(parents=True, exist_ok=True)
        for old in replaced:  # a rerun by hand replaces nothing in place: RUN/superseded/<time>/
            if old.resolve().is_relative_to(run.resolve()) and (
                dest := provenance.move_aside(run.resolve(), old.resolve(), when)
            ):
                moved.append((old.resolve(), dest))
                print(f"moved aside {old} -> {dest} (this command writes it again)", flush=True)
    except OSError as e:  # a read-only or full run folder: one line, as every other fault
        print(
            f"grpo.py {a.cmd}: {e.strerror or e} ({e.filename or run}); the run folder must be writable",
            file=sys.stderr,
        )
        provenance.put_back(moved, run.resolve() / "superseded" / when)
        return 1
    rc = 1
    try:
        rc = run_command(a, cfg, run, base, out_eval, not a.quiet, seed)
    except KeyboardInterrupt:
        rc = 130
        raise
    finally:
        if rc != 0:
            provenance.put_back(moved, run.resolve() / "superseded" / when)
    return rc


def resumes(a, cfg: config.Config) -> str:
    """What the same command, run again, redoes after an interruption."""
    if a.cmd == "train":
        return f"training resumes from its last checkpoint (every {cfg.train.save_last_every} steps)"
    if a.cmd == "lr-sweep":
        return f"finished candidates are kept, the one under way resumes from its last checkpoint (every {cfg.train.save_last_every} steps)"
    if a.cmd == "eval":
        return "the evaluation continues from its last finished sampling call"
    if a.cmd == "base" and cfg.model.build is not None:
        return f"the base's pre-training resumes from its last saved step (every {study.BASE_SAVE_EVERY} steps)"
    return "the command is redone"


def entry(argv: list[str] | None = None) -> int:
    """`python grpo.py ...` as a process of its own (grpo.py has set cli.interrupt_on_signals): main, and an
    interruption ends in one line saying what the same command resumes, exit 130. The pipeline's jobs call
    main, where the interruption is the pipeline's to report."""
    a = None
    try:
        a = parser().parse_args(argv)
        return main(argv)
    except KeyboardInterrupt:
        if a is None:
            return cli.interrupted("grpo.py", "nothing was written")
        try:
            again = resumes(a, config.load(a.config, a.set))
        except Exception:  # the config was read once already; this line must not fail
            again = "it continues from what was saved"
        return cli.interrupted(f"grpo.py {a.cmd}", f"run the same command again: {again}")


def run_command(
    a, cfg: config.Config, run: Path, base: str | None, out_eval: Path | None, progress: bool, seed: int | None
) -> int:
    """The command's work, once its arguments and inputs are checked; its exit status (0, 1, or
    study.EXIT_OUT_OF_MEMORY with one line naming the job, the memory and the settings that lower it)."""
    try:
        if a.cmd == "base":
            print(build_base(cfg, run, progress))
        elif a.cmd == "train":
            out = Path(a.out) if a.out else study.train_dir(run, a.condition, seed)
            training.train_command(cfg, a.condition, seed, run, out, base, progress, a.tensorboard)
        elif a.cmd == "tokens":
            r = evaluate.token_compare(cfg, base, a.adapter, out_eval, progress)["summary"]
            print(
                f"{out_eval}: {r['positions']} positions, reranked {r['share_reranked'] or 0:.4f}, shifted {r['share_shifted'] or 0:.4f}"
            )
        elif a.cmd == "eval":
            r = evaluate.evaluate(cfg, base, a.adapter, out_eval, progress, a.eval_set)
            print(
                f"{out_eval}: strict pass@1 {r['pass_at_k']['strict']['1']:.3f}  loose pass@1 {r['pass_at_k']['loose']['1']:.3f}  "
                f"loose pass@{(k := max(r['pass_at_k']['loose'], key=int))} {r['pass_at_k']['loose'][k]:.3f}  "
                f"format {r['format_rate']:.3f}"
            )
        elif a.cmd == "select":
            r = evaluate.select(cfg, base, run, progress)
            print(
                f"{run / 'selection.json'}: {len(r['informative'])} of {cfg.select.n_problems} informative; sets {r['sets']}"
            )
        elif a.cmd == "lr-sweep":
            r = training.lr_sweep(cfg, base, run, progress)
            print(f"{run / 'lr_choice.json'}: {r.get('dev_loose_pass1', r['mean_reward_last'])} -> {r['chosen']:g}")
        elif a.cmd == "probe":
            for path in evaluate.probe(cfg, base, run, progress):
                print(path)
    except (FileNotFoundError, ValueError, RuntimeError) as e:  # training.Diverged is a RuntimeError
        if out_of_memory(e):
            job = study.job_label(
                a.cmd, getattr(a, "condition", None), seed, getattr(a, "adapter", None), getattr(a, "eval_set", None)
            )
            print(
                f"grpo.py: {job} ran out of memory {memory_state(pick_device(cfg))}; "
                f"{study.memory_advice(cfg, a.cmd, getattr(a, 'eval_set', 'test'), base=getattr(a, 'adapter', None) is None)}",
                file=sys.stderr,
            )
            return study.EXIT_OUT_OF_MEMORY
        print(
            f"grpo.py {a.cmd}: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}",
            file=sys.stderr,
        )
        return 1
    except OSError as e:
        print(f"grpo.py {a.cmd}: {e.strerror or e} ({e.filename or 'no file name'})", file=sys.stderr)
        return 1
    return 0
