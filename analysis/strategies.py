"""How a response to `a * b - c` computes it, read from its text (PLAN.md section 7d): the strategy
of the product (split into partial products, one step, none written) and whether the working that
reached a correct answer was clean or two errors that cancel. Deterministic, no torch; the analysis
(analysis/secondary.py) counts them per model.
"""

from __future__ import annotations

import re
from collections import Counter

from countdown import ARITH_DIGITS, Problem, place_parts

STRATEGIES = ("split", "one-step", "no-product")  # how the product is computed; PLAN.md section 7d
_TIMES = re.compile(r"(?<=[0-9)])\s*(?:[x×·∙]|times)\s*(?=[0-9(])")
_SUM_TERM = r"[0-9]+(?:\s*\*\s*[0-9]+)?"
_CHAIN = re.compile(_SUM_TERM + r"(?:\s*\+\s*" + _SUM_TERM + r")+")  # a + b + ... whose terms are products or numbers
_TERM = re.compile(r"([0-9]+)(?:\s*\*\s*([0-9]+))?")
_GROUPED = re.compile(
    r"([0-9]+)\s*\*\s*\(\s*([0-9]+(?:\s*\+\s*[0-9]+)+)\s*\)|\(\s*([0-9]+(?:\s*\+\s*[0-9]+)+)\s*\)\s*\*\s*([0-9]+)"
)
_PLACE_VALUE = re.compile(r"[1-9]0*")


def _normalized(text: str) -> str:
    """Operators as `*`, `-`, `+`; thousands separators dropped (16,520 -> 16520)."""
    text = _TIMES.sub(" * ", text)
    for ch in "\u2212\u2012\u2013\u2014\ufe63\uff0d":
        text = text.replace(ch, "-")
    return re.sub(r"(?<=[0-9]),(?=[0-9]{3}(?![0-9]))", "", text)


def _other_factor(x: int, y: int | None, shared: int) -> int | None:
    """The factor of the term `x * y` (or `x` alone, y None) beside `shared`: 1 for `shared` alone;
    None where the term does not hold `shared`."""
    if y is None:
        return 1 if x == shared else None
    if x == shared:
        return y
    if y == shared:
        return x
    return None


def _splits(text: str, a: int, b: int, c: int) -> bool:
    """Is the product a * b computed from partial products of either operand?
    - a sum of at least two products that all share one operand (the operand alone standing for
      itself times 1), the other factors of which either add up to the other operand or are all
      place values (40, 1, 300): `413 * 40 + 413 * 1`, `413 * 40 + 413`, `50 * 5 + 7 * 5` (a slip
      in a part still counts: the method is what is classified);
    - an operand times a bracketed sum that adds up to the other: `413 * (40 + 1)`, `(400 + 10 + 3) * 41`;
    - a column of partial products: every value Y * part, for the place-value parts of an operand
      with at least two of them, written as a number (`16520`, `413`) outside the subtraction
      `P - c = V`, as in long multiplication."""
    for m in _CHAIN.finditer(text):
        terms = [(int(x), int(y) if y else None) for x, y in _TERM.findall(m.group(0))]
        if all(y is None for _, y in terms):
            continue  # a sum of plain numbers: the column form below
        for shared, other in ((a, b), (b, a)):
            # the other factor of each term: `shared * part`, `part * shared`, or `shared` alone (part 1)
            rest = [_other_factor(x, y, shared) for x, y in terms]
            if None not in rest and (sum(rest) == other or all(_PLACE_VALUE.fullmatch(str(r)) for r in rest)):
                return True
    for m in _GROUPED.finditer(text):
        factor, inner = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        parts = [int(x) for x in re.findall(r"[0-9]+", inner)]
        if (int(factor), sum(parts)) in ((a, b), (b, a)):
            return True
    working = re.sub(rf"[0-9]+\s*-\s*{c}(?![0-9])\s*=\s*-?\s*[0-9]+", " ", text)  # not the subtraction's numbers
    seen = Counter(int(x) for x in re.findall(r"(?<![0-9])[0-9]+(?![0-9])", working))
    for x, y in ((a, b), (b, a)):
        parts = place_parts(x)
        # y * 1 = y is a partial product only if y is written again, besides as the factor of the product
        if len(parts) >= 2 and all(seen[y * q] >= (2 if q == 1 else 1) for q in parts):
            return True
    return False


def classify_strategy(problem: Problem, response: str) -> dict:
    """How a response to `a * b - c` computes it: {"product": "split" | "one-step" | "no-product",
    "subtraction": bool}. "split": from partial products (_splits); "one-step": `a * b = N` (or
    `b * a`, `×`, `x`, `times`; N a number, not the start of a split) and no split; "no-product":
    no product written (only the restated question with a result, or no working). "subtraction":
    `P - c = V` with P a number other than b, i.e. the subtraction of c from a written product.
    Deterministic, on text only: tags, repeated tags and text cut short are read as they are."""
    if problem.task not in ARITH_DIGITS:
        raise ValueError(f"classify_strategy: only a * b - c tasks have strategies, not {problem.task}")
    a, b, c = problem.numbers
    text = _normalized(response)
    if _splits(text, a, b, c):
        product = "split"
    elif re.search(
        rf"(?<![0-9])(?:{a}\s*\*\s*{b}|{b}\s*\*\s*{a})(?![0-9])\s*(?:=|is)\s*-?\s*[0-9]+(?![0-9])(?!\s*\*)", text
    ):
        product = "one-step"
    else:
        product = "no-product"
    return {"product": product, "subtraction": bool(_subtractions(text, c))}


def _subtractions(text: str, c: int) -> list[re.Match]:
    """Every `P - c = V` in a normalized response whose P is not itself the factor of a product (not
    `a * b - c = V`, the question restated); groups: P, the sign of V, V's digits."""
    return [
        m
        for m in re.finditer(rf"(?<![0-9])([0-9]+)\s*-\s*{c}(?![0-9])\s*=\s*(-?)\s*([0-9]+)(?![0-9])", text)
        if not re.search(r"\*\s*$", text[: m.start()])
    ]


def classify_computation(problem: Problem, response: str) -> str:
    """One of clean, compensating, slipped, unshown (PLAN.md section 7d): whether a response's working to
    `a * b - c` is right, read from its last subtraction `P - c = V` (_subtractions, the ones
    classify_strategy's "subtraction" counts):
    "clean": P = a * b and V = P - c; "compensating": V = a * b - c although P is not a * b, a wrong
    product cancelled by a wrong subtraction (a product 10 too small and a forgotten borrow, 10 too
    large, give the right number); "slipped": V is not a * b - c; "unshown": no such subtraction written.
    Deterministic, on text only."""
    if problem.task not in ARITH_DIGITS:
        raise ValueError(f"classify_computation: only a * b - c tasks have a computation, not {problem.task}")
    a, b, c = problem.numbers
    subs = _subtractions(_normalized(response), c)
    if not subs:
        return "unshown"
    m = subs[-1]
    written, value = int(m.group(1)), int(m.group(3)) * (-1 if m.group(2) else 1)
    if value != a * b - c:
        return "slipped"
    return "clean" if written == a * b else "compensating"
