"""Tests for countdown.py: problem generation, prompts, the strict/loose/format scores and
Countdown expression scoring; and analysis/strategies.py's reading of how a response computes
a * b - c. Every scoring decision in the module docstring has a table row.

The timing tests catch super-linear scans (a quadratic scan of 2 MB takes minutes); their bounds
are loose on purpose so that a busy machine does not fail them.
"""
from __future__ import annotations

import contextlib
import math
import signal
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import countdown as cd  # noqa: E402
from analysis import strategies  # noqa: E402
from countdown import (  # noqa: E402
    ARITH_DIGITS,
    COUNTDOWN_MAX_CHARS,
    COUNTDOWN_MAX_NUMBER,
    COUNTDOWN_MAX_TARGET,
    Problem,
    answer_block,
    countdown_value,
    format_ok,
    generate,
    last_integer,
    make_splits,
    prompt_messages,
    score,
    score_countdown,
    score_loose,
    score_strict,
)

MINUS_SIGNS = ["-", "\u2212", "\u2012", "\u2013", "\u2014", "\ufe63", "\uff0d"]
NON_ASCII_MINUS = MINUS_SIGNS[1:]

# Seed 0 once crashed Countdown generation (x / (y - y)); test_countdown_generation_never_crashes
# pins the fix, the other Countdown tests use seed 1.
CD_SEED = 1


def tagged(body: str, think: str = "Let me compute.") -> str:
    return f"<think>{think}</think>\n<answer>{body}</answer>"


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise TimeoutError in the test if the block runs longer than `seconds`, so a
    super-linear scan fails fast instead of stalling the suite (POSIX main thread only)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise TimeoutError(f"took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ============================================================================ last_integer

LAST_INTEGER_CASES = [
    # plain and negative
    ("42", 42),
    ("-5", -5),
    ("the answer is 16051", 16051),
    ("the answer is -16051", -16051),
    ("is -5", -5),
    ("(-5", -5),
    ("(-5)", -5),
    ("= -5", -5),
    ("x = -16051.", -16051),
    ("-0", 0),
    ("+5", 5),
    ("= + 5", 5),
    # unary vs binary minus
    ("3 - 5", 5),
    ("3-5", 5),
    ("x-5", 5),  # glued to a letter: binary
    ("5)-3", 3),  # glued to ')': binary
    ("5) - 3", 3),
    ("is - 5", 5),  # spaced, letter before: binary
    ("= - 5", -5),  # spaced, operator before: unary
    ("(- 5", -5),
    ("- 5", -5),  # spaced, start before: unary
    ("x =\t-\t5", -5),
    ("7 -\t5", 5),
    ("3 -5", -5),  # glued to the digits, not to the 3: unary
    ("16051 - 3", 3),
    # thousands separators
    ("16,051", 16051),
    ("-16,051", -16051),
    ("1,000,000", 1000000),
    ("16,051,000", 16051000),
    ("1,2,3", 3),
    ("12,34", 34),
    ("1,0000", 0),
    ("1,234,5678", 5678),
    ("2,05", 5),
    # spaces are never inside a number
    ("16 051", 51),
    ("-16 051", 51),
    # decimals
    ("16051.0", 16051),
    ("16051.000", 16051),
    ("16,051.00", 16051),
    ("-16051.0", -16051),
    ("0.0", 0),
    ("16051.5", None),
    ("16051.05", None),
    ("16051 or maybe 16051.5", None),  # a non-integer last number is not skipped
    ("16051.5 is not 16051", 16051),
    ("the answer is 16051.", 16051),  # sentence full stop, not a decimal point
    ("007", 7),
    # no digits / non-ASCII digits
    ("", None),
    ("no digits at all!", None),
    ("\u0661\u0666\u0660\u0665\u0661", None),  # Arabic-Indic ١٦٠٥١
    ("\u06f1\u06f6", None),  # Extended Arabic-Indic ۱۶
    ("\uff11\uff16\uff10\uff15\uff11", None),  # fullwidth １６０５１
    ("\u0967\u096c", None),  # Devanagari १६
    ("\U0001d7cf\U0001d7d4", None),  # mathematical bold 𝟏𝟔
    ("16051 then \u0661\u0666", 16051),  # trailing Arabic-Indic digits are just text
    ("16051 \uff11\uff16", 16051),
    ("\uff11\uff16 5", 5),
]


@pytest.mark.parametrize("text, expected", LAST_INTEGER_CASES)
def test_last_integer(text, expected):
    assert last_integer(text) == expected


@pytest.mark.parametrize("minus", MINUS_SIGNS)
@pytest.mark.parametrize(
    "template, sign",
    [
        ("{m}7", -1),  # glued at the start
        ("is {m}7", -1),  # glued, space before
        ("({m}7)", -1),
        ("= {m} 7", -1),  # spaced, operator before
        ("{m} 7", -1),  # spaced, start before
        ("= {m}16,051", -1),
        ("= {m}16051.0", -1),
        ("3{m}7", 1),  # glued to a digit: binary
        ("3 {m} 7", 1),  # spaced, digit before: binary
        ("a{m}7", 1),
        ("){m}7", 1),
    ],
)
def test_every_minus_sign_unary_and_binary(minus, template, sign):
    text = template.format(m=minus)
    magnitude = 16051 if "16" in template else 7
    assert last_integer(text) == sign * magnitude


# ============================================================================ answer_block

ANSWER_BLOCK_CASES = [
    ("<answer>5</answer>", "5"),
    ("<think>2+3</think><answer> 5 </answer>", " 5 "),
    ("<answer></answer>", ""),
    ("<answer>1</answer><answer>2</answer>", "2"),  # several blocks: the last counts
    ("<answer>1</answer> then <answer>2</answer> and <answer>3</answer>", "3"),
    ("<answer>5</answer> some text 99 after", "5"),
    ("<answer>5</answer></answer></answer>", "5"),
    ("<answer>5" + "</answer>" * 1000, "5"),
    ("<answer>5", None),  # unclosed
    ("<think>1</think><answer>16051", None),
    ("no tags 5", None),
    ("</answer>5<answer>", None),  # closing tag before the opening one
    ("<ANSWER>5</ANSWER>", None),  # tags are matched exactly, lower case
    ("<Answer>5</Answer>", None),
    ("<answer >5</answer>", None),
]


@pytest.mark.parametrize("response, expected", ANSWER_BLOCK_CASES)
def test_answer_block(response, expected):
    assert answer_block(response) == expected


# ============================================================================ strict / loose / format

# (response, answer, strict, loose, format)
SCORE_CASES = [
    # plain correct
    (tagged("16051"), 16051, True, True, True),
    (tagged("The answer is 16051."), 16051, True, True, True),
    (tagged("16051"), 16052, False, False, True),
    # negative answers and minus signs
    (tagged("-5"), -5, True, True, True),
    (tagged("-5"), 5, False, False, True),
    (tagged("\u221216051"), -16051, True, True, True),
    (tagged("= \u2212 16051"), -16051, True, True, True),
    (tagged("\u2012" + "5"), -5, True, True, True),
    (tagged("\u2013" + "5"), -5, True, True, True),
    (tagged("\u2014" + "5"), -5, True, True, True),
    (tagged("\ufe63" + "5"), -5, True, True, True),
    (tagged("\uff0d" + "5"), -5, True, True, True),
    (tagged("3 - 5"), 5, True, True, True),  # binary minus: last integer is 5
    (tagged("3 - 5"), -5, False, False, True),
    (tagged("3-5"), -2, False, False, True),  # expressions are not evaluated
    (tagged("3-5"), 5, True, True, True),
    (tagged("the result is -5"), -5, True, True, True),
    (tagged("= - 5"), -5, True, True, True),
    (tagged("\u221216,051"), -16051, True, True, True),
    # thousands separators / spaces
    (tagged("16,051"), 16051, True, True, True),
    (tagged("1,2,3"), 123, False, False, True),
    (tagged("1,2,3"), 3, True, True, True),
    (tagged("16 051"), 16051, False, False, True),
    (tagged("16 051"), 51, True, True, True),
    # decimals
    (tagged("16051.0"), 16051, True, True, True),
    (tagged("16051.5"), 16051, False, False, False),
    (tagged("16051 or 16051.5"), 16051, False, False, False),
    # several blocks: the last one counts
    (tagged("1") + "<answer>2</answer>", 2, True, True, True),
    (tagged("2") + "<answer>1</answer>", 2, False, False, True),
    # text after </answer> is ignored by strict; loose still reads the whole response
    (tagged("5") + " wait, maybe 7", 5, True, True, True),
    (tagged("5") + " wait, maybe 7", 7, False, True, True),
    (tagged("5") + "</answer>" * 500, 5, True, True, True),
    (tagged("5") + "</answer> 9 </answer> 9", 5, True, True, True),
    # unclosed answer: strict 0, format not ok, loose may pass
    ("<think>work</think><answer>16051", 16051, False, True, False),
    ("<answer>-5", -5, False, True, False),
    # no tags at all
    ("The answer is 16051", 16051, False, True, False),
    ("16051 is the answer, I think so", 16051, False, True, False),
    ("<ANSWER>5</ANSWER>", 5, False, True, False),
    # no digits / empty block / non-ASCII digits
    ("I do not know.", 0, False, False, False),
    (tagged("I do not know."), 0, False, False, False),
    ("<answer></answer>", 0, False, False, False),
    (tagged("   "), 0, False, False, False),
    (tagged("\u0661\u0666\u0660\u0665\u0661"), 16051, False, False, False),
    (tagged("\uff11\uff16\uff10\uff15\uff11"), 16051, False, False, False),
    (tagged("16051 \u0661"), 16051, True, True, True),  # Arabic-Indic digit after: just text
]


@pytest.mark.parametrize("response, answer, strict, loose, fmt", SCORE_CASES)
def test_scores(response, answer, strict, loose, fmt):
    assert score_strict(response, answer) is strict
    assert score_loose(response, answer) is loose
    assert format_ok(response) is fmt


def test_loose_reads_last_integer_of_whole_response():
    # the block holds a wrong answer: strict fails, loose reads the right one at the very end
    resp = "<think>16051</think><answer>16052</answer> no, 16051"
    assert not score_strict(resp, 16051)
    assert score_loose(resp, 16051)
    # and an earlier right number does not help loose if a later integer is wrong
    assert not score_loose("16051 ... actually 16052", 16051)


# ---------------------------------------------------------------------------- long responses


def _repeat_to(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


# Many numbers, glued signs, every minus sign, separators, decimals, tags — but no minus sign
# spaced from its digits (that case is test_long_response_with_spaced_minus_is_fast).
GLUED_UNIT = (
    "step: 12*34=408, then 408+17=425; we get (\u221216,051.0) and 3-5 gives -7, "
    "x\u20127 or 1,234 or 2.5 then \u0661\u0666 <answer>9</answer></answer> and so on... "
)
MB2 = 2_000_000


def _score_long(think: str):
    """strict/loose/format of a response whose loose score needs the whole text scanned (the
    block is wrong, the right integer comes last), and the best of up to two timings."""
    resp = f"<think>{think}</think><answer>16052</answer> no, it is 16051"
    best = float("inf")
    for _ in range(2):
        with time_limit(10):  # a super-linear scan fails here instead of stalling the suite
            t0 = time.perf_counter()
            result = (score_strict(resp, 16051), score_loose(resp, 16051), format_ok(resp))
            best = min(best, time.perf_counter() - t0)
        if best < 1.0:
            break
    return result, best


def test_long_response_scored_fast():
    think = GLUED_UNIT * (MB2 // len(GLUED_UNIT))
    assert len(think) > 0.99 * MB2
    assert sum(ch.isdigit() for ch in think[:10_000]) > 1000  # many digits
    result, elapsed = _score_long(think)
    assert result == (False, True, True)
    assert elapsed < 5.0, f"2 MB response took {elapsed:.2f} s"


def test_long_response_with_spaced_minus_is_fast():
    think = _repeat_to("so 12 * 34 = 408, and 408 - 17 = 391; then 391 \u2212 1 = 390. ", MB2)
    result, elapsed = _score_long(think)
    assert result == (False, True, True)
    assert elapsed < 5.0, f"2 MB response took {elapsed:.2f} s"


def _best_time(fn, arg, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - t0)
    return best


def _score_all(resp):
    return score_strict(resp, 1), score_loose(resp, 1), format_ok(resp), last_integer(resp)


@pytest.mark.parametrize(
    "unit",
    [
        pytest.param(GLUED_UNIT, id="numbers"),
        pytest.param("</answer>", id="closing-tags"),
        pytest.param("<answer>", id="opening-tags"),
        pytest.param("<answer>1,234,56", id="open-tags-and-numbers"),
        pytest.param("- \t", id="minus-space-runs"),
        pytest.param("1,234,567,890,", id="separator-runs"),
        pytest.param("text without any digits. ", id="no-digits"),
    ],
)
def test_scoring_time_is_linear(unit):
    n = 25_000
    small = "<answer>" + _repeat_to(unit, n) + "</answer>"
    large = "<answer>" + _repeat_to(unit, 4 * n) + "</answer>"
    _score_all(small)  # warm up
    t1 = max(_best_time(_score_all, small), 1e-3)  # floor: timer noise on tiny times
    with time_limit(max(2.0, 30 * t1)):
        t4 = _best_time(_score_all, large, repeats=2)
    assert t4 <= 10 * t1, f"4x length took {t4 / t1:.1f}x the time ({t1:.4f} s -> {t4:.4f} s)"


@pytest.mark.parametrize("n_digits", [5000, 1_000_000])
def test_huge_digit_run_does_not_crash(n_digits):
    resp = "<think>" + "7" * n_digits + "</think><answer>" + "7" * n_digits + "</answer>"
    with time_limit(5):
        t0 = time.perf_counter()
        strict, loose = score_strict(resp, 7), score_loose(resp, 7)
        elapsed = time.perf_counter() - t0
    assert (strict, loose) == (False, False)
    assert elapsed < 5.0


# ---------------------------------------------------------------------------- property tests

# think / trailing text: letters, spaces, punctuation, ASCII and other minus signs, digits,
# non-ASCII digits, tag characters. Never contains "<answer>" (that would open a new block).
_TEXT_ALPHABET = st.sampled_from(
    list("abcxyz ABC\n\t.,;:=+*/()<>!?") + list("0123456789") + MINUS_SIGNS + ["\u0661", "\uff11", "\u00b2"]
)
noise_text = st.text(_TEXT_ALPHABET, max_size=60).filter(lambda s: "<answer>" not in s)
other_numbers = st.lists(st.integers(-(10**7), 10**7), max_size=5)


@st.composite
def think_text(draw):
    parts = [draw(noise_text)]
    for k in draw(other_numbers):
        parts.append(f" {k} ")
        parts.append(draw(noise_text))
    return "".join(parts)


answers = st.one_of(st.integers(-999, 999), st.integers(-(10**12), 10**12))


@st.composite
def formatted(draw, x: int) -> str:
    """x written in any of the documented ways."""
    digits = str(abs(x))
    if abs(x) >= 1000 and draw(st.booleans()):
        digits = f"{abs(x):,}"
    if draw(st.booleans()):
        digits += "." + "0" * draw(st.integers(1, 3))
    if x < 0:
        return draw(st.sampled_from(MINUS_SIGNS)) + digits
    return draw(st.sampled_from(["", "+"])) + digits


# how the answer may be introduced inside the block, and what may follow it
BLOCK_PREFIXES = ["", " ", "\n", "= ", "The answer is ", "x = ", "Final: ", "("]
BLOCK_SUFFIXES = ["", " ", ".", "\n", ")", "!"]
after_text = st.text(_TEXT_ALPHABET, max_size=40).filter(lambda s: "<answer>" not in s)


@st.composite
def tagged_response(draw, x: int):
    think = draw(think_text())
    body = draw(st.sampled_from(BLOCK_PREFIXES)) + draw(formatted(x)) + draw(st.sampled_from(BLOCK_SUFFIXES))
    tail = draw(after_text)
    return f"<think>{think}</think>\n<answer>{body}</answer>{tail}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), x=answers)
def test_property_correct_answer_scores(data, x):
    resp = data.draw(tagged_response(x))
    assert score_strict(resp, x), resp
    assert score_loose(resp, x), resp
    assert format_ok(resp), resp


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), x=answers, y=answers)
def test_property_wrong_answer_never_strict(data, x, y):
    if x == y:
        y = x + 1
    resp = data.draw(tagged_response(y))
    assert not score_strict(resp, x), resp
    assert format_ok(resp), resp


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), x=answers)
def test_property_loose_without_tags(data, x):
    think = data.draw(think_text())
    lead = data.draw(st.sampled_from(["so the result is ", "\n= ", "answer: ", "\n"]))
    # trailing text without any ASCII digit (non-ASCII digits allowed: they are not digits)
    tail = data.draw(st.text(st.sampled_from(list("abc .!?\n") + ["\u0661", "\uff11"]), max_size=20))
    resp = f"{think}\n{lead}{data.draw(formatted(x))}{tail}"
    assert score_loose(resp, x), resp
    assert not score_strict(resp, x), resp  # no answer block
    assert not format_ok(resp), resp


# ============================================================================ Countdown scoring

# (expression, numbers, expected value or None)
COUNTDOWN_VALUE_CASES = [
    ("3 * 5 + 7", (3, 5, 7), Fraction(22)),
    ("7 + 3 * 5", (3, 5, 7), Fraction(22)),
    ("(7 - 3) * 5", (3, 5, 7), Fraction(20)),
    ("((7 - 3) * 5)", (3, 5, 7), Fraction(20)),
    ("7 * (5 - 3)", (3, 5, 7), Fraction(14)),
    ("(7 \u2212 3) \u00d7 5", (3, 5, 7), Fraction(20)),  # − ×
    ("(7 \u2013 3) * 5", (3, 5, 7), Fraction(20)),  # en dash
    ("(7 \uff0d 3) * 5", (3, 5, 7), Fraction(20)),  # fullwidth hyphen-minus
    ("35 \u00f7 7 \u00d7 2", (35, 7, 2), Fraction(10)),  # ÷ ×
    ("3 * 5 + 7 = 22", (3, 5, 7), Fraction(22)),  # "= target" suffix
    ("3 * 5 + 7 = 23", (3, 5, 7), Fraction(22)),  # only the part before "=" is read
    ("  3 * 5 + 7  ", (3, 5, 7), Fraction(22)),
    ("(10 / 4) * 4", (10, 4, 4), Fraction(10)),  # exact fractions
    ("10 / 4 + 4", (10, 4, 4), Fraction(13, 2)),
    ("5 - 7 - 3", (3, 5, 7), Fraction(-5)),  # negative values are values
    ("1000 * 1000 * 1", (1000, 1000, 1), Fraction(10**6)),  # at the limit: allowed
    # wrong use of the numbers
    ("3 * 3 + 7", (3, 5, 7), None),  # reused, 5 missing
    ("3 * 5", (3, 5, 7), None),  # missing
    ("3 * 5 + 7 + 1", (3, 5, 7), None),  # extra
    ("3 * 5 + 7 + 7", (3, 5, 7), None),
    # refused syntax
    ("3 ** 5 + 7", (3, 5, 7), None),  # power
    ("3 ^ 5 + 7", (3, 5, 7), None),  # xor
    ("-3 + 5 * 7", (3, 5, 7), None),  # unary minus
    ("\u22123 + 5 * 7", (3, 5, 7), None),  # unary minus, U+2212
    ("+3 + 5 * 7", (3, 5, 7), None),  # unary plus
    ("3 // 5 + 7", (3, 5, 7), None),
    ("3 % 5 + 7", (3, 5, 7), None),
    ("3.0 * 5 + 7", (3, 5, 7), None),  # floats
    ("True + 5 + 7", (1, 5, 7), None),  # bool is not a number here
    ("7 / (5 - 5)", (5, 5, 7), None),  # division by zero
    ("7 / 0 + 1", (7, 0, 1), None),
    ("1000 * 1000 + 1", (1000, 1000, 1), None),  # intermediate beyond 10**6
    ("1000 * 1000 * 2", (1000, 1000, 2), None),
    ("1 / 1000 / 1001", (1, 1000, 1001), None),  # denominator beyond 10**6
    ("__import__('os')", (3, 5, 7), None),  # names and calls
    ("__import__('os').system('echo 1') + 3 + 5 + 7", (3, 5, 7), None),
    ("abs(3) + 5 + 7", (3, 5, 7), None),
    ("a + 5 + 7", (3, 5, 7), None),
    ("[3][0] + 5 + 7", (3, 5, 7), None),
    ("(3, 5, 7)", (3, 5, 7), None),
    ("3 < 5 + 7", (3, 5, 7), None),
    ("", (3, 5, 7), None),
    ("= 22", (3, 5, 7), None),
    ("3 * 5 +", (3, 5, 7), None),  # syntax error
    ("3 * 5\n+ 7", (3, 5, 7), None),
]


@pytest.mark.parametrize("expr, numbers, expected", COUNTDOWN_VALUE_CASES)
def test_countdown_value(expr, numbers, expected):
    value = countdown_value(expr, numbers)
    assert value == expected
    if expected is not None:
        assert isinstance(value, Fraction)


def test_countdown_value_order_of_numbers_does_not_matter():
    assert countdown_value("3 * 5 + 7", [7, 3, 5]) == 22
    assert countdown_value("3 * 5 + 7", (5, 7, 3)) == 22


def test_countdown_length_limit():
    # the same expression padded with inner spaces, at the limit and one past it
    core = "3 * 5 + 7"
    at_limit = "3" + " " * (COUNTDOWN_MAX_CHARS - len(core)) + core[1:]
    past_limit = "3" + " " * (COUNTDOWN_MAX_CHARS - len(core) + 1) + core[1:]
    assert len(at_limit) == COUNTDOWN_MAX_CHARS and len(past_limit) == COUNTDOWN_MAX_CHARS + 1
    assert countdown_value(at_limit, (3, 5, 7)) == 22
    assert countdown_value(past_limit, (3, 5, 7)) is None
    # deep brackets past the limit
    deep = "(" * 100 + core + ")" * 100
    assert countdown_value(deep, (3, 5, 7)) is None
    assert countdown_value("(" * 90 + core + ")" * 90, (3, 5, 7)) == 22


# (response, numbers, target, expected)
SCORE_COUNTDOWN_CASES = [
    (tagged("3 * 5 + 7"), (3, 5, 7), 22, True),
    (tagged("(7 \u2212 3) \u00d7 5 = 20"), (3, 5, 7), 20, True),
    (tagged("(10 / 4) * 4"), (10, 4, 4), 10, True),  # fraction on the way, exact result
    (tagged("3 * 5 + 7"), (3, 5, 7), 23, False),  # wrong value
    (tagged("3 * 5 + 7 = 23"), (3, 5, 7), 23, False),  # claiming the target does not help
    (tagged("3 * 3 + 7 + 6"), (3, 5, 7), 25, False),
    (tagged("-3 + 5 * 5"), (3, 5, 5), 22, False),
    (tagged("2 ** 3 * 2 + 6"), (2, 3, 2), 22, False),
    (tagged("22"), (3, 5, 7), 22, False),  # the bare target is not an expression over the numbers
    ("3 * 5 + 7", (3, 5, 7), 22, False),  # no answer block
    ("<answer>3 * 5 + 7", (3, 5, 7), 22, False),  # unclosed
    (tagged("3 * 5") + "<answer>3 * 5 + 7</answer>", (3, 5, 7), 22, True),  # last block counts
    (tagged("3 * 5 + 7") + "<answer>3 * 5</answer>", (3, 5, 7), 22, False),
    (tagged("3 * 5 + 7") + " so 22 </answer>", (3, 5, 7), 22, True),
]


@pytest.mark.parametrize("response, numbers, target, expected", SCORE_COUNTDOWN_CASES)
def test_score_countdown(response, numbers, target, expected):
    assert score_countdown(response, numbers, target) is expected


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
    [("arith-4x4", 10, 10, 0), ("", 10, 10, 0), ("Arith-3x2", 10, 10, 0), ("arith-3x2", -1, 10, 0), ("arith-3x2", 10, -1, 0)],
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
    return subprocess.run(
        [sys.executable, "countdown.py", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


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


# ============================================================================ strategies

Q = cd.Problem("q/0", "arith-3x2", "413 * 41 - 882", 16051, (413, 41, 882))
STRATEGY_CASES = [  # (response, product, subtraction shown)
    ("<think>413 * 41 = 413 * 40 + 413 * 1 = 16520 + 413 = 16933. 16933 - 882 = 16051</think>\n<answer>16051</answer>", "split", True),
    ("413 * (40 + 1) = 16520 + 413 = 16933; 16933 − 882 = 16051", "split", True),  # the report's `many` example; a Unicode minus
    ("413 × 41 = 413 × 40 + 413 = 16,520 + 413 = 16,933", "split", False),  # ×, thousands separators, the operand for 413 * 1
    ("(400 + 10 + 3) * 41 = 16400 + 410 + 123 = 16933", "split", False),  # the other operand split
    ("400 * 41 + 10 * 41 + 3 * 41 = 16933", "split", False),
    ("413 * 40 + 413 * 2 = 17346", "split", False),  # a wrong part is still a split: the method, not its result
    ("  413\n×  41\n-----\n  413\n16520\n-----\n16933\nSo 16933 - 882 = 16051", "split", True),  # a column of partial products
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
    rng = __import__('random').Random(5)
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


@pytest.mark.parametrize("response, expected", [
    ("<think>15 * 7 = 10 * 7 + 5 * 7 = 70 + 35 = 105. 105 - 38 = 67</think><answer>67</answer>", "clean"),
    ("<think>15 * 7 = 105. 105 - 38 = 67</think>So it is 67", "clean"),
    ("<think>15 * 7 = 95. 95 - 38 = 67</think>So it is 67", "compensating"),  # product 10 too small, a borrow forgotten
    ("<think>15 * 7 = 105. 105 - 38 = 77</think>The answer is 77.", "slipped"),  # the borrow forgotten alone
    ("<think>15 * 7 = 105. 105 - 38 = 77. 105 - 38 = 67</think>", "clean"),  # the last subtraction is read
    ("15 * 7 - 38 = 67", "unshown"),  # the restated question is no subtraction of a written product
    ("The answer is 67", "unshown"),
])
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
