"""analyze_b.py: the analysis command (the design card's "analysis B": the registered verdicts, the
secondary analyses, the report and the figures of one run; analysis/assemble.py computes them).

    python analyze_b.py --run results/tiny_v4 [--partial] [--out DIR]
    python analyze_b.py --report-only results/tiny_v4
    python analyze_b.py --summary results/tiny_v7                  # its answer in plain lines; writes nothing
    python analyze_b.py --compare results/tiny_v6 results/tiny_v7  # the runs' shared measures side by side
    python analyze_b.py --run RUN --config configs/tiny.yaml    # checks the folder as the pipeline does first

Reads the run's evaluations, token files, logs and manifest (analysis/assemble.py says which); writes
RUN/verdicts.json, RUN/report.md and RUN/figures/*.png, or with --out into a new folder holding a copy
of the run's inputs, the run left as it is. report.md is printed from verdicts.json alone
(analysis/report.py); --report-only prints it again from a run's verdicts.json, computing nothing
and drawing no figure (the report it replaces is moved aside; an earlier layout of verdicts.json is
read by analysis/compat.py). An input error ends in one line with the command that makes the file
again. With --config (and --set) the whole folder is first checked against that config as pipeline.py
checks it (runner/foreign.py): a folder holding outputs made under other settings is refused in
the pipeline's line, exit 2, before anything is written.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from analysis import compat, report
from analysis.run_files import InputError, copy_inputs
from orchestration import cli, provenance


def remake_hint(run: Path, named: Path | None) -> str:
    """The command that makes the file an InputError names again: the manifest's job whose output it
    is (an evaluation or token file; the command's paths pointed at this folder), else the pipeline
    on the folder with the config the manifest's jobs name (it redoes a damaged output)."""
    import shlex

    jobs = ((read_json_or_none(run / "manifest.json") or {}).get("jobs") or {}).values()
    config = None
    for j in jobs:
        try:
            argv = shlex.split(j.get("command", ""))
        except ValueError:
            continue
        opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        then = opt.get("--run")
        if then is None or "--config" not in opt:
            continue
        config = config or (opt["--config"], [argv[i + 1] for i in range(len(argv) - 1) if argv[i] == "--set"])
        output = j.get("output") or older_output(argv, opt, then)
        if (
            named is not None
            and output
            and argv[1:3] in (["grpo.py", "eval"], ["grpo.py", "tokens"])
            and (run / output).resolve() == named.resolve()
        ):
            return "make it again: " + shlex.join(
                str(run) + x[len(then) :] if x == then or x.startswith(then + "/") else x for x in argv
            )
    if config is not None:
        return (
            "redo what is damaged: "
            + cli.pipeline_command(config[0], run, config[1])
            + " (the pipeline moves a damaged output aside and makes it again)"
        )
    if not (run / "manifest.json").exists():
        return f"{run} holds no run (no manifest.json): make one first, python pipeline.py --config CONFIG --run {shlex.quote(str(run))}"
    return f"redo what is damaged: python pipeline.py --config <the config {run} was made with> --run {shlex.quote(str(run))}"


def older_output(argv: list[str], opt: dict, then: str) -> str | None:
    """An evaluation or token job's output, relative to its run folder, from its command: for
    manifests written before each job's entry recorded its output (the committed runs)."""
    from orchestration import study

    if argv[1:3] not in (["grpo.py", "eval"], ["grpo.py", "tokens"]) or "--out" in opt:
        return None
    adapter = opt.get("--adapter")
    try:
        made = (
            study.eval_dir(Path(then), opt.get("--eval-set", "test")) / study.adapter_eval_name(adapter)
            if argv[2] == "eval"
            else Path(then) / study.adapter_tokens_name(adapter)
        )
    except Exception:  # an adapter path not named as the pipeline names them
        return None
    return made.relative_to(then).as_posix()


def read_json_or_none(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def report_only(run: Path) -> int:
    """report.md printed again from RUN/verdicts.json (the old one moved aside), an earlier layout
    through analysis/compat.py; one line and exit 2 when there is no such folder or no verdicts.json,
    or its layout is unknown or it is malformed (1: it cannot be written)."""
    src = run / "verdicts.json"
    if not run.is_dir():
        print(f"analyze_b.py: --report-only {run}: no such folder", file=sys.stderr)
        return 2
    try:
        doc = compat.upgrade(json.loads(src.read_text()))  # an earlier layout: read into what the printer needs
        text = report.render(doc)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, OSError):
            why = e.strerror
        elif isinstance(e, KeyError):
            why = f"malformed (no {e})"
        else:
            why = str(e)
        print(
            f"analyze_b.py: {src}: {why}; analyse the run again, into a new folder if it is committed: "
            f"python analyze_b.py --run {run} --out NEW_FOLDER",
            file=sys.stderr,
        )
        return 2
    try:
        if (dest := provenance.move_aside(run, run / "report.md", provenance.stamp())) is not None:
            print(f"moved aside report.md -> {dest.relative_to(run)}")
        provenance.atomic_write_text(run / "report.md", text)
    except OSError as e:
        print(f"analyze_b.py: cannot write {e.filename or run}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(report.headline(doc))
    print(f"wrote {run / 'report.md'} from {src}")
    return 0


def read_only(runs: list[str]) -> int:
    """--summary RUN (one run) and --compare RUN RUN... (a table): from each verdicts.json, writing nothing;
    one line and exit 2 for a run without a readable one."""
    from analysis import summary

    paths, docs = [Path(r) for r in runs], []
    for run in paths:
        try:
            docs.append(summary.load(run))
        except (FileNotFoundError, ValueError) as e:
            print(f"analyze_b.py: {e}", file=sys.stderr)
            return 2
    print(summary.summary(paths[0], docs[0]) if len(paths) == 1 else summary.compare(paths, docs))
    return 0


def folder_refusal(run: Path, config_path: str, sets: list[str]) -> str | None:
    """The pipeline's one line when the config is bad or `run` holds outputs made under other settings
    than it (runner/foreign.py), else None. Reads records only; writes nothing."""
    from orchestration import config
    from runner import foreign
    from runner.stages import Plan

    try:
        cfg = config.load(config_path, sets)
    except config.ConfigError as e:
        return str(e)
    return foreign.refusal_line(Plan(cfg, run, config_path, sets))


def parser() -> cli.Parser:
    """The command line: one of --run, --report-only, --summary, --compare, and --run's options."""
    p = cli.Parser(
        description="The registered verdicts, calibration, secondary analyses, figures and report of one run."
    )
    p.add_argument("--run", help="the run folder holding eval_*.json")
    p.add_argument(
        "--report-only",
        metavar="RUN",
        default=None,
        help="print RUN/report.md again from RUN/verdicts.json alone (nothing is computed; the old report is moved aside)",
    )
    p.add_argument(
        "--summary",
        metavar="RUN",
        default=None,
        help="print RUN's registered answer and its secondary readings; writes nothing",
    )
    p.add_argument(
        "--compare",
        nargs="+",
        metavar="RUN",
        default=None,
        help="two or more runs' shared measures side by side; writes nothing",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="a new folder for verdicts.json, report.md and figures/: the run's inputs are copied there (weights left "
        "out) and analysed, leaving --run untouched (a committed run, a read-only one)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="the config the run was made with: the folder is checked against it first, "
        "as the pipeline checks it (refused, exit 2, when an output was made under other settings)",
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="with --config: an override, as the pipeline's"
    )
    p.add_argument(
        "--resamples", type=int, default=None, help="bootstrap resamples (default: the run's config, analyze.resamples)"
    )
    p.add_argument("--seed", type=int, default=None, help="bootstrap seed (default: the run's config, analyze.seed)")
    p.add_argument(
        "--partial", action="store_true", help="analyse a run with expected evaluations missing (the report says so)"
    )
    p.add_argument("--no-figures", action="store_true")
    p.add_argument(
        "--support-post-hoc",
        type=float,
        default=None,
        metavar="W_STAR",
        help="for a run registered before PLAN_CHANGES.md change 42: the support test at this w* on its calibration pool, "
        "labelled post hoc in verdicts.json and report.md (use with --out)",
    )
    return p


def main(argv=None) -> int:
    p = parser()
    a = p.parse_args(argv)
    given = [x is not None for x in (a.run, a.report_only, a.summary, a.compare)]
    if sum(given) != 1:
        p.error(
            "give one of --run RUN (analyse), --report-only RUN (print its report again), --summary RUN, --compare RUN RUN"
        )
    if a.compare is not None and len(a.compare) < 2:
        p.error(f"--compare needs two runs or more, got {len(a.compare)}")
    if a.summary is not None or a.compare is not None:
        return read_only([a.summary] if a.summary is not None else a.compare)
    if a.report_only is not None:
        return report_only(Path(a.report_only))
    run = Path(a.run)
    if not run.is_dir():
        print(f"analyze_b.py: --run {run}: no such folder", file=sys.stderr)
        return 2
    if a.support_post_hoc is not None and not a.support_post_hoc >= 1:
        print(
            f"analyze_b.py: --support-post-hoc {a.support_post_hoc}: w* must be >= 1 (a tilt towards correct answers)",
            file=sys.stderr,
        )
        return 2
    if a.set and a.config is None:
        p.error("--set needs --config")
    if a.config is not None and (line := folder_refusal(run, a.config, a.set)):
        print(f"analyze_b.py: {line}", file=sys.stderr)
        return 2
    target, made = run, False
    if a.out:
        target = Path(a.out)
        if target.resolve() == run.resolve() or target.resolve().is_relative_to(run.resolve()):
            print(f"analyze_b.py: --out {target}: inside --run {run}; give a folder outside it", file=sys.stderr)
            return 2
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            print(f"analyze_b.py: --out {target}: exists and is not empty; give a new folder", file=sys.stderr)
            return 2
        made = not target.exists()
    from analysis.assemble import run_analysis  # numpy, scipy, matplotlib: seconds to load

    try:
        if a.out:
            copy_inputs(run, target)
        out = run_analysis(
            target, a.resamples, a.seed, not a.no_figures, partial=a.partial, support_w=a.support_post_hoc
        )
    except (InputError, OSError, KeyboardInterrupt) as e:
        if a.out:  # the copy is ours and holds no result: the folder goes back to how it was given
            shutil.rmtree(target, ignore_errors=True)
            if not made:
                target.mkdir(exist_ok=True)  # it was there, empty
        if isinstance(e, KeyboardInterrupt):
            raise
        if isinstance(e, InputError):
            msg = str(e).replace(str(target), str(run)) if a.out else str(e)
            named = e.path
            if named is not None and a.out and named.resolve().is_relative_to(target.resolve()):
                named = run / named.resolve().relative_to(target.resolve())  # the file in the run, not in our copy
            print(f"analyze_b.py: {msg}; {remake_hint(run, named)}", file=sys.stderr)
            return 2  # an input's fault (README: exit codes)
        else:
            print(
                f"analyze_b.py: cannot write {e.filename or target}: {e.strerror or e}; analyse into a folder of your own: "
                f"python analyze_b.py --run {run} --out NEW_FOLDER",
                file=sys.stderr,
            )
        return 1
    print(report.headline(out))
    print(
        f"wrote {target / 'verdicts.json'} and {target / 'report.md'}"
        + (f" (from the inputs of {run}, copied there)" if a.out else "")
    )
    return 0


def entry() -> int:
    """This script as a process: SIGTERM and SIGHUP end it as Ctrl-C does, in one line with exit 130; with
    --out the new folder is taken away again (main), without it a rerun writes the outputs anew."""
    cli.interrupt_on_signals()
    try:
        return main()
    except KeyboardInterrupt:
        return cli.interrupted("analyze_b.py", "run the same command again (an --out folder it made is taken away)")


if __name__ == "__main__":
    sys.exit(entry())
