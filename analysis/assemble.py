"""The analysis of one run, wired: its inputs read once (analysis/run_inputs.py), every measure asked of them,
the results assembled into one document (verdicts.json) and printed (report.md, figures/). It wires and decides
nothing: each question is asked and answered in its own module. The analysis command is analyze_b.py.

Reads RUN/eval_base.json and RUN/eval_<condition>_s<seed>_<step>.json (the registered `test` set;
older single-seed runs: eval_<condition>_<step>.json, read as seed 0), every other registered
evaluation set from RUN/evalsets/<set>/ (the calibration pool among them), the token-level files, the
design from RUN/manifest.json's config (else eval_base.json's), and where present the training logs,
lr_choice.json, selection.json and probe_*.json. Writes RUN/verdicts.json, RUN/report.md and
RUN/figures/*.png.

In PLAN.md's order (every formula is in the docstring of the function that computes it):
- the registered entries (analysis/entries.py): the primary question and its label (analysis/verdict.py's
  tests: pass@1 rises or falls, and the ceiling pass@k_max against the selection null, analysis/reweight.py),
  the secondary entries Holm-corrected within one family per scoring and relabelled on adjusted p-values, the
  earlier versions' verdicts (change 29's base-null reading, *_v2, *_v1), and the stratified null;
- beside the primary answer (analysis/primary_checks.py): calibration arms whose truth is known, judged by the
  same code as the study; change 42's support test; H3; power and sensitivity;
- change 57's measure (analysis/base_support.py), section 7e's answer at T 1 (analysis/training_sampler.py),
  the baselines, collapse and lock-in;
- strata, the controls (H4-H6), beyond n, boundary, diversity, out of distribution, strategies and tokens
  (analysis/secondary.py).
The analysis computes numbers; analysis/report.py writes every sentence. No torch: this meets the pipeline
only in JSON and CSV files.
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis import (
    base_support,
    baselines,
    beyond,
    collapse,
    entries as registered,
    figures,
    primary_checks as checks,
    report,
    secondary,
    training_sampler,
    verdict,
)
from analysis.inference import counts
from analysis.inputs import collect as collect_inputs, files as input_files, warnings as input_warnings
from analysis.reweight import selection_null
from analysis.run_files import DEV_COLUMNS, DEV_REQUIRED, InputError, read_csv, read_json
from analysis.run_inputs import RunInputs, read_inputs
from analysis.stats import (
    TIE,
)
from countdown import SCORINGS
from orchestration import provenance
from orchestration.provenance import atomic_write_text, content_sha256, move_aside

# ============================================================================= the whole analysis


def analyze(
    run: Path,
    resamples: int | None = None,
    seed: int | None = None,
    partial: bool = False,
    support_w: float | None = None,
) -> dict:
    """Every statistic of the run, nothing written. Raises InputError for a malformed input, an
    evaluation outside the design, or (unless partial) an expected evaluation that is missing."""
    inputs = read_inputs(run, partial)
    design, base, rl = inputs.design, inputs.base, inputs.trained
    inf = registered.inference(design, base, rl, resamples, seed)
    taught = design.cfg.analyze.calibration.taught if design.cfg.analyze.calibration is not None else None
    studied = [c for c in design.conditions if c != taught]
    nulls = {sc: selection_null(counts(base, sc), inf.n_base, inf.k) for sc in SCORINGS}
    curves, entries, boot = registered.entries(inputs, studied, inf, nulls)
    families = registered.judge(entries, inf)
    earlier = registered.earlier_verdicts(entries, inf)
    registered.third_clauses(entries, boot, inf)
    prim = next((e for e in entries if e["primary"]), None)
    sensitivity, power = checks.primary_checks(prim, curves, design, base, inf) if prim else (None, None)
    return {
        "inputs": inputs,
        "design": design,
        "inference": inf,
        "curves": curves,
        "entries": entries,
        "families": families,
        "earlier": earlier,
        "primary": prim,
        "calibration": checks.calibrate(inputs, entries, inf),
        "support": checks.support_tests(inputs, entries, inf, support_w),
        "base_support": base_support.analyze(inputs, inf),
        "within_correct": training_sampler.analyze(inputs, inf),
        "baselines": baselines.analyze(inputs, inf),
        "collapse": collapse.analyze(inputs),
        "stratum_null": registered.stratum_nulls(inputs, entries, inf, nulls),
        "h3": checks.narrowing(design, curves, inf),
        "power": power,
        "sensitivity": sensitivity,
        "strata": secondary.analyze_strata(inputs, studied, inf),
        "controls": secondary.analyze_controls(inputs, entries, inf),
        "beyond": beyond.analyze_beyond(inputs, inf),
        "diversity": secondary.analyze_diversity(inputs),
        "ood": secondary.analyze_ood(inputs, entries, curves, inf),
        "strategies": secondary.analyze_strategies(inputs, inf),
        "tokens": secondary.analyze_tokens(inputs),
        # flat copies the figures read
        "ci": inf.levels.ci,
        "n": inf.n,
        "k_max": inf.k,
        "n_problems": len(base["problems"]),
        "margin": inf.levels.margin,
    }


def check_extras(run: Path) -> None:
    """Read (and so validate) the training logs and the JSON files the figures and report use."""
    for f in list(run.glob("train_*/train_log.csv")) + list(run.glob("lr_sweep/lr_*/train_log.csv")):
        read_csv(f)
    for f in run.glob("train_*/train_eval.csv"):
        read_csv(f, required=DEV_REQUIRED, drawn=DEV_COLUMNS)
    for f in [run / "lr_choice.json", run / "selection.json"] + sorted(run.glob("probe_*.json")):
        if f.exists():
            d = read_json(f)
            need = {
                "lr_choice.json": ("rule", "mean_reward_last", "chosen"),
                "selection.json": ("rule", "informative", "sets", "short", "pass_rates"),
            }.get(f.name, ("task", "n", "n_problems", "pass_at_k", "format_rate"))
            missing = [kk for kk in need if kk not in d]
            if missing:
                raise InputError(f"{f}: malformed (missing {', '.join(missing)})", path=f)


REGISTERED_ONLY = ("base_support", "within_correct", "collapse", "baselines")  # in verdicts.json only where registered,
# so the runs made before keep their documents


def verdicts_json(res: dict) -> dict:
    """What verdicts.json holds: every number and label of the result (the bulky per-k band stays in;
    the raw replicates and the loaded files do not)."""
    d, inf, ri = res["design"], res["inference"], res["inputs"]
    label, question = registered_question(res, d)
    doc = {
        "primary": primary_record(res, label),
        "calibration": res["calibration"],
        "support": res["support"],
        "stratum_null": res["stratum_null"],
        "levels": {k: getattr(inf.levels, k) for k in LEVELS},
        "bootstrap": {
            "resamples": inf.draws.resamples,
            "seed": inf.draws.seed,
            "interval": "percentile",
            "tie": TIE,
            "scheme": "crossed: seeds and problems drawn independently with replacement",
        },
        "sizes": {"n": inf.n, "n_base": inf.n_base, "k_max": inf.k, "n_problems": res["n_problems"]},
        "families": res["families"],
        "earlier_families": res["earlier"]["families"],
        "power": res["power"],
        "sensitivity": res["sensitivity"],
        "h3": res["h3"],
        "design": {
            "conditions": d.conditions,
            "seeds": d.seeds,
            "seeds_by_condition": d.seeds_by_condition or {},
            "checkpoints": d.checkpoints,
            "source": d.source,
            "legacy": d.legacy,
        },
        "partial": bool(ri.missing),
        "missing": ri.missing,
        "entries": res["entries"],
        "strata": res["strata"],
        "controls": res["controls"],
        "eval_sets": eval_sets_record(ri, inf),
        "beyond_n": {k: v for k, v in res["beyond"].items() if not k.startswith("_") and k != "boundary"},
        "boundary": {"set": res["beyond"]["set"], "n": res["beyond"]["n"], "rows": res["beyond"]["boundary"]},
        "diversity": res["diversity"],
        "ood": {name: {k: v for k, v in o.items() if not k.startswith("_")} for name, o in res["ood"].items()},
        "tokens": res["tokens"],
        "strategies": res["strategies"],
    }
    for key in REGISTERED_ONLY:
        if not res[key].get("skipped"):
            doc[key] = res[key]
    if question:
        doc["primary"]["question"] = question
    return doc


LEVELS = ("ci", "one_sided", "tost", "margin", "selection_margin", "headroom_fraction")  # verdicts.json's levels


def primary_record(res: dict, label: str | None) -> dict:
    """verdicts.json's `primary`: the registered question's condition, scoring, step and label, and the primary
    entry's readings beside it (before `question` is added)."""
    d, prim = res["design"], res["primary"]
    return {
        "condition": d.primary_condition,
        "scoring": d.primary_scoring,
        "step": d.checkpoints[-1],
        "label": label,
        "label_selection_null": prim["label"] if prim else None,
        "label_base_null": verdict.base_null_label(prim) if prim else None,
        "reason": prim["reason"] if prim else None,
        "ceiling_null": d.cfg.analyze.ceiling_null,
        "answer_base_null": prim["base_null"]["selection"] if prim else None,
        "calibrated": res["calibration"].get("calibrated"),
    }


def eval_sets_record(ri: RunInputs, inf) -> dict:
    """verdicts.json's `eval_sets`: the test set's sizes and each registered set's settings, with the files read."""
    d = ri.design
    test = {
        "task": ri.base.get("task"),
        "n": inf.n,
        "n_base": inf.n_base,
        "k_max": inf.k,
        "n_problems": len(ri.base["problems"]),
        "models": "all",
        "files": ["eval_base.json"] + [x["_file"] for x in ri.trained.values()],
    }
    sets = {
        name: {
            **spec,
            "files": ([f"evalsets/{name}/eval_base.json"] if ri.sets[name].base is not None else [])
            + [f"evalsets/{name}/{x['_file']}" for x in ri.sets[name].trained.values()],
        }
        for name, spec in d.eval_sets.items()
    }
    return {"test": test, **sets}


def registered_question(res: dict, design) -> tuple[str | None, str | None]:
    """(primary.label, primary.question) by what the config registers as the primary question: support from
    the base's own probabilities (change 57: analyze.base_support.primary), change 42's support test at the
    evaluation sampler (analyze.support.primary, tiny_v5's), else the spread reading (question None)."""
    bs, prim = res["base_support"], res["primary"]
    if bs.get("registered") and bs.get("answer") is not None:
        return f"support {bs['answer']}", "base_support"
    spec = design.cfg.analyze.support
    if spec is not None and spec.primary and not res["support"].get("skipped"):
        test = res["support"]["conditions"].get(design.primary_condition, {}).get("tests", {}).get("eval", {})
        if test.get("answer") and not test.get("skipped"):
            return f"support {test['answer']}", "support"
    return (verdict.registered_label(prim, design.cfg.analyze.ceiling_null) if prim else None), None


def run_analysis(
    run: Path,
    resamples: int | None = None,
    seed: int | None = None,
    make_figures: bool = True,
    partial: bool = False,
    support_w: float | None = None,
) -> dict:
    """Everything is computed before anything is written: an input error leaves no partial output."""
    run = Path(run)
    res = analyze(run, resamples=resamples, seed=seed, partial=partial, support_w=support_w)
    check_extras(run)  # read every other input now: a bad one must stop us before anything is written
    doc = verdicts_json(res)
    doc["warnings"], doc["inputs"] = (
        input_warnings(run, res),
        collect_inputs(run, res),
    )  # what the report shows of the inputs
    computed = (
        sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")) + sorted(run.glob("tokens_*.json"))
    )
    # what each input computed (provenance.content_sha256: no timings, no time stamps), so that a rerun
    # that computes the same counts leaves the analysis done
    doc["provenance"] = {
        "inputs": {f.relative_to(run).as_posix(): content_sha256(f) for f in computed},
        "analyze": res["design"].config.get("analyze"),
        **provenance.plan_hashes(),
        "config_hash": res["inputs"].base.get("provenance", {}).get("config_hash"),
        "time": provenance.now(),
        "run": run.name,
        "files": input_files(run),
    }
    when = provenance.stamp()
    # A rerun replaces nothing in place. Before a first analysis figures/ holds only what the pipeline drew
    # while training ran (training.png), which is drawn again here: nothing to keep.
    analysed = (run / "verdicts.json").exists() or (run / "report.md").exists()
    for old in (run / "verdicts.json", run / "report.md") + ((run / "figures",) if analysed else ()):
        if (dest := move_aside(run, old, when)) is not None:
            print(f"moved aside {old.relative_to(run)} -> {dest.relative_to(run)} (the analysis is redone)", flush=True)
    doc["figures"] = [f.name for f in figures.figures(run, res)] if make_figures else []
    text = json.dumps(doc, indent=1, default=float) + "\n"
    doc = json.loads(text)  # the report prints the document as verdicts.json holds it, nothing else
    atomic_write_text(run / "report.md", report.render(doc))
    atomic_write_text(run / "verdicts.json", text)  # last: the pipeline's "done" marker
    return doc
