"""report.md and the terminal headline, printed from verdicts.json alone: render(doc) and
headline(doc) read the document and nothing else (no file, no config), so the label the report
prints is the one verdicts.json holds, and `analyze_b.py --report-only RUN` prints a run's report
again from its verdicts.json. Every sentence of the analysis is made here or in the other report_*.py
modules. One function per section, in PLAN.md's order (this file: the primary question and section 7's
verdicts, and render() putting every section in order; report_checks.py: the calibration, the support test,
power; report_base_support.py: change 57's measure, 7e, baselines, collapse; report_beyond.py: 7c's model;
report_secondary.py: the rest);
report_format.table makes every markdown table.
"""

from __future__ import annotations

import time

from analysis import report_legacy
from analysis.compat import LEGACY
from analysis.document import PRINTED, Entry
from analysis.report_base_support import (
    base_support_section,
    baselines_section,
    collapse_section,
    primary_sentence as support_sentence,
    within_correct_section,
)
from analysis.report_beyond import beyond_section, boundary_section
from analysis.report_checks import (
    calibration_section,
    calibration_words,
    deciding_interval,
    power_section,
    support_section,
)
from analysis.report_format import ci3, crossover_words, f3, p4, table, yn
from analysis.report_secondary import (
    controls_section,
    diversity_section,
    inputs_section,
    ood_section,
    provenance_section,
    sets_section,
    strategies_section,
    tokens_section,
)
from countdown import SCORINGS


class OldDocument(ValueError):
    """A verdicts.json the printer cannot read: its layout predates the keys in document.PRINTED."""


def primary_entry(doc: dict) -> Entry | None:
    """The primary question's entry (condition, scoring and last checkpoint), None in a partial run without it."""
    return next((e for e in doc["entries"] if e["primary"]), None)


def reason_words(e: Entry, margin: float) -> str:
    """An entry's label's reason (verdict.REASONS) in words, with the p-value it rests on."""
    r, k = e["reason"], e["k"]
    p = "" if r["p"] is None else f" (p = {p4(r['p'])})"
    return {
        "above-null": f"pass@{k} lies above the selection null's{p}",
        "pass1-falls": f"pass@1 falls{p}",
        "below-null": f"pass@1 rises and pass@{k} lies below the selection null's{p}",
        "within-null": f"pass@1 rises and pass@{k} is within ±{margin:g} of the selection null's (TOST{p})",
        "equivalence-not-asked": f"pass@1 rises, but pass@{k} is neither shown above nor below the selection null's, and its "
        f"equivalence test is not asked (the null leaves too little headroom for the ±{margin:g} margin)",
        "ceiling-inconclusive": f"pass@1 rises, but pass@{k} is neither shown above, below nor within ±{margin:g} of the selection "
        f"null's (TOST{p})",
        "pass1-unchanged": f"pass@1 is shown neither to rise{p} nor to fall (p = {p4(e['adjusted']['falls'])})",
    }[r["code"]]


def primary_sentence(e: Entry | None, doc: dict) -> str:
    """The primary question and its label (verdicts.json's primary.label) in one sentence, with the
    numbers behind it; then, where the calibration failed, that the instrument is not calibrated in
    this world."""
    pr = doc["primary"]
    q = (
        f"Does RL on `{pr['condition']}` select ({pr['scoring']} scoring, step {pr['step']}"
        + (f", {len(e['seeds'])} seed{'s' * (len(e['seeds']) > 1)}, {e['n_problems']} problems" if e else "")
        + ")?"
    )
    if e is None:
        return f"{q} Not answered: its evaluations are missing (partial report)."
    k, nl, vs = e["k"], e["null"], e["vs_null"]
    label = pr["label"]
    out = (
        f"{q} **{label[0].upper() + label[1:]}**: {reason_words(e, doc['levels']['selection_margin'])}. "
        f"pass@1 {e['pass1_base']:.3f} → {e['pass1_rl']:.3f} (Δ {e['pass1_diff']:+.3f} {ci3(e['pass1_ci'])}); pass@{k} "
        f"{e['passk_base']:.3f} → {e['passk_rl']:.3f}, against {nl['passk']:.3f} for the base reweighted to the same pass@1 "
        f"(w = {nl['w']:.3g}, 95% {nl['w_ci'][0]:.3g}–{nl['w_ci'][1]:.3g}): difference {vs['diff']:+.3f} {ci3(vs['ci'])}."
    )
    if pr["ceiling_null"] != "selection":
        out += f" (Registered here: the base-null reading; the selection-null label is *{e['label']}*.)"
    cal = doc["calibration"]
    if cal.get("arms") and not cal["calibrated"]:
        bad = [a["arm"] for a in cal["arms"] if a["passed"] is False]
        out += f" **The instrument is not calibrated in this world**: the arm{'s' * (len(bad) > 1)} {', '.join(bad)} failed (below)."
    elif cal.get("skipped"):
        out += f" No calibration: {cal['skipped']}."
    if e.get("near_level"):
        out += f" Within 2 Monte-Carlo SEs of its level: {', '.join(e['near_level'])}."
    return out


def header(doc: dict) -> list[str]:
    d, sz, inp = doc["design"], doc["sizes"], doc.get("inputs") or {}
    note = (doc.get("provenance", {}).get("analyze") or {}).get("note")
    L = [f"**{note}**", ""] if note else []
    if doc.get("absent"):  # an earlier layout, upgraded by analysis/compat.py
        L += [
            f"*Printed again from a verdicts.json of an earlier layout ({doc['layout']}, see analysis/compat.py); not recorded by "
            f"this run: {'; '.join(doc['absent'])}.*",
            "",
        ]
    if doc["missing"]:
        of = f" of {inp['n_expected']}" if "n_expected" in inp else ""
        L += [
            f"**PARTIAL REPORT: {len(doc['missing'])}{of} expected evaluations are missing: {', '.join(doc['missing'])}.**",
            "",
        ]
    seeds = ", ".join(map(str, d["seeds"])) + "".join(
        f" ({c}: {len(v)} seeds)" for c, v in (d["seeds_by_condition"] or {}).items()
    )
    made = doc.get("provenance", {}).get("time")
    when = (
        time.strftime("%Y-%m-%d %H:%M UTC", time.strptime(made, "%Y-%m-%dT%H:%M:%SZ")) if made else "an unrecorded time"
    )
    return L + [
        f"# Report: {doc.get('provenance', {}).get('run', 'a run analysed before verdicts.json named its folder')}",
        "",
        f"Written by `analyze_b.py` on {when}. {sz['n_problems']} test "
        f"problems; the base sampled {sz['n_base']} times each, every trained model {sz['n']} times; conditions "
        f"{', '.join(d['conditions'])}; seeds {seeds}; checkpoints {', '.join(map(str, d['checkpoints']))}. Crossed bootstrap "
        f"over seeds and problems, {doc['bootstrap']['resamples']} replicates (seed {doc['bootstrap']['seed']}), percentile "
        f"intervals.",
        "",
    ]


def tilt_sentence(doc: dict) -> str:
    """The registered question of change 42 (analyze.support.primary) and its answer at the evaluation sampler."""
    pr, sup = doc["primary"], doc["support"]
    t = sup["conditions"][pr["condition"]]["tests"]["eval"]
    deciding = t["below"] if t["answer"] == "kept" else t["above"]
    ci, by = deciding_interval(t), f" by the {t['decided_by']} part, which decided" if "decided_by" in t else ""
    return (
        f"Does RL on `{pr['condition']}` solve the test problems the base never solved (Z, {t['n_z']} problems) more often than "
        f"any selection with tilt at most w* = {t['w_star']:g} could ({pr['scoring']} scoring, step {pr['step']}, the evaluation "
        f"sampler)? **{pr['label'][0].upper() + pr['label'][1:]}**: RL's rate on Z {t['rl_rate']:.3f} "
        f"({t['rl_ci_level']:.1%} interval {ci3(ci)}{by})"
        f" against the selection bound {t['bound']:.3f}; one-sided p = {p4(deciding['p'])} against {t['alpha']:g} / 2. "
        f"(Secondary readings: the selection-null label is *{pr['label_selection_null']}*.)"
    )


def primary_section(doc: dict) -> list[str]:
    """PLAN.md section 7: the primary entry's tests."""
    e, lv = primary_entry(doc), doc["levels"]
    L = ["## The primary question", ""]
    question = doc["primary"].get("question")
    if question in ("base_support", "support"):  # changes 57 and 42: the spread reading follows as a secondary one
        spread = {**doc, "primary": {**doc["primary"], "label": doc["primary"]["label_selection_null"]}}
        first = support_sentence(doc) if question == "base_support" else tilt_sentence(doc)
        L += [first, "", "*The selection-null reading (secondary):* " + primary_sentence(e, spread), ""]
    else:
        L += [primary_sentence(e, doc), ""]
    if e is None:
        return L
    k, vs, nl = e["k"], e["vs_null"], e["null"]
    eq = vs["equivalence"]
    rows = [
        [
            "pass@1 rises",
            f"{e['pass1_diff']:+.3f} {ci3(e['pass1_ci'])}",
            p4(e["rises"]["p_boot"]),
            p4(e["rises"]["p_t"]),
            p4(e["rises"]["p"]),
        ],
        ["pass@1 falls", "", p4(e["falls"]["p_boot"]), p4(e["falls"]["p_t"]), p4(e["falls"]["p"])],
        [
            f"pass@{k} above the selection null's",
            f"{vs['diff']:+.3f} {ci3(vs['ci'])}",
            p4(vs["above"]["p_boot"]),
            p4(vs["above"]["p_t"]),
            p4(vs["above"]["p"]),
        ],
        [
            f"pass@{k} below the selection null's",
            "",
            p4(vs["below"]["p_boot"]),
            p4(vs["below"]["p_t"]),
            p4(vs["below"]["p"]),
        ],
        [
            f"pass@{k} within ±{lv['selection_margin']:g} of the null's (TOST)",
            f"90% {ci3(vs['ci90'])}",
            p4(eq["p_boot"]) if eq else "not asked",
            p4(eq["p_t"]) if eq else "",
            p4(eq["p"]) if eq else "",
        ],
    ]
    L += table(["test", "estimate [95% CI]", "bootstrap p", "t p", "p (the larger)"], rows)
    L += [
        "",
        f"The selection null: the base's rates reweighted towards its correct answers by w = {nl['w']:.3g} (95% "
        f"{nl['w_ci'][0]:.3g}–{nl['w_ci'][1]:.3g}), the w at which its pass@1 equals the trained model's ({nl['pass1']:.3f}); "
        f"its pass@{k} is {nl['passk']:.3f}, leaving a headroom of {nl['headroom']:.3f}. Each problem's rate is its empirical-Bayes "
        f"posterior (Beta prior a = {nl['prior'][0]:.3g}, b = {nl['prior'][1]:.3g}, fitted to the base's counts)."
        + (
            " The trained pass@1 lies outside what reweighting the base reaches on the grid of w."
            if nl["out_of_range"]
            else ""
        )
        + f" One-sided tests at {lv['one_sided']:g}, TOST at {lv['tost']:g} (asked only where the margin is at most "
        f"{lv['headroom_fraction']:.3g} of the null's headroom); each p is the larger of the crossed "
        f"bootstrap's and the random-effects t test's. Labels: *degradation* (pass@1 falls), else *beyond selection* (the ceiling "
        f"above the null's), else *selection* (pass@1 rises and the ceiling below or within the margin of the null's), else *undecided*. "
        f"A uniform reweighting is one model of selection; the model-free evidence is the boundary (below: problems the trained model "
        f"solves that the base never did, against chance).",
        "",
    ]
    bn = e["base_null"]
    L += [
        f"*The seed report's reading* (secondary; PLAN.md section 7, earlier versions): against the base itself, pass@{k} "
        f"{e['passk_diff']:+.3f} (90% {ci3(e['passk_ci90'])}); equivalent within ±{bn['margin']:g}: "
        f"{'not asked (headroom ' + format(e['headroom'], '.3f') + ')' if not bn['testable'] else yn(bn['ceiling_equivalent'])}; "
        f"lower: {yn(bn['ceiling_falls'])}; its selection answer: {yn(bn['selection'])}.",
        "",
    ]
    return L


def entries_section(doc: dict, scoring: str, title: str, formats: bool) -> list[str]:
    """PLAN.md section 7: every condition x checkpoint of one scoring, its tests and label (formats:
    with the format rate, for the scoring that counts it)."""
    k = doc["sizes"]["k_max"]
    rows = []
    for e in [x for x in doc["entries"] if x["scoring"] == scoring]:
        a = e["adjusted"]
        rows.append(
            [
                e["condition"] + (" **(primary)**" if e["primary"] else ""),
                e["step"],
                ", ".join(map(str, e["seeds"])),
                f"{e['pass1_base']:.3f} → {e['pass1_rl']:.3f}",
                f"{e['pass1_diff']:+.3f} {ci3(e['pass1_ci'])}",
                f"{p4(a['rises'])} / {p4(a['falls'])}",
                f"{e['passk_base']:.3f} → {e['passk_rl']:.3f}",
                f"{e['null']['passk']:.3f}",
                f"{e['vs_null']['diff']:+.3f} {ci3(e['vs_null']['ci'])}",
                f"{p4(a['above'])} / {p4(a['below'])} / {p4(a['equivalence'])}",
                f"**{e['label']}**",
            ]
            + ([f"{f3(e['format_base'])} → {f3(e['format_rl'])}"] if formats else [])
            + [crossover_words(e["crossover"])]
        )
    L = [f"## {title}", ""]
    L += table(
        [
            "condition",
            "step",
            "seeds",
            "pass@1 base → RL",
            "Δpass@1 [95% CI]",
            "p rises / falls",
            f"pass@{k} base → RL",
            f"null pass@{k}",
            "vs null [95% CI]",
            "p above / below / within",
            "label",
        ]
        + (["format rate base → RL"] if formats else [])
        + ["base catches up"],
        rows,
    )
    return L + [
        "",
        f"p-values of the primary entry are raw; every other row's are Holm-adjusted within the family "
        f"*secondary-{scoring}* (weighted Holm on p / level). *null pass@{k}*: the base reweighted to the row's pass@1. "
        f"*base catches up*: the first k at which RL is no longer above the base, and over the replicates the shares that "
        f"cross, stay above at every k ≤ {k}, or are never above.",
        "",
    ]


def h3_section(doc: dict, scoring: str) -> list[str]:
    rows = [
        [
            h["condition"],
            ", ".join(map(str, h["seeds"])),
            f"{h['passk_diff_first']:+.3f}",
            f"{h['passk_diff_last']:+.3f}",
            f"{h['diff']:+.3f} {ci3(h['ci'])}",
            p4(h["p_narrows"]),
            yn(h["narrows"]),
        ]
        for h in doc["h3"]
        if h["scoring"] == scoring
    ]
    if not rows:
        return []
    steps, k = doc["design"]["checkpoints"], doc["sizes"]["k_max"]
    return (
        [f"## H3: does the ceiling narrow with longer training? ({scoring} scoring)", ""]
        + table(
            [
                "condition",
                "seeds",
                f"Δpass@{k} at step {steps[0]}",
                f"at step {steps[-1]}",
                "difference [95% CI]",
                "one-sided p",
                "narrows",
            ],
            rows,
        )
        + [
            "",
            f"The paired difference (last − first checkpoint) of Δpass@{k}, the same seeds and problems in each replicate; "
            f"*narrows*: one-sided p < {doc['levels']['one_sided']:g}; secondary, not adjusted.",
            "",
        ]
    )


def seeds_section(doc: dict) -> list[str]:
    k = doc["sizes"]["k_max"]
    rows = [
        [
            e["condition"],
            e["step"],
            e["scoring"],
            s["seed"],
            f"{s['pass1_diff']:+.3f}",
            f"{s['passk_diff']:+.3f}",
            s["coverage_rl"],
            f3(s["format_rl"]),
        ]
        for e in doc["entries"]
        for s in e["per_seed"]
    ]
    return (
        ["## Per-seed spread", ""]
        + table(["condition", "step", "scoring", "seed", "Δpass@1", f"Δpass@{k}", "coverage RL", "format RL"], rows)
        + [""]
    )


def strata_section(doc: dict) -> list[str]:
    """PLAN.md section 7c: difficulty strata (secondary, descriptive)."""
    st = doc["strata"]
    if st.get("skipped"):
        return []
    k, sc = st["k"], doc["primary"]["scoring"]
    rows = []
    for s in st["strata"]:
        r = s["scorings"][sc]
        for name, v in r.items():
            if name == "base":
                rows.append(
                    [s["stratum"], s["n_problems"], "base", f3(v["pass1"]), "", f3(v["passk"]), "", v["never_solved"]]
                )
            else:
                rows.append(
                    [
                        s["stratum"],
                        s["n_problems"],
                        name,
                        f3(v["pass1"]),
                        f"{v['pass1_diff']:+.3f} {ci3(v['pass1_ci'])}",
                        f3(v["passk"]),
                        f"{v['passk_diff']:+.3f} {ci3(v['passk_ci'])}",
                        "",
                    ]
                )
    return (
        [f"## Strata: pass@1 and pass@{k} by the borrows the subtraction needs ({sc} scoring, step {st['step']})", ""]
        + table(
            ["stratum", "problems", "model", "pass@1", "Δ [95% CI]", f"pass@{k}", "Δ [95% CI]", "base never solves"],
            rows,
        )
        + ["", "Secondary and descriptive: crossed bootstrap within each stratum's own problems, not adjusted.", ""]
    )


def earlier_section(doc: dict) -> list[str]:
    """PLAN.md section 7, earlier versions: the base-null reading (v3, change 29), v2 and v1."""
    rows = []
    for e in doc["entries"]:
        b, v = e["base_null"], e["v1"]
        rows.append(
            [
                e["condition"],
                e["step"],
                e["scoring"],
                yn(b["pass1_rises"]),
                "not asked" if not b["testable"] else yn(b["ceiling_equivalent"]),
                yn(b["ceiling_falls"]),
                yn(b["selection"]),
                yn(b["selection_v2"]),
                yn(v["pass1_rises_v1"]),
                yn(v["ceiling_unchanged_v1"]),
                yn(v["ceiling_falls_v1"]),
                ci3(v["third_clause_ci"]) if v["third_clause_ci"] else "not asked",
                yn(v["third_clause"]),
                e["label"],
            ]
        )
    return (
        [
            "## Earlier versions of the verdicts (for comparison)",
            "",
            "*v3* (PLAN_CHANGES.md change 29, the seed report's criterion made a test): "
            "selection ⇔ pass@1 rises and the ceiling is equivalent "
            f"to the base's within ±{doc['levels']['margin']:g} (asked only where the margin is at most a third of the base's "
            f"headroom) or lower, "
            f"Holm within a family of those three tests per scoring. *v2*: every test asked, no tie tolerance. *v1*: the first "
            f"version's unadjusted rules on the 95% intervals, and the one-third clause (|Δpass@k| − Δpass@1 / 3, asked where pass@1 "
            f"rises). The registered label is the last column.",
            "",
        ]
        + table(
            [
                "condition",
                "step",
                "scoring",
                "rises (v3)",
                "equivalent (v3)",
                "falls (v3)",
                "selection (v3)",
                "selection (v2)",
                "rises (v1)",
                "unchanged (v1)",
                "falls (v1)",
                "one-third clause CI",
                "holds",
                "label",
            ],
            rows,
        )
        + [""]
    )


def coverage_section(doc: dict) -> list[str]:
    rows = [
        [
            e["condition"],
            e["step"],
            e["scoring"],
            e["coverage_base"],
            f"{e['coverage_rl']:g}",
            f"{e['only_rl']:g}",
            f"{e['only_base']:g}",
        ]
        for e in doc["entries"]
    ]
    return (
        ["## Coverage (problems with at least one correct answer; RL: mean over seeds)", ""]
        + table(["condition", "step", "scoring", "base", "RL", "only RL", "only base"], rows)
        + [""]
    )


def warnings_section(doc: dict) -> list[str]:
    """Inputs made under another PLAN.md, other evaluation settings or another config, and optional
    inputs that are missing (collected by the analysis: analysis/inputs.warnings)."""
    if "warnings" not in doc:
        return [
            "## Warnings",
            "",
            "- this verdicts.json was written before the analysis kept its warnings in it: "
            "`analyze_b.py --run RUN` collects them again",
            "",
        ]
    return (["## Warnings", ""] + [f"- {w}" for w in doc["warnings"]] + [""]) if doc["warnings"] else []


def render(doc: dict) -> str:
    """report.md from verdicts.json alone: the calibration first, then the primary answer, then every
    section in PLAN.md's order; the two oldest layouts, upgraded by analysis/compat.py, by
    analysis/report_legacy.py. Raises OldDocument for a verdicts.json of an earlier layout not upgraded."""
    if doc.get("layout") in LEGACY:
        return report_legacy.render(doc)
    missing = [k for k in PRINTED if k not in doc]
    if missing:
        raise OldDocument(f"its layout predates the report's printer (no {', '.join(missing)})")
    ps = doc["primary"]["scoring"]
    other = next(s for s in SCORINGS if s != ps)
    L = header(doc) + calibration_section(doc) + primary_section(doc) + base_support_section(doc)
    L += within_correct_section(doc) + baselines_section(doc) + support_section(doc)
    L += collapse_section(doc) + warnings_section(doc)
    L += entries_section(doc, ps, f"H1 and H2 by condition ({ps} scoring)", other == "loose") + h3_section(doc, ps)
    L += entries_section(doc, other, f"The {other} scoring (it also counts the output format)", other == "strict")
    L += h3_section(doc, other)
    L += seeds_section(doc) + power_section(doc) + strata_section(doc) + controls_section(doc) + earlier_section(doc)
    L += (
        coverage_section(doc) + sets_section(doc) + beyond_section(doc) + boundary_section(doc) + diversity_section(doc)
    )
    L += (
        ood_section(doc) + strategies_section(doc) + tokens_section(doc) + inputs_section(doc) + provenance_section(doc)
    )
    return "\n".join(L) + "\n"


def headline(doc: dict) -> str:
    """A short plain-text summary for the terminal, from verdicts.json's content: the primary label,
    the calibration, and per condition and checkpoint on the primary scoring Delta pass@1 and the label."""
    if doc.get("layout") in LEGACY:
        return report_legacy.headline(doc)
    pr = doc["primary"]
    k = doc["sizes"]["k_max"]
    lines = [f"PARTIAL: missing {', '.join(doc['missing'])}"] if doc.get("partial") else []
    cal = doc["calibration"]
    lines.append(
        f"primary ({pr['condition']}, {pr['scoring']}, step {pr['step']}): {pr['label']}" + calibration_words(cal)
    )
    wc = (doc.get("within_correct") or {}).get("conditions", {}).get(pr["condition"])
    if wc and not wc.get("skipped"):
        how = "post hoc" if doc["within_correct"].get("post_hoc") else "registered"
        lines.append(f"at the training sampler (T 1, {how}): {wc['answer']} ({wc['decided_by']})")
    if pr.get("question"):
        lines.append(f"secondary: the selection-null label {pr['label_selection_null']}")
    label = "selection-null label (secondary)" if pr.get("question") else "label"
    rows = [("condition", "step", "Δpass@1 [95% CI]", f"Δpass@{k}", "vs null [95% CI]", label)]
    for e in doc["entries"]:
        if e["scoring"] == pr["scoring"]:
            rows.append(
                (
                    e["condition"] + (" *" if e["primary"] else ""),
                    str(e["step"]),
                    f"{e['pass1_diff']:+.3f} {ci3(e['pass1_ci'])}",
                    f"{e['passk_diff']:+.3f}",
                    f"{e['vs_null']['diff']:+.3f} {ci3(e['vs_null']['ci'])}",
                    e["label"],
                )
            )
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(lines + ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows])
