"""report.md as a printer of verdicts.json: render(doc) reads the document and nothing else, the
label it prints is primary.label, and analyze_b.py --report-only prints a run's report again from
its verdicts.json alone (every committed run's label sentence included)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_analyze import BASE_MAIN, DESIGN, write_run

from analysis import assemble, document, report
from orchestration import config

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(ROOT.glob("results/*/verdicts.json"))
LABEL = re.compile(r"^Does RL on `[^`]+` (?:select|give correct answers [^(]*) \([^)]*\)\? \*\*([^*]+)\*\*")


def label_sentence(text: str) -> str:
    """The label of the primary question's first sentence, as printed (first letter lowered back)."""
    lines = text.splitlines()
    m = LABEL.match(lines[lines.index("## The primary question") + 2])
    assert m, "no label sentence"
    return m[1][0].lower() + m[1][1:]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("printer") / "run", BASE_MAIN, DESIGN)
    doc = assemble.run_analysis(run, make_figures=False)
    return run, doc


def test_the_report_is_the_document_printed(analysed, tmp_path):
    """render(verdicts.json) is report.md byte for byte, and still is once the run folder it was
    analysed in is gone: the printer opens no file."""
    run = tmp_path / "run"
    shutil.copytree(analysed[0], run)
    assemble.run_analysis(run, make_figures=False)
    doc, text = json.loads((run / "verdicts.json").read_text()), (run / "report.md").read_text()
    shutil.rmtree(run)  # nothing of the run is left to read but the document in memory
    assert not run.exists() and report.render(doc) == text


def test_the_printed_label_is_the_documents(analysed):
    """The label sentence prints primary.label, whatever the entry's own label or the ceiling null
    say: the printer does not make a label (it was made in three places before)."""
    _, doc = analysed
    doc = json.loads(json.dumps(doc))
    assert label_sentence(report.render(doc)) == doc["primary"]["label"] == "selection"
    doc["primary"]["label"] = "undecided (base null)"  # as if the analysis had registered the base null
    assert label_sentence(report.render(doc)) == "undecided (base null)"
    assert report.headline(doc).splitlines()[0].endswith(": undecided (base null)")


def test_the_inputs_and_warnings_are_in_the_document(analysed):
    run, doc = analysed
    assert doc["provenance"]["run"] == "run" and doc["inputs"]["n_expected"] == 6
    assert [f["file"] for f in doc["provenance"]["files"]] == sorted(p.name for p in run.glob("eval_*.json"))
    missing = [w for w in doc["warnings"] if w.endswith("is missing: what it would show is left out of this report")]
    assert missing and all(f"- {w}" in (run / "report.md").read_text() for w in doc["warnings"])
    assert missing[:2] == [
        "selection.json is missing: what it would show is left out of this report",
        "lr_choice.json is missing: what it would show is left out of this report",
    ]


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_every_committed_run_prints_its_label_sentence_again(path):
    """Every committed verdicts.json of the printer's layout prints the label it holds, under the
    ceiling null of every config in configs/ (the printer reads the document's label, not the
    config's rule); an older layout not read by analysis/compat.py is refused with a reason, never
    printed wrong (tests/test_reprint.py prints every one through it)."""
    doc = json.loads(path.read_text())
    if any(k not in doc for k in document.PRINTED):
        with pytest.raises(report.OldDocument, match="predates"):
            report.render(doc)
        return
    label = doc["primary"]["label"]
    assert label_sentence(report.render(doc)) == label
    assert label_sentence((path.parent / "report.md").read_text()) == label  # the committed report says the same
    for cfg_file in sorted((ROOT / "configs").glob("*.yaml")):
        doc["primary"]["ceiling_null"] = config.load(str(cfg_file)).analyze.ceiling_null
        assert label_sentence(report.render(doc)) == label, cfg_file.name


def _cli(*args):
    return subprocess.run(
        [sys.executable, "analyze_b.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_report_only_prints_the_same_report_again(analysed, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(analysed[0], run)
    before = (run / "report.md").read_text()
    (run / "report.md").write_text("an edited report\n")
    r = _cli("--report-only", str(run))
    assert r.returncode == 0, r.stderr
    assert (run / "report.md").read_text() == before  # the analysis' own report, byte for byte
    moved = list((run / "superseded").rglob("report.md"))
    assert len(moved) == 1 and moved[0].read_text() == "an edited report\n"  # the replaced one is kept
    assert r.stdout.splitlines()[1].startswith("primary (many, loose, step 150): selection")


def test_report_only_refuses_in_one_line(analysed, tmp_path):
    """A missing, unknown or malformed verdicts.json is one line naming it, and nothing is written."""
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "verdicts.json").write_text(json.dumps({"entries": [], "n": 8, "inputs": {}, "warnings": []}))
    doc = json.loads((analysed[0] / "verdicts.json").read_text())
    for name, edit in [("broken", lambda d: d["entries"][0].pop("pass1_ci"))]:
        (tmp_path / name).mkdir()
        d = json.loads(json.dumps(doc))
        edit(d)
        (tmp_path / name / "verdicts.json").write_text(json.dumps(d))
    (tmp_path / "empty").mkdir()
    for folder, why in [
        (tmp_path / "old", "a layout neither the report's printer nor analysis/compat.py reads"),
        (tmp_path / "empty", "No such file"),
        (tmp_path / "broken", "malformed (no 'pass1_ci')"),
    ]:
        r = _cli("--report-only", str(folder))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and why in lines[0] and "--run" in lines[0], r.stderr
        assert not (folder / "report.md").exists()
    r = _cli("--report-only", str(tmp_path / "none"))  # not there: said so, not advice to analyse it again
    assert (
        r.returncode == 2 and r.stderr.strip() == f"analyze_b.py: --report-only {tmp_path / 'none'}: no such folder"
    ), r.stderr
    r = _cli("--run", str(tmp_path / "old"), "--report-only", str(tmp_path / "old"))
    assert r.returncode == 2 and "give one of --run RUN" in r.stderr


def test_report_only_says_what_an_earlier_layout_did_not_record(analysed, tmp_path):
    """A verdicts.json written before it kept the run's inputs and warnings prints (analysis/compat.py),
    saying in each of those sections that this run did not record it, and drawing no figure."""
    run = tmp_path / "no_inputs"
    run.mkdir()
    doc = json.loads((analysed[0] / "verdicts.json").read_text())
    for key in ("inputs", "warnings", "figures"):
        doc.pop(key)
    (run / "verdicts.json").write_text(json.dumps(doc))
    r = _cli("--report-only", str(run))
    assert r.returncode == 0, r.stderr
    text = (run / "report.md").read_text()
    assert "earlier layout (no-inputs" in text and "not recorded by this run: the warnings; the run's inputs" in text
    assert "## Warnings\n\n- this verdicts.json was written before the analysis kept its warnings" in text
    assert "## The run's inputs\n\nNot in this verdicts.json" in text
    assert "## Figures\n\nNot listed in this verdicts.json, and not drawn again" in text and "![" not in text
    assert label_sentence(text) == doc["primary"]["label"]


class Reading(dict):
    """A dict that records the keys read from it (in its class's `seen`)."""

    seen: set

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)


def test_entries_hold_exactly_the_named_fields_and_the_printer(analysed):
    """Entries hold exactly the named fields and the printer reads no other.

    document.Entry names an entry's fields once: the analysis makes exactly them, and the
    printer reads only them from an entry (and only document.Primary's from `primary`)."""
    _, doc = analysed
    doc = json.loads(json.dumps(doc))
    assert all(set(e) == set(document.Entry.__annotations__) for e in doc["entries"])
    assert document.Primary.__required_keys__ <= set(doc["primary"]) <= set(document.Primary.__annotations__)

    class EntryRead(Reading):
        seen = set()

    class PrimaryRead(Reading):
        seen = set()

    doc["entries"] = [EntryRead(e) for e in doc["entries"]]
    doc["primary"] = PrimaryRead(doc["primary"])
    report.render(doc)
    report.headline(doc)
    assert {"label", "pass1_diff", "vs_null", "base_null"} <= EntryRead.seen <= set(document.Entry.__annotations__)
    assert {"label", "ceiling_null"} <= PrimaryRead.seen <= set(document.Primary.__annotations__)
