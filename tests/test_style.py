"""House style read from the source (ast; nothing imported): lines read in one pass, so no conditional
expression nests another (STYLE.md 21) in any .py file of the repository outside results/."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def nested_conditionals(source: str) -> list[int]:
    """The line of every conditional expression whose test, body or else is itself one."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.IfExp) and any(isinstance(x, ast.IfExp) for x in (node.body, node.orelse, node.test))
    ]


def test_the_scan_finds_each_kind_of_nesting():
    assert nested_conditionals("x = a if c else (b if d else e)\n") == [1]
    assert nested_conditionals("x = 0\ny = (a if c else b) if d else e\n") == [2]
    assert nested_conditionals("x = a if (b if c else d) else e\n") == [1]
    assert nested_conditionals("x = a if c else b\ny = [a if c else b for a in z]\n") == []


def test_no_nested_conditional_expressions():
    files = [f for f in sorted(ROOT.rglob("*.py")) if not {".git", "results"} & set(f.relative_to(ROOT).parts)]
    assert len(files) > 50  # the scan reads the repository, not an empty folder
    found = [f"{f.relative_to(ROOT)}:{n}" for f in files for n in nested_conditionals(f.read_text())]
    assert found == [], f"nested conditional expressions (write if/elif/else or a helper): {found}"
