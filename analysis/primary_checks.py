"""What is asked beside the registered primary answer (PLAN.md section 7): H3 (does the ceiling narrow between the
first and the last checkpoint), power and sensitivity at the primary entry's design, the calibration arms (arms whose
truth is built in, judged as the study is), and change 42's support test. No torch."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
from scipy import stats as st

from analysis import calibration, support, verdict
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
from analysis.run_files import InputError
from analysis.run_inputs import RunInputs
from analysis.stats import (
    crossed_estimate,
    p_below,
    percentile_interval,
)
from countdown import SCORINGS

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


def calibrate(inputs: RunInputs, entries: list[dict], inf: Inference) -> dict:
    """The calibration arms on the primary scoring at the primary entry's design (its seeds, n, the
    base's n_base): the pool arms and the seed split (analysis/calibration.py) and the taught arm where a
    condition is registered for it. Skipped, with the reason, without a pool set or a primary entry."""
    design, base = inputs.design, inputs.base
    cal = design.cfg.analyze.calibration
    if cal is None:
        return {"skipped": "no calibration registered (analyze.calibration)", "arms": []}
    prim = next((e for e in entries if e["primary"]), None)
    pool_doc = inputs.files(cal.pool_set).base
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
    prim_counts = np.stack([counts(d, sc) for d in inputs.docs_at(prim["condition"], prim["step"])])
    split = calibration.seed_split_arm(
        prim_counts, inf.n, inf.k, inf.levels, cal.resplits, cal.resamples, inf.draws.seed
    )
    arms += [split] if split else []
    taught = cal.taught
    if taught:
        from countdown import Problem, stratum

        strata = np.array([stratum(Problem.from_row(p, base.get("task"))) for p in base["problems"]])
        want = design.settings[taught]["problems"].split(":", 1)[1]
        docs = inputs.docs_at(taught, prim["step"])
        if docs:
            tc = np.stack([counts(d, sc) for d in docs])
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


def support_tests(inputs: RunInputs, entries: list[dict], inf: Inference, post_hoc_w: float | None = None) -> dict:
    """The support test and the two-axis answer (analysis/support.py) of every condition at the last
    checkpoint on the primary scoring, at each registered sampler (analyze.support.pools: a base-only
    evaluation set of fresh draws). post_hoc_w: for a run registered before change 42, the test at that
    w* on its calibration pool, labelled post hoc. Skipped, with the reason, without either."""
    design, base = inputs.design, inputs.base
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
        doc = inputs.files(name).base
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
        cr = np.stack([counts(d, sc) for d in inputs.docs_at(e["condition"], last)])
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
