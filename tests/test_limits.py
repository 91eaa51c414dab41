"""The house's size limits at 120 columns: no module over 600 formatted lines, no function over 80,
no parameter list over 8 (self and cls not counted), in the packages and entry scripts (tests and bench/ aside).
What exceeds them today is named below with its size; the lists may only shrink: a new excess fails, and so does
an entry whose code has come within the limit (delete its line) or grown past the size written here."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE_LINES, FUNCTION_LINES, PARAMETERS = 600, 80, 8

MODULES = {  # path: lines today
}
FUNCTIONS = {  # path:function: lines today
}
PARAMETER_LISTS = {  # path:function: parameters today
    "orchestration/memory.py:estimate_memory": 13,
    "analysis/support.py:support_test": 11,
    "analysis/power.py:count_coverage": 11,
    "method/evaluate.py:sample_problem_tokens": 10,
    "analysis/passmodel.py:contrast_check": 10,
    "analysis/calibration.py:taught_arm": 10,
    "analysis/calibration.py:pool_arms": 10,
    "analysis/base_support.py:tilt_curve": 10,
    "method/static_decode.py:sample_static": 9,
    "method/evaluate.py:sample_problems": 9,
    "analysis/verdict.py:stratum_null": 9,
    "analysis/stats.py:compare_conditions": 9,
    "analysis/power.py:crossed_coverage": 9,
}


def sources():
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in ("tests", "bench", "results", "shared") or rel.parts[0].startswith("."):
            continue
        yield rel.as_posix(), p.read_text()


def measured():
    modules, functions, params = {}, {}, {}
    for rel, text in sources():
        modules[rel] = len(text.splitlines())
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = n.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                key = f"{rel}:{n.name}"
                functions[key] = max(functions.get(key, 0), n.end_lineno - n.lineno + 1)
                params[key] = max(params.get(key, 0), len([x for x in names if x not in ("self", "cls")]))
    return modules, functions, params


def over(found: dict, limit: int, allowed: dict) -> list[str]:
    """What breaks the limit beyond its named size, and each named entry that no longer exceeds it."""
    bad = [f"{k}: {v} > {allowed.get(k, limit)}" for k, v in found.items() if v > max(limit, allowed.get(k, 0))]
    stale = [f"{k}: now {found.get(k)} (within {limit}: delete its entry)" for k in allowed if found.get(k, 0) <= limit]
    return bad + stale


def test_modules_stay_within_600_lines():
    assert not over(measured()[0], MODULE_LINES, MODULES)


def test_functions_stay_within_80_lines():
    assert not over(measured()[1], FUNCTION_LINES, FUNCTIONS)


def test_parameter_lists_stay_within_8():
    assert not over(measured()[2], PARAMETERS, PARAMETER_LISTS)
