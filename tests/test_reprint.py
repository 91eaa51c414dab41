"""Every committed report prints again from its verdicts.json: `analyze_b.py --report-only` on a
copy of the document (never on results/), through analysis/compat.py for the earlier layouts, with
the label sentence the committed report.md states; what a layout did not record is said, not made up."""

import json
import re
import shutil
from pathlib import Path

import pytest

import analyze_b
from analysis import compat, report

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(ROOT.glob("results/*/verdicts.json"))
# The first layout's registered answers: the rows of its criteria 1-3 table.
FIRST_TABLE = "## Verdicts (PLAN.md, criteria 1-3)"


def label_line(text: str) -> str | None:
    """The primary question's label sentence: the report's first line asking it."""
    return next((line for line in text.splitlines() if line.startswith("Does RL on `")), None)


def table_rows(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(heading) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def reprint(path: Path, tmp_path: Path, capsys) -> str:
    """--report-only on a folder holding a copy of `path` alone: what it writes stays in tmp_path."""
    run = tmp_path / path.parent.name
    run.mkdir()
    shutil.copy(path, run / "verdicts.json")
    assert analyze_b.main(["--report-only", str(run)]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["report.md", "verdicts.json"]
    return (run / "report.md").read_text()


def test_every_layout_is_among_the_committed_runs():
    """The compatibility reader reads every committed layout, and each of its layouts has a committed run."""
    seen = {compat.layout(json.loads(p.read_text())) for p in COMMITTED}
    assert seen == {"first", "sentence", "no-inputs", "current"}


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_every_committed_report_prints_again_with_its_label_sentence(path, tmp_path, capsys):
    committed = (path.parent / "report.md").read_bytes()
    doc = json.loads(path.read_text())
    text = reprint(path, tmp_path, capsys)
    assert (path.parent / "report.md").read_bytes() == committed  # results/ untouched
    kind = compat.layout(doc)
    if kind == "first":  # no primary question then: its registered answers are the criteria table's rows
        assert "primary" not in doc and label_line(committed.decode()) is None and label_line(text) is None
        assert table_rows(text, FIRST_TABLE) == table_rows(committed.decode(), FIRST_TABLE)
    else:
        line = label_line(text)
        assert line is not None and line == label_line(committed.decode())
        bold = re.search(r"\*\*([^*]+)\*\*", line)[1]
        if kind == "sentence":  # the recorded sentence agrees with the recorded answer
            assert bold == ("Yes" if doc["primary"]["answer"] else "No")
        else:
            assert bold[0].lower() + bold[1:] == doc["primary"]["label"]
    if kind != "current":  # what the layout lacks is named, and no figure is claimed
        assert "earlier layout" in text and "not recorded by this run" in text.lower()
        assert "## Figures" in text and "![" not in text


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_the_reader_adds_and_never_changes(path):
    """upgrade() keeps every recorded key as it was; what it adds is the layout's name, what the layout
    lacks, and the sizes, levels and bootstrap copied from the keys that held them then."""
    doc = json.loads(path.read_text())
    up = compat.upgrade(doc)
    assert all(
        up[k] == v
        for k, v in doc.items()
        if not (k in ("sizes", "levels", "bootstrap", "calibration") and up["layout"] in compat.LEGACY)
    )
    assert up["layout"] == compat.layout(doc) and (up["absent"] == []) == (up["layout"] == "current")
    if up["layout"] in compat.LEGACY:
        assert (up["sizes"]["n"], up["sizes"]["k_max"], up["sizes"]["n_problems"]) == (
            doc["n"],
            doc["k_max"],
            doc["n_problems"],
        )
        assert up["calibration"] == {"skipped": compat.NOT_RECORDED}
        assert up["bootstrap"]["resamples"] == (doc.get("resamples") or doc["bootstrap"]["resamples"])


def test_an_unknown_layout_is_refused_and_not_upgraded_by_the_printer():
    with pytest.raises(compat.UnknownLayout, match=r"no k_max, n_problems, resamples, seed, ci"):
        compat.upgrade({"entries": [], "n": 8})
    with pytest.raises(compat.UnknownLayout, match="not a JSON object"):
        compat.upgrade([])
    old = json.loads((ROOT / "results/tiny/verdicts.json").read_text())
    with pytest.raises(report.OldDocument, match="predates"):  # the printer reads only what compat upgraded
        report.render(old)
