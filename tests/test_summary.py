"""analyze_b.py --summary and --compare (analysis/summary.py): every committed run's registered answer, every
secondary label named as secondary, nothing written."""

import hashlib
import json
from pathlib import Path

import pytest

import analyze_b
from analysis import compat, report, summary

ROOT = Path(__file__).resolve().parents[1]
ANALYSED = sorted(p.parent for p in (ROOT / "results").glob("*/verdicts.json"))


def tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(folder)).encode() + f.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("run", ANALYSED, ids=lambda p: p.name)
def test_every_committed_run_prints_its_registered_answer_and_names_every_secondary(run, capsys):
    doc = compat.upgrade(json.loads((run / "verdicts.json").read_text()))
    assert analyze_b.main(["--summary", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    answer = next(x for x in lines if x.strip().startswith("registered answer"))
    pr = doc.get("primary") or {}
    if (doc.get("support") or {}).get("registered") and not pr.get("question"):
        tests = doc["support"]["conditions"][pr["condition"]]["tests"]
        assert all(f"{s} sampler: support {t['answer']}" in answer for s, t in tests.items())
        assert any(
            x.strip().startswith("secondary: the selection-null label") and x.endswith(pr["label"]) for x in lines
        )
    elif "label" in pr:
        assert answer.endswith(f"  {pr['label']}")
    for key, name in (("label_selection_null", "the selection-null label"), ("label_base_null", "the base-null label")):
        if pr.get(key) and (key != "label_selection_null" or pr.get("question")):
            assert any(x.strip().startswith(f"secondary: {name}") and x.endswith(pr[key]) for x in lines), key


def test_summary_and_compare_write_nothing(tmp_path, capsys):
    before = [tree_hash(ROOT / "results" / r) for r in ("tiny_v6", "tiny_v7")]
    assert analyze_b.main(["--compare", "results/tiny_v6", "results/tiny_v7"]) == 0
    assert analyze_b.main(["--summary", "results/tiny_v7"]) == 0
    assert [tree_hash(ROOT / "results" / r) for r in ("tiny_v6", "tiny_v7")] == before


def test_compare_lines_up_the_measures_and_marks_what_one_run_lacks(capsys):
    assert analyze_b.main(["--compare", "results/tiny_v6", "results/tiny_v7"]) == 0
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in capsys.readouterr().out.splitlines()[2:]]
    rows = {c[0]: c[1:] for c in cells}
    assert rows["registered answer"] == ["support expanded", "support expanded"]
    trained = rows["answer at the training sampler (T 1, registered)"]
    assert trained[0] == summary.NONE and trained[1].startswith("toward-rare (exponent 0.446")
    assert rows["pass@1, base → RL"][0].startswith("0.293 → 0.661")


def test_a_folder_without_verdicts_is_one_line_and_exit_2(tmp_path, capsys):
    assert analyze_b.main(["--summary", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "verdicts.json: no such file" in err and "--run" in err
    with pytest.raises(SystemExit):
        analyze_b.main(["--compare", "results/tiny_v7"])  # one run is not a comparison


def test_the_headline_names_the_selection_null_label_as_secondary():
    doc = json.loads((ROOT / "results/tiny_v7/verdicts.json").read_text())
    head = report.headline(doc).splitlines()
    table = next(x for x in head if x.strip().startswith("condition"))
    assert table.rstrip().endswith("selection-null label (secondary)")
    old = json.loads((ROOT / "results/tiny_v4/verdicts.json").read_text())  # selection is its registered answer
    assert (
        next(x for x in report.headline(compat.upgrade(old)).splitlines() if "condition" in x)
        .rstrip()
        .endswith("label")
    )


def test_an_empty_folder_is_told_to_make_a_run_first(tmp_path, capsys):
    assert analyze_b.main(["--run", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tmp_path} holds no run (no manifest.json)" in err
    assert err.endswith(f"python pipeline.py --config CONFIG --run {tmp_path}")


def test_tiny_v8s_summary_names_its_clean_computation_answer(capsys):
    assert analyze_b.main(["--summary", "results/tiny_v8"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "clean computation at T 1 (registered)" in x)
    assert line.split("  ")[-1].strip().startswith("more clean (0.968 against the base's 0.888; gap +0.084")


def test_the_exponents_reading_is_printed_from_its_p_values(capsys):
    """tiny_v8's exponent, 0.458 [0.337, 0.619], reads toward-rare by the exponent alone (change 77's reading)."""
    assert analyze_b.main(["--summary", "results/tiny_v8"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "the exponent's reading at T 1" in x)
    assert line.split("  ")[-1].strip() == "toward-rare by the exponent"
