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
import sys
import time
from pathlib import Path

import numpy as np

import figures
import report
import secondary
from countdown import SCORINGS
from provenance import atomic_write_text, content_sha256, file_sha256, move_aside
from run_files import (DEV_COLUMNS, DEV_REQUIRED, InputError, find_evals, find_set, find_tokens, read_csv, read_json)
from stats import (boot_curves, crossed_estimate, crossed_replicates, crossover_summary, detectable, holm, p_above, p_below,
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
        "condition": cond, "step": step, "scoring": sc, "k_max": len(point), "seeds": seeds,
        "pass1_base": float(base_curves[:, 0].mean()), "pass1_rl": float(pr[:, :, 0].mean(axis=1).mean()),
        "pass1_diff": d1, "pass1_ci": list(ci1),
        "passk_base": float(base_curves[:, -1].mean()), "passk_rl": float(pr[:, :, -1].mean(axis=1).mean()),
        "passk_diff": dk, "passk_ci": list(cik), "passk_ci90": list(percentile_interval(reps[:, -1], 1 - 2 * at)),
        "equivalence_margin": margin,
        "p_pass1": p_above(reps[:, 0]), "p_passk_fall": p_below(reps[:, -1]), "p_equiv": p_equivalence(reps[:, -1], margin),
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


def _judge(entries: list[dict], boot: dict, a1: float, at: float, ci: float, margin: float) -> dict:
    """Holm within each secondary family (three tests per entry, each on its own level), then the
    verdicts of every entry from its adjusted p-values (the primary entry: raw p-values), and the
    one-third clause. Returns the family definitions."""
    families = {}
    for sc in SCORINGS:
        fam = [e for e in entries if e["family"] == f"secondary-{sc}"]
        p = [x for e in fam for x in (e["p_pass1"], e["p_passk_fall"], e["p_equiv"])]
        adj = holm(p, [a1, a1, at] * len(fam))
        for i, e in enumerate(fam):
            e["p_pass1_adj"], e["p_passk_fall_adj"], e["p_equiv_adj"] = (float(x) for x in adj[3 * i:3 * i + 3])
        families[f"secondary-{sc}"] = {
            "scoring": sc, "size": 3 * len(fam), "entries": [f"{e['condition']}/{e['step']}" for e in fam],
            "tests": [f"pass@1 rises (one-sided, level {a1:g})", f"ceiling falls (one-sided, level {a1:g})",
                      f"ceiling equivalent within ±{margin:g} (TOST, level {at:g})"]}
    for e in entries:
        if e["primary"]:
            e["p_pass1_adj"], e["p_passk_fall_adj"], e["p_equiv_adj"] = e["p_pass1"], e["p_passk_fall"], e["p_equiv"]
        e["pass1_rises"] = e["p_pass1_adj"] < a1
        e["ceiling_falls"] = e["p_passk_fall_adj"] < a1
        e["ceiling_equivalent"] = e["p_equiv_adj"] < at
        e["selection"] = selection_answer(e["p_pass1_adj"], e["p_passk_fall_adj"], e["p_equiv_adj"], a1, at)
        reps = boot[(e["condition"], e["step"], e["scoring"])]
        tc = third_clause_interval(reps[:, 0], reps[:, -1], ci) if e["pass1_rises"] else None
        e["third_clause_ci"] = list(tc) if tc else None
        e["third_clause"] = bool(tc[1] < 0) if tc else None
    return families


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
            seeds = [s for s in design.seeds if (cond, s, step) in rl]
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
    families = _judge(entries, boot, a1, at, ci, margin)
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
        reps = boot[(prim["condition"], prim["step"], prim["scoring"])]
        se1, sek = float(reps[:, 0].std(ddof=1)), float(reps[:, -1].std(ddof=1))
        power = {"power": design.power, "alpha_one_sided": a1, "alpha_tost": at, "n_problems": N, "seeds": len(prim["seeds"]),
                 "n_samples": n, "se_pass1": se1, "se_passk": sek, **detectable(se1, sek, a1, at, design.power, margin),
                 "method": "(z_{1-a} + z_power) x SE, SE = the crossed-bootstrap SE of the observed primary Delta "
                           "(normal approximation; the SE includes the RL model's spread, not only the base's)"}
        power["statement"] = report.power_sentence(power, k_max, margin)
    else:
        power = {"statement": "No power statement: the primary entry's evaluations are missing."}
    controls = secondary.analyze_controls(design, base, rl, entries, B, bseed, ci, last, k_max)
    beyond = secondary.analyze_beyond(design, base, rl, sets, last, n)
    diversity = secondary.analyze_diversity(design, base, rl, sets)
    ood = secondary.analyze_ood(design, sets, entries, curves, B, bseed, ci, draws, last, k_max)
    strategies = secondary.analyze_strategies(design, base, rl, idx, draws, ci)
    return {"entries": entries, "families": families, "h3": h3, "power": power, "design": design, "missing": missing,
            "controls": controls, "beyond": beyond, "diversity": diversity, "ood": ood, "strategies": strategies, "tokens": secondary.analyze_tokens(design, tokens, tok_warnings),
            "sets": sets,
            "resamples": B, "ci": ci, "seed": bseed, "n": n, "k_max": k_max, "n_problems": N, "alpha_one": a1, "alpha_tost": at,
            "margin": margin, "base": base, "rl": rl, "curves": curves, "primary": prim,
            "primary_sentence": report.primary_sentence(prim, design, last, k_max, a1, at, margin)}


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


def verdicts_json(res: dict, run: Path) -> dict:
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
                      "p_values": "one-sided (1 + #{D* <= 0}) / (B + 1) for a rise, (1 + #{D* >= 0}) / (B + 1) for a fall; "
                                  "TOST max((1 + #{D* <= -m}) / (B + 1), (1 + #{D* >= m}) / (B + 1))"},
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
        "design": {"conditions": d.conditions, "seeds": d.seeds, "checkpoints": d.checkpoints, "source": d.source,
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
    out = verdicts_json(res, run)
    inputs = sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")) + sorted(run.glob("tokens_*.json"))
    # inputs: what each input computed (provenance.content_sha256: no timings, no time stamps), so that a
    # rerun that computes the same counts leaves the analysis done
    out["provenance"] = {"inputs": {f.relative_to(run).as_posix(): content_sha256(f) for f in inputs},
                         "analyze": res["design"].config.get("analyze"),
                         "plan_sha256": file_sha256(ROOT / "PLAN.md"), "config_hash": res["base"].get("provenance", {}).get("config_hash"),
                         "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    text = json.dumps(out, indent=1) + "\n"
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for old in (run / "verdicts.json", run / "report.md", run / "figures"):  # a rerun replaces nothing in place
        if (dest := move_aside(run, old, when)) is not None:
            print(f"moved aside {old.relative_to(run)} -> {dest.relative_to(run)} (the analysis is redone)", flush=True)
    figs = figures.figures(run, res) if make_figures else []
    rep = report.report(run, res, figs)
    atomic_write_text(run / "report.md", rep)
    atomic_write_text(run / "verdicts.json", text)  # last: the pipeline's "done" marker
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Crossed-bootstrap verdicts, coverage, crossover, figures and a report for one run.")
    p.add_argument("--run", required=True, help="the run folder holding eval_*.json")
    p.add_argument("--resamples", type=int, default=None, help="bootstrap resamples (default: the run's config, analyze.resamples)")
    p.add_argument("--seed", type=int, default=None, help="bootstrap seed (default: the run's config, analyze.seed)")
    p.add_argument("--partial", action="store_true", help="analyse a run with expected evaluations missing (the report says so)")
    p.add_argument("--no-figures", action="store_true")
    a = p.parse_args(argv)
    run = Path(a.run)
    if not run.is_dir():
        print(f"analyze_b.py: --run {run}: no such folder", file=sys.stderr)
        return 2
    try:
        out = run_analysis(run, a.resamples, a.seed, not a.no_figures, partial=a.partial)
    except InputError as e:
        print(f"analyze_b.py: {e}", file=sys.stderr)
        return 1
    print(report.headline(out))
    print(f"wrote {run / 'verdicts.json'} and {run / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
