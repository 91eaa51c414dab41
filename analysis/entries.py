"""The registered entries (PLAN.md section 7): one per condition x checkpoint x scoring, compared with the base by
analysis/verdict.py's tests, Holm-adjusted within its scoring's family and labelled; the earlier versions' readings
beside them; and each last-checkpoint entry's selection null with one tilt per stratum (change 46). No torch."""

from __future__ import annotations

import numpy as np

from analysis import secondary, verdict
from analysis.document import Entry
from analysis.inference import Inference, counts
from analysis.run_files import InputError
from analysis.run_inputs import RunInputs
from analysis.stats import (
    TIE,
    crossover_summary,
    holm,
    holm_mc_se,
    mc_se,
    p_below,
    p_equivalence,
    pass_at_k_curves,
    percentile_interval,
    selection_answer,
    simultaneous_band,
    third_clause_interval,
    verdict_v1,
)
from countdown import SCORINGS

TESTS = ("rises", "falls", "above", "below", "equivalence")  # the registered tests of an entry (PLAN.md section 7)


def inference(design, base: dict, rl: dict, resamples: int | None, seed: int | None) -> Inference:
    an = design.cfg.analyze
    n_base, N = base["sampling"]["n"], len(base["problems"])
    ns = {d["sampling"]["n"] for d in rl.values()}
    if len(ns) > 1:
        raise InputError(f"the trained models' evaluations have different n ({sorted(ns)}): one n per test set")
    n = ns.pop() if ns else n_base
    if n_base < n:
        raise InputError(
            f"eval_base.json: n={n_base} but the trained models' evaluations have n={n}; the base needs at least as many"
        )
    k = design.cfg.eval.k_max
    if k > n:
        raise InputError(f"{design.source}: config eval.k_max={k!r} must be an integer in 1..n={n}")
    levels = verdict.Levels(
        ci=an.ci,
        margin=an.equivalence_margin,
        selection_margin=an.selection_margin,
        headroom_fraction=an.margin_headroom_fraction,
    )
    return Inference(
        levels, verdict.Draws(N, resamples or an.resamples, an.seed if seed is None else seed), n, n_base, k
    )


# ============================================================================= entries (PLAN.md section 7)


def entry(
    cond: str, step: int, sc: str, seeds: list[int], docs: list[dict], base: dict, inf: Inference, null
) -> tuple[Entry, np.ndarray]:
    """One condition x checkpoint x scoring: verdict.compare's tests and label (raw p-values), the
    Delta pass@k curve vs the base with its simultaneous band and crossover, each seed's own Delta,
    coverage and the base-null reading's p-values (earlier_verdicts). Returns it and the replicate
    curves (B, K) of Delta pass@k."""
    cb, cr = counts(base, sc), np.stack([counts(d, sc) for d in docs])  # (N,), (S, N)
    e = verdict.compare(cb, inf.n_base, cr, inf.n, inf.k, null, inf.draws, inf.levels)
    base_curves, rl_curves = (
        pass_at_k_curves(cb, inf.n_base, inf.k),
        np.stack([pass_at_k_curves(c, inf.n, inf.k) for c in cr]),
    )
    per_seed = rl_curves.mean(axis=1) - base_curves.mean(axis=0)  # (S, K)
    reps = inf.draws.means(rl_curves, per_seed=True) - inf.draws.means(base_curves, per_seed=False)  # (B, K)
    point = per_seed.mean(axis=0)
    band_lo, band_hi, crit = simultaneous_band(point, reps, inf.levels.ci)
    ci1, cik = percentile_interval(reps[:, 0], inf.levels.ci), percentile_interval(reps[:, -1], inf.levels.ci)
    cover = [int(np.count_nonzero(c > 0)) for c in cr]
    only_rl = [int(np.count_nonzero((c > 0) & (cb == 0))) for c in cr]
    only_base = [int(np.count_nonzero((cb > 0) & (c == 0))) for c in cr]
    m = inf.levels.margin
    e.update(
        {
            "condition": cond,
            "step": step,
            "scoring": sc,
            "seeds": seeds,
            "k_max": inf.k,
            "passk_ci": list(cik),
            "passk_ci90": list(percentile_interval(reps[:, -1], 1 - 2 * inf.levels.tost)),
            "headroom": 1.0 - float(base_curves[:, -1].mean()),
            "ceiling_rises": bool(cik[0] > 0),
            "base_null": {
                "margin": m,
                "p_falls": p_below(reps[:, -1]),
                "p_equiv": p_equivalence(reps[:, -1], m),
                "p_rises_v2": float((1 + np.count_nonzero(reps[:, 0] <= 0)) / (inf.draws.resamples + 1)),
                "p_falls_v2": p_below(reps[:, -1], tie=0.0),
                "p_equiv_v2": p_equivalence(reps[:, -1], m, tie=0.0),
                "p_rises": float((1 + np.count_nonzero(reps[:, 0] <= TIE)) / (inf.draws.resamples + 1)),
            },
            "v1": verdict_v1(float(point[0]), ci1, float(point[-1]), cik),
            "crossover": crossover_summary(point, reps, inf.levels.ci),
            "band": {
                "level": inf.levels.ci,
                "crit": crit,
                "diff": point.tolist(),
                "lo": band_lo.tolist(),
                "hi": band_hi.tolist(),
            },
            "per_seed": [
                {
                    "seed": s,
                    "pass1_diff": float(ps[0]),
                    "passk_diff": float(ps[-1]),
                    "coverage_rl": cv,
                    "only_rl": o_rl,
                    "only_base": o_b,
                    "format_rl": d["format_rate"],
                }
                for s, ps, cv, o_rl, o_b, d in zip(seeds, per_seed, cover, only_rl, only_base, docs)
            ],
            "coverage_base": int(np.count_nonzero(cb > 0)),
            "coverage_rl": float(np.mean(cover)),
            "only_rl": float(np.mean(only_rl)),
            "only_base": float(np.mean(only_base)),
            "format_base": base["format_rate"],
            "format_rl": float(np.mean([d["format_rate"] for d in docs])),
        }
    )
    return e, reps


def entries(inputs: RunInputs, studied: list[str], inf: Inference, nulls: dict) -> tuple[dict, list[dict], dict]:
    """(curves, entries, replicates): each scoring's pass@k curves, the base's (N, K) and each studied condition's
    at each checkpoint as (seeds, (S, N, K)); one entry per studied condition x checkpoint x scoring with the
    seeds evaluated there (a partial run: fewer), the primary one marked; and each entry's (B, K) bootstrap
    replicates of Delta pass@k."""
    design, base = inputs.design, inputs.base
    last = design.checkpoints[-1]
    curves = {sc: {"base": pass_at_k_curves(counts(base, sc), inf.n_base, inf.k)} for sc in SCORINGS}
    out, boot = [], {}
    for cond in studied:
        for step in design.checkpoints:
            seeds, docs = inputs.seeds_at(cond, step), inputs.docs_at(cond, step)
            if not seeds:  # a partial run
                continue
            for sc in SCORINGS:
                curves[sc][(cond, step)] = (
                    seeds,
                    np.stack([pass_at_k_curves(counts(d, sc), inf.n, inf.k) for d in docs]),
                )
                e, boot[(cond, step, sc)] = entry(cond, step, sc, seeds, docs, base, inf, nulls[sc])
                e["primary"] = (cond, step, sc) == (design.primary_condition, last, design.primary_scoring)
                e["family"] = "primary" if e["primary"] else f"secondary-{sc}"
                out.append(e)
    return curves, out, boot


def raw_p(e: dict) -> dict:
    """An entry's registered p-values by test name (None: not asked)."""
    eq = e["vs_null"]["equivalence"]
    return {
        "rises": e["rises"]["p"],
        "falls": e["falls"]["p"],
        "above": e["vs_null"]["above"]["p"],
        "below": e["vs_null"]["below"]["p"],
        "equivalence": eq["p"] if eq else None,
    }


def judge(entries: list[dict], inf: Inference) -> dict:
    """PLAN.md section 7: the primary entry keeps its raw p-values; every other entry's registered
    tests (pass@1 rises, falls; the ceiling above, below and, where asked, within the margin of the
    selection null) are Holm-adjusted within its scoring's family (weighted Holm on p / level), with
    each adjusted p's Monte-Carlo SE, and the entry is labelled on the adjusted values. Returns the
    families."""
    a1 = inf.levels.one_sided
    level = {"rises": a1, "falls": a1, "above": a1, "below": a1, "equivalence": inf.levels.tost}
    families = {}
    for sc in SCORINGS:
        fam = [e for e in entries if not e["primary"] and e["scoring"] == sc]
        tests = [(e, t) for e in fam for t in TESTS if raw_p(e)[t] is not None]
        p = [raw_p(e)[t] for e, t in tests]
        lv = [level[t] for _, t in tests]
        adj, se = (holm(p, lv), holm_mc_se(p, lv, inf.draws.resamples)) if tests else ([], [])
        for e in fam:
            e["adjusted"] = dict.fromkeys(TESTS)
            e["adjusted_mc_se"] = dict.fromkeys(TESTS)
        for (e, t), x, s in zip(tests, adj, se):
            e["adjusted"][t], e["adjusted_mc_se"][t] = float(x), float(s)
        families[f"secondary-{sc}"] = {
            "scoring": sc,
            "size": len(tests),
            "entries": [f"{e['condition']}/{e['step']}" for e in fam],
            "tests": list(TESTS),
            "levels": level,
        }
    for e in entries:
        if e["primary"]:
            e["adjusted"] = raw_p(e)
            e["adjusted_mc_se"] = {
                t: (mc_se(x, inf.draws.resamples) if x is not None else None) for t, x in e["adjusted"].items()
            }
        e["label"], e["reason"] = verdict.label_from(e, inf.levels.one_sided, inf.levels.tost, e["adjusted"])
        e["near_level"] = [
            t
            for t, x in e["adjusted"].items()
            if x is not None and abs(x - level[t]) < 2 * (e["adjusted_mc_se"][t] or 0.0)
        ]
    return families


def earlier_verdicts(entries: list[dict], inf: Inference) -> dict:
    """The earlier versions' verdicts, kept beside the registered ones (PLAN.md section 7, "Earlier
    versions"). v3, change 29's base-null reading (the seed report's criterion made a test): selection
    <=> pass@1 rises AND (the ceiling pass@k_max is equivalent to the base's within +-margin, asked only
    where the margin is at most headroom_fraction of the base's headroom, OR it falls), Holm within a
    family of those three tests per scoring. v2: every test asked, no tie tolerance. v1: the first
    version's unadjusted interval rules (entry["v1"]). Returns their families."""
    a1, at, m, frac = inf.levels.one_sided, inf.levels.tost, inf.levels.margin, inf.levels.headroom_fraction
    fams = {}
    for e in entries:
        e["base_null"]["testable"] = bool(m <= frac * e["headroom"] + 1e-12)
    for sc in SCORINGS:
        fam = [e for e in entries if not e["primary"] and e["scoring"] == sc]
        for version, keys in (
            ("v3", ("p_rises", "p_falls", "p_equiv")),
            ("v2", ("p_rises_v2", "p_falls_v2", "p_equiv_v2")),
        ):
            tests = [
                (e, k, lv)
                for e in fam
                for k, lv in zip(keys, (a1, a1, at))
                if version == "v2" or k != "p_equiv" or e["base_null"]["testable"]
            ]
            adj = holm([e["base_null"][k] for e, k, _ in tests], [lv for *_, lv in tests]) if tests else []
            for (e, k, _), x in zip(tests, adj):
                e["base_null"][f"{k}_adj"] = float(x)
            fams[f"{version}-{sc}"] = len(tests)
    for e in entries:
        b = e["base_null"]
        for k in ("p_rises", "p_falls", "p_equiv", "p_rises_v2", "p_falls_v2", "p_equiv_v2"):
            if e["primary"] or f"{k}_adj" not in b:
                b[f"{k}_adj"] = (
                    b[k] if (e["primary"] and (k != "p_equiv" or b["testable"])) or k.endswith("_v2") else None
                )
        rises, falls = b["p_rises_adj"] < a1, b["p_falls_adj"] < a1
        equiv = (b["p_equiv_adj"] < at) if b["testable"] else None
        b.update(
            pass1_rises=rises,
            ceiling_falls=falls,
            ceiling_equivalent=equiv,
            selection=selection_answer(rises, falls, equiv),
            selection_v2=bool(b["p_rises_v2_adj"] < a1 and (b["p_equiv_v2_adj"] < at or b["p_falls_v2_adj"] < a1)),
        )
    return {"families": fams}


def third_clauses(entries: list[dict], boot: dict, inf: Inference) -> None:
    """The first version's one-third clause, inferential: asked only where pass@1 rises (the entry's
    label-level test); the interval of |Delta pass@k| - Delta pass@1 / 3 from the same replicates."""
    for e in entries:
        reps = boot[(e["condition"], e["step"], e["scoring"])]
        tc = (
            third_clause_interval(reps[:, 0], reps[:, -1], inf.levels.ci)
            if e["adjusted"]["rises"] < inf.levels.one_sided
            else None
        )
        e["v1"]["third_clause_ci"] = list(tc) if tc else None
        e["v1"]["third_clause"] = bool(tc[1] < 0) if tc else None


def stratum_nulls(inputs: RunInputs, entries: list[dict], inf: Inference, nulls: dict) -> dict:
    """verdict.stratum_null for every condition at the last checkpoint on the primary scoring: the selection
    null with one tilt per difficulty stratum (PLAN_CHANGES.md change 46), descriptive. Skipped for tasks without strata."""
    design, base = inputs.design, inputs.base
    strata = secondary.problem_strata(base)
    if not any(x is not None for x in strata):
        return {"skipped": "the task has no difficulty strata"}
    sc, last = design.primary_scoring, design.checkpoints[-1]
    cb = counts(base, sc)
    out = {"skipped": None, "scoring": sc, "step": last, "conditions": {}}
    for e in entries:
        if e["scoring"] == sc and e["step"] == last:
            cr = np.stack([counts(d, sc) for d in inputs.docs_at(e["condition"], last)])
            out["conditions"][e["condition"]] = {
                "primary": e["primary"],
                "uniform_diff": e["vs_null"]["diff"],
                **verdict.stratum_null(cb, inf.n_base, cr, inf.n, inf.k, nulls[sc], strata, inf.draws, inf.levels),
            }
    return out
