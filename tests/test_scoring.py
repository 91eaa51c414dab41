"""countdown.py's scores: last_integer, the answer block, strict / loose / format, Countdown
expressions. Every scoring decision in the module docstring has a table row.

The timing tests catch super-linear scans (a quadratic scan of 2 MB takes minutes); their bounds
are loose on purpose so that a busy machine does not fail them.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from countdown import (  # noqa: E402
    COUNTDOWN_MAX_CHARS,
    answer_block,
    countdown_value,
    format_ok,
    last_integer,
    score_countdown,
    score_loose,
    score_strict,
)

MINUS_SIGNS = ["-", "\u2212", "\u2012", "\u2013", "\u2014", "\ufe63", "\uff0d"]


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
