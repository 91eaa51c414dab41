"""pass@k beyond n (PLAN.md section 7c): the beta-binomial model fitted per model and scoring on the largest-n
evaluation set, each model-based curve with a parametric-bootstrap band, the model checked on the study's own data,
and the boundary counts against chance. Secondary and descriptive; the model is analysis/passmodel.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.document import key_fields, model_label
from analysis.inference import Inference, counts
from analysis.passmodel import (
    boundary,
    boundary_null,
    contrast_check,
    extrapolation_check,
    fit_pass_model,
    model_pass_at_k,
    parametric_replicates,
)
from analysis.run_files import Design
from analysis.run_inputs import EvalSet, RunInputs, ordered_keys
from analysis.stats import pass_at_k_curves, per_problem
from countdown import SCORINGS


@dataclass(frozen=True)
class Large:
    """The largest-n set the section reads, and what its checks read beside it."""

    models: list  # (key, evaluation file) on the large set, the base first
    base: dict  # the test set's base evaluation
    trained: dict  # the test set's trained evaluations, by key
    sub: list | None  # the test set's rows of the large set's problems; None: the check is skipped
    prefix: str  # the large set's folder, before its file names
    n: int  # samples per problem on the large set
    n_base: int  # the base's samples per test problem
    n_test: int  # a trained model's samples per test problem
    ext: int  # analyze.extrapolate_to
    B: int  # analyze.beyond_resamples
    seed: int
    ci: float


def _largest_set(design: Design, sets: dict[str, EvalSet], n_test: int) -> str | None:
    """The set on the trained task with the most samples per problem, if it has more than the test set."""
    cands = [
        (spec["n"], name) for name, spec in design.eval_sets.items() if not spec["ood"] and sets[name].base is not None
    ]
    return max(cands)[1] if cands and max(cands)[0] > n_test else None


def analyze_beyond(inputs: RunInputs, inf: Inference) -> dict:
    """pass@k beyond n (PLAN.md section 7c): the beta-binomial fits, per model and scoring, on the
    largest-n set, each model-based curve with a parametric-bootstrap band (analyze.beyond_resamples
    refits); the model checked on the study's own data, fitted on the test set's counts of the large
    set's problems (the base's n_base samples, a trained model's n_test): (1) each model's level,
    pass@n_large, and (2) the contrast the question is about, Delta pass@n_large RL - base, with a
    paired bootstrap interval over problems (passmodel.contrast_check) and whether the measured contrast
    lies in it, with the intervals' median width and the mean error; and the boundary counts at that n
    against the null of chance alone (passmodel.boundary_null, the test set's base counts as the fresh
    samples)."""
    design, base, rl, last = inputs.design, inputs.base, inputs.trained, inputs.last
    n_base, n_test, ci = inf.n_base, inf.n, inf.levels.ci
    big = _largest_set(design, inputs.sets, n_test)
    if big:
        bs = inputs.sets[big]
        bdoc, brl, n, prefix = bs.base, bs.trained, design.eval_sets[big]["n"], bs.prefix
    else:
        bdoc, brl, n, prefix = base, rl, n_base, ""
    an = design.cfg.analyze
    ext, B, seed = an.extrapolate_to, an.beyond_resamples, an.seed
    models = [(None, bdoc)] + [(k, brl[k]) for k in ordered_keys(design, brl, last)]
    sub = skipped = None
    if big:
        pos = {p["id"]: i for i, p in enumerate(base["problems"])}
        ids = [p["id"] for p in bdoc["problems"]]
        if design.eval_sets[big]["ood"] or any(i not in pos for i in ids):
            skipped = "the large set's problems are not all test problems"
        else:
            sub = [pos[i] for i in ids]
    else:
        skipped = "no evaluation set has more samples per problem than the test set"
    large = Large(models, base, rl, sub, prefix, n, n_base, n_test, ext, B, seed, ci)
    fits, curves_out, bound = fits_and_boundary(large)
    check, contrasts = checks(large) if sub is not None else ([], [])
    covered = [r["covered"] for r in contrasts]
    return {
        "set": big or "test",
        "n": n,
        "extrapolate_to": ext,
        "resamples": B,
        "model_used": "beta-binomial",
        "fits": fits,
        "check": check,
        "contrasts": contrasts,
        "contrast_coverage": {
            "covered": int(sum(covered)),
            "of": len(covered),
            "median_width": float(np.median([r["error_ci"][1] - r["error_ci"][0] for r in contrasts])),
            "mean_error": float(np.mean([r["error"] for r in contrasts])),
            "mean_error_by_scoring": {
                sc: float(np.mean([r["error"] for r in contrasts if r["scoring"] == sc]))
                for sc in SCORINGS
                if any(r["scoring"] == sc for r in contrasts)
            },
        }
        if covered
        else None,
        "check_skipped": skipped,
        "boundary": bound,
        "_curves": curves_out,
    }


def fits_and_boundary(large: Large):
    """Per model and scoring on the large set: the beta-binomial fit with its parametric band, and the
    boundary counts against chance (the test set's base counts of the same problems as fresh samples)."""
    models, base, prefix, sub, n_base = large.models, large.base, large.prefix, large.sub, large.n_base
    bdoc, ext, B, seed, ci = models[0][1], large.ext, large.B, large.seed, large.ci
    fits, curves_out, bound = [], {}, []
    for j, (key, d) in enumerate(models):
        nd = d["sampling"]["n"]
        ks = np.unique(np.geomspace(nd, max(ext, nd), 64).round().astype(int))
        for sc in SCORINGS:
            c = counts(d, sc)
            f = fit_pass_model(c, nd)
            reps = parametric_replicates(f, nd, len(c), ks, B, seed + 7919 * j + (sc == "loose"))
            lo, hi = np.quantile(reps, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
            curves_out[(key, sc)] = {
                "measured": pass_at_k_curves(c, nd, nd).mean(axis=0),
                "ks_model": ks,
                "model": model_pass_at_k(f, ks),
                "band": (lo, hi),
            }
            fits.append(
                {
                    **key_fields(key),
                    "model": model_label(key),
                    "scoring": sc,
                    "file": prefix + d["_file"],
                    "n": nd,
                    "n_problems": len(c),
                    "used": f["chosen"],
                    "aic_prefers": f["aic_prefers"],
                    "alpha": f["alpha"],
                    "beta": f["beta"],
                    "aic": {m: g["aic"] for m, g in f["fits"].items()},
                    "loglik": {m: g["loglik"] for m, g in f["fits"].items()},
                    "at_bound": f["at_bound"],
                    "measured_pass_at_n": float(per_problem(c, nd, nd).mean()),
                    "model_pass_at_n": float(model_pass_at_k(f, [nd])[0]),
                    "extrapolate_to": ext,
                    "model_pass_at_extrapolated": float(model_pass_at_k(f, [ext])[0]),
                    "extrapolated_ci": [float(lo[-1]), float(hi[-1])],
                }
            )
            if key is None:
                continue
            row = {
                **key_fields(key),
                "model": model_label(key),
                "scoring": sc,
                "n": nd,
                "file": prefix + d["_file"],
                "base_file": prefix + bdoc["_file"],
                **boundary(counts(bdoc, sc), c, [p["id"] for p in d["problems"]]),
            }
            if sub is not None:
                row["null"] = boundary_null(counts(bdoc, sc), c, nd, counts(base, sc)[sub], n_base, seed=seed + 31 * j)
            bound.append(row)
    return fits, curves_out, bound


def checks(large: Large) -> tuple[list, list]:
    """The model on the study's own data: fitted to the test set's counts of the large set's
    problems, its pass@n (levels) and Delta pass@n (contrasts) against the large set's measurement.
    models[0] is the base on the large set."""
    models, base, rl, sub, prefix, n = large.models, large.base, large.trained, large.sub, large.prefix, large.n
    n_base, n_test, B, seed, ci = large.n_base, large.n_test, large.B, large.seed, large.ci
    check, contrasts = [], []
    bdoc = models[0][1]
    for key, d in models:
        td = base if key is None else rl.get(key)
        if td is None:
            continue
        n_small = n_base if key is None else n_test
        for sc in SCORINGS:
            r = extrapolation_check(counts(td, sc)[sub], n_small, counts(d, sc), n)
            check.append(
                {
                    **key_fields(key),
                    "model": model_label(key),
                    "scoring": sc,
                    "fit_file": td["_file"],
                    "target_file": prefix + d["_file"],
                    "n_problems": len(sub),
                    **r,
                }
            )
            if key is not None:
                r = contrast_check(
                    counts(base, sc)[sub],
                    n_base,
                    counts(td, sc)[sub],
                    n_test,
                    counts(bdoc, sc),
                    counts(d, sc),
                    n,
                    B,
                    seed,
                    ci,
                )
                contrasts.append(
                    {
                        **key_fields(key),
                        "model": model_label(key),
                        "scoring": sc,
                        "fit_file": td["_file"],
                        "target_file": prefix + d["_file"],
                        "n_problems": len(sub),
                        **r,
                    }
                )
    return check, contrasts
