"""The whole study on configs/smoke.yaml end to end: every file written, a second run that skips
everything, --jobs 2 and a resumed run byte for byte, reruns by hand, refusals on a finished run."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipeline_runs import (
    CONDS,
    ENV,
    N_EVAL,
    N_TRAIN,
    ROOT,
    SEEDS,
    SMOKE,
    copy_run,
    ended,
    expected_files,
    outputs_bytes,
    pipeline,
    snapshot,
)

from orchestration import study

pytestmark = pytest.mark.slow  # whole pipelines or real weights: left out of the fast loop


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("smoke") / "run"
    r = pipeline("--config", str(SMOKE), "--out", str(run), "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return run


def test_the_readme_quotes_the_smoke_runs_label(smoke_run):
    """README's quick start quotes the first line the smoke run ends with (before: `undecided`, where the
    run prints `degradation; calibrated`)."""
    from analysis import report

    first = report.headline(json.loads((smoke_run / "verdicts.json").read_text())).splitlines()[0]
    assert f"(`{first}`, …)" in " ".join((ROOT / "README.md").read_text().split()), first


def test_end_to_end_writes_every_file(smoke_run):
    missing = [str(p) for p in expected_files(smoke_run) if not p.exists() or p.stat().st_size == 0]
    assert not missing
    assert not (
        smoke_run / "superseded"
    ).exists()  # a first run moves nothing aside (the training figure is drawn again)
    man = json.loads((smoke_run / "manifest.json").read_text())
    assert [s for s in man["stage_order"]] == [
        "base",
        "probe",
        "select",
        "lr-sweep",
        "train",
        "eval",
        "tokens",
        "analyze",
    ]
    assert all(man["stages"][s]["status"] == "done" and man["stages"][s]["seconds"] >= 0 for s in man["stage_order"])
    assert len(man["jobs"]) == N_TRAIN + N_EVAL + (1 + 8) + (1 + 16) + 1 + 32  # + wide, ood, pool, tokens
    assert all(j["status"] == "done" for j in man["jobs"].values())
    assert man["plan_sha256"] and man["versions"]["torch"]
    # the eval file holds its sampling settings, counts and responses, and its numbers follow from its own counts
    ev = json.loads((smoke_run / "eval_many_s1_006.json").read_text())
    assert (ev["condition"], ev["train_seed"], ev["step"]) == ("many", 1, 6)
    n = ev["sampling"]["n"]
    assert set(ev["sampling"]) >= {
        "n",
        "temperature",
        "top_p",
        "top_k",
        "repetition_penalty",
        "max_new_tokens",
        "seed",
        "stop_ids",
    }
    assert ev["sampling"]["repetition_penalty"] == 1.0
    from analysis.stats import pass_at_k

    for s in ("strict", "loose"):
        counts = [p[f"correct_{s}"] for p in ev["problems"]]
        for k in ("1", str(n)):
            assert ev["pass_at_k"][s][k] == pytest.approx(sum(pass_at_k(n, c, int(k)) for c in counts) / len(counts))
        assert ev["coverage"][s] == sum(c > 0 for c in counts)
    assert all(len(p["responses"]) == n for p in ev["problems"])
    assert ev["provenance"]["stage_hash"] and ev["provenance"]["config"]["task"]["seed"] == 0
    # training had signal and moved the adapter; the 1-problem condition trained on one problem
    sel = json.loads((smoke_run / "selection.json").read_text())
    assert len(sel["sets"]["1"]) == 1 and 0 < len(sel["sets"]["4"]) <= 4
    v = json.loads((smoke_run / "verdicts.json").read_text())
    assert len(v["entries"]) == 7 * 2 * 2  # conditions x checkpoints x scorings, each over both seeds
    assert json.loads((smoke_run / "eval_base.json").read_text())["adapter_sha256"] is None
    shas = {
        json.loads((smoke_run / f"eval_{c}_s{s}_006.json").read_text())["adapter_sha256"] for c in CONDS for s in SEEDS
    }
    assert len(shas) == 14  # every condition and seed trained its own adapter
    done = json.loads((smoke_run / "train_many_s0" / "done.json").read_text())
    assert done["train_seed"] == 0 and done["micro_batch"] == 16 and done["micro_batch_auto"] is False
    # outputs are readable by others
    for f in (
        "eval_base.json",
        "verdicts.json",
        "report.md",
        "manifest.json",
        "selection.json",
        "train_many_s0/done.json",
    ):
        assert (smoke_run / f).stat().st_mode & 0o777 == 0o644, f


def test_the_probe_records_each_responses_length_for_the_cost_model(smoke_run):
    """probe_<task>.json holds every response's new tokens (EOS included), problem by problem, within
    max_new_tokens; the cost model reads them."""
    from orchestration import config
    from runner import cost_model

    cfg = config.load(str(SMOKE))
    pr = json.loads((smoke_run / "probe_arith-1x1.json").read_text())
    lengths = pr["response_tokens"]
    T = cfg.eval.sampling.max_new_tokens
    assert len(lengths) == cfg.probe.arith_problems and all(len(rs) == pr["n"] for rs in lengths)
    assert all(1 <= x <= T for rs in lengths for x in rs) and len({x for rs in lengths for x in rs}) > 1
    assert cost_model.probe_lengths(cfg, smoke_run) == [x for rs in lengths for x in rs]


def test_second_run_skips_everything_and_dry_run_says_done(smoke_run):
    before = snapshot(smoke_run)
    r = pipeline("--config", str(SMOKE), "--out", str(smoke_run), "--quiet", timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("done, skipped") == 8 and "nothing written" in r.stdout
    assert snapshot(smoke_run) == before  # the manifest too: a finished run is read, not written
    d = pipeline("--config", str(SMOKE), "--out", str(smoke_run), "--dry-run", timeout=120)
    assert (
        d.returncode == 0
        and d.stdout.count(" done") == 8
        and "to do" not in d.stdout
        and "0 train/eval jobs left" in d.stdout
    )
    j = pipeline("--config", str(SMOKE), "--out", str(smoke_run), "--print-jobs", timeout=120)
    assert j.returncode == 0 and "grpo.py" not in j.stdout


def test_jobs_2_writes_the_same_bytes_as_jobs_1(smoke_run, small_jobs2):
    a, b = outputs_bytes(small_jobs2), outputs_bytes(smoke_run)
    assert len(a) == 3 * 2 * 2 + 1 + 3 * 2 * 2  # adapters; evaluations
    assert [k for k in a if a[k] != b.get(k)] == []  # every file equals the one --jobs 1 wrote for the same job


def test_changing_train_seeds_leaves_problems_selection_and_base(smoke_run, tmp_path):
    """Changing train seeds leaves problems selection and base eval alone."""
    from orchestration import config, provenance

    one = config.load(str(SMOKE))
    other = config.load(
        str(SMOKE), ["train.seeds=[7, 8, 9]", "eval_sets.pool.n=24"]
    )  # the calibration's pool: 3 seeds x 8
    for stage in ("base", "probe"):
        assert provenance.stage_hash(one, stage) == provenance.stage_hash(other, stage), stage

    sizes = {"sizes": study.selection_sizes(one)}
    assert sizes == {"sizes": study.selection_sizes(other)} and provenance.stage_hash(
        one, "select", sizes
    ) == provenance.stage_hash(other, "select", sizes)
    assert provenance.stage_hash(one, "eval", {"adapter_sha256": None}) == provenance.stage_hash(
        other, "eval", {"adapter_sha256": None}
    )
    # and the pipeline agrees: with other seeds, base, probe, select and the base evaluation are done
    d = pipeline(
        "--config",
        str(SMOKE),
        "--out",
        str(smoke_run),
        "--dry-run",
        "--set",
        "train.seeds=[7, 8, 9]",
        "--set",
        "eval_sets.pool.n=24",
        timeout=120,
    )
    assert d.returncode == 0, d.stderr
    rows = dict(
        line.split(None, 1) for line in d.stdout.splitlines()[1:] if line.startswith("  ") and "jobs left" not in line
    )
    assert rows["base"] == "done" and rows["probe"] == "done" and rows["select"] == "done"
    assert rows["eval"].startswith(
        "3 done"
    )  # the base on test, wide and ood (the larger pool is new); every adapter evaluation to do


def test_rerun_one_stage_by_hand(smoke_run):
    report = smoke_run / "report.md"
    old = report.stat().st_mtime_ns
    r = pipeline(
        "--config", str(SMOKE), "--out", str(smoke_run), "--stage", "analyze", "--force", "--quiet", timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert "analyze: running" in r.stdout and report.stat().st_mtime_ns != old
    assert f"see {smoke_run / 'report.md'}" in r.stdout
    assert len(list((smoke_run / "superseded").glob("*/report.md"))) == 1  # the old report moved aside, not overwritten


def test_killed_mid_training_then_resumed_equals_uninterrupted(smoke_run, small_cfg, small_jobs2, fitted_dir, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(fitted_dir, run / "base_model")  # the same base, bit for bit (checked below)
    assert (run / "base_model" / "model.safetensors").read_bytes() == (
        smoke_run / "base_model" / "model.safetensors"
    ).read_bytes()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "pipeline.py"), "--config", str(small_cfg), "--out", str(run), "--quiet"],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    state = run / "train_many_s0" / "last" / "state.json"
    deadline = time.time() + 300
    while time.time() < deadline and not state.exists():
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert state.exists(), "the run never reached training"
    killed_at = json.loads(state.read_text())["step"]
    assert not (run / "train_sft_s1" / "done.json").exists() and not (run / "verdicts.json").exists()
    assert (run / ".pipeline.lock").exists()  # left behind by the killed process: stale, taken over below
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stale lock" in r.stdout
    assert killed_at < 6 and f"train many s0: resuming {run / 'train_many_s0'} from step {killed_at + 1}" in r.stdout
    a, b = outputs_bytes(run), outputs_bytes(smoke_run)
    assert len(a) == 12 + 13 and [k for k in a if a[k] != b.get(k)] == []
    # the verdicts equal those of the same study run with --jobs 2, never killed
    assert (
        json.loads((run / "verdicts.json").read_text())["entries"]
        == json.loads((small_jobs2 / "verdicts.json").read_text())["entries"]
    )


def stopped_once_saved(cmd: list[str], state: Path, sig: int) -> tuple[int, str]:
    """Run cmd, send it `sig` once `state` (a training run's resume point) is written; its exit code and
    stderr. A shell that starts jobs in the background hands them SIGINT ignored, and Python then installs
    no KeyboardInterrupt handler: the child restores the default, as a terminal's Ctrl-C has it."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 300
    while time.time() < deadline and not state.exists() and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_ends_in_one_line_and_records_interrupted(sig, small_cfg, fitted_dir, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(fitted_dir, run / "base_model")
    cmd = [sys.executable, str(ROOT / "pipeline.py"), "--config", str(small_cfg), "--out", str(run), "--quiet"]
    rc, err = stopped_once_saved(cmd, run / "train_many_s0" / "last" / "state.json", sig)
    assert rc == 130
    lines = err.strip().splitlines()
    assert (
        len(lines) == 1
        and "interrupted during stage train" in lines[0]
        and "resume from their last checkpoint" in lines[0]
    ), err
    man = json.loads((run / "manifest.json").read_text())
    assert man["stages"]["train"]["status"] == "interrupted"
    assert not (run / ".pipeline.lock").exists()
    assert ended(man), man


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_grpo_py_interrupted_ends_in_one_line_with_130_and_resumes(sig, small_cfg, fitted_dir, tmp_path):
    """grpo.py by hand, stopped by Ctrl-C or a scheduler's SIGTERM, ends as pipeline.py does (README: exit
    codes): one line saying what the same command resumes, exit 130, no traceback; and it does resume."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(fitted_dir, run / "base_model")
    cmd = [sys.executable, str(ROOT / "grpo.py"), "train", "--config", str(small_cfg), "--run", str(run)]
    cmd += ["--condition", "many", "--seed", "0", "--quiet", "--set", "train.lr=1e-3"]  # no lr-sweep in this folder
    rc, err = stopped_once_saved(cmd, run / "train_many_s0" / "last" / "state.json", sig)
    assert rc == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("grpo.py train: interrupted"), err
    assert "training resumes from its last checkpoint" in lines[0]
    r = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "resuming" in r.stdout, r.stderr[-2000:]
    assert (run / "train_many_s0" / "done.json").exists()


def test_another_config_on_a_finished_run_is_refused_and_changes(smoke_run, tmp_path):
    """Another config on a finished run is refused and changes nothing."""
    run = copy_run(smoke_run, tmp_path / "run")
    before = snapshot(run)
    r = pipeline("--config", str(SMOKE), "--out", str(run), "--set", "select.samples=4", "--quiet", timeout=300)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "selection.json" in lines[0] and "select.samples=8 there, 4 here" in lines[0], r.stderr
    assert snapshot(run) == before


def test_a_second_pipeline_on_the_same_folder_is_refused(smoke_run, tmp_path):
    run = copy_run(smoke_run, tmp_path / "run")
    (run / ".pipeline.lock").write_text(
        json.dumps({"pid": os.getpid(), "host": __import__("socket").gethostname(), "started": "now"})
    )
    before = snapshot(run)
    r = pipeline("--config", str(SMOKE), "--out", str(run), "--quiet", timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use by another pipeline.py" in lines[0] and str(os.getpid()) in lines[0]
    assert snapshot(run) == before


def test_outputs_are_readable_by_all_and_the_smoke_report_says(smoke_run):
    """Outputs are readable by all and the smoke report says it is no result."""
    for f in [
        *smoke_run.glob("train_*/step_*/adapter_model.safetensors"),
        smoke_run / "base_model" / "model.safetensors",
    ]:
        assert f.stat().st_mode & 0o777 == 0o644, f
    assert (smoke_run / "report.md").read_text().startswith("**A pipeline check on a toy model")
    r = pipeline("--config", str(SMOKE), "--out", str(smoke_run / "new"), "--print-jobs", timeout=120)
    assert all(line.startswith(("python ", "#")) for line in r.stdout.splitlines() if line.strip()), r.stdout


def test_a_read_only_folder_is_one_line_naming_it(smoke_run, tmp_path, monkeypatch, capsys):
    """As root the permission bits do not stop a write: the file system's refusal is injected."""
    import errno

    import analyze_b
    import pipeline as pl
    from analysis import assemble
    from runner import folder

    run = copy_run(smoke_run, tmp_path / "run")
    before = snapshot(run)

    def read_only(self):
        raise OSError(errno.EROFS, "Read-only file system", str(self.path))

    monkeypatch.setattr(folder.Lock, "acquire", read_only)
    monkeypatch.chdir(ROOT)
    assert pl.main(["--config", str(SMOKE), "--out", str(run), "--quiet"]) == 0  # finished: read, nothing written
    assert "nothing written" in capsys.readouterr().out
    assert pl.main(["--config", str(SMOKE), "--out", str(run), "--quiet", "--stage", "analyze", "--force"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        f"pipeline.py: cannot write in {run}: Read-only file system ({run / '.pipeline.lock'}); "
        "give a folder you can write: --run DIR"
    ), err
    assert "None" not in err[0] and snapshot(run) == before

    def refuse(folder, path, *a, **kw):  # provenance.move_aside: its superseded/<time>/ folder cannot be made
        raise OSError(errno.EROFS, "Read-only file system", str(folder / "superseded"))

    monkeypatch.setattr(assemble, "move_aside", refuse)
    assert analyze_b.main(["--run", str(run), "--no-figures"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot write {run / 'superseded'}: Read-only file system" in err[0]
    assert f"python analyze_b.py --run {run} --out NEW_FOLDER" in err[0] and snapshot(run) == before
    monkeypatch.undo()
    out = tmp_path / "reanalysed"
    assert analyze_b.main(["--run", str(run), "--out", str(out), "--no-figures"]) == 0  # the way out it names
    assert snapshot(run) == before
    a, b = json.loads((out / "verdicts.json").read_text()), json.loads((run / "verdicts.json").read_text())
    assert a["entries"] == b["entries"] and a["provenance"]["inputs"] == b["provenance"]["inputs"]
    assert not list(out.rglob("*.safetensors")) and not (out / "superseded").exists()
    assert analyze_b.main(["--run", str(run), "--out", str(out)]) == 2  # not empty: refused
    assert "exists and is not empty" in capsys.readouterr().err


def test_a_finished_run_whose_manifest_says_otherwise_gets_its_states_written(smoke_run, tmp_path):
    """Every output done but the manifest records a stage cut short (killed after its last file): the rerun
    writes the states again, and nothing else; the next rerun writes nothing."""
    run = copy_run(smoke_run, tmp_path / "run")
    m = json.loads((run / "manifest.json").read_text())
    m["stages"]["analyze"] = {"status": "interrupted"}
    (run / "manifest.json").write_text(json.dumps(m))
    before = snapshot(run)
    r = pipeline("--config", str(SMOKE), "--out", str(run), "--quiet", timeout=300)
    assert r.returncode == 0 and "nothing written" not in r.stdout, r.stdout
    assert json.loads((run / "manifest.json").read_text())["stages"]["analyze"]["status"] == "done"
    assert {k: v for k, v in snapshot(run).items() if k != "manifest.json"} == {
        k: v for k, v in before.items() if k != "manifest.json"
    }
    again = snapshot(run)
    r = pipeline("--config", str(SMOKE), "--out", str(run), "--quiet", timeout=300)
    assert r.returncode == 0 and "nothing written" in r.stdout and snapshot(run) == again


def test_a_stage_that_writes_no_report_promises_none(smoke_run, tmp_path):
    run = copy_run(smoke_run, tmp_path / "run")
    r = pipeline("--config", str(SMOKE), "--out", str(run), "--stage", "probe", "--quiet", timeout=120)
    assert r.returncode == 0 and "probe: done, skipped" in r.stdout and "all done in" in r.stdout, r.stdout
    assert "report.md" not in r.stdout  # no report promised by a stage that writes none
