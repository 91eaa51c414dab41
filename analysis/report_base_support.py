"""report.md's section on support from the base's own probabilities (PLAN_CHANGES.md change 57), printed from
verdicts.json's `base_support` alone, and the primary sentence where it is the registered question."""

from __future__ import annotations

from analysis.report_format import p4, table


def interval(x) -> str:
    return "—" if x is None else f"[{x[0]:.4f}, {x[1]:.4f}]"


def share_cell(s: dict) -> str:
    if s.get("share") is None:
        return f"— (0 correct in {s['problems']} problems)"
    return f"{s['outside']} / {s['correct']} = {s['share']:.3f} {interval(s['share_ci'])}"


def sampler_words(s: dict) -> str:
    return f"T {s['temperature']:g}, top-p {s['top_p']:g}" + (f", top-k {s['top_k']}" if s.get("top_k") else "")


def primary_sentence(doc: dict) -> str:
    """The registered question of change 57 and its answer, with the p and the interval of the part that decided."""
    pr, bs = doc["primary"], doc["base_support"]
    c = bs["conditions"].get(pr["condition"])
    q = (
        f"Does RL on `{pr['condition']}` give correct answers the base's own sampler could never draw ({pr['scoring']} scoring, "
        f"step {pr['step']}, at the evaluation sampler, {sampler_words(bs['sampling'])})?"
    )
    if c is None:
        return f"{q} Not answered: its evaluations are missing (partial report)."
    t = c["test"]
    deciding = t["below"] if t["answer"] == "kept" else t["above"]
    out = (
        f"{q} **{pr['label'][0].upper() + pr['label'][1:]}**: of its {len(c['seeds'])} seeds' samples, a share {t['rate']:.4f} "
        f"are correct and outside the base's kept set (95% interval {interval(t['interval'])} by the {t['interval_by']} part, "
        f"which decided; one-sided p = {p4(deciding['p'])} {'below ' + format(t['margin'], 'g') if t['answer'] == 'kept' else 'above 0'}"
        f" against {t['alpha']:g})."
    )
    if t.get("gate_failed"):
        out += " **The gate failed**: the base's own correct responses read outside, so the measure is not trusted (below)."
    return out + f" (Secondary readings: the selection-null label is *{pr['label_selection_null']}*.)"


def base_support_section(doc: dict) -> list[str]:
    bs = doc.get("base_support")
    if not bs:
        return []
    L = [
        "## Support from the base's own probabilities"
        + ("" if bs.get("skipped") or bs["registered"] else " (descriptive)"),
        "",
    ]
    if bs.get("skipped"):
        return L + [f"Not measured: {bs['skipped']}.", ""]
    g = bs["gate"]
    gate = "; ".join(f"{k}: {v['outside']} of {v['correct']} (exact rule {v['exact']})" for k, v in g["files"].items())
    L += [
        f"**The gate** ({'passed' if g['passed'] else 'FAILED'}): the base's own correct responses outside its kept set: {gate}.",
        "",
    ]
    rows = []
    for cond, c in bs["conditions"].items():
        if c.get("skipped"):
            rows.append([cond, "", c["skipped"], "", "", "", "", "", "", ""])
            continue
        t = c["test"]
        rows.append(
            [
                cond + (" (primary)" if c["primary"] else ""),
                str(len(c["seeds"])),
                f"{t['rate']:.4f} {interval(t['interval'])}",
                p4(t["above"]["p"]),
                p4(t["below"]["p"]),
                f"**{t['answer']}**",
                share_cell(c["all"]),
                share_cell(c["z"]),
                share_cell(c["off_z"]),
                "—" if c["all"]["only_outside"] is None else f"{c['all']['only_outside']:.3f}",
            ]
        )
    L += table(
        [
            "condition",
            "seeds",
            "rate correct & outside [95%, deciding part]",
            "p > 0",
            f"p < {bs['kept_margin']:g}",
            "support",
            "share of correct outside: all",
            f"on Z ({bs['n_z']})",
            "off Z",
            "problems solved only outside",
        ],
        rows,
    )
    L += [
        "",
        f"At the evaluation sampler ({sampler_words(bs['sampling'])}); a response is outside when one of its tokens lies beyond "
        f"the base's nucleus by at least {bs['tolerance']:g} of probability mass (teacher-forced from the drawn token ids, LoRA "
        f"off); the exact rule's counts are in verdicts.json. Reweighting what the base's sampler draws puts nothing outside "
        f"it; a strong "
        f"selection of the base at T 1, sampled here, can (its nucleus moves): *expanded* says the model answers where the "
        f"base's sampler never can, not how it came to. "
        f"Shares of correct responses: a ratio of crossed means with its 95% percentile interval.",
        "",
    ]
    L += strata_lines(bs) + seed_lines(bs) + training_sampler_lines(bs.get("train") or {})
    return L


def strata_lines(bs: dict) -> list[str]:
    rows = [[cond, s, share_cell(x)] for cond, c in bs["conditions"].items() for s, x in c.get("strata", {}).items()]
    return (
        (
            ["Per stratum (share of correct responses outside):", ""]
            + table(["condition", "stratum", "outside / correct"], rows)
            + [""]
        )
        if rows
        else []
    )


def seed_lines(bs: dict) -> list[str]:
    rows = [
        [cond, str(s), share_cell(x)]
        for cond, c in bs["conditions"].items()
        if not c.get("skipped")
        for s, x in zip(c["seeds"], c["per_seed"])
    ]
    return ["Per seed:", ""] + table(["condition", "seed", "outside / correct"], rows) + [""]


def logp_cell(d: dict) -> str:
    if not d.get("responses"):
        return "— (no correct response)"
    q = d["quantiles"]
    return (
        f"{d['responses']}: median {q['0.5']:.1f} (5–95%: {q['0.05']:.1f} to {q['0.95']:.1f}); > 256 draws "
        f"{d['beyond']['256']:.3f}, > 1,024 {d['beyond']['1024']:.3f}"
    )


def training_sampler_lines(tr: dict) -> list[str]:
    if not tr or tr.get("skipped"):
        return [f"At the training sampler: {tr.get('skipped', 'not measured')}.", ""] if tr else []
    rows = [
        [
            "base (its own draws, evalsets/" + tr["pool"] + ")",
            logp_cell(tr["base"]["all"]),
            logp_cell(tr["base"]["z"]),
            "",
            "",
        ]
    ]
    for cond, c in tr["conditions"].items():
        flips = "; ".join(
            f"{f['from']} → {f['to']} between {f['between'][0]:g} and {f['between'][1]:g}"
            for f in c["tilt_curve"]["flips"]
        )
        first = c["tilt_curve"]["rows"][0]
        rows.append(
            [
                f"{cond} ({c['seeds']} seeds, pass@1 {c['pass1']:.3f})",
                logp_cell(c["all"]),
                logp_cell(c["z"]),
                f"{first['answer']} at w* {first['w_star']:g}",
                flips or "none on the grid",
            ]
        )
    return (
        [
            "At the training sampler ("
            + sampler_words(tr["sampling"])
            + ", untruncated: nothing is outside), the base's "
            "log-probability at T 1 of each correct response, as drawn (trained models: evalsets/"
            + tr["matched"]
            + "):",
            "",
        ]
        + table(
            ["responses of", "all problems", "on Z", "tilt test (change 42) at matched samplers", "its flips over w*"],
            rows,
        )
        + [
            "",
            "> k draws: the share of responses whose exact token sequence the base draws with probability below 1/k. The tilt "
            "test compares the trained models' draws at T 1 with the base's fresh draws at T 1 (both untruncated); no w* "
            "decides: its answer is given at every w* of the grid where it changes.",
            "",
        ]
        + tilt_law_lines(tr)
    )


def tilt_law_lines(tr: dict) -> list[str]:
    """RL's own tilts at T 1 outside Z beside the one Z needs (descriptive)."""
    L = []
    for cond, c in tr["conditions"].items():
        law = c.get("tilt_law")
        if not law:
            continue
        strata = "; ".join(
            f"{s} {q['quantiles']['0.5']:.3g} / {q['quantiles']['0.9']:.3g} ({q['censored']} of {q['problems']} "
            f"censored)"
            for s, q in law["outside_z"].items()
        )
        reach = "—" if law["comparable_reaching_z"] is None else f"{law['comparable_reaching_z']:.3f}"
        L.append(
            f"- `{cond}`: RL's own tilts at T 1 outside Z (odds ratios against the base's pool, median / 90%): {strata}. "
            f"Z needs {law['z_pooled_tilt']:.3g} pooled. Of the {law['comparable']} comparable problems (Z's strata, base "
            f"rate ≤ {law['rare']:g} at T 1), a share {reach} reach that tilt ({law['comparable_censored']} censored)."
        )
    return (
        (["RL's own tilt law (descriptive; a problem solved every time is a lower bound, kept):", ""] + L + [""])
        if L
        else []
    )


def collapse_section(doc: dict) -> list[str]:
    """PLAN_CHANGES.md change 59: which seeds collapsed, by their training logs, and the rate with its exact interval."""
    co = doc.get("collapse")
    if not co:
        return []
    rows = [
        [
            cond,
            ", ".join(f"s{s}" for s, r in c["per_seed"].items() if r["collapsed"]) or "none",
            f"{c['collapsed']} / {c['seeds']}",
            "—" if c["rate"] is None else f"{c['rate']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]",
        ]
        for cond, c in co["conditions"].items()
    ]
    locks = [
        [
            cond,
            where,
            f"{r['locked']} / {r['cells']}",
            f"{r['locked_wrong']} / {r['cells']}",
            f"{r['lock_in_rate']:.3f} [{r['lock_in_ci'][0]:.3f}, {r['lock_in_ci'][1]:.3f}]",
        ]
        for cond, c in co["conditions"].items()
        for where, r in (c.get("lock_in") or {}).items()
    ]
    lock_part = (
        [
            "",
            "**Lock-in** (change 70, descriptive): a (seed, problem) cell is locked when one answer holds ≥ 90% of "
            "its samples, locked wrong when that answer is wrong; the lock-in rate is the share locked wrong.",
            "",
        ]
        + table(["condition", "evaluation", "locked", "locked wrong", "lock-in rate [95% exact]"], locks)
        if locks
        else []
    )
    return (
        ["## Collapsed seeds (training logs only)", ""]
        + table(["condition", "collapsed", "seeds", "rate [95% exact]"], rows)
        + [
            "",
            f"A run is collapsed when no learning signal (every group one reward) came on at least {co['share']:.0%} of its steps "
            f"after {co['late_from']:g} of its last. Every seed still counts in the primary analysis (intention to treat).",
        ]
        + lock_part
        + [""]
    )


def _alpha_cell(e: dict) -> str:
    if e["alpha"] is None:
        return f"— ({e['cells']} cells)"
    return f"{e['alpha']:.3f} {interval(e['interval'])}"


def training_sampler_sentence(doc: dict) -> str | None:
    """The registered answer at the training sampler (PLAN.md section 7e) in one sentence; None where not measured."""
    wc = doc.get("within_correct")
    pr = doc["primary"]
    c = (wc or {}).get("conditions", {}).get(pr["condition"])
    if not c or c.get("skipped"):
        return None
    e, g = c["exponent"], c["gap"]
    gap = "no problem holds correct answers on both sides"
    if g["gap"] is not None:
        gap = (
            f"outside gap {g['gap']:+.4f} {interval(g['interval'])} (p {p4(g['p_more'])} for more outside: the seeds' "
            f"own permutation tests combined; pooled {p4(g['p_more_permutation'])}, bootstrap "
            f"{p4(g['p_more_bootstrap'])}, neither deciding)"
        )
    return (
        f"At the training sampler ({sampler_words(wc['sampling'])}; {c['scoring']} correctness, step {wc['step']}): "
        f"**{c['answer']}** ({c['decided_by']}): within-correct exponent {_alpha_cell(e)} "
        f"(1 under every reweighting of the base; margin ±{e['margin']:g}), {gap}."
    )


def within_correct_section(doc: dict) -> list[str]:
    wc = doc.get("within_correct")
    if not wc:
        return []
    how = " (post hoc: files made before the measure was registered; it confirms nothing)" if wc.get("post_hoc") else ""
    L = ["## Which correct answers RL favours at the training sampler (PLAN.md section 7e)" + how, ""]
    if wc.get("skipped"):
        return L + [f"Not measured: {wc['skipped']}.", ""]
    first = training_sampler_sentence(doc)
    L += ([first, ""] if first else []) + [
        "Every outcome reweighting of the base at T 1 leaves its mix of correct answers as it was: the exponent α (1 + "
        "the slope of log π_RL − log π_base on log π_base within each seed and problem, length a covariate) is 1 and "
        "the share of correct answers outside the base's evaluation nucleus equals the base's own. α below its margin "
        "or more outside reads *toward-rare* (first), else α above it *sharpening*, else both within their margins "
        "*reweighting* (PLAN.md section 7e).",
        "",
    ]
    rows = []
    for cond, c in wc["conditions"].items():
        if c.get("skipped"):
            rows.append([cond, "—", "—", f"skipped: {c['skipped']}", "", "", "", "", ""])
            continue
        e, g, z = c["exponent"], c["gap"], c["exponent_on_z"]
        share = "—" if g["gap"] is None else f"{g['trained_share']:.3f} / {g['base_share']:.3f}"
        rows.append(
            [
                cond + (" *" if c["primary"] else ""),
                c["scoring"],
                str(len(c["seeds"])),
                c["answer"],
                _alpha_cell(e),
                "—" if e["p_above"] is None else f"{p4(e['p_above'])} / {p4(e['p_below'])}",
                "—" if g["gap"] is None else f"{g['gap']:+.4f} {interval(g['interval'])}",
                "—" if g["p_more"] is None else f"{p4(g['p_more'])} ({g['problems']} problems)",
                f"{share}; α on Z {_alpha_cell(z)}",
            ]
        )
    head = [
        "condition",
        "correct by",
        "seeds",
        "answer",
        "α [95%]",
        "p α above / below",
        "gap D [95%]",
        "p more outside",
        "outside trained / base; Z",
    ]
    return L + table(head, rows) + [""] + clean_lines(wc)


def clean_lines(wc: dict) -> list[str]:
    """Change 71's clean-computation gap, where registered: the share of each condition's correct T 1 answers that
    are the clean computation against the base's own, tested as the outside gap is."""
    out = []
    for cond, c in wc["conditions"].items():
        g = c.get("clean_gap")
        if not g:
            continue
        if g["gap"] is None:
            out.append(f"- `{cond}`: the clean-computation gap cannot be computed (no problem holds both sides).")
            continue
        out.append(
            f"- `{cond}`: the clean computation is {g['trained_share']:.3f} of its correct T 1 answers against the "
            f"base's {g['base_share']:.3f} (gap {g['gap']:+.4f} {interval(g['interval'])}, {g['problems']} problems; "
            f"the seeds' combined p more {p4(g['p_more'])}): **{'more clean' if g['more'] else 'not shown more clean'}**."
        )
    return (["**Clean computation (change 71)**", "", *out, ""]) if out else []


def baselines_section(doc: dict) -> list[str]:
    """Change 71's reward-free baselines and the Z-at-T 1 reading (descriptive)."""
    bl = doc.get("baselines")
    if not bl:
        return []
    L = ["## Reward-free baselines beside RL (PLAN.md section 7e; descriptive)", ""]
    if bl.get("skipped"):
        return L + [f"Not computed: {bl['skipped']}.", ""]
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= bl["k"][-1]]

    def cells(curve):
        return ["—"] * len(ks) if curve is None else [f"{curve[k - 1]:.3f}" for k in ks]

    rows = [[f"RL `{bl['condition']}`, the evaluation sampler", *cells(bl["rl"]["test"])]]
    rows.append([f"RL `{bl['condition']}`, T 1", *cells(bl["rl"]["t1"])])
    rows += [
        [f"base, T {s['temperature']:g}, top-p {s['top_p']:g} (`{s['set']}`)", *cells(s["pass_at_k"])]
        for s in bl["sweep"]
    ]
    w = bl["reweighting"]["w"]
    rows.append(
        [f"base T 1 pool reweighted to RL's T 1 pass@1 (w {w:.3g})" if w else "base T 1 pool reweighted (out of reach)"]
        + cells(bl["reweighting"]["pass_at_k"])
    )
    rows += [[f"base T 1 pool under π_base^{a}", *cells(c)] for a, c in bl["powers"].items()]
    L += table(["", *[f"pass@{k}" for k in ks]], rows) + [""]
    L.append(
        f"{bl['scoring'].capitalize()} scoring, step {bl['step']}. The base's best temperature by pass@1: "
        f"{bl['best_pass1_temperature']:g}; by pass@{bl['k'][-1]}: {bl['best_passk_temperature']:g}. Pool curves are "
        "plug-in: 1 − (1 − p)^k from each problem's weighed share correct (a problem the pool never solves stays 0)."
        + (f" Powers not computed: {bl['powers_skipped']}." if bl.get("powers_skipped") else "")
    )
    z = bl.get("z_t1")
    if z:
        q = z["tilt_bound_quartiles"]
        L += [
            "",
            f"**Z at T 1**: the base's T 1 pool never solves {z['n_z']} problems; the trained models solve "
            f"{z['solved_by_rl']} of them. The base's summed T 1 probability of the distinct correct answers they found "
            f"(a lower bound on its rate there) has median {z['base_mass_median']:.2g}"
            if z["solved_by_rl"]
            else f"**Z at T 1**: the base's T 1 pool never solves {z['n_z']} problems; the trained models solve none of them",
        ]
        if z["solved_by_rl"]:
            L[-1] += (
                f"; the tilt a reweighting would need there is at most {q[1]:.3g} (median; quartiles {q[0]:.3g}–{q[2]:.3g}), "
                f"against {z['off_z_tilt']:.3g} off Z: {z['within_off_z_tilt']} of {z['solved_by_rl']} within that tilt's "
                "reach; a larger bound says nothing (it is an upper bound)."
                if z["off_z_tilt"]
                else "."
            )
    return L + [""]
