"""report.md's secondary sections, in PLAN.md's order: the controls (7b), the evaluation sets,
diversity, out of distribution, tokens (7c; pass@k beyond n and the boundary: report_beyond.py), the strategies (7d), and
the run's inputs (learning rate, selection, probes, the first problem side by side) and their
provenance. Words only, from verdicts.json alone: the numbers are analysis/secondary.py's, the inputs
analysis/inputs.py's."""

from __future__ import annotations

from analysis.compat import NO_FIGURES
from analysis.report_format import ci3, crossover_words, f3, opt, p4, table, yn

OLD = "not in this verdicts.json (written before the analysis kept the run's inputs in it): `analyze_b.py --run RUN` reads them again"


def _h4_lines(c: dict, k: int, m: float) -> list[str]:
    """H4: anchoring keeps the ceiling, per anchored condition and its unanchored twin."""
    L = [
        f"**H4 (anchoring, {c['scorings']['H4']} scoring):** with the KL anchor the ceiling pass@{k} is equivalent to the base's "
        f"(TOST within ±{m:g}, the base-null reading's Holm-adjusted test), without it the ceiling falls. The contrast of the two "
        f"is descriptive.",
        "",
    ]
    L += table(
        [
            "anchored (β)",
            f"Δpass@{k} 90% CI",
            "p equiv (adj)",
            "equivalent",
            "unanchored",
            f"Δpass@{k} [95% CI]",
            "p falls (adj)",
            "falls",
            "H4 holds",
            "Δ(anchored) − Δ(unanchored) [95% CI]",
        ],
        [
            [
                f"{h['anchored']} ({h['kl']:g})",
                f"{h['anchored_passk_diff']:+.3f} {ci3(h['anchored_passk_ci90'])}",
                "not asked" if h["anchored_p_equiv_adj"] is None else p4(h["anchored_p_equiv_adj"]),
                yn(h["anchored_ceiling_equivalent"]),
                h["unanchored"],
                f"{h['unanchored_passk_diff']:+.3f} {ci3(h['unanchored_passk_ci'])}",
                p4(h["unanchored_p_falls_adj"]),
                yn(h["unanchored_ceiling_falls"]),
                f"**{yn(h['holds'])}**",
                f"{h['contrast']:+.3f} {ci3(h['contrast_ci'])}",
            ]
            for h in c["h4"]
        ],
    ) + [""]
    return L


def _h5_lines(c: dict, k: int, m: float) -> list[str]:
    """H5: the share of the reference's pass@1 gain a format-only reward reaches."""
    L = [
        f"**H5 (format share, {c['scorings']['H5']} scoring):** the share of the reference's pass@1 gain that a reward for the "
        "format alone reaches; an estimate (the percentile interval of the replicate ratios), not a test; not estimable when the "
        "reference gain's 95% interval contains 0.",
        "",
    ]
    L += table(
        ["format-only condition", "Δpass@1 [95% CI]", "reference", "Δpass@1 [95% CI]", "share [95% CI]"],
        [
            [
                h["condition"],
                f"{h['gain']:+.3f} {ci3(h['gain_ci'])}",
                h["reference"],
                f"{h['reference_gain']:+.3f} {ci3(h['reference_gain_ci'])}",
                f"{h['share']:.2f} [{h['ci'][0]:.2f}, {h['ci'][1]:.2f}]"
                if h["estimable"]
                else f"not estimable ({h['why']})",
            ]
            for h in c["h5"]
        ],
    ) + [""]
    return L


def _h6_lines(c: dict, k: int, m: float) -> list[str]:
    """H6: GRPO against RFT and SFT over k, with a simultaneous band."""
    L = [
        f"**H6 (RL vs RFT and SFT, {c['scorings']['H6']} scoring):** Δ_k = pass@k(GRPO) − pass@k(other), k = 1…{k}, with a "
        "simultaneous 95% band (max-|t|; figure `controls_h6.png`). Descriptive, secondary, not adjusted.",
        "",
    ]
    L += table(
        [
            "GRPO",
            "other (method)",
            "Δpass@1 [95% CI]",
            f"Δpass@{k} [95% CI]",
            f"band half-width at k = 1, {k}",
            "above at k = 1",
            "where the curves cross",
        ],
        [
            [
                h["rl"],
                f"{h['other']} ({h['method']})",
                f"{h['diff_pass1']:+.3f} {ci3(h['ci_pass1'])}",
                f"{h['diff_passk']:+.3f} {ci3(h['ci_passk'])}",
                f"{(h['hi'][0] - h['lo'][0]) / 2:.3f}, {(h['hi'][-1] - h['lo'][-1]) / 2:.3f}",
                h["crossover"]["leader_at_k1"],
                "—"
                if h["crossover"]["leader_at_k1"] == "tie"
                else f"{h['crossover']['leader_at_k1']} leads: " + crossover_words(h["crossover"]),
            ]
            for h in c["h6"]
        ],
    ) + [""]
    return L


def controls_section(doc: dict) -> list[str]:
    """PLAN.md section 7b: H4-H6."""
    c, k, m = doc["controls"], doc["sizes"]["k_max"], doc["levels"]["margin"]
    L = [f"## Controls and baselines: H4–H6 (step {c['step']})", ""]
    L += _h4_lines(c, k, m) if c["h4"] else []
    L += _h5_lines(c, k, m) if c["h5"] else []
    L += _h6_lines(c, k, m) if c["h6"] else []
    L += [f"- {s['hypothesis']} not asked: {s['why']}." for s in c["skipped"]]
    return L + ([""] if c["skipped"] else [])


def sets_section(doc: dict) -> list[str]:
    t = doc["eval_sets"]["test"]
    rows = [
        [
            "test",
            t["task"],
            f"{t['n_problems']} × {t['n']} (base × {t['n_base']})",
            t["k_max"],
            "all",
            f"{len(t['files'])} (eval_*.json)",
        ]
    ]
    for name, spec in doc["eval_sets"].items():
        if name != "test":
            rows.append(
                [
                    name,
                    spec["task"] + (" (out of distribution)" if spec["ood"] else ""),
                    f"{spec['n_problems']} × {spec['n']}",
                    spec["k_max"],
                    spec["models"],
                    f"{len(spec['files'])} (evalsets/{name}/)",
                ]
            )
    return (
        ["## Evaluation sets", ""]
        + table(["set", "task", "problems × n", "k_max", "models", "files found"], rows)
        + [""]
    )


def diversity_section(doc: dict) -> list[str]:
    dv = doc["diversity"]
    if not dv["conditions"]:
        return []
    return (
        [
            "## Diversity",
            "",
            "Per problem: distinct final answers, the entropy of their distribution, and the mean full-vocabulary "
            "token entropy of the untempered policy over the response; mean over problems (trained models: over seeds too).",
            "",
        ]
        + table(
            ["set", "condition", "step", "seeds", "distinct answers", "answer entropy (nats)", "token entropy (nats)"],
            [
                [
                    r["set"],
                    r["condition"],
                    r["step"] or "—",
                    ", ".join(map(str, r["seeds"])) or "—",
                    opt(r["distinct_answers"], "{:.2f}"),
                    opt(r["answer_entropy"]),
                    opt(r["token_entropy"]),
                ]
                for r in dv["conditions"]
            ],
        )
        + [""]
    )


def ood_section(doc: dict) -> list[str]:
    L = []
    for name, o in doc["ood"].items():
        K, kt = o["k_max"], o["test_k_max"]
        rows = []
        for r in o["rows"]:
            if r["condition"] == "base":
                rows.append(
                    [
                        "base",
                        r["scoring"],
                        f3(r["test_pass1"]),
                        f3(r["ood_pass1"]),
                        f3(r["test_passk"]),
                        f3(r["ood_passk"]),
                    ]
                )
            else:
                rows.append(
                    [
                        r["condition"],
                        r["scoring"],
                        f"{f3(r['test_pass1'])}, {r['test_pass1_diff']:+.3f} {ci3(r['test_pass1_ci'])}",
                        f"{f3(r['ood_pass1'])}, {r['ood_pass1_diff']:+.3f} {ci3(r['ood_pass1_ci'])}",
                        f"{f3(r['test_passk'])}, {r['test_passk_diff']:+.3f} {ci3(r['test_passk_ci'])}",
                        f"{f3(r['ood_passk'])}, {r['ood_passk_diff']:+.3f} {ci3(r['ood_passk_ci'])}",
                    ]
                )
        L += [
            f"## In vs out of distribution: test vs {name} ({o['task']}, {o['n_problems']} × {o['n']})",
            "",
            f"Each cell: RL (mean over seeds), Δ vs base [95% CI]; the {name} side from its own crossed bootstrap. Secondary and "
            "descriptive, not adjusted.",
            "",
        ]
        L += table(
            ["condition", "scoring", "test pass@1", f"{name} pass@1", f"test pass@{kt}", f"{name} pass@{K}"], rows
        ) + [""]
    return L


def strategies_section(doc: dict) -> list[str]:
    """PLAN.md section 7d."""
    sg = doc["strategies"]
    if sg["skipped"]:
        return ["## Strategies", "", f"Not counted: {sg['skipped']}.", ""]
    S, base = sg["strategies"], sg["models"][0]
    rows = [
        ["base", "—"]
        + [
            f"{base['share'][s]:.3f}; acc {opt(base['accuracy'][s])}; of correct {opt(base['correct_share'][s])}"
            for s in S
        ]
        + [f"{base['subtraction_share']:.3f}"]
    ]
    rows += [
        [r["condition"], r["step"]]
        + [
            f"{r['share'][s]:.3f} ({r['delta'][s]:+.3f} {ci3(r['delta_ci'][s])}); "
            f"acc {opt(r['accuracy'][s])}; of correct {opt(r['correct_share'][s])}"
            for s in S
        ]
        + [f"{r['subtraction_share']:.3f}"]
        for r in sg["conditions"]
    ]
    L = [
        "## Strategies: how each response computes the product (PLAN.md section 7d)",
        "",
        "Every test-set response classified by `analysis/strategies.classify_strategy`: *split* (partial products), "
        "*one-step* (`a * b = N`), "
        "*no-product*. Each cell: share of responses (Δ vs the base [95% CI, crossed bootstrap]), loose accuracy within the strategy, "
        "share of all correct answers it carries; trained models pooled over seeds. Secondary and descriptive, not adjusted.",
        "",
    ]
    L += table(["model", "step"] + list(S) + ["subtraction shown"], rows)
    L += [
        "",
        f"**The registered reading** (last checkpoint; descriptive): a strategy is *new* when the base's share is below "
        f"{sg['floor']:g} and the trained model's above it; *selection at the strategy level* when every strategy the trained model uses "
        f"at least {sg['nonnegligible']:.0%} of the time has a base share of at least {sg['floor']:g}, and the base's most accurate "
        "strategy gains share.",
        "",
    ]
    L += table(
        [
            "condition",
            "step",
            "new strategies",
            "the base's most accurate strategy",
            "it gains share",
            "selection at the strategy level",
        ],
        [
            [
                r["condition"],
                r["step"],
                ", ".join(r["new"]) or "—",
                r["best_base_strategy"] or "—",
                yn(r["best_gains"]),
                yn(r["selection_at_strategy_level"]),
            ]
            for r in sg["reading"]
        ],
    )
    if sg.get("computations"):  # runs analysed before change 44 have none
        L += _computation_lines(sg)
    return L + [""]


def _computation_lines(sg: dict) -> list[str]:
    """How the correct answers were computed, per model and stratum (response counts)."""
    C = sg["computation_rows"]
    L = [
        "",
        "**How the correct answers were computed** (`analysis/strategies.classify_computation`, from the last subtraction "
        "`P - c = V`): *clean*, the right product and the right subtraction; *compensating*, a wrong product cancelled by a "
        "wrong subtraction (a product 10 too small and a forgotten borrow); *other correct*, no subtraction written or a slip "
        "after it. Response counts, trained models pooled over seeds at the last checkpoint. Descriptive.",
        "",
    ]
    return L + table(
        ["model", "stratum"] + list(C) + ["compensating / correct"],
        [
            [r["model"], r["stratum"]] + [f"{r[k]:,}" for k in C] + [opt(r["compensating_share_of_correct"])]
            for r in sg["computations"]
        ],
    )


def tokens_section(doc: dict) -> list[str]:
    tk = doc["tokens"]
    if not (tk["rows"] or tk["enabled"]):
        return []
    pp = tk["paper"]

    def pct(x):
        return "—" if x is None else f"{100 * x:.3f}%"

    rows = [
        [
            r["condition"],
            r["seed"],
            r["step"],
            r["positions"],
            pct(r["share_unchanged"]),
            pct(r["share_reranked"]),
            pct(r["share_shifted"]),
            opt(r["mean_rank_changed"], "{:.2f}"),
            f"{opt(r['base_entropy_changed'])} / {opt(r['base_entropy_unchanged'])}",
            opt(r["entropy_ratio"], "{:.1f}×"),
        ]
        for r in tk["rows"]
    ]
    rows.append(
        [
            "*paper (another model and task)*",
            "",
            "",
            "",
            "",
            f"{100 * pp['share_reranked'][0]:g}–{100 * pp['share_reranked'][1]:g}%",
            f"{100 * pp['share_shifted'][0]:g}–{100 * pp['share_shifted'][1]:g}%",
            f"{pp['mean_rank_changed'][0]:g}–{pp['mean_rank_changed'][1]:g}",
            "",
            f"{pp['entropy_ratio'][0]:g}–{pp['entropy_ratio'][1]:g}×",
        ]
    )
    return (
        [
            "## The token level (arXiv 2605.06241 §3)",
            "",
            "The base decodes each test problem greedily; the trained model reads the same prefixes. A position is *unchanged* when the "
            "argmaxes agree, *reranked* when the trained choice is in the base's top 5 but not first, *shifted* otherwise; pooled over "
            f"every position, recomputed from each file's per-problem detail. Last row: {pp['source']}, a reference, not a target.",
            "",
        ]
        + table(
            [
                "condition",
                "seed",
                "step",
                "positions",
                "unchanged",
                "reranked",
                "shifted",
                "mean base rank (changed)",
                "base entropy changed / unchanged",
                "ratio",
            ],
            rows,
        )
        + ([""] if tk["rows"] else ["", "No token files yet.", ""])
    )


def lr_measures(d: dict) -> str:
    """The measure the rule chose by (dev loose pass@1 under rule dev), then the training reward."""

    def per(m: dict) -> str:
        return ", ".join(f"{kk}: {v:.3f}" for kk, v in m.items())

    reward = f"mean training reward over the last steps per rate: {per(d['mean_reward_last'])}"
    if d.get("rule_name") == "dev":
        return f"Dev loose pass@1 per rate (the rule's measure): {per(d['dev_loose_pass1'])}; {reward} (not the rule's)"
    return reward[0].upper() + reward[1:] + " (the rule's measure)"


def inputs_section(doc: dict) -> list[str]:
    """The learning rate, the selection, the base-rate probes and the first test problem side by side
    (verdicts.json's `inputs`, analysis/inputs.py)."""
    if "inputs" not in doc:
        return ["## The run's inputs", "", OLD[0].upper() + OLD[1:] + ".", ""]
    inp, L = doc["inputs"], []
    if (d := inp["learning_rate"]) is not None:
        L += ["## Learning rate", "", f"Rule: {d['rule']}. " + lr_measures(d) + f". Chosen: **{d['chosen']:g}**.", ""]
    if (d := inp["selection"]) is not None:
        L += [
            "## Problem selection",
            "",
            f"Rule: {d['rule']}. {d['informative']} of {d['problems']} problems informative. "
            + "; ".join(
                f"set {z}: {', '.join(map(str, ids))}" + (" (fewer than asked)" if d["short"][z] else "")
                for z, ids in d["sets"].items()
            ),
            "",
        ]
    if inp["probes"]:
        rows = [
            [
                d["task"],
                f"{d['n_problems']} × {d['n']}",
                f3(d["strict_pass1"]),
                f3(d["loose_pass1"]),
                f3(d["strict_passn"]),
                f3(d["loose_passn"]),
                f3(d["format_rate"]),
            ]
            for d in inp["probes"]
        ]
        L += ["## Base-rate probes (the checks behind PLAN_CHANGES.md's entries)", ""]
        L += table(
            ["task", "samples", "strict pass@1", "loose pass@1", "strict pass@n", "loose pass@n", "format"], rows
        ) + [""]
    if (fp := inp["first_problem"]) is not None:
        L += [f"## The first test problem side by side: `{fp['question']}` = {fp['answer']}", ""]
        if fp["labelled"]:
            L += ["Each response is prefixed with its strategy (`analysis/strategies.classify_strategy`).", ""]
        for m in fp["models"]:
            L.append(f"**{m['label']}** — strict {m['correct_strict']}/{m['n']}, loose {m['correct_loose']}/{m['n']}")
            L += (
                ["```"]
                + [
                    (f"[{r['strategy']}] " if fp["labelled"] else "") + r["text"].replace("```", "'''")[:300]
                    for r in m["responses"]
                ]
                + ["```", ""]
            )
    return L


def provenance_section(doc: dict) -> list[str]:
    """The figures drawn, and each input file's hash and what made it."""
    figs = doc.get("figures") or []
    L = (["## Figures", ""] + [f"![{f.rsplit('.', 1)[0]}](figures/{f})" for f in figs] + [""]) if figs else []
    if "figures" not in doc:  # an earlier layout: the figures are drawn from the run's files, never from this document
        L = ["## Figures", "", NO_FIGURES, ""]
    if "files" not in doc.get("provenance", {}):
        return L + ["## Provenance of the inputs", "", OLD[0].upper() + OLD[1:] + "."]
    files = doc["provenance"]["files"]
    logged = any(
        f.get("changes_sha256") for f in files
    )  # the change log's hash, recorded since it has a file of its own
    head = (
        ["file", "sha256", "stage hash", "PLAN.md sha256"]
        + (["PLAN_CHANGES.md sha256"] if logged else [])
        + ["revision", "made"]
    )
    rows = [
        [f["file"], f["sha256"][:12], f["stage_hash"], (f["plan_sha256"] or "")[:12]]
        + ([(f.get("changes_sha256") or "")[:12]] if logged else [])
        + [f["revision"], f["made"]]
        for f in files
    ]
    return L + ["## Provenance of the inputs", ""] + table(head, rows)
