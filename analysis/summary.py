"""A run's answer in a few plain lines, and two runs side by side (`analyze_b.py --summary R`, `--compare R1 R2`).
Read-only: everything comes from the run's verdicts.json (an earlier layout through analysis/compat.py), nothing
is computed again. Each line is one measure, named the same way in every run so two runs line up; a measure a
run did not record reads "—". The registered answer comes first; every other label is named as secondary.
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis import compat, within_correct
from analysis.compat import LEGACY
from analysis.report_format import ci3

NONE = "—"
ONE_SIDED = 0.025  # the registered one-sided level (PLAN.md section 7)


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
        return f"support at both samplers, change 42's test ({where})", support_answers(tests, "support ")
    if pr.get("ceiling_null", "selection") != "selection":
        return f"selection against the base null ({where})", pr["label"]
    return f"selection: pass@k against the selection null ({where})", pr["label"]


def support_answers(tests: dict, word: str = "") -> str:
    """Change 42's answers at each sampler, in one phrase."""
    return "; ".join(f"{s} sampler: {word}{t.get('answer') or t.get('skipped')}" for s, t in tests.items())


def training_sampler_lines(doc: dict, cond: str | None) -> list[tuple[str, str]]:
    """The answer at T 1 and, where registered, the clean-computation gap (PLAN.md section 7e)."""
    wcd = doc.get("within_correct") or {}
    wc = (wcd.get("conditions") or {}).get(cond)
    if not wc or wc.get("skipped"):
        return []
    how = "post hoc" if wcd.get("post_hoc") else "registered"
    x, g = wc["exponent"], wc["gap"]
    out = [
        (
            f"answer at the training sampler ({sampler_words(wcd.get('sampling'))}, {how})",
            f"{wc['answer']} (exponent {x['alpha']:.3f} {ci3(x['interval'])}; outside gap {g['gap']:+.3f} {ci3(g['interval'])})",
        )
    ]
    if x.get("alpha") is not None:
        reading = within_correct.exponent_reading(x["p_below"], x["p_above"], x["p_within"], ONE_SIDED)
        out.append(("the exponent's reading at T 1 (§12; registered by smollm2_v3 only)", reading))
    clean = wc.get("clean_gap")
    if clean and clean.get("gap") is not None:
        word = "more clean" if clean["more"] else "not shown more clean"
        out.append(
            (
                f"clean computation at T 1 ({how})",
                f"{word} ({clean['trained_share']:.3f} against the base's {clean['base_share']:.3f}; "
                f"gap {clean['gap']:+.3f} {ci3(clean['interval'])})",
            )
        )
    return out


def secondary_lines(doc: dict) -> list[tuple[str, str]]:
    """Every label of primary that is not the registered answer, named as secondary."""
    pr = doc.get("primary") or {}
    out = []
    if pr.get("question") is None and (doc.get("support") or {}).get("registered") and "label" in pr:
        out.append(("secondary: the selection-null label", pr["label"]))  # change 42's support was the answer
    if pr.get("question") and pr.get("label_selection_null"):
        out.append(("secondary: the selection-null label", pr["label_selection_null"]))
    if pr.get("label_base_null"):
        out.append(("secondary: the base-null label", pr["label_base_null"]))
    return out


def pass_lines(e: dict | None) -> list[tuple[str, str]]:
    if not e:
        return []
    where = "" if e.get("primary") else f" ({e['condition']}, step {e['step']})"
    k = e.get("k") or e["k_max"]
    return [
        (
            f"pass@1, base → RL{where}",
            f"{e['pass1_base']:.3f} → {e['pass1_rl']:.3f} (Δ {e['pass1_diff']:+.3f} {ci3(e['pass1_ci'])})",
        ),
        (f"pass@{k}, base → RL", f"{e['passk_base']:.3f} → {e['passk_rl']:.3f}"),
    ]


def support_lines(doc: dict, cond: str | None) -> list[tuple[str, str]]:
    """Change 57's measure at the evaluation sampler, and change 42's test where it ran post hoc."""
    out = []
    bsd = doc.get("base_support") or {}
    bs = (bsd.get("conditions") or {}).get(cond)
    if bs and bs.get("test"):
        t, how = bs["test"], "" if bsd.get("registered") else " (post hoc)"
        out.append(
            (
                f"correct and outside the base's nucleus{how}",
                f"{t['rate']:.3f} {share_ci(t['interval'])}: {t['answer']}",
            )
        )
    sp = doc.get("support") or {}
    if sp.get("conditions") and not sp.get("registered") and cond in sp["conditions"]:
        out.append(("support, change 42's test (post hoc)", support_answers(sp["conditions"][cond]["tests"])))
    return out


def collapse_lines(doc: dict, cond: str | None) -> list[tuple[str, str]]:
    col = ((doc.get("collapse") or {}).get("conditions") or {}).get(cond)
    if not col:
        return []
    out = [("collapsed seeds", f"{col['collapsed']} of {col['seeds']} {share_ci(col['ci'])}")]
    lock = (col.get("lock_in") or {}).get("test")
    if lock:
        rate = f"{lock['lock_in_rate']:.3f} {share_ci(lock['lock_in_ci'])}"
        out.append(("cells locked on a wrong answer (lock-in)", f"{lock['locked_wrong']} of {lock['cells']}, {rate}"))
    return out


def status_lines(doc: dict, e: dict | None) -> list[tuple[str, str]]:
    out = []
    if e and e.get("seeds"):
        n = len(e["seeds"])
        out.append(("design", f"{e.get('n_problems', doc.get('n_problems'))} problems × {n} seed{'s' * (n > 1)}"))
    missing = doc.get("missing") or []
    made = (doc.get("provenance") or {}).get("time")
    status = (
        (f"PARTIAL: {len(missing)} evaluations missing" if missing else "complete")
        + (f"; analysed {made}" if made else "")
        + ("; an earlier layout" if doc.get("absent") else "")
    )
    return out + [("status", status)]


def measures(doc: dict) -> list[tuple[str, str]]:
    """[(measure, value)] of one run, the registered answer first."""
    cond = (doc.get("primary") or {}).get("condition")
    e = primary_entry(doc) or ((doc.get("entries") or [None])[0] if doc.get("layout") in LEGACY else None)
    question, label = registered(doc)
    return (
        [("registered question", question), ("registered answer", label)]
        + training_sampler_lines(doc, cond)
        + secondary_lines(doc)
        + pass_lines(e)
        + support_lines(doc, cond)
        + collapse_lines(doc, cond)
        + status_lines(doc, e)
    )


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
