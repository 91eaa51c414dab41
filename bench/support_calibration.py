"""What the base-support test (PLAN_CHANGES.md change 57, analysis/base_support.decide) answers on worlds whose
truth is built in: per arm, SIMS simulated studies of S seeds x N problems x n samples, each judged by the
registered test; the rate of each answer with its 95% Clopper-Pearson interval. Then, exactly, what a
selection of the untempered base does at the evaluation sampler (a one-token toy): where its tilt puts
the correct token inside the T 0.6 / top-p 0.95 nucleus that the base's excludes.

    python bench/support_calibration.py [--sims 200] [--resamples 2000]

Arms (q: each sample's chance of being correct and outside; every other sample inside):
  null-rounding     q = 0, but 0.2% of correct responses sit within 1e-6 of the nucleus' edge, half of
                    them just past it: the registered tolerance (1e-4) against the exact rule (0)
  uniform           q = 0.01 on every problem
  one-type          q = 0.05 on a quarter of the problems (one stratum), 0 elsewhere
  seed-spread       logit q = logit 0.01 + a seed effect of SD 0.9 (the seed-logit SD measured, issue 51)
  collapsed-seed    one-type with one of the seeds at q = 0
  taught-subset     Z holds 26 problems; 8 of them taught (q = 0.5), the 18 reachable ones and the rest 0
  one-seed-stray    seed 0 alone at q = 0.05 on 10 problems
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as st
from scipy.special import expit, logit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis import verdict  # noqa: E402
from analysis.base_support import decide  # noqa: E402

S, N, n = 6, 384, 32
ALPHA, MARGIN, LEVEL, TOL = 0.025, 0.005, 0.95, 1e-4


def arm_rates(name: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """(q (S, N), the exact rule's extra chance per sample of an edge token read outside, or None)."""
    q = np.zeros((S, N))
    if name == "null-rounding":
        return q, np.full(
            (S, N), 0.5 * 0.002 * 0.5
        )  # half of the samples correct, 0.2% of those at the edge, half past it
    if name == "uniform":
        q[:] = 0.01
    elif name == "one-type":
        q[:, : N // 4] = 0.05
    elif name == "seed-spread":
        q[:] = expit(logit(0.01) + rng.normal(0, 0.9, size=(S, 1)))
    elif name == "collapsed-seed":
        q[1:, : N // 4] = 0.05
    elif name == "taught-subset":
        q[:, :8] = 0.5
    elif name == "one-seed-stray":
        q[0, :10] = 0.05
    return q, None


def simulate(name: str, sims: int, resamples: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    counts = {
        "tolerance": {"expanded": 0, "kept": 0, "not shown": 0},
        "exact rule": {"expanded": 0, "kept": 0, "not shown": 0},
    }
    for i in range(sims):
        q, edge = arm_rates(name, rng)
        out = rng.binomial(n, q)  # (S, N) correct and outside beyond the tolerance
        draws = verdict.Draws(N, resamples, seed * 100_000 + i)
        counts["tolerance"][decide(out / n, draws, ALPHA, MARGIN, LEVEL)["answer"]] += 1
        if edge is not None:  # the exact rule also counts the tokens just past the edge
            exact = out + rng.binomial(n, edge)
            counts["exact rule"][decide(exact / n, draws, ALPHA, MARGIN, LEVEL)["answer"]] += 1
    return {rule: c for rule, c in counts.items() if sum(c.values())}


def clopper_pearson(x: int, m: int) -> tuple[float, float]:
    lo = 0.0 if x == 0 else float(st.beta.ppf(0.025, x, m - x + 1))
    hi = 1.0 if x == m else float(st.beta.ppf(0.975, x + 1, m - x))
    return lo, hi


def selection_toy(ws=(1, 3, 10, 30, 100, 300, 1000)) -> list[str]:
    """One position, ten tokens: the base's wrong borrow digit at 0.90, the correct one at 0.016 (FACTS.md:
    the committed base's ~1.6% at T 1), the rest sharing 0.084. A selection tilts the correct token by w at
    T 1 (p' = w p / (w p + 1 - p), the others scaled down alike); sampled at T 0.6, top-p 0.95, is it in
    the nucleus, and with what chance is it drawn? The base's own nucleus excludes it."""
    import torch

    from method.decoding import filter_logits

    base = np.array([0.90, 0.016] + [0.084 / 8] * 8)
    lines = []
    for w in ws:
        p = base.copy()
        p[1] = w * base[1] / (w * base[1] + 1 - base[1])
        p[[0] + list(range(2, 10))] *= (1 - p[1]) / (1 - base[1])
        z = torch.tensor(np.log(p), dtype=torch.float32)[None] / 0.6
        kept = ~filter_logits(z, 0, 0.95).isinf()[0]
        drawn = float(torch.where(kept, z, torch.tensor(float("-inf"))).softmax(-1)[0, 1]) if kept[1] else 0.0
        lines.append(f"| {w:g} | {p[1]:.3f} | {'yes' if kept[1] else 'no'} | {drawn:.3f} |")
    return [
        "| tilt w at T 1 | correct token at T 1 | inside the T 0.6 / top-p 0.95 nucleus | drawn at T 0.6 |",
        "|---|---|---|---|",
    ] + lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The base-support test on worlds whose truth is built in.")
    p.add_argument("--sims", type=int, default=200)
    p.add_argument("--resamples", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    print(
        f"| arm | rule | expanded | kept | not shown |   ({a.sims} studies of {S} seeds x {N} problems x n {n}; "
        f"{a.resamples} replicates; rates with 95% Clopper-Pearson intervals)"
    )
    print("|---|---|---|---|---|")
    for name in (
        "null-rounding",
        "uniform",
        "one-type",
        "seed-spread",
        "collapsed-seed",
        "taught-subset",
        "one-seed-stray",
    ):
        for rule, c in simulate(name, a.sims, a.resamples, a.seed).items():
            cells = [
                f"{c[k] / a.sims:.3f} [{clopper_pearson(c[k], a.sims)[0]:.3f}, {clopper_pearson(c[k], a.sims)[1]:.3f}]"
                for k in ("expanded", "kept", "not shown")
            ]
            print(f"| {name} | {rule} | " + " | ".join(cells) + " |", flush=True)
    print()
    print("\n".join(selection_toy()))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
