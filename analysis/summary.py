"""A run's answer in a few plain lines, and two runs side by side (`analyze_b.py --summary R`, `--compare R1 R2`).
Read-only: everything comes from the run's verdicts.json (an earlier layout through analysis/compat.py), nothing
is computed again. Each line is one measure, named the same way in every run so two runs line up; a measure a
run did not record reads "—". The registered answer comes first; every other label is named as secondary.
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis import compat
from analysis.compat import LEGACY
from analysis.report_format import ci3

NONE = "—"


def load(run: Path) -> dict:
    """The run's verdicts.json, upgraded to today's layout. FileNotFoundError / ValueError name the file."""
    src = Path(run) / "verdicts.json"
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such file (analyse the run first: python analyze_b.py --run {run})")
    try:
        return compat.upgrade(json.loads(src.read_text()))
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{src}: not a verdicts.json this version reads ({type(e).__name__}: {e})") from None


def share_ci(x) -> str:
    return f"[{x[0]:.3f}, {x[1]:.3f}]"


def sampler_words(s: dict | None) -> str:
    if not s:
        return ""
    return f"T {s['temperature']:g}" + (f", top-p {s['top_p']:g}" if s.get("top_p", 1.0) < 1.0 else "")


def primary_entry(doc: dict) -> dict | None:
    return next((e for e in doc.get("entries") or [] if e.get("primary")), None)


def registered(doc: dict) -> tuple[str, str]:
    """(what the registered question is, its answer), in the layout the run was analysed in."""
    pr = doc.get("primary")
    if doc.get("layout") in LEGACY:
        if not pr:
            return f"none (the {doc['layout']} layout asked criteria per entry)", NONE
        return pr["question"], f"selects: {'yes' if pr['answer'] else 'no'} (as recorded, {doc['layout']} layout)"
    where = f"{pr['condition']}, {pr['scoring']} scoring, step {pr['step']}"
    if pr.get("question") == "base_support":
        bs = doc.get("base_support") or {}
        return f"support at the evaluation sampler ({sampler_words(bs.get('sampling'))}; {where})", pr["label"]
    sp = doc.get("support") or {}
    if sp.get("registered"):
        tests = sp["conditions"][pr["condition"]]["tests"]
        answers = "; ".join(f"{s} sampler: support {t.get('answer') or t.get('skipped')}" for s, t in tests.items())
        return f"support at both samplers, change 42's test ({where})", answers
    if pr.get("ceiling_null", "selection") != "selection":
        return f"selection against the base null ({where})", pr["label"]
    return f"selection: pass@k against the selection null ({where})", pr["label"]


def is_secondary(doc: dict, label: str) -> bool:
    """Whether primary.<label> is a secondary reading (the registered answer is another)."""
    pr = doc.get("primary") or {}
    if label == "label":
        return pr.get("question") is None and bool((doc.get("support") or {}).get("registered"))
    return label in pr


def measures(doc: dict) -> list[tuple[str, str]]:
    """[(measure, value)] of one run, the registered answer first."""
    pr, e = doc.get("primary") or {}, primary_entry(doc)
    question, label = registered(doc)
    out = [("registered question", question), ("registered answer", label)]
    wc = (doc.get("within_correct") or {}).get("conditions", {}).get(pr.get("condition"))
    if wc and not wc.get("skipped"):
        how = "post hoc" if doc["within_correct"].get("post_hoc") else "registered"
        x, g = wc["exponent"], wc["gap"]
        out.append(
            (
                f"answer at the training sampler ({sampler_words(doc['within_correct'].get('sampling'))}, {how})",
                f"{wc['answer']} (exponent {x['alpha']:.3f} {ci3(x['interval'])}; outside gap {g['gap']:+.3f} {ci3(g['interval'])})",
            )
        )
    clean = (wc or {}).get("clean_gap")
    if clean and clean.get("gap") is not None:
        out.append(
            (
                "clean computation at T 1 (change 71)",
                f"{'more clean' if clean['more'] else 'not shown more clean'} ({clean['trained_share']:.3f} against the "
                f"base's {clean['base_share']:.3f}; gap {clean['gap']:+.3f} {ci3(clean['interval'])})",
            )
        )
    for key in ("label", "label_selection_null", "label_base_null"):
        if is_secondary(doc, key) and not (key == "label_selection_null" and not pr.get("question")):
            name = "the base-null label" if key == "label_base_null" else "the selection-null label"
            out.append((f"secondary: {name}", pr[key]))
    e = e or ((doc.get("entries") or [None])[0] if doc.get("layout") in LEGACY else None)
    if e:
        out.append(
            (
                "pass@1, base → RL" + ("" if e.get("primary") else f" ({e['condition']}, step {e['step']})"),
                f"{e['pass1_base']:.3f} → {e['pass1_rl']:.3f} (Δ {e['pass1_diff']:+.3f} {ci3(e['pass1_ci'])})",
            )
        )
        k = e.get("k") or e["k_max"]
        out.append((f"pass@{k}, base → RL", f"{e['passk_base']:.3f} → {e['passk_rl']:.3f}"))
    bsd = doc.get("base_support") or {}
    bs = (bsd.get("conditions") or {}).get(pr.get("condition"))
    if bs and bs.get("test"):
        t, how = bs["test"], "" if bsd.get("registered") else " (post hoc)"
        out.append(
            (
                f"correct and outside the base's nucleus{how}",
                f"{t['rate']:.3f} {share_ci(t['interval'])}: {t['answer']}",
            )
        )
    sp = doc.get("support") or {}
    if sp.get("conditions") and not sp.get("registered") and pr.get("condition") in sp["conditions"]:
        tests = sp["conditions"][pr["condition"]]["tests"]
        answers = "; ".join(f"{s} sampler: {t.get('answer') or t.get('skipped')}" for s, t in tests.items())
        out.append(("support, change 42's test (post hoc)", answers))
    col = ((doc.get("collapse") or {}).get("conditions") or {}).get(pr.get("condition"))
    if col:
        out.append(("collapsed seeds", f"{col['collapsed']} of {col['seeds']} {share_ci(col['ci'])}"))
    lock = (col or {}).get("lock_in", {}).get("test")
    if lock:
        out.append(
            (
                "cells locked on a wrong answer (lock-in)",
                f"{lock['locked_wrong']} of {lock['cells']}, {lock['lock_in_rate']:.3f} {share_ci(lock['lock_in_ci'])}",
            )
        )
    if e and e.get("seeds"):
        out.append(
            (
                "design",
                f"{e.get('n_problems', doc.get('n_problems'))} problems × {len(e['seeds'])} seed{'s' * (len(e['seeds']) > 1)}",
            )
        )
    missing = doc.get("missing") or []
    made = (doc.get("provenance") or {}).get("time")
    out.append(
        (
            "status",
            (f"PARTIAL: {len(missing)} evaluations missing" if missing else "complete")
            + (f"; analysed {made}" if made else "")
            + ("; an earlier layout" if doc.get("absent") else ""),
        )
    )
    return out


def summary(run: Path, doc: dict) -> str:
    rows = measures(doc)
    w = max(len(k) for k, _ in rows)
    return "\n".join([str(run)] + [f"  {k.ljust(w)}  {v}" for k, v in rows])


def compare(runs: list[Path], docs: list[dict]) -> str:
    """A Markdown table: one row per measure any run records, one column per run."""
    rows = [measures(d) for d in docs]
    by = [dict(r) for r in rows]
    first = {}
    for r in rows:
        for i, (k, _) in enumerate(r):
            first[k] = min(first.get(k, i), i)
    names = sorted(first, key=first.get)  # each measure where it first comes in any run
    lines = ["| measure | " + " | ".join(f"`{r}`" for r in runs) + " |", "|---" * (len(runs) + 1) + "|"]
    lines += [f"| {k} | " + " | ".join(m.get(k, NONE) for m in by) + " |" for k in names]
    return "\n".join(lines)
