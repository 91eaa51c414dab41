"""Answer concentration and lock-in (PLAN_CHANGES.md change 70): how often a model puts nearly all of its
samples for a problem on one answer, and how often that answer is wrong. Change 59's collapse rule reads
the training log's signal and cannot see a model that answers every problem one way, right or wrong.

A *cell* is one model's samples for one problem (a training seed's evaluation row, or a dev problem at a
dev check). Each sample's answer is `countdown.final_answer` (the integer in its answer block, else the
last integer of the response; a response with no integer answers `None`, one value like any other). The
cell is **locked** when its most frequent answer holds at least `share` of the samples (0.9: 29 of 32,
8 of 8), and **locked wrong** when that answer is not the problem's answer. The lock-in rate of a set of
cells is the share locked wrong, reported with its exact (Clopper-Pearson) 95% interval beside the share
locked. numpy-free; scipy for the interval.
"""

from __future__ import annotations

from collections import Counter

import countdown
from analysis.stats import exact_interval

SHARE = 0.9  # change 70: a cell is locked when one answer holds >= 90% of its samples


def cell(responses: list[str], answer: int, share: float = SHARE) -> dict:
    """{n, modal, modal_share, locked, locked_wrong} of one problem's samples (answer: the right one)."""
    if not responses:
        raise ValueError("a cell needs at least one response")
    counts = Counter(countdown.final_answer(r) for r in responses)
    modal, top = counts.most_common(1)[0]
    locked = top >= share * len(responses)
    return {
        "n": len(responses),
        "modal": modal,
        "modal_share": top / len(responses),
        "locked": locked,
        "locked_wrong": locked and modal != answer,
    }


def reading(cells: list[dict], level: float = 0.95) -> dict:
    """The share of cells locked and the lock-in rate (locked on a wrong answer), each with its exact interval."""
    m = len(cells)
    locked, wrong = sum(c["locked"] for c in cells), sum(c["locked_wrong"] for c in cells)
    return {
        "cells": m,
        "locked": locked,
        "locked_share": locked / m if m else None,
        "locked_ci": exact_interval(locked, m, level) if m else None,
        "locked_wrong": wrong,
        "lock_in_rate": wrong / m if m else None,
        "lock_in_ci": exact_interval(wrong, m, level) if m else None,
    }


def lock_in(docs: list[dict]) -> dict | None:
    """The lock-in reading over (seed, problem) cells of one condition's evaluation files at a checkpoint;
    None where there are none or they keep no responses."""
    if not docs or not all("responses" in p for d in docs for p in d["problems"]):
        return None
    return reading([c for d in docs for c in of_rows(d["problems"])])


def of_rows(rows: list[dict], share: float = SHARE) -> list[dict]:
    """The cells of an evaluation file's problem rows (each with `answer` and `responses`)."""
    missing = [r.get("id") for r in rows if "responses" not in r]
    if missing:
        raise ValueError(f"problem {missing[0]} keeps no responses: concentration needs them")
    return [cell(r["responses"], r["answer"], share) for r in rows]


def of_problems(problems: list, texts: list[list[str]], share: float = SHARE) -> dict:
    """The dev check's reading: {locked, locked_wrong} as shares of the problems (no interval)."""
    cells = [cell(t, p.answer, share) for p, t in zip(problems, texts, strict=True)]
    return {
        "locked": sum(c["locked"] for c in cells) / len(cells),
        "locked_wrong": sum(c["locked_wrong"] for c in cells) / len(cells),
    }
