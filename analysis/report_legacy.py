"""report.md printed again from a verdicts.json of one of the two oldest layouts (analysis/compat.py:
"first", "sentence"), whose entries hold the tests of PLAN.md's earlier versions rather than
today's selection null. It prints what the document recorded, in the words those reports used:
the primary sentence as recorded (it was made by the analysis then, and verdicts.json kept it),
the verdicts of every entry, the per-seed spread, coverage and the input hashes; and says what the
layout did not record and which recorded sections this printer leaves out. Nothing is computed.
"""

from __future__ import annotations

import time

from analysis.compat import NO_FIGURES
from analysis.report_format import ci3, p4, table, yn

# Recorded by the "sentence" layout in shapes today's sections do not read: named, not printed.
NOT_REPRINTED = (
    "h3",
    "controls",
    "power",
    "sensitivity",
    "eval_sets",
    "beyond_n",
    "boundary",
    "diversity",
    "ood",
    "strategies",
    "tokens",
)


def note(doc: dict) -> list[str]:
    left_out = [k for k in NOT_REPRINTED if k in doc]
    return [
        f"**Printed again by `analyze_b.py --report-only` from a verdicts.json of an earlier layout ({doc['layout']}, see "
        f"analysis/compat.py). Not recorded by this run: {'; '.join(doc['absent'])}."
        + (
            f" Recorded, but in shapes this printer does not read, so left out here: {', '.join(left_out)} (the committed "
            f"report.md beside it printed them)."
            if left_out
            else ""
        )
        + " `python analyze_b.py --run RUN --out NEW_FOLDER` analyses the run again under today's rules.**",
        "",
    ]


def header(doc: dict) -> list[str]:
    pv, sz, b = doc.get("provenance", {}), doc["sizes"], doc["bootstrap"]
    made = pv.get("time")
    when = (
        time.strftime("%Y-%m-%d %H:%M UTC", time.strptime(made, "%Y-%m-%dT%H:%M:%SZ")) if made else "an unrecorded time"
    )
    design = ""
    if "design" in doc:
        d = doc["design"]
        seeds = ", ".join(map(str, d["seeds"])) + "".join(
            f" ({c}: {len(v)} seeds)" for c, v in (d.get("seeds_by_condition") or {}).items()
        )
        design = (
            f"; design: conditions {', '.join(d['conditions'])}; seeds {seeds}; checkpoints "
            f"{', '.join(map(str, d['checkpoints']))}"
        )
    return [
        f"# Report: {pv.get('run', 'a run analysed before verdicts.json named its folder')}",
        "",
        f"Written by `analyze_b.py` on {when}. {sz['n_problems']} test problems, n = {sz['n']} samples each{design}. Bootstrap: "
        f"{b['resamples']} replicates (seed {b['seed']}), {b['interval']} intervals.",
        "",
    ]


def first_verdicts(doc: dict) -> list[str]:
    """The first layout's criteria 1-3 for every entry, as that report printed them."""
    k = doc["sizes"]["k_max"]
    rows = [
        [
            e["condition"],
            e["step"],
            e["scoring"],
            f"{e['pass1_base']:.3f} → {e['pass1_rl']:.3f}",
            f"{e['pass1_diff']:+.3f} {ci3(e['pass1_ci'])}",
            f"{e['passk_base']:.3f} → {e['passk_rl']:.3f}",
            f"{e['passk_diff']:+.3f} {ci3(e['passk_ci'])}",
            yn(e["pass1_rises"]),
            yn(e["ceiling_unchanged"]),
            yn(e["ceiling_falls"]),
            "—" if not e["crossover"] else "k {}→{}".format(*e["crossover"]["between"]),
        ]
        for e in doc["entries"]
    ]
    return (
        ["## Verdicts (PLAN.md, criteria 1-3)", ""]
        + table(
            [
                "condition",
                "step",
                "scoring",
                "pass@1 base → RL",
                "Δ pass@1 [95% CI]",
                f"pass@{k} base → RL",
                f"Δ pass@{k} [95% CI]",
                "pass@1 rises",
                "ceiling unchanged",
                "ceiling falls",
                "base caught up",
            ],
            rows,
        )
        + [
            "",
            f"Criteria as registered then: *pass@1 rises* ⇔ the interval's lower bound > 0; *ceiling unchanged* ⇔ the "
            f"pass@{k} interval contains 0, or |Δ pass@{k}| < |Δ pass@1| / 3; *ceiling falls* ⇔ the pass@{k} interval's upper "
            f"bound < 0.",
            "",
        ]
    )


def sentence_verdicts(doc: dict, scoring: str) -> list[str]:
    """The "sentence" layout's tests for one scoring: raw p (Holm-adjusted in brackets) and yes/no answers."""
    k, rows = doc["sizes"]["k_max"], []
    for e in [x for x in doc["entries"] if x["scoring"] == scoring]:
        rows.append(
            [
                e["condition"] + (" **(primary)**" if e["primary"] else ""),
                e["step"],
                ", ".join(map(str, e["seeds"])),
                f"{e['pass1_base']:.3f} → {e['pass1_rl']:.3f}",
                f"{e['pass1_diff']:+.3f} {ci3(e['pass1_ci'])}",
                f"{p4(e['p_pass1'])} ({p4(e['p_pass1_adj'])})",
                yn(e["pass1_rises"]),
                f"{e['passk_base']:.3f} → {e['passk_rl']:.3f}",
                f"{e['passk_diff']:+.3f} {ci3(e['passk_ci'])}",
                ci3(e["passk_ci90"]),
                f"{p4(e['p_equiv'])} ({p4(e['p_equiv_adj'])})",
                f"{p4(e['p_passk_fall'])} ({p4(e['p_passk_fall_adj'])})",
                yn(e["ceiling_equivalent"]),
                yn(e["ceiling_falls"]),
                yn(e["selection"]),
            ]
        )
    lv = doc["levels"]
    return (
        [f"## H1 and H2 by condition ({scoring} scoring)", ""]
        + table(
            [
                "condition",
                "step",
                "seeds",
                "pass@1 base → RL",
                "Δpass@1 [95% CI]",
                "p (adj)",
                "H1: pass@1 rises",
                f"pass@{k} base → RL",
                f"Δpass@{k} [95% CI]",
                "90% CI",
                "p equiv (adj)",
                "p falls (adj)",
                "ceiling equivalent",
                "ceiling falls",
                "selection",
            ],
            rows,
        )
        + [
            "",
            f"One-sided tests at {lv['one_sided']:g}, TOST within ±{lv['margin']:g} at {lv['tost']:g}; in brackets the "
            f"Holm-adjusted p. The correction, as recorded: {doc['multiplicity']}",
            "",
        ]
    )


def per_seed(doc: dict) -> list[str]:
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
        ]
        for e in doc["entries"]
        for s in e.get("per_seed", [])
    ]
    return (
        (
            ["## Per-seed spread", ""]
            + table(["condition", "step", "scoring", "seed", "Δpass@1", f"Δpass@{k}", "coverage RL"], rows)
            + [""]
        )
        if rows
        else []
    )


def coverage(doc: dict) -> list[str]:
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


def provenance(doc: dict) -> list[str]:
    pv = doc.get("provenance", {})
    rows = [[name, sha[:12]] for name, sha in (pv.get("inputs") or {}).items()]
    return (
        [
            "## Provenance of the inputs",
            "",
            f"PLAN.md sha256 {pv.get('plan_sha256', 'not recorded')}; config hash "
            f"{pv.get('config_hash', 'not recorded')}.",
            "",
        ]
        + table(["file", "sha256"], rows)
        + [""]
    )


def render(doc: dict) -> str:
    """report.md from an upgraded verdicts.json of the "first" or "sentence" layout."""
    L = note(doc) + header(doc)
    if doc["layout"] == "first":
        L += first_verdicts(doc)
    else:
        pr = doc["primary"]
        scorings = sorted({e["scoring"] for e in doc["entries"]}, key=lambda s: s != pr["scoring"])
        L += [
            pr["sentence"].rstrip(),
            "",
            f"(The registered question then: {pr['question']}; its test: {pr['test']}.)",
            "",
        ]
        for s in scorings:
            L += sentence_verdicts(doc, s)
    L += per_seed(doc) + coverage(doc) + ["## Figures", "", NO_FIGURES, ""] + provenance(doc)
    return "\n".join(L).rstrip("\n") + "\n"


def headline(doc: dict) -> str:
    pr, k = doc.get("primary"), doc["sizes"]["k_max"]
    top = (
        f"primary ({pr['condition']}, {pr['scoring']}, step {pr['step']}): selects: {yn(pr['answer'])} (as recorded, "
        f"{doc['layout']} layout)"
        if pr
        else f"no primary question in the {doc['layout']} layout (criteria 1-3 per entry)"
    )
    rows = [
        f"  {e['condition']}  {e['step']}  {e['scoring']}  Δpass@1 {e['pass1_diff']:+.3f} {ci3(e['pass1_ci'])}  "
        f"Δpass@{k} {e['passk_diff']:+.3f}"
        for e in doc["entries"]
        if not pr or e["scoring"] == pr["scoring"]
    ]
    return "\n".join([top] + rows)
