"""The import graph, read from the source (ast; nothing imported): no cycle among the project's modules,
and the layers point one way. orchestration/ (the study's definition) imports no other package; method/,
analysis/ and bases/ import orchestration/ and never runner/ (the run machinery, above them); nothing
but the tests imports an entry script (grpo.py, pipeline.py)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestration", "method", "analysis", "bases", "runner")


def modules() -> dict[str, Path]:
    """Every module of the packages, and the root's scripts, by dotted name."""
    files = list(ROOT.glob("*.py")) + [f for p in PACKAGES for f in (ROOT / p).glob("*.py") if f.name != "__init__.py"]
    return {".".join(f.relative_to(ROOT).with_suffix("").parts): f for f in files}


def imported(tree: ast.AST) -> set[str]:
    """The dotted names an import in `tree` may load (`from a import b` may load a.b), at any depth
    (an import inside a function counts), less those under `if TYPE_CHECKING:` (never run)."""
    out = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        out |= imported(node)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imported(ast.parse(f.read_text())) & set(mods) for m, f in mods.items()}


def cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of g as the list of its modules, or None (depth-first search)."""
    state, path = {}, []

    def visit(m: str) -> list[str] | None:
        state[m] = "open"
        path.append(m)
        for n in sorted(g[m]):
            if state.get(n) == "open":
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        path.pop()
        return None

    return next((c for m in sorted(g) if m not in state and (c := visit(m))), None)


def test_the_search_finds_a_cycle_and_skips_type_checking():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    from y import z\n"
    )
    assert imported(tree) == {"typing", "typing.TYPE_CHECKING", "y", "y.z"}


def test_no_import_cycle():
    assert cycle(graph()) is None


def test_the_layers_point_one_way():
    g = graph()
    for m, deps in g.items():
        package = m.split(".")[0]
        if package in ("orchestration", "method", "analysis", "bases"):
            assert not {d for d in deps if d.startswith("runner.")}, f"{m} imports the runner above it: {deps}"
        if package == "orchestration":
            assert all(d.split(".")[0] in ("orchestration", "countdown") for d in deps), f"{m}: {deps}"
        if "." in m or m == "countdown":
            assert not deps & {"grpo", "pipeline"}, f"{m} imports an entry script"
    bench = {f.name: imported(ast.parse(f.read_text())) for f in (ROOT / "bench").glob("*.py")}
    assert not [name for name, deps in bench.items() if deps & {"grpo", "pipeline", "analyze_b"}]  # entry scripts


def test_bench_readme_lists_every_bench_file_once_as_a_tool_or_one_decision():
    """bench/README.md's two tables (tools; scripts that each served one change) name every bench/*.py once."""
    text = (ROOT / "bench" / "README.md").read_text()
    section = text[text.index("## What is in bench/") :]
    section = section[: section.index("**CPU figures**")]
    rows = re.findall(r"^\| `bench/([\w]+\.py)` \|", section, flags=re.M)
    assert sorted(rows) == sorted(f.name for f in (ROOT / "bench").glob("*.py")), set(rows) ^ {
        f.name for f in (ROOT / "bench").glob("*.py")
    }
    assert len(rows) == len(set(rows))


# analysis/'s rooms: statistics (pure functions on counts and arrays), reading (a run's files into RunInputs),
# measures (each asks one question of RunInputs) and the document (verdicts.json's vocabulary and its printers);
# analysis.assemble wires them and is in none.
STATISTICS = {
    "stats",
    "power",
    "passmodel",
    "reweight",
    "verdict",
    "support",
    "calibration",
    "within_correct",
    "synthetic",
    "concentration",
    "token_tree",
    "strategies",
    "recipe",
    "inference",
}
READING = {"run_files", "run_inputs", "inputs"}
DOCUMENT = {"document", "compat", "report", "report_base_support", "report_format", "report_legacy"}
DOCUMENT |= {"report_secondary", "report_checks", "report_beyond", "figures", "summary"}


def test_the_analysis_rooms_point_one_way():
    """Statistics import only statistics; reading imports no measure and no printer; the document's printers
    import no measure (they print verdicts.json; the figures also read the training logs); every analysis module
    is in a room."""
    g = graph()
    rooms = {m.split(".")[1]: deps for m, deps in g.items() if m.startswith("analysis.")}
    measures = set(rooms) - STATISTICS - READING - DOCUMENT - {"assemble"}
    known = {"entries", "primary_checks", "base_support", "training_sampler", "baselines", "collapse", "secondary"}
    assert measures == known | {"beyond"}, measures  # a new module is put in a room here
    analysis = {name: {d.split(".")[1] for d in deps if d.startswith("analysis.")} for name, deps in rooms.items()}
    for name in STATISTICS:
        assert analysis[name] <= STATISTICS, (name, analysis[name] - STATISTICS)
    for name in READING:
        assert analysis[name] <= STATISTICS | READING, (name, analysis[name] - STATISTICS - READING)
    for name in DOCUMENT:
        assert not analysis[name] & measures, (name, analysis[name] & measures)
