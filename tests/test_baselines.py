"""Change 71's reward-free baselines and Z-at-T 1 reading (analysis/baselines.py) against closed forms."""

import math

import numpy as np
import pytest

from analysis import baselines
from analysis.report_base_support import baselines_section
from orchestration import config


def test_the_tilt_meets_its_target_and_the_curve_is_the_closed_form():
    p = np.array([0.0, 0.05, 0.3, 0.9])
    w = baselines.tilt_for(p, 0.6)
    assert baselines.reweighted(p, w).mean() == pytest.approx(0.6, abs=1e-9)
    assert baselines.tilt_for(p, p.mean() - 0.01) == 1.0  # already there: no tilt
    assert baselines.tilt_for(p, 0.8) is None  # a never-solved problem caps the mean at 0.75
    c = baselines.curve(p, 4)
    assert c[2] == pytest.approx(np.mean(1 - (1 - p) ** 3))


def test_a_power_of_the_base_from_its_own_samples():
    """Self-normalised weights pi^(a - 1) on draws from pi recover sum_correct pi^a / sum pi^a; a = 1 is the share."""
    pi = np.array([0.5, 0.25, 0.15, 0.07, 0.03])
    right = np.array([0, 1, 0, 0, 1.0])
    draws = np.random.default_rng(0).choice(5, size=200_000, p=pi)
    lp, c = np.log(pi[draws]), right[draws]
    for a in (2.0, 0.5):
        exact = (right * pi**a).sum() / (pi**a).sum()
        assert baselines.powered([lp], [c], a)[0] == pytest.approx(exact, abs=3e-3)
    assert baselines.powered([lp], [c], 1.0)[0] == pytest.approx(c.mean(), abs=1e-12)


def doc(rows, n=4):
    """An evaluation file: rows of (correct responses as (text, logp, strict)) per problem."""
    problems = []
    for r in rows:
        texts = [t for t, _, _ in r] + ["wrong"] * (n - len(r))
        problems.append(
            {
                "n": n,
                "responses": texts,
                "correct_loose": len(r),
                "correct_strict": sum(s for *_, s in r),
                "base_support": {
                    "index": list(range(len(r))),
                    "strict": [s for *_, s in r],
                    "logp_t1": [x for _, x, _ in r],
                },
            }
        )
    return {"problems": problems, "sampling": {"n": n}}


def test_z_at_t1_counts_each_distinct_answer_once_and_bounds_the_tilt():
    pool = doc([[], [("a", -1.0, True)]])  # problem 0 never solved by the pool
    seeds = [doc([[("x", -3.0, True), ("x", -3.0, True)], []]), doc([[("y", -4.0, False)], []])]
    z = baselines.z_at_t1(pool, seeds, "loose", off_tilt=1e5)
    (row,) = z["problems"]
    m = math.exp(-3) + math.exp(-4)  # "x" twice counts once
    p = 3 / 8
    assert row["base_mass"] == pytest.approx(m) and row["rl_rate"] == p and row["distinct"] == 2
    assert row["tilt_bound"] == pytest.approx((p / (1 - p)) / (m / (1 - m)))
    assert z["n_z"] == 1 and z["within_off_z_tilt"] == 1
    strict = baselines.z_at_t1(pool, seeds, "strict", off_tilt=1.0)["problems"][0]
    assert strict["distinct"] == 1 and strict["rl_rate"] == 2 / 8
    assert baselines.z_at_t1(pool, seeds, "strict", off_tilt=1.0)["within_off_z_tilt"] == 0


def test_the_section_prints_every_curve_and_the_z_reading():
    bl = {
        "skipped": None,
        "condition": "many",
        "step": 10,
        "scoring": "loose",
        "k": [1, 2, 3, 4],
        "sweep": [{"set": "test", "temperature": 0.6, "top_p": 0.95, "pass_at_k": [0.3, 0.4, 0.5, 0.6]}],
        "rl": {"test": [0.6, 0.7, 0.75, 0.8], "t1": [0.5, 0.6, 0.7, 0.8]},
        "reweighting": {"w": 9.4, "pass_at_k": [0.5, 0.7, 0.8, 0.9]},
        "powers": {"2": [0.4, 0.5, 0.6, 0.7]},
        "best_pass1_temperature": 0.6,
        "best_passk_temperature": 0.6,
        "z_t1": {
            "n_z": 7,
            "solved_by_rl": 6,
            "base_mass_median": 3e-4,
            "tilt_bound_quartiles": [800, 1400, 2400],
            "off_z_tilt": 9.2,
            "within_off_z_tilt": 0,
        },
    }
    text = "\n".join(baselines_section({"baselines": bl}))
    assert "| base T 1 pool reweighted to RL's T 1 pass@1 (w 9.4) | 0.500 | 0.700 | 0.900 |" in text
    assert "π_base^2" in text and "solve 6 of them" in text and "0 of 6 within that tilt's reach" in text


def test_the_config_is_checked():
    with pytest.raises(config.ConfigError, match=r"analyze\.baselines\.sweep\[0\]: must name an eval set"):
        config.load("configs/tiny_v7.yaml", ["analyze.baselines={sweep: [nope], powers: []}"])
    with pytest.raises(config.ConfigError, match=r"analyze\.baselines\.powers: .*eval\.logp_all"):
        config.load("configs/tiny_v7.yaml", ["analyze.baselines={powers: [2.0]}"])
    assert (
        config.load("configs/tiny_v7.yaml", ["analyze.baselines={powers: []}"]).analyze.baselines.pool == "pool-train"
    )


def test_the_clean_gap_reads_the_flag_it_is_given():
    """training_sampler.with_clean_flag puts classify_computation's clean flag where the outside gap reads, in
    the order responses() lists the correct answers; the section prints the registered word."""
    from analysis import training_sampler
    from analysis.report_base_support import clean_lines
    from countdown import Problem

    prob = Problem("arith-2x1/test/0", "arith-2x1", "36 * 3 - 78", 30, (36, 3, 78), "")
    clean, compensating = (
        "36 * 3 = 108. 108 - 78 = 30. <answer>30</answer>",
        "36 * 3 = 98. 98 - 78 = 30. <answer>30</answer>",
    )
    d = {
        "problems": [
            {
                "n": 3,
                "responses": [clean, "x", compensating],
                "base_support": {
                    "index": [0, 2],
                    "strict": [True, True],
                    "logp_t1": [-1.0, -2.0],
                    "logp_self": [-1.0, -2.0],
                    "length": [9, 9],
                    "excess_eval": [None, None],
                },
            }
        ]
    }
    r = training_sampler.responses([d], "strict", 1e-4)
    flagged = training_sampler.with_clean_flag(r, [d], [prob], "strict")
    assert flagged.outside.tolist() == [True, False] and (flagged.base_logp == r.base_logp).all()
    g = {
        "gap": 0.09,
        "interval": [0.07, 0.11],
        "trained_share": 0.97,
        "base_share": 0.88,
        "problems": 330,
        "p_more": 0.0002,
        "more": True,
    }
    assert "**more clean**" in "\n".join(clean_lines({"conditions": {"many": {"clean_gap": g}}}))
