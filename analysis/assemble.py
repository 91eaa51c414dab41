"""The registered verdicts (PLAN.md section 7), then the secondary analyses, assembled into one
document (verdicts.json) and printed (report.md, figures/). The analysis command is analyze_b.py.

Reads RUN/eval_base.json and RUN/eval_<condition>_s<seed>_<step>.json (the registered `test` set;
older single-seed runs: eval_<condition>_<step>.json, read as seed 0), every other registered
evaluation set from RUN/evalsets/<set>/ (the calibration pool among them), the token-level files, the
design from RUN/manifest.json's config (else eval_base.json's), and where present the training logs,
lr_choice.json, selection.json and probe_*.json. Writes RUN/verdicts.json, RUN/report.md and
RUN/figures/*.png.

In PLAN.md's order (every formula is in the docstring of the function that computes it):
- calibration: arms whose truth is known (analysis/calibration.py), judged by the same code as the study;
- the primary question and its label (analysis/verdict.py): pass@1 rises or falls, and the ceiling pass@k_max
  against the selection null, the base reweighted to the trained model's pass@1 (analysis/reweight.py);
- the secondary entries, Holm-corrected within one family per scoring, relabelled on adjusted p-values;
- the earlier versions' verdicts (the base-null reading of change 29, *_v2, *_v1), for comparison;
- H3, power and sensitivity, strata, then the controls (H4-H6), beyond n, boundary, diversity,
  out of distribution, strategies and tokens (analysis/secondary.py).
The analysis computes numbers; analysis/report.py writes every sentence. No torch: this meets the pipeline
only in JSON and CSV files.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
from scipy import stats as st

from analysis import (
    base_support,
    baselines,
    calibration,
    collapse,
    figures,
    inputs,
    report,
    secondary,
    stats,
    support,
    training_sampler,
    verdict,
)
from analysis.document import Entry
from analysis.inference import Inference, counts
from analysis.power import (
    count_coverage,
    design_se,
    equivalence_up_to,
    power_equivalence,
    power_one_sided,
    seed_var_upper,
    variance_components,
)
from analysis.reweight import selection_null
from analysis.run_files import (
    DEV_COLUMNS,
    DEV_REQUIRED,
    InputError,
    find_evals,
    find_set,
    find_tokens,
    read_csv,
    read_json,
)
from analysis.stats import (
    TIE,
    crossed_estimate,
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
from orchestration import provenance
from orchestration.provenance import atomic_write_text, content_sha256, move_aside

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


# ============================================================================= H3, power, sensitivity


def narrowing(design, curves: dict, inf: Inference) -> list[dict]:
    """H3: Delta pass@k_max at the last minus the first checkpoint, the same seeds and problems in
    each replicate; narrows <=> one-sided p < a1 (the replicates below 0)."""
    first, last = design.checkpoints[0], design.checkpoints[-1]
    out = []
    for cond in design.conditions if last != first else []:
        for sc in SCORINGS:
            if (cond, first) not in curves[sc] or (cond, last) not in curves[sc]:
                continue
            (s1, p1), (s2, p2) = curves[sc][(cond, first)], curves[sc][(cond, last)]
            common = [s for s in s1 if s in s2]
            if not common:  # a partial run: no seed has both checkpoints yet
                continue
            a = p1[[s1.index(s) for s in common], :, -1]  # (S, N) pass@k_max at the first checkpoint
            b = p2[[s2.index(s) for s in common], :, -1]
            reps = inf.draws.means(b) - inf.draws.means(a)
            p = p_below(reps)
            base_k = curves[sc]["base"][:, -1]
            out.append(
                {
                    "condition": cond,
                    "scoring": sc,
                    "first_step": first,
                    "last_step": last,
                    "seeds": common,
                    "passk_diff_first": crossed_estimate(a, base_k)[0],
                    "passk_diff_last": crossed_estimate(b, base_k)[0],
                    "diff": crossed_estimate(b, a)[0],
                    "ci": list(percentile_interval(reps, inf.levels.ci)),
                    "p_narrows": p,
                    "narrows": p < inf.levels.one_sided,
                }
            )
    return out


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def primary_checks(prim: dict, curves: dict, design, base: dict, inf: Inference) -> tuple[dict, dict]:
    """Beside the registered primary answer: (sensitivity, power), numbers only.
    Sensitivity: the variance components of the per-seed, per-problem Delta pass@1 and Delta pass@k_max
    (power.variance_components) and the crossed interval's coverage of Delta pass@1 from
    analyze.coverage_sims count-level simulations (power.count_coverage) at the measured components and
    at 1.5 x the measured seed SD. Power: the smallest effects the design detects with the registered
    power (t quantiles on Satterthwaite's df); TOST's power at Delta = 0 (both one-sided tests) and the
    largest |Delta| at which it keeps the registered power; the planned power at the plan's components
    and at the 80% upper confidence limit of its seed variance."""
    sc = design.primary_scoring
    seeds, pr = curves[sc][(prim["condition"], prim["step"])]
    bc = curves[sc]["base"]
    d1, dk = pr[:, :, 0] - bc[:, 0], pr[:, :, -1] - bc[:, -1]  # (S, N)
    vc1, vck = variance_components(d1), variance_components(dk)
    S, N = d1.shape
    a1, at, pw, m = inf.levels.one_sided, inf.levels.tost, design.cfg.analyze.power, inf.levels.margin
    sims = design.cfg.analyze.coverage_sims
    cover = {}
    if S > 1 and N > 1:  # one problem: no problem variance to simulate at
        for name, factor in (("measured", 1.0), ("1.5x", 2.25)):
            cover[name] = count_coverage(
                counts(base, sc),
                inf.n_base,
                prim["pass1_diff"],
                vc1["V_A"],
                factor * vc1["V_B"],
                S,
                inf.n,
                level=1 - 2 * a1,
                sims=sims,
                resamples=400,
                seed=design.cfg.analyze.seed,
            )
    sens = {"pass1": vc1, "passk": vck, "coverage": cover}
    tq = st.t.ppf
    power = {
        "power": pw,
        "alpha_one_sided": a1,
        "alpha_tost": at,
        "n_problems": N,
        "seeds": S,
        "n_samples": inf.n,
        "n_base": inf.n_base,
        "se_pass1": vc1["se"],
        "df_pass1": vc1["df"],
        "se_passk": vck["se"],
        "df_passk": vck["df"],
        "mde_pass1": float((tq(1 - a1, vc1["df"]) + tq(pw, vc1["df"])) * vc1["se"]),
        "mde_passk": float((tq(1 - a1, vck["df"]) + tq(pw, vck["df"])) * vck["se"]),
        "tost_power_at_zero": _finite(power_equivalence(0.0, vck["se"], vck["df"], m, at)),
        "equivalence_up_to": equivalence_up_to(vck["se"], vck["df"], m, at, pw),
        "margin": m,
    }
    plan = design.cfg.analyze.planned
    if plan is not None:
        se, df = design_se(plan.problem_var, plan.seed_var, plan.residual_var, N, S)
        upper = seed_var_upper(plan.seed_var, plan.seed_df, 0.8)
        se_u, df_u = design_se(plan.problem_var, upper, plan.residual_var, N, S)
        power["planned"] = {
            **asdict(plan),
            "N": N,
            "S": S,
            "se": se,
            "df": df,
            "power": power_one_sided(plan.effect, se, df, a1),
            "seed_var_upper80": upper,
            "power_at_seed_var_upper80": power_one_sided(plan.effect, se_u, df_u, a1),
            "power_at_measured_components": power_one_sided(plan.effect, vc1["se"], vc1["df"], a1),
        }
    return sens, power


# ============================================================================= calibration (PLAN.md section 7)


def calibrate(design, base: dict, rl: dict, sets: dict, entries: list[dict], inf: Inference) -> dict:
    """The calibration arms on the primary scoring at the primary entry's design (its seeds, n, the
    base's n_base): the pool arms and the seed split (analysis/calibration.py) and the taught arm where a
    condition is registered for it. Skipped, with the reason, without a pool set or a primary entry."""
    cal = design.cfg.analyze.calibration
    if cal is None:
        return {"skipped": "no calibration registered (analyze.calibration)", "arms": []}
    prim = next((e for e in entries if e["primary"]), None)
    pool_doc = (sets.get(cal.pool_set) or (None,))[0]
    if prim is None or pool_doc is None:
        return {
            "skipped": f"{'the primary entry' if prim is None else 'evalsets/' + cal.pool_set + '/eval_base.json'} is missing",
            "arms": [],
        }
    sc = design.primary_scoring
    if [p["id"] for p in pool_doc["problems"]] != [p["id"] for p in base["problems"]]:
        raise InputError(f"evalsets/{cal.pool_set}/eval_base.json: its problems must be the test set's, all of them")
    pool, n_pool = counts(pool_doc, sc), pool_doc["sampling"]["n"]
    S = len(prim["seeds"])
    arms = calibration.pool_arms(
        counts(base, sc), inf.n_base, pool, n_pool, S, inf.n, inf.k, inf.levels, cal, inf.draws.seed
    )
    prim_counts = np.stack([counts(rl[(prim["condition"], s, prim["step"])], sc) for s in prim["seeds"]])
    split = calibration.seed_split_arm(
        prim_counts, inf.n, inf.k, inf.levels, cal.resplits, cal.resamples, inf.draws.seed
    )
    arms += [split] if split else []
    taught = cal.taught
    if taught:
        from countdown import Problem, stratum

        strata = np.array([stratum(Problem.from_row(p, base.get("task"))) for p in base["problems"]])
        want = design.settings[taught]["problems"].split(":", 1)[1]
        seeds = [s for s in design.seeds_of(taught) if (taught, s, prim["step"]) in rl]
        if seeds:
            tc = np.stack([counts(rl[(taught, s, prim["step"])], sc) for s in seeds])
            arms.append(
                calibration.taught_arm(
                    taught,
                    want,
                    (strata == want) & (pool == 0),
                    counts(base, sc),
                    inf.n_base,
                    tc,
                    inf.n,
                    inf.k,
                    inf.levels,
                    verdict.Draws(len(pool), cal.resamples, inf.draws.seed),
                )
            )
    return {
        "skipped": None,
        "scoring": sc,
        "pool_set": cal.pool_set,
        "n_pool": n_pool,
        "n_base": inf.n_base,
        "seeds": S,
        "n": inf.n,
        "resplits": cal.resplits,
        "resamples": cal.resamples,
        "arms": arms,
        "calibrated": all(a["passed"] is not False for a in arms),
    }


# ============================================================================= support (PLAN_CHANGES.md change 42)


def support_tests(
    design, base: dict, rl: dict, sets: dict, entries: list[dict], inf: Inference, post_hoc_w: float | None = None
) -> dict:
    """The support test and the two-axis answer (analysis/support.py) of every condition at the last
    checkpoint on the primary scoring, at each registered sampler (analyze.support.pools: a base-only
    evaluation set of fresh draws). post_hoc_w: for a run registered before change 42, the test at that
    w* on its calibration pool, labelled post hoc. Skipped, with the reason, without either."""
    spec, cal = design.cfg.analyze.support, design.cfg.analyze.calibration
    if post_hoc_w is not None:  # the registered samplers if any, else the calibration pool at the evaluation sampler
        pools, w_star, registered = {"eval": "pool" if cal is None else cal.pool_set}, post_hoc_w, False
        if spec is not None:
            pools = spec.pools
    elif spec is None:
        return {"skipped": "no support test registered (analyze.support)"}
    else:
        pools, w_star, registered = spec.pools, spec.w_star, True
    sc, last = design.primary_scoring, design.checkpoints[-1]
    drawn = {}
    for sampler, name in pools.items():
        doc = (sets.get(name) or (None,))[0]
        if doc is None:
            return {"skipped": f"evalsets/{name}/eval_base.json is missing"}
        if [p["id"] for p in doc["problems"]] != [p["id"] for p in base["problems"]]:
            raise InputError(f"evalsets/{name}/eval_base.json: its problems must be the test set's, all of them")
        if name in design.cfg.eval_sets and design.cfg.eval_sets[name].seeds != "own":
            raise InputError(
                f"evalsets/{name}: sampled with the test set's seeds, so its draws are the ones Z is chosen on; the "
                "support test needs a base-only set with seeds: own"
            )
        drawn[sampler] = (name, counts(doc, sc), doc["sampling"]["n"], doc.get("sampling"))
    out = {
        "skipped": None,
        "registered": registered,
        "w_star": float(w_star),
        "scoring": sc,
        "step": last,
        "samplers": {k: {"set": pools[k], "sampling": v[3]} for k, v in drawn.items()},
        "conditions": {},
    }
    cb = counts(base, sc)
    for e in entries:
        if e["scoring"] != sc or e["step"] != last:
            continue
        cr = np.stack([counts(rl[(e["condition"], s, last)], sc) for s in e["seeds"]])
        tests = {
            k: support.support_test(
                cb,
                pc,
                n_pool,
                cr,
                inf.n,
                w_star,
                inf.levels.one_sided,
                inf.draws.resamples,
                inf.draws.seed,
                "test",
                measured,
            )
            for k, (measured, pc, n_pool, _) in drawn.items()
        }
        out["conditions"][e["condition"]] = {
            "primary": e["primary"],
            "tests": tests,
            "changes": support.support_changes(cb, cr),
            "axes": support.two_axes(e, tests, inf.levels.one_sided),
        }
    return out


def stratum_nulls(design, base: dict, rl: dict, entries: list[dict], inf: Inference, nulls: dict) -> dict:
    """verdict.stratum_null for every condition at the last checkpoint on the primary scoring: the selection
    null with one tilt per difficulty stratum (PLAN_CHANGES.md change 46), descriptive. Skipped for tasks without strata."""
    strata = secondary.problem_strata(base)
    if not any(x is not None for x in strata):
        return {"skipped": "the task has no difficulty strata"}
    sc, last = design.primary_scoring, design.checkpoints[-1]
    cb = counts(base, sc)
    out = {"skipped": None, "scoring": sc, "step": last, "conditions": {}}
    for e in entries:
        if e["scoring"] == sc and e["step"] == last:
            cr = np.stack([counts(rl[(e["condition"], s, last)], sc) for s in e["seeds"]])
            out["conditions"][e["condition"]] = {
                "primary": e["primary"],
                "uniform_diff": e["vs_null"]["diff"],
                **verdict.stratum_null(cb, inf.n_base, cr, inf.n, inf.k, nulls[sc], strata, inf.draws, inf.levels),
            }
    return out


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
    base, rl, missing, design = find_evals(run)
    sets = {}
    for name in design.eval_sets:
        sb, srl, smiss = find_set(run, design, name)
        sets[name] = (sb, srl, f"evalsets/{name}/")
        missing = missing + smiss
    tokens, tok_missing, tok_warnings = find_tokens(run, design)
    missing = missing + tok_missing
    if missing and not partial:
        raise InputError(
            f"{run}: {len(missing)} of {design.n_expected()} expected evaluations are missing "
            f"({', '.join(missing)}); rerun the eval stage, or analyse what is there with --partial",
            path=run,
        )
    inf = inference(design, base, rl, resamples, seed)
    taught = design.cfg.analyze.calibration.taught if design.cfg.analyze.calibration is not None else None
    studied = [c for c in design.conditions if c != taught]
    last = design.checkpoints[-1]
    curves = {sc: {"base": pass_at_k_curves(counts(base, sc), inf.n_base, inf.k)} for sc in SCORINGS}
    nulls = {sc: selection_null(counts(base, sc), inf.n_base, inf.k) for sc in SCORINGS}
    entries, boot = [], {}
    for cond in studied:
        for step in design.checkpoints:
            seeds = [s for s in design.seeds_of(cond) if (cond, s, step) in rl]
            if not seeds:  # a partial run
                continue
            docs = [rl[(cond, s, step)] for s in seeds]
            for sc in SCORINGS:
                curves[sc][(cond, step)] = (
                    seeds,
                    np.stack([pass_at_k_curves(counts(d, sc), inf.n, inf.k) for d in docs]),
                )
                e, boot[(cond, step, sc)] = entry(cond, step, sc, seeds, docs, base, inf, nulls[sc])
                e["primary"] = (cond, step, sc) == (design.primary_condition, last, design.primary_scoring)
                e["family"] = "primary" if e["primary"] else f"secondary-{sc}"
                entries.append(e)
    families = judge(entries, inf)
    earlier = earlier_verdicts(entries, inf)
    third_clauses(entries, boot, inf)
    prim = next((e for e in entries if e["primary"]), None)
    sensitivity, power = primary_checks(prim, curves, design, base, inf) if prim else (None, None)
    idx, draws = inf.draws.idx, lambda S: stats.seed_resample_indices(S, inf.draws.resamples, inf.draws.seed)
    return {
        "design": design,
        "inference": inf,
        "missing": missing,
        "base": base,
        "rl": rl,
        "sets": sets,
        "curves": curves,
        "entries": entries,
        "families": families,
        "earlier": earlier,
        "primary": prim,
        "calibration": calibrate(design, base, rl, sets, entries, inf),
        "support": support_tests(design, base, rl, sets, entries, inf, support_w),
        "base_support": base_support.analyze(design, base, rl, sets, inf),
        "within_correct": training_sampler.analyze(design, base, sets, inf),
        "baselines": baselines.analyze(design, base, rl, sets, inf),
        "collapse": collapse.analyze(run, design, rl, sets),
        "stratum_null": stratum_nulls(design, base, rl, entries, inf, nulls),
        "h3": narrowing(design, curves, inf),
        "power": power,
        "sensitivity": sensitivity,
        "strata": secondary.analyze_strata(design, base, rl, studied, inf, last),
        "controls": secondary.analyze_controls(design, base, rl, entries, inf, last),
        "beyond": secondary.analyze_beyond(design, base, rl, sets, last, inf.n_base, inf.n, inf.levels.ci),
        "diversity": secondary.analyze_diversity(design, base, rl, sets),
        "ood": secondary.analyze_ood(
            design, sets, entries, curves, inf.draws.resamples, inf.draws.seed, inf.levels.ci, draws, last, inf.k
        ),
        "strategies": secondary.analyze_strategies(design, base, rl, idx, draws, inf.levels.ci),
        "tokens": secondary.analyze_tokens(design, tokens, tok_warnings),
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
    d, inf, prim = res["design"], res["inference"], res["primary"]
    label, question = registered_question(res, d)
    doc = {
        "primary": {
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
        },
        "calibration": res["calibration"],
        "support": res["support"],
        "stratum_null": res["stratum_null"],
        "levels": {
            "ci": inf.levels.ci,
            "one_sided": inf.levels.one_sided,
            "tost": inf.levels.tost,
            "margin": inf.levels.margin,
            "selection_margin": inf.levels.selection_margin,
            "headroom_fraction": inf.levels.headroom_fraction,
        },
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
        "partial": bool(res["missing"]),
        "missing": res["missing"],
        "entries": res["entries"],
        "strata": res["strata"],
        "controls": res["controls"],
        "eval_sets": {
            "test": {
                "task": res["base"].get("task"),
                "n": inf.n,
                "n_base": inf.n_base,
                "k_max": inf.k,
                "n_problems": res["n_problems"],
                "models": "all",
                "files": ["eval_base.json"] + [x["_file"] for x in res["rl"].values()],
            },
            **{
                name: {
                    **spec,
                    "files": ([f"evalsets/{name}/eval_base.json"] if res["sets"][name][0] is not None else [])
                    + [f"evalsets/{name}/{x['_file']}" for x in res["sets"][name][1].values()],
                }
                for name, spec in d.eval_sets.items()
            },
        },
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
        inputs.warnings(run, res),
        inputs.collect(run, res),
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
        "config_hash": res["base"].get("provenance", {}).get("config_hash"),
        "time": provenance.now(),
        "run": run.name,
        "files": inputs.files(run),
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
