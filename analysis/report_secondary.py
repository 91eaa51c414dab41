"""report.md's secondary sections, in PLAN.md's order: the controls (7b), the evaluation sets,
pass@k beyond n, the boundary, diversity, out of distribution, tokens (7c), the strategies (7d), and
the run's inputs (learning rate, selection, probes, the first problem side by side) and their
provenance. Words only, from verdicts.json alone: the numbers are analysis/secondary.py's, the inputs
analysis/inputs.py's."""

from __future__ import annotations

import numpy as np

from analysis.compat import NO_FIGURES
from analysis.document import MODEL_BASED
from analysis.report_format import ci3, crossover_words, f3, ids, opt, p4, table, yn
from countdown import SCORINGS

OLD = "not in this verdicts.json (written before the analysis kept the run's inputs in it): `analyze_b.py --run RUN` reads them again"


def controls_section(doc: dict) -> list[str]:
    """PLAN.md section 7b: H4-H6."""
    c, k, m = doc["controls"], doc["sizes"]["k_max"], doc["levels"]["margin"]
    L = [f"## Controls and baselines: H4–H6 (step {c['step']})", ""]
    if c["h4"]:
        L += [
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
    if c["h5"]:
        L += [
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
    if c["h6"]:
        L += [
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


def beyond_section(doc: dict) -> list[str]:
    """PLAN.md section 7c: pass@k beyond n, labelled as a model, and its checks."""
    bz = doc["beyond_n"]
    n, ext = bz["n"], bz["extrapolate_to"]
    src = "the test set" if bz["set"] == "test" else f"set {bz['set']} (evalsets/{bz['set']}/)"
    L = [
        f"## pass@k beyond n = {n}: {MODEL_BASED}",
        "",
        f"Fitted by maximum likelihood to each model's per-problem counts in {src} (the base and each condition's last checkpoint); "
        "pass@k = 1 − B(α, β + k) / B(α, β). "
        "The plain beta-binomial is the registered model (PLAN_CHANGES.md change 29); AIC's preference "
        f"between it and the zero-inflated one is shown, not used. Every value in the last column is **{MODEL_BASED}**; its interval "
        f"is the parametric bootstrap's ({bz['resamples']} refits). *at bound*: the fit ran to the edge of its search box.",
        "",
    ]
    L += table(
        [
            "model",
            "scoring",
            "α",
            "β",
            "AIC plain / zero-inflated (prefers)",
            "measured pass@n",
            "model pass@n",
            f"pass@{ext} ({MODEL_BASED}) [95%]",
        ],
        [
            [
                f["model"],
                f["scoring"] + (" (at bound)" if f["at_bound"] else ""),
                f"{f['alpha']:.3g}",
                f"{f['beta']:.3g}",
                f"{f['aic']['beta-binomial']:.1f} / {f['aic']['zero-inflated beta-binomial']:.1f} "
                f"({'plain' if f['aic_prefers'] == 'beta-binomial' else 'zero-inflated'})",
                f3(f["measured_pass_at_n"]),
                f3(f["model_pass_at_n"]),
                f"{f3(f['model_pass_at_extrapolated'])} [{f3(f['extrapolated_ci'][0])}, {f3(f['extrapolated_ci'][1])}]",
            ]
            for f in bz["fits"]
        ],
    )
    if bz["check"]:
        L += [
            "",
            f"**Check on this study's data: levels.** Fitted to the test set's samples on the "
            f"{bz['check'][0]['n_problems']} problems "
            f"of set {bz['set']}, the model predicts pass@{n}; the set measures it (new draws). error = predicted − measured; *naive*: "
            f"the measured pass@k at the fit's n.",
            "",
        ]
        L += table(
            [
                "model",
                "scoring",
                "fitted to",
                "fit n",
                f"predicted pass@{n} ({MODEL_BASED})",
                f"measured pass@{n}",
                "error",
                "zero-inflated's error",
                "naive (error)",
            ],
            [
                [
                    r["model"],
                    r["scoring"],
                    r["fit_file"],
                    r["fit_n"],
                    f3(r["predicted"]),
                    f3(r["measured"]),
                    f"{r['error']:+.3f}",
                    f"{r['predicted_zero_inflated'] - r['measured']:+.3f}",
                    f"{f3(r['naive'])} ({r['naive_error']:+.3f})",
                ]
                for r in bz["check"]
            ],
        )
        for sc in SCORINGS:
            errs = [abs(r["error"]) for r in bz["check"] if r["scoring"] == sc]
            if errs:
                L += [
                    "",
                    f"Mean |error| ({sc}): {np.mean(errs):.3f}, largest {max(errs):.3f}, over {len(errs)} models.",
                ]
    if bz.get("contrasts"):
        cov = bz["contrast_coverage"]
        L += [
            "",
            f"**Check on the contrast the question is about.** From the same fits, the model predicts Δpass@{n} (RL − base); the "
            f"set measures it. A paired bootstrap over problems ({bz['resamples']} redraws, both models refitted, the measurement "
            f"redrawn with them) gives a 95% interval of the prediction and of its error; the error's interval contains 0 for "
            f"{cov['covered']} of {cov['of']} models × scorings. The error intervals' median width is {cov['median_width']:.3f}; "
            f"the mean error is {cov['mean_error']:+.3f} ("
            + ", ".join(f"{sc} {v:+.3f}" for sc, v in cov["mean_error_by_scoring"].items())
            + ").",
            "",
        ]
        L += table(
            [
                "model",
                "scoring",
                f"predicted Δpass@{n} [95%] ({MODEL_BASED})",
                f"measured Δpass@{n}",
                "error [95%]",
                "0 in it",
                "zero-inflated's error",
                "naive Δ",
            ],
            [
                [
                    r["model"],
                    r["scoring"],
                    f"{r['predicted_delta']:+.3f} {ci3(r['ci'])}",
                    f"{r['measured_delta']:+.3f}",
                    f"{r['error']:+.3f} {ci3(r['error_ci'])}",
                    yn(r["covered"]),
                    f"{r['error_zero_inflated']:+.3f}",
                    f"{r['naive_delta']:+.3f}",
                ]
                for r in bz["contrasts"]
            ],
        )
    if bz["check_skipped"]:
        L += ["", f"No check of the model: {bz['check_skipped']}."]
    return L + [""]


def boundary_section(doc: dict) -> list[str]:
    bz = doc["boundary"]
    n = bz["n"]
    nulls = [r for r in bz["rows"] if r.get("null")]
    L = [
        f"## Boundary at n = {n}",
        "",
        f"Problems the base never solved in {n} samples that the trained model solved at least once (*only RL*), and the reverse (*only "
        f"base*), ids without their task/split/ prefix (all of them in verdicts.json)."
        + (
            f" *Chance*: the count expected if the trained model were the base (PLAN.md section 7c: each problem's rate from the test "
            f"set's fresh {nulls[0]['null']['fresh_n']} base samples, empirical Bayes), its 95% range and the p of at least the observed "
            f"count."
            if nulls
            else ""
        ),
        "",
    ]
    rows = []
    for r in bz["rows"]:
        nl = r.get("null")
        rows.append(
            [
                r["model"],
                r["scoring"],
                f"{r['solved_base']} / {r['solved_rl']}",
                r["only_rl"],
                f"{nl['expected']:.1f} [{nl['range'][0]}, {nl['range'][1]}], {nl['only_rl']['p']:.3f}" if nl else "—",
                ids(r["only_rl_ids"]),
                r["only_base"],
                f"{nl['only_base']['p']:.3f}" if nl else "—",
                ids(r["only_base_ids"]),
            ]
        )
    return (
        L
        + table(
            ["model", "scoring", "solved: base / RL", "only RL", "chance [95%], p", "ids", "only base", "p", "ids"],
            rows,
        )
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
        C = sg["computation_rows"]
        L += [
            "",
            "**How the correct answers were computed** (`analysis/strategies.classify_computation`, from the last subtraction "
            "`P - c = V`): *clean*, the right product and the right subtraction; *compensating*, a wrong product cancelled by a "
            "wrong subtraction (a product 10 too small and a forgotten borrow); *other correct*, no subtraction written or a slip "
            "after it. Response counts, trained models pooled over seeds at the last checkpoint. Descriptive.",
            "",
        ]
        L += table(
            ["model", "stratum"] + list(C) + ["compensating / correct"],
            [
                [r["model"], r["stratum"]] + [f"{r[k]:,}" for k in C] + [opt(r["compensating_share_of_correct"])]
                for r in sg["computations"]
            ],
        )
    return L + [""]


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
