"""The secondary analyses of PLAN.md sections 7b-7d: the controls' hypotheses H4-H6, diversity, test vs
out-of-distribution sets, the token level, strategies and strata (pass@k beyond n and the boundary counts are
analysis/beyond.py's). Descriptive or secondary throughout; the statistics come from analysis/stats.py, the inputs
from analysis/run_inputs.py.
"""

from __future__ import annotations

import numpy as np

from analysis.document import DIVERSITY, key_fields, model_label
from analysis.inference import Inference, counts
from analysis.run_files import DEFAULT_CONDITION
from analysis.run_inputs import RunInputs, ordered_keys
from analysis.stats import (
    boot_curves,
    compare_conditions,
    crossed_replicates,
    pass_at_k_curves,
    percentile_interval,
    ratio_estimate,
    resample_indices,
)
from analysis.strategies import STRATEGIES, classify_computation, classify_strategy
from countdown import ARITH_DIGITS, SCORINGS, Problem, operands, score_loose, stratum

CONTROL_SCORING = {"H4": "loose", "H5": "strict", "H6": "loose"}  # PLAN.md section 7b


PAPER_TABLE2 = {
    "source": "arXiv 2605.06241, Table 2 (a different model and task)",
    "share_reranked": [0.01, 0.04],
    "share_shifted": [0.0001, 0.0012],
    "entropy_ratio": [7.6, 12.6],
    "mean_rank_changed": [2.1, 2.4],
}


def find_twins(settings: dict[str, dict], varied: str, is_treated) -> list[tuple[str, str]]:
    """(treated, twin) pairs of registered conditions: treated satisfies is_treated(its settings);
    its twin is the first condition (config order) whose settings equal the treated one's on every
    key but `varied` and lr (a per-condition rate is a tuning, not a different recipe), and whose
    `varied` value is the default (DEFAULT_CONDITION). The controls are found from the registry's
    settings, never from a condition's name."""
    ignore = {varied, "lr"}
    pairs = []
    for name, s in settings.items():
        if not is_treated(s):
            continue
        for other, t in settings.items():
            if (
                other != name
                and t[varied] == DEFAULT_CONDITION[varied]
                and all(t[k] == s[k] for k in DEFAULT_CONDITION if k not in ignore)
            ):
                pairs.append((name, other))
                break
    return pairs


# ============================================================================= controls: H4-H6


def analyze_controls(inputs: RunInputs, entries: list[dict], inf: Inference) -> dict:
    """H4-H6 (PLAN.md section 7b), each asked of every registered pair its settings define
    (find_twins), at the last checkpoint; a hypothesis whose conditions are not registered, or whose
    evaluations are missing, is listed as skipped with the reason. Seeds of the two conditions are
    drawn independently (compare_conditions), problems shared."""
    c = Controls(inputs, {(e["condition"], e["step"], e["scoring"]): e for e in entries}, inf)
    st = inputs.design.settings
    for h, varied, treated, ask, none in (
        (
            "H4",
            "kl",
            lambda s: s["kl"] > 0,
            c.h4,
            "no registered condition with a KL anchor (kl > 0) and an unanchored twin",
        ),
        (
            "H5",
            "reward",
            lambda s: s["reward"] == "format",
            c.h5,
            "no registered format-reward condition with a strict-reward twin",
        ),
        (
            "H6",
            "method",
            lambda s: s["method"] in ("rft", "sft"),
            c.h6,
            "no registered rft or sft condition with a GRPO twin",
        ),
    ):
        pairs = find_twins(st, varied, treated)
        if not pairs:
            c.out["skipped"].append({"hypothesis": h, "conditions": [], "why": none})
        for treated_name, twin in pairs:
            if c.ready(h, treated_name, twin):
                c.out[h.lower()].append(ask(treated_name, twin))
    return c.out


def _holds(bn_a: dict, bn_b: dict) -> bool | None:
    """Whether anchoring keeps the ceiling: False where the unanchored ceiling does not fall; else the
    anchored ceiling's equivalence, not decided (None) where that was not asked."""
    if not bn_b["ceiling_falls"]:
        return False
    if bn_a["ceiling_equivalent"] is None:
        return None
    return bool(bn_a["ceiling_equivalent"])


class Controls:
    """What H4-H6 share: the run's evaluations at the last checkpoint, the entries, the bootstrap."""

    def __init__(self, inputs: RunInputs, by_key: dict, inf: Inference):
        self.inputs, self.design, self.base, self.by_key, self.inf = inputs, inputs.design, inputs.base, by_key, inf
        self.last = inputs.last
        self.out = {"step": self.last, "scorings": dict(CONTROL_SCORING), "h4": [], "h5": [], "h6": [], "skipped": []}

    def seeds_of(self, c: str) -> list[int]:
        return self.inputs.seeds_at(c)

    def contrast(self, sc: str, a: str, b: str):
        sa, sb = self.seeds_of(a), self.seeds_of(b)
        inf = self.inf
        summ, ra, rb = compare_conditions(
            [counts(d, sc) for d in self.inputs.docs_at(a)],
            [counts(d, sc) for d in self.inputs.docs_at(b)],
            counts(self.base, sc),
            inf.n,
            inf.k,
            inf.draws.resamples,
            inf.draws.seed,
            inf.levels.ci,
            inf.n_base,
        )
        return summ, ra, rb, sa, sb

    def ready(self, h: str, a: str, b: str) -> bool:
        lacking = [c for c in (a, b) if not self.seeds_of(c)]
        if lacking:
            self.out["skipped"].append(
                {
                    "hypothesis": h,
                    "conditions": [a, b],
                    "why": f"no evaluation of {', '.join(lacking)} at step {self.last}",
                }
            )
        return not lacking

    def h4(self, anchored: str, plain: str) -> dict:
        """The anchored entry's base-null equivalence and the unanchored twin's fall (their adjusted tests), and their contrast."""
        sc, last = CONTROL_SCORING["H4"], self.last
        ea, eb = self.by_key[(anchored, last, sc)], self.by_key[(plain, last, sc)]
        summ, _, _, sa, sb = self.contrast(sc, anchored, plain)
        bn_a, bn_b = ea["base_null"], eb["base_null"]  # H4 is about the base: the base-null reading's adjusted tests
        return {
            "anchored": anchored,
            "unanchored": plain,
            "kl": self.design.settings[anchored]["kl"],
            "step": last,
            "scoring": sc,
            "k_max": self.inf.k,
            "anchored_passk_diff": ea["passk_diff"],
            "anchored_passk_ci90": ea["passk_ci90"],
            "anchored_p_equiv_adj": bn_a["p_equiv_adj"],
            "anchored_ceiling_equivalent": bn_a["ceiling_equivalent"],
            "unanchored_passk_diff": eb["passk_diff"],
            "unanchored_passk_ci": eb["passk_ci"],
            "unanchored_p_falls_adj": bn_b["p_falls_adj"],
            "unanchored_ceiling_falls": bn_b["ceiling_falls"],
            # not decided (None) where the unanchored ceiling falls but the anchored one's equivalence was not asked
            "holds": _holds(bn_a, bn_b),
            "contrast": summ["diff_passk"],
            "contrast_ci": summ["ci_passk"],
            "seeds_anchored": sa,
            "seeds_unanchored": sb,
            "contrast_curve": {k: summ[k] for k in ("diff", "lo", "hi", "crit", "level")},
        }

    def h5(self, fmt: str, ref: str) -> dict:
        """The format-only condition's share of its twin's strict pass@1 gain."""
        sc = CONTROL_SCORING["H5"]
        summ, ra, rb, sa, sb = self.contrast(sc, ref, fmt)  # a = the reference (its replicates are its entry's)
        d_ref, d_fmt = summ["delta_a"][0], summ["delta_b"][0]
        return {
            "condition": fmt,
            "reference": ref,
            "step": self.last,
            "scoring": sc,
            "gain": d_fmt,
            "gain_ci": summ["delta_b_ci_pass1"],
            "reference_gain": d_ref,
            "reference_gain_ci": summ["delta_a_ci_pass1"],
            **ratio_estimate(d_fmt, d_ref, rb[:, 0], ra[:, 0], self.inf.levels.ci),
            "seeds_condition": sb,
            "seeds_reference": sa,
        }

    def h6(self, other: str, rlc: str) -> dict:
        """GRPO's pass@k curve against RFT's or SFT's: the contrast curve, its band, where they cross."""
        sc = CONTROL_SCORING["H6"]
        summ, _, _, sa, sb = self.contrast(sc, rlc, other)
        lead = summ["crossover"]["leader_at_k1"]
        summ["crossover"]["leader_at_k1"] = {"a": rlc, "b": other}.get(lead, "tie")
        return {
            "rl": rlc,
            "other": other,
            "method": self.design.settings[other]["method"],
            "step": self.last,
            "scoring": sc,
            **summ,
            "seeds_rl": sa,
            "seeds_other": sb,
        }


# ============================================================================= diversity, out of distribution, tokens


def _diversity_means(doc: dict) -> dict:
    """Mean over problems of each diversity field (None when no problem carries it)."""
    out = {}
    for k, _ in DIVERSITY:
        v = [p[k] for p in doc["problems"] if p.get(k) is not None and not np.isnan(p[k])]
        out[k] = float(np.mean(v)) if v else None
    return out


def analyze_diversity(inputs: RunInputs) -> dict:
    """Per model (every set that carries the fields) the mean over problems of distinct answers,
    answer entropy and token entropy; per set, condition and checkpoint the mean over seeds."""
    design, models, conds = inputs.design, [], []
    for name, es in [("test", inputs.test), *inputs.sets.items()]:
        b, docs, prefix = es.base, es.trained, es.prefix
        if b is None:
            continue
        rows = [(None, b)] + [(k, docs[k]) for k in ordered_keys(design, docs)]
        got = [(k, d, _diversity_means(d)) for k, d in rows]
        if all(v is None for _, _, m in got for v in m.values()):
            continue  # files from before the diversity fields
        for k, d, m in got:
            models.append({"set": name, **key_fields(k), "model": model_label(k), "file": prefix + d["_file"], **m})
        conds.append({"set": name, "condition": "base", "step": None, "seeds": [], **got[0][2]})
        for c in design.conditions:
            for st in design.checkpoints:
                ms = [(k[1], m) for k, _, m in got[1:] if (k[0], k[2]) == (c, st)]
                if ms:
                    conds.append(
                        {
                            "set": name,
                            "condition": c,
                            "step": st,
                            "seeds": [s for s, _ in ms],
                            **{
                                f: (
                                    float(np.mean([m[f] for _, m in ms if m[f] is not None]))
                                    if any(m[f] is not None for _, m in ms)
                                    else None
                                )
                                for f, _ in DIVERSITY
                            },
                        }
                    )
    return {"models": models, "conditions": conds, "fields": {k: w for k, w in DIVERSITY}}


def analyze_ood(inputs: RunInputs, entries: list[dict], curves: dict, inf: Inference) -> dict:
    """Test vs each out-of-distribution set (a set whose task is not the trained one), per condition at
    the last checkpoint and scoring: pass@1 and pass@k_max with Delta vs base; the test side from the
    registered entries, the out-of-distribution side from its own crossed bootstrap (its problems
    drawn by resample_indices(N_ood, B, seed)), percentile intervals, not adjusted: descriptive."""
    design, last, k_test, ci = inputs.design, inputs.last, inf.k, inf.levels.ci
    B, bseed, draws = inf.draws.resamples, inf.draws.seed, inf.seed_draws
    by_key = {(e["condition"], e["step"], e["scoring"]): e for e in entries}
    out = {}
    for name, spec in design.eval_sets.items():
        b, docs = inputs.sets[name].base, inputs.sets[name].trained
        if not spec["ood"] or b is None:
            continue
        n, K = spec["n"], spec["k_max"]
        idx = resample_indices(len(b["problems"]), B, bseed)
        rows, figure = [], {}
        for sc in SCORINGS:
            bc = pass_at_k_curves(counts(b, sc), n, K)  # (N, K)
            figure[(sc, "base")] = (curves[sc]["base"].mean(axis=0), bc.mean(axis=0))
            rows.append(
                {
                    "condition": "base",
                    "step": None,
                    "scoring": sc,
                    "seeds": [],
                    "test_pass1": float(curves[sc]["base"][:, 0].mean()),
                    "test_passk": float(curves[sc]["base"][:, -1].mean()),
                    "ood_pass1": float(bc[:, 0].mean()),
                    "ood_passk": float(bc[:, -1].mean()),
                }
            )
            for c in design.conditions:
                keys = [k for k in ordered_keys(design, docs, last) if k[0] == c]
                e = by_key.get((c, last, sc))
                if not keys or e is None:
                    continue
                pr = np.stack([pass_at_k_curves(counts(docs[k], sc), n, K) for k in keys])  # (S, N, K)
                point, _, reps = boot_curves(pr[..., [0, K - 1]], bc[:, [0, K - 1]], idx, draws(len(keys)))
                figure[(sc, c)] = (curves[sc][(c, last)][1].mean(axis=1).mean(axis=0), pr.mean(axis=1).mean(axis=0))
                rows.append(
                    {
                        "condition": c,
                        "step": last,
                        "scoring": sc,
                        "seeds": [k[1] for k in keys],
                        "test_pass1": e["pass1_rl"],
                        "test_pass1_diff": e["pass1_diff"],
                        "test_pass1_ci": e["pass1_ci"],
                        "test_passk": e["passk_rl"],
                        "test_passk_diff": e["passk_diff"],
                        "test_passk_ci": e["passk_ci"],
                        "ood_pass1": float(pr[:, :, 0].mean()),
                        "ood_pass1_diff": float(point[0]),
                        "ood_pass1_ci": list(percentile_interval(reps[:, 0], ci)),
                        "ood_passk": float(pr[:, :, -1].mean()),
                        "ood_passk_diff": float(point[1]),
                        "ood_passk_ci": list(percentile_interval(reps[:, 1], ci)),
                    }
                )
        out[name] = {
            "task": spec["task"],
            "n": n,
            "k_max": K,
            "test_k_max": k_test,
            "n_problems": len(b["problems"]),
            "rows": rows,
            "_figure": figure,
        }
    return out


def analyze_tokens(inputs: RunInputs) -> dict:
    """One row per token file (condition x seed x checkpoint), its summary recomputed from the
    per-problem detail, beside the paper's ranges."""
    design, docs, warnings = inputs.design, inputs.tokens, inputs.token_warnings
    rows = [{**key_fields(k), "file": docs[k]["_file"], **docs[k]["_summary"]} for k in ordered_keys(design, docs)]
    return {"enabled": design.tokens_enabled, "rows": rows, "paper": PAPER_TABLE2, "warnings": warnings}


# ============================================================================= strategies (PLAN.md section 7d)

STRATEGY_FLOOR, STRATEGY_NONNEGLIGIBLE = 0.01, 0.05  # registered: a base share below the floor is "never used"


def strategy_counts(doc: dict) -> dict[str, np.ndarray] | None:
    """Per problem of an eval file, from its responses (analysis/strategies.classify_strategy): how many
    responses use each strategy (STRATEGIES) and how many of those are loosely correct, and how many
    show the subtraction; (N,) arrays keyed "<strategy>", "<strategy>_correct", "subtraction", and the
    correct answers by how their working reached them (COMPUTATION_ROWS, strategies.classify_computation).
    None when the file keeps no responses or its task has no strategies."""
    probs = doc["problems"]
    if doc.get("task") not in ARITH_DIGITS or not all("responses" in p and operands(p["question"]) for p in probs):
        return None
    out = {
        k: np.zeros(len(probs))
        for k in (*STRATEGIES, *(f"{s}_correct" for s in STRATEGIES), "subtraction", *COMPUTATION_ROWS)
    }
    for i, p in enumerate(probs):
        problem = Problem.from_row(p, doc["task"])
        for r in p["responses"]:
            label = classify_strategy(problem, r)
            correct = score_loose(r, p["answer"])
            out[label["product"]][i] += 1
            out[f"{label['product']}_correct"][i] += correct
            out["subtraction"][i] += label["subtraction"]
            out[computation_row(label["product"], classify_computation(problem, r), correct)][i] += 1
    return out


# Every response falls in one row: a correct answer from a clean computation by its product strategy, a
# correct answer whose wrong product a wrong subtraction cancelled, a correct answer otherwise (no
# subtraction written, or a slip after it), or a wrong answer (PLAN.md section 7d, change 44).
COMPUTATION_ROWS = ("clean split", "clean one-step", "compensating", "other correct", "wrong")


def computation_row(product: str, computation: str, correct: bool) -> str:
    if not correct:
        return "wrong"
    if computation == "compensating":
        return "compensating"
    if computation == "clean" and product in ("split", "one-step"):
        return f"clean {product}"
    return "other correct"


def computation_table(name: str, counts: dict[str, np.ndarray], strata: np.ndarray) -> list[dict]:
    """One row per stratum (and `all`): how many of a model's responses fall in each COMPUTATION_ROWS
    row, and the share of its correct answers that are compensating."""
    out = []
    for st_name in ["all", *sorted({s for s in strata if s is not None})]:
        sel = np.ones(len(strata), bool) if st_name == "all" else strata == st_name
        row = {"model": name, "stratum": st_name, **{k: int(counts[k][sel].sum()) for k in COMPUTATION_ROWS}}
        correct = sum(row[k] for k in COMPUTATION_ROWS if k != "wrong")
        row["compensating_share_of_correct"] = row["compensating"] / correct if correct else None
        out.append(row)
    return out


def _model_strategies(c: dict) -> dict:
    """Shares, accuracy and the share of correct answers each strategy carries, pooled over problems."""
    total = sum(c[s].sum() for s in STRATEGIES)
    correct = sum(c[f"{s}_correct"].sum() for s in STRATEGIES)
    return {
        "share": {s: float(c[s].sum() / total) for s in STRATEGIES},
        "accuracy": {s: float(c[f"{s}_correct"].sum() / c[s].sum()) if c[s].sum() else None for s in STRATEGIES},
        "correct_share": {s: float(c[f"{s}_correct"].sum() / correct) if correct else None for s in STRATEGIES},
        "subtraction_share": float(c["subtraction"].sum() / total),
        "responses": int(total),
    }


def analyze_strategies(inputs: RunInputs, inf: Inference) -> dict:
    """Which strategy each response to the test set uses, per model and per condition x checkpoint
    (pooled over seeds): shares, accuracy (loose) and the share of the correct answers each carries;
    RL - base per strategy share with the crossed bootstrap's percentile interval (the same problem
    draws as every entry); and the registered reading (PLAN.md section 7d), descriptive."""
    design, base, rl = inputs.design, inputs.base, inputs.trained
    idx, draws, ci = inf.draws.idx, inf.seed_draws, inf.levels.ci
    bc = strategy_counts(base)
    if bc is None:
        return {
            "skipped": "the test set's files keep no responses, or its task (a + b, Countdown) has no strategies",
            "models": [],
            "conditions": [],
            "reading": [],
        }
    n_base = base["sampling"]["n"]  # the base may have more samples per problem than the trained models
    by_model = {k: strategy_counts(d) for k, d in rl.items()}
    models = [{**key_fields(None), "file": base["_file"], **_model_strategies(bc)}]
    models += [
        {**key_fields(k), "file": rl[k]["_file"], **_model_strategies(by_model[k])} for k in ordered_keys(design, rl)
    ]
    conds, reading = [], []
    base_m = models[0]  # the base row: its shares and accuracies
    for c in design.conditions:
        for st in design.checkpoints:
            keys = [k for k in ordered_keys(design, rl, st) if k[0] == c]
            if not keys:
                continue
            row = {"condition": c, "step": st, "seeds": [k[1] for k in keys], "share": {}, "delta": {}, "delta_ci": {}}
            for s in STRATEGIES:
                per = np.stack(
                    [by_model[k][s] / rl[k]["sampling"]["n"] for k in keys]
                )  # (S, N) each seed's per-problem share
                row["share"][s] = float(per.mean())
                row["delta"][s] = float(per.mean() - (bc[s] / n_base).mean())
                row["delta_ci"][s] = list(
                    percentile_interval(crossed_replicates(per, bc[s] / n_base, idx, draws(len(keys))), ci)
                )
            pooled = {f: sum(by_model[k][f] for k in keys) for f in by_model[keys[0]]}
            m = _model_strategies(pooled)
            row.update(
                accuracy=m["accuracy"], correct_share=m["correct_share"], subtraction_share=m["subtraction_share"]
            )
            conds.append(row)
            if st == design.checkpoints[-1]:
                reading.append(strategy_reading(c, st, base_m, row))
    strata = problem_strata(base)
    comps = computation_table("base", bc, strata)
    for c in design.conditions:
        keys = [k for k in ordered_keys(design, rl, design.checkpoints[-1]) if k[0] == c]
        if keys:
            comps += computation_table(c, {f: sum(by_model[k][f] for k in keys) for f in COMPUTATION_ROWS}, strata)
    return {
        "skipped": None,
        "strategies": list(STRATEGIES),
        "floor": STRATEGY_FLOOR,
        "nonnegligible": STRATEGY_NONNEGLIGIBLE,
        "models": models,
        "conditions": conds,
        "reading": reading,
        "computation_rows": list(COMPUTATION_ROWS),
        "computations": comps,
    }


def strategy_reading(cond: str, step: int, base: dict, row: dict) -> dict:
    """The registered reading at the last checkpoint: a strategy is *new* when its base share is
    below the floor and its RL share above it; *selection at the strategy level* holds when every
    strategy with an RL share of at least STRATEGY_NONNEGLIGIBLE has a base share of at least the
    floor, and the strategy with the highest base accuracy (among those the base uses) gains share."""
    used = [s for s in STRATEGIES if base["share"][s] >= STRATEGY_FLOOR and base["accuracy"][s] is not None]
    best = max(used, key=lambda s: base["accuracy"][s]) if used else None
    new = [s for s in STRATEGIES if base["share"][s] < STRATEGY_FLOOR and row["share"][s] > STRATEGY_FLOOR]
    covered = all(base["share"][s] >= STRATEGY_FLOOR for s in STRATEGIES if row["share"][s] >= STRATEGY_NONNEGLIGIBLE)
    return {
        "condition": cond,
        "step": step,
        "new": new,
        "best_base_strategy": best,
        "best_gains": bool(best is not None and row["delta"][best] > 0),
        "selection_at_strategy_level": bool(covered and best is not None and row["delta"][best] > 0),
    }


# ============================================================================= strata (PLAN.md section 7c)


def problem_strata(doc: dict) -> np.ndarray:
    """(N,) each test problem's stratum (countdown.stratum: borrows-0, borrows-1, ...; None for tasks without one)."""
    return np.array(
        [stratum(Problem.from_row(p, doc.get("task"))) if operands(p["question"]) else None for p in doc["problems"]],
        dtype=object,
    )


def analyze_strata(inputs: RunInputs, conditions: list[str], inf: Inference) -> dict:
    """Per stratum and scoring: pass@1 and pass@k of the base and of each condition at the last
    checkpoint (mean over seeds), Delta vs the base with the crossed bootstrap's percentile interval
    over the stratum's own problems (its problems redrawn within it). Secondary and descriptive."""
    from analysis.verdict import Draws

    design, base, rl, last = inputs.design, inputs.base, inputs.trained, inputs.last
    n_base, n, k, draws, ci = inf.n_base, inf.n, inf.k, inf.draws, inf.levels.ci
    labels = problem_strata(base)
    if all(x is None for x in labels):
        return {"skipped": "the test set's task has no strata", "strata": []}
    out = []
    for name in sorted({x for x in labels if x is not None}):
        pos = np.flatnonzero(labels == name)
        d = Draws(len(pos), draws.resamples, draws.seed)
        row = {"stratum": name, "n_problems": int(pos.size), "scorings": {}}
        for sc in SCORINGS:
            bc = pass_at_k_curves(counts(base, sc)[pos], n_base, k)[:, [0, k - 1]]  # (N_s, 2)
            rows = {
                "base": {
                    "pass1": float(bc[:, 0].mean()),
                    "passk": float(bc[:, 1].mean()),
                    "never_solved": int(np.count_nonzero(counts(base, sc)[pos] == 0)),
                }
            }
            for c in conditions:
                keys = [x for x in ordered_keys(design, rl, last) if x[0] == c]
                if not keys:
                    continue
                pr = np.stack(
                    [pass_at_k_curves(counts(rl[x], sc)[pos], n, k)[:, [0, k - 1]] for x in keys]
                )  # (S, N_s, 2)
                reps = d.means(pr, per_seed=True) - d.means(bc, per_seed=False)  # (B, 2)
                rows[c] = {
                    "seeds": [x[1] for x in keys],
                    "pass1": float(pr[:, :, 0].mean()),
                    "passk": float(pr[:, :, 1].mean()),
                    "pass1_diff": float(pr[:, :, 0].mean() - bc[:, 0].mean()),
                    "pass1_ci": list(percentile_interval(reps[:, 0], ci)),
                    "passk_diff": float(pr[:, :, 1].mean() - bc[:, 1].mean()),
                    "passk_ci": list(percentile_interval(reps[:, 1], ci)),
                }
            row["scorings"][sc] = rows
        out.append(row)
    return {"skipped": None, "k": k, "step": last, "strata": out}
