"""Problems, prompts and scoring for the study. Plain Python: no torch, no model.

Tasks (each a generator seeded by an explicit argument, identical on every machine):
  arith-3x2   a * b - c, a 3-digit, b 2-digit, c 3-digit   (the study's task, e.g. 413 * 41 - 882)
  arith-2x2   a * b - c, a 2-digit, b 2-digit, c 3-digit   (the easier variant of the base-rate probe)
  arith-3x3   a * b - c, all 3-digit                       (the study's out-of-distribution set)
  arith-2x1   a * b - c, a 2-digit, b 1-digit, c 2-digit   (the CPU world: a tiny model can learn it)
  arith-2x1-1 a * b - c, a 2-digit, b 1-digit, c 1-digit   (the CPU world's out-of-distribution set)
  arith-1x1   a * b - c, all 1-digit                       (the smoke test: learnable in seconds)
  add-1x1     a + b, 1-digit each                          (the probe ladder for small pretrained models)
  add-2x2     a + b, 2-digit each                          (likewise)

Splits (draw_splits): test, train, pretrain (the CPU world's base), dev (checks during training),
confirm and confirm2 (confirmatory runs' fresh test sets, task.test_split), drawn in that order from
one generator seeded by (task, task seed), never sharing a question.
  countdown   three numbers and a target reachable with + - * / using each number once

Scoring decisions (every one is tested in tests/test_scoring.py):
  * An integer is a run of ASCII digits 0-9. Other Unicode digits ("١٦") are not digits: the
    prompt asks for an integer and the tokenizer sees them as other symbols.
  * Thousands separators count only in the exact form 1,234 or 16,051,000 (groups of three);
    "1,2,3" is three integers. Spaces are never inside a number: "16 051" is 16 and then 51,
    so a number split by a space is read as its last part (and scores wrong).
  * A minus sign (ASCII '-', U+2212, the dashes U+2012-2014, U+FE63, U+FF0D) makes the number
    negative when it is unary: glued to the digits and not itself glued to a digit, letter or ')'
    before it ("is -5", "(-5", "= −16051"), or spaced from the digits with nothing but an operator
    or the start before it ("= - 5"). Otherwise it is the binary operator: the last integer of
    "3 - 5" and of "3-5" is 5. A '+' sign changes nothing.
  * A number with a decimal part counts as that integer only if the part is all zeros
    ("16051.0" is 16051); "16051.5" is a number but not an integer, and as the last number
    it makes the answer wrong rather than letting an earlier integer stand in.
  * The answer block is the last complete one: the last "<answer>" that is closed later, up to
    the first "</answer>" after it. Text after that "</answer>" (repeated closing tags, a stray
    "<answer>" that is never closed) is ignored by the strict score. A response whose only
    "<answer>" is never closed has no block: strict 0, format not ok (loose may still pass).
  * A run of more than MAX_DIGITS (100) digits is a number but never an answer.
  * "- 5" opening a line after a newline is a list bullet: 5, not -5 (opening the text, -5).
    Tags are matched exactly, lower case, as the prompt asks for them.
  * Every scan is a single left-to-right regular-expression pass without backtracking
    blow-ups, so scoring is linear in the response length.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import json
import random
import re
import sys
from dataclasses import asdict, dataclass, field
from fractions import Fraction

# ----------------------------------------------------------------------------- problems

# task name -> (digits of a, digits of b, digits of c) for a * b - c
ARITH_DIGITS = {
    "arith-3x2": (3, 2, 3),
    "arith-2x2": (2, 2, 3),
    "arith-2x1": (2, 1, 2),
    "arith-2x1-1": (2, 1, 1),  # the CPU world's out-of-distribution set: a 1-digit subtrahend
    "arith-3x3": (3, 3, 3),  # the study's out-of-distribution set
    "arith-1x1": (1, 1, 1),
}
# task name -> (digits of a, digits of b) for a + b: the bottom of the probe ladder for pretrained models
# too small for a * b - c (configs/smollm2.yaml; PLAN.md section 11)
SUM_DIGITS = {
    "add-1x1": (1, 1),
    "add-2x2": (2, 2),
}
TASKS = tuple(ARITH_DIGITS) + tuple(SUM_DIGITS) + ("countdown",)
SCORINGS = ("strict", "loose")  # the two scorings every verdict is judged on (score() also gives "format")

COUNTDOWN_MAX_NUMBER = 99  # the three numbers are drawn from 1..99
COUNTDOWN_MAX_TARGET = 999  # targets are kept in 1..999


@dataclass(frozen=True)
class Problem:
    id: str  # e.g. "arith-3x2/train/17"; unique inside a split
    task: str
    question: str  # the expression or the Countdown statement, as shown to the model
    answer: int  # the true value (Countdown: the target)
    numbers: tuple[int, ...] = field(default_factory=tuple)  # operands (Countdown: the three numbers)
    solution: str = ""  # one known expression (Countdown only)

    @classmethod
    def from_row(cls, row: dict, task: str | None) -> "Problem":
        """The problem of one row of an evaluation file (its id, question and answer; the operands read
        back from an `a * b - c` question, else none): what the analysis needs of it, without the splits."""
        return cls(row["id"], task, row["question"], row["answer"], operands(row["question"]) or ())


def _rng(*parts) -> random.Random:
    """A generator seeded from explicit parts. sha256 of the text, so it is the same on every
    machine and Python version (Python's own str hashing is salted per process)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _digits(rng: random.Random, n: int) -> int:
    return rng.randint(10 ** (n - 1), 10**n - 1)


def _sum_problem(rng: random.Random, task: str) -> tuple[str, int, tuple[int, ...], str]:
    da, db = SUM_DIGITS[task]
    a, b = _digits(rng, da), _digits(rng, db)
    return f"{a} + {b}", a + b, (a, b), ""


def _arith_problem(rng: random.Random, task: str) -> tuple[str, int, tuple[int, ...], str]:
    if task in SUM_DIGITS:
        return _sum_problem(rng, task)
    da, db, dc = ARITH_DIGITS[task]
    a, b, c = _digits(rng, da), _digits(rng, db), _digits(rng, dc)
    return f"{a} * {b} - {c}", a * b - c, (a, b, c), ""


_OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": lambda x, y: x / y}


def _countdown_problem(rng: random.Random) -> tuple[str, int, tuple[int, ...], str]:
    """Draw three numbers in 1..99 and a random expression over all three (random order, two
    random operators, random bracketing); the target is its value. Redraw until the value is a
    whole number in 1..999 and every division is exact, so each target has a known solution."""
    while True:
        nums = [rng.randint(1, COUNTDOWN_MAX_NUMBER) for _ in range(3)]
        x, y, z = rng.sample(nums, 3)
        op1, op2 = rng.choice("+-*/"), rng.choice("+-*/")
        if rng.random() < 0.5:
            inner = _OPS[op1](Fraction(x), Fraction(y)) if not (op1 == "/" and y == 0) else None
            expr = f"({x} {op1} {y}) {op2} {z}"
            value = None if inner is None else _OPS[op2](inner, Fraction(z))
            exact = inner is not None and inner.denominator == 1
        else:
            inner = _OPS[op2](Fraction(y), Fraction(z))
            expr = f"{x} {op1} ({y} {op2} {z})"
            value = None if (op1 == "/" and inner == 0) else _OPS[op1](Fraction(x), inner)
            exact = inner.denominator == 1
        if value is not None and exact and value.denominator == 1 and 1 <= value <= COUNTDOWN_MAX_TARGET:
            target = int(value)
            q = f"Using the numbers {nums[0]}, {nums[1]}, {nums[2]} exactly once each, with + - * /, make {target}"
            return q, target, tuple(nums), expr


def generate(task: str, n: int, seed: int, split: str = "train", n_test: int = 128) -> list[Problem]:
    """The first n problems of one split, as make_splits(task, ..., n_test, seed) draws them."""
    if split == "test":
        return make_splits(task, 0, n, seed)[1]
    return make_splits(task, n, n_test, seed)[0]


SPLITS = (
    "test",
    "train",
    "pretrain",
    "dev",
    "confirm",
    "confirm2",
    "confirm3",
    "confirm4",
)  # the order they are drawn in


def draw_splits(task: str, seed: int, counts: dict[str, int]) -> dict[str, list[Problem]]:
    """Problems of every split from one generator seeded by (task, seed), drawn in the order of
    SPLITS: test, train, pretrain (the CPU world's base is pre-trained on it), dev (held-out
    checks during training), confirm (a fresh test set for a confirmatory run, PLAN_CHANGES.md change 44),
    confirm2 (a second one, drawn after confirm: change 57), confirm3 (a third, after confirm2: PLAN.md 7e),
    confirm4 (a fourth, after confirm3: change 71).
    No question is repeated within or across splits. Each split depends
    only on the splits drawn before it, so adding a later split (or changing its size) leaves
    the earlier ones unchanged: the test and train problems are the same whatever pretrain and
    dev hold, and the first train problems do not depend on n_train."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    unknown = set(counts) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown split {sorted(unknown)[0]!r}; choose from {', '.join(SPLITS)}")
    if any(c < 0 for c in counts.values()):
        raise ValueError("problem counts must be >= 0")
    drawn = _drawn_splits(task, seed, tuple(counts.get(split, 0) for split in SPLITS))
    return {split: list(drawn[split]) for split in SPLITS}


@functools.lru_cache(maxsize=16)
def _drawn_splits(task: str, seed: int, sizes: tuple[int, ...]) -> dict[str, tuple[Problem, ...]]:
    """Every split of SPLITS at these sizes, drawn once per process: a dry run asks for the same train
    split for every (condition, seed); the problems are frozen, and draw_splits hands out fresh lists."""
    rng = _rng("problems", task, seed)
    seen: set[str] = set()
    out: dict[str, list[Problem]] = {}
    for split, count in zip(SPLITS, sizes):
        out[split] = []
        tries = 0
        while len(out[split]) < count:
            tries += 1
            if tries > 100 * count + 1000:
                raise ValueError(
                    f"{task} has too few distinct problems for " + " + ".join(f"{n} {x}" for x, n in zip(SPLITS, sizes))
                )
            q, ans, nums, sol = _countdown_problem(rng) if task == "countdown" else _arith_problem(rng, task)
            if q in seen:
                continue
            seen.add(q)
            out[split].append(Problem(f"{task}/{split}/{len(out[split])}", task, q, ans, nums, sol))
    return {split: tuple(problems) for split, problems in out.items()}


def make_splits(task: str, n_train: int, n_test: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """Train and test problems for `task` (draw_splits' first two splits)."""
    d = draw_splits(task, seed, {"test": n_test, "train": n_train})
    return d["train"], d["test"]


def borrow_columns(x: int, y: int) -> list[int]:
    """The columns (0 = units) at which the written subtraction of the smaller of x, y from the
    larger borrows: 903 - 47 borrows at columns 0 and 1 -> [0, 1]; 285 - 42 -> []. Both >= 0."""
    if x < 0 or y < 0:
        raise ValueError(f"borrow_columns needs two numbers >= 0, got {x} and {y}")
    big, small = max(x, y), min(x, y)
    out, carry, j = [], 0, 0
    while big or small:
        if big % 10 - carry < small % 10:
            out.append(j)
            carry = 1
        else:
            carry = 0
        big, small, j = big // 10, small // 10, j + 1
    return out


def operands(question: str) -> tuple[int, ...] | None:
    """(a, b, c) of a question written `a * b - c` (as the arithmetic tasks write it), else None."""
    m = re.fullmatch(r"\s*([0-9]+) \* ([0-9]+) - ([0-9]+)\s*", str(question))
    return tuple(int(x) for x in m.groups()) if m else None


def stratum(problem: Problem) -> str | None:
    """The difficulty stratum of an `a * b - c` problem (PLAN.md section 7c): how many borrows the
    final subtraction a * b - c needs, "borrows-0", "borrows-1", ... (None for other tasks)."""
    if problem.task not in ARITH_DIGITS:
        return None
    a, b, c = problem.numbers
    return f"borrows-{len(borrow_columns(a * b, c))}"


# ----------------------------------------------------------------------------- prompts

# Qwen2.5-Instruct's own default system message, sent explicitly (PLAN_CHANGES.md change 16): the rendered
# ChatML is then the same under Qwen2.5's template (which inserts it when none is given) and under
# any other ChatML template (the rehearsal's Qwen tokenizer adds no default).
SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
ARITH_INSTRUCTION = (
    "Compute {q}. Show your working inside <think> </think> tags, then give the final answer "
    "as a single integer inside <answer> </answer> tags."
)
COUNTDOWN_INSTRUCTION = (
    "{q}. Show your working inside <think> </think> tags, then give one expression that equals "
    "the target inside <answer> </answer> tags, for example <answer>(1 + 2) * 3</answer>."
)
PROMPT_STYLES = ("instruct", "bare")


def prompt_messages(problem: Problem, style: str = "instruct", system: str | None = SYSTEM_PROMPT) -> list[dict]:
    """The chat messages for one problem; the model's chat template renders them later.

    "instruct": the study's prompt: the system message `system` (None: none, so the chat
    template's own default applies, if it has one), then the user turn asking for <think> and
    <answer> tags. "bare": just the question as the user turn, for the CPU world's tiny model,
    whose own chat template carries the format; it keeps prompts short enough for a
    character-level model."""
    if style == "bare":
        return [{"role": "user", "content": problem.question}]
    if style != "instruct":
        raise ValueError(f"unknown prompt style {style!r}; choose one of {', '.join(PROMPT_STYLES)}")
    text = (COUNTDOWN_INSTRUCTION if problem.task == "countdown" else ARITH_INSTRUCTION).format(q=problem.question)
    return ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": text}]


# ----------------------------------------------------------------------------- scoring

MAX_DIGITS = 100  # a longer run of digits is a number but never an answer (read as None)
_MINUS = "-\u2212\u2012\u2013\u2014\ufe63\uff0d"
_NUMBER_CHARS = frozenset("0123456789,. \t+" + _MINUS)
# One number: an optional sign (with optional spaces after it), then digits with exact
# thousands groups or a plain run, then an optional decimal part. `(?<![0-9])` keeps a match
# from starting inside a run of digits. All quantifiers are possessive-free but unambiguous,
# so the scan is linear.
_NUMBER = re.compile(
    rf"(?P<sign>[{_MINUS}+][ \t]*)?"
    r"(?<![0-9])(?P<int>[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)"
    r"(?:\.(?P<frac>[0-9]+))?"
)


def _numbers(text: str, pos: int = 0) -> list[tuple[int | None, int]]:
    """Every number in text[pos:] as (value or None if not an integer, start position). pos must
    not fall inside a number (see last_integer)."""
    out = []
    for m in _NUMBER.finditer(text, pos):
        digits = m["int"].replace(",", "")
        if len(digits) > MAX_DIGITS:  # no answer is this long; int() of it would be slow or refused
            out.append((None, m.start()))
            continue
        value = int(digits)
        sign = m["sign"]
        if sign is not None and sign[0] in _MINUS and _is_unary(text, m.start(), attached=len(sign) == 1):
            value = -value
        frac = m["frac"]
        out.append((value if frac is None or set(frac) == {"0"} else None, m.start()))
    return out


def _is_unary(text: str, at: int, attached: bool) -> bool:
    """Is the sign at text[at] a unary minus? Binary if glued to a digit, letter or ')' before it
    ("3-5"); unary if glued to its digits ("is -5", "(-5"); with spaces on both sides ("3 - 5",
    "= - 5") it is unary only when what precedes is not a digit, letter or ')'."""

    def operand(ch: str) -> bool:
        return ch.isalnum() or ch == ")"

    just_before = text[at - 1 : at]
    if just_before and operand(just_before):
        return False
    if attached:
        return True
    i = at - 1
    while i >= 0 and text[i] in " \t":  # step back over spaces (a loop, not a slice: linear time)
        i -= 1
    if i < 0:
        return True  # "- 5" opening the text (or an answer block) is a sign
    if text[i] == "\n":
        return False  # "- 5" opening a later line is a list bullet
    return not operand(text[i])


def last_integer(text: str) -> int | None:
    """The last number in `text` if it is an integer, else None (see the module docstring)."""
    last = max(text.rfind(d) for d in "0123456789")
    if last < 0:
        return None
    # Scan only the tail: step back from the last digit over characters a number can hold; the
    # first character before that cannot belong to any number, so the scan from there sees the
    # same last number as a scan of the whole text.
    pos = last
    while pos > 0 and text[pos - 1] in _NUMBER_CHARS:
        pos -= 1
    nums = _numbers(text, pos)
    return nums[-1][0] if nums else None


def answer_block(response: str) -> str | None:
    """The text of the last complete <answer>…</answer> block, or None: the last "<answer>"
    that has a "</answer>" after it, up to the first "</answer>" that follows it."""
    close = response.rfind("</answer>")
    if close < 0:
        return None
    start = response.rfind("<answer>", 0, close)
    if start < 0:
        return None
    end = response.find("</answer>", start)
    return response[start + len("<answer>") : end]


def format_ok(response: str) -> bool:
    """The response has a complete <answer>…</answer> block whose last number is an integer."""
    block = answer_block(response)
    return block is not None and last_integer(block) is not None


def score_strict(response: str, answer: int) -> bool:
    """The training reward: the last integer inside the last <answer>…</answer> equals `answer`."""
    block = answer_block(response)
    return block is not None and last_integer(block) == answer


def score_loose(response: str, answer: int) -> bool:
    """Evaluation only: strict, or the last integer of the whole response equals `answer`.
    Separates "can compute" from "follows the output format"."""
    return score_strict(response, answer) or last_integer(response) == answer


def final_answer(response: str) -> int | None:
    """The answer a response gives, for counting distinct answers: the integer in its answer
    block when it has one, else the last integer of the whole response (None: no integer)."""
    block = answer_block(response)
    value = last_integer(block) if block is not None else None
    return value if value is not None else last_integer(response)


def place_parts(x: int) -> list[int]:
    """57 -> [50, 7]; 413 -> [400, 10, 3]; zero digits dropped."""
    s = str(x)
    return [int(d) * 10 ** (len(s) - 1 - i) for i, d in enumerate(s) if d != "0"]


def gold_solution(problem: Problem, style: str = "instruct") -> str:
    """A correct worked solution in the prompt's format, written by code: the SFT condition's
    targets. "bare" (the CPU world): the tiny base's own decomposed trace with tags,
    `<think>57 * 5 = 50 * 5 + 7 * 5 = 250 + 35 = 285. 285 - 42 = 243</think><answer>243</answer>`.
    "instruct" (Qwen): the multiplier split by place value,
    `<think>413 * 41 = 413 * 40 + 413 * 1 = 16520 + 413 = 16933. 16933 - 882 = 16051</think>`
    then a newline and `<answer>16051</answer>`."""
    if problem.task in SUM_DIGITS:
        a, b = problem.numbers
        return f"<think>{a} + {b} = {a + b}</think>" + ("" if style == "bare" else "\n") + f"<answer>{a + b}</answer>"
    if problem.task not in ARITH_DIGITS:
        raise ValueError(f"gold_solution: only arithmetic tasks have written solutions, not {problem.task}")
    a, b, c = problem.numbers
    product, value = a * b, a * b - c
    if style == "bare":
        parts = place_parts(a)
        work = (
            f"{a} * {b} = "
            + (
                " + ".join(f"{x} * {b}" for x in parts) + " = " + " + ".join(str(x * b) for x in parts) + " = "
                if len(parts) > 1
                else ""
            )
            + f"{product}"
        )
        return f"<think>{work}. {product} - {c} = {value}</think><answer>{value}</answer>"
    parts = place_parts(b)
    work = (
        f"{a} * {b} = "
        + (
            " + ".join(f"{a} * {x}" for x in parts) + " = " + " + ".join(str(a * x) for x in parts) + " = "
            if len(parts) > 1
            else ""
        )
        + f"{product}"
    )
    return f"<think>{work}. {product} - {c} = {value}</think>\n<answer>{value}</answer>"


# --- Which strategy a response to a * b - c uses (what RL selected: PLAN.md section 7d).

# --- Countdown: parse the expression with ast and exact fractions; never eval.

COUNTDOWN_MAX_ABS = 10**6  # refuse any intermediate value (numerator or denominator) beyond this
COUNTDOWN_MAX_CHARS = 200


class _Refused(Exception):
    pass


def _eval_node(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div):
        left, right = _eval_node(node.left, used), _eval_node(node.right, used)
        if isinstance(node.op, ast.Div):
            if right == 0:
                raise _Refused("division by zero")
            value = left / right
        else:
            value = {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]
        if abs(value.numerator) > COUNTDOWN_MAX_ABS or value.denominator > COUNTDOWN_MAX_ABS:
            raise _Refused("intermediate value too large")
        return value
    raise _Refused(f"not allowed: {type(node).__name__}")  # powers, unary minus, names, calls, floats


def countdown_value(expression: str, numbers: tuple[int, ...] | list[int]) -> Fraction | None:
    """The exact value of `expression` if it is made of + - * / and brackets over `numbers`,
    each used exactly once; None otherwise. Accepts × ÷ and Unicode minus signs. If the text
    holds "=", only the part before the first "=" is read (models often write "... = 24")."""
    text = expression.split("=", 1)[0].strip()
    if not text or len(text) > COUNTDOWN_MAX_CHARS:
        return None
    text = re.sub(r"(?<=[0-9)\s])[x×](?=[\s(0-9])", "*", text).replace("÷", "/")
    for ch in _MINUS[1:]:
        text = text.replace(ch, "-")
    if not re.fullmatch(r"[0-9+\-*/() \t]*", text):
        return None  # letters, underscores (1_0), dots (2.5), other symbols: not an expression of integers
    try:
        tree = ast.parse(text, mode="eval")
        used: list[int] = []
        value = _eval_node(tree.body, used)
    except (SyntaxError, ValueError, _Refused, RecursionError):
        return None
    return value if sorted(used) == sorted(numbers) else None


def score_countdown(response: str, numbers, target: int) -> bool:
    """The expression in the last <answer>…</answer> uses each number once and equals target."""
    block = answer_block(response)
    return block is not None and countdown_value(block, numbers) == target


def score(problem: Problem, response: str) -> dict[str, bool]:
    """strict, loose and format for one response. For Countdown, loose = strict (there is no
    'last integer' reading of an expression) and format = a block that parses."""
    if problem.task == "countdown":
        ok = score_countdown(response, problem.numbers, problem.answer)
        block = answer_block(response)
        parses = block is not None and countdown_value(block, sorted(_ints_in(block))) is not None
        return {"strict": ok, "loose": ok, "format": parses}
    return {
        "strict": score_strict(response, problem.answer),
        "loose": score_loose(response, problem.answer),
        "format": format_ok(response),
    }


def _ints_in(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"[0-9]+", text.split("=", 1)[0])]


# ----------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Print problems, answers and prompts of a task.")
    p.add_argument("--task", default="arith-3x2", help=f"one of {', '.join(TASKS)} (default arith-3x2)")
    p.add_argument("--n", default="5", help="how many problems (default 5)")
    p.add_argument("--seed", default="0", help="the task seed that draws every split (default 0)")
    p.add_argument("--split", default="train", choices=("train", "test"), help="train or test (default train)")
    p.add_argument("--n-test", default=128, type=int, help="size of the test split drawn before train (default 128)")
    p.add_argument(
        "--style", default="instruct", help=f"the prompt: one of {', '.join(PROMPT_STYLES)} (default instruct)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    a = p.parse_args(argv)
    try:
        n, seed = int(a.n), int(a.seed)
        if n < 1 or a.n_test < 0:
            raise ValueError
    except ValueError:
        print(
            f"countdown.py: --n, --seed and --n-test must be integers (n >= 1, n-test >= 0), "
            f"got --n {a.n!r} --seed {a.seed!r} --n-test {a.n_test}",
            file=sys.stderr,
        )
        return 2
    if a.task not in TASKS:
        print(f"countdown.py: unknown --task {a.task!r}; choose one of {', '.join(TASKS)}", file=sys.stderr)
        return 2
    if a.style not in PROMPT_STYLES:
        print(f"countdown.py: unknown --style {a.style!r}; choose one of {', '.join(PROMPT_STYLES)}", file=sys.stderr)
        return 2
    for prob in generate(a.task, n, seed, a.split, a.n_test):
        msgs = prompt_messages(prob, a.style)
        if a.json:
            print(json.dumps({**asdict(prob), "messages": msgs}))
        else:
            if prob.task == "countdown":
                print(f"{prob.id}: numbers {prob.numbers}, target {prob.answer}   (e.g. {prob.solution})")
            else:
                print(f"{prob.id}: {prob.question} = {prob.answer}")
            for m in msgs:
                print(f"  [{m['role']}] {m['content']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
