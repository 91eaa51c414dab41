"""Change 70: answer concentration and lock-in (analysis/concentration.py) on hand-made evaluation rows, and the
pilot's rule for the rate (analysis/recipe.py) on hand-made readings."""

import math

import pytest
from scipy import stats

from analysis import concentration, recipe


def rows_of(*cells):
    """Problem rows with answer 91: each cell a list of (response answer, count)."""
    return [
        {"id": f"p{i}", "answer": 91, "responses": [f"<answer>19 + 72 = {a}</answer>" for a, m in c for _ in range(m)]}
        for i, c in enumerate(cells)
    ]


def test_a_cell_locked_on_a_wrong_answer_a_split_cell_and_a_spread_cell():
    wrong, split, spread, right = concentration.of_rows(
        rows_of([(81, 29), (91, 3)], [(81, 16), (91, 16)], [(a, 4) for a in range(80, 88)], [(91, 32)])
    )
    assert wrong["locked"] and wrong["locked_wrong"] and wrong["modal"] == 81 and wrong["modal_share"] == 29 / 32
    assert not split["locked"] and not split["locked_wrong"]
    assert not spread["locked"] and spread["modal_share"] == 4 / 32
    assert right["locked"] and not right["locked_wrong"]


def test_the_share_is_at_least_nine_tenths():
    below, at = concentration.of_rows(rows_of([(81, 28), (91, 4)], [(81, 9), (91, 1)]))
    assert not below["locked"] and at["locked"] and at["locked_wrong"]  # 28/32 = 0.875; 9/10 = 0.9


def test_no_answer_is_an_answer_a_model_can_lock_onto():
    (c,) = concentration.of_rows([{"id": "p", "answer": 91, "responses": ["I cannot say."] * 8}])
    assert c["modal"] is None and c["locked_wrong"]


def test_the_lock_in_rate_and_its_exact_interval():
    cells = concentration.of_rows(rows_of(*([[(81, 32)]] * 3 + [[(91, 32)]] * 2 + [[(81, 16), (91, 16)]] * 5)))
    r = concentration.reading(cells)
    assert (r["cells"], r["locked"], r["locked_wrong"]) == (10, 5, 3)
    ci = stats.binomtest(3, 10).proportion_ci(method="exact")
    assert r["lock_in_ci"] == pytest.approx([ci.low, ci.high], abs=1e-9)


def test_rows_without_responses_are_refused():
    with pytest.raises(ValueError, match="p0 keeps no responses"):
        concentration.of_rows([{"id": "p0", "answer": 1}])


def seed(p0=0.12, last=0.4, lock=0.0, ent=2.0, collapsed=False):
    return {"pass1_step0": p0, "pass1_last": last, "lock_in_last": lock, "entropy_late": ent, "collapsed": collapsed}


def test_the_fastest_rate_is_excluded_by_the_lock_in_bound():
    r = recipe.choose(
        {"lr3e-5": (3e-5, [seed(last=0.2)] * 2), "lr1e-4": (1e-4, [seed(last=0.6), seed(last=0.6, lock=0.125)])}
    )
    assert r["chosen"] == "lr3e-5" and r["by_rate"]["lr1e-4"]["out"][0].startswith("lock-in 0.125")
    r = recipe.choose({"lr3e-5": (3e-5, [seed(last=0.2)] * 2), "lr1e-4": (1e-4, [seed(last=0.6, lock=0.1)] * 2)})
    assert r["chosen"] == "lr1e-4"  # the bound itself is inside


def test_the_entropy_bound_and_a_collapsed_seed_exclude_too():
    base = {"lr3e-5": (3e-5, [seed(last=0.2)] * 2)}
    assert recipe.choose({**base, "lr1e-4": (1e-4, [seed(last=0.6), seed(last=0.6, ent=0.99)])})["chosen"] == "lr3e-5"
    assert (
        recipe.choose({**base, "lr1e-4": (1e-4, [seed(last=0.6), seed(last=0.6, collapsed=True)])})["chosen"]
        == "lr3e-5"
    )


def test_an_unmeasured_lock_in_is_not_admissible():
    r = recipe.choose({"lr1e-4": (1e-4, [seed(lock=math.nan)] * 2)})
    assert r["chosen"] is None and "not measured" in r["by_rate"]["lr1e-4"]["out"][0]


def test_a_tie_within_one_dev_sample_goes_to_the_smaller_rate():
    r = recipe.choose({"lr3e-5": (3e-5, [seed(last=0.5)] * 2), "lr1e-4": (1e-4, [seed(last=0.5 + 1 / 512)] * 2)})
    assert r["chosen"] == "lr3e-5" and r["tied"] == ["lr1e-4", "lr3e-5"]
    r = recipe.choose({"lr3e-5": (3e-5, [seed(last=0.5)] * 2), "lr1e-4": (1e-4, [seed(last=0.5 + 2 / 256)] * 2)})
    assert r["chosen"] == "lr1e-4" and r["tied"] == ["lr1e-4"]


def test_no_admissible_rate_no_choice():
    r = recipe.choose({"lr3e-5": (3e-5, [seed(last=0.12)] * 2), "lr1e-4": (1e-4, [seed(last=0.6, ent=0.3)] * 2)})
    assert r["chosen"] is None and r["why"] == "no admissible rate rises above step 0"


def test_a_seed_reading_from_its_logs():
    log = [{"step": s, "entropy_mean": e} for s, e in zip(range(1, 7), (2.5, 2.4, 2.0, 1.8, 1.2, 1.0))]
    dev = [{"step": 0.0, "loose_pass1": 0.1}, {"step": 6.0, "loose_pass1": 0.5, "locked_wrong": 0.0625, "locked": 0.5}]
    r = recipe.seed_reading(log, dev, False, 6)
    assert r == {
        "pass1_step0": 0.1,
        "pass1_last": 0.5,
        "lock_in_last": 0.0625,
        "locked_last": 0.5,
        "entropy_late": pytest.approx(1.1),
        "collapsed": False,
    }
    assert math.isnan(recipe.seed_reading(log, dev[:1], False, 6)["lock_in_last"])  # no check at the last step
