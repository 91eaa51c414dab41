"""analysis/strategies.py: how a response computes a * b - c (PLAN.md section 7d): the product
split into place-value parts or written in one step, the subtraction shown or not, and the borrows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import countdown as cd  # noqa: E402
from analysis import strategies  # noqa: E402

Q = cd.Problem("q/0", "arith-3x2", "413 * 41 - 882", 16051, (413, 41, 882))
STRATEGY_CASES = [  # (response, product, subtraction shown)
    (
        "<think>413 * 41 = 413 * 40 + 413 * 1 = 16520 + 413 = 16933. 16933 - 882 = 16051</think>\n<answer>16051</answer>",
        "split",
        True,
    ),
    (
        "413 * (40 + 1) = 16520 + 413 = 16933; 16933 − 882 = 16051",
        "split",
        True,
    ),  # the report's `many` example; a Unicode minus
    (
        "413 × 41 = 413 × 40 + 413 = 16,520 + 413 = 16,933",
        "split",
        False,
    ),  # ×, thousands separators, the operand for 413 * 1
    ("(400 + 10 + 3) * 41 = 16400 + 410 + 123 = 16933", "split", False),  # the other operand split
    ("400 * 41 + 10 * 41 + 3 * 41 = 16933", "split", False),
    ("413 * 40 + 413 * 2 = 17346", "split", False),  # a wrong part is still a split: the method, not its result
    (
        "  413\n×  41\n-----\n  413\n16520\n-----\n16933\nSo 16933 - 882 = 16051",
        "split",
        True,
    ),  # a column of partial products
    ("413 * 41 = 16933. 16933 - 882 = 16051", "one-step", True),
    ("41 * 413 = 16933", "one-step", False),
    ("413 x 41 = 17933, then 17933 - 882 = 17051", "one-step", True),  # a wrong product: still one step
    ("413 times 41 is 16933", "one-step", False),
    ("413 * 41 - 882 = 16051", "no-product", False),  # the question restated with a result: no product written
    ("The answer is 16051.", "no-product", False),
    ("", "no-product", False),
    # adversarial: tags, repeated tags, truncation, numbers that only look like partial products
    ("<answer>413 * 41 = 16933</answer></answer><answer>", "one-step", False),
    ("<think>413 * 41 = 413 * 40 + 4", "no-product", False),  # cut short before a second product
    ("<think>413 * 41 = 413 * 40 + 413", "split", False),  # cut short after it
    ("16933 - 882 = 16051 and 16520 + 413", "no-product", True),  # partial products without the operand written again
    ("413 * 4 = 1652", "no-product", False),  # another product altogether
]


@pytest.mark.parametrize("response, product, shown", STRATEGY_CASES)
def test_classify_strategy_on_hand_written_responses(response, product, shown):
    assert strategies.classify_strategy(Q, response) == {"product": product, "subtraction": shown}


def test_classify_strategy_only_for_a_times_b_minus_c():
    with pytest.raises(ValueError):
        strategies.classify_strategy(cd.generate("add-1x1", 1, 0)[0], "3 + 4 = 7")
    assert strategies.STRATEGIES == ("split", "one-step", "no-product")


@pytest.mark.parametrize("p_decomposed", [1.0, 0.0, 0.6, 0.25])
def test_classify_strategy_recovers_the_tiny_bases_method_mix(p_decomposed):
    """tiny_base.trace draws a decomposed trace with probability p_decomposed (with slips) and a one-shot
    one otherwise; on problems whose a has two place-value parts the two are told apart."""
    import random

    from bases import tiny_base
    from orchestration import config

    problems = [p for p in cd.generate("arith-2x1", 400, 0) if len(cd.place_parts(p.numbers[0])) >= 2]
    b = config.TinyBaseCfg(p_decomposed=p_decomposed, p_slip=0.05, p_oneshot_wrong=0.6)
    rng = random.Random(7)
    labels = [strategies.classify_strategy(p, tiny_base.trace(p, rng, b)) for p in problems for _ in range(5)]
    split = sum(x["product"] == "split" for x in labels) / len(labels)
    assert abs(split - p_decomposed) < 0.03, split  # 1,800+ traces: the binomial SD is at most 0.012
    assert all(x["product"] in ("split", "one-step") and x["subtraction"] for x in labels)


def test_borrow_columns_against_the_digits_by_hand():
    """Borrow columns against the digits by hand and the strata."""
    rng = __import__("random").Random(5)
    for _ in range(2000):
        x, y = rng.randint(0, 99999), rng.randint(0, 99999)
        big, small = max(x, y), min(x, y)
        cols, borrow = [], 0
        for j, (d, e) in enumerate(zip(reversed(str(big)), reversed(str(small).rjust(len(str(big)), "0")))):
            if int(d) - borrow < int(e):
                cols.append(j)
            borrow = int(int(d) - borrow < int(e))
        assert cd.borrow_columns(x, y) == cols
    assert cd.borrow_columns(903, 47) == [0, 1] and cd.borrow_columns(285, 42) == []
    p = cd.Problem("t/0", "arith-2x1", "57 * 5 - 48", 237, (57, 5, 48))
    assert cd.stratum(p) == "borrows-1"  # 285 - 48: the units borrow
    assert cd.stratum(cd.Problem("t/1", "add-1x1", "1 + 2", 3, (1, 2))) is None
    with pytest.raises(ValueError):
        cd.borrow_columns(-5, 3)


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<think>15 * 7 = 10 * 7 + 5 * 7 = 70 + 35 = 105. 105 - 38 = 67</think><answer>67</answer>", "clean"),
        ("<think>15 * 7 = 105. 105 - 38 = 67</think>So it is 67", "clean"),
        (
            "<think>15 * 7 = 95. 95 - 38 = 67</think>So it is 67",
            "compensating",
        ),  # product 10 too small, a borrow forgotten
        ("<think>15 * 7 = 105. 105 - 38 = 77</think>The answer is 77.", "slipped"),  # the borrow forgotten alone
        ("<think>15 * 7 = 105. 105 - 38 = 77. 105 - 38 = 67</think>", "clean"),  # the last subtraction is read
        ("15 * 7 - 38 = 67", "unshown"),  # the restated question is no subtraction of a written product
        ("The answer is 67", "unshown"),
    ],
)
def test_classify_computation(response, expected):
    p = cd.Problem("t", "arith-2x1", "15 * 7 - 38", 67, (15, 7, 38), "")
    assert strategies.classify_computation(p, response) == expected


def test_classify_computation_refuses_other_tasks():
    with pytest.raises(ValueError, match="only a \\* b - c tasks"):
        strategies.classify_computation(cd.Problem("t", "add-1x1", "1 + 2", 3, (1, 2), ""), "3")


def test_a_problem_read_back_from_an_evaluation_row():
    """Problem.from_row: the operands come back from an `a * b - c` question (so strata and strategies can be
    read from a file alone); another task's row has none."""
    p = cd.generate("arith-2x1", 3, seed=0, split="test")[2]
    row = {"id": p.id, "question": p.question, "answer": p.answer, "responses": []}
    back = cd.Problem.from_row(row, "arith-2x1")
    assert (back.id, back.question, back.answer, back.numbers) == (p.id, p.question, p.answer, p.numbers)
    assert cd.stratum(back) == cd.stratum(p)
    assert cd.Problem.from_row({"id": "x", "question": "3 + 4", "answer": 7}, "add-1x1").numbers == ()
