"""countdown.py beyond its scores: score() on a problem, problem generation, prompts and the
command line (the scores themselves: tests/test_scoring.py).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import countdown as cd  # noqa: E402
from countdown import (  # noqa: E402
    ARITH_DIGITS,
    COUNTDOWN_MAX_NUMBER,
    COUNTDOWN_MAX_TARGET,
    Problem,
    countdown_value,
    generate,
    make_splits,
    prompt_messages,
    score,
    score_countdown,
)

# Seed 0 once crashed Countdown generation (x / (y - y)); test_countdown_generation_never_crashes
# pins the fix, the other Countdown tests use seed 1.
CD_SEED = 1


def tagged(body: str, think: str = "Let me compute.") -> str:
    return f"<think>{think}</think>\n<answer>{body}</answer>"


# ============================================================================ score()

ARITH_PROBLEM = Problem("arith-3x2/test/0", "arith-3x2", "413 * 41 - 882", 413 * 41 - 882, (413, 41, 882))
CD_PROBLEM = Problem(
    "countdown/test/0",
    "countdown",
    "Using the numbers 3, 5, 7 exactly once each, with + - * /, make 22",
    22,
    (3, 5, 7),
    "3 * 5 + 7",
)


@pytest.mark.parametrize(
    "problem, response, expected",
    [
        (ARITH_PROBLEM, tagged("16051"), dict(strict=True, loose=True, format=True)),
        (ARITH_PROBLEM, tagged("16,051"), dict(strict=True, loose=True, format=True)),
        (ARITH_PROBLEM, tagged("16052"), dict(strict=False, loose=False, format=True)),
        (ARITH_PROBLEM, tagged("16052") + " hmm, 16051", dict(strict=False, loose=True, format=True)),
        (ARITH_PROBLEM, "= 16051", dict(strict=False, loose=True, format=False)),
        (ARITH_PROBLEM, tagged("unsure"), dict(strict=False, loose=False, format=False)),
        (CD_PROBLEM, tagged("3 * 5 + 7"), dict(strict=True, loose=True, format=True)),
        (CD_PROBLEM, tagged("7 + 5 * 3 = 22"), dict(strict=True, loose=True, format=True)),
        (CD_PROBLEM, tagged("3 * 5 + 8"), dict(strict=False, loose=False, format=True)),
        (CD_PROBLEM, tagged("3 * 7 + 1"), dict(strict=False, loose=False, format=True)),
        (CD_PROBLEM, tagged("22"), dict(strict=False, loose=False, format=True)),
        (CD_PROBLEM, tagged("3 ** 5"), dict(strict=False, loose=False, format=False)),
        (CD_PROBLEM, tagged("the answer"), dict(strict=False, loose=False, format=False)),
        (CD_PROBLEM, "3 * 5 + 7 = 22", dict(strict=False, loose=False, format=False)),  # no loose for Countdown
        (CD_PROBLEM, "<answer>3 * 5 + 7", dict(strict=False, loose=False, format=False)),
    ],
)
def test_score_dict(problem, response, expected):
    assert score(problem, response) == expected


# ============================================================================ generation

ARITH_TASKS = sorted(ARITH_DIGITS)


def test_make_splits_values_are_fixed():
    """Literal values, read once from the code: they must be identical on every machine."""
    train, test = make_splits("arith-3x2", 4000, 128, 0)
    assert [(p.id, p.question, p.answer, p.numbers) for p in train[:2]] == [
        ("arith-3x2/train/0", "203 * 44 - 193", 8739, (203, 44, 193)),
        ("arith-3x2/train/1", "918 * 88 - 418", 80366, (918, 88, 418)),
    ]
    assert [(p.id, p.question, p.answer, p.numbers) for p in test[:2]] == [
        ("arith-3x2/test/0", "990 * 72 - 915", 70365, (990, 72, 915)),
        ("arith-3x2/test/1", "662 * 42 - 678", 27126, (662, 42, 678)),
    ]


def test_splits_are_drawn_once_and_handed_out_as_fresh_lists():
    """draw_splits keeps each draw for the process (a dry run asks for the same train split per job):
    a caller that changes its lists leaves the next caller's alone, and the kept draw is the one a
    fresh process makes."""
    train, test = make_splits("arith-2x1", 300, 20, 5)
    kept = list(train)
    train.reverse()
    test.clear()
    assert make_splits("arith-2x1", 300, 20, 5) == (kept, make_splits("arith-2x1", 0, 20, 5)[1])
    code = "import countdown, json; t = countdown.make_splits('arith-2x1', 300, 20, 5)[0]; print(json.dumps([p.question for p in t]))"
    fresh = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(fresh.stdout) == [p.question for p in kept]


@pytest.mark.parametrize("task", ARITH_TASKS + ["countdown"])
def test_make_splits_same_seed_same_lists_other_seed_differs(task):
    seed = CD_SEED if task == "countdown" else 0
    a = make_splits(task, 200, 64, seed)
    b = make_splits(task, 200, 64, seed)
    assert a == b
    other = make_splits(task, 200, 64, seed + 2)
    assert [p.question for p in other[0]] != [p.question for p in a[0]]
    assert [p.question for p in other[1]] != [p.question for p in a[1]]


def test_arith_digit_table():
    # the study's tasks, as the module docstring describes them
    assert ARITH_DIGITS["arith-3x2"] == (3, 2, 3)
    assert ARITH_DIGITS["arith-2x2"] == (2, 2, 3)
    assert ARITH_DIGITS["arith-2x1"] == (2, 1, 2)
    assert set(cd.TASKS) == set(ARITH_DIGITS) | set(cd.SUM_DIGITS) | {"countdown"}
    for task in cd.TASKS:
        assert task in cd.__doc__


def _n_distinct(task):
    return 1 if task == "countdown" else math.prod(9 * 10 ** (d - 1) for d in ARITH_DIGITS[task])


def _n_train(task, wanted):
    """`wanted` train problems, or fewer for a task with a small problem space (arith-1x1)."""
    return wanted if task == "countdown" else min(wanted, _n_distinct(task) // 2)


@pytest.mark.parametrize("task", ARITH_TASKS)
def test_arith_splits_distinct_and_in_range(task):
    n_train = _n_train(task, 4000)
    if task == "arith-3x2":
        assert n_train == 4000
    train, test = make_splits(task, n_train, 128, 0)
    assert len(train) == n_train and len(test) == 128
    train_q = [p.question for p in train]
    test_q = [p.question for p in test]
    assert len(set(train_q)) == len(train_q)
    assert len(set(test_q)) == len(test_q)
    assert not set(train_q) & set(test_q)
    assert [p.id for p in train] == [f"{task}/train/{i}" for i in range(n_train)]
    assert [p.id for p in test] == [f"{task}/test/{i}" for i in range(128)]
    digits = ARITH_DIGITS[task]
    for p in train + test:
        a, b, c = p.numbers
        assert p.task == task
        assert (len(str(a)), len(str(b)), len(str(c))) == digits, p
        assert p.question == f"{a} * {b} - {c}"
        assert p.answer == a * b - c
        assert p.solution == ""
    # each operand's range is actually explored, not just a corner of it
    for k, d in enumerate(digits):
        lo, hi = 10 ** (d - 1), 10**d - 1
        seen = [p.numbers[k] for p in train]
        assert min(seen) < lo + (hi - lo) / 10 and max(seen) > hi - (hi - lo) / 10, (k, min(seen), max(seen))


def _check_countdown_problems(problems):
    for p in problems:
        assert p.task == "countdown"
        assert len(p.numbers) == 3
        assert all(1 <= k <= COUNTDOWN_MAX_NUMBER for k in p.numbers), p
        assert 1 <= p.answer <= COUNTDOWN_MAX_TARGET, p
        assert countdown_value(p.solution, p.numbers) == p.answer, p
        assert score_countdown(f"<answer>{p.solution}</answer>", p.numbers, p.answer), p
        a, b, c = p.numbers
        assert p.question == f"Using the numbers {a}, {b}, {c} exactly once each, with + - * /, make {p.answer}"


def test_countdown_splits_valid():
    train, test = make_splits("countdown", 1000, 128, CD_SEED)
    assert len(train) == 1000 and len(test) == 128
    _check_countdown_problems(train + test)
    qs = [p.question for p in train + test]
    assert len(set(qs)) == len(qs)


@pytest.mark.parametrize("seed", [0, 2, 4])
def test_countdown_generation_never_crashes(seed):
    train, test = make_splits("countdown", 4000, 128, seed)
    assert len(train) == 4000 and len(test) == 128
    _check_countdown_problems(train[:500] + test)


@pytest.mark.parametrize("task", ARITH_TASKS + ["countdown"])
def test_first_problems_do_not_depend_on_n_train(task):
    seed = CD_SEED if task == "countdown" else 0
    small_train, small_test = make_splits(task, 10, 128, seed)
    big_train, big_test = make_splits(task, _n_train(task, 1000), 128, seed)
    assert small_train == big_train[:10]
    assert small_test == big_test
    assert make_splits(task, 0, 128, seed)[1] == big_test


@pytest.mark.parametrize("task", ARITH_TASKS + ["countdown"])
def test_generate_matches_make_splits(task):
    seed = CD_SEED if task == "countdown" else 0
    train, test = make_splits(task, 20, 128, seed)
    assert generate(task, 20, seed) == train
    assert generate(task, 20, seed, split="train", n_test=128) == train
    assert generate(task, 5, seed, split="test") == test[:5]


@pytest.mark.parametrize(
    "args",
    [
        ("arith-4x4", 10, 10, 0),
        ("", 10, 10, 0),
        ("Arith-3x2", 10, 10, 0),
        ("arith-3x2", -1, 10, 0),
        ("arith-3x2", 10, -1, 0),
    ],
)
def test_make_splits_bad_arguments(args):
    with pytest.raises(ValueError):
        make_splits(*args)


# ============================================================================ prompts


@pytest.mark.parametrize("problem", [ARITH_PROBLEM, CD_PROBLEM])
def test_prompt_instruct(problem):
    msgs = prompt_messages(problem)
    assert msgs == prompt_messages(problem, "instruct")
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[-1]["content"]
    assert problem.question in user
    for tag in ("<think>", "</think>", "<answer>", "</answer>"):
        assert tag in user


def test_prompt_instruct_wording_per_task():
    assert "single integer" in prompt_messages(ARITH_PROBLEM)[-1]["content"]
    assert "expression" in prompt_messages(CD_PROBLEM)[-1]["content"]
    # the example expression in the Countdown prompt is itself a valid, scored expression
    assert countdown_value("(1 + 2) * 3", (1, 2, 3)) == 9


@pytest.mark.parametrize("problem", [ARITH_PROBLEM, CD_PROBLEM])
def test_prompt_bare(problem):
    assert prompt_messages(problem, "bare") == [{"role": "user", "content": problem.question}]


@pytest.mark.parametrize("style", ["", "Instruct", "chat", None])
def test_prompt_unknown_style(style):
    with pytest.raises(ValueError):
        prompt_messages(ARITH_PROBLEM, style)


# ============================================================================ CLI


def run_cli(*args):
    return subprocess.run([sys.executable, "countdown.py", *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_cli_prints_problems():
    r = run_cli("--task", "arith-3x2", "--n", "2", "--seed", "0")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    first_two = make_splits("arith-3x2", 2, 128, 0)[0]
    for p in first_two:
        assert f"{p.id}: {p.question} = {p.answer}" in r.stdout
    assert "203 * 44 - 193" in r.stdout
    third = make_splits("arith-3x2", 3, 128, 0)[0][2]
    assert third.question not in r.stdout


@pytest.mark.parametrize(
    "args, flag",
    [
        (("--task", "nope", "--n", "2"), "--task"),
        (("--task", "arith-3x2", "--n", "0"), "--n"),
        (("--task", "arith-3x2", "--n", "abc"), "--n"),
        (("--task", "arith-3x2", "--n", "-3"), "--n"),
        (("--task", "arith-3x2", "--n", "2", "--seed", "x"), "--seed"),
        (("--task", "arith-3x2", "--n", "2", "--style", "fancy"), "--style"),
    ],
)
def test_cli_bad_arguments(args, flag):
    r = run_cli(*args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert flag in lines[0]
    assert "Traceback" not in r.stderr


def test_cli_countdown_default_seed():
    r = run_cli("--task", "countdown", "--n", "2")  # the default seed is 0, which once crashed
    assert r.returncode == 0, r.stderr
    assert "Using the numbers" in r.stdout


@pytest.mark.parametrize("task", sorted(cd.SUM_DIGITS))
def test_sum_tasks_draw_distinct_a_plus_b_with_their_gold(task):
    """Sum tasks draw distinct a plus b with their gold solutions."""
    da, db = cd.SUM_DIGITS[task]
    train, test = make_splits(task, 30, 20, 0)
    assert not {p.question for p in train} & {p.question for p in test} and len({p.question for p in train}) == 30
    for p in train + test:
        a, b = p.numbers
        assert (len(str(a)), len(str(b))) == (da, db) and p.question == f"{a} + {b}" and p.answer == a + b
        for style in ("instruct", "bare"):
            assert score(p, cd.gold_solution(p, style)) == {"strict": True, "loose": True, "format": True}
    with pytest.raises(ValueError, match="too few distinct problems"):
        make_splits("add-1x1", 70, 20, 0)  # 81 problems in all
