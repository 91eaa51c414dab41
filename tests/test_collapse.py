"""The collapse rule (analysis/collapse.py, PLAN_CHANGES.md change 59) on hand-made training logs, and the
collapse rate's exact interval against scipy's binomial test."""

import pytest
from scipy import stats as st

from analysis import collapse
from analysis.run_inputs import EvalSet, RunInputs, read_inputs


def log(no_signal):
    return [{"step": i + 1, "no_signal": float(x)} for i, x in enumerate(no_signal)]


def test_a_run_without_signal_late_is_collapsed_and_one_with_signal_is_not():
    dead = log([0, 1, 0] + [1] * 27)  # a gradient on steps 1 and 3 only (smollm2_study many s0's pattern)
    live = log([0, 1, 0, 0] * 7 + [0, 0])
    sparse = log([0] * 15 + [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1])  # late: 14 of 15 without signal
    assert collapsed(dead) and not collapsed(live)
    assert collapse.collapsed(sparse)["share"] == pytest.approx(14 / 15) and collapsed(sparse)  # 0.933 >= 0.9
    assert not collapsed(log([0] * 15 + [1] * 12 + [0] * 3))  # 12 of 15: signal came back
    assert not collapsed(log([1] * 15 + [0] * 15))  # an early drought is not a collapse
    assert (
        collapse.collapsed([{"step": 1, "no_signal": float("nan")}])["collapsed"] is None
    )  # an sft log: nothing to read


def collapsed(rows):
    return collapse.collapsed(rows)["collapsed"]


@pytest.mark.parametrize("x, m", [(0, 4), (1, 4), (4, 4), (3, 12)])
def test_the_rates_interval_is_clopper_pearson(x, m):
    r = collapse.rate([True] * x + [False] * (m - x) + [None])
    ci = st.binomtest(x, m).proportion_ci(0.95, method="exact")
    assert r["seeds"] == m and r["rate"] == x / m
    assert r["ci"] == pytest.approx([ci.low, ci.high])


def test_smollm2_studys_collapsed_seed_is_the_one_the_rule_names():
    """Post hoc, on the committed logs of results/smollm2_study: many s0 (a gradient on steps 1 and 3 only)
    reads collapsed and no other seed does; sft has no reward, so no reading."""
    from pathlib import Path
    from types import SimpleNamespace

    from orchestration import config

    run = Path(__file__).resolve().parents[1] / "results" / "smollm2_study"
    cfg = config.load(None, ["analyze.collapse={}", "conditions={many: {}, sft: {method: sft}, rft: {method: rft}}"])
    seeds = {"many": [0, 1, 2, 3], "sft": [0, 1], "rft": [0, 1]}
    design = SimpleNamespace(cfg=cfg, conditions=list(seeds), seeds_of=seeds.get, checkpoints=[30])
    out = collapse.analyze(RunInputs(design, EvalSet(None, {}), run=run))  # the logs alone
    assert [s for s, r in out["conditions"]["many"]["per_seed"].items() if r["collapsed"]] == ["0"]
    assert out["conditions"]["many"]["collapsed"] == 1 and out["conditions"]["many"]["seeds"] == 4
    assert "sft" not in out["conditions"] and out["conditions"]["rft"]["collapsed"] == 0


def test_lock_in_sits_beside_the_collapse_rate_on_smollm2_v2s_files():
    """Change 70, on the committed evaluation files of results/smollm2_v2: at the evaluation sampler 1,404 of the
    2,048 (seed, problem) cells are locked and 528 locked wrong; at T 1 (`matched`) fewer; the reprinted report
    and --summary name it."""
    from pathlib import Path

    from analysis.report_base_support import collapse_section
    from analysis.summary import measures

    run = Path(__file__).resolve().parents[1] / "results" / "smollm2_v2"
    c = collapse.analyze(read_inputs(run))["conditions"]["many"]
    test, t1 = c["lock_in"]["test"], c["lock_in"]["matched"]
    assert (test["cells"], test["locked"], test["locked_wrong"]) == (2048, 1404, 528)
    assert t1["locked_wrong"] < test["locked_wrong"] and "pool-train" not in c["lock_in"]  # the base's set: no seeds
    doc = {"collapse": {"share": 0.9, "late_from": 0.5, "conditions": {"many": c}}}
    text = "\n".join(collapse_section(doc))
    assert "| many | test | 1404 / 2048 | 528 / 2048 | 0.258 [0.239, 0.277] |" in text
    got = dict(
        measures({"primary": {"condition": "many", "scoring": "loose", "step": 30, "label": "x"}, "entries": [], **doc})
    )
    assert got["cells locked on a wrong answer (lock-in)"] == "528 of 2048, 0.258 [0.239, 0.277]"
