"""A recipe pilot's rule for the learning rate (PLAN_CHANGES.md change 70): the best dev pass@1 among the rates
that neither lock in nor lose their entropy. Change 61's rule took the best dev pass@1 outright and chose a
rate whose models answer most problems one way, a quarter of them wrongly (change 70); this rule admits a
rate only when every one of its seeds stays inside two registered bounds:

- at the last dev check, at most `max_lock_in` of the dev problems are locked on a wrong answer
  (analysis.concentration: one answer holds >= 90% of the problem's samples, and it is wrong);
- over the last third of the training steps, the rollouts' mean token entropy is at least `min_entropy` nats;

and no seed collapsed (change 59). Among the admissible rates whose two-seed mean dev loose pass@1 at the last
step is above the mean at step 0, the highest mean wins; means within `tie` of the best are tied, and a tie
goes to the smaller rate. No admissible rising rate: no choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TIE = 1 / 256  # one sample in 32 dev problems x 8 samples


@dataclass(frozen=True)
class Bounds:
    max_lock_in: float = 0.10  # share of dev problems locked on a wrong answer at the last dev check
    min_entropy: float = 1.0  # nats: mean rollout token entropy over the last third of the steps
    tie: float = TIE


def mean(xs) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def last_third(log: list[dict], key: str) -> float:
    """The column's mean over the last third of the steps (the last ceil(n/3) rows)."""
    n = len(log)
    return mean([r[key] for r in log[n - math.ceil(n / 3) :]]) if n else math.nan


def seed_reading(log: list[dict], dev: list[dict], collapsed: bool | None, last: int) -> dict:
    """One training run's inputs to the rule: dev loose pass@1 at step 0 and at `last`, the lock-in at `last`,
    the late entropy and whether the run collapsed."""
    at = {int(r["step"]): r for r in dev}
    row0, rowl = at.get(0, {}), at.get(last, {})
    return {
        "pass1_step0": row0.get("loose_pass1", math.nan),
        "pass1_last": rowl.get("loose_pass1", math.nan),
        "lock_in_last": rowl.get("locked_wrong", math.nan),
        "locked_last": rowl.get("locked", math.nan),
        "entropy_late": last_third(log, "entropy_mean"),
        "collapsed": collapsed,
    }


def why_out(seeds: list[dict], bounds: Bounds) -> list[str]:
    """The bounds a rate's seeds break ([] = admissible); a value not measured breaks its bound."""
    out = []
    lock = [s["lock_in_last"] for s in seeds]
    ent = [s["entropy_late"] for s in seeds]
    if any(math.isnan(x) or x > bounds.max_lock_in for x in lock):
        out.append(f"lock-in {max(lock):.3f} > {bounds.max_lock_in:g} (or not measured)")
    if any(math.isnan(x) or x < bounds.min_entropy for x in ent):
        out.append(f"late entropy {min(ent):.2f} < {bounds.min_entropy:g} nats (or not measured)")
    if any(s["collapsed"] for s in seeds):
        out.append("a collapsed seed")
    return out


def choose(by_rate: dict[str, tuple[float, list[dict]]], bounds: Bounds = Bounds()) -> dict:
    """by_rate: {condition: (lr, [seed_reading, ...])} -> {by_rate, chosen, lr, tied, why}."""
    table = {}
    for name, (lr, seeds) in by_rate.items():
        table[name] = {
            "lr": lr,
            "seeds": len(seeds),
            "mean_step0": mean([s["pass1_step0"] for s in seeds]),
            "mean_last": mean([s["pass1_last"] for s in seeds]),
            "out": why_out(seeds, bounds),
        }
    pool = {n: v for n, v in table.items() if not v["out"] and v["mean_last"] > v["mean_step0"]}
    if not pool:
        return {
            "by_rate": table,
            "chosen": None,
            "lr": None,
            "tied": [],
            "why": "no admissible rate rises above step 0",
        }
    best = max(v["mean_last"] for v in pool.values())
    tied = sorted(n for n, v in pool.items() if v["mean_last"] >= best - bounds.tie)
    chosen = min(tied, key=lambda n: pool[n]["lr"])
    return {"by_rate": table, "chosen": chosen, "lr": pool[chosen]["lr"], "tied": tied, "why": None}
