"""Times before a run starts (issue 70): a CPU config's --dry-run from a committed run's recorded job times
(runner/reference_times.py), a study longer than a night told what fits, and a part's --until / --hours."""

import datetime as dt
import json
from pathlib import Path

import pytest

import pipeline
from runner import parts as study_part, reference_times

ROOT = Path(__file__).resolve().parents[1]


def manifest(folder: Path, config: str, jobs: dict, stages: dict, machine=None):
    folder.mkdir(parents=True)
    doc = {
        "jobs": {
            name: {"status": "done", "seconds": s, "command": f"python grpo.py x --config {config} --run {folder}"}
            for name, s in jobs.items()
        },
        "stages": stages,
    }
    if machine:
        doc["machine"] = machine
    (folder / "manifest.json").write_text(json.dumps(doc))


def test_the_estimate_sums_the_same_jobs_of_the_same_config_over_the_workers(tmp_path):
    res = tmp_path / "results"
    machine = {"cpu": "AMD EPYC", "cores": 2}
    manifest(
        res / "a",
        "configs/x.yaml",
        {"train many s0": 100, "eval base": 60, "eval many s0 step 5": 20},
        {"base": {"seconds": 30}, "eval": {"seconds": 999, "parallel": 2}},
        machine,
    )
    manifest(res / "b", "configs/other.yaml", {"train many s0": 1e6}, {})
    text = reference_times.line(
        "configs/x.yaml", ["train many s0", "eval base", "train many s1"], ["base", "train"], 2, res
    )
    # (100 + 60) / 2 workers + the base stage's 30 s = 110 s; s1 is not in the reference
    assert text.startswith("about 2 min with --jobs 2 for the 2 of the 3 jobs left")
    assert "results/a" in text and "2 jobs side by side on a 2-core AMD EPYC" in text
    e = reference_times.estimate(
        reference_times.references("configs/x.yaml", res)[0], ["train many s0", "eval base"], ["base"], 2
    )
    assert e["seconds"] == pytest.approx(110.0) and e["matched"] == 2
    assert reference_times.line("configs/none.yaml", ["train many s0"], [], 1, res) is None


def test_a_cpu_config_gets_a_time_from_its_committed_run(tmp_path, capsys):
    assert pipeline.main(["--config", "configs/smollm2.yaml", "--run", str(tmp_path / "r"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "before it runs:" in x)
    assert "results/smollm2 recorded for the same jobs" in line and "for the 10 jobs left" in line


def test_a_study_longer_than_a_night_is_told_what_fits(tmp_path, capsys):
    assert pipeline.main(["--config", "configs/qwen05b.yaml", "--run", str(tmp_path / "q"), "--dry-run"]) == 0
    night = next(x for x in capsys.readouterr().out.splitlines() if "longer than a night" in x)
    assert (
        "configs/report.yaml" in night
        and "python pipeline.py --config configs/qwen05b.yaml" in night
        and "--hours 10" in night
    )
    assert pipeline.main(["--config", "configs/report.yaml", "--run", str(tmp_path / "r"), "--dry-run"]) == 0
    assert "longer than a night" not in capsys.readouterr().out  # the short design fits


def test_study_part_deadlines():
    now = dt.datetime(2026, 12, 7, 22, 0, tzinfo=dt.timezone.utc)
    assert study_part.deadline_of(None, 10, now) == now + dt.timedelta(hours=10)
    assert study_part.deadline_of("03:48", None, now) == dt.datetime(2026, 12, 8, 3, 48, tzinfo=dt.timezone.utc)
    assert study_part.deadline_of("23:00", None, now) == dt.datetime(2026, 12, 7, 23, 0, tzinfo=dt.timezone.utc)
    for until, hours in (("3h", None), (None, 0), (None, 100)):
        with pytest.raises(SystemExit, match="pipeline.py: --"):
            study_part.deadline_of(until, hours, now)


def test_the_base_evaluation_is_priced_at_its_own_sample_count(tmp_path):
    """Issue 67: the base's test evaluation draws eval.n_base per problem, and its job says so (it said eval.n,
    1/8 of the samples, so the hours left it out)."""
    from orchestration import config
    from runner.stages import JOB_STAGES, Plan

    cfg = config.load("configs/qwen05b.yaml")
    jobs = {j.name: j for j in Plan(cfg, tmp_path / "q", "configs/qwen05b.yaml", []).jobs(JOB_STAGES)}
    assert cfg.eval.n_base == 8 * cfg.eval.n
    assert jobs["eval base"].samples == cfg.task.n_test * cfg.eval.n_base
    trained = next(j for name, j in jobs.items() if name.startswith("eval many"))
    assert trained.samples == cfg.task.n_test * cfg.eval.n


def test_a_base_without_its_committed_weights_says_so_when_skipped(tmp_path, capsys):
    """Issue 68: --stage base into a copy of results/smollm2 (build.json kept, weights not) said only 'done,
    skipped'; it names what is missing and when it is made, and writes nothing."""
    import shutil

    run = shutil.copytree(ROOT / "results" / "smollm2", tmp_path / "r")
    before = sorted(p.name for p in run.rglob("*"))
    assert pipeline.main(["--config", "configs/smollm2.yaml", "--run", str(run), "--stage", "base"]) == 0
    out = capsys.readouterr().out
    assert "base: done; its weights are not committed: the base stage builds them again when a stage reads them" in out
    assert "--force makes them now" in out and sorted(p.name for p in run.rglob("*")) == before
