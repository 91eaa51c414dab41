"""What in a run folder was made under other settings, found before anything is written: every entry
script (pipeline.py, grpo.py's commands, analyze_b.py through the pipeline's analyze stage) checks the
whole folder against its config first, and refuses in one line naming the first setting a user would
fix (the model, then the task, then the rest: provenance.fix_order), leaving every file as it was.
Reads each output's record only: no hash of an input, no weights. No torch.
"""

from __future__ import annotations

from pathlib import Path

from orchestration import provenance, study
from runner.folder import Refused
from runner.stages import STAGES, Plan, registered_stages

# What each stage reads that an earlier stage made (the base's folder, selection.json, lr_choice.json,
# the adapters): a stage reading a file made under other settings is reported as such, never hashed.
READS = {
    "probe": ("base",),
    "select": ("base",),
    "lr-sweep": ("base",),
    "train": ("base", "select", "lr-sweep"),
    "eval": ("base", "train"),
    "tokens": ("base", "train"),
    "analyze": ("eval", "tokens"),
}

REFUSING = "refusing to overwrite it (pipeline.py --force replaces it and what depends on it; or --run another folder)"


def foreign_outputs(plan: Plan, stages: list[str] | None = None) -> list[tuple[str, Path, str]]:
    """(stage, the file recording its provenance, the first setting that differs) for every output of
    `stages` (default: every stage the config registers) that exists and was made under other settings,
    the LR sweep's candidate runs included; in stage order."""
    out = []
    for s in registered_stages(plan.cfg) if stages is None else stages:
        markers = [m for _, m, _ in plan.outputs(s, hashes=False)]
        if s == "lr-sweep" and study.sweep_runs(plan.cfg) and (plan.run / "lr_sweep").is_dir():
            for d in sorted((plan.run / "lr_sweep").glob("lr_*")):
                markers.append(d / "done.json" if (d / "done.json").exists() else d / "last" / "state.json")
        for m in markers:
            if m.exists() and not provenance.json_problem(m) and (keys := plan.other_settings(s, m)):
                out.append((s, m, keys[0]))
    return out


def first_refusal(found: list[tuple[str, Path, str]]) -> tuple[str, Path, str] | None:
    """The refusal a user should read first: the output whose differing setting comes first in fix_order
    (a model before a task before the rest), the earliest stage among equals."""
    return min(found, key=lambda f: (provenance.fix_order(f[2])[0], STAGES.index(f[0])), default=None)


def refusal_line(plan: Plan, found: list[tuple[str, Path, str]] | None = None) -> str | None:
    """The one-line refusal for a folder holding outputs made under other settings, or None: the same
    line whichever entry script finds it."""
    found = foreign_outputs(plan) if found is None else found
    first = first_refusal(found)
    if first is None:
        return None
    made = made_by(plan.run)
    other = made is not None and (study.ROOT / made).resolve() != Path(plan.config_path).resolve()
    by = f"{plan.run} was made by {made} (its manifest), not {plan.config_path}; " if other else ""
    return f"{by}{first[1]}: made under {first[2]}; {REFUSING}"


def made_by(run: Path) -> str | None:
    """The config file the folder's manifest names in its jobs' commands (the most named), or None."""
    from collections import Counter

    from runner.reference_times import config_of

    jobs = ((provenance.read_json(run / "manifest.json") or {}).get("jobs") or {}).values()
    named = Counter(c for j in jobs if isinstance(j, dict) and (c := config_of(j.get("command", ""))))
    return named.most_common(1)[0][0] if named else None


def check_folder(plan: Plan) -> None:
    """Raise Refused (the one line) when anything in the run folder was made under other settings."""
    line = refusal_line(plan)
    if line:
        raise Refused(line)


def notes(plan: Plan, todo: list[str]) -> list[str]:
    """--print-jobs' lines on what was made under other settings: each stage whose outputs were, or
    that reads what was, and the refusal."""
    found, out = foreign_outputs(plan), []
    for s in todo:
        if any(f[0] == s for f in found) or (reads := foreign_reads(s, found)):
            what = "its outputs were" if any(f[0] == s for f in found) else f"what it reads ({', '.join(reads)}) was"
            out.append(f"stage {s}: {what} made under other settings")
    if found:
        out.append(
            f"the pipeline refuses before writing anything: {refusal_line(plan, found)}; the commands below are "
            "what --force would run"
        )
    return out


def foreign_reads(stage: str, found: list[tuple[str, Path, str]]) -> list[str]:
    """The earlier stages whose outputs `stage` reads and that were made under other settings."""
    bad = {s for s, _, _ in found}
    return [s for s in READS.get(stage, ()) if s in bad]


# What a stage's command checks whole before it runs: every stage before it in PLAN.md's order but the
# evaluations (a token comparison reads none, and they are the largest files); of its own stage, what it
# writes. Run in that order, the pipeline has checked the rest, or under --force moved it aside and
# redone it, before it runs a stage's commands; so the first refusal is the pipeline's, in the same line,
# unless that lies in the evaluations or in another job's output.
ANCESTORS = {
    "base": (),
    "probe": ("base",),
    "select": ("base", "probe"),
    "lr-sweep": ("base", "probe", "select"),
    "train": ("base", "probe", "select", "lr-sweep"),
    "eval": ("base", "probe", "select", "lr-sweep", "train"),
    "tokens": ("base", "probe", "select", "lr-sweep", "train"),
}


def check_command(plan: Plan, stage: str, writes: list[Path] | None = None) -> None:
    """Raise Refused (the pipeline's line) when what a `grpo.py <stage>` command reads, or what it writes
    (`writes`: its output files or folder; None: the stage's every output), was made under other settings.
    A command whose every output lies outside the run folder (--out elsewhere) adds nothing to it: only the
    base it reads is checked (a hand-run evaluation under another sampler is not refused over a probe file)."""
    outside = bool(writes) and all(not Path(w).resolve().is_relative_to(plan.run.resolve()) for w in writes)
    checked = ("base",) if outside else ANCESTORS[stage]
    found = foreign_outputs(plan, [s for s in checked if s in registered_stages(plan.cfg)])
    if writes is None:
        found += foreign_outputs(plan, [stage])
    for w in [] if outside else writes or []:
        if stage != "train":
            m = w
        elif (w / "done.json").exists():
            m = w / "done.json"
        else:
            m = w / "last" / "state.json"
        if m.exists() and not provenance.json_problem(m) and (keys := plan.other_settings(stage, m)):
            found.append((stage, m, keys[0]))
    line = refusal_line(plan, found)
    if line:
        raise Refused(line)
