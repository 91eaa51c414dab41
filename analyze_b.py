"""The registered verdicts (PLAN.md section 7): a crossed bootstrap over training seeds and test
problems, one primary question, Holm-corrected secondary tests, equivalence for the ceiling;
then the secondary analyses, the report and the figures.

Reads RUN/eval_base.json and RUN/eval_<condition>_s<seed>_<step>.json, the registered `test` set
(older single-seed runs: eval_<condition>_<step>.json, read as seed 0); every other registered
evaluation set (config eval_sets) from RUN/evalsets/<set>/ under the same names; the token-level
files RUN/tokens_<condition>_s<seed>_<step>.json; the design from RUN/manifest.json's config (else
eval_base.json's); and, where present, train_*/train_log.csv, train_*/train_eval.csv,
lr_choice.json, selection.json and probe_*.json. Writes RUN/verdicts.json, RUN/report.md and
RUN/figures/*.png.

    python analyze_b.py --run results/tiny [--partial]

In brief (every formula is in the docstring of the stats.py function that computes it):
- Every difference is (RL - base), averaged over the training seeds and the test problems. Its
  uncertainty comes from a crossed bootstrap: each replicate draws the seeds and, independently,
  the problems with replacement (the same problems for the base and every seed). With one seed it
  is the paired bootstrap over problems of the first version, to the last digit.
- The primary question, asked once (analyze.primary_condition, analyze.primary_scoring, the last
  checkpoint): does RL select? pass@1 rises AND (the ceiling pass@k_max is equivalent to the
  base's within +-margin OR falls). An intersection-union test: each part at its own level,
  one-sided 0.025 for "rises"/"falls", TOST 0.05 for "equivalent", no correction needed.
- Every other entry is secondary: per scoring one family of three tests per entry (pass@1 rises,
  ceiling falls, ceiling equivalent), Holm-corrected; adjusted verdicts use adjusted p-values.
- The first version's criteria are kept beside them as *_v1 fields.
- The controls (H4-H6), pass@k beyond n, boundary counts, diversity, out-of-distribution sets and
  the token level are secondary.py's; report.py writes report.md, figures.py the figures.
This file imports no torch: it meets the rest of the pipeline only in JSON and CSV files.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as st

import figures
import report
import secondary
from countdown import SCORINGS
from provenance import atomic_write_text, content_sha256, file_sha256, move_aside
from run_files import (DEV_COLUMNS, DEV_REQUIRED, InputError, find_evals, find_set, find_tokens, read_csv, read_json)
from power import crossed_coverage, design_se, power_one_sided, t_result, variance_components
from stats import (TIE, boot_curves, crossed_estimate, crossed_replicates, crossover_summary, holm, holm_mc_se, mc_se, p_above, p_below,
                   p_equivalence, pass_at_k_curves, percentile_interval, resample_indices, seed_resample_indices,
                   selection_answer, simultaneous_band, third_clause_interval, verdict_v1)

ROOT = Path(__file__).resolve().parent


def _entry(cond: str, step: int, sc: str, seeds: list[int], docs: list[dict], base: dict, base_curves: np.ndarray,
           pr: np.ndarray, idx: np.ndarray, sidx: np.ndarray, ci: float, at: float, margin: float) -> tuple[dict, np.ndarray]:
    """One condition x checkpoint x scoring: its estimates, intervals, raw p-values, crossover,
    band and counts (the adjusted p-values and verdicts come later, once the families are known).
    base_curves: (N, K) the base's per-problem pass@k; pr: (S, N, K) each seed's. Returns the
    entry and its replicate curves (B, K)."""
    point, per_seed, reps = boot_curves(pr, base_curves, idx, sidx)
    d1, dk = float(point[0]), float(point[-1])
    ci1, cik = percentile_interval(reps[:, 0], ci), percentile_interval(reps[:, -1], ci)
    band_lo, band_hi, crit = simultaneous_band(point, reps, ci)
    cb = np.array([p[f"correct_{sc}"] for p in base["problems"]])
    cr = np.array([[p[f"correct_{sc}"] for p in d["problems"]] for d in docs])  # (S, N)
    cover = [int(np.count_nonzero(c > 0)) for c in cr]
    only_rl = [int(np.count_nonzero((c > 0) & (cb == 0))) for c in cr]
    only_base = [int(np.count_nonzero((cb > 0) & (c == 0))) for c in cr]
    return {
        "condition": cond, "step": step, "scoring": sc, "k_max": len(point), "seeds": seeds, "n_problems": int(base_curves.shape[0]),
        "pass1_base": float(base_curves[:, 0].mean()), "pass1_rl": float(pr[:, :, 0].mean(axis=1).mean()),
        "pass1_diff": d1, "pass1_ci": list(ci1),
        "passk_base": float(base_curves[:, -1].mean()), "passk_rl": float(pr[:, :, -1].mean(axis=1).mean()),
        "passk_diff": dk, "passk_ci": list(cik), "passk_ci90": list(percentile_interval(reps[:, -1], 1 - 2 * at)),
        "equivalence_margin": margin, "headroom": 1.0 - float(base_curves[:, -1].mean()),
        "p_pass1": p_above(reps[:, 0]), "p_passk_fall": p_below(reps[:, -1]), "p_equiv": p_equivalence(reps[:, -1], margin),
        "p_pass1_v2": p_above(reps[:, 0], tie=0.0), "p_passk_fall_v2": p_below(reps[:, -1], tie=0.0),
        "p_equiv_v2": p_equivalence(reps[:, -1], margin, tie=0.0),
        "ceiling_rises": bool(cik[0] > 0),
        **verdict_v1(d1, ci1, dk, cik),
        "crossover": crossover_summary(point, reps, ci),
        "band": {"level": ci, "crit": crit, "diff": point.tolist(), "lo": band_lo.tolist(), "hi": band_hi.tolist()},
        "per_seed": [{"seed": s, "pass1_diff": float(ps[0]), "passk_diff": float(ps[-1]), "coverage_rl": cv, "only_rl": o_rl,
                      "only_base": o_b, "format_rl": d["format_rate"]}
                     for s, ps, cv, o_rl, o_b, d in zip(seeds, per_seed, cover, only_rl, only_base, docs)],
        "coverage_base": int(np.count_nonzero(cb > 0)), "coverage_rl": float(np.mean(cover)),
        "only_rl": float(np.mean(only_rl)), "only_base": float(np.mean(only_base)),
        "format_base": base["format_rate"], "format_rl": float(np.mean([d["format_rate"] for d in docs])),
    }, reps


def _judge(entries: list[dict], boot: dict, a1: float, at: float, ci: float, margin: float, fraction: float, B: int) -> dict:
    """Holm within each secondary family, then every entry's verdicts from its adjusted p-values
    (the primary entry: raw p-values), each with its Monte-Carlo SE and a flag when it lies within
    2 SE of its level, and the one-third clause. The equivalence test is asked only where the margin
    is at most `fraction` of the base's headroom (1 - pass@k_max: then a rise of half the headroom is
    beyond the margin); elsewhere it "cannot fail on this set", is left out of the family, and the
    entry's selection is None unless the ceiling is shown to fall. The second version's verdicts
    (every test in the family, no headroom rule, no tie tolerance) are kept as *_v2. Returns the
    families."""
    for e in entries:
        e["ceiling_testable"] = bool(margin <= fraction * e["headroom"] + 1e-12)
    families = {}
    for sc in SCORINGS:
        fam = [e for e in entries if e["family"] == f"secondary-{sc}"]
        tests = [(e, k, lv) for e in fam for k, lv in (("pass1", a1), ("passk_fall", a1), ("equiv", at))
                 if k != "equiv" or e["ceiling_testable"]]
        p = [e[f"p_{k}"] for e, k, _ in tests]
        levels = [lv for _, _, lv in tests]
        adj, se = (holm(p, levels), holm_mc_se(p, levels, B)) if tests else ([], [])
        for (e, k, _), x, s in zip(tests, adj, se):
            e[f"p_{k}_adj"], e[f"p_{k}_adj_mc_se"] = float(x), float(s)
        for e in fam:
            if not e["ceiling_testable"]:
                e["p_equiv_adj"], e["p_equiv_adj_mc_se"] = None, None
        # the second version's family: all three tests of every entry, p-values without the tie tolerance
        v2 = [(e, k, lv) for e in fam for k, lv in (("pass1", a1), ("passk_fall", a1), ("equiv", at))]
        for (e, k, _), x in zip(v2, holm([e[f"p_{k}_v2"] for e, k, _ in v2], [lv for *_, lv in v2]) if v2 else []):
            e[f"p_{k}_adj_v2"] = float(x)
        families[f"secondary-{sc}"] = {
            "scoring": sc, "size": len(tests), "size_v2": len(v2), "entries": [f"{e['condition']}/{e['step']}" for e in fam],
            "tests": [f"pass@1 rises (one-sided, level {a1:g})", f"ceiling falls (one-sided, level {a1:g})",
                      f"ceiling equivalent within ±{margin:g} (TOST, level {at:g}), where the margin is at most "
                      f"{fraction:.3g} of the base's headroom"],
            "equivalence_asked": bool(fam and fam[0]["ceiling_testable"])}
    for e in entries:
        if e["primary"]:
            for k in ("pass1", "passk_fall", "equiv"):
                e[f"p_{k}_adj"], e[f"p_{k}_adj_v2"] = e[f"p_{k}"], e[f"p_{k}_v2"]
                e[f"p_{k}_adj_mc_se"] = mc_se(e[f"p_{k}"], B)
            if not e["ceiling_testable"]:
                e["p_equiv_adj"], e["p_equiv_adj_mc_se"] = None, None
        e["pass1_rises"] = e["p_pass1_adj"] < a1
        e["ceiling_falls"] = e["p_passk_fall_adj"] < a1
        e["ceiling_equivalent"] = (e["p_equiv_adj"] < at) if e["ceiling_testable"] else None
        e["selection"] = selection_answer(e["pass1_rises"], e["ceiling_falls"], e["ceiling_equivalent"])
        e["near_level"] = [name for name, k, lv in (("pass@1 rises", "pass1", a1), ("ceiling falls", "passk_fall", a1),
                                                     ("ceiling equivalent", "equiv", at))
                           if e.get(f"p_{k}_adj") is not None and abs(e[f"p_{k}_adj"] - lv) < 2 * e[f"p_{k}_adj_mc_se"]]
        e["pass1_rises_v2"], e["ceiling_falls_v2"] = e["p_pass1_adj_v2"] < a1, e["p_passk_fall_adj_v2"] < a1
        e["ceiling_equivalent_v2"] = e["p_equiv_adj_v2"] < at
        e["selection_v2"] = bool(e["pass1_rises_v2"] and (e["ceiling_equivalent_v2"] or e["ceiling_falls_v2"]))
        reps = boot[(e["condition"], e["step"], e["scoring"])]
        tc = third_clause_interval(reps[:, 0], reps[:, -1], ci) if e["pass1_rises"] else None
        e["third_clause_ci"] = list(tc) if tc else None
        e["third_clause"] = bool(tc[1] < 0) if tc else None
    return families


def primary_checks(prim: dict, curves: dict, design, a1: float, at: float, margin: float, n: int) -> tuple[dict, dict]:
    """Beside the registered primary answer: (sensitivity, power). Sensitivity: the variance
    components of the per-seed, per-problem Delta pass@1 and Delta pass@k_max (power.variance_components),
    the seed SD with its degrees of freedom, the random-effects t-based result for each part and
    whether it agrees with the registered verdict, and the expected coverage of the crossed
    interval at the measured components and at 1.5 x the seed SD (by simulation). Power: the smallest
    effects this design detects with the registered power, from a t quantile on its Satterthwaite df,
    and the planned power at the effect the plan names (analyze.planned)."""
    seeds, pr = curves[design.primary_scoring][(prim["condition"], prim["step"])]
    base = curves[design.primary_scoring]["base"]
    d1, dk = pr[:, :, 0] - base[:, 0], pr[:, :, -1] - base[:, -1]  # (S, N)
    vc1, vck = variance_components(d1), variance_components(dk)
    t1, tk, tk90 = t_result(vc1, 1 - 2 * a1), t_result(vck, 1 - 2 * a1), t_result(vck, 1 - 2 * at)
    t_rises, t_falls = t1["p_above"] < a1, tk["p_below"] < a1
    t_equiv = (tk90["ci"][0] > -margin and tk90["ci"][1] < margin) if prim["ceiling_testable"] else None
    t_selection = selection_answer(t_rises, t_falls, t_equiv)
    S, N = d1.shape
    cover = {}
    if S > 1:
        for name, vb in (("at the measured seed SD", vc1["V_B"]), ("at 1.5 x the measured seed SD", 2.25 * vc1["V_B"])):
            cover[name] = crossed_coverage(vc1["V_A"], vb, vc1["V_R"], N, S, level=1 - 2 * a1, sims=200, resamples=400,
                                           seed=design.seed)
    sens = {"pass1": vc1, "passk": vck, "t_pass1": t1, "t_passk": tk, "t_passk_90": tk90,
            "t_verdicts": {"pass1_rises": t_rises, "ceiling_falls": t_falls, "ceiling_equivalent": t_equiv, "selection": t_selection},
            "agrees": t_selection == prim["selection"], "coverage": cover,
            "method": "two-way crossed random effects (problems x seeds), method-of-moments components, Satterthwaite df; "
                      "coverage of the registered crossed-bootstrap interval simulated at the measured components"}
    tq = st.t.ppf
    pw = design.power
    mde1 = (tq(1 - a1, vc1["df"]) + tq(pw, vc1["df"])) * vc1["se"]
    mdek = (tq(1 - a1, vck["df"]) + tq(pw, vck["df"])) * vck["se"]
    eq = margin - (tq(1 - at, vck["df"]) + tq(pw, vck["df"])) * vck["se"]
    power = {"power": pw, "alpha_one_sided": a1, "alpha_tost": at, "n_problems": N, "seeds": S, "n_samples": n,
             "se_pass1": vc1["se"], "df_pass1": vc1["df"], "se_passk": vck["se"], "df_passk": vck["df"],
             "mde_pass1": float(mde1), "mde_passk": float(mdek), "equivalence_up_to": float(eq) if eq >= 0 else None,
             "method": "(t_{1-a, df} + t_{power, df}) x SE, SE and df from the variance components of the measured Deltas"}
    plan = design.analyze.get("planned")
    if plan:
        se, df = design_se(plan["problem_var"], plan["seed_var"], plan["residual_var"], N, S)
        power["planned"] = {**plan, "N": N, "S": S, "se": se, "df": df,
                            "power": power_one_sided(plan["effect"], se, df, a1),
                            "power_at_measured_components": power_one_sided(plan["effect"], vc1["se"], vc1["df"], a1)}
    power["statement"] = report.power_sentence(power, prim["k_max"], margin)
    return sens, power


def analyze(run: Path, resamples: int | None = None, seed: int | None = None, partial: bool = False) -> dict:
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
        raise InputError(f"{run}: {len(missing)} of {design.n_expected()} expected evaluations are missing "
                         f"({', '.join(missing)}); rerun the eval stage, or analyse what is there with --partial")
    B = resamples or design.resamples
    bseed = design.seed if seed is None else seed
    ci, margin = design.ci, design.margin
    a1, at = round((1 - ci) / 2, 12), round(1 - ci, 12)  # one-sided level (0.025), TOST level (0.05: the 90% interval)
    n, N = base["sampling"]["n"], len(base["problems"])
    k_max = design.config.get("eval", {}).get("k_max", n)
    if not (isinstance(k_max, int) and 1 <= k_max <= n):
        raise InputError(f"{design.source}: config eval.k_max={k_max!r} must be an integer in 1..n={n}")
    idx = resample_indices(N, B, bseed)  # one set of problem draws for every entry, H3 and the band
    seed_draws = {}

    def draws(S: int) -> np.ndarray:  # one set of seed draws per number of seeds
        if S not in seed_draws:
            seed_draws[S] = seed_resample_indices(S, B, bseed)
        return seed_draws[S]

    first, last = design.checkpoints[0], design.checkpoints[-1]
    curves = {sc: {"base": pass_at_k_curves([p[f"correct_{sc}"] for p in base["problems"]], n, k_max)} for sc in SCORINGS}
    entries, boot = [], {}
    for cond in design.conditions:
        for step in design.checkpoints:
            seeds = [s for s in design.seeds_of(cond) if (cond, s, step) in rl]
            if not seeds:  # a partial run
                continue
            docs = [rl[(cond, s, step)] for s in seeds]
            for sc in SCORINGS:
                pr = np.stack([pass_at_k_curves([p[f"correct_{sc}"] for p in d["problems"]], n, k_max) for d in docs])  # (S, N, K)
                curves[sc][(cond, step)] = (seeds, pr)
                e, boot[(cond, step, sc)] = _entry(cond, step, sc, seeds, docs, base, curves[sc]["base"], pr, idx,
                                                   draws(len(seeds)), ci, at, margin)
                e["primary"] = (cond, step, sc) == (design.primary_condition, last, design.primary_scoring)
                e["family"] = "primary" if e["primary"] else f"secondary-{sc}"
                entries.append(e)
    families = _judge(entries, boot, a1, at, ci, margin, design.analyze["margin_headroom_fraction"], B)
    # H3: Delta pass@k_max at the last minus the first checkpoint, the same seeds and problems in each replicate
    h3 = []
    for cond in design.conditions if last != first else []:
        for sc in SCORINGS:
            if (cond, first) not in curves[sc] or (cond, last) not in curves[sc]:
                continue
            (s1, p1), (s2, p2) = curves[sc][(cond, first)], curves[sc][(cond, last)]
            common = [s for s in s1 if s in s2]
            if not common:  # a partial run: no seed has both checkpoints yet
                continue
            a = p1[[s1.index(s) for s in common], :, -1]  # (S, N) pass@k_max at the first checkpoint
            b = p2[[s2.index(s) for s in common], :, -1]  # ... at the last
            reps = crossed_replicates(b, a, idx, draws(len(common)))
            p = p_below(reps)
            h3.append({"condition": cond, "scoring": sc, "first_step": first, "last_step": last, "seeds": common,
                       "passk_diff_first": crossed_estimate(a, curves[sc]["base"][:, -1])[0],
                       "passk_diff_last": crossed_estimate(b, curves[sc]["base"][:, -1])[0],
                       "diff": crossed_estimate(b, a)[0], "ci": list(percentile_interval(reps, ci)), "p_narrows": p, "narrows": p < a1})
    prim = next((e for e in entries if e["primary"]), None)
    if prim:
        sensitivity, power = primary_checks(prim, curves, design, a1, at, margin, n)
    else:
        sensitivity, power = None, {"statement": "No power statement: the primary entry's evaluations are missing."}
    controls = secondary.analyze_controls(design, base, rl, entries, B, bseed, ci, last, k_max)
    beyond = secondary.analyze_beyond(design, base, rl, sets, last, n, ci)
    diversity = secondary.analyze_diversity(design, base, rl, sets)
    ood = secondary.analyze_ood(design, sets, entries, curves, B, bseed, ci, draws, last, k_max)
    strategies = secondary.analyze_strategies(design, base, rl, idx, draws, ci)
    return {"entries": entries, "families": families, "h3": h3, "power": power, "sensitivity": sensitivity, "design": design,
            "missing": missing,
            "controls": controls, "beyond": beyond, "diversity": diversity, "ood": ood, "strategies": strategies, "tokens": secondary.analyze_tokens(design, tokens, tok_warnings),
            "sets": sets,
            "resamples": B, "ci": ci, "seed": bseed, "n": n, "k_max": k_max, "n_problems": N, "alpha_one": a1, "alpha_tost": at,
            "margin": margin, "base": base, "rl": rl, "curves": curves, "primary": prim,
            "primary_sentence": report.primary_sentence(prim, design, last, k_max, a1, at, margin, sensitivity)}


def check_extras(run: Path) -> None:
    """Read (and so validate) the training logs and the JSON files the figures and report use."""
    for f in list(run.glob("train_*/train_log.csv")) + list(run.glob("lr_sweep/lr_*/train_log.csv")):
        read_csv(f)
    for f in run.glob("train_*/train_eval.csv"):
        read_csv(f, required=DEV_REQUIRED, drawn=DEV_COLUMNS)
    for f in [run / "lr_choice.json", run / "selection.json"] + sorted(run.glob("probe_*.json")):
        if f.exists():
            d = read_json(f)
            need = {"lr_choice.json": ("rule", "mean_reward_last", "chosen"), "selection.json": ("rule", "informative", "sets", "short", "pass_rates")}.get(
                f.name, ("task", "n", "n_problems", "pass_at_k", "format_rate"))
            missing = [kk for kk in need if kk not in d]
            if missing:
                raise InputError(f"{f}: malformed (missing {', '.join(missing)})")


def verdicts_json(res: dict) -> dict:
    """What verdicts.json holds (the bulky per-k band stays in; the raw replicates do not)."""
    d = res["design"]
    prim = res["primary"]
    return {
        "primary": {"condition": d.primary_condition, "scoring": d.primary_scoring, "step": d.checkpoints[-1],
                    "question": "selection: pass@1 rises AND (ceiling equivalent OR ceiling falls)",
                    "test": f"intersection-union: pass@1 rises (one-sided p < {res['alpha_one']:g}) and (TOST p < {res['alpha_tost']:g} "
                            f"or ceiling falls (one-sided p < {res['alpha_one']:g})), raw p-values, no correction",
                    "answer": prim["selection"] if prim else None, "sentence": res["primary_sentence"]},
        "bootstrap": {"scheme": "crossed: each replicate draws the training seeds and, independently, the test problems with "
                                "replacement (the same problems for the base and every seed); statistic = mean over drawn seeds of "
                                "(RL − base) averaged over the drawn problems; percentile intervals; with one seed it is the paired "
                                "bootstrap over problems",
                      "resamples": res["resamples"], "seed": res["seed"], "interval": "percentile",
                      "p_values": "one-sided (1 + #{D* <= tie}) / (B + 1) for a rise, (1 + #{D* >= -tie}) / (B + 1) for a fall; "
                                  "TOST max((1 + #{D* <= -m + tie}) / (B + 1), (1 + #{D* >= m - tie}) / (B + 1)); "
                                  f"tie = {TIE:g} (PLAN.md section 7)"},
        "resamples": res["resamples"], "ci": res["ci"], "seed": res["seed"],
        "equivalence_margin": res["margin"],
        "alpha": {"one_sided": res["alpha_one"], "tost": res["alpha_tost"], "interval": res["ci"], "tost_interval": 1 - 2 * res["alpha_tost"],
                  "band": res["ci"]},
        "families": res["families"],
        "multiplicity": "Holm within each family, on p / level (weighted Holm), reported on each test's own scale: adjusted p = "
                        "level × Holm-adjusted(p / level), capped at 1; a test is passed when its adjusted p < its level. The "
                        "primary entry is in no family (intersection-union test on raw p-values). H3 and the one-third clause "
                        "are not adjusted.",
        "power": res["power"],
        "h3": res["h3"],
        "design": {"conditions": d.conditions, "seeds": d.seeds, "seeds_by_condition": d.seeds_by_condition or {}, "checkpoints": d.checkpoints, "source": d.source,
                   "layout": "single-seed (eval_<condition>_<step>.json, read as seed 0)" if d.legacy else "eval_<condition>_s<seed>_<step>.json"},
        "partial": bool(res["missing"]), "missing": res["missing"],
        "entries": res["entries"], "n": res["n"], "k_max": res["k_max"], "n_problems": res["n_problems"],
        "controls": {**res["controls"], "registered": {
            "H4": "with the KL anchor the few-problem condition's loose pass@k_max is equivalent to the base's (TOST, the entry's "
                  "Holm-adjusted p), while without it the ceiling falls (the entry's Holm-adjusted p); holds when both do",
            "H5": "share of the strict pass@1 gain of the twin strict-reward condition reached by the format-only reward: an estimate",
            "H6": "GRPO vs RFT and SFT on the loose pass@k curve: contrast curves with simultaneous bands and where they cross; descriptive"}},
        "eval_sets": {"test": {"task": res["base"].get("task"), "n": res["n"], "k_max": res["k_max"], "n_problems": res["n_problems"],
                               "models": "all", "files": ["eval_base.json"] + [d["_file"] for d in res["rl"].values()]},
                      **{name: {**spec, "files": ([f"evalsets/{name}/eval_base.json"] if res["sets"][name][0] is not None else [])
                                + [f"evalsets/{name}/{x['_file']}" for x in res["sets"][name][1].values()]}
                         for name, spec in d.eval_sets.items()}},
        "beyond_n": {k: v for k, v in res["beyond"].items() if not k.startswith("_") and k != "boundary"},
        "boundary": {"set": res["beyond"]["set"], "n": res["beyond"]["n"], "rows": res["beyond"]["boundary"]},
        "diversity": res["diversity"],
        "ood": {name: {k: v for k, v in o.items() if not k.startswith("_")} for name, o in res["ood"].items()},
        "tokens": res["tokens"],
        "strategies": res["strategies"],
    }


def run_analysis(run: Path, resamples: int | None = None, seed: int | None = None, make_figures: bool = True,
                 partial: bool = False) -> dict:
    """Everything is computed before anything is written: an input error leaves no partial output."""
    run = Path(run)
    res = analyze(run, resamples=resamples, seed=seed, partial=partial)
    check_extras(run)  # read every other input now: a bad one must stop us before anything is written
    out = verdicts_json(res)
    inputs = sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")) + sorted(run.glob("tokens_*.json"))
    # inputs: what each input computed (provenance.content_sha256: no timings, no time stamps), so that a
    # rerun that computes the same counts leaves the analysis done
    out["provenance"] = {"inputs": {f.relative_to(run).as_posix(): content_sha256(f) for f in inputs},
                         "analyze": res["design"].config.get("analyze"),
                         "plan_sha256": file_sha256(ROOT / "PLAN.md"), "config_hash": res["base"].get("provenance", {}).get("config_hash"),
                         "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    text = json.dumps(out, indent=1) + "\n"
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    # A rerun replaces nothing in place. Before a first analysis figures/ holds only what the pipeline drew
    # while training ran (training.png), which is drawn again here: nothing to keep.
    analysed = (run / "verdicts.json").exists() or (run / "report.md").exists()
    for old in (run / "verdicts.json", run / "report.md") + ((run / "figures",) if analysed else ()):
        if (dest := move_aside(run, old, when)) is not None:
            print(f"moved aside {old.relative_to(run)} -> {dest.relative_to(run)} (the analysis is redone)", flush=True)
    figs = figures.figures(run, res) if make_figures else []
    rep = report.report(run, res, figs)
    atomic_write_text(run / "report.md", rep)
    atomic_write_text(run / "verdicts.json", text)  # last: the pipeline's "done" marker
    return out


# What an analysis reads from a run folder is everything but these: weights, resume points, what was moved
# aside, the lock, and the analysis' own outputs (written anew).
NOT_INPUTS = ("*.safetensors", "*.bin", "*.pt", "last", "superseded", ".pipeline.lock", "verdicts.json", "report.md", "figures")


def copy_inputs(run: Path, out: Path) -> None:
    """Copy what the analysis reads from `run` into the new folder `out` (NOT_INPUTS left out)."""
    top = shutil.ignore_patterns(*NOT_INPUTS)
    below = shutil.ignore_patterns(*NOT_INPUTS[:5])  # a train_*/figures/ or report.md below the top is an input's, kept

    def ignore(folder, names):
        return top(folder, names) if Path(folder) == run else below(folder, names)

    shutil.copytree(run, out, ignore=ignore, dirs_exist_ok=True)


def remake_hint(run: Path, message: str) -> str:
    """The command that makes the file an InputError names again: its job's command from
    RUN/manifest.json (an evaluation or token file; with its paths pointed at this folder), else the
    pipeline on the folder with the config the manifest's jobs name (it redoes a damaged output)."""
    import shlex

    import study

    named = Path(message.split(": ", 1)[0])
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
        if argv[1:3] not in (["grpo.py", "eval"], ["grpo.py", "tokens"]) or "--out" in opt:
            continue
        adapter = opt.get("--adapter")
        try:
            made = (study.eval_dir(Path(then), opt.get("--eval-set", "test")) / study.eval_name(adapter) if argv[2] == "eval"
                    else Path(then) / study.tokens_name(adapter))
        except Exception:  # an adapter path not named as the pipeline names them
            continue
        if (run / made.relative_to(then)).resolve() == (named if named.is_absolute() else Path.cwd() / named).resolve():
            return "make it again: " + shlex.join(str(run) + x[len(then):] if x == then or x.startswith(then + "/") else x for x in argv)
    if config is not None:
        sets = sum((["--set", x] for x in config[1]), [])
        return ("redo what is damaged: " + shlex.join(["python", "pipeline.py", "--config", config[0], "--out", str(run), *sets])
                + " (the pipeline moves a damaged output aside and makes it again)")
    return f"redo what is damaged: python pipeline.py --config <the config {run} was made with> --out {shlex.quote(str(run))}"


def read_json_or_none(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Crossed-bootstrap verdicts, coverage, crossover, figures and a report for one run.")
    p.add_argument("--run", required=True, help="the run folder holding eval_*.json")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="a new folder for verdicts.json, report.md and figures/: the run's inputs are copied there (weights left "
                        "out) and analysed, leaving --run untouched (a committed run, a read-only one)")
    p.add_argument("--resamples", type=int, default=None, help="bootstrap resamples (default: the run's config, analyze.resamples)")
    p.add_argument("--seed", type=int, default=None, help="bootstrap seed (default: the run's config, analyze.seed)")
    p.add_argument("--partial", action="store_true", help="analyse a run with expected evaluations missing (the report says so)")
    p.add_argument("--no-figures", action="store_true")
    a = p.parse_args(argv)
    run = Path(a.run)
    if not run.is_dir():
        print(f"analyze_b.py: --run {run}: no such folder", file=sys.stderr)
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
    try:
        if a.out:
            copy_inputs(run, target)
        out = run_analysis(target, a.resamples, a.seed, not a.no_figures, partial=a.partial)
    except (InputError, OSError) as e:
        if a.out:  # the copy is ours and holds no result: the folder goes back to how it was given
            shutil.rmtree(target, ignore_errors=True)
            if not made:
                target.mkdir(exist_ok=True)  # it was there, empty
        if isinstance(e, InputError):
            msg = str(e).replace(str(target), str(run)) if a.out else str(e)
            print(f"analyze_b.py: {msg}; {remake_hint(run, msg)}", file=sys.stderr)
        else:
            print(f"analyze_b.py: cannot write {e.filename or target}: {e.strerror or e}; analyse into a folder of your own: "
                  f"python analyze_b.py --run {run} --out NEW_FOLDER", file=sys.stderr)
        return 1
    print(report.headline(out))
    print(f"wrote {target / 'verdicts.json'} and {target / 'report.md'}" + (f" (from the inputs of {run}, copied there)" if a.out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
