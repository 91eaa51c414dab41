"""The real-model study's task rule (PLAN_CHANGES.md change 47, bench/task_rule.py) on hand-made ladder rates,
and on the committed pilot's probe files (change 48's reading)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import task_rule  # noqa: E402


def probe(p1: float, p32: float, problems: int = 128, n: int = 64) -> dict:
    return {"pass_at_k": {"loose": {"1": p1, "32": p32}}, "n_problems": problems, "n": n}


def test_the_candidate_nearest_a_quarter_is_chosen():
    got = task_rule.choose({"arith-1x1": probe(0.15, 0.70), "add-2x2": probe(0.30, 0.80), "add-1x1": probe(0.57, 0.95)})
    assert got["chosen"] == "add-2x2"
    assert [t for t, r in got["tasks"].items() if r.get("candidate")] == ["arith-1x1", "add-2x2"]


def test_a_tie_goes_to_the_harder_task():
    assert task_rule.choose({"add-2x2": probe(0.375, 0.8), "arith-1x1": probe(0.125, 0.6)})["chosen"] == "arith-1x1"


def test_each_condition_of_the_rule_excludes():
    """Above the pass@32 ceiling, outside the pass@1 range, or measured below 128 x 64: not a candidate."""
    got = task_rule.choose(
        {
            "arith-2x1": probe(0.20, 0.91),
            "arith-1x1": probe(0.09, 0.5),
            "add-2x2": probe(0.25, 0.5, problems=127),
            "add-1x1": probe(0.41, 0.8),
        }
    )
    assert got["chosen"] is None and not any(r.get("candidate") for r in got["tasks"].values())
    assert task_rule.choose({"add-2x2": probe(0.25, 0.5, n=64)})["chosen"] == "add-2x2"
    assert task_rule.choose({"add-2x2": probe(0.25, 0.5, n=63)})["chosen"] is None


def test_the_committed_pilot_reads_as_change_48_says():
    folder = ROOT / "results" / "smollm2_pilot"
    probes = {t: json.loads((folder / f"probe_{t}.json").read_text()) for t in ("add-2x2", "arith-1x1")}
    got = task_rule.choose(probes)
    assert got["chosen"] == "add-2x2"
    assert not got["tasks"]["arith-1x1"]["candidate"] and got["tasks"]["arith-1x1"]["pass1"] < 0.10
