"""The report's formats: one helper for every markdown table, and how numbers, intervals, p-values,
rates and crossovers are written (analysis/report.py, analysis/report_secondary.py)."""

from __future__ import annotations

import os


def table(headers: list[str], rows: list[list]) -> list[str]:
    """A markdown table; cells are shown with str()."""
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + [
        "| " + " | ".join(str(c) for c in r) + " |" for r in rows
    ]


def ci3(x) -> str:
    return "—" if x is None else f"[{x[0]:+.3f}, {x[1]:+.3f}]"


def p4(p) -> str:
    return "—" if p is None else f"{p:.4f}"


def f3(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def yn(b) -> str:
    if b is None:
        return "—"
    return "yes" if b else "no"


def opt(x, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def rate(r: dict) -> str:
    """A rate over re-splits with its 95% Clopper-Pearson interval."""
    return f"{r['rate']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"


def share(x: float) -> str:
    if 0 < x < 0.005:
        return "<1%"
    if 0.995 < x < 1:
        return ">99%"
    return f"{x:.0%}"


def ids(ids: list, most: int = 12) -> str:
    """Problem ids, their shared 'task/split/' prefix left off (arith-2x1/test/7 -> 7)."""
    ids = [str(i) for i in ids]
    cut = os.path.commonprefix(ids).rfind("/") + 1 if len(ids) > 0 and all("/" in i for i in ids) else 0
    # without a shared prefix, each id's part after its last '/' (rfind is -1 without one: the whole id)
    ids = [i[cut:] if cut else i[i.rfind("/") + 1 :] for i in ids]
    shown = ", ".join(ids[:most])
    return (shown + f", … ({len(ids) - most} more)") if len(ids) > most else (shown or "—")


def crossover_words(c: dict) -> str:
    pt = c["point"]
    head = f"k = {pt['k']}" if pt["outcome"] == "crosses" else pt["outcome"]
    cross = f"crosses {share(c['cross_share'])}" + (
        f" (median k {c['median']:g}, 95% {c['ci'][0]:g}–{c['ci'][1]:g})" if c["median"] is not None else ""
    )
    return (
        f"{head}; replicates: {cross}, always above {share(c['always_share'])}, never above {share(c['never_share'])}"
    )
