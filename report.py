"""report.md and the terminal headline: every sentence of the analysis is made here, from the
numbers analyze_b.analyze computes. One function per section, in PLAN.md's order; `table` makes
every markdown table.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from countdown import ARITH_DIGITS, SCORINGS, Problem, classify_strategy, operands
from provenance import file_sha256, same_config
from run_files import Design, read_json
from secondary import MODEL_BASED

ROOT = Path(__file__).resolve().parent


# ============================================================================= formats and words


def table(headers: list[str], rows: list[list]) -> list[str]:
    """A markdown table; cells are shown with str()."""
    return (["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
            + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def _ci(x) -> str:
    return "—" if x is None else f"[{x[0]:+.3f}, {x[1]:+.3f}]"


def _p(p) -> str:
    return "—" if p is None else f"{p:.4f}"


def _f(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def _yn(b) -> str:
    return "—" if b is None else ("yes" if b else "no")


def _opt(x, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def _rate(r: dict) -> str:
    """A rate over re-splits with its 95% Clopper-Pearson interval."""
    return f"{r['rate']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"


def _share(x: float) -> str:
    return "<1%" if 0 < x < 0.005 else ">99%" if 0.995 < x < 1 else f"{x:.0%}"


def _ids(ids: list, most: int = 12) -> str:
    """Problem ids, their shared 'task/split/' prefix left off (arith-2x1/test/7 -> 7)."""
    ids = [str(i) for i in ids]
    cut = os.path.commonprefix(ids).rfind("/") + 1 if len(ids) > 0 and all("/" in i for i in ids) else 0
    ids = [i[cut:] if cut else i[i.rfind("/") + 1:] if "/" in i else i for i in ids]
    shown = ", ".join(ids[:most])
    return (shown + f", … ({len(ids) - most} more)") if len(ids) > most else (shown or "—")


def reason_words(e: dict, margin: float) -> str:
    """An entry's label's reason (verdict.REASONS) in words, with the p-value it rests on."""
    r, k = e["reason"], e["k"]
    p = "" if r["p"] is None else f" (p = {_p(r['p'])})"
    return {"above-null": f"pass@{k} lies above the selection null's{p}",
            "pass1-falls": f"pass@1 falls{p}",
            "below-null": f"pass@1 rises and pass@{k} lies below the selection null's{p}",
            "within-null": f"pass@1 rises and pass@{k} is within ±{margin:g} of the selection null's (TOST{p})",
            "equivalence-not-asked": f"pass@1 rises, but pass@{k} is neither shown above nor below the selection null's, and its "
                                     f"equivalence test is not asked (the null leaves too little headroom for the ±{margin:g} margin)",
            "ceiling-inconclusive": f"pass@1 rises, but pass@{k} is neither shown above, below nor within ±{margin:g} of the selection "
                                    f"null's (TOST{p})",
            "pass1-unchanged": f"pass@1 is shown neither to rise{p} nor to fall (p = {_p(e['adjusted']['falls'])})"}[r["code"]]


def crossover_words(c: dict) -> str:
    pt = c["point"]
    head = f"k = {pt['k']}" if pt["outcome"] == "crosses" else pt["outcome"]
    cross = f"crosses {_share(c['cross_share'])}" + (f" (median k {c['median']:g}, 95% {c['ci'][0]:g}–{c['ci'][1]:g})" if c["median"] is not None else "")
    return f"{head}; replicates: {cross}, always above {_share(c['always_share'])}, never above {_share(c['never_share'])}"


def primary_sentence(e: dict | None, res: dict) -> str:
    """The primary question and its label in one sentence, with the numbers behind it; then, where the
    calibration failed, that the instrument is not calibrated in this world."""
    d = res["design"]
    q = (f"Does RL on `{d.primary_condition}` select ({d.primary_scoring} scoring, step {d.checkpoints[-1]}"
         + (f", {len(e['seeds'])} seed{'s' * (len(e['seeds']) > 1)}, {e['n_problems']} problems" if e else "") + ")?")
    if e is None:
        return f"{q} Not answered: its evaluations are missing (partial report)."
    k, nl, vs = e["k"], e["null"], e["vs_null"]
    label = e["label"] if d.analyze.get("ceiling_null", "selection") == "selection" else _base_null_label(e)
    out = (f"{q} **{label[0].upper() + label[1:]}**: {reason_words(e, res['selection_margin'])}. "
           f"pass@1 {e['pass1_base']:.3f} → {e['pass1_rl']:.3f} (Δ {e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])}); pass@{k} "
           f"{e['passk_base']:.3f} → {e['passk_rl']:.3f}, against {nl['passk']:.3f} for the base reweighted to the same pass@1 "
           f"(w = {nl['w']:.3g}, 95% {nl['w_ci'][0]:.3g}–{nl['w_ci'][1]:.3g}): difference {vs['diff']:+.3f} {_ci(vs['ci'])}.")
    if d.analyze.get("ceiling_null", "selection") != "selection":
        out += f" (Registered here: the base-null reading; the selection-null label is *{e['label']}*.)"
    cal = res["calibration"]
    if cal.get("arms") and not cal["calibrated"]:
        bad = [a["arm"] for a in cal["arms"] if a["passed"] is False]
        out += f" **The instrument is not calibrated in this world**: the arm{'s' * (len(bad) > 1)} {', '.join(bad)} failed (below)."
    elif cal.get("skipped"):
        out += f" No calibration: {cal['skipped']}."
    if e.get("near_level"):
        out += f" Within 2 Monte-Carlo SEs of its level: {', '.join(e['near_level'])}."
    return out


def _base_null_label(e: dict) -> str:
    s = e["base_null"]["selection"]
    return "selection (base null)" if s else "undecided (base null)" if s is None else "no selection (base null)"


# ============================================================================= sections, in PLAN.md's order


def header(run: Path, res: dict) -> list[str]:
    d = res["design"]
    L = [f"**{d.config['analyze']['note']}**", ""] if (d.config.get("analyze") or {}).get("note") else []
    if res["missing"]:
        L += [f"**PARTIAL REPORT: {len(res['missing'])} of {d.n_expected()} expected evaluations are missing: "
              f"{', '.join(res['missing'])}.**", ""]
    seeds = ", ".join(map(str, d.seeds)) + "".join(f" ({c}: {len(v)} seeds)" for c, v in (d.seeds_by_condition or {}).items())
    return L + [f"# Report: {run.name}", "",
                f"Written by `analyze_b.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. {res['n_problems']} test "
                f"problems; the base sampled {res['n_base']} times each, every trained model {res['n']} times; conditions "
                f"{', '.join(d.conditions)}; seeds {seeds}; checkpoints {', '.join(map(str, d.checkpoints))}. Crossed bootstrap over "
                f"seeds and problems, {res['resamples']} replicates (seed {res['seed']}), percentile intervals.", ""]


def calibration_section(res: dict) -> list[str]:
    """PLAN.md section 7, Calibration: every arm, its truth, the labels it got over the re-splits."""
    cal = res["calibration"]
    L = ["## Calibration: arms whose truth is known", ""]
    if cal.get("skipped"):
        return L + [f"No calibration arms: {cal['skipped']}.", ""]
    labels = ("selection", "beyond selection", "degradation", "undecided")
    rows = []
    for a in cal["arms"]:
        if a["kind"] in ("null", "selection", "teaching", "mixed"):
            rows.append([a["arm"], a["truth"]] + [_rate(a["labels"][x]) for x in labels]
                        + [", ".join(f"{x} ≤ {v:g}" for x, v in a["forbidden"].items()), "pass" if a["passed"] else
                           f"**fail** ({', '.join(a['failed'])})"])
        elif a["kind"] == "seed split":
            rows.append([f"{a['arm']} ({a['seeds']} seeds)", a["truth"], "", "", "", "",
                         f"differ: pass@1 {_rate(a['differences']['pass1'])}, pass@k {_rate(a['differences']['passk'])} ≤ {a['level']:g}",
                         "pass" if a["passed"] else f"**fail** ({', '.join(a['failed'])})"])
        else:
            rows.append([a["arm"], f"{a['truth']} on {a['stratum']}", "", "", "", "",
                         f"ceiling rises on {a['n_problems']} problems the pool never solved"
                         + (f": Δpass@{res['k_max']} {a['passk_diff']:+.3f} {_ci(a['passk_ci'])}, p = {_p(a['rises']['p'])} (label: {a['label']})"
                            if a.get("passk_diff") is not None else f" ({a.get('why')})"),
                         {True: "pass", False: "**fail** (not shown)", None: "not asked"}[a["passed"]]])
    L += table(["arm", "truth", "selection", "beyond selection", "degradation", "undecided", "may not be (rate ≤ level)", "result"], rows)
    L += ["", f"Each pool arm: {cal['resplits']} re-splits of a pool of {cal['n_base']} + {cal['n_pool']} base samples per test "
          f"problem into a pseudo-base of {cal['n_base']} and pseudo-trained models of {cal['seeds']} seeds × {cal['n']} samples, each "
          f"judged by the primary question's code ({cal['resamples']} bootstrap replicates); rates with 95% Clopper-Pearson intervals. "
          f"An arm fails when the lower end of a forbidden label's interval lies above its level. The selection arms reweight the "
          f"pool's own samples, so they never reach a problem the pool never solved: they check that selection is not read as beyond "
          f"it. A low rate of the expected label is a lack of power, not of calibration.", ""]
    return L


def primary_section(res: dict) -> list[str]:
    """PLAN.md section 7: the primary entry's tests."""
    e = res["primary"]
    L = ["## The primary question", "", primary_sentence(e, res), ""]
    if e is None:
        return L
    k, vs, nl = e["k"], e["vs_null"], e["null"]
    eq = vs["equivalence"]
    rows = [["pass@1 rises", f"{e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])}", _p(e["rises"]["p_boot"]), _p(e["rises"]["p_t"]), _p(e["rises"]["p"])],
            ["pass@1 falls", "", _p(e["falls"]["p_boot"]), _p(e["falls"]["p_t"]), _p(e["falls"]["p"])],
            [f"pass@{k} above the selection null's", f"{vs['diff']:+.3f} {_ci(vs['ci'])}", _p(vs["above"]["p_boot"]), _p(vs["above"]["p_t"]),
             _p(vs["above"]["p"])],
            [f"pass@{k} below the selection null's", "", _p(vs["below"]["p_boot"]), _p(vs["below"]["p_t"]), _p(vs["below"]["p"])],
            [f"pass@{k} within ±{res['selection_margin']:g} of the null's (TOST)", f"90% {_ci(vs['ci90'])}",
             _p(eq["p_boot"]) if eq else "not asked", _p(eq["p_t"]) if eq else "", _p(eq["p"]) if eq else ""]]
    L += table(["test", "estimate [95% CI]", "bootstrap p", "t p", "p (the larger)"], rows)
    L += ["", f"The selection null: the base's rates reweighted towards its correct answers by w = {nl['w']:.3g} (95% "
          f"{nl['w_ci'][0]:.3g}–{nl['w_ci'][1]:.3g}), the w at which its pass@1 equals the trained model's ({nl['pass1']:.3f}); "
          f"its pass@{k} is {nl['passk']:.3f}, leaving a headroom of {nl['headroom']:.3f}. Each problem's rate is its empirical-Bayes "
          f"posterior (Beta prior a = {nl['prior'][0]:.3g}, b = {nl['prior'][1]:.3g}, fitted to the base's counts)."
          + (" The trained pass@1 lies outside what reweighting the base reaches on the grid of w." if nl["out_of_range"] else "")
          + f" One-sided tests at {res['alpha_one']:g}, TOST at {res['alpha_tost']:g} (asked only where the margin is at most "
          f"{res['design'].analyze['margin_headroom_fraction']:.3g} of the null's headroom); each p is the larger of the crossed "
          f"bootstrap's and the random-effects t test's. Labels: *degradation* (pass@1 falls), else *beyond selection* (the ceiling "
          f"above the null's), else *selection* (pass@1 rises and the ceiling below or within the margin of the null's), else *undecided*. "
          f"A uniform reweighting is one model of selection; the model-free evidence is the boundary (below: problems the trained model "
          f"solves that the base never did, against chance).", ""]
    bn = e["base_null"]
    L += [f"*The seed report's reading* (secondary; PLAN.md section 7, earlier versions): against the base itself, pass@{k} "
          f"{e['passk_diff']:+.3f} (90% {_ci(e['passk_ci90'])}); equivalent within ±{bn['margin']:g}: "
          f"{'not asked (headroom ' + format(e['headroom'], '.3f') + ')' if not bn['testable'] else _yn(bn['ceiling_equivalent'])}; "
          f"lower: {_yn(bn['ceiling_falls'])}; its selection answer: {_yn(bn['selection'])}.", ""]
    return L


def entries_section(res: dict, scoring: str, title: str, formats: bool) -> list[str]:
    """PLAN.md section 7: every condition x checkpoint of one scoring, its tests and label (formats:
    with the format rate, for the scoring that counts it)."""
    k = res["k_max"]
    rows = []
    for e in [x for x in res["entries"] if x["scoring"] == scoring]:
        a = e["adjusted"]
        rows.append([e["condition"] + (" **(primary)**" if e["primary"] else ""), e["step"], ", ".join(map(str, e["seeds"])),
                     f"{e['pass1_base']:.3f} → {e['pass1_rl']:.3f}", f"{e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])}",
                     f"{_p(a['rises'])} / {_p(a['falls'])}", f"{e['passk_base']:.3f} → {e['passk_rl']:.3f}", f"{e['null']['passk']:.3f}",
                     f"{e['vs_null']['diff']:+.3f} {_ci(e['vs_null']['ci'])}", f"{_p(a['above'])} / {_p(a['below'])} / {_p(a['equivalence'])}",
                     f"**{e['label']}**"] + ([f"{_f(e['format_base'])} → {_f(e['format_rl'])}"] if formats else [])
                    + [crossover_words(e["crossover"])])
    L = [f"## {title}", ""]
    L += table(["condition", "step", "seeds", "pass@1 base → RL", "Δpass@1 [95% CI]", "p rises / falls", f"pass@{k} base → RL",
                f"null pass@{k}", "vs null [95% CI]", "p above / below / within", "label"] + (["format rate base → RL"] if formats else [])
               + ["base catches up"], rows)
    return L + ["", f"p-values of the primary entry are raw; every other row's are Holm-adjusted within the family "
                f"*secondary-{scoring}* (weighted Holm on p / level). *null pass@{k}*: the base reweighted to the row's pass@1. "
                f"*base catches up*: the first k at which RL is no longer above the base, and over the replicates the shares that "
                f"cross, stay above at every k ≤ {k}, or are never above.", ""]


def h3_section(res: dict, scoring: str) -> list[str]:
    rows = [[h["condition"], ", ".join(map(str, h["seeds"])), f"{h['passk_diff_first']:+.3f}", f"{h['passk_diff_last']:+.3f}",
             f"{h['diff']:+.3f} {_ci(h['ci'])}", _p(h["p_narrows"]), _yn(h["narrows"])] for h in res["h3"] if h["scoring"] == scoring]
    if not rows:
        return []
    d, k = res["design"], res["k_max"]
    return ([f"## H3: does the ceiling narrow with longer training? ({scoring} scoring)", ""]
            + table(["condition", "seeds", f"Δpass@{k} at step {d.checkpoints[0]}", f"at step {d.checkpoints[-1]}", "difference [95% CI]",
                     "one-sided p", "narrows"], rows)
            + ["", f"The paired difference (last − first checkpoint) of Δpass@{k}, the same seeds and problems in each replicate; "
               f"*narrows*: one-sided p < {res['alpha_one']:g}; secondary, not adjusted.", ""])


def seeds_section(res: dict) -> list[str]:
    k = res["k_max"]
    rows = [[e["condition"], e["step"], e["scoring"], s["seed"], f"{s['pass1_diff']:+.3f}", f"{s['passk_diff']:+.3f}", s["coverage_rl"],
             _f(s["format_rl"])] for e in res["entries"] for s in e["per_seed"]]
    return ["## Per-seed spread", ""] + table(["condition", "step", "scoring", "seed", "Δpass@1", f"Δpass@{k}", "coverage RL", "format RL"],
                                             rows) + [""]


def power_section(res: dict) -> list[str]:
    """PLAN.md section 7, Power and sensitivity."""
    pw, sn, k = res["power"], res["sensitivity"], res["k_max"]
    if not pw:
        return ["## Power", "", "No power statement: the primary entry's evaluations are missing.", ""]
    eq = ("TOST's power is not defined here (no finite SE)" if pw["tost_power_at_zero"] is None else
          f"TOST within ±{pw['margin']:g} has at most {pw['tost_power_at_zero']:.2f} power (at a true Δpass@{k} of 0, both one-sided "
          f"tests counted)" + (f", and {pw['power']:.0%} power while the true |Δpass@{k}| ≤ {pw['equivalence_up_to']:.3f}"
                               if pw["equivalence_up_to"] is not None else f", short of {pw['power']:.0%} everywhere"))
    L = ["## Power and sensitivity", "",
         f"With {pw['n_problems']} problems, {pw['seeds']} seed{'s' * (pw['seeds'] > 1)}, n = {pw['n_samples']} samples per trained model "
         f"and {pw['n_base']} per base problem, the random-effects SE of the primary Δpass@1 is {pw['se_pass1']:.4f} ({pw['df_pass1']:.1f} df) "
         f"and of Δpass@{k} {pw['se_passk']:.4f} ({pw['df_passk']:.1f} df). With {pw['power']:.0%} power at one-sided level "
         f"{pw['alpha_one_sided']:g} the design detects Δpass@1 ≥ {pw['mde_pass1']:.3f} and |Δpass@{k}| ≥ {pw['mde_passk']:.3f} "
         f"((t_{{1−α, df}} + t_{{power, df}}) × SE); {eq}."]
    if pw.get("planned"):
        pl = pw["planned"]
        L += ["", f"Planned (PLAN.md, analyze.planned): power {pl['power']:.2f} to detect Δpass@1 = {pl['effect']:g} at the pilot's "
              f"components; {pl['power_at_seed_var_upper80']:.2f} at the 80% upper limit of its seed variance ({pl['seed_var_upper80']:.5f} "
              f"on {pl['seed_df']} df); {pl['power_at_measured_components']:.2f} at the components measured here."]
    if sn:
        rows = [[name, f"{vc['delta']:+.3f}", f"{vc['V_A']:.4f}", "—" if vc["V_B"] is None else f"{vc['V_B']:.5f} ({vc['seed_sd']:.3f}, {vc['seed_df']} df)",
                 "—" if vc["V_R"] is None else f"{vc['V_R']:.4f}", f"{vc['se']:.4f}", f"{vc['df']:.1f}"]
                for name, vc in (("Δpass@1", sn["pass1"]), (f"Δpass@{k}", sn["passk"]))]
        L += [""] + table(["quantity", "Δ", "problem var", "seed var (SD)", "residual var", "SE", "df"], rows)
        for name, c in sn["coverage"].items():
            L.append(f"\nCoverage of the crossed bootstrap's 95% interval for Δpass@1, {c['sims']} count-level simulations at the "
                     f"{'measured' if name == 'measured' else '1.5 × the measured'} seed SD ({c['seed_sd']:.3f}): {c['coverage']:.3f} "
                     f"(Monte-Carlo SE {c['mc_se']:.3f}; its lower tail misses {c['lower_miss']:.3f} against a nominal 0.025); the t "
                     f"interval's {c['coverage_t']:.3f}.")
    return L + [""]


def strata_section(res: dict) -> list[str]:
    """PLAN.md section 6: difficulty strata (secondary, descriptive)."""
    st = res["strata"]
    if st.get("skipped"):
        return []
    k, sc = st["k"], res["design"].primary_scoring
    rows = []
    for s in st["strata"]:
        r = s["scorings"][sc]
        for name, v in r.items():
            if name == "base":
                rows.append([s["stratum"], s["n_problems"], "base", _f(v["pass1"]), "", _f(v["passk"]), "", v["never_solved"]])
            else:
                rows.append([s["stratum"], s["n_problems"], name, _f(v["pass1"]), f"{v['pass1_diff']:+.3f} {_ci(v['pass1_ci'])}",
                             _f(v["passk"]), f"{v['passk_diff']:+.3f} {_ci(v['passk_ci'])}", ""])
    return ([f"## Strata: pass@1 and pass@{k} by the borrows the subtraction needs ({sc} scoring, step {st['step']})", ""]
            + table(["stratum", "problems", "model", "pass@1", "Δ [95% CI]", f"pass@{k}", "Δ [95% CI]", "base never solves"], rows)
            + ["", "Secondary and descriptive: crossed bootstrap within each stratum's own problems, not adjusted.", ""])


def controls_section(res: dict) -> list[str]:
    """PLAN.md section 7b: H4-H6."""
    c, k, m = res["controls"], res["k_max"], res["margin"]
    L = [f"## Controls and baselines: H4–H6 (step {c['step']})", ""]
    if c["h4"]:
        L += [f"**H4 (anchoring, {c['scorings']['H4']} scoring):** with the KL anchor the ceiling pass@{k} is equivalent to the base's "
              f"(TOST within ±{m:g}, the base-null reading's Holm-adjusted test), without it the ceiling falls. The contrast of the two "
              f"is descriptive.", ""]
        L += table(["anchored (β)", f"Δpass@{k} 90% CI", "p equiv (adj)", "equivalent", "unanchored", f"Δpass@{k} [95% CI]", "p falls (adj)",
                    "falls", "H4 holds", "Δ(anchored) − Δ(unanchored) [95% CI]"],
                   [[f"{h['anchored']} ({h['kl']:g})", f"{h['anchored_passk_diff']:+.3f} {_ci(h['anchored_passk_ci90'])}",
                     "not asked" if h["anchored_p_equiv_adj"] is None else _p(h["anchored_p_equiv_adj"]), _yn(h["anchored_ceiling_equivalent"]),
                     h["unanchored"], f"{h['unanchored_passk_diff']:+.3f} {_ci(h['unanchored_passk_ci'])}", _p(h["unanchored_p_falls_adj"]),
                     _yn(h["unanchored_ceiling_falls"]), f"**{_yn(h['holds'])}**", f"{h['contrast']:+.3f} {_ci(h['contrast_ci'])}"]
                    for h in c["h4"]]) + [""]
    if c["h5"]:
        L += [f"**H5 (format share, {c['scorings']['H5']} scoring):** the share of the reference's pass@1 gain that a reward for the "
              "format alone reaches; an estimate (the percentile interval of the replicate ratios), not a test; not estimable when the "
              "reference gain's 95% interval contains 0.", ""]
        L += table(["format-only condition", "Δpass@1 [95% CI]", "reference", "Δpass@1 [95% CI]", "share [95% CI]"],
                   [[h["condition"], f"{h['gain']:+.3f} {_ci(h['gain_ci'])}", h["reference"], f"{h['reference_gain']:+.3f} {_ci(h['reference_gain_ci'])}",
                     f"{h['share']:.2f} [{h['ci'][0]:.2f}, {h['ci'][1]:.2f}]" if h["estimable"] else f"not estimable ({h['why']})"]
                    for h in c["h5"]]) + [""]
    if c["h6"]:
        L += [f"**H6 (RL vs RFT and SFT, {c['scorings']['H6']} scoring):** Δ_k = pass@k(GRPO) − pass@k(other), k = 1…{k}, with a "
              "simultaneous 95% band (max-|t|; figure `controls_h6.png`). Descriptive, secondary, not adjusted.", ""]
        L += table(["GRPO", "other (method)", "Δpass@1 [95% CI]", f"Δpass@{k} [95% CI]", f"band half-width at k = 1, {k}", "above at k = 1",
                    "where the curves cross"],
                   [[h["rl"], f"{h['other']} ({h['method']})", f"{h['diff_pass1']:+.3f} {_ci(h['ci_pass1'])}",
                     f"{h['diff_passk']:+.3f} {_ci(h['ci_passk'])}", f"{(h['hi'][0] - h['lo'][0]) / 2:.3f}, {(h['hi'][-1] - h['lo'][-1]) / 2:.3f}",
                     h["crossover"]["leader_at_k1"],
                     "—" if h["crossover"]["leader_at_k1"] == "tie" else f"{h['crossover']['leader_at_k1']} leads: " + crossover_words(h["crossover"])]
                    for h in c["h6"]]) + [""]
    L += [f"- {s['hypothesis']} not asked: {s['why']}." for s in c["skipped"]]
    return L + ([""] if c["skipped"] else [])


def earlier_section(res: dict) -> list[str]:
    """PLAN.md section 7, earlier versions: the base-null reading (v3, change 29), v2 and v1."""
    rows = []
    for e in res["entries"]:
        b, v = e["base_null"], e["v1"]
        rows.append([e["condition"], e["step"], e["scoring"], _yn(b["pass1_rises"]),
                     "not asked" if not b["testable"] else _yn(b["ceiling_equivalent"]), _yn(b["ceiling_falls"]), _yn(b["selection"]),
                     _yn(b["selection_v2"]), _yn(v["pass1_rises_v1"]), _yn(v["ceiling_unchanged_v1"]), _yn(v["ceiling_falls_v1"]),
                     _ci(v["third_clause_ci"]) if v["third_clause_ci"] else "not asked", _yn(v["third_clause"]), e["label"]])
    return (["## Earlier versions of the verdicts (for comparison)", "",
             f"*v3* (PLAN.md change 29, the seed report's criterion made a test): selection ⇔ pass@1 rises and the ceiling is equivalent "
             f"to the base's within ±{res['margin']:g} (asked only where the margin is at most a third of the base's headroom) or lower, "
             f"Holm within a family of those three tests per scoring. *v2*: every test asked, no tie tolerance. *v1*: the first "
             f"version's unadjusted rules on the 95% intervals, and the one-third clause (|Δpass@k| − Δpass@1 / 3, asked where pass@1 "
             f"rises). The registered label is the last column.", ""]
            + table(["condition", "step", "scoring", "rises (v3)", "equivalent (v3)", "falls (v3)", "selection (v3)", "selection (v2)",
                     "rises (v1)", "unchanged (v1)", "falls (v1)", "one-third clause CI", "holds", "label"], rows) + [""])


def coverage_section(res: dict) -> list[str]:
    rows = [[e["condition"], e["step"], e["scoring"], e["coverage_base"], f"{e['coverage_rl']:g}", f"{e['only_rl']:g}", f"{e['only_base']:g}"]
            for e in res["entries"]]
    return (["## Coverage (problems with at least one correct answer; RL: mean over seeds)", ""]
            + table(["condition", "step", "scoring", "base", "RL", "only RL", "only base"], rows) + [""])


def sets_section(res: dict) -> list[str]:
    d = res["design"]
    rows = [["test", res["base"].get("task"), f"{res['n_problems']} × {res['n']} (base × {res['n_base']})", res["k_max"], "all",
             f"{1 + len(res['rl'])} (eval_*.json)"]]
    for name, spec in d.eval_sets.items():
        b, docs, prefix = res["sets"][name]
        rows.append([name, spec["task"] + (" (out of distribution)" if spec["ood"] else ""), f"{spec['n_problems']} × {spec['n']}",
                     spec["k_max"], spec["models"], f"{(b is not None) + len(docs)} ({prefix})"])
    return ["## Evaluation sets", ""] + table(["set", "task", "problems × n", "k_max", "models", "files found"], rows) + [""]


def beyond_section(res: dict) -> list[str]:
    """PLAN.md section 7c: pass@k beyond n, labelled as a model, and its checks."""
    bz = res["beyond"]
    n, ext = bz["n"], bz["extrapolate_to"]
    src = "the test set" if bz["set"] == "test" else f"set {bz['set']} (evalsets/{bz['set']}/)"
    L = [f"## pass@k beyond n = {n}: {MODEL_BASED}", "",
         f"Fitted by maximum likelihood to each model's per-problem counts in {src} (the base and each condition's last checkpoint); "
         f"pass@k = 1 − B(α, β + k) / B(α, β). The plain beta-binomial is the registered model (PLAN.md change 29); AIC's preference "
         f"between it and the zero-inflated one is shown, not used. Every value in the last column is **{MODEL_BASED}**; its interval "
         f"is the parametric bootstrap's ({bz['resamples']} refits). *at bound*: the fit ran to the edge of its search box.", ""]
    L += table(["model", "scoring", "α", "β", "AIC plain / zero-inflated (prefers)", "measured pass@n", "model pass@n",
                f"pass@{ext} ({MODEL_BASED}) [95%]"],
               [[f["model"], f["scoring"] + (" (at bound)" if f["at_bound"] else ""), f"{f['alpha']:.3g}", f"{f['beta']:.3g}",
                 f"{f['aic']['beta-binomial']:.1f} / {f['aic']['zero-inflated beta-binomial']:.1f} "
                 f"({'plain' if f['aic_prefers'] == 'beta-binomial' else 'zero-inflated'})",
                 _f(f["measured_pass_at_n"]), _f(f["model_pass_at_n"]),
                 f"{_f(f['model_pass_at_extrapolated'])} [{_f(f['extrapolated_ci'][0])}, {_f(f['extrapolated_ci'][1])}]"] for f in bz["fits"]])
    if bz["check"]:
        L += ["", f"**Check on this study's data: levels.** Fitted to the test set's samples on the {bz['check'][0]['n_problems']} problems "
              f"of set {bz['set']}, the model predicts pass@{n}; the set measures it (new draws). error = predicted − measured; *naive*: "
              f"the measured pass@k at the fit's n.", ""]
        L += table(["model", "scoring", "fitted to", "fit n", f"predicted pass@{n} ({MODEL_BASED})", f"measured pass@{n}", "error", "zero-inflated's error",
                    "naive (error)"],
                   [[r["model"], r["scoring"], r["fit_file"], r["fit_n"], _f(r["predicted"]), _f(r["measured"]), f"{r['error']:+.3f}",
                     f"{r['predicted_zero_inflated'] - r['measured']:+.3f}", f"{_f(r['naive'])} ({r['naive_error']:+.3f})"] for r in bz["check"]])
        for sc in SCORINGS:
            errs = [abs(r["error"]) for r in bz["check"] if r["scoring"] == sc]
            if errs:
                L += ["", f"Mean |error| ({sc}): {np.mean(errs):.3f}, largest {max(errs):.3f}, over {len(errs)} models."]
    if bz.get("contrasts"):
        cov = bz["contrast_coverage"]
        L += ["", f"**Check on the contrast the question is about.** From the same fits, the model predicts Δpass@{n} (RL − base); the "
              f"set measures it. A paired bootstrap over problems ({bz['resamples']} redraws, both models refitted, the measurement "
              f"redrawn with them) gives a 95% interval of the prediction and of its error; the error's interval contains 0 for "
              f"{cov['covered']} of {cov['of']} models × scorings. The error intervals' median width is {cov['median_width']:.3f}; "
              f"the mean error is {cov['mean_error']:+.3f} (" + ", ".join(f"{sc} {v:+.3f}" for sc, v in cov["mean_error_by_scoring"].items())
              + ").", ""]
        L += table(["model", "scoring", f"predicted Δpass@{n} [95%] ({MODEL_BASED})", f"measured Δpass@{n}", "error [95%]", "0 in it",
                    "zero-inflated's error", "naive Δ"],
                   [[r["model"], r["scoring"], f"{r['predicted_delta']:+.3f} {_ci(r['ci'])}", f"{r['measured_delta']:+.3f}",
                     f"{r['error']:+.3f} {_ci(r['error_ci'])}", _yn(r["covered"]), f"{r['error_zero_inflated']:+.3f}", f"{r['naive_delta']:+.3f}"]
                    for r in bz["contrasts"]])
    if bz["check_skipped"]:
        L += ["", f"No check of the model: {bz['check_skipped']}."]
    return L + [""]


def boundary_section(res: dict) -> list[str]:
    bz = res["beyond"]
    n = bz["n"]
    nulls = [r for r in bz["boundary"] if r.get("null")]
    L = [f"## Boundary at n = {n}", "",
         f"Problems the base never solved in {n} samples that the trained model solved at least once (*only RL*), and the reverse (*only "
         f"base*), ids without their task/split/ prefix (all of them in verdicts.json)."
         + (f" *Chance*: the count expected if the trained model were the base (PLAN.md section 7c: each problem's rate from the test "
            f"set's fresh {nulls[0]['null']['fresh_n']} base samples, empirical Bayes), its 95% range and the p of at least the observed "
            f"count." if nulls else ""), ""]
    rows = []
    for r in bz["boundary"]:
        nl = r.get("null")
        rows.append([r["model"], r["scoring"], f"{r['solved_base']} / {r['solved_rl']}", r["only_rl"],
                     f"{nl['expected']:.1f} [{nl['range'][0]}, {nl['range'][1]}], {nl['only_rl']['p']:.3f}" if nl else "—",
                     _ids(r["only_rl_ids"]), r["only_base"], f"{nl['only_base']['p']:.3f}" if nl else "—", _ids(r["only_base_ids"])])
    return L + table(["model", "scoring", "solved: base / RL", "only RL", "chance [95%], p", "ids", "only base", "p", "ids"], rows) + [""]


def diversity_section(res: dict) -> list[str]:
    dv = res["diversity"]
    if not dv["conditions"]:
        return []
    return (["## Diversity", "", "Per problem: distinct final answers, the entropy of their distribution, and the mean full-vocabulary "
             "token entropy of the untempered policy over the response; mean over problems (trained models: over seeds too).", ""]
            + table(["set", "condition", "step", "seeds", "distinct answers", "answer entropy (nats)", "token entropy (nats)"],
                    [[r["set"], r["condition"], r["step"] or "—", ", ".join(map(str, r["seeds"])) or "—", _opt(r["distinct_answers"], "{:.2f}"),
                      _opt(r["answer_entropy"]), _opt(r["token_entropy"])] for r in dv["conditions"]]) + [""])


def ood_section(res: dict) -> list[str]:
    L = []
    for name, o in res["ood"].items():
        K, kt = o["k_max"], o["test_k_max"]
        rows = []
        for r in o["rows"]:
            if r["condition"] == "base":
                rows.append(["base", r["scoring"], _f(r["test_pass1"]), _f(r["ood_pass1"]), _f(r["test_passk"]), _f(r["ood_passk"])])
            else:
                rows.append([r["condition"], r["scoring"], f"{_f(r['test_pass1'])}, {r['test_pass1_diff']:+.3f} {_ci(r['test_pass1_ci'])}",
                             f"{_f(r['ood_pass1'])}, {r['ood_pass1_diff']:+.3f} {_ci(r['ood_pass1_ci'])}",
                             f"{_f(r['test_passk'])}, {r['test_passk_diff']:+.3f} {_ci(r['test_passk_ci'])}",
                             f"{_f(r['ood_passk'])}, {r['ood_passk_diff']:+.3f} {_ci(r['ood_passk_ci'])}"])
        L += [f"## In vs out of distribution: test vs {name} ({o['task']}, {o['n_problems']} × {o['n']})", "",
              f"Each cell: RL (mean over seeds), Δ vs base [95% CI]; the {name} side from its own crossed bootstrap. Secondary and "
              "descriptive, not adjusted.", ""]
        L += table(["condition", "scoring", "test pass@1", f"{name} pass@1", f"test pass@{kt}", f"{name} pass@{K}"], rows) + [""]
    return L


def strategies_section(res: dict) -> list[str]:
    """PLAN.md section 7d."""
    sg = res["strategies"]
    if sg["skipped"]:
        return ["## Strategies", "", f"Not counted: {sg['skipped']}.", ""]
    S, base = sg["strategies"], sg["models"][0]
    rows = [["base", "—"] + [f"{base['share'][s]:.3f}; acc {_opt(base['accuracy'][s])}; of correct {_opt(base['correct_share'][s])}" for s in S]
            + [f"{base['subtraction_share']:.3f}"]]
    rows += [[r["condition"], r["step"]] + [f"{r['share'][s]:.3f} ({r['delta'][s]:+.3f} {_ci(r['delta_ci'][s])}); acc {_opt(r['accuracy'][s])}; "
                                            f"of correct {_opt(r['correct_share'][s])}" for s in S] + [f"{r['subtraction_share']:.3f}"]
             for r in sg["conditions"]]
    L = ["## Strategies: how each response computes the product (PLAN.md section 7d)", "",
         "Every test-set response classified by `countdown.classify_strategy`: *split* (partial products), *one-step* (`a * b = N`), "
         "*no-product*. Each cell: share of responses (Δ vs the base [95% CI, crossed bootstrap]), loose accuracy within the strategy, "
         "share of all correct answers it carries; trained models pooled over seeds. Secondary and descriptive, not adjusted.", ""]
    L += table(["model", "step"] + list(S) + ["subtraction shown"], rows)
    L += ["", f"**The registered reading** (last checkpoint; descriptive): a strategy is *new* when the base's share is below "
          f"{sg['floor']:g} and the trained model's above it; *selection at the strategy level* when every strategy the trained model uses "
          f"at least {sg['nonnegligible']:.0%} of the time has a base share of at least {sg['floor']:g}, and the base's most accurate "
          "strategy gains share.", ""]
    L += table(["condition", "step", "new strategies", "the base's most accurate strategy", "it gains share", "selection at the strategy level"],
               [[r["condition"], r["step"], ", ".join(r["new"]) or "—", r["best_base_strategy"] or "—", _yn(r["best_gains"]),
                 _yn(r["selection_at_strategy_level"])] for r in sg["reading"]])
    return L + [""]


def tokens_section(res: dict) -> list[str]:
    tk = res["tokens"]
    if not (tk["rows"] or tk["enabled"]):
        return []
    pp = tk["paper"]

    def pct(x):
        return "—" if x is None else f"{100 * x:.3f}%"
    rows = [[r["condition"], r["seed"], r["step"], r["positions"], pct(r["share_unchanged"]), pct(r["share_reranked"]), pct(r["share_shifted"]),
             _opt(r["mean_rank_changed"], "{:.2f}"), f"{_opt(r['base_entropy_changed'])} / {_opt(r['base_entropy_unchanged'])}",
             _opt(r["entropy_ratio"], "{:.1f}×")] for r in tk["rows"]]
    rows.append(["*paper (another model and task)*", "", "", "", "", f"{100 * pp['share_reranked'][0]:g}–{100 * pp['share_reranked'][1]:g}%",
                 f"{100 * pp['share_shifted'][0]:g}–{100 * pp['share_shifted'][1]:g}%", f"{pp['mean_rank_changed'][0]:g}–{pp['mean_rank_changed'][1]:g}",
                 "", f"{pp['entropy_ratio'][0]:g}–{pp['entropy_ratio'][1]:g}×"])
    return (["## The token level (arXiv 2605.06241 §3)", "",
             "The base decodes each test problem greedily; the trained model reads the same prefixes. A position is *unchanged* when the "
             "argmaxes agree, *reranked* when the trained choice is in the base's top 5 but not first, *shifted* otherwise; pooled over "
             f"every position, recomputed from each file's per-problem detail. Last row: {pp['source']}, a reference, not a target.", ""]
            + table(["condition", "seed", "step", "positions", "unchanged", "reranked", "shifted", "mean base rank (changed)",
                     "base entropy changed / unchanged", "ratio"], rows) + ([""] if tk["rows"] else ["", "No token files yet.", ""]))


def inputs_section(run: Path, res: dict) -> list[str]:
    """The learning rate, the selection, the base-rate probes and the first test problem side by side."""
    L = []
    sel, lrc = run / "selection.json", run / "lr_choice.json"
    if lrc.exists():
        d = read_json(lrc)
        L += ["## Learning rate", "", f"Rule: {d['rule']}. Measure per rate: " + ", ".join(f"{kk}: {v:.3f}" for kk, v in d["mean_reward_last"].items())
              + f". Chosen: **{d['chosen']:g}**.", ""]
    if sel.exists():
        d = read_json(sel)
        L += ["## Problem selection", "", f"Rule: {d['rule']}. {len(d['informative'])} of {len(d['pass_rates'])} problems informative. "
              + "; ".join(f"set {z}: {', '.join(map(str, ids))}" + (" (fewer than asked)" if d["short"][z] else "") for z, ids in d["sets"].items()), ""]
    probes = sorted(run.glob("probe_*.json"))
    if probes:
        rows = []
        for f in probes:
            d = read_json(f)
            kk = str(d["n"])
            rows.append([d["task"], f"{d['n_problems']} × {d['n']}", _f(d["pass_at_k"]["strict"]["1"]), _f(d["pass_at_k"]["loose"]["1"]),
                         _f(d["pass_at_k"]["strict"][kk]), _f(d["pass_at_k"]["loose"][kk]), _f(d["format_rate"])])
        L += ["## Base-rate probes (the checks behind PLAN.md's change log)", ""]
        L += table(["task", "samples", "strict pass@1", "loose pass@1", "strict pass@n", "loose pass@n", "format"], rows) + [""]
    base, rl, design = res["base"], res["rl"], res["design"]
    first = base["problems"][0]
    if "responses" in first:
        L += [f"## The first test problem side by side: `{first['question']}` = {first['answer']}", ""]
        shown = [("base", base)]
        for c in design.conditions:
            keys = sorted((st, s) for cc, s, st in rl if cc == c)
            if keys:
                st = keys[-1][0]
                shown.append((f"{c} seed {min(s for stt, s in keys if stt == st)} step {st}", rl[(c, min(s for stt, s in keys if stt == st), st)]))
        problem = Problem(first["id"], base.get("task"), first["question"], first["answer"], operands(first["question"]))
        labelled = base.get("task") in ARITH_DIGITS and problem.numbers is not None
        if labelled:
            L += ["Each response is prefixed with its strategy (`countdown.classify_strategy`).", ""]
        for label, d in shown:
            p = d["problems"][0]
            L.append(f"**{label}** — strict {p['correct_strict']}/{p['n']}, loose {p['correct_loose']}/{p['n']}")
            L += ["```"] + [(f"[{classify_strategy(problem, r)['product']}] " if labelled else "") + r.replace("```", "'''")[:300]
                            for r in p.get("responses", [])[:3]] + ["```", ""]
    return L


def provenance_section(run: Path, res: dict, figs: list[Path]) -> list[str]:
    L = (["## Figures", ""] + [f"![{f.stem}](figures/{f.name})" for f in figs] + [""]) if figs else []
    files = (sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")) + sorted(run.glob("tokens_*.json"))
             + sorted(run.glob("probe_*.json")) + [p for p in (run / "selection.json", run / "lr_choice.json") if p.exists()])
    rows = []
    for f in files:
        p = read_json(f).get("provenance", {})
        rows.append([f.relative_to(run).as_posix(), file_sha256(f)[:12], p.get("stage_hash"), (p.get("plan_sha256") or "")[:12],
                     p.get("revision"), p.get("time")])
    return L + ["## Provenance of the inputs", ""] + table(["file", "sha256", "stage hash", "PLAN.md sha256", "revision", "made"], rows)


def warnings_section(run: Path, res: dict) -> list[str]:
    """Inputs made under another PLAN.md, other evaluation settings or another config, and optional
    inputs that are missing."""
    base, rl, design = res["base"], res["rl"], res["design"]
    prov = base.get("provenance", {})
    plan_now = file_sha256(ROOT / "PLAN.md")
    warnings = []

    def settings(d: dict) -> dict:  # what must match between the models compared (the adapter may not)
        c = d.get("provenance", {}).get("config", {})
        ev = {k: v for k, v in (c.get("eval") or {}).items() if k != "n_base"}
        return {"seed": c.get("seed"), "model": c.get("model"), "task": c.get("task"), "eval": ev}

    for d in rl.values():
        p = d.get("provenance", {})
        if p.get("plan_sha256") != prov.get("plan_sha256"):
            warnings.append(f"{d['_file']} was made under a different PLAN.md than eval_base.json")
        if settings(d) != settings(base):
            warnings.append(f"{d['_file']} records other evaluation settings (seed, model, task or eval) than eval_base.json")
        if not same_config(p, prov):
            warnings.append(f"{d['_file']} was made with another config (hash {p.get('config_hash')}) than eval_base.json ({prov.get('config_hash')})")
    if prov.get("plan_sha256") and plan_now and prov["plan_sha256"] != plan_now:
        warnings.append("PLAN.md has changed since the base was evaluated")
    cfg = design.config
    expected = ["selection.json"] + (["lr_choice.json"] if cfg.get("train", {}).get("lr") is None else [])
    expected += [f"probe_{t}.json" for t in cfg.get("probe", {}).get("tasks", [])]
    trained = [(c, s) for c in design.conditions for s in design.seeds_of(c) if any(key[:2] == (c, s) for key in rl)]
    expected += [f"{design.train_dir(c, s)}/train_log.csv" for c, s in trained]
    if (cfg.get("train", {}).get("dev_every") or 0) > 0:
        expected += [f"{design.train_dir(c, s)}/train_eval.csv" for c, s in trained]
    for name, (b, docs, prefix) in res["sets"].items():
        for d in ([b] if b is not None else []) + list(docs.values()):
            if not same_config(d.get("provenance"), prov):
                warnings.append(f"{prefix}{d['_file']} was made with another config (hash {d.get('provenance', {}).get('config_hash')}) "
                                f"than eval_base.json ({prov.get('config_hash')})")
    if (run / "evalsets").is_dir():
        warnings += [f"evalsets/{f.name}/ is not a registered evaluation set (config eval_sets): left out"
                     for f in sorted((run / "evalsets").iterdir()) if f.is_dir() and f.name not in design.eval_sets]
    warnings += res["tokens"]["warnings"]
    if not design.tokens_enabled and res["tokens"]["rows"]:
        warnings.append("token files are present but config tokens.enabled is off: they are reported as found, not checked for completeness")
    for name in expected:
        if not (run / name).exists():
            warnings.append(f"{name} is missing: what it would show is left out of this report")
        elif name.endswith(".json") and not same_config(rec := read_json(run / name).get("provenance", {}), prov):
            warnings.append(f"{name} was made with another config (hash {rec.get('config_hash')}) than eval_base.json ({prov.get('config_hash')})")
    return (["## Warnings", ""] + [f"- {w}" for w in warnings] + [""]) if warnings else []


def report(run: Path, res: dict, figs: list[Path]) -> str:
    """report.md: the calibration first, then the primary answer, then every section in PLAN.md's order."""
    ps = res["design"].primary_scoring
    other = next(s for s in SCORINGS if s != ps)
    L = header(run, res) + calibration_section(res) + primary_section(res) + warnings_section(run, res)
    L += entries_section(res, ps, f"H1 and H2 by condition ({ps} scoring)", other == "loose") + h3_section(res, ps)
    L += entries_section(res, other, f"The {other} scoring (it also counts the output format)", other == "strict") + h3_section(res, other)
    L += seeds_section(res) + power_section(res) + strata_section(res) + controls_section(res) + earlier_section(res)
    L += coverage_section(res) + sets_section(res) + beyond_section(res) + boundary_section(res) + diversity_section(res)
    L += ood_section(res) + strategies_section(res) + tokens_section(res) + inputs_section(run, res) + provenance_section(run, res, figs)
    return "\n".join(L) + "\n"


def headline(doc: dict) -> str:
    """A short plain-text summary for the terminal, from verdicts.json's content: the primary label,
    the calibration, and per condition and checkpoint on the primary scoring Delta pass@1 and the label."""
    pr = doc["primary"]
    k = doc["sizes"]["k_max"]
    lines = [f"PARTIAL: missing {', '.join(doc['missing'])}"] if doc.get("partial") else []
    cal = doc["calibration"]
    lines.append(f"primary ({pr['condition']}, {pr['scoring']}, step {pr['step']}): {pr['label']}"
                 + ("" if not cal.get("arms") else "; calibrated" if cal["calibrated"] else "; NOT CALIBRATED in this world"))
    rows = [("condition", "step", "Δpass@1 [95% CI]", f"Δpass@{k}", f"vs null [95% CI]", "label")]
    for e in doc["entries"]:
        if e["scoring"] == pr["scoring"]:
            rows.append((e["condition"] + (" *" if e["primary"] else ""), str(e["step"]), f"{e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])}",
                         f"{e['passk_diff']:+.3f}", f"{e['vs_null']['diff']:+.3f} {_ci(e['vs_null']['ci'])}", e["label"]))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(lines + ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows])
