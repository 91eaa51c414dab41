"""A verdicts.json of an earlier layout, read into what the printer needs (as
orchestration/records.from_record does for configs): upgrade(doc) fills only what the document
itself determines and names what it does not hold, never a number it did not record.

The layouts, oldest first, and the committed runs written in each:
  first     criteria 1-3, no primary question (results/tiny, tiny_first_run)
  sentence  the primary question as a recorded sentence and yes/no answer, before the selection
            null and the calibration (results/smollm2, tiny_seeds, tiny_v3)
  no-inputs today's entries and primary, before verdicts.json kept the run's inputs and warnings
            (results/tiny_v3_calibrated, tiny_v4, tiny_v4_support, tiny_v5, smollm2_study)
  current   everything analysis/document.py names
The first two are printed by analysis/report_legacy.py (their entries hold other tests than
today's); the third by analysis/report.py, each section it has no data for saying so.
"""

from __future__ import annotations

from analysis.document import PRINTED

LEGACY = ("first", "sentence")
# What each earlier layout did not record, for the note at the top of its reprint.
ABSENT = {
    "first": [
        "the primary question and its label",
        "the seeds",
        "the multiplicity correction",
        "the selection null",
        "the calibration",
        "the warnings",
        "the run's inputs (learning rate, problem selection, probes)",
        "the list of figures",
    ],
    "sentence": [
        "the selection null and its labels",
        "the calibration",
        "the warnings",
        "the run's inputs (learning rate, problem selection, probes)",
        "the list of figures",
    ],
    "no-inputs": ["the warnings", "the run's inputs (learning rate, problem selection, probes)"],
}
NOT_RECORDED = "not recorded by this run (its verdicts.json predates it)"
NO_FIGURES = (
    "Not listed in this verdicts.json, and not drawn again by `--report-only`: figures are drawn from the run's evaluation "
    "files, which the document does not hold (`analyze_b.py --run RUN --out NEW_FOLDER` draws them)."
)


class UnknownLayout(ValueError):
    """A verdicts.json whose layout is none of the above: refused, never printed wrong."""


def layout(doc: dict) -> str:
    """Which of the layouts above `doc` is written in; UnknownLayout naming what it lacks otherwise."""
    if not isinstance(doc, dict):
        raise UnknownLayout(f"not a JSON object but a {type(doc).__name__}")
    if all(k in doc for k in PRINTED):
        return "current" if "inputs" in doc and "warnings" in doc else "no-inputs"
    primary = doc.get("primary")
    if isinstance(primary, dict) and "sentence" in primary:
        need = ("entries", "n", "k_max", "n_problems", "alpha", "equivalence_margin", "bootstrap", "design")
        layout_name = "sentence"
    elif "primary" not in doc:
        need = ("entries", "n", "k_max", "n_problems", "resamples", "seed", "ci")
        layout_name = "first"
    else:
        need, layout_name = PRINTED, "current"
    missing = [k for k in need if k not in doc]
    if missing:
        raise UnknownLayout(
            f"a layout neither the report's printer nor analysis/compat.py reads (no {', '.join(missing)})"
        )
    return layout_name


def upgrade(doc: dict) -> dict:
    """`doc` in a layout the printers read: a new dict, the document left as it is. Adds `layout`
    (the name above) and `absent` (what this layout did not record); for the two oldest layouts also
    the sizes, levels and bootstrap in today's names, taken from the keys that held them then."""
    name = layout(doc)
    out = {**doc, "layout": name, "absent": ABSENT.get(name, [])}
    if name == "no-inputs":
        # the printer's support section says "no support test" for a missing key: here it was not asked
        out.setdefault("support", {"skipped": NOT_RECORDED})
    if name not in LEGACY:
        return out
    out["sizes"] = {"n_problems": doc["n_problems"], "n": doc["n"], "k_max": doc["k_max"]}
    if name == "first":
        out["bootstrap"] = {
            "resamples": doc["resamples"],
            "seed": doc["seed"],
            "interval": f"{doc['ci']:.0%} percentile",
        }
        out["levels"] = {"interval": doc["ci"]}
    else:
        a = doc["alpha"]
        out["levels"] = {
            "one_sided": a["one_sided"],
            "tost": a["tost"],
            "interval": a["interval"],
            "margin": doc["equivalence_margin"],
        }
    out["calibration"] = {"skipped": NOT_RECORDED}
    return out
