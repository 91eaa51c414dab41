"""The checks before a stage runs, on a run folder's Plan (runner/stages.py): check_inputs refuses a stage
whose inputs are missing or damaged, naming the file and the command that makes it (read-only); check_stage
refuses outputs made under other settings and moves aside what is stale, damaged or no longer in the design
(runner/folder.py moves them). No torch.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from orchestration import eval_resume, provenance, study
from runner.folder import Aside, Refused
from runner.stages import Plan


class MissingInput(Exception):
    """A stage's input is missing or damaged: the message names the file and the command that makes it."""


def check_inputs(plan: Plan, stage: str, condition: str | None = None, group: tuple[str, ...] = ()) -> None:
    """Raise MissingInput, naming the file and the command that makes it, when `stage` cannot run
    here: its base model is missing or damaged (a folder without weights counts), the GGUF file a
    base build converts is not installed, a training run's selection or learning rate is missing,
    an adapter to evaluate is not there. Read-only: called before check_stage moves anything aside,
    so a stage that cannot run changes nothing. `group`: the job stages run with it (eval with
    train: the adapters are made first)."""
    cfg, run = plan.cfg, plan.run
    if stage == "base":
        if cfg.model.gguf is not None:
            try:
                study.gguf_path(cfg.model.gguf)
            except FileNotFoundError as e:
                raise MissingInput(str(e))
        return
    kept = [plan.state("base", m, h) for _, m, h in plan.outputs("base")] == ["weightless"] and not plan.base_needed()
    if study.builds_base(cfg) and stage != "analyze" and not kept:  # the analysis reads JSON and CSV files only
        bad = provenance.model_folder_problem(run / "base_model") or provenance.weights_problem(
            run / "base_model", cfg.model.base_sha256
        )
        if bad:
            raise MissingInput(f"{bad}; build the base: {plan.command('base')}")
    if stage == "train":
        for c, s in plan.train_units(condition):
            try:
                study.train_inputs(cfg, c, s, run)
            except (FileNotFoundError, ValueError) as e:
                first = "select" if "selection.json" in str(e) else "lr-sweep"
                raise MissingInput(f"{e} ({plan.command(first)})")
    if stage in ("eval", "tokens") and "train" not in group:
        todo = {Path(j.output) for j in plan.jobs([stage])}  # an evaluation done by its recorded chain reads no weights
        adapters = (
            [a for _, f, a in plan.evals() if a is not None and f in todo]
            if stage == "eval"
            else [a for f, a in plan.tokens() if f in todo]
        )
        bad = next((b for a in adapters if (b := provenance.adapter_problem(a))), None)
        if bad:
            raise MissingInput(f"{bad}: train it (again) first: {plan.command('train')}")
    if stage == "analyze":
        files = [f for _, f, _ in plan.evals()] + [f for f, _ in plan.tokens()]
        missing = [f for f in files if not f.exists()]
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise MissingInput(
                f"{missing[0]}{more} missing: evaluate first ({plan.command()}; or analyse what is there: "
                f"python analyze_b.py --run {shlex.quote(str(run))} --partial)"
            )
        bad = next(((f, b) for f in files if (b := provenance.json_problem(f))), None)
        if bad:
            raise MissingInput(f"{bad[0]}: {bad[1]}; make it again: {plan.remake(bad[0])}")


def remake_note(plan: Plan, path: Path | None) -> str:
    """A fixing command for an analysis input error (`path`: the file it names, run_files.InputError.path)."""
    return plan.remake(path) if path is not None and (path.is_absolute() or path.exists()) else plan.command()


def check_stage(plan: Plan, stage: str, force: bool, aside: Aside) -> None:
    """Before a stage runs: refuse outputs made under other settings (unless force); move aside
    outputs made from other inputs, and (train, eval) folders and files the design no longer has."""
    if stage == "train":
        needed = plan.weights_needed()
    elif stage == "base" and plan.base_needed():
        needed = {plan.run / "base_model"}
    else:
        needed = set()
    for path, marker, want in plan.outputs(stage):
        st = plan.state(stage, marker, want)
        if st == "damaged" or (st == "weightless" and path in needed):
            why = "damaged" if st == "damaged" else "its weights are not here and a stage still to do reads them"
            aside.move(path, f"{why}, so it is redone: {plan.damage(stage, marker)}")
            continue
        if st == "foreign" and not force:
            raise Refused(
                f"{marker}: made under {plan.why(stage, marker)}; refusing to overwrite it "
                "(pipeline.py --force replaces it and what depends on it; or --run another folder)"
            )
        if st in ("foreign", "stale") and stage != "base":
            aside.move(path, "made under other settings (--force)" if st == "foreign" else "made from other inputs")
        elif st == "foreign" and stage == "base":
            aside.move(path, "another model build (--force)")
        elif stage == "eval" and (why := stale_resume(st, want, path)):
            aside.move(eval_resume.folder_of(path), why)
    run = plan.run
    if stage == "train":
        expected = {study.train_dir(run, c, s).name for c, s in plan.train_units()}
        for d in sorted(run.glob("train_*")):
            if d.is_dir() and d.name not in expected:
                aside.move(d, "not in this config's conditions x their seeds")
    if stage in ("eval", "analyze"):
        expected = {f for _, f, _ in plan.evals()}
        for f in sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")):
            if f not in expected:
                aside.move(f, "not an evaluation this config expects (another design or old file names)")
        for d in sorted(run.glob("eval_*.json.partial")) + sorted(run.glob("evalsets/*/eval_*.json.partial")):
            if d.with_name(d.name.removesuffix(".partial")) not in expected:
                aside.move(d, "the resume folder of an evaluation this config does not expect")
    if stage in ("tokens", "analyze"):
        expected = {f for f, _ in plan.tokens()}
        for f in sorted(run.glob("tokens_*.json")):
            if f not in expected:
                aside.move(f, "not a token-level comparison this config expects")
    sweep_to_do = (
        stage == "lr-sweep"
        and study.sweep_runs(plan.cfg)
        and plan.state(stage, run / "lr_choice.json", plan.outputs(stage)[0][2]) != "done"
    )
    if sweep_to_do:
        for d, why in plan.sweep_damage():  # as a training run's: moved aside, that candidate trained again
            aside.move(d, f"damaged, so it is redone: {why}")
    if sweep_to_do and (run / "lr_sweep").exists():
        for d in sorted((run / "lr_sweep").glob("lr_*")):
            m = d / "done.json" if (d / "done.json").exists() else d / "last" / "state.json"
            if m.exists() and plan.state("lr-sweep", m, plan.outputs(stage)[0][2]) == "foreign":
                if not force:
                    raise Refused(
                        f"{m}: made under {plan.why('lr-sweep', m)}; refusing to overwrite it "
                        "(pipeline.py --force replaces it and what depends on it; or --run another folder)"
                    )
                aside.move(d, "made under other settings (--force)")


def stale_resume(state: str, want: str | None, out: Path) -> str | None:
    """Why the resume folder of the evaluation writing `out` (state: its output's) is not to be continued,
    or None: its evaluation is done (a run stopped after writing the file), or it was made under another
    stage hash than `want` (other settings, adapter or set; `want` None: not known yet, evaluate checks)."""
    if not eval_resume.folder_of(out).exists():
        return None
    if state == "done":
        return "the resume folder of an evaluation that is done"
    got = eval_resume.recorded_hash(out)
    return (
        f"a resume folder made under stage hash {str(got)[:12]}, not {want[:12]}"
        if want is not None and got != want
        else None
    )
