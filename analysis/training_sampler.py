"""The registered answer at the training sampler (PLAN.md section 7e), read from the evaluation files: which correct
answers RL favours at T 1, against the one thing every outcome reweighting of the base keeps.

The trained models' correct T 1 responses come from the `matched` set, the base's from its fresh T 1 pool; each
file made under eval.within_correct records, per correct response, its base log-probability (logp_t1), its own
(logp_self), its length, and its excess at the evaluation sampler (outside there when excess >= the registered
tolerance of change 57). "Correct" is the reward each condition trained on (strict or loose; the primary scoring
for a condition without one): conditioning on the other scoring mixes answers RL was never rewarded for.
Per condition: the exponent and the outside gap (analysis/within_correct.py) and the three-way answer; the
exponent on Z (the problems the base never solves in its test samples) beside it, descriptive.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from analysis import within_correct
from analysis.inference import counts
from analysis.run_inputs import RunInputs
from analysis.strategies import classify_computation
from analysis.within_correct import Responses
from orchestration import study

RECORDS = ("logp_t1", "logp_self", "length", "excess_eval")


def recorded(doc: dict) -> bool:
    """Whether an evaluation file holds the within-correct records (made under eval.within_correct)."""
    return all("base_support" in p and all(k in p["base_support"] for k in RECORDS) for p in doc["problems"])


def responses(docs: list[dict], scoring: str, tolerance: float) -> Responses:
    """The correct responses (by `scoring`) of one file per seed, in seed order."""
    cols = {k: [] for k in ("seed", "problem", "base", "self", "length", "outside")}
    for s, doc in enumerate(docs):
        for i, p in enumerate(doc["problems"]):
            b = p["base_support"]
            for k, strict in enumerate(b["strict"]):
                if scoring == "loose" or strict:
                    ex = b["excess_eval"][k]
                    cols["seed"].append(s)
                    cols["problem"].append(i)
                    cols["base"].append(b["logp_t1"][k])
                    cols["self"].append(b["logp_self"][k])
                    cols["length"].append(b["length"][k])
                    cols["outside"].append(ex is not None and ex >= tolerance)
    ints = {k: np.array(cols[k], dtype=int) for k in ("seed", "problem", "length")}
    floats = {k: np.array(cols[k], dtype=float) for k in ("base", "self")}
    outside = np.array(cols["outside"], dtype=bool)
    return Responses(ints["seed"], ints["problem"], floats["base"], floats["self"], ints["length"], outside)


def with_clean_flag(r: Responses, docs: list[dict], problems: list, scoring: str) -> Responses:
    """r (made by responses(docs, scoring)) with `outside` replaced by whether each response is the clean
    computation (analysis/strategies.classify_computation), in the same order: the flag change 71's clean gap
    tests with the outside gap's machinery."""
    flags = [
        classify_computation(problems[i], p["responses"][b["index"][k]]) == "clean"
        for doc in docs
        for i, p in enumerate(doc["problems"])
        for b in [p["base_support"]]
        for k, strict in enumerate(b["strict"])
        if scoring == "loose" or strict
    ]
    return Responses(r.seed, r.problem, r.base_logp, r.self_logp, r.length, np.array(flags, dtype=bool))


def clean_gap(design, sc: str, trained: tuple, own: tuple, S: int, inf) -> dict:
    """Change 71's clean-computation gap on correctness `sc`: the outside gap's test with the clean flag in place
    of "outside", the trained side (Responses, its files) against the base's own (Responses, its pool file);
    `more` when the seeds' combined p is below the one-sided level."""
    spec, problems = design.cfg.analyze.within_correct, study.test_problems(design.cfg)
    (t, docs), (b, pool) = trained, own
    g = within_correct.outside_gap(
        with_clean_flag(t, docs, problems, sc),
        with_clean_flag(b, [pool], problems, sc),
        S,
        len(pool["problems"]),
        inf.draws,
        spec.gap_margin,
        inf.levels.ci,
        spec.permutations,
    )
    return {**asdict(g), "more": g.p_more is not None and g.p_more < inf.levels.one_sided}


def scoring_of(design, cond: str) -> str:
    """The reward a condition trained on, where it is a correctness score; else the primary scoring."""
    reward = design.cfg.conditions[cond].reward
    return reward if reward in ("strict", "loose") else design.primary_scoring


def on_problems(r: Responses, keep: np.ndarray) -> Responses:
    """r restricted to the problems where keep (N,) holds."""
    m = keep[r.problem]
    return Responses(r.seed[m], r.problem[m], r.base_logp[m], r.self_logp[m], r.length[m], r.outside[m])


def analyze(inputs: RunInputs, inf) -> dict:
    """Section 7e's answer per condition at the last checkpoint; skipped, with the reason, when not registered
    or the files lack the records."""
    design, base = inputs.design, inputs.base
    spec = design.cfg.analyze.within_correct
    if spec is None:
        return {"skipped": "not registered (analyze.within_correct)"}
    tol, last = design.cfg.analyze.base_support.tolerance, design.checkpoints[-1]
    pool = inputs.sets[spec.pool].base
    if pool is None or not recorded(pool):
        return {"skipped": f"the base's {spec.pool} file holds no within-correct records (eval.within_correct)"}
    N, level, level_one_sided = len(pool["problems"]), inf.levels.ci, inf.levels.one_sided
    out = {
        "skipped": None,
        **({"post_hoc": True} if spec.post_hoc else {}),  # only where set: a registered run's document as before
        "matched": spec.matched,
        "pool": spec.pool,
        "tolerance": tol,
        "step": last,
        "sampling": pool["sampling"],
        "reference_sampling": base["sampling"],
        "conditions": {},
    }
    for cond in design.conditions:
        seeds, docs = inputs.seeds_at(cond, name=spec.matched), inputs.docs_at(cond, name=spec.matched)
        if not docs:
            continue
        if not all(recorded(d) for d in docs):
            out["conditions"][cond] = {"skipped": "its matched files hold no within-correct records"}
            continue
        sc = scoring_of(design, cond)
        trained, own = responses(docs, sc, tol), responses([pool], sc, tol)
        S = len(docs)
        exp = within_correct.exponent(trained, S, N, inf.draws, spec.exponent_margin, level)
        gap = within_correct.outside_gap(trained, own, S, N, inf.draws, spec.gap_margin, level, spec.permutations)
        decided = within_correct.answer(exp, gap, level_one_sided)
        z = counts(base, sc) == 0
        on_z = within_correct.exponent(on_problems(trained, z), S, N, inf.draws, spec.exponent_margin, level)
        out["conditions"][cond] = {
            "primary": cond == design.primary_condition,
            "seeds": seeds,
            "seeds_missing": [s for s in design.seeds_of(cond) if s not in seeds],  # a partial analysis only
            "scoring": sc,
            "answer": decided.answer,
            "decided_by": decided.decided_by,
            "exponent": asdict(exp),
            "gap": asdict(gap),
            "exponent_on_z": asdict(on_z),
            "n_z": int(z.sum()),
            **({"clean_gap": clean_gap(design, sc, (trained, docs), (own, pool), S, inf)} if spec.clean else {}),
        }
    prim = out["conditions"].get(design.primary_condition, {})
    out["answer"] = prim.get("answer")
    return out
