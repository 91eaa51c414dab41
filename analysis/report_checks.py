"""report.md's sections for what is asked beside the registered primary answer (analysis/primary_checks.py):
the calibration arms, the two axes with change 42's support test and the stratified null beside it, power and
sensitivity. Printed from verdicts.json alone, as analysis/report.py's sections are."""

from __future__ import annotations

from analysis.report_format import ci3, p4, rate, table


def calibration_section(doc: dict) -> list[str]:
    """PLAN.md section 7, Calibration: every arm, its truth, the labels it got over the re-splits."""
    cal = doc["calibration"]
    L = ["## Calibration: arms whose truth is known", ""]
    if cal.get("skipped"):
        return L + [f"No calibration arms: {cal['skipped']}.", ""]
    labels = ("selection", "beyond selection", "degradation", "undecided")
    rows = []
    for a in cal["arms"]:
        if a["kind"] in ("null", "selection", "teaching", "mixed"):
            rows.append(
                [a["arm"], a["truth"]]
                + [rate(a["labels"][x]) for x in labels]
                + [
                    ", ".join(f"{x} ≤ {v:g}" for x, v in a["forbidden"].items()),
                    "pass" if a["passed"] else f"**fail** ({', '.join(a['failed'])})",
                ]
            )
        elif a["kind"] == "seed split":
            rows.append(
                [
                    f"{a['arm']} ({a['seeds']} seeds)",
                    a["truth"],
                    "",
                    "",
                    "",
                    "",
                    f"differ: pass@1 {rate(a['differences']['pass1'])}, pass@k {rate(a['differences']['passk'])} ≤ {a['level']:g}",
                    "pass" if a["passed"] else f"**fail** ({', '.join(a['failed'])})",
                ]
            )
        else:
            rows.append(
                [
                    a["arm"],
                    f"{a['truth']} on {a['stratum']}",
                    "",
                    "",
                    "",
                    "",
                    f"ceiling rises on {a['n_problems']} problems the pool never solved"
                    + (
                        f": Δpass@{doc['sizes']['k_max']} {a['passk_diff']:+.3f} {ci3(a['passk_ci'])}, "
                        f"p = {p4(a['rises']['p'])} (label: {a['label']})"
                        if a.get("passk_diff") is not None
                        else f" ({a.get('why')})"
                    ),
                    {True: "pass", False: "**fail** (not shown)", None: "not asked"}[a["passed"]],
                ]
            )
    L += table(
        [
            "arm",
            "truth",
            "selection",
            "beyond selection",
            "degradation",
            "undecided",
            "may not be (rate ≤ level)",
            "result",
        ],
        rows,
    )
    L += [
        "",
        f"Each pool arm: {cal['resplits']} re-splits of a pool of {cal['n_base']} + {cal['n_pool']} base samples per test "
        f"problem into a pseudo-base of {cal['n_base']} and pseudo-trained models of {cal['seeds']} seeds × {cal['n']} samples, each "
        f"judged by the primary question's code ({cal['resamples']} bootstrap replicates); rates with 95% Clopper-Pearson intervals. "
        f"An arm fails when the lower end of a forbidden label's interval lies above its level. The selection arms reweight the "
        f"pool's own samples, so they never reach a problem the pool never solved: they check that selection is not read as beyond "
        f"it. A low rate of the expected label is a lack of power, not of calibration.",
        "",
    ]
    return L


def support_section(doc: dict) -> list[str]:
    """PLAN_CHANGES.md change 42: the two axes and the support test of every condition at each sampler."""
    sz, a1 = doc["sizes"], doc["levels"]["one_sided"]
    sp = doc.get("support") or {"skipped": "no support test"}
    L = ["## Two axes: sharpening and support" + ("" if sp.get("skipped") or sp["registered"] else " (post hoc)"), ""]
    if sp.get("skipped"):
        return L + [f"No support test: {sp['skipped']}.", ""]
    rows = []
    for cond, c in sp["conditions"].items():
        for sampler, t in c["tests"].items():
            if t.get("skipped"):
                rows.append([cond, c["axes"]["sharpening"], sampler, t["skipped"], "", "", ""])
                continue
            ch = c["changes"]
            rows.append(
                [
                    cond + (" (primary)" if c["primary"] else ""),
                    c["axes"]["sharpening"],
                    sampler,
                    f"{t['base_successes']} / {t['base_draws']} (≤ {t['base_upper']:.5f})",
                    f"{t['rl_rate']:.3f} ({t['rl_ci_level']:.1%} {ci3(deciding_interval(t))}) vs ≤ {t['bound']:.4f}: "
                    f"p above {p4(t['above']['p'])}",
                    f"**{t['answer']}**",
                    f"{ch['retained']:.1f} / {ch['lost']:.1f} / {ch['gained']:.1f}",
                ]
            )
    n_z = next(iter(next(iter(sp["conditions"].values()))["tests"].values()))["n_z"] if sp["conditions"] else 0
    L += table(
        [
            "condition",
            "sharpening",
            "sampler",
            f"base on Z ({n_z} problems): fresh draws",
            "trained rate on Z vs f_w*(bound)",
            "support",
            "retained / lost / gained",
        ],
        rows,
    )
    samplers = "; ".join(
        f"{k}: evalsets/{v['set']} at T {v['sampling']['temperature']:g}, top-p {v['sampling']['top_p']:g}"
        for k, v in sp["samplers"].items()
        if v.get("sampling")
    )
    L += [
        "",
        (
            ""
            if sp["registered"]
            else "*Post hoc*: this run was registered before PLAN_CHANGES.md change 42, "
            "so these rows describe it and confirm nothing. "
        )
        + f"Z: the test problems the base never solves in its {sz['n_base']} test samples; the base's rate on Z "
        f"from fresh draws ({samplers}), its exact one-sided upper bound at {a1 / 2:g}; a selection of tilt ≤ w* = "
        f"{sp['w_star']:.3g} reaches at most f_w*(bound) there. *expanded*: the trained rate on Z above it; *kept*: below it; "
        f"*not shown*: neither (each at {a1 / 2:g}, the larger of bootstrap and t p; the interval is that of the part that decided). "
        f"Sharpening: *sharpened* where pass@1 "
        f"rises and pass@{sz['k_max']} is narrower than uniform reweighting (below the selection null). A ceiling narrower than "
        f"reweighting is not read as 'no new solutions': that is the support column's question. Retained / lost / gained: of the "
        f"problems the base solves in {sz['n_base']} samples, those the model still solves or never does in {sz['n']}, and of Z "
        f"those it solves (mean over seeds; they depend on the two sample sizes).",
        "",
    ]
    return L + stratum_null_lines(doc)


def deciding_interval(t: dict) -> list[float]:
    """The support test's interval from the part whose p decided (the larger p: bootstrap or t); a
    verdicts.json written before both were kept holds the bootstrap's alone."""
    return t["rl_ci_t"] if t.get("decided_by") == "t" else t["rl_ci"]


def stratum_null_lines(doc: dict) -> list[str]:
    """PLAN_CHANGES.md change 46: the selection null with one tilt per stratum beside the uniform one (descriptive)."""
    sn = doc.get("stratum_null") or {"skipped": "not computed"}
    if sn.get("skipped") or not sn["conditions"]:
        return []
    k = doc["sizes"]["k_max"]
    rows = [
        [
            cond + (" (primary)" if c["primary"] else ""),
            f"{c['uniform_diff']:+.3f}",
            f"{c['diff']:+.3f} {ci3(c['ci'])}",
            f"{p4(c['above']['p'])} / {p4(c['below']['p'])}",
            ", ".join(f"{s} {v['w']:.3g}" for s, v in c["strata"].items()),
        ]
        for cond, c in sn["conditions"].items()
    ]
    return [
        "**The stratum-level null** (descriptive; no label reads it): the base reweighted with one tilt per difficulty stratum "
        f"to the trained pass@1 there, its pass@{k} against the trained one. A model that tilts the hard stratum more than a "
        "single w can is inside this null, outside the uniform one.",
        "",
        *table(
            [
                "condition",
                f"pass@{k} − uniform null",
                f"pass@{k} − stratum null [95% CI]",
                "p above / below (raw)",
                "w per stratum",
            ],
            rows,
        ),
        "",
    ]


def power_section(doc: dict) -> list[str]:
    """PLAN.md section 7, Power and sensitivity."""
    pw, sn, k = doc["power"], doc["sensitivity"], doc["sizes"]["k_max"]
    if not pw:
        return ["## Power", "", "No power statement: the primary entry's evaluations are missing.", ""]
    eq = (
        "TOST's power is not defined here (no finite SE)"
        if pw["tost_power_at_zero"] is None
        else f"TOST within ±{pw['margin']:g} has at most {pw['tost_power_at_zero']:.2f} power (at a true Δpass@{k} of 0, both one-sided "
        f"tests counted)"
        + (
            f", and {pw['power']:.0%} power while the true |Δpass@{k}| ≤ {pw['equivalence_up_to']:.3f}"
            if pw["equivalence_up_to"] is not None
            else f", short of {pw['power']:.0%} everywhere"
        )
    )
    L = [
        "## Power and sensitivity",
        "",
        f"With {pw['n_problems']} problems, {pw['seeds']} seed{'s' * (pw['seeds'] > 1)}, n = {pw['n_samples']} samples per trained model "
        f"and {pw['n_base']} per base problem, the random-effects SE of the primary Δpass@1 is {pw['se_pass1']:.4f} "
        f"({pw['df_pass1']:.1f} df) "
        f"and of Δpass@{k} {pw['se_passk']:.4f} ({pw['df_passk']:.1f} df). With {pw['power']:.0%} power at one-sided level "
        f"{pw['alpha_one_sided']:g} the design detects Δpass@1 ≥ {pw['mde_pass1']:.3f} and |Δpass@{k}| ≥ {pw['mde_passk']:.3f} "
        f"((t_{{1−α, df}} + t_{{power, df}}) × SE); {eq}.",
    ]
    if pw.get("planned"):
        pl = pw["planned"]
        L += [
            "",
            f"Planned (PLAN.md, analyze.planned): power {pl['power']:.2f} to detect Δpass@1 = {pl['effect']:g} at the pilot's "
            f"components; {pl['power_at_seed_var_upper80']:.2f} at the 80% upper limit of its seed variance "
            f"({pl['seed_var_upper80']:.5f} on {pl['seed_df']} df); {pl['power_at_measured_components']:.2f} "
            f"at the components measured here.",
        ]
    if sn:
        rows = [
            [
                name,
                f"{vc['delta']:+.3f}",
                f"{vc['V_A']:.4f}",
                "—" if vc["V_B"] is None else f"{vc['V_B']:.5f} ({vc['seed_sd']:.3f}, {vc['seed_df']} df)",
                "—" if vc["V_R"] is None else f"{vc['V_R']:.4f}",
                f"{vc['se']:.4f}",
                f"{vc['df']:.1f}",
            ]
            for name, vc in (("Δpass@1", sn["pass1"]), (f"Δpass@{k}", sn["passk"]))
        ]
        L += [""] + table(["quantity", "Δ", "problem var", "seed var (SD)", "residual var", "SE", "df"], rows)
        for name, c in sn["coverage"].items():
            L.append(
                f"\nCoverage of the crossed bootstrap's 95% interval for Δpass@1, {c['sims']} count-level simulations at the "
                f"{'measured' if name == 'measured' else '1.5 × the measured'} seed SD ({c['seed_sd']:.3f}): {c['coverage']:.3f} "
                f"(Monte-Carlo SE {c['mc_se']:.3f}; its lower tail misses {c['lower_miss']:.3f} against a nominal 0.025); the t "
                f"interval's {c['coverage_t']:.3f}."
            )
    return L + [""]


def calibration_words(cal: dict) -> str:
    """The headline's calibration clause: nothing where the run had no calibration arms."""
    if not cal.get("arms"):
        return ""
    return "; calibrated" if cal["calibrated"] else "; NOT CALIBRATED in this world"
