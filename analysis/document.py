"""verdicts.json's layout, named once: the keys an entry (one condition x checkpoint x scoring of
PLAN.md section 7) and the primary answer hold, for the analysis that writes them
(analysis/entries.py, analysis/verdict.py) and the printer that reads them (analysis/report.py).
tests/test_report.py checks that every entry the analysis makes has exactly these keys and that the
printer reads no other."""

from __future__ import annotations

from typing import TypedDict

DIVERSITY = (  # the diversity fields of an evaluation file's problems, and how they are named where shown
    ("distinct_answers", "distinct answers"),
    ("answer_entropy", "answer entropy (nats)"),
    ("token_entropy", "token entropy at T = 1 (nats)"),
)
MODEL_BASED = (
    "model-based (beta-binomial)"  # what every value the beta-binomial fit predicts is called where it is shown
)


def key_fields(key) -> dict:
    """A model's fields in a row of the document: the base's, or (condition, seed, step)'s."""
    return (
        {"condition": "base", "seed": None, "step": None}
        if key is None
        else {"condition": key[0], "seed": key[1], "step": key[2]}
    )


def model_label(key) -> str:
    """A model's name where it is shown: the base, or (condition, seed, step)'s."""
    return "base" if key is None else f"{key[0]} s{key[1]} step {key[2]}"


class Entry(TypedDict):
    """One entry of verdicts.json's `entries`: verdict.compare's tests and label, then what
    entries.entry and the Holm step add."""

    condition: str
    step: int
    scoring: str
    seeds: list[int]
    n_problems: int
    n: int  # samples per trained model and problem
    n_base: int  # samples per base problem
    k: int  # the ceiling's k (k_max)
    k_max: int
    pass1_base: float
    pass1_rl: float
    pass1_diff: float
    pass1_ci: list[float]
    passk_base: float
    passk_rl: float
    passk_diff: float
    passk_ci: list[float]
    passk_ci90: list[float]
    rises: dict  # pass@1 rises: p, p_boot, p_t, se, df
    falls: dict
    null: dict  # the selection null: w, w_ci, pass1, passk, headroom, out_of_range, replicates_out_of_range, prior
    vs_null: dict  # pass@k against the null: diff, ci, ci90, above, below, equivalence, testable
    label: str  # the selection-null label (verdict.LABELS)
    reason: dict  # code (verdict.REASONS), p
    headroom: float
    ceiling_rises: bool
    base_null: dict  # the seed report's reading (change 29) and its v2
    v1: dict  # the first version's rules
    crossover: dict
    band: dict  # the simultaneous band of Delta pass@k, k = 1..k_max
    per_seed: list[dict]
    coverage_base: int
    coverage_rl: float
    only_rl: float
    only_base: float
    format_base: float
    format_rl: float
    primary: bool
    family: str  # primary, secondary-loose, secondary-strict
    adjusted: dict  # Holm-adjusted p per test (the primary entry's are raw)
    adjusted_mc_se: dict
    near_level: list[str]  # tests within 2 Monte-Carlo SEs of their level


class _Primary(TypedDict):
    """verdicts.json's `primary`: the registered answer, made once (verdict.registered_label), and
    every other reading of it by name."""

    condition: str
    scoring: str
    step: int
    label: str | None  # the registered label: the one the report prints
    label_selection_null: str | None
    label_base_null: str | None
    reason: dict | None
    ceiling_null: str  # which reading is registered (analyze.ceiling_null)
    answer_base_null: bool | None
    calibrated: bool | None


class Primary(_Primary, total=False):
    # "base_support" where the registered question is support from the base's own probabilities (PLAN.md
    # change 57), "support" where it is change 42's support test at the evaluation sampler (analyze.support.primary):
    # label is then its answer ("support expanded", ...) and label_selection_null the secondary reading
    question: str


# The top-level keys the printer needs; a verdicts.json without them predates it (results/tiny,
# tiny_first_run, tiny_seeds, tiny_v3, smollm2): analysis/compat.py reads it for report_legacy.py,
# and the printer refuses it unread, never printing it wrong.
PRINTED = ("primary", "entries", "sizes", "levels", "bootstrap", "design", "calibration")
