"""The analysis of support from the base's own probabilities (analysis/base_support.py, PLAN_CHANGES.md change
57) on worlds whose truth is built in: a taught unreachable subset beside reachable problems in Z reads
expanded; a selection of the base (nothing outside, some within rounding of the edge) reads kept; one
seed's stray answers do not read expanded; a failed gate answers nothing; the report prints it."""

from types import SimpleNamespace

import numpy as np
import pytest

import countdown
from analysis import base_support, report_base_support, verdict
from analysis.run_inputs import EvalSet, RunInputs
from orchestration import config

N_BASE, N = 64, 16
PROBLEMS = countdown.draw_splits("arith-2x1", 0, {"test": 60})["test"]


def doc(correct, excess, n, logp=-3.0, sampling=None):
    """An eval file: per problem `correct` loose-correct responses (the first ones), each with `excess`
    (a number, or a list per response), all strict; sampling at the evaluation sampler unless given."""
    rows = []
    for p, c, ex in zip(PROBLEMS, correct, excess):
        ex = list(ex) if isinstance(ex, (list, tuple)) else [ex] * int(c)
        rows.append(
            {
                "id": p.id,
                "question": p.question,
                "answer": p.answer,
                "n": n,
                "correct_strict": int(c),
                "correct_loose": int(c),
                "base_support": {
                    "index": list(range(int(c))),
                    "strict": [True] * int(c),
                    "outside": [e is not None and e >= 0 for e in ex],
                    "excess": ex,
                    "logp_t1": [logp] * int(c),
                },
            }
        )
    return {
        "task": "arith-2x1",
        "sampling": sampling or {"n": n, "temperature": 0.6, "top_p": 0.95, "top_k": 0},
        "problems": rows,
    }


def world(trained_outside, base_excess=-0.3, seeds=6, z=20, trained_correct=8):
    """The base solves problems z.. (Z: the first z); each seed's model answers trained_correct of N right on
    every problem, its correct responses at excess trained_outside(seed, problem) (a number)."""
    base_correct = [0] * z + [10] * (len(PROBLEMS) - z)
    base = doc(base_correct, [base_excess] * len(PROBLEMS), N_BASE)
    rl = {
        ("many", s, 100): doc(
            [trained_correct] * len(PROBLEMS), [trained_outside(s, i) for i in range(len(PROBLEMS))], N
        )
        for s in range(seeds)
    }
    return base, rl


def design(seeds=6, matched=None):
    cfg = config.load(
        None,
        [
            "eval.base_support=true",
            "eval.sampling.tail=sort",  # the measure's rule (change 79 made the default cut)
            "eval_sets={}",
            "analyze.support=null",
            "analyze.calibration=null",
            "analyze.base_support={primary: true}",
        ],
    )
    return SimpleNamespace(
        cfg=cfg,
        primary_scoring="loose",
        checkpoints=[100],
        conditions=["many"],
        primary_condition="many",
        seeds_of=lambda c: list(range(seeds)),
    )


def inference(resamples=2000):
    return SimpleNamespace(
        levels=verdict.Levels(0.95, 0.10, 0.05, 1 / 3), draws=verdict.Draws(len(PROBLEMS), resamples, 0)
    )


def test_a_taught_unreachable_subset_beside_reachable_z_reads_expanded():
    unreachable = set(range(8))  # 8 of Z's 20 problems: correct answers only beyond the base's nucleus
    base, rl = world(lambda s, i: 0.2 if i in unreachable else -0.3)
    out = base_support.analyze(RunInputs(design(), EvalSet(base, rl)), inference())
    c = out["conditions"]["many"]
    assert out["gate"]["passed"] and c["test"]["answer"] == "expanded" and out["answer"] == "expanded"
    assert c["z"]["share"] == pytest.approx(8 / 20) and c["off_z"]["share"] == 0
    assert c["all"]["only_outside"] == pytest.approx(8 / 60)  # the problems whose correct answers lie only outside
    lo, hi = c["z"]["share_ci"]
    assert lo < 8 / 20 < hi


def test_a_selection_of_the_base_reads_kept_and_rounding_is_not_outside():
    base, rl = world(lambda s, i: -5e-5 if i % 7 == 0 else -0.3)  # some tokens within rounding of the nucleus' edge
    for s in rl:  # a few exactly at the edge: dropped by the exact rule, not beyond the tolerance
        rl[s]["problems"][3]["base_support"]["excess"][0] = 0.0
        rl[s]["problems"][3]["base_support"]["outside"][0] = True
    out = base_support.analyze(RunInputs(design(), EvalSet(base, rl)), inference())
    c = out["conditions"]["many"]
    assert c["test"]["answer"] == "kept" and c["all"]["outside"] == 0 and c["all"]["exact"] == 6


def test_one_seeds_stray_answers_do_not_read_expanded():
    base, rl = world(lambda s, i: 0.2 if (s, i) == (2, 5) else -0.3)
    c = base_support.analyze(RunInputs(design(), EvalSet(base, rl)), inference())["conditions"]["many"]
    assert c["all"]["outside"] == 8 and c["test"]["answer"] != "expanded"
    assert c["test"]["above"]["p"] > 0.025


def test_a_failed_gate_answers_nothing():
    base, rl = world(lambda s, i: 0.2 if i < 8 else -0.3, base_excess=0.01)  # the base's own answers read outside
    out = base_support.analyze(RunInputs(design(), EvalSet(base, rl)), inference())
    assert not out["gate"]["passed"]
    assert (
        out["conditions"]["many"]["test"]["answer"] == "not shown" and out["conditions"]["many"]["test"]["gate_failed"]
    )


def test_the_deciding_interval_is_the_part_with_the_larger_p():
    rng = np.random.default_rng(0)
    r = rng.binomial(N, 0.05, size=(6, 60)) / N
    t = base_support.decide(r, verdict.Draws(60, 2000, 0), 0.025, 0.005, 0.95)
    part = t["above"]["decided_by"]
    assert t["interval_by"] == part and t["interval"] == t["intervals"][part]
    assert t["above"]["p"] == max(t["above"]["p_boot"], t["above"]["p_t"])
    assert t["intervals"]["t"][0] < r.mean() < t["intervals"]["t"][1]


def test_the_training_sampler_reads_log_probabilities_and_the_tilt_curve():
    base, rl = world(lambda s, i: 0.2 if i < 8 else -0.3)
    t1 = {"n": 32, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
    pool = doc([1] * 20 + [10] * 40, [None] * 60, 32, logp=-2.0, sampling=t1)
    matched = {k: doc([20] * 60, [None] * 60, 32, logp=-9.0, sampling=t1) for k in rl}
    d = design()
    d.cfg.eval_sets = {"pool-train": config.EvalSetCfg(models="base"), "matched": config.EvalSetCfg(models="final")}
    d.cfg.analyze.base_support.matched = "matched"
    sets = {"pool-train": EvalSet(pool, {}), "matched": EvalSet(None, matched)}
    out = base_support.analyze(RunInputs(d, EvalSet(base, rl), sets), inference(500))
    tr = out["train"]
    assert tr["base"]["all"]["quantiles"]["0.5"] == -2.0 and tr["conditions"]["many"]["all"]["quantiles"]["0.5"] == -9.0
    assert tr["conditions"]["many"]["all"]["beyond"]["1024"] == 1.0  # e^9 > 1,024 draws for each exact response
    curve = tr["conditions"]["many"]["tilt_curve"]
    assert [r["w_star"] for r in curve["rows"]] == d.cfg.analyze.base_support.w_grid
    assert (
        curve["rows"][0]["answer"] == "expanded" and curve["rows"][-1]["answer"] != "expanded"
    )  # the answer depends on w*
    assert curve["flips"] and curve["flips"][0]["from"] == "expanded"
    doc_ = {
        "primary": {
            "condition": "many",
            "scoring": "loose",
            "step": 100,
            "label": "support " + out["answer"],
            "label_selection_null": "selection",
        },
        "base_support": out,
    }
    text = "\n".join(report_base_support.base_support_section(doc_))
    assert "The gate** (passed)" in text and "its flips over w*" in text
    assert "**Support expanded**" in report_base_support.primary_sentence(doc_)


def test_change_42s_test_prints_the_interval_of_the_part_that_decided():
    from analysis import report_checks, support

    rng = np.random.default_rng(1)
    base = np.r_[np.zeros(20, int), rng.integers(1, 30, 40)]
    rl = rng.binomial(32, np.r_[rng.uniform(0.2, 0.8, 20), rng.uniform(0.3, 0.9, 40)], size=(6, 60))
    rl[0, :20] = 0  # one collapsed seed on Z: the seed term makes the t part the larger p
    t = support.support_test(base, np.zeros(60, int), 192, rl, 32, 5.0, 0.025, 2000, 0, "test", "pool")
    part = t["above"] if t["answer"] != "kept" else t["below"]
    assert t["decided_by"] == ("t" if part["p_t"] >= part["p_boot"] else "bootstrap")
    assert report_checks.deciding_interval(t) == (t["rl_ci_t"] if t["decided_by"] == "t" else t["rl_ci"])
    assert t["rl_ci_t"][0] < t["rl_rate"] < t["rl_ci_t"][1] and t["rl_ci_t"] != t["rl_ci"]
    assert report_checks.deciding_interval({"rl_ci": [0.1, 0.2]}) == [
        0.1,
        0.2,
    ]  # a document from before keeps its bootstrap interval


def test_a_condition_without_the_measure_is_skipped_not_fatal():
    base, rl = world(lambda s, i: 0.2 if i < 8 else -0.3)
    for k in rl:
        rl[k] = json_copy(rl[k])
    d = design()
    d.conditions = ["many", "other"]
    d.seeds_of = lambda c: list(range(6))
    unmeasured = {
        ("other", s, 100): {
            **v,
            "problems": [{kk: vv for kk, vv in p.items() if kk != "base_support"} for p in v["problems"]],
        }
        for (_, s, _), v in rl.items()
    }
    out = base_support.analyze(RunInputs(d, EvalSet(base, rl | unmeasured)), inference(500))
    assert out["conditions"]["other"]["skipped"] and out["answer"] == "expanded"
    text = "\n".join(report_base_support.base_support_section({"base_support": out}))
    assert "its files hold no base_support record" in text


def json_copy(x):
    import json

    return json.loads(json.dumps(x))


def test_the_measure_refuses_the_cut_tail():
    """eval.base_support applies the sort tail's filter; the cut tail breaks ties at the nucleus' edge otherwise."""
    with pytest.raises(config.ConfigError, match="eval.base_support"):
        config.load(None, ["eval.base_support=true", "eval.sampling.tail=cut"])


def test_the_secondary_sentence_prints_the_selection_null_label():
    """Where the registered question is base support, the spread reading follows with its own label."""
    import json
    from pathlib import Path

    from analysis import report

    doc = json.loads((Path(__file__).resolve().parents[1] / "results" / "tiny_v6" / "verdicts.json").read_text())
    assert doc["primary"]["question"] == "base_support" and doc["primary"]["label"].startswith("support ")
    text = "\n".join(report.primary_section(doc))
    secondary = text.split("*The selection-null reading (secondary):*")[1].split("\n")[0]
    assert f"**{doc['primary']['label_selection_null'].capitalize()}**" in secondary and "Support" not in secondary


def test_the_tilt_law_finds_a_z_tilt_beyond_rls_own():
    """RL's own tilts outside Z (every problem kept, a solved-every-time one as a lower bound) against
    the tilt Z needs: with RL's tilts spread from 2 to 10 on comparable problems, Z at 5 is reached by
    about 5/8 of them; Z at 500 by none."""
    from analysis.reweight import reweighted

    n_pool, n, S = 10_000, 10_000, 2
    strata = np.array(["borrows-2"] * 40 + ["borrows-0"] * 20, dtype=object)
    p = np.r_[np.full(10, 0.01), np.linspace(0.005, 0.04, 30), np.linspace(0.3, 0.9, 20)]
    z = np.zeros(60, bool)
    z[:10] = True
    pool = np.round(p * n_pool).astype(int)
    own = np.r_[np.zeros(10), np.linspace(2, 10, 30), np.full(20, 5.0)]
    for w_z, reach in [(5.0, (0.5, 0.75)), (500.0, (0.0, 0.0))]:
        w = np.where(z, w_z, own)
        rl = np.tile(np.round(reweighted(p, w) * n).astype(int), (S, 1))
        rl[:, -1] = n  # a problem solved every time: kept, censored
        law = base_support.tilt_law(pool, n_pool, rl, n, z, strata)
        assert law["z_pooled_tilt"] == pytest.approx(w_z, rel=0.1)
        assert reach[0] <= law["comparable_reaching_z"] <= reach[1]
        assert law["outside_z"]["borrows-2"]["quantiles"]["0.5"] == pytest.approx(6.0, rel=0.1)
        assert law["outside_z"]["borrows-0"]["censored"] == 1


def test_the_tilt_laws_z_tilt_pools_every_seed():
    """Z's pooled tilt is one odds ratio from the successes summed over every seed and Z problem, not the first
    seed's (the fault fixed 2026-12-07: a (1, S) row made odds_tilts read S problems of one seed)."""
    n_pool, n = 1_000, 100
    strata = np.array(["borrows-2"] * 6, dtype=object)
    z = np.array([True, True, True, False, False, False])
    pool = np.array([3, 5, 2, 10, 20, 30])
    rl = np.array([[90, 80, 70, 5, 5, 5], [2, 1, 3, 5, 5, 5], [10, 20, 30, 5, 5, 5]])  # seed 0 far above the others
    law = base_support.tilt_law(pool, n_pool, rl, n, z, strata)
    x, m = 90 + 80 + 70 + 2 + 1 + 3 + 10 + 20 + 30, 3 * n * 3  # trained: every seed, every Z problem
    b, m_b = 3 + 5 + 2, n_pool * 3  # the pool over Z
    r, p = (x + 0.5) / (m + 1), (b + 0.5) / (m_b + 1)
    assert law["z_pooled_tilt"] == pytest.approx((r / (1 - r)) / (p / (1 - p)))
    r0 = (240 + 0.5) / (n * 3 + 1)  # the first seed alone, what the fault returned
    assert law["z_pooled_tilt"] < 0.2 * (r0 / (1 - r0)) / (p / (1 - p))  # about 147 against 1,131


def tiny_v5_doc():
    import json
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[1] / "results" / "tiny_v5" / "verdicts.json").read_text())


def test_change_42s_test_is_the_primary_where_the_config_registers_it():
    """analyze.support.primary (tiny_v5's registration, change 42): primary.label is the support test's answer at
    the evaluation sampler and question 'support'; without it, or with the test skipped, the spread label stays."""
    from analysis import assemble

    v5 = tiny_v5_doc()
    res = {
        "base_support": {"skipped": "not registered"},
        "support": v5["support"],
        "primary": {"label": "selection", "reason": None},
    }
    on = SimpleNamespace(
        cfg=config.load(None, ["analyze.support.primary=true"]),
        primary_condition="many",
        analyze={"ceiling_null": "selection"},
    )
    off = SimpleNamespace(cfg=config.load(None), primary_condition="many", analyze={"ceiling_null": "selection"})
    assert assemble.registered_question(res, on) == (
        f"support {v5['support']['conditions']['many']['tests']['eval']['answer']}",
        "support",
    )
    assert assemble.registered_question(res, on)[0] == "support expanded"
    assert assemble.registered_question(res, off) == ("selection", None)
    assert assemble.registered_question({**res, "support": {"skipped": "no pool"}}, on) == ("selection", None)
    with pytest.raises(config.ConfigError, match="analyze.support.primary"):
        config.load(
            None,
            [
                "analyze.support.primary=true",
                "eval.base_support=true",
                "eval.sampling.tail=sort",
                "analyze.base_support={primary: true}",
            ],
        )


def test_the_report_and_the_terminal_print_change_42s_primary_first():
    from analysis import report

    doc = tiny_v5_doc()
    doc["primary"] = {**doc["primary"], "label": "support expanded", "question": "support"}
    text = "\n".join(report.primary_section(doc))
    first, secondary = text.split("*The selection-null reading (secondary):*")
    t = doc["support"]["conditions"]["many"]["tests"]["eval"]
    assert "**Support expanded**" in first and f"{t['rl_rate']:.3f}" in first and f"{t['bound']:.3f}" in first
    assert "**Selection**" in secondary.split("\n")[0]
    head = report.headline(doc).splitlines()
    assert head[0].startswith("primary (many, loose, step 100): support expanded")
    assert head[1] == "secondary: the selection-null label selection"
