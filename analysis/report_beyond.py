"""report.md's sections on pass@k beyond n (PLAN.md section 7c): the beta-binomial fits labelled as a model, the
model checked on the study's own data (levels, then the contrast the question is about), and the boundary counts
against chance. Words only, from verdicts.json alone: the numbers are analysis/beyond.py's."""

from __future__ import annotations

import numpy as np

from analysis.document import MODEL_BASED
from analysis.report_format import ci3, f3, ids, table, yn
from countdown import SCORINGS


def _beyond_fits(bz: dict) -> list[str]:
    """The fits' table: each model and scoring's beta-binomial, its AIC and its pass@k beyond n."""
    n, ext = bz["n"], bz["extrapolate_to"]
    src = "the test set" if bz["set"] == "test" else f"set {bz['set']} (evalsets/{bz['set']}/)"
    L = [
        f"## pass@k beyond n = {n}: {MODEL_BASED}",
        "",
        f"Fitted by maximum likelihood to each model's per-problem counts in {src} (the base and each condition's last checkpoint); "
        "pass@k = 1 − B(α, β + k) / B(α, β). "
        "The plain beta-binomial is the registered model (PLAN_CHANGES.md change 29); AIC's preference "
        f"between it and the zero-inflated one is shown, not used. Every value in the last column is **{MODEL_BASED}**; its interval "
        f"is the parametric bootstrap's ({bz['resamples']} refits). *at bound*: the fit ran to the edge of its search box.",
        "",
    ]
    L += table(
        [
            "model",
            "scoring",
            "α",
            "β",
            "AIC plain / zero-inflated (prefers)",
            "measured pass@n",
            "model pass@n",
            f"pass@{ext} ({MODEL_BASED}) [95%]",
        ],
        [
            [
                f["model"],
                f["scoring"] + (" (at bound)" if f["at_bound"] else ""),
                f"{f['alpha']:.3g}",
                f"{f['beta']:.3g}",
                f"{f['aic']['beta-binomial']:.1f} / {f['aic']['zero-inflated beta-binomial']:.1f} "
                f"({'plain' if f['aic_prefers'] == 'beta-binomial' else 'zero-inflated'})",
                f3(f["measured_pass_at_n"]),
                f3(f["model_pass_at_n"]),
                f"{f3(f['model_pass_at_extrapolated'])} [{f3(f['extrapolated_ci'][0])}, {f3(f['extrapolated_ci'][1])}]",
            ]
            for f in bz["fits"]
        ],
    )
    return L


def _beyond_levels(bz: dict) -> list[str]:
    """The model checked on this study's data: each model's predicted level at the large set's n against the measured."""
    n, L = bz["n"], []
    L += [
        "",
        f"**Check on this study's data: levels.** Fitted to the test set's samples on the "
        f"{bz['check'][0]['n_problems']} problems "
        f"of set {bz['set']}, the model predicts pass@{n}; the set measures it (new draws). error = predicted − measured; *naive*: "
        f"the measured pass@k at the fit's n.",
        "",
    ]
    L += table(
        [
            "model",
            "scoring",
            "fitted to",
            "fit n",
            f"predicted pass@{n} ({MODEL_BASED})",
            f"measured pass@{n}",
            "error",
            "zero-inflated's error",
            "naive (error)",
        ],
        [
            [
                r["model"],
                r["scoring"],
                r["fit_file"],
                r["fit_n"],
                f3(r["predicted"]),
                f3(r["measured"]),
                f"{r['error']:+.3f}",
                f"{r['predicted_zero_inflated'] - r['measured']:+.3f}",
                f"{f3(r['naive'])} ({r['naive_error']:+.3f})",
            ]
            for r in bz["check"]
        ],
    )
    for sc in SCORINGS:
        errs = [abs(r["error"]) for r in bz["check"] if r["scoring"] == sc]
        if errs:
            L += [
                "",
                f"Mean |error| ({sc}): {np.mean(errs):.3f}, largest {max(errs):.3f}, over {len(errs)} models.",
            ]
    return L


def _beyond_contrasts(bz: dict) -> list[str]:
    """The model checked on the contrast the question is about: predicted against measured Delta pass@n."""
    n, L = bz["n"], []
    cov = bz["contrast_coverage"]
    L += [
        "",
        f"**Check on the contrast the question is about.** From the same fits, the model predicts Δpass@{n} (RL − base); the "
        f"set measures it. A paired bootstrap over problems ({bz['resamples']} redraws, both models refitted, the measurement "
        f"redrawn with them) gives a 95% interval of the prediction and of its error; the error's interval contains 0 for "
        f"{cov['covered']} of {cov['of']} models × scorings. The error intervals' median width is {cov['median_width']:.3f}; "
        f"the mean error is {cov['mean_error']:+.3f} ("
        + ", ".join(f"{sc} {v:+.3f}" for sc, v in cov["mean_error_by_scoring"].items())
        + ").",
        "",
    ]
    L += table(
        [
            "model",
            "scoring",
            f"predicted Δpass@{n} [95%] ({MODEL_BASED})",
            f"measured Δpass@{n}",
            "error [95%]",
            "0 in it",
            "zero-inflated's error",
            "naive Δ",
        ],
        [
            [
                r["model"],
                r["scoring"],
                f"{r['predicted_delta']:+.3f} {ci3(r['ci'])}",
                f"{r['measured_delta']:+.3f}",
                f"{r['error']:+.3f} {ci3(r['error_ci'])}",
                yn(r["covered"]),
                f"{r['error_zero_inflated']:+.3f}",
                f"{r['naive_delta']:+.3f}",
            ]
            for r in bz["contrasts"]
        ],
    )
    return L


def beyond_section(doc: dict) -> list[str]:
    """PLAN.md section 7c: pass@k beyond n, labelled as a model, and its checks."""
    bz = doc["beyond_n"]
    L = (
        _beyond_fits(bz)
        + (_beyond_levels(bz) if bz["check"] else [])
        + (_beyond_contrasts(bz) if bz.get("contrasts") else [])
    )
    if bz["check_skipped"]:
        L += ["", f"No check of the model: {bz['check_skipped']}."]
    return L + [""]


def boundary_section(doc: dict) -> list[str]:
    bz = doc["boundary"]
    n = bz["n"]
    nulls = [r for r in bz["rows"] if r.get("null")]
    L = [
        f"## Boundary at n = {n}",
        "",
        f"Problems the base never solved in {n} samples that the trained model solved at least once (*only RL*), and the reverse (*only "
        f"base*), ids without their task/split/ prefix (all of them in verdicts.json)."
        + (
            f" *Chance*: the count expected if the trained model were the base (PLAN.md section 7c: each problem's rate from the test "
            f"set's fresh {nulls[0]['null']['fresh_n']} base samples, empirical Bayes), its 95% range and the p of at least the observed "
            f"count."
            if nulls
            else ""
        ),
        "",
    ]
    rows = []
    for r in bz["rows"]:
        nl = r.get("null")
        rows.append(
            [
                r["model"],
                r["scoring"],
                f"{r['solved_base']} / {r['solved_rl']}",
                r["only_rl"],
                f"{nl['expected']:.1f} [{nl['range'][0]}, {nl['range'][1]}], {nl['only_rl']['p']:.3f}" if nl else "—",
                ids(r["only_rl_ids"]),
                r["only_base"],
                f"{nl['only_base']['p']:.3f}" if nl else "—",
                ids(r["only_base_ids"]),
            ]
        )
    return (
        L
        + table(
            ["model", "scoring", "solved: base / RL", "only RL", "chance [95%], p", "ids", "only base", "p", "ids"],
            rows,
        )
        + [""]
    )
