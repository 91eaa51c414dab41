"""The analysis' refusal of malformed inputs (one InputError naming the file, nothing written), its
command line, and what it does to a run folder (--out, moving an old analysis aside, keys added since).

Everything runs on synthetic eval files written into tmp_path; no model is involved."""

import json
from pathlib import Path

import pytest
from analysis_runs import FAST, analyze_cli, edit_json, set_json, write_run, write_train_log

from analysis import assemble, run_files

pytestmark = pytest.mark.slow  # whole pipelines or real weights: left out of the fast loop

ROOT = Path(__file__).resolve().parents[1]


def _good_run(tmp_path):
    return write_run(
        tmp_path / "run", [1, 0, 3, 8], {("many", 75): [2, 0, 4, 8], ("16", 75): [1, 1, 1, 1]}, resamples=FAST
    )


M, S16 = "eval_many_s0_075.json", "eval_16_s0_075.json"


BREAKAGES = {
    "missing_base": (lambda r: (r / "eval_base.json").unlink(), "eval_base.json"),
    "invalid_json": (lambda r: (r / M).write_text('{"sampling": {"n": 8}, "problems": ['), M),
    "count_above_n": (lambda r: set_json(r / M, "problems", 2, "correct_strict", 9), M),
    "negative_count": (lambda r: set_json(r / S16, "problems", 0, "correct_loose", -1), S16),
    "float_count": (lambda r: set_json(r / "eval_base.json", "problems", 1, "correct_strict", 2.5), "eval_base.json"),
    "string_count": (lambda r: set_json(r / "eval_base.json", "problems", 1, "correct_loose", "2"), "eval_base.json"),
    "problem_n_differs": (lambda r: set_json(r / M, "problems", 0, "n", 4), M),
    "no_sampling": (lambda r: edit_json(r / S16, lambda d: d.pop("sampling")), S16),
    "no_problems_field": (lambda r: edit_json(r / "eval_base.json", lambda d: d.pop("problems")), "eval_base.json"),
    "empty_problems": (lambda r: set_json(r / M, "problems", []), M),
    "mismatched_ids": (lambda r: set_json(r / M, "problems", 3, "id", 99), M),
    "reordered_ids": (lambda r: edit_json(r / S16, lambda d: d["problems"].reverse()), S16),
    "n_differs_from_base": (
        lambda r: edit_json(r / S16, lambda d: (d["sampling"].update(n=16), [p.update(n=16) for p in d["problems"]])),
        S16,
    ),
    "no_format_rate": (lambda r: edit_json(r / M, lambda d: d.pop("format_rate")), M),
    "no_problem_id": (lambda r: edit_json(r / M, lambda d: d["problems"][0].pop("id")), M),
    "no_rl_files": (lambda r: [f.unlink() for f in r.glob("eval_*_*.json")], "run"),
    "no_config": (lambda r: edit_json(r / "eval_base.json", lambda d: d["provenance"].pop("config")), "eval_base.json"),
}


@pytest.mark.parametrize("name", list(BREAKAGES))
def test_broken_inputs_raise_input_error_and_write_nothing(tmp_path, name):
    run = _good_run(tmp_path)
    assemble.run_analysis(run, make_figures=False)  # a previous, good analysis
    before = {f: (run / f).read_bytes() for f in ("verdicts.json", "report.md")}
    breaker, fname = BREAKAGES[name]
    breaker(run)
    with pytest.raises(run_files.InputError) as ei:
        assemble.run_analysis(run, partial=True)
    msg = str(ei.value)
    assert fname in msg and "\n" not in msg
    assert {f: (run / f).read_bytes() for f in before} == before
    assert not (run / "figures").exists()  # nothing was drawn either
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []  # no temp files left


@pytest.mark.parametrize("name", ["missing_base", "count_above_n"])
def test_cli_broken_inputs_exit_2_with_one_line(tmp_path, name):
    run = _good_run(tmp_path)
    assemble.run_analysis(run, make_figures=False)
    before = (run / "verdicts.json").read_bytes()
    breaker, fname = BREAKAGES[name]
    breaker(run)
    r = analyze_cli("--run", str(run), "--no-figures")
    assert r.returncode == 2, r.stderr  # an input's fault, as the pipeline's (README: exit codes)
    lines = r.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("analyze_b.py: ") and fname in lines[0] and "Traceback" not in r.stderr
    )
    assert (run / "verdicts.json").read_bytes() == before


def test_cli_missing_run_folder_exits_2(tmp_path):
    r = analyze_cli("--run", str(tmp_path / "nope"))
    assert r.returncode == 2 and "no such folder" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_success_prints_the_headline(tmp_path):
    run = _good_run(tmp_path)
    r = analyze_cli("--run", str(run), "--no-figures", "--resamples", "100", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("primary (many, loose, step 75): ") and "wrote" in r.stdout
    out = json.loads((run / "verdicts.json").read_text())
    assert out["bootstrap"]["resamples"] == 100 and out["bootstrap"]["seed"] == 3 and len(out["entries"]) == 4
    assert not (run / "figures").exists()


@pytest.mark.parametrize(
    "row",
    [
        "7,0.5\n",
        "7,abc,0,0,0,0,0,0,0,0,0,0,0,0\n",
        "7,,0,0,0,0,0,0,0,0,0,0,0,0\n",
        "7,0.5,0,0,0,0,0,0,0,0,0,0,0,0,99\n",
    ],
)
def test_malformed_training_log_is_an_input_error_and_writes(tmp_path, row):
    """Malformed training log is an input error and writes nothing."""
    run = write_run(tmp_path / "run", [1, 0, 3, 8], {("many", 75): [2, 0, 4, 8]}, resamples=100)
    assemble.run_analysis(run, make_figures=False)
    before = (run / "verdicts.json").read_bytes()
    write_train_log(run / "train_many_s0" / "train_log.csv")
    with open(run / "train_many_s0" / "train_log.csv", "a") as f:
        f.write(row)
    with pytest.raises(run_files.InputError, match="train_log.csv"):
        assemble.run_analysis(run)
    assert (run / "verdicts.json").read_bytes() == before
    assert not (run / "figures").exists()


def test_a_key_added_since_at_its_old_value_is_not_another(tmp_path):
    """A key added since at its old value is not another config.

    An input made by a revision that knows a newer config key, at its 'as before' value, is made
    under the same config as one made before the key existed (provenance.same_config); any other
    difference is still named."""
    run = _good_run(tmp_path)
    for g in run.glob("eval_*.json"):  # every input records the select section; one of them also the newer key
        e = json.loads(g.read_text())
        e["provenance"]["config"]["select"] = {"samples": 16}
        g.write_text(json.dumps(e))
    f = next(run.glob("eval_many_*.json"))
    d = json.loads(f.read_text())
    d["provenance"]["config"]["select"]["scoring"] = "strict"
    f.write_text(json.dumps(d))
    assemble.run_analysis(run, make_figures=False)
    assert "made with another config" not in (run / "report.md").read_text()
    d["provenance"]["config"]["select"]["scoring"] = "loose"
    f.write_text(json.dumps(d))
    assemble.run_analysis(run, make_figures=False)
    assert f"{f.name} was made with another config" in (run / "report.md").read_text()


def test_out_analyses_a_copy_and_leaves_the_run_as_it_was(tmp_path):
    run = _good_run(tmp_path)
    (run / "train_many_s0" / "step_075").mkdir(parents=True)
    (run / "train_many_s0" / "step_075" / "adapter_model.safetensors").write_bytes(
        b"weights"
    )  # not an input: not copied
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    new = tmp_path / "new"
    r = analyze_cli("--run", str(run), "--out", str(new), "--no-figures")
    assert r.returncode == 0, r.stderr
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # nothing written into the run
    assert not list(new.rglob("*.safetensors")) and f"wrote {new / 'verdicts.json'}" in r.stdout
    copied = json.loads((new / "verdicts.json").read_text())
    in_place = assemble.run_analysis(run, make_figures=False)
    assert (
        copied["entries"] == in_place["entries"] and copied["provenance"]["inputs"] == in_place["provenance"]["inputs"]
    )
    for bad in (new, run / "inside"):  # not empty; inside the run
        r = analyze_cli("--run", str(run), "--out", str(bad), "--no-figures")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    BREAKAGES["count_above_n"][0](run)
    r = analyze_cli("--run", str(run), "--out", str(tmp_path / "other"), "--no-figures")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (
        f"{run / M}: problem" in r.stderr and "python pipeline.py --config" in r.stderr
    )  # the run's file, the command
    assert not (tmp_path / "other").exists()  # the copy, holding no result, is gone


def test_a_first_analysis_moves_nothing_aside_and_a_second_moves(tmp_path):
    """A first analysis moves nothing aside and a second moves the first."""
    run = _good_run(tmp_path)
    (run / "figures").mkdir()
    (run / "figures" / "training.png").write_bytes(b"drawn while training ran")
    assemble.run_analysis(run, make_figures=False)
    assert not (run / "superseded").exists()
    assemble.run_analysis(run, make_figures=False)
    moved = sorted(p.name for p in next((run / "superseded").iterdir()).iterdir())
    assert moved == ["figures", "report.md", "verdicts.json"]
