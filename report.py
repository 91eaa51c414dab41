"""report.md and the terminal headline, from the analysis' result (analyze_b.analyze): the
primary answer first, then every table in PLAN.md's order. Words and tables; the numbers come from
the result (a few summaries of its rows, such as a mean |error|, are taken here).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from countdown import ARITH_DIGITS, SCORINGS, Problem, classify_strategy
from provenance import file_sha256, same_config
from run_files import Design, read_json
from secondary import MODEL_BASED, _operands

ROOT = Path(__file__).resolve().parent


# ============================================================================= sentences


def _ci(x) -> str:
    return f"[{x[0]:+.3f}, {x[1]:+.3f}]"


def _p(p: float) -> str:
    return f"{p:.4f}"


def _pa(p: float, adj: float | None) -> str:
    """A raw p-value and its adjusted one, or "not asked" for a test the headroom rule leaves out."""
    return "not asked" if adj is None else f"{_p(p)} ({_p(adj)})"


def primary_sentence(e: dict | None, design: Design, last: int, k: int, a1: float, at: float, margin: float,
                     sensitivity: dict | None = None) -> str:
    """The primary question and its registered answer in one sentence, with the intervals behind
    it, then the sensitivity analysis' answer (secondary, PLAN.md section 7) where it was made."""
    q = (f"Does RL on `{design.primary_condition}` select ({design.primary_scoring} scoring, step {last}"
         + (f", {len(e['seeds'])} seed{'s' if len(e['seeds']) > 1 else ''}, {e['n_problems']} problems" if e else "") + ")?")
    if e is None:
        return f"{q} Not answered: its evaluations are missing (partial report)."
    rise = (f"pass@1 {'rises' if e['pass1_rises'] else 'is not shown to rise'}: {e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])} "
            f"(one-sided p = {_p(e['p_pass1'])} {'<' if e['pass1_rises'] else '≥'} {a1:g})")
    if e["ceiling_testable"]:
        eq = (("within" if e["ceiling_equivalent"] else "not shown within")
              + f" ±{margin:g} (TOST p = {_p(e['p_equiv'])} {'<' if e['ceiling_equivalent'] else '≥'} {at:g})")
    else:
        eq = (f"the ±{margin:g} equivalence test not asked: the base's headroom is {e['headroom']:.3f}, so the margin is more than "
              f"{design.analyze['margin_headroom_fraction']:.3g} of it: the ceiling test cannot fail on this set")
    ceil = (f"pass@{k} {e['passk_diff']:+.3f}, 90% CI {_ci(e['passk_ci90'])}, {eq}; "
            + ("lower" if e["ceiling_falls"] else "not shown lower")
            + f" (one-sided p = {_p(e['p_passk_fall'])} {'<' if e['ceiling_falls'] else '≥'} {a1:g})")
    if e["selection"]:
        out = f"{q} **Yes**: {rise}, and the ceiling is {'lower' if e['ceiling_falls'] else 'equivalent'}: {ceil}."
    elif e["selection"] is None:
        out = (f"{q} **Cannot be decided on this set**: {rise}, but the ceiling half can only be answered by its fall, "
               f"which is not shown: {ceil}.")
    else:
        why = "" if not e["pass1_rises"] else " (the ceiling is neither shown equivalent nor lower)"
        out = f"{q} **No**{why}: {rise}; {ceil}."
    if e.get("near_level"):
        out += (f" Within 2 Monte-Carlo SEs of its level: {', '.join(e['near_level'])} (more bootstrap replicates could "
                f"move it across).")
    if sensitivity:
        tv = sensitivity["t_verdicts"]
        t1 = sensitivity["t_pass1"]
        ans = "yes" if tv["selection"] else "cannot be decided" if tv["selection"] is None else "no"
        out += (f" Sensitivity (secondary, random-effects t on {t1['df']:.1f} df): Δpass@1 95% CI {_ci(t1['ci'])}, "
                f"answer {ans}, {'agreeing with' if sensitivity['agrees'] else 'unlike'} the registered one.")
    return out


def power_sentence(pw: dict, k: int, margin: float) -> str:
    eq = (f"the equivalence test has {pw['power']:.0%} power when the true |Δpass@{k}| is at most {pw['equivalence_up_to']:.3f}"
          if pw["equivalence_up_to"] is not None else
          f"no true Δpass@{k} gives the equivalence test {pw['power']:.0%} power (the SE is too large for the ±{margin:g} margin)")
    out = (f"With {pw['n_problems']} problems, {pw['seeds']} seed{'s' if pw['seeds'] > 1 else ''} and n = {pw['n_samples']} samples, "
           f"the random-effects SE of the primary Δpass@1 is {pw['se_pass1']:.3f} ({pw['df_pass1']:.1f} df) and of Δpass@{k} "
           f"{pw['se_passk']:.3f} ({pw['df_passk']:.1f} df); with {pw['power']:.0%} power at one-sided level "
           f"{pw['alpha_one_sided']:g} the design detects Δpass@1 ≥ {pw['mde_pass1']:.3f} and |Δpass@{k}| ≥ {pw['mde_passk']:.3f} "
           f"((t_{{1-α, df}} + t_{{power, df}}) × SE); {eq}.")
    if pw.get("planned"):
        pl = pw["planned"]
        out += (f" Planned (PLAN.md, analyze.planned): power {pl['power']:.2f} to detect Δpass@1 = {pl['effect']:g} at the pilot's "
                f"components; at the components measured here, {pl['power_at_measured_components']:.2f}.")
    return out


def ceiling_words(e: dict) -> str:
    words = [w for w, on in (("equivalent", e["ceiling_equivalent"]), ("falls", e["ceiling_falls"]),
                             ("ceiling rises", e["ceiling_rises"])) if on]
    return ", ".join(words) or ("not shown lower (equivalence not asked)" if e["ceiling_equivalent"] is None else "inconclusive")


def _share(x: float) -> str:
    return "<1%" if 0 < x < 0.005 else ">99%" if 0.995 < x < 1 else f"{x:.0%}"


def crossover_words(c: dict) -> str:
    pt = c["point"]
    head = f"k = {pt['k']}" if pt["outcome"] == "crosses" else pt["outcome"]
    cross = f"crosses {_share(c['cross_share'])}" + (f" (median k {c['median']:g}, 95% {c['ci'][0]:g}–{c['ci'][1]:g})" if c["median"] is not None else "")
    return f"{head}; replicates: {cross}, always above {_share(c['always_share'])}, never above {_share(c['never_share'])}"


def headline(verdicts: dict) -> str:
    """A short plain-text table for the terminal: the primary answer, then per condition and
    checkpoint on the primary scoring: Delta pass@1 [95% CI], adjusted verdict, Delta pass@k [95% CI],
    and what the ceiling did (equivalent / falls / ceiling rises / inconclusive)."""
    sc = verdicts["primary"]["scoring"]
    k = verdicts["k_max"]
    rows = [("condition", "step", "Δpass@1 [95% CI]", "p adj", "pass@1", f"Δpass@{k} [95% CI]", "ceiling")]
    for e in verdicts["entries"]:
        if e["scoring"] == sc:
            rows.append((e["condition"] + (" *" if e["primary"] else ""), str(e["step"]), f"{e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])}",
                         _p(e["p_pass1_adj"]), "rises" if e["pass1_rises"] else "-", f"{e['passk_diff']:+.3f} {_ci(e['passk_ci'])}",
                         ceiling_words(e)))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [verdicts["primary"]["sentence"].replace("**", ""), f"{sc} scoring (* primary; others Holm-adjusted):"]
    lines += ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    if verdicts.get("partial"):
        lines.insert(0, f"PARTIAL: missing {', '.join(verdicts['missing'])}")
    return "\n".join(lines)


# ============================================================================= report.md


def _f(x: float) -> str:
    return f"{x:.3f}"


def _yn(b) -> str:
    return "—" if b is None else ("yes" if b else "no")


def _seed_note(e: dict) -> str:
    return ", ".join(map(str, e["seeds"]))


def report(run: Path, res: dict, figs: list[Path]) -> str:
    base, rl, n, k = res["base"], res["rl"], res["n"], res["k_max"]
    design: Design = res["design"]
    entries = res["entries"]
    ps, other = design.primary_scoring, [s for s in SCORINGS if s != design.primary_scoring][0]
    L = []
    if (design.config.get("analyze") or {}).get("note"):
        L += [f"**{design.config['analyze']['note']}**", ""]
    if res["missing"]:
        L += [f"**PARTIAL REPORT: {len(res['missing'])} of {design.n_expected()} expected evaluations are missing: "
              f"{', '.join(res['missing'])}.**", ""]
    L += [f"# Report: {run.name}", "", res["primary_sentence"], "",
          f"Written by `analyze_b.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. {res['n_problems']} test problems, "
          f"n = {n} samples each; design: conditions {', '.join(design.conditions)}; seeds {', '.join(map(str, design.seeds))}"
          f"{''.join(f' ({c}: {len(v)} seeds, {v[0]}-{v[-1]})' for c, v in (design.seeds_by_condition or {}).items())}; "
          f"checkpoints {', '.join(map(str, design.checkpoints))}. Crossed bootstrap over seeds and problems, {res['resamples']} "
          f"replicates (seed {res['seed']}), percentile intervals.", ""]
    L += _warnings(run, res)
    # --- H1, H2, H3 on the primary scoring
    a1, at, m = res["alpha_one"], res["alpha_tost"], res["margin"]
    L += [f"## H1 and H2 by condition ({ps} scoring)", "",
          f"| condition | step | seeds | pass@1 base → RL | Δpass@1 [95% CI] | p (adj) | H1: pass@1 rises | pass@{k} base → RL | "
          f"Δpass@{k} [95% CI] | 90% CI | p equiv (adj) | p falls (adj) | H2: ceiling | selection | base catches up |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in [e for e in entries if e["scoring"] == ps]:
        L.append(f"| {e['condition']}{' **(primary)**' if e['primary'] else ''} | {e['step']} | {_seed_note(e)} | "
                 f"{_f(e['pass1_base'])} → {_f(e['pass1_rl'])} | {e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])} | "
                 f"{_p(e['p_pass1'])} ({_p(e['p_pass1_adj'])}) | {_yn(e['pass1_rises'])} | {_f(e['passk_base'])} → {_f(e['passk_rl'])} | "
                 f"{e['passk_diff']:+.3f} {_ci(e['passk_ci'])} | {_ci(e['passk_ci90'])} | {_pa(e['p_equiv'], e['p_equiv_adj'])} | "
                 f"{_p(e['p_passk_fall'])} ({_p(e['p_passk_fall_adj'])}) | {ceiling_words(e)} | {_yn(e['selection'])} | "
                 f"{crossover_words(e['crossover'])} |")
    L += ["", f"*pass@1 rises*: one-sided p < {a1:g}. *equivalent*: TOST p < {at:g} (the 90% interval inside ±{m:g}). "
          f"*falls*: one-sided p < {a1:g}. The equivalence test is asked only where the margin is at most "
          f"{design.analyze['margin_headroom_fraction']:.3g} of the base's headroom, 1 − pass@{k} (PLAN.md section 7; *not asked*: "
          f"it could hardly fail there, and such a row's selection is undecided, shown as —, unless the ceiling falls). *ceiling rises*: the 95% interval of Δpass@{k} lies above 0 (descriptive, not a "
          f"registered test). *selection*: pass@1 rises and the ceiling is equivalent or falls. The primary entry is judged on raw "
          f"p-values (an intersection-union test); every other row is secondary, its verdicts on Holm-adjusted p-values (in "
          f"parentheses) within the family *secondary-{ps}*. *base catches up*: the first k at which RL is no longer above the base "
          f"(point estimate), then over the bootstrap replicates the shares that cross, stay above at every k ≤ {k}, and are never "
          f"above (not above at k = 1).", ""]
    if res["h3"]:
        L += [f"## H3: does the ceiling narrow with longer training? ({ps} scoring)", "",
              f"| condition | seeds | Δpass@{k} at step {design.checkpoints[0]} | at step {design.checkpoints[-1]} | difference [95% CI] | one-sided p | narrows |",
              "|---|---|---|---|---|---|---|"]
        for h in [h for h in res["h3"] if h["scoring"] == ps]:
            L.append(f"| {h['condition']} | {', '.join(map(str, h['seeds']))} | {h['passk_diff_first']:+.3f} | {h['passk_diff_last']:+.3f} | "
                     f"{h['diff']:+.3f} {_ci(h['ci'])} | {_p(h['p_narrows'])} | {_yn(h['narrows'])} |")
        L += ["", f"The paired difference (last − first checkpoint) of Δpass@{k}, with the same seeds and problems in each replicate. "
              f"*narrows*: one-sided p < {a1:g}; secondary and not adjusted.", ""]
    L += report_controls(res)
    L += [f"## The {other} scoring", "",
          f"| condition | step | format rate base → RL | Δpass@1 [95% CI] | p (adj) | pass@1 rises | Δpass@{k} [95% CI] | 90% CI | "
          f"p equiv (adj) | p falls (adj) | ceiling | selection |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in [e for e in entries if e["scoring"] == other]:
        L.append(f"| {e['condition']}{' **(primary)**' if e['primary'] else ''} | {e['step']} | {_f(e['format_base'])} → {_f(e['format_rl'])} | "
                 f"{e['pass1_diff']:+.3f} {_ci(e['pass1_ci'])} | {_p(e['p_pass1'])} ({_p(e['p_pass1_adj'])}) | {_yn(e['pass1_rises'])} | "
                 f"{e['passk_diff']:+.3f} {_ci(e['passk_ci'])} | {_ci(e['passk_ci90'])} | {_pa(e['p_equiv'], e['p_equiv_adj'])} | "
                 f"{_p(e['p_passk_fall'])} ({_p(e['p_passk_fall_adj'])}) | {ceiling_words(e)} | {_yn(e['selection'])} |")
    if res["h3"]:
        L += ["", "H3 on this scoring: " + "; ".join(
            f"{h['condition']} {h['diff']:+.3f} {_ci(h['ci'])}, narrows {_yn(h['narrows'])}" for h in res["h3"] if h["scoring"] == other) + "."]
    L += ["", f"Verdicts as above, within the family *secondary-{other}*. The {other} scoring also counts the output format.", "",
          "## Per-seed spread", "", f"| condition | step | scoring | seed | Δpass@1 | Δpass@{k} | coverage RL | format RL |", "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        for s in e["per_seed"]:
            L.append(f"| {e['condition']} | {e['step']} | {e['scoring']} | {s['seed']} | {s['pass1_diff']:+.3f} | {s['passk_diff']:+.3f} | "
                     f"{s['coverage_rl']} | {_f(s['format_rl'])} |")
    L += ["", "## Power", "", res["power"]["statement"], ""]
    L += report_sensitivity(res)
    L += ["## The second version's verdicts", "",
          "What the analysis before PLAN.md change 29 would say: every test in its family whatever the headroom, and bootstrap "
          "p-values without the tie tolerance. Shown for comparison; the registered verdicts are the ones above.", "",
          "| condition | step | scoring | pass@1 rises | equivalent | falls | selection (v2) | selection (registered) |",
          "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        L.append(f"| {e['condition']} | {e['step']} | {e['scoring']} | {_yn(e['pass1_rises_v2'])} | {_yn(e['ceiling_equivalent_v2'])} | "
                 f"{_yn(e['ceiling_falls_v2'])} | {_yn(e['selection_v2'])} | {_yn(e['selection'])} |")
    L += ["",
          "## The original criteria (first version) and the one-third clause", "",
          "The first version's criteria, on the same 95% intervals, unadjusted: *pass@1 rises* ⇔ lower bound > 0; *ceiling "
          f"unchanged* ⇔ the pass@{k} interval contains 0, or |Δpass@{k}| < |Δpass@1| / 3 (point estimates); *ceiling falls* ⇔ "
          f"upper bound < 0. The one-third clause, now inferential: asked only when pass@1 rises; the 95% interval of "
          f"|Δpass@{k}| − Δpass@1 / 3; it holds when the upper bound is below 0.", "",
          "| condition | step | scoring | pass@1 rises (v1) | ceiling unchanged (v1) | ceiling falls (v1) | abs(Δpass@k) − Δpass@1/3 [95% CI] | one-third clause |",
          "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        L.append(f"| {e['condition']} | {e['step']} | {e['scoring']} | {_yn(e['pass1_rises_v1'])} | {_yn(e['ceiling_unchanged_v1'])} | "
                 f"{_yn(e['ceiling_falls_v1'])} | {_ci(e['third_clause_ci']) if e['third_clause_ci'] else 'not asked (pass@1 does not rise)'} | "
                 f"{_yn(e['third_clause'])} |")
    L += ["", "## Coverage (problems with at least one correct answer; RL: mean over seeds)", "",
          "| condition | step | scoring | base | RL | only RL | only base | format base → RL |", "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        L.append(f"| {e['condition']} | {e['step']} | {e['scoring']} | {e['coverage_base']} | {e['coverage_rl']:g} | {e['only_rl']:g} | "
                 f"{e['only_base']:g} | {_f(e['format_base'])} → {_f(e['format_rl'])} |")
    L += [""] + report_beyond(res)
    sel, lrc = run / "selection.json", run / "lr_choice.json"
    if lrc.exists():
        d = read_json(lrc)
        L += ["", "## Learning rate", "", f"Rule: {d['rule']}. Mean reward: "
              + ", ".join(f"{kk}: {v:.3f}" for kk, v in d["mean_reward_last"].items()) + f". Chosen: **{d['chosen']:g}**."]
    if sel.exists():
        d = read_json(sel)
        L += ["", "## Problem selection", "", f"Rule: {d['rule']}. {len(d['informative'])} of {len(d['pass_rates'])} problems informative. "
              + "; ".join(f"set {z}: {', '.join(map(str, ids))}" + (" (fewer than asked)" if d["short"][z] else "") for z, ids in d["sets"].items())]
    probes = sorted(run.glob("probe_*.json"))
    if probes:
        L += ["", "## Base-rate probes (the checks behind PLAN.md's change log)", "",
              "| task | samples | strict pass@1 | loose pass@1 | strict pass@n | loose pass@n | format |", "|---|---|---|---|---|---|---|"]
        for f in probes:
            d = read_json(f)
            kk = str(d["n"])
            L.append(f"| {d['task']} | {d['n_problems']} × {d['n']} | {_f(d['pass_at_k']['strict']['1'])} | {_f(d['pass_at_k']['loose']['1'])} | "
                     f"{_f(d['pass_at_k']['strict'][kk])} | {_f(d['pass_at_k']['loose'][kk])} | {_f(d['format_rate'])} |")
    first = base["problems"][0]
    if "responses" in first:
        L += ["", f"## The first test problem side by side: `{first['question']}` = {first['answer']}", ""]
        shown = [("base", base)]
        for c in design.conditions:  # each condition's last checkpoint present, its first seed
            keys = sorted((st, s) for cc, s, st in rl if cc == c)
            if keys:
                st = keys[-1][0]
                s = min(s for stt, s in keys if stt == st)
                shown.append((f"{c} seed {s} step {st}", rl[(c, s, st)]))
        problem = Problem(first["id"], base.get("task"), first["question"], first["answer"], _operands(first["question"]))
        labelled = base.get("task") in ARITH_DIGITS and problem.numbers is not None
        tag = (lambda r: f"[{classify_strategy(problem, r)['product']}] ") if labelled else (lambda r: "")
        if labelled:
            L += ["Each response is prefixed with its strategy (`countdown.classify_strategy`: how it computes the product).", ""]
        for label, d in shown:
            p = d["problems"][0]
            L.append(f"**{label}** — strict {p['correct_strict']}/{p['n']}, loose {p['correct_loose']}/{p['n']}")
            L += ["```"] + [tag(r) + r.replace("```", "'''")[:300] for r in p.get("responses", [])[:3]] + ["```", ""]
    if figs:
        L += ["## Figures", ""] + [f"![{f.stem}](figures/{f.name})" for f in figs]
    L += ["", "## Provenance of the inputs", "", "| file | sha256 | stage hash | PLAN.md sha256 | revision | made |", "|---|---|---|---|---|---|"]
    for f in (sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")) + sorted(run.glob("tokens_*.json")) + probes
              + [p for p in (sel, lrc) if p.exists()]):
        p = read_json(f).get("provenance", {})
        L.append(f"| {f.relative_to(run).as_posix()} | {file_sha256(f)[:12]} | {p.get('stage_hash')} | {(p.get('plan_sha256') or '')[:12]} | {p.get('revision')} | {p.get('time')} |")
    return "\n".join(L) + "\n"


def _opt(x, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def _ids(ids: list, most: int = 12) -> str:
    """Problem ids, their shared 'task/split/' prefix left off (arith-2x1/test/7 -> 7)."""
    ids = [str(i) for i in ids]
    cut = os.path.commonprefix(ids).rfind("/") + 1 if len(ids) > 0 and all("/" in i for i in ids) else 0
    ids = [i[cut:] if cut else i[i.rfind("/") + 1:] if "/" in i else i for i in ids]
    shown = ", ".join(ids[:most])
    return (shown + f", … ({len(ids) - most} more)") if len(ids) > most else (shown or "—")


def report_controls(res: dict) -> list[str]:
    """H4-H6 (PLAN.md section 7b): the tables and what each is computed from."""
    c, k, m = res["controls"], res["k_max"], res["margin"]
    last = c["step"]
    L = [f"## Controls and baselines: H4–H6 (step {last})", ""]
    if c["h4"] or c["h5"] or c["h6"]:
        L += [f"From the test-set files `eval_<condition>_s<seed>_{last:03d}.json` and `eval_base.json`, the same crossed bootstrap "
              f"({res['resamples']} replicates, seed {res['seed']}); in a contrast of two conditions their seeds are drawn independently "
              f"and the problems shared. H4's verdicts are the registered entries' Holm-adjusted tests above; H5 is an estimate and H6 "
              f"a description, neither adjusted.", ""]
    if c["h4"]:
        L += [f"**H4 (anchoring, {c['scorings']['H4']} scoring):** with the KL anchor the ceiling pass@{k} is equivalent to the "
              f"base's (TOST within ±{m:g}), without it the ceiling falls.", "",
              f"| anchored (β) | Δpass@{k} 90% CI | p equiv (adj) | equivalent | unanchored | Δpass@{k} [95% CI] | p falls (adj) | falls | "
              f"H4 holds | Δ(anchored) − Δ(unanchored) [95% CI] |", "|---|---|---|---|---|---|---|---|---|---|"]
        for h in c["h4"]:
            L.append(f"| {h['anchored']} ({h['kl']:g}) | {h['anchored_passk_diff']:+.3f} {_ci(h['anchored_passk_ci90'])} | "
                     f"{'not asked' if h['anchored_p_equiv_adj'] is None else _p(h['anchored_p_equiv_adj'])} | {_yn(h['anchored_ceiling_equivalent'])} | {h['unanchored']} | "
                     f"{h['unanchored_passk_diff']:+.3f} {_ci(h['unanchored_passk_ci'])} | {_p(h['unanchored_p_falls_adj'])} | "
                     f"{_yn(h['unanchored_ceiling_falls'])} | **{_yn(h['holds'])}** | {h['contrast']:+.3f} {_ci(h['contrast_ci'])} |")
        L.append("")
    if c["h5"]:
        L += [f"**H5 (format share, {c['scorings']['H5']} scoring):** the share of the reference's pass@1 gain that a reward "
              f"for the format alone reaches. An estimate, not a test; not estimable when the reference gain's 95% interval contains 0.", "",
              "| format-only condition | Δpass@1 [95% CI] | reference | Δpass@1 [95% CI] | share [95% CI] |", "|---|---|---|---|---|"]
        for h in c["h5"]:
            share = f"{h['share']:.2f} [{h['ci'][0]:.2f}, {h['ci'][1]:.2f}]" if h["estimable"] else f"not estimable ({h['why']})"
            L.append(f"| {h['condition']} | {h['gain']:+.3f} {_ci(h['gain_ci'])} | {h['reference']} | "
                     f"{h['reference_gain']:+.3f} {_ci(h['reference_gain_ci'])} | {share} |")
        L.append("")
    if c["h6"]:
        L += [f"**H6 (RL vs RFT and SFT, {c['scorings']['H6']} scoring):** Δ_k = pass@k(GRPO) − pass@k(other), k = 1…{k}, with a "
              f"simultaneous 95% band (figure `controls_h6.png`). Descriptive, secondary, not adjusted.", "",
              f"| GRPO | other (method) | Δpass@1 [95% CI] | Δpass@{k} [95% CI] | band half-width at k = 1, {k} | above at k = 1 | where the curves cross |",
              "|---|---|---|---|---|---|---|"]
        for h in c["h6"]:
            cr = h["crossover"]
            lead = cr["leader_at_k1"]
            cross = "—" if lead == "tie" else f"{lead} leads: " + crossover_words(cr)
            L.append(f"| {h['rl']} | {h['other']} ({h['method']}) | {h['diff_pass1']:+.3f} {_ci(h['ci_pass1'])} | "
                     f"{h['diff_passk']:+.3f} {_ci(h['ci_passk'])} | {(h['hi'][0] - h['lo'][0]) / 2:.3f}, {(h['hi'][-1] - h['lo'][-1]) / 2:.3f} | "
                     f"{lead} | {cross} |")
        L.append("")
    for s in c["skipped"]:
        L.append(f"- {s['hypothesis']} not asked: {s['why']}.")
    return L + ([""] if c["skipped"] else [])


def report_sensitivity(res: dict) -> list[str]:
    """The primary entry's sensitivity analysis (secondary): variance components, the random-effects
    t result beside the bootstrap's, and the crossed interval's simulated coverage."""
    sn = res.get("sensitivity")
    if not sn:
        return []
    k = res["k_max"]
    L = ["## Sensitivity of the primary answer (secondary)", "",
         "Two-way crossed random effects (problems × seeds) fitted to the per-seed, per-problem Δ of the primary entry by the method "
         "of moments; the t interval uses Satterthwaite's df. Secondary: the registered answer is the bootstrap's above.", "",
         "| quantity | Δ | problem var | seed var (SD) | residual var | SE | df | t 95% CI | one-sided p |", "|---|---|---|---|---|---|---|---|---|"]
    for name, vc, t in (("Δpass@1", sn["pass1"], sn["t_pass1"]), (f"Δpass@{k}", sn["passk"], sn["t_passk"])):
        sd = "—" if vc["V_B"] is None else f"{vc['V_B']:.5f} ({vc['seed_sd']:.3f}, {vc['seed_df']} df)"
        res_v = "—" if vc["V_R"] is None else f"{vc['V_R']:.4f}"
        p = t["p_above"] if name == "Δpass@1" else t["p_below"]
        L.append(f"| {name} | {vc['delta']:+.3f} | {vc['V_A']:.4f} | {sd} | {res_v} | {vc['se']:.4f} | {vc['df']:.1f} | "
                 f"{_ci(t['ci'])} | {_p(p)} ({'rises' if name == 'Δpass@1' else 'falls'}) |")
    tv = sn["t_verdicts"]
    L += ["", f"t-based verdicts: pass@1 rises {_yn(tv['pass1_rises'])}, ceiling falls {_yn(tv['ceiling_falls'])}, equivalent "
          f"{_yn(tv['ceiling_equivalent'])} (90% CI {_ci(sn['t_passk_90']['ci'])}); selection {_yn(tv['selection'])}, "
          f"{'the same as' if sn['agrees'] else 'unlike'} the registered answer."]
    for name, c in sn["coverage"].items():
        L.append(f"Coverage of the crossed bootstrap's 95% interval for Δpass@1 by simulation {name} ({c['seed_sd']:.3f}; "
                 f"{c['sims']} data sets of {c['N']} problems × {c['S']} seeds): {c['coverage']:.2f} (lower tail misses "
                 f"{c['lower_miss']:.3f}, nominal 0.025); the t interval's {c['coverage_t']:.2f}.")
    return L + [""]


def report_beyond(res: dict) -> list[str]:
    """PLAN.md section 7c: evaluation sets, pass@k beyond n, boundary, diversity, in vs out of distribution, tokens."""
    design: Design = res["design"]
    L = ["## Evaluation sets", "", "| set | task | problems × n | k_max | models | files found |", "|---|---|---|---|---|---|",
         f"| test | {res['base'].get('task', (design.config.get('task') or {}).get('name'))} | {res['n_problems']} × {res['n']} | "
         f"{res['k_max']} | all | {1 + len(res['rl'])} (eval_*.json) |"]
    for name, spec in design.eval_sets.items():
        b, docs, prefix = res["sets"][name]
        L.append(f"| {name} | {spec['task']}{' (out of distribution)' if spec['ood'] else ''} | {spec['n_problems']} × {spec['n']} | "
                 f"{spec['k_max']} | {spec['models']} | {(b is not None) + len(docs)} ({prefix}) |")
    bz = res["beyond"]
    n, ext = bz["n"], bz["extrapolate_to"]
    src = "test set, eval_*.json" if bz["set"] == "test" else f"set {bz['set']}, evalsets/{bz['set']}/"
    L += ["", f"## pass@k beyond n = {n}: {MODEL_BASED}", "",
          f"Fitted by maximum likelihood to each model's per-problem counts in the {src} (the base and each condition's last "
          f"checkpoint); pass@k = 1 − B(α, β + k) / B(α, β). The plain beta-binomial is the registered model (PLAN.md change "
          f"29); AIC's preference between it and the zero-inflated one (a share π of problems never solved) is shown, not used. "
          f"Every value in the last column is **{MODEL_BASED}**, not measured; its interval is the parametric bootstrap's "
          f"({bz['resamples']} refits of data drawn from the fit). *at bound*: the fit ran to the edge of its search box "
          f"(counts all alike: a binomial or a point mass), so its extrapolation is the limit of the model, not a measurement.", "",
          f"| model | scoring | α | β | AIC plain / zero-inflated (prefers) | measured pass@{n} | model pass@{n} | "
          f"pass@{ext} ({MODEL_BASED}) [95%] |", "|---|---|---|---|---|---|---|---|"]
    for f in bz["fits"]:
        pref = "plain" if f["aic_prefers"] == "beta-binomial" else "zero-inflated"
        L.append(f"| {f['model']} | {f['scoring']}{' (at bound)' if f['at_bound'] else ''} | {f['alpha']:.3g} | {f['beta']:.3g} | "
                 f"{f['aic']['beta-binomial']:.1f} / {f['aic']['zero-inflated beta-binomial']:.1f} ({pref}) | "
                 f"{_f(f['measured_pass_at_n'])} | {_f(f['model_pass_at_n'])} | {_f(f['model_pass_at_extrapolated'])} "
                 f"[{_f(f['extrapolated_ci'][0])}, {_f(f['extrapolated_ci'][1])}] |")
    if bz["check"]:
        ch = bz["check"]
        nt = ch[0]["fit_n"]
        L += ["", f"**Check of the model on this study's data: levels.** Fitted to the test set's {nt} samples on the "
              f"{ch[0]['n_problems']} problems of set {bz['set']}, the model predicts pass@{n}; the set measures it on the same problems. "
              f"error = predicted − measured; *naive* is the measured pass@{nt}, what one would say without a model.", "",
              f"| model | scoring | fitted to | predicted pass@{n} ({MODEL_BASED}) | measured pass@{n} | error | zero-inflated's error | "
              f"naive pass@{nt} (error) |", "|---|---|---|---|---|---|---|---|"]
        for r in ch:
            L.append(f"| {r['model']} | {r['scoring']} | {r['fit_file']} | {_f(r['predicted'])} | {_f(r['measured'])} | "
                     f"{r['error']:+.3f} | {r['predicted_zero_inflated'] - r['measured']:+.3f} | {_f(r['naive'])} ({r['naive_error']:+.3f}) |")
        for sc in SCORINGS:
            errs = [abs(r["error"]) for r in ch if r["scoring"] == sc]
            if errs:
                L += ["", f"Mean |error| ({sc}): {np.mean(errs):.3f}, largest {max(errs):.3f}, over {len(errs)} models."]
    if bz.get("contrasts"):
        cs, cov = bz["contrasts"], bz["contrast_coverage"]
        nt = cs[0]["fit_n"]
        L += ["", f"**Check of the model on the contrast the question is about.** From the same fits, the model predicts "
              f"Δpass@{n} (RL − base) with a 95% parametric-bootstrap interval; the set measures it. The measured contrast lies in the "
              f"interval for {cov['covered']} of {cov['of']} models × scorings.", "",
              f"| model | scoring | predicted Δpass@{n} [95%] ({MODEL_BASED}) | measured Δpass@{n} | error | in the interval | "
              f"zero-inflated's error | naive Δpass@{nt} |", "|---|---|---|---|---|---|---|---|"]
        for r in cs:
            L.append(f"| {r['model']} | {r['scoring']} | {r['predicted_delta']:+.3f} {_ci(r['ci'])} | {r['measured_delta']:+.3f} | "
                     f"{r['error']:+.3f} | {_yn(r['covered'])} | {r['error_zero_inflated']:+.3f} | {r['naive_delta']:+.3f} |")
    if bz["check_skipped"]:
        L += ["", f"No check of the model: {bz['check_skipped']}."]
    nulls = [r for r in bz["boundary"] if r.get("null")]
    L += ["", f"## Boundary at n = {n} ({src})", "",
          f"Problems the base never solved in {n} samples that the trained model solved at least once (*only RL*), and the reverse "
          f"(*only base*), with their ids (without their task/split/ prefix; the full ids are in verdicts.json)."
          + (f" *Chance*: the count expected if the trained model were the base (PLAN.md section 7c: each problem's rate from "
             f"the test set's fresh {nulls[0]['null']['fresh_n']} base samples, empirical Bayes), with its 95% range and the p of "
             f"seeing at least the observed count." if nulls else ""), "",
          "| model | scoring | solved: base / RL | only RL | chance [95%], p | ids | only base | p | ids |", "|---|---|---|---|---|---|---|---|---|"]
    for r in bz["boundary"]:
        nl = r.get("null")
        ch = f"{nl['expected']:.1f} [{nl['range'][0]}, {nl['range'][1]}], {nl['only_rl']['p']:.3f}" if nl else "—"
        L.append(f"| {r['model']} | {r['scoring']} | {r['solved_base']} / {r['solved_rl']} | {r['only_rl']} | {ch} | "
                 f"{_ids(r['only_rl_ids'])} | {r['only_base']} | {nl['only_base']['p']:.3f} | {_ids(r['only_base_ids'])} |"
                 if nl else f"| {r['model']} | {r['scoring']} | {r['solved_base']} / {r['solved_rl']} | {r['only_rl']} | — | "
                 f"{_ids(r['only_rl_ids'])} | {r['only_base']} | — | {_ids(r['only_base_ids'])} |")
    dv = res["diversity"]
    if dv["conditions"]:
        L += ["", "## Diversity", "",
              "Per problem, from each eval file's fields: the number of distinct final answers among its samples (the answer block's integer, "
              "else the last integer; no integer is one class), the entropy of that answer distribution, and the mean full-vocabulary token "
              "entropy of the untempered (T = 1) distribution over the response tokens. Mean over problems; trained models: mean over seeds "
              "(each model's own row is in verdicts.json).", "",
              "| set | condition | step | seeds | distinct answers | answer entropy (nats) | token entropy (nats) |", "|---|---|---|---|---|---|---|"]
        for r in dv["conditions"]:
            L.append(f"| {r['set']} | {r['condition']} | {r['step'] or '—'} | {', '.join(map(str, r['seeds'])) or '—'} | "
                     f"{_opt(r['distinct_answers'], '{:.2f}')} | {_opt(r['answer_entropy'])} | {_opt(r['token_entropy'])} |")
    for name, o in res["ood"].items():
        K, kt = o["k_max"], o["test_k_max"]
        L += ["", f"## In vs out of distribution: test vs {name} ({o['task']}, {o['n_problems']} × {o['n']})", "",
              f"Test columns: the entries above (eval_*.json); {name} columns: evalsets/{name}/, its own crossed bootstrap. Each cell: "
              f"RL (mean over seeds), Δ vs base [95% CI]. {o['note']}.", "",
              f"| condition | scoring | test pass@1 | {name} pass@1 | test pass@{kt} | {name} pass@{K} |", "|---|---|---|---|---|---|"]
        for r in o["rows"]:
            if r["condition"] == "base":
                L.append(f"| base | {r['scoring']} | {_f(r['test_pass1'])} | {_f(r['ood_pass1'])} | {_f(r['test_passk'])} | {_f(r['ood_passk'])} |")
            else:
                L.append(f"| {r['condition']} | {r['scoring']} | {_f(r['test_pass1'])}, {r['test_pass1_diff']:+.3f} {_ci(r['test_pass1_ci'])} | "
                         f"{_f(r['ood_pass1'])}, {r['ood_pass1_diff']:+.3f} {_ci(r['ood_pass1_ci'])} | "
                         f"{_f(r['test_passk'])}, {r['test_passk_diff']:+.3f} {_ci(r['test_passk_ci'])} | "
                         f"{_f(r['ood_passk'])}, {r['ood_passk_diff']:+.3f} {_ci(r['ood_passk_ci'])} |")
    L += report_strategies(res)
    tk = res["tokens"]
    if tk["rows"] or tk["enabled"]:
        pp = tk["paper"]
        L += ["", "## The token level (arXiv 2605.06241 §3)", "",
              "The base decodes each test problem greedily; the trained model reads the same prefixes. A position is *unchanged* when the two "
              "argmaxes agree, *reranked* when the trained choice is in the base's top 5 but not first, *shifted* otherwise. Pooled over "
              "every position; recomputed from each tokens_<condition>_s<seed>_<step>.json's per-problem detail. The last row is the "
              f"paper's range: {pp['source']}, not a target.", "",
              "| condition | seed | step | positions | unchanged | reranked | shifted | mean base rank (changed) | base entropy changed / unchanged | ratio |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for r in tk["rows"]:
            pct = lambda x: "—" if x is None else f"{100 * x:.3f}%"
            L.append(f"| {r['condition']} | {r['seed']} | {r['step']} | {r['positions']} | {pct(r['share_unchanged'])} | {pct(r['share_reranked'])} | "
                     f"{pct(r['share_shifted'])} | {_opt(r['mean_rank_changed'], '{:.2f}')} | {_opt(r['base_entropy_changed'])} / "
                     f"{_opt(r['base_entropy_unchanged'])} | {_opt(r['entropy_ratio'], '{:.1f}×')} |")
        L.append(f"| *paper (another model and task)* | | | | | {100 * pp['share_reranked'][0]:g}–{100 * pp['share_reranked'][1]:g}% | "
                 f"{100 * pp['share_shifted'][0]:g}–{100 * pp['share_shifted'][1]:g}% | {pp['mean_rank_changed'][0]:g}–{pp['mean_rank_changed'][1]:g} | | "
                 f"{pp['entropy_ratio'][0]:g}–{pp['entropy_ratio'][1]:g}× |")
        if not tk["rows"]:
            L.append("\nNo token files yet.")
    return L


def _warnings(run: Path, res: dict) -> list[str]:
    """Inputs made under another PLAN.md, other evaluation settings or another config, and
    optional inputs that are missing."""
    base, rl, design = res["base"], res["rl"], res["design"]
    prov = base.get("provenance", {})
    plan_now = file_sha256(ROOT / "PLAN.md")
    warnings = []

    def settings(d: dict) -> dict:  # what must match between the models compared (the adapter may not)
        c = d.get("provenance", {}).get("config", {})
        return {kk: c.get(kk) for kk in ("seed", "model", "task", "eval")}

    for d in rl.values():
        p = d.get("provenance", {})
        if p.get("plan_sha256") != prov.get("plan_sha256"):
            warnings.append(f"{d['_file']} was made under a different PLAN.md than eval_base.json")
        if settings(d) != settings(base):
            warnings.append(f"{d['_file']} records other evaluation settings (seed, model, task or eval) than eval_base.json")
    if prov.get("plan_sha256") and plan_now and prov["plan_sha256"] != plan_now:
        warnings.append("PLAN.md has changed since the base was evaluated")
    cfg = design.config
    expected = ["selection.json"] + (["lr_choice.json"] if cfg.get("train", {}).get("lr") is None else [])
    expected += [f"probe_{t}.json" for t in cfg.get("probe", {}).get("tasks", [])]
    expected += [f"{design.train_dir(c, s)}/train_log.csv" for c in design.conditions for s in design.seeds_of(c)
                 if any(key[:2] == (c, s) for key in rl)]
    if (cfg.get("train", {}).get("dev_every") or 0) > 0:
        expected += [f"{design.train_dir(c, s)}/train_eval.csv" for c in design.conditions for s in design.seeds_of(c)
                     if any(key[:2] == (c, s) for key in rl)]
    for name, (b, docs, prefix) in res["sets"].items():
        for d in docs.values():
            if b is not None and {**settings(d), "sets": d.get("provenance", {}).get("config", {}).get("eval_sets")} != \
                    {**settings(b), "sets": b.get("provenance", {}).get("config", {}).get("eval_sets")}:
                warnings.append(f"{prefix}{d['_file']} records other evaluation settings than {prefix}eval_base.json")
        for d in ([b] if b is not None else []) + list(docs.values()):
            if not same_config(d.get("provenance"), prov):
                warnings.append(f"{prefix}{d['_file']} was made with another config (hash {d.get('provenance', {}).get('config_hash')}) "
                                f"than eval_base.json ({prov.get('config_hash')})")
    if (run / "evalsets").is_dir():
        for f in sorted((run / "evalsets").iterdir()):
            if f.is_dir() and f.name not in design.eval_sets:
                warnings.append(f"evalsets/{f.name}/ is not a registered evaluation set (config eval_sets): left out")
    warnings += res["tokens"]["warnings"]
    if not design.tokens_enabled and res["tokens"]["rows"]:
        warnings.append("token files are present but config tokens.enabled is off: they are reported as found, not checked for completeness")
    for name in expected:
        if not (run / name).exists():
            warnings.append(f"{name} is missing: what it would show is left out of this report")
        elif name.endswith(".json"):
            rec = read_json(run / name).get("provenance", {})
            h = rec.get("config_hash")
            if not same_config(rec, prov):
                warnings.append(f"{name} was made with another config (hash {h}) than eval_base.json ({prov.get('config_hash')})")
    for d in rl.values():
        if not same_config(d.get("provenance"), prov):
            warnings.append(f"{d['_file']} was made with another config (hash {d.get('provenance', {}).get('config_hash')}) "
                            f"than eval_base.json ({prov.get('config_hash')})")
    return (["## Warnings", ""] + [f"- {w}" for w in warnings] + [""]) if warnings else []


def report_strategies(res: dict) -> list[str]:
    """PLAN.md section 7d: the strategy table and its registered reading."""
    sg = res["strategies"]
    if sg["skipped"]:
        return ["", "## Strategies", "", f"Not counted: {sg['skipped']}."]
    S = sg["strategies"]
    base = sg["models"][0]
    L = ["", "## Strategies: how each response computes the product (PLAN.md section 7d)", "",
         "Every test-set response classified by `countdown.classify_strategy`: *split* (partial products of an operand), "
         "*one-step* (`a * b = N`), *no-product* (no product written). Each cell: share of responses (Δ vs the base [95% CI, crossed "
         "bootstrap]), accuracy (loose) within the strategy, share of all correct answers it carries; trained models pooled over "
         f"seeds. {sg['note']}.", "",
         "| model | step | " + " | ".join(f"{s}" for s in S) + " | subtraction shown |",
         "|---|---|" + "---|" * len(S) + "---|",
         "| base | — | " + " | ".join(f"{base['share'][s]:.3f}; acc {_opt(base['accuracy'][s])}; of correct {_opt(base['correct_share'][s])}"
                                      for s in S) + f" | {base['subtraction_share']:.3f} |"]
    for r in sg["conditions"]:
        L.append(f"| {r['condition']} | {r['step']} | " + " | ".join(
            f"{r['share'][s]:.3f} ({r['delta'][s]:+.3f} {_ci(r['delta_ci'][s])}); acc {_opt(r['accuracy'][s])}; "
            f"of correct {_opt(r['correct_share'][s])}" for s in S) + f" | {r['subtraction_share']:.3f} |")
    L += ["", f"**The registered reading** (last checkpoint; descriptive): a strategy is *new* when the base's share is below "
          f"{sg['floor']:g} and the trained model's above it; *selection at the strategy level* when every strategy the trained model "
          f"uses at least {sg['nonnegligible']:.0%} of the time has a base share of at least {sg['floor']:g}, and the strategy with the "
          "highest base accuracy gains share.", "",
          "| condition | step | new strategies | the base's most accurate strategy | it gains share | selection at the strategy level |",
          "|---|---|---|---|---|---|"]
    for r in sg["reading"]:
        L.append(f"| {r['condition']} | {r['step']} | {', '.join(r['new']) or '—'} | {r['best_base_strategy'] or '—'} | "
                 f"{_yn(r['best_gains'])} | {_yn(r['selection_at_strategy_level'])} |")
    return L
