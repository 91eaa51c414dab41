"""Support from the base's own probabilities (PLAN_CHANGES.md change 57), read from the evaluation files.

Each evaluation under eval.base_support records, for every correct (loose) response, whether the base's
own sampler at the drawing sampler's settings could have drawn it (method/base_support.py): `excess`,
the base's probability ranked strictly above the response's most-outside token minus top_p. A response
is outside when excess >= tolerance (beyond the rounding between a full forward and the cached decode).

    r[s, i] = (seed s's responses to problem i that are correct and outside) / n          (S, N)

Reweighting what the base's sampler draws, however strongly, puts nothing outside it: r = 0. What
r > 0 says is that the model answers where that sampler never can, nothing about how: a strong enough
selection of the untempered base (the policy RL trains at T 1) moves tokens into the nucleus at a lower
temperature, and reads outside here too (bench/support_calibration.py). So the answer is about support
at the named sampler; the log-probabilities at the training sampler say how far the base was. The
registered test (change 57 (c)) of mean r > 0 and of mean r < kept_margin is verdict.one_sided (the
crossed bootstrap and the random-effects t test, the larger p): expanded / kept / not shown. At an
untruncated sampler nothing is outside; there only the base log-probabilities of the responses speak
(descriptive). numpy and scipy only.
"""

from __future__ import annotations

import math

import numpy as np

from analysis import power, stats, support, verdict
from analysis.inference import counts
from analysis.run_inputs import RunInputs

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
DRAWS_AGAINST = (256, 1024)  # the k the study's pass@k curves reach


def outside_counts(doc: dict, scoring: str, tolerance: float) -> dict[str, np.ndarray]:
    """Per problem (N,): correct responses, those outside (excess >= tolerance), those outside by the
    exact rule (excess >= 0) and whether the sampler truncated at all (an excess was recorded)."""
    correct, out, exact, measured = [], [], [], False
    for p in doc["problems"]:
        b = p.get("base_support")
        if b is None:
            raise KeyError("base_support")
        keep = [scoring == "loose" or s for s in b["strict"]]
        ex = [e for e, k in zip(b["excess"], keep) if k]
        measured |= any(e is not None for e in ex)
        correct.append(sum(keep))
        out.append(sum(e is not None and e >= tolerance for e in ex))
        exact.append(sum(bool(o) for o, k in zip(b["outside"], keep) if k))
    return {"correct": np.array(correct), "outside": np.array(out), "exact": np.array(exact), "truncated": measured}


def decide(r: np.ndarray, draws: verdict.Draws, alpha: float, margin: float, level: float) -> dict:
    """The registered test on r (S, N): expanded (mean r > 0), kept (mean r < margin) or not shown, each
    with its p, the part that decided it (the larger p: bootstrap or t) and that part's interval."""
    reps = draws.means(r)
    above = verdict.one_sided(reps, r, "above")
    below = verdict.one_sided(reps - margin, r - margin, "below")
    t = power.t_result(verdict.variance_components(r), level)
    intervals = {"bootstrap": list(stats.percentile_interval(reps, level)), "t": [float(x) for x in t["ci"]]}
    for test in (above, below):
        test["decided_by"] = "t" if test["p_t"] >= test["p_boot"] else "bootstrap"
    answer = support.support_answer(above, below, alpha)
    deciding = above if answer != "kept" else below
    return {
        "answer": answer,
        "rate": float(r.mean()),
        "rate_per_seed": r.mean(axis=1).tolist(),
        "above": above,
        "below": below,
        "margin": margin,
        "alpha": alpha,
        "interval": intervals[deciding["decided_by"]],
        "interval_by": deciding["decided_by"],
        "intervals": intervals,
        "level": level,
    }


def shares(c: dict[str, np.ndarray], n: int, subset: np.ndarray, draws: verdict.Draws, level: float) -> dict:
    """Over the problems in subset (N,) bool, for c's arrays (S, N): the share of correct responses that
    lie outside (a ratio of crossed means, with its percentile interval), and the share of problems with
    a correct response whose correct responses all lie outside."""
    corr, out = c["correct"][:, subset], c["outside"][:, subset]
    n_sub = int(subset.sum())
    res = {
        "problems": n_sub,
        "correct": int(corr.sum()),
        "outside": int(out.sum()),
        "exact": int(c["exact"][:, subset].sum()),
    }
    if n_sub == 0 or corr.sum() == 0:
        return {**res, "share": None, "share_ci": None, "only_outside": None}
    sub = verdict.Draws(n_sub, draws.resamples, draws.seed)
    num, den = sub.means(out / n), sub.means(corr / n)
    ratio = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    solved = corr > 0
    return {
        **res,
        "share": float(out.sum() / corr.sum()),
        "share_ci": list(stats.percentile_interval(ratio, level)),
        "only_outside": float(((out == corr) & solved).sum() / solved.sum()),
    }


def log_probs(doc: dict, scoring: str, subset: np.ndarray | None = None) -> np.ndarray:
    """The base log-probabilities at T 1 of a file's correct responses (on subset's problems)."""
    rows = [p for i, p in enumerate(doc["problems"]) if subset is None or subset[i]]
    return np.array(
        [
            lp
            for p in rows
            for lp, s in zip(p["base_support"]["logp_t1"], p["base_support"]["strict"])
            if scoring == "loose" or s
        ],
        float,
    )


def describe_logp(lp: np.ndarray) -> dict:
    """Quantiles of the log-probabilities and the share of responses the base would need more than k
    draws to produce once (exp(-log p) > k)."""
    if len(lp) == 0:
        return {"responses": 0}
    return {
        "responses": int(len(lp)),
        "quantiles": dict(zip(map(str, QUANTILES), np.quantile(lp, QUANTILES).tolist())),
        "beyond": {str(k): float(np.mean(-lp > math.log(k))) for k in DRAWS_AGAINST},
    }


def tilt_curve(
    base_counts,
    pool_counts,
    n_pool: int,
    rl_counts,
    n: int,
    grid,
    alpha: float,
    resamples: int,
    seed: int,
    measured_on: str,
) -> dict:
    """Change 42's support test at every w* of the grid, and the flip points where its answer changes."""
    rows = []
    for w in grid:
        t = support.support_test(
            base_counts, pool_counts, n_pool, rl_counts, n, w, alpha, resamples, seed, "test", measured_on
        )
        rows.append(
            {
                "w_star": float(w),
                "answer": t["answer"],
                "bound": t.get("bound"),
                "p_above": (t.get("above") or {}).get("p"),
                "p_below": (t.get("below") or {}).get("p"),
            }
        )
    flips = [
        {"between": [a["w_star"], b["w_star"]], "from": a["answer"], "to": b["answer"]}
        for a, b in zip(rows, rows[1:])
        if a["answer"] != b["answer"]
    ]
    return {"rows": rows, "flips": flips, "rl_rate": t.get("rl_rate"), "n_z": t["n_z"]}


def measured(doc: dict) -> bool:
    """Whether an evaluation file holds the measure (made under eval.base_support)."""
    return all("base_support" in p for p in doc["problems"])


def _untruncated(s: dict | None) -> bool:
    return bool(s) and s["temperature"] == 1.0 and s["top_p"] >= 1.0 and s["top_k"] == 0


def analyze(inputs: RunInputs, inf) -> dict:
    """Change 57's measures of a run: the gate (the base's own correct responses read 0 outside), the
    registered test per condition at the evaluation sampler, the shares per seed, on Z and off Z and per
    stratum, and at the training sampler (the `matched` set) the base log-probabilities and the tilt curve.
    Skipped, with the reason, when analyze.base_support is not set or the files lack the measure."""
    from analysis.secondary import problem_strata

    design, base, spec = inputs.design, inputs.base, inputs.design.cfg.analyze.base_support
    if spec is None:
        return {"skipped": "not registered (analyze.base_support)"}
    sc, last, level, alpha = design.primary_scoring, design.checkpoints[-1], inf.levels.ci, inf.levels.one_sided
    tol = spec.tolerance
    if not measured(base):
        return {"skipped": "the evaluation files hold no base_support record (eval.base_support was off)"}
    sets = {f"evalsets/{k}": v.base for k, v in inputs.sets.items() if v.base is not None}
    gate_docs = {"test": base} | {k: d for k, d in sets.items() if measured(d)}
    gate = {name: outside_counts(d, sc, tol) for name, d in gate_docs.items()}
    gate_rows = {
        k: {
            "correct": int(g["correct"].sum()),
            "outside": int(g["outside"].sum()),
            "exact": int(g["exact"].sum()),
            "truncated": g["truncated"],
        }
        for k, g in gate.items()
    }
    passed = all(g["outside"] == 0 for g in gate_rows.values())
    z = counts(base, sc) == 0
    strata = problem_strata(base)
    out = {
        "skipped": None,
        "registered": spec.primary,
        "tolerance": tol,
        "kept_margin": spec.kept_margin,
        "scoring": sc,
        "step": last,
        "n_z": int(z.sum()),
        "sampling": base["sampling"],
        "gate": {"passed": passed, "files": gate_rows},
        "conditions": {},
    }
    for cond in design.conditions:
        seeds, docs = inputs.seeds_at(cond), inputs.docs_at(cond)
        if not seeds:
            continue
        if not all(measured(d) for d in docs):
            out["conditions"][cond] = {
                "primary": cond == design.primary_condition,
                "skipped": "its files hold no base_support record",
            }
            continue
        per = [outside_counts(d, sc, tol) for d in docs]
        c = {k: np.stack([p[k] for p in per]) for k in ("correct", "outside", "exact")}  # (S, N)
        n = docs[0]["sampling"]["n"]
        test = decide(c["outside"] / n, inf.draws, alpha, spec.kept_margin, level)
        if not passed:
            test = {**test, "answer": "not shown", "gate_failed": True}
        everyone = np.ones(len(z), bool)
        out["conditions"][cond] = {
            "primary": cond == design.primary_condition,
            "seeds": seeds,
            "n": n,
            "test": test,
            "all": shares(c, n, everyone, inf.draws, level),
            "z": shares(c, n, z, inf.draws, level),
            "off_z": shares(c, n, ~z, inf.draws, level),
            "per_seed": [
                shares({k: v[i : i + 1] for k, v in c.items()}, n, everyone, inf.draws, level)
                for i in range(len(seeds))
            ],
            "strata": {
                str(s): shares(c, n, strata == s, inf.draws, level)
                for s in sorted(set(strata.tolist()), key=str)
                if s is not None
            },
        }
    out["train"] = training_sampler(inputs, sc, z, strata, inf)
    prim = out["conditions"].get(design.primary_condition)
    out["answer"] = prim["test"]["answer"] if prim and not prim.get("skipped") else None
    return out


def training_sampler(inputs: RunInputs, sc: str, z: np.ndarray, strata: np.ndarray, inf) -> dict:
    """At the training sampler (untruncated: nothing is outside): the base log-probabilities at T 1 of the
    trained models' correct responses drawn there (the matched set) beside the base's own (its untruncated
    base-only set), and change 42's tilt test as a curve over w*, trained and base draws both at T 1."""
    design, sets, spec = inputs.design, inputs.sets, inputs.design.cfg.analyze.base_support
    pool_name = next(
        (
            k
            for k, v in sets.items()
            if v.base is not None and design.cfg.eval_sets[k].models == "base" and _untruncated(v.base["sampling"])
        ),
        None,
    )
    if spec.matched is None or pool_name is None or spec.matched not in sets:
        return {"skipped": "no matched set of the trained models and no base-only set at the training sampler"}
    pool = sets[pool_name].base
    res = {
        "skipped": None,
        "matched": spec.matched,
        "pool": pool_name,
        "sampling": pool["sampling"],
        "base": {"all": describe_logp(log_probs(pool, sc)), "z": describe_logp(log_probs(pool, sc, z))},
        "conditions": {},
    }
    cb, pc = counts(inputs.base, sc), counts(pool, sc)
    for cond in design.conditions:
        docs = inputs.docs_at(cond, name=spec.matched)
        if not docs or not all(measured(d) for d in docs):
            continue
        lp_all = np.concatenate([log_probs(d, sc) for d in docs])
        lp_z = np.concatenate([log_probs(d, sc, z) for d in docs])
        cr = np.stack([counts(d, sc) for d in docs])
        curve = tilt_curve(
            cb,
            pc,
            pool["sampling"]["n"],
            cr,
            docs[0]["sampling"]["n"],
            spec.w_grid,
            inf.levels.one_sided,
            inf.draws.resamples,
            inf.draws.seed,
            f"evalsets/{pool_name}",
        )
        res["conditions"][cond] = {
            "seeds": len(docs),
            "all": describe_logp(lp_all),
            "z": describe_logp(lp_z),
            "pass1": float(cr.mean() / docs[0]["sampling"]["n"]),
            "tilt_curve": curve,
            "tilt_law": tilt_law(pc, pool["sampling"]["n"], cr, docs[0]["sampling"]["n"], z, strata),
        }
    return res


def odds_tilts(base_counts, n_base: int, rl_counts, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per problem, the odds ratio of the trained rate (pooled over seeds) to the base's: the tilt w a
    selection would need, w = [r / (1 - r)] / [p / (1 - p)], each rate with +0.5 / +1 (continuity), so
    a problem solved every time is kept as a lower bound (censored: True) rather than dropped."""
    b = np.asarray(base_counts, float)
    rl = np.atleast_2d(np.asarray(rl_counts, float))
    x, m = rl.sum(axis=0), rl.shape[0] * n
    r, p = (x + 0.5) / (m + 1), (b + 0.5) / (n_base + 1)
    return (r / (1 - r)) / (p / (1 - p)), x == m


def tilt_law(
    pool_counts, n_pool: int, rl_counts, n: int, z: np.ndarray, strata: np.ndarray, rare: float = 0.05
) -> dict:
    """RL's own tilts at one sampler (the base's fresh pool against the trained draws, both at it) on
    Z and outside it, every problem kept: the quantiles per stratum outside Z, and the share of the
    comparable problems outside Z (Z's strata, base rate at most `rare`) whose tilt reaches Z's pooled
    tilt: one odds ratio from the trained successes summed over every seed and Z problem (of S * n * |Z|
    draws) against the pool's summed over Z (of n_pool * |Z|). Descriptive (post hoc for tiny_v6: change 57
    left the tilt law to a later change)."""
    w, censored = odds_tilts(pool_counts, n_pool, rl_counts, n)
    rl = np.atleast_2d(np.asarray(rl_counts))
    # Z as one problem per seed, (S, 1), so that odds_tilts sums the seeds too: a (1, S) row is one seed's tilt
    pooled = odds_tilts(
        [np.asarray(pool_counts)[z].sum()], n_pool * int(z.sum()), rl[:, z].sum(axis=1)[:, None], n * int(z.sum())
    )[0][0]
    rate = np.asarray(pool_counts) / n_pool
    comparable = ~z & np.isin(strata, list(set(strata[z].tolist()))) & (rate <= rare)
    per = {}
    for s in sorted({x for x in strata.tolist() if x is not None}, key=str):
        k = ~z & (strata == s)
        if k.any():
            per[str(s)] = {
                "problems": int(k.sum()),
                "censored": int(censored[k].sum()),
                "quantiles": dict(zip(("0.5", "0.9", "0.95"), np.quantile(w[k], [0.5, 0.9, 0.95]).tolist())),
            }
    z_tilts = dict(zip(("0.5", "0.9"), np.quantile(w[z], [0.5, 0.9]).tolist())) if z.any() else None
    return {
        "z_pooled_tilt": float(pooled),
        "z_tilts": z_tilts,
        "outside_z": per,
        "comparable": int(comparable.sum()),
        "rare": rare,
        "comparable_reaching_z": float(np.mean(w[comparable] >= pooled)) if comparable.any() else None,
        "comparable_censored": int(censored[comparable].sum()),
    }
