"""What the within-correct test at the training sampler (PLAN.md section 7e, analysis/within_correct.py) and
change 57's primary at the evaluation sampler (analysis/base_support.decide) answer on bases whose every
response's probability is exact (analysis/token_tree.py). Per arm, SIMS simulated studies of S 6 seeds x N
problems: n 32 trained samples per seed and problem at T 1 and a base pool of 192 per problem at T 1 (its correct
ones are the base's side), judged by (a) the three-way answer (the exponent alpha, margin 0.1; the outside gap D,
margin 0.02; one-sided 0.025) and (b) change 57's primary: n 32 samples per seed and problem from the trained
policy re-read at T 0.6 / top-p 0.95, r = the share correct and outside the base's nucleus there, margin 0.005.
Printed: each answer's rate with its 95% Clopper-Pearson interval, the mean alpha and D, pass@1 at T 1. Every
seed's samples are drawn token by token with the same uniforms, as the evaluations' keyed streams draw them
(PLAN_CHANGES.md change 67): the seeds' responses to a problem are dependent; the base's pool has its own.

    python bench/within_correct_calibration.py [--sims 200] [--problems 128] [--samples 32] [--pool 192] [--quick]
    python bench/within_correct_calibration.py --problems 384 --samples 16 --pool 128   # results/tiny_v7's design

The world: one tree (V 5, depth 4, node logits ~ Normal(0, 2)) per problem, each response correct with its
problem's rate ~ Beta(2, 8) (the base's T 1 pass@1 about 0.2). Every arm shares it, fixed across its studies;
only the draws change. Arms (truth: what the test should read):
  reweight-w3, -w10, -w50  pi ∝ pi_base w^r (reweighting)
  power-a1.5, power-a2     pi ∝ pi_base^a (sharpening; alpha = a)
  pg-flow                  the exact softmax policy-gradient flow from the base to pass@1 0.6 per problem
                           (sharpening expected: it moves likely correct answers most)
  taught-rare              w 5, and a factor 30 on the correct responses outside the base's nucleus on a
                           third of the problems (toward-rare)
  seed-spread              each seed its own w = exp(Normal(log 10, 1)), drawn per study (reweighting)
  unreachable              a quarter of the problems at a per-response rate of 0.003 (base pass@1 median
                           ~1e-4: the pool almost never solves them), w 30 everywhere (reweighting)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis import token_tree, verdict, within_correct  # noqa: E402
from analysis.base_support import decide  # noqa: E402
from analysis.calibration import clopper_pearson  # noqa: E402
from analysis.within_correct import NOT_SHOWN, REWEIGHTING, SHARPENING, TOWARD_RARE, Responses  # noqa: E402

S, N_EVAL = 6, 32  # seeds; samples per seed and problem at the evaluation sampler (change 57's primary)
V, L, SCALE, RATES = 5, 4, 2.0, (2.0, 8.0)  # the trees; per-problem correctness rate ~ Beta(RATES)
EVAL = (0.6, 0.95)  # the evaluation sampler: temperature, top-p
ALPHA, LEVEL, EXPONENT_MARGIN, GAP_MARGIN, KEPT_MARGIN = 0.025, 0.95, 0.1, 0.02, 0.005
UNREACHABLE_RATE = 0.003
THREE_WAY = (TOWARD_RARE, SHARPENING, REWEIGHTING, NOT_SHOWN)
PRIMARY = ("expanded", "kept", "not shown")


@dataclass(frozen=True)
class World:
    tree: token_tree.TreeWorld
    base: np.ndarray  # (N, V^L) log pi_base at T 1
    outside: np.ndarray  # (N, V^L) bool: a token outside the base's evaluation nucleus

    @property
    def correct(self) -> np.ndarray:
        return self.tree.correct


def make_world(N: int, seed: int, unreachable: bool) -> World:
    rates = np.random.default_rng([seed, 0]).beta(*RATES, size=N)
    if unreachable:  # the same trees; a quarter's responses almost never correct
        rates[: N // 4] = UNREACHABLE_RATE
    tree = token_tree.make_world(N, V, L, SCALE, rates, seed)
    return World(tree, token_tree.base_log_probs(tree), token_tree.outside(tree, *EVAL))


def taught_rare(w: World) -> np.ndarray:
    q = token_tree.reweighting(w.base, w.correct, 5.0)
    third = slice(0, len(q) // 3)
    q[third] = token_tree.normalised(q[third] + np.log(30.0) * (w.correct & w.outside)[third])
    return q


def seed_spread(w: World, rng: np.random.Generator) -> np.ndarray:
    tilts = np.exp(rng.normal(np.log(10.0), 1.0, size=S))
    return np.stack([token_tree.reweighting(w.base, w.correct, t) for t in tilts])


# name: (truth, the trained policy's log pi at T 1, (N, V^L) or per seed (S, N, V^L); drawn per study)
ARMS = {
    "reweight-w3": (REWEIGHTING, lambda w: token_tree.reweighting(w.base, w.correct, 3.0), False),
    "reweight-w10": (REWEIGHTING, lambda w: token_tree.reweighting(w.base, w.correct, 10.0), False),
    "reweight-w50": (REWEIGHTING, lambda w: token_tree.reweighting(w.base, w.correct, 50.0), False),
    "power-a1.5": (SHARPENING, lambda w: token_tree.power(w.base, 1.5), False),
    "power-a2": (SHARPENING, lambda w: token_tree.power(w.base, 2.0), False),
    "pg-flow": (SHARPENING, lambda w: token_tree.policy_gradient_flow(w.base, w.correct, 0.6), False),
    "taught-rare": (TOWARD_RARE, taught_rare, False),
    "seed-spread": (REWEIGHTING, seed_spread, True),
    "unreachable": (REWEIGHTING, lambda w: token_tree.reweighting(w.base, w.correct, 30.0), False),
}


def correct_responses(w: World, policies: np.ndarray, k: int, rng: np.random.Generator) -> Responses:
    """The correct ones of k draws per problem from each of policies (K, N, V^L), the K as seeds, every seed
    drawn token by token with the same uniforms (as the evaluations' keyed draw: dependent across seeds)."""
    u = rng.random((w.base.shape[0], k, L))  # (N, k, L) shared by the seeds
    idx = np.stack([token_tree.draw_keyed(w.tree, q, u) for q in policies])  # (K, N, k)
    s, i, _ = np.indices(idx.shape)
    keep = w.correct[i, idx]
    s, i, y = s[keep], i[keep], idx[keep]
    return Responses(s, i, w.base[i, y], policies[s, i, y], np.full(len(y), L), w.outside[i, y])


def study(w: World, q: np.ndarray, q_eval: np.ndarray, rng, draws: verdict.Draws, a: argparse.Namespace) -> dict:
    """One study: the three-way answer at T 1 and change 57's primary at the evaluation sampler."""
    N = w.base.shape[0]
    trained = correct_responses(w, q, a.samples, rng)
    pool = correct_responses(w, w.base[None], a.pool, rng)
    exp = within_correct.exponent(trained, S, N, draws, EXPONENT_MARGIN, LEVEL)
    gap = within_correct.outside_gap(trained, pool, S, N, draws, GAP_MARGIN, LEVEL, a.permutations)
    hit = w.correct & w.outside  # (N, V^L) correct and outside the base's nucleus
    u = rng.random((N, N_EVAL, L))  # the test set's keyed uniforms, shared by the seeds
    r = np.stack([np.take_along_axis(hit, token_tree.draw_keyed(w.tree, qe, u), axis=1).mean(1) for qe in q_eval])
    return {
        "answer": within_correct.answer(exp, gap, ALPHA).answer,
        "alpha": exp.alpha,
        "gap": gap.gap,
        "primary": decide(r, draws, ALPHA, KEPT_MARGIN, LEVEL)["answer"],
    }


def simulate(k: int, name: str, a: argparse.Namespace) -> dict:
    truth, policy, per_study = ARMS[name]
    t0 = time.perf_counter()
    w = make_world(a.problems, a.seed, name == "unreachable")
    shape = (S,) + w.base.shape

    def eval_policies(q):  # each seed's policy re-read at the evaluation sampler, token by token
        return np.stack([token_tree.sampler_log_probs(w.tree, qs, *EVAL) for qs in q])

    if not per_study:
        q = np.broadcast_to(policy(w), shape)
        q_eval = np.broadcast_to(eval_policies(q[:1]), shape)
    rows, pass1 = [], []
    for j in range(a.sims):
        rng = np.random.default_rng([a.seed, k, j])
        if per_study:
            q = policy(w, rng)
            q_eval = eval_policies(q)
        draws = verdict.Draws(a.problems, a.resamples, (a.seed * 100 + k) * 100_000 + j)
        rows.append(study(w, q, q_eval, rng, draws, a))
        pass1.append(float((np.exp(q) * w.correct).sum(-1).mean()))
    three = {x: sum(r["answer"] == x for r in rows) for x in THREE_WAY}
    primary = {x: sum(r["primary"] == x for r in rows) for x in PRIMARY}
    alphas = [r["alpha"] for r in rows if r["alpha"] is not None]
    gaps = [r["gap"] for r in rows if r["gap"] is not None]
    return {
        "truth": truth,
        "sims": a.sims,
        "three_way": {x: {"count": c, "ci": clopper_pearson(c, a.sims)} for x, c in three.items()},
        "mean_alpha": float(np.mean(alphas)) if alphas else None,
        "mean_gap": float(np.mean(gaps)) if gaps else None,
        "undefined": {"alpha": a.sims - len(alphas), "gap": a.sims - len(gaps)},
        "primary": {x: {"count": c, "ci": clopper_pearson(c, a.sims)} for x, c in primary.items()},
        "pass1_t1": {"base": float((np.exp(w.base) * w.correct).sum(-1).mean()), "trained": float(np.mean(pass1))},
        "seconds": time.perf_counter() - t0,
    }


def cell(c: dict, sims: int) -> str:
    return f"{c['count'] / sims:.3f} [{c['ci'][0]:.3f}, {c['ci'][1]:.3f}]"


def table_row(name: str, r: dict) -> str:
    s = r["sims"]
    alpha = "–" if r["mean_alpha"] is None else f"{r['mean_alpha']:.3f}"
    gap = "–" if r["mean_gap"] is None else f"{r['mean_gap']:+.4f}"
    cells = [name, r["truth"], str(s)] + [cell(r["three_way"][x], s) for x in THREE_WAY]
    cells += [alpha, gap, cell(r["primary"]["expanded"], s)]
    cells.append(f"{r['pass1_t1']['base']:.3f} → {r['pass1_t1']['trained']:.3f}")
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The within-correct test at T 1 on bases whose truth is built in.")
    p.add_argument("--sims", type=int, default=200)
    p.add_argument("--problems", type=int, default=128)
    p.add_argument("--samples", type=int, default=32, help="trained samples per seed and problem at T 1")
    p.add_argument("--pool", type=int, default=192, help="the base's samples per problem at T 1")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--permutations", type=int, default=999)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--quick", action="store_true", help="a smoke check: 20 studies of 32 problems")
    p.add_argument("--out", type=Path, help="also write the results as JSON here")
    a = p.parse_args(argv)
    if a.quick:
        a.sims, a.problems = 20, 32
    t0 = time.perf_counter()
    print(
        f"({a.sims} studies per arm of {S} seeds x {a.problems} problems x n {a.samples} at T 1 (n {N_EVAL} at the "
        f"evaluation sampler), a base pool of {a.pool}; "
        f"{a.resamples} bootstrap replicates, {a.permutations} permutations; rates with 95% Clopper-Pearson intervals)"
    )
    print(
        "| arm | truth | sims | toward-rare | sharpening | reweighting | not shown | mean alpha | mean D "
        "| change 57 expanded | pass@1 T 1 base → trained |"
    )
    print("|---" * 11 + "|")
    results = {}
    for k, name in enumerate(ARMS):
        if name in a.arms:
            results[name] = simulate(k, name, a)
            print(table_row(name, results[name]), flush=True)
    seconds = time.perf_counter() - t0
    print(f"\n{seconds:.0f} s")
    if a.out:
        revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        made = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()}}
        made |= {"revision": revision.strip(), "numpy": np.__version__, "seconds": seconds}
        a.out.write_text(json.dumps({"made": made, "arms": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
