"""README.md against the code: its stage table names the pipeline's stages and commands each CLI takes,
and every flag it names is one of the entry points' (or the outside tool's its line runs)."""

import contextlib
import io
import re
from pathlib import Path

import pytest

import analyze_b
import pipeline
from runner import commands
from runner.stages import STAGES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
OUTSIDE = {
    "pip": {"--index-url", "--no-deps"},
    "hf": {"--revision"},
    "python -m pytest": {"--dist"},
    "ruff format": {"--check"},
}


@pytest.fixture(scope="module")
def clis():
    """Each command line's flags, from its own --help."""
    out = {}
    for name, parse, argv in [("pipeline.py", pipeline.parse_args, []), ("analyze_b.py", analyze_b.main, [])] + [
        (f"grpo.py {c}", commands.parser().parse_args, [c]) for c in commands.COMMANDS
    ]:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as e:
            parse([*argv, "--help"])
        assert e.value.code == 0, name
        out[name] = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", buf.getvalue())) - {"--help"}
    return out


def _stage_rows() -> list[list[str]]:
    table = README[README.index("| stage | reads |") :].split("\n\n")[0].splitlines()[2:]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in table]


def test_the_stage_table_is_the_pipelines_stages(clis):
    """The table's rows are the pipeline's stages in order; each grpo.py command on a row is a command
    of grpo.py taking every flag written after it, and every --stage names a stage."""
    rows = _stage_rows()
    assert [r[0].split(" (")[0] for r in rows] == STAGES
    seen = 0
    for row in rows:
        for cmd, rest in re.findall(r"grpo\.py (\S+)([^`]*)", row[3]):
            assert f"grpo.py {cmd}" in clis, row
            assert set(re.findall(r"--[a-z-]+", rest)) <= clis[f"grpo.py {cmd}"], row
            seen += 1
        for stage in re.findall(r"--stage (\S+?)`", row[3]):
            assert stage in STAGES
    assert seen >= 4


def test_every_flag_the_readme_names_is_a_cli_flag(clis):
    """A flag in README.md is one of pipeline.py's, grpo.py's or analyze_b.py's, or on a line that runs
    an outside tool one of its own; bench/gpu_check.py's --dry is in its source."""
    known = set().union(*clis.values())
    gpu_check = (ROOT / "bench" / "gpu_check.py").read_text()
    for line in README.splitlines():
        outside = set().union(*(f for tool, f in OUTSIDE.items() if line.lstrip().startswith(tool)))
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line):
            ok = flag in known or flag in outside or (flag == "--dry" and '"--dry"' in gpu_check)
            assert ok, f"README.md names {flag} in: {line.strip()[:120]}"


def test_the_registered_studys_plan_is_what_dry_run_prints(tmp_path, monkeypatch):
    """The README's job count and hours at the bound for configs/qwen05b.yaml are the ones --dry-run
    prints on a new folder (before: 155 jobs and 9.6 h written, 156 and 9.7 h printed)."""
    monkeypatch.chdir(ROOT)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert pipeline.main(["--config", "configs/qwen05b.yaml", "--run", str(tmp_path / "new"), "--dry-run"]) == 0
    jobs, hours = re.search(r"(\d+) train/eval jobs left.*?([\d.]+) h at the bound", buf.getvalue()).groups()
    text = " ".join(README.split())
    assert f"the model's registered shape: {jobs} jobs, **about" in text and f"bf16: {hours} h at the bound" in text, (
        jobs,
        hours,
    )


def test_every_committed_run_has_a_row_in_results_readme():
    """results/README.md's table names every folder under results/ (before: smollm2_study, the headline
    real-model run, was missing)."""
    table = (ROOT / "results" / "README.md").read_text()
    rows = set(re.findall(r"^\| `([\w-]+)/` \|", table, flags=re.M))
    assert rows == {p.name for p in (ROOT / "results").iterdir() if p.is_dir()}


def test_the_first_screen_is_use():
    """The README's first 40 lines hold what it is, the install, the main job, one stage by hand and the
    test command, each as a line to type, before anything the runs found; the whole is at most 250 lines."""
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    head = lines[:40]
    commands = [x.split("#")[0].strip() for x in head]
    found = lines.index("## What the runs here decide")
    wanted = {
        "install": lambda c: c.startswith("pip install -r requirements.txt"),
        "main job": lambda c: c.startswith("python pipeline.py --config configs/qwen05b.yaml") and "--jobs" in c,
        "one stage": lambda c: c.startswith("python pipeline.py ") and " --stage " in c,
        "tests": lambda c: c == "python -m pytest -q -n 2 --dist loadfile tests",
    }
    for what, is_it in wanted.items():
        at = [i for i, c in enumerate(commands) if is_it(c)]
        assert at and at[0] < found, what
    assert "PLAN.md" in "\n".join(lines[1:found]) and "](results/" not in "\n".join(lines[:found])


def test_no_count_or_time_that_goes_stale():
    """Test counts, commits and measured run times live in bench/README.md with their command, machine and
    date, not in the README (nine commits once only updated a pinned count and commit)."""
    for pattern in (r"\b\d+ passed\b", r"\bat [0-9a-f]{7,12}\b", r"\b\d+ min \d+ s\b", r"\b20\d\d-\d\d-\d\d\b"):
        assert not re.search(pattern, README), pattern


def test_ci_runs_the_readmes_commands_line_for_line():
    """Every command .ci/run runs after its installs is a line of the README as written, comment-free."""
    ci = [x.strip() for x in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [x for x in ci if x and not x.startswith(("#", "set ", "cd ", "python -m pip"))]
    lines = {x.strip() for x in (ROOT / "README.md").read_text().splitlines()}
    assert commands == ["ruff check .", "ruff format --check .", "python -m pytest -q -n 2 --dist loadfile tests"]
    assert all(c in lines for c in commands), commands


def test_the_files_block_names_every_module():
    """Each module of the packages is named under its folder in the Files block (runner/'s modules were
    once listed under orchestration/, and three of method/'s were missing); report*.py names its kind."""
    block = README[README.index("## Files") : README.index("## Tests")]
    for folder in ("analysis", "method", "bases", "orchestration", "runner"):
        text = re.search(rf"^{folder}/(.*?)(?=^\S)", block, flags=re.S | re.M).group(1)
        named = set(re.findall(r"(\w+)\.py", text)) | {"__init__"}
        named |= {p.stem for p in (ROOT / folder).glob("*.py") if "report*.py" in text and p.stem.startswith("report")}
        modules = {p.stem for p in (ROOT / folder).glob("*.py")}
        assert modules <= named, (folder, sorted(modules - named))
        assert named - {"__init__"} <= modules | {"grpo", "pipeline"}, (folder, sorted(named - modules))


def test_results_readme_says_what_each_run_is_answers_first():
    """results/README.md's status column: one of the kinds a reader needs, the current answers first."""
    table = (ROOT / "results" / "README.md").read_text()
    status = re.findall(r"^\| `[\w-]+/` \| ([^|]+) \|", table, flags=re.M)
    kinds = (
        "**answer**",
        "answer, earlier",
        "confirmation",
        "in progress",
        "pilot",
        "post hoc",
        "code-path check",
        "superseded",
    )
    assert status and all(s.startswith(kinds) for s in status), [s for s in status if not s.startswith(kinds)]
    current = [i for i, s in enumerate(status) if s.startswith("**answer**")]
    assert current == list(range(len(current))) and current, status
