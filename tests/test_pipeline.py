"""The whole study on configs/smoke.yaml: end to end, killed and resumed, and broken configs."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestration import study

pytestmark = pytest.mark.slow  # whole pipelines or real weights: left out of the fast loop

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.yaml"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def pipeline(*args, **kw):
    return subprocess.run([sys.executable, str(ROOT / "pipeline.py"), *args], cwd=ROOT, env=ENV, capture_output=True, text=True, **kw)


CONDS, SEEDS, STEPS = ("many", "4", "1", "4-kl", "format", "rft", "sft"), (0, 1), (3, 6)
N_TRAIN, N_EVAL = 8 * 2, 1 + 8 * 2 * 2  # jobs of the smoke config: training runs; test-set evaluations


@pytest.fixture(scope="module")
def small_cfg(tmp_path_factory):
    """The smoke config with three of its conditions (one control), no extra evaluation sets, no
    calibration and no token stage: the same hashes, so its training runs and evaluations must equal smoke's
    byte for byte, at a third of the cost (for the tests that run a study more than once)."""
    import yaml

    d = yaml.safe_load(SMOKE.read_text())
    d["conditions"] = {k: v for k, v in d["conditions"].items() if k in ("many", "4", "sft")}
    d["eval_sets"] = {}  # left out, the registered study's sets would apply
    d["analyze"]["calibration"] = None  # its pool is an evaluation set
    d["tokens"]["enabled"] = False
    path = tmp_path_factory.mktemp("cfg") / "small.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def small_jobs2(small_cfg, fitted_dir, tmp_path_factory):
    """The small study with --jobs 2 (worker processes)."""
    run = tmp_path_factory.mktemp("jobs2") / "run"
    run.mkdir()
    shutil.copytree(fitted_dir, run / "base_model")
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--quiet", "--jobs", "2", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return run


def expected_files(run: Path) -> list[Path]:
    files = ["manifest.json", "base_model/config.json", "base_model/model.safetensors", "base_model/tokenizer.json",
             "probe_countdown.json", "probe_arith-1x1.json", "selection.json", "lr_choice.json",
             "lr_sweep/lr_0.001/train_log.csv", "lr_sweep/lr_0.01/train_log.csv", "eval_base.json",
             "verdicts.json", "report.md", "figures/passk_many.png", "figures/training.png", "figures/lr_sweep.png"]
    for c in CONDS:
        for seed in SEEDS:
            d = f"train_{c}_s{seed}"
            files += [f"{d}/train_log.csv", f"{d}/done.json", f"{d}/last/optimizer.pt"]
            for s in STEPS:
                files += [f"{d}/step_{s:03d}/adapter_model.safetensors", f"{d}/step_{s:03d}/adapter_config.json",
                          f"eval_{c}_s{seed}_{s:03d}.json"]
    return [run / f for f in files]


def outputs_bytes(run: Path) -> dict[str, bytes]:
    """Adapters and evaluation counts: what --jobs and resuming must not change."""
    out = {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.glob("train_*/step_*/adapter_model.safetensors"))}
    for p in sorted(run.glob("eval_*.json")):
        out[p.name] = json.dumps(_eval_content(p), sort_keys=True).encode()
    return out


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("smoke") / "run"
    r = pipeline("--config", str(SMOKE), "--out", str(run), "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return run


def _eval_content(path: Path) -> dict:
    """An evaluation without what may differ between two runs of the same job: timings, the
    adapter's path, and the full config it records (a smaller config can run the same job);
    the stage hash, which covers every setting the job depends on, stays."""
    d = json.loads(path.read_text())
    d.pop("seconds")
    d.pop("model")
    d["provenance"] = {"stage_hash": d["provenance"]["stage_hash"], "inputs": d["provenance"]["inputs"]}
    return d


def snapshot(run: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(run)): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(run.rglob("*"))}


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_end_to_end_writes_every_file(smoke_run):
    missing = [str(p) for p in expected_files(smoke_run) if not p.exists() or p.stat().st_size == 0]
    assert not missing
    assert not (smoke_run / "superseded").exists()  # a first run moves nothing aside (the training figure is drawn again)
    man = json.loads((smoke_run / "manifest.json").read_text())
    assert [s for s in man["stage_order"]] == ["base", "probe", "select", "lr-sweep", "train", "eval", "tokens", "analyze"]
    assert all(man["stages"][s]["status"] == "done" and man["stages"][s]["seconds"] >= 0 for s in man["stage_order"])
    assert len(man["jobs"]) == N_TRAIN + N_EVAL + (1 + 8) + (1 + 16) + 1 + 32  # + wide, ood, pool, tokens
    assert all(j["status"] == "done" for j in man["jobs"].values())
    assert man["plan_sha256"] and man["versions"]["torch"]
    # the eval file holds its sampling settings, counts and responses, and its numbers follow from its own counts
    ev = json.loads((smoke_run / "eval_many_s1_006.json").read_text())
    assert (ev["condition"], ev["train_seed"], ev["step"]) == ("many", 1, 6)
    n = ev["sampling"]["n"]
    assert set(ev["sampling"]) >= {"n", "temperature", "top_p", "top_k", "repetition_penalty", "max_new_tokens", "seed", "stop_ids"}
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
    shas = {json.loads((smoke_run / f"eval_{c}_s{s}_006.json").read_text())["adapter_sha256"] for c in CONDS for s in SEEDS}
    assert len(shas) == 14  # every condition and seed trained its own adapter
    done = json.loads((smoke_run / "train_many_s0" / "done.json").read_text())
    assert done["train_seed"] == 0 and done["micro_batch"] == 16 and done["micro_batch_auto"] is False
    # outputs are readable by others
    for f in ("eval_base.json", "verdicts.json", "report.md", "manifest.json", "selection.json", "train_many_s0/done.json"):
        assert (smoke_run / f).stat().st_mode & 0o777 == 0o644, f


def test_second_run_skips_everything_and_dry_run_says_done(smoke_run):
    before = snapshot(smoke_run)
    r = pipeline("--config", str(SMOKE), "--out", str(smoke_run), "--quiet", timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("done, skipped") == 8
    after = snapshot(smoke_run)
    assert {k: v for k, v in after.items() if k != "manifest.json"} == {k: v for k, v in before.items() if k != "manifest.json"}
    d = pipeline("--config", str(SMOKE), "--out", str(smoke_run), "--dry-run", timeout=120)
    assert d.returncode == 0 and d.stdout.count(" done") == 8 and "to do" not in d.stdout and "0 train/eval jobs left" in d.stdout
    j = pipeline("--config", str(SMOKE), "--out", str(smoke_run), "--print-jobs", timeout=120)
    assert j.returncode == 0 and "grpo.py" not in j.stdout


def test_print_jobs_lists_every_job_as_a_command(tmp_path):
    r = pipeline("--config", str(SMOKE), "--out", str(tmp_path / "new"), "--print-jobs", timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [x.split("--stage ")[1] for x in lines
            if x.startswith("python pipeline.py") and "--stage" in x] == ["base", "probe", "select", "lr-sweep"]
    train = [x for x in lines if x.startswith("python grpo.py train")]
    evals = [x for x in lines if x.startswith("python grpo.py eval")]
    assert len(train) == N_TRAIN and len(evals) == N_EVAL + 9 + 17 + 1
    assert len([x for x in lines if x.startswith("python grpo.py tokens")]) == 32
    assert any("--condition 4-kl --seed 1" in x for x in train)
    assert any(x.endswith("train_1_s1/step_006") for x in evals)
    assert not (tmp_path / "new").exists()  # printing writes nothing


def test_print_jobs_trains_a_condition_on_its_own_seeds(tmp_path):
    """train.seeds_by_condition (PLAN.md change 29): many on seeds 0-3, the rest on train.seeds
    [0, 1]: two more training jobs, each with its two test evaluations and its ood one; the wide
    set still evaluates the first seed only (the calibration's pool grows to 4 seeds x 8 samples)."""
    r = pipeline("--config", str(SMOKE), "--out", str(tmp_path / "new"), "--print-jobs",
                 "--set", "train.seeds_by_condition={many: [0, 1, 2, 3]}", "--set", "eval_sets.pool.n=32", timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    train = [x for x in lines if x.startswith("python grpo.py train")]
    assert len(train) == N_TRAIN + 2 and sum("--condition many " in x for x in train) == 4
    assert any("--condition many --seed 3" in x for x in train) and not any("--condition 16 --seed 2" in x for x in train)
    evals = [x for x in lines if x.startswith("python grpo.py eval")]
    assert len(evals) == N_EVAL + 9 + 17 + 1 + 2 * 2 + 2
    assert sum("train_many_s3/step_006" in x for x in evals) == 2  # test and ood at the last step, test at step 3: below
    assert any(x.endswith("train_many_s3/step_003") for x in evals)


def test_jobs_2_writes_the_same_bytes_as_jobs_1(smoke_run, small_jobs2):
    a, b = outputs_bytes(small_jobs2), outputs_bytes(smoke_run)
    assert len(a) == 3 * 2 * 2 + 1 + 3 * 2 * 2  # adapters; evaluations
    assert [k for k in a if a[k] != b.get(k)] == []  # every file equals the one --jobs 1 wrote for the same job


def test_changing_train_seeds_leaves_problems_selection_and_base(smoke_run, tmp_path):
    """Changing train seeds leaves problems selection and base eval alone."""
    from orchestration import config, provenance

    one = config.load(str(SMOKE))
    other = config.load(str(SMOKE), ["train.seeds=[7, 8, 9]", "eval_sets.pool.n=24"])  # the calibration's pool: 3 seeds x 8
    for stage in ("base", "probe"):
        assert provenance.stage_hash(one, stage) == provenance.stage_hash(other, stage), stage

    sizes = {"sizes": study.selection_sizes(one)}
    assert (sizes == {"sizes": study.selection_sizes(other)}
            and provenance.stage_hash(one, "select", sizes) == provenance.stage_hash(other, "select", sizes))
    assert provenance.stage_hash(one, "eval", {"adapter_sha256": None}) == provenance.stage_hash(other, "eval", {"adapter_sha256": None})
    # and the pipeline agrees: with other seeds, base, probe, select and the base evaluation are done
    d = pipeline("--config", str(SMOKE), "--out", str(smoke_run), "--dry-run", "--set", "train.seeds=[7, 8, 9]",
                 "--set", "eval_sets.pool.n=24", timeout=120)
    assert d.returncode == 0, d.stderr
    rows = dict(line.split(None, 1) for line in d.stdout.splitlines()[1:] if line.startswith("  ") and "jobs left" not in line)
    assert rows["base"] == "done" and rows["probe"] == "done" and rows["select"] == "done"
    assert rows["eval"].startswith("3 done")  # the base on test, wide and ood (the larger pool is new); every adapter evaluation to do


def test_rerun_one_stage_by_hand(smoke_run):
    report = smoke_run / "report.md"
    old = report.stat().st_mtime_ns
    r = pipeline("--config", str(SMOKE), "--out", str(smoke_run), "--stage", "analyze", "--force", "--quiet", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "analyze: running" in r.stdout and report.stat().st_mtime_ns != old
    assert f"see {smoke_run / 'report.md'}" in r.stdout
    assert len(list((smoke_run / "superseded").glob("*/report.md"))) == 1  # the old report moved aside, not overwritten


def test_killed_mid_training_then_resumed_equals_uninterrupted(smoke_run, small_cfg, small_jobs2, fitted_dir, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(fitted_dir, run / "base_model")  # the same base, bit for bit (checked below)
    assert (run / "base_model" / "model.safetensors").read_bytes() == (smoke_run / "base_model" / "model.safetensors").read_bytes()
    proc = subprocess.Popen([sys.executable, str(ROOT / "pipeline.py"), "--config", str(small_cfg), "--out", str(run), "--quiet"],
                            cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    assert json.loads((run / "verdicts.json").read_text())["entries"] == json.loads((small_jobs2 / "verdicts.json").read_text())["entries"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_ends_in_one_line_and_records_interrupted(sig, small_cfg, fitted_dir, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(fitted_dir, run / "base_model")
    # a shell that starts jobs in the background hands them SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler: restore the default, as a terminal's Ctrl-C has it
    proc = subprocess.Popen([sys.executable, str(ROOT / "pipeline.py"), "--config", str(small_cfg), "--out", str(run), "--quiet"],
                            cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    state = run / "train_many_s0" / "last" / "state.json"
    deadline = time.time() + 300
    while time.time() < deadline and not state.exists():
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted during stage train" in lines[0] and "resume from their last checkpoint" in lines[0], err
    man = json.loads((run / "manifest.json").read_text())
    assert man["stages"]["train"]["status"] == "interrupted"
    assert not (run / ".pipeline.lock").exists()
    assert ended(man), man


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
    (run / ".pipeline.lock").write_text(json.dumps({"pid": os.getpid(), "host": __import__("socket").gethostname(), "started": "now"}))
    before = snapshot(run)
    r = pipeline("--config", str(SMOKE), "--out", str(run), "--quiet", timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use by another pipeline.py" in lines[0] and str(os.getpid()) in lines[0]
    assert snapshot(run) == before


def test_retrain_with_new_checkpoints_leaves_no_stale_evaluation(small_cfg, small_jobs2, tmp_path):
    run = copy_run(small_jobs2, tmp_path / "run")
    sets = ["--set", "train.checkpoints=[2, 6]"]
    r = pipeline("--config", str(small_cfg), "--out", str(run), *sets, "--quiet", timeout=300)
    assert r.returncode == 2 and "train.checkpoints=[3, 6] there, [2, 6] here" in r.stderr  # refused without --force
    r = pipeline("--config", str(small_cfg), "--out", str(run), *sets, "--force", "--quiet", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not list(run.glob("eval_*_003.json")) and len(list(run.glob("eval_*_002.json"))) == 6
    assert {e["step"] for e in json.loads((run / "verdicts.json").read_text())["entries"]} == {2, 6}
    assert "step 3" not in (run / "report.md").read_text()
    moved = list((run / "superseded").rglob("eval_many_s0_003.json"))
    assert len(moved) == 1  # moved aside, not deleted
    assert "train_many_s0/step_003" not in str(list(run.glob("train_*/step_*")))


BROKEN = {
    "bad_yaml": ("train: [steps: 3\n", "not valid YAML"),
    "unknown_key": ("train:\n  stepz: 3\n", "train.stepz"),
    "wrong_type": ("train:\n  steps: three\n", "train.steps"),
    "k_over_n": ("eval:\n  n: 4\n  k_max: 8\n", "eval.k_max"),
    "missing_model": ("model:\n  path: ./no/such/model\n", "model.path"),
    "negative_steps": ("train:\n  steps: -1\n  checkpoints: []\n", "train.steps"),
    "path_and_build": ("model:\n  path: ./somewhere\n  build: true\n", "model.path"),
    "float16": ("model:\n  dtype: float16\n", "model.dtype"),
    "tempered_rollouts": ("train:\n  sampling: {temperature: 0.7}\n", "train.sampling"),
    "empty_file_means_the_hub_model": ("", "model.path 'Qwen/Qwen2.5-0.5B-Instruct'"),
    "bad_condition": ("conditions:\n  many: {problems: some}\n", "conditions.many.problems"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_config_is_a_one_line_error_and_touches_nothing(name, tmp_path):
    text, key = BROKEN[name]
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(text)
    run = tmp_path / "run"
    run.mkdir()
    keep = run / "eval_base.json"
    keep.write_text('{"precious": true}')
    mtime = keep.stat().st_mtime_ns
    r = pipeline("--config", str(cfg), "--out", str(run), timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], r.stderr
    assert keep.read_text() == '{"precious": true}' and keep.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(run)) == ["eval_base.json"]


def test_unreachable_model_writes_nothing(tmp_path):
    cfg = tmp_path / "empty.yaml"
    cfg.write_text("")
    r = pipeline("--config", str(cfg), "--out", str(tmp_path / "run"), timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "hf download Qwen/Qwen2.5-0.5B-Instruct --revision" in r.stderr and "model.revision" in r.stderr
    assert not (tmp_path / "run").exists()


def test_set_override_and_its_errors(tmp_path):
    r = pipeline("--config", str(SMOKE), "--out", str(tmp_path / "r"), "--set", "eval.k_max=99", timeout=120)
    assert r.returncode == 2 and "eval.k_max" in r.stderr
    r = pipeline("--config", str(SMOKE), "--out", str(tmp_path / "r"), "--set", "train.nope=1", timeout=120)
    assert r.returncode == 2 and "train.nope" in r.stderr
    r = pipeline("--config", str(tmp_path / "absent.yaml"), timeout=120)
    assert r.returncode == 2 and "absent.yaml" in r.stderr
    r = pipeline("--config", str(SMOKE), "--out", str(tmp_path / "r"), "--set", "lr_sweep.candidates=[1e-4, 3E-4]", "--dry-run",
                 timeout=120)
    assert r.returncode == 0, r.stderr  # numbers as users type them


# ----------------------------------------------------------------------------- faults a user hits


def ended(manifest: dict) -> bool:
    """No stage or job is recorded as running or waiting: done, interrupted, failed and not started are the end states."""
    return all(v.get("status") in ("done", "interrupted", "failed", "not started") for part in ("stages", "jobs")
               for v in manifest[part].values())


def grpo_cmd(*args, **kw):
    return subprocess.run([sys.executable, str(ROOT / "grpo.py"), *args], cwd=ROOT, env=ENV, capture_output=True, text=True, **kw)


def truncate(path: Path, keep: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def test_a_damaged_adapter_is_one_line_for_grpo_and_redone(small_cfg, small_jobs2, tmp_path):
    """A damaged adapter is one line for grpo and redone by the pipeline."""
    run = copy_run(small_jobs2, tmp_path / "run")
    adapter = run / "train_many_s0" / "step_006"
    original = (small_jobs2 / "train_many_s0" / "step_006" / "adapter_model.safetensors").read_bytes()
    truncate(adapter / "adapter_model.safetensors")
    before = snapshot(run)
    r = grpo_cmd("eval", "--config", str(small_cfg), "--run", str(run), "--adapter", str(adapter), timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert ("adapter_model.safetensors" in r.stderr and "cut short" in r.stderr
            and f"--run {run}): it moves that training run aside and retrains it, and redoes what reads it" in r.stderr)
    assert snapshot(run) == before  # nothing moved or written
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--quiet", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "moved aside train_many_s0" in r.stdout and "damaged" in r.stdout
    assert (adapter / "adapter_model.safetensors").read_bytes() == original  # retrained, bit for bit
    assert list((run / "superseded").glob("*/train_many_s0/step_006/adapter_model.safetensors"))
    assert _eval_content(run / "eval_many_s0_006.json") == _eval_content(small_jobs2 / "eval_many_s0_006.json")
    man = json.loads((run / "manifest.json").read_text())
    assert ended(man) and all(v["status"] == "done" for v in man["stages"].values())


def test_a_damaged_resume_point_or_base_is_one_line_and_writes(small_cfg, small_jobs2, tmp_path):
    """A damaged resume point or base is one line and writes nothing."""
    run = copy_run(small_jobs2, tmp_path / "run")
    shutil.rmtree(run / "train_many_s0")
    shutil.copytree(small_jobs2 / "train_many_s0", run / "train_many_s0", ignore=shutil.ignore_patterns("done.json", "step_006"))
    truncate(run / "train_many_s0" / "last" / "optimizer.pt")
    before = snapshot(run)
    r = grpo_cmd("train", "--config", str(small_cfg), "--run", str(run), "--condition", "many", "--seed", "0", "--quiet", timeout=300)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "the resume point" in r.stderr and "move" in r.stderr and str(run / "train_many_s0") in r.stderr
    assert snapshot(run) == before
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    assert d.returncode == 0 and "1 damaged" in next(x for x in d.stdout.splitlines() if x.startswith("  train ")), d.stdout
    truncate(run / "base_model" / "model.safetensors", 1000)
    r = grpo_cmd("eval", "--config", str(small_cfg), "--run", str(run), timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "model.safetensors" in r.stderr and "--stage base" in r.stderr
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    assert d.returncode == 0 and "damaged (would be redone)" in d.stdout, d.stdout


INTERRUPTS = {  # where a Ctrl-C lands: (what raises it, the stage it interrupts)
    "in a single stage": ("pipeline.run_grpo", "probe"),
    "mid-job": ("orchestration.jobs.run_grpo", "eval"),
    "between jobs": ("orchestration.jobs.log", "eval"),
    "in the analysis": ("analysis.assemble.run_analysis", "analyze"),
}


@pytest.mark.parametrize("where", list(INTERRUPTS))
def test_the_manifest_never_says_running_after_an_interrupt(where, small_cfg, small_jobs2, tmp_path, monkeypatch, capsys):
    import importlib

    import pipeline as pl

    run = copy_run(small_jobs2, tmp_path / "run")
    for f in ("probe_countdown.json", "eval_many_s0_003.json", "eval_many_s0_006.json", "verdicts.json"):
        (run / f).unlink()
    man = json.loads((run / "manifest.json").read_text())
    man["jobs"]["train many s0"]["status"] = "running"  # as a killed (SIGKILL) pipeline leaves it
    (run / "manifest.json").write_text(json.dumps(man))
    target, stage = INTERRUPTS[where]
    module, attr = target.rsplit(".", 1)
    owner = importlib.import_module(module)
    real = getattr(owner, attr)
    calls = []

    def interrupt(*args, **kw):
        if where == "between jobs":  # the first job has finished; the Ctrl-C lands as the next one is about to start
            calls.append(args[0]) if args[0].startswith("start ") else None
            if len(calls) < 2:
                return real(*args, **kw)
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(owner, attr, interrupt)
    monkeypatch.chdir(ROOT)
    rc = pl.main(["--config", str(small_cfg), "--out", str(run), "--quiet"])
    assert rc == 130 and calls
    man = json.loads((run / "manifest.json").read_text())
    assert ended(man), {k: v["status"] for k, v in {**man["stages"], **man["jobs"]}.items()}
    assert man["stages"][stage]["status"] == "interrupted"
    assert f"interrupted during stage {stage};" in capsys.readouterr().err  # eval, not train, in a group of job stages
    if stage == "eval":
        assert man["stages"]["train"]["status"] == "done"  # every training run was done before the Ctrl-C
    # the killed pipeline's leftover: interrupted, until a run finds its output done
    assert man["jobs"]["train many s0"]["status"] == ("interrupted" if stage == "probe" else "done")
    later = pl.STAGES[pl.STAGES.index(stage) + 1:]
    assert all(man["stages"][s]["status"] == "not started" for s in later if s in man["stages"])  # never reached
    # only the job under way (if any) was interrupted; the ones still waiting never started
    assert sum(v["status"] == "interrupted" for k, v in man["jobs"].items() if k != "train many s0") <= (stage == "eval")
    assert {v["status"] for v in man["jobs"].values()} <= {"done", "interrupted", "not started"}
    assert not (run / ".pipeline.lock").exists()
    if where != "in a single stage":
        return
    monkeypatch.setattr(owner, attr, real)  # the rerun recovers: every stage and job done, no error left from the interrupt
    capsys.readouterr()
    assert pl.main(["--config", str(small_cfg), "--out", str(run), "--quiet"]) == 0
    man = json.loads((run / "manifest.json").read_text())
    states = {k: v for part in ("stages", "jobs") for k, v in man[part].items()}
    assert all(v["status"] == "done" and "error" not in v
               for v in states.values()), {k: v for k, v in states.items() if v["status"] != "done"}



def test_a_hand_rerun_moves_the_old_output_aside_and_leaves(small_cfg, small_jobs2, tmp_path):
    """A hand rerun moves the old output aside and leaves the analysis done."""
    run = copy_run(small_jobs2, tmp_path / "run")
    r = grpo_cmd("eval", "--config", str(small_cfg), "--run", str(run), "--adapter", str(run / "train_4_s1" / "step_003"), "--quiet",
                 timeout=300)
    assert r.returncode == 0, r.stderr
    moved = list((run / "superseded").glob("*/eval_4_s1_003.json"))
    assert len(moved) == 1 and _eval_content(moved[0]) == _eval_content(run / "eval_4_s1_003.json")  # the same counts, rewritten
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    assert "  analyze   done" in d.stdout, d.stdout  # timings and time stamps are not what the analysis computed from


def test_offline_the_hub_model_fails_in_a_second_with_the_right(tmp_path):
    """Offline the hub model fails in a second with the right command."""
    cfg = tmp_path / "empty.yaml"
    cfg.write_text("")
    for env in ({"HF_HUB_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "--config", str(cfg), "--out", str(tmp_path / "run")], cwd=ROOT,
                           env={**ENV, **env}, capture_output=True, text=True, timeout=60)
        took = time.perf_counter() - t0
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "`hf download Qwen/Qwen2.5-0.5B-Instruct --revision 7ae557604adf67be50417f59c2c2f167def9a775`" in r.stderr
        assert took < 5, took  # the hub client's own retries take about 27 s


def test_help_texts_list_choices_and_subcommands():
    out = subprocess.run([sys.executable, str(ROOT / "countdown.py"), "--help"], capture_output=True, text=True).stdout
    assert "arith-3x2" in out and "countdown" in out and "bare" in out
    out = grpo_cmd("--help").stdout
    for cmd in ("base", "probe", "select", "lr-sweep", "train", "eval", "tokens"):
        assert cmd in out
    assert "token-level comparison" in out and "build the base model" in out


def test_outputs_are_readable_by_all_and_the_smoke_report_says(smoke_run):
    """Outputs are readable by all and the smoke report says it is no result."""
    for f in [*smoke_run.glob("train_*/step_*/adapter_model.safetensors"), smoke_run / "base_model" / "model.safetensors"]:
        assert f.stat().st_mode & 0o777 == 0o644, f
    assert (smoke_run / "report.md").read_text().startswith("**A pipeline check on a toy model")
    r = pipeline("--config", str(SMOKE), "--out", str(smoke_run / "new"), "--print-jobs", timeout=120)
    assert all(line.startswith(("python ", "#")) for line in r.stdout.splitlines() if line.strip()), r.stdout


def test_one_gpu_per_job_from_a_fake_device_list(monkeypatch):
    import functools

    from orchestration import jobs

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7,9")
    assert jobs.visible_gpus() == ["7", "9"]
    assert jobs.assign_gpus(2, ["7", "9"]) == ["7", "9"] and jobs.assign_gpus(1, ["7", "9"]) == ["7"]
    assert jobs.assign_gpus(3, []) == []  # a CPU machine: nothing to assign
    with pytest.raises(Exception, match="a job needs a GPU of its own"):
        jobs.assign_gpus(3, ["7", "9"])
    assert jobs.assign_gpus(2, ["7", "7"]) == ["7", "7"]  # sharing one GPU only when asked
    pool = jobs.worker_pool(2, ["7", "9"])
    try:
        seen = [f.result() for f in [pool.submit(functools.partial(_env_after, 0.3)) for _ in range(6)]]
    finally:
        pool.shutdown()
    assert set(seen) == {"7", "9"}  # each worker sees exactly its own GPU
    r = pipeline("--config", str(SMOKE), "--out", "/tmp/never", "--jobs", "3", "--gpus", "0,1", "--dry-run", timeout=60)
    assert r.returncode == 0  # the smoke config runs on the CPU (device: cpu): GPUs do not apply
    cfg_gpu = ROOT / "configs" / "rehearsal.yaml"
    r = pipeline("--config", str(cfg_gpu), "--out", "/tmp/never", "--set", "device=auto", "--jobs", "3", "--gpus", "0,1", "--dry-run",
                 timeout=60)
    assert r.returncode == 2 and "--jobs 3 with 2 GPU(s) (0,1)" in r.stderr


def test_single_stages_run_in_a_worker_on_the_first_assigned_gpu(monkeypatch, tmp_path, fitted_dir):
    """base, probe, select and lr-sweep run before the jobs; with GPUs they run in a worker that sees
    only the first assigned one (a fake device list), so the pipeline's own process never starts CUDA."""
    import pipeline as pl
    from orchestration import jobs

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert jobs.in_worker(_env_after, 0.0, gpu="9") == "9"  # the worker sees exactly that GPU
    assert jobs.in_worker(_env_after, 0.0) is None and "CUDA_VISIBLE_DEVICES" not in os.environ  # no GPU: here, unchanged
    seen = []
    monkeypatch.setattr(pl, "in_worker", lambda fn, argv, gpu=None: seen.append((fn, argv[0], gpu)) or 0)
    monkeypatch.chdir(ROOT)
    shutil.copytree(fitted_dir, tmp_path / "run" / "base_model")  # the probe reads the base (stages.check_inputs)
    args = ["--config", str(SMOKE), "--out", str(tmp_path / "run"), "--set", "device=auto", "--stage", "probe", "--quiet"]
    assert pl.main(args + ["--gpus", "7,9", "--jobs", "2"]) == 0
    assert pl.main(args + ["--gpus", "5", "--force"]) == 0
    assert seen == [(jobs.run_grpo, "probe", "7"), (jobs.run_grpo, "probe", "5")]
    assert pl.main([*args[:4], "--stage", "probe", "--force", "--quiet"]) == 0  # smoke's device: cpu, no GPU at all
    assert seen[-1] == (jobs.run_grpo, "probe", None)


def _env_after(seconds):
    time.sleep(seconds)
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def recheck(*args, **kw):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "recheck.py"), *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, **kw)


def test_recheck_reruns_a_sample_of_jobs_and_finds_what_differs(small_cfg, small_jobs2, tmp_path):
    committed = copy_run(small_jobs2, tmp_path / "committed")
    # one committed evaluation that the recheck redoes is altered: that count and response must be
    # found, and everything else (same machine, same code) must match
    f = committed / "eval_many_s0_006.json"
    d = json.loads(f.read_text())
    d["problems"][0]["correct_loose"] += 1
    d["problems"][0]["responses"][0] = "altered"
    f.write_text(json.dumps(d))
    out = tmp_path / "re"
    r = recheck("--run", str(committed), "--config", str(small_cfg), "--out", str(out), "--train", "many:0", timeout=600)
    assert r.returncode == 1, r.stderr[-3000:]  # one file differs
    rec = json.loads((out / "recheck.json").read_text())
    by = {x["file"]: x for x in rec["files"]}
    assert set(by) == {"train_many_s0/step_003/adapter_model.safetensors", "train_many_s0/step_006/adapter_model.safetensors",
                       "train_many_s0/train_log.csv", "train_many_s0/train_eval.csv", "eval_many_s0_003.json", "eval_many_s0_006.json",
                       "eval_base.json", "verdicts.json"}
    assert [k for k, x in by.items() if not x["equal"]] == ["eval_many_s0_006.json"]
    bad = by["eval_many_s0_006.json"]
    assert (bad["problems_differing_loose"], bad["responses_differing"]) == (1, 1)
    assert bad["correct_loose"][0] == bad["correct_loose"][1] + 1
    assert by["verdicts.json"]["numbers"] > 100 and by["verdicts.json"]["primary_answer"][0] == by["verdicts.json"]["primary_answer"][1]
    assert "DIFFERS  evaluation   eval_many_s0_006.json" in r.stdout
    # only that run and what reads it were redone: another run's adapter is the committed file's copy
    other = "train_sft_s1/step_006/adapter_model.safetensors"
    assert (out / other).read_bytes() == (committed / other).read_bytes()


def test_recheck_refuses_another_config_or_a_run_this_code_would(small_cfg, small_jobs2, tmp_path):
    """Recheck refuses another config or a run this code would redo."""
    r = recheck("--run", str(small_jobs2), "--config", str(SMOKE), "--out", str(tmp_path / "a"), timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "differs from its manifest's config" in r.stderr and not (tmp_path / "a").exists()
    committed = copy_run(small_jobs2, tmp_path / "committed")
    done = committed / "train_sft_s0" / "done.json"
    d = json.loads(done.read_text())
    d["provenance"]["stage_hash"] = "0" * 16  # as if another revision's code hashed its settings otherwise
    done.write_text(json.dumps(d))
    r = recheck("--run", str(committed), "--config", str(small_cfg), "--out", str(tmp_path / "b"), "--train", "many:0", timeout=120)
    assert r.returncode == 2 and "train sft s0" in r.stderr and "revision" in r.stderr, r.stderr
    assert not (tmp_path / "b").exists()
    r = recheck("--run", str(small_jobs2), "--config", str(small_cfg), "--out", str(tmp_path / "c"), "--train", "many:9", timeout=120)
    assert r.returncode == 2 and "many:9" in r.stderr and not (tmp_path / "c").exists()


def test_recheck_compares_what_a_config_computes_not_its_whole(monkeypatch):
    """Recheck compares what a config computes not its whole hash.

    A key added since a run was made, at its 'as before' value, is no difference; a changed
    setting, seed list or analysis setting is, and is named."""
    from orchestration import config

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import recheck

    cfg = config.load(str(SMOKE))
    made = config.to_dict(cfg)
    del made["select"]["scoring"]  # as a run made before select.scoring existed records it
    assert recheck.config_difference(made, cfg) is None
    assert recheck.config_difference(made, config.load(str(SMOKE), ["train.lr=0.5"])) == "a setting of stage train"
    assert recheck.config_difference(made, config.load(str(SMOKE), ["train.seeds=[0]"])) == "train.seeds"
    assert recheck.config_difference(made, config.load(str(SMOKE), ["analyze.resamples=300"])) == "analyze.resamples"


def test_an_interrupt_during_eval_after_this_runs_training_names(small_cfg, small_jobs2, tmp_path, monkeypatch, capsys):
    """An interrupt during eval after this runs training names eval.

    Training ran in this invocation and finished; a Ctrl-C during the next evaluation is eval's,
    and the finished stage stays done: a group of job stages is not all train's."""
    import pipeline as pl
    from orchestration import jobs

    run = copy_run(small_jobs2, tmp_path / "run")
    shutil.rmtree(run / "train_many_s0")
    for f in run.glob("eval_many_s0_*.json"):
        f.unlink()
    real = jobs.run_grpo

    def interrupt(argv, *args, **kw):
        if argv[0] == "eval":
            raise KeyboardInterrupt
        return real(argv, *args, **kw)

    monkeypatch.setattr(jobs, "run_grpo", interrupt)
    monkeypatch.chdir(ROOT)
    assert pl.main(["--config", str(small_cfg), "--out", str(run), "--quiet"]) == 130
    man = json.loads((run / "manifest.json").read_text())
    assert (man["stages"]["train"]["status"], man["stages"]["eval"]["status"]) == ("done", "interrupted")
    assert man["jobs"]["train many s0"]["status"] == "done" and ended(man)
    assert "interrupted during stage eval;" in capsys.readouterr().err


# ----------------------------------------------------------------------------- what a new user hits: inputs first, one line, true states


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def test_a_model_folder_without_weights_is_not_a_model(tmp_path, fitted_dir):
    from orchestration import provenance

    d = tmp_path / "m"
    shutil.copytree(fitted_dir, d)
    assert provenance.model_folder_problem(d) is None
    (d / "model.safetensors").unlink()  # as results/smollm2/base_model is committed
    assert provenance.model_folder_problem(d) == f"{d / 'model.safetensors'}: missing (the folder holds no weights)"
    shutil.copy(fitted_dir / "model.safetensors", d / "model-00001-of-00002.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                                                               "b": "model-00002-of-00002.safetensors"}}))
    assert "model-00002-of-00002.safetensors: missing (named by model.safetensors.index.json)" in provenance.model_folder_problem(d)


def test_a_run_committed_without_its_base_weights_moves_nothing(small_cfg, small_jobs2, fitted_dir,
                                                                                                     tmp_path):
    """A run committed without its base weights moves nothing and its base stage rebuilds them.

    results/smollm2 is committed without base_model's weights: before, the base counted as done,
    training folders and evaluations were moved aside, then every job died on the missing weights."""
    run = copy_run(small_jobs2, tmp_path / "run")
    (run / "base_model" / "model.safetensors").unlink()
    before = snapshot(run)
    r = grpo_cmd("eval", "--config", str(small_cfg), "--run", str(run), timeout=120)  # the base's evaluation by hand
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "base_model/model.safetensors: missing" in r.stderr and "--stage base" in r.stderr
    for stage in ("train", "eval"):  # a later stage alone: one line naming the base and the command, nothing moved
        r = pipeline("--config", str(small_cfg), "--out", str(run), "--stage", stage, "--quiet", timeout=120)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"stage {stage} cannot run: {run / 'base_model' / 'model.safetensors'}: missing" in r.stderr
        assert f"--run {run} --stage base" in r.stderr
    assert snapshot(run) == before  # nothing moved aside, not even the manifest rewritten
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    assert "  base      without its weights (not committed; would be remade)" in d.stdout and "  train     done" in d.stdout, d.stdout
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--quiet", timeout=600)  # the whole study: the base stage rebuilds it
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run / "base_model" / "model.safetensors").read_bytes() == (fitted_dir / "model.safetensors").read_bytes()
    moved = sorted({p.relative_to(run / "superseded").parts[1] for p in (run / "superseded").rglob("*") if p.is_file()})
    assert moved == ["base_model"]  # the weightless folder; every training run, evaluation and the analysis were still done
    assert r.stdout.count("done, skipped") == 6  # probe, select, lr-sweep, train, eval, analyze: still done


def test_a_stage_whose_inputs_are_missing_writes_nothing(small_cfg, small_jobs2, tmp_path):
    fresh = tmp_path / "fresh"
    r = pipeline("--config", str(small_cfg), "--out", str(fresh), "--stage", "eval", timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "stage eval cannot run:" in r.stderr and "--stage base" in r.stderr
    assert not fresh.exists()  # no folder, no stray manifest.json
    run = copy_run(small_jobs2, tmp_path / "run")
    (run / "selection.json").unlink()
    before = snapshot(run)
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--stage", "train", "--quiet", timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "selection.json is missing" in r.stderr and f"--run {run} --stage select" in r.stderr
    assert snapshot(run) == before  # the training runs that read it were not moved aside as out of date
    shutil.rmtree(run / "train_many_s0" / "step_006")
    (run / "selection.json").write_text((small_jobs2 / "selection.json").read_text())
    before = snapshot(run)
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--stage", "eval", "--quiet", timeout=120)
    assert r.returncode == 2 and "train_many_s0/step_006/adapter_config.json: missing" in r.stderr and "--stage train" in r.stderr
    assert snapshot(run) == before  # its evaluation was not moved aside


def test_a_truncated_evaluation_at_the_analysis_is_one_line(small_cfg, small_jobs2, tmp_path):
    """A truncated evaluation at the analysis is one line with the command that fixes it."""
    run = copy_run(small_jobs2, tmp_path / "run")
    (run / "verdicts.json").unlink()
    truncate(run / "eval_many_s0_006.json", 300)
    before = snapshot(run)
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--stage", "analyze", "--quiet", timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip()
    assert f"{run / 'eval_many_s0_006.json'}: not valid JSON" in line and "make it again: python grpo.py eval" in line
    assert snapshot(run) == before
    fix = line.split("make it again: ", 1)[1]
    assert fix.endswith(f"--adapter {run / 'train_many_s0' / 'step_006'}")
    done = subprocess.run([sys.executable, *fix.split()[1:], "--quiet"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _eval_content(run / "eval_many_s0_006.json") == _eval_content(small_jobs2 / "eval_many_s0_006.json")
    # an evaluation that is valid JSON but wrong inside: the analysis finds it; the manifest says failed, not running
    d = json.loads((run / "eval_many_s0_003.json").read_text())
    d["problems"][0]["correct_loose"] = 999
    (run / "eval_many_s0_003.json").write_text(json.dumps(d))
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--stage", "analyze", "--quiet", timeout=300)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "eval_many_s0_003.json: problem" in r.stderr and "make it again: python grpo.py eval" in r.stderr
    man = json.loads((run / "manifest.json").read_text())
    assert man["stages"]["analyze"]["status"] == "failed" and ended(man)
    # analyze_b.py by hand says the same, with the command from the manifest
    r = subprocess.run([sys.executable, str(ROOT / "analyze_b.py"), "--run", str(run), "--no-figures"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "make it again: python grpo.py eval" in r.stderr and f"--adapter {run / 'train_many_s0' / 'step_003'}" in r.stderr


def test_the_manifest_names_each_jobs_output(small_jobs2, tmp_path):
    """Every job's entry in manifest.json names its output, which exists; the command that makes a
    damaged file again is that lookup (analyze_b.remake_hint), from the path the input error carries,
    and a manifest written before entries named their outputs gives the same answer."""
    import analyze_b
    from analysis import assemble, run_files

    run = copy_run(small_jobs2, tmp_path / "run")
    man = json.loads((run / "manifest.json").read_text())
    assert man["jobs"] and all((run / j["output"]).exists() for j in man["jobs"].values())
    truncate(run / "eval_many_s0_003.json", 300)
    with pytest.raises(run_files.InputError) as e:
        assemble.run_analysis(run, make_figures=False)
    assert e.value.path == run / "eval_many_s0_003.json"
    job = next(j for j in man["jobs"].values() if j["output"] == "eval_many_s0_003.json")
    want = "make it again: " + job["command"].replace(str(small_jobs2), str(run))  # pointed at the copy
    assert str(small_jobs2) in job["command"] and analyze_b.remake_hint(run, e.value.path) == want
    for j in man["jobs"].values():
        del j["output"]
    (run / "manifest.json").write_text(json.dumps(man))
    assert analyze_b.remake_hint(run, e.value.path) == want
    assert analyze_b.remake_hint(run, None).startswith("redo what is damaged: python pipeline.py --config ")


def test_a_read_only_folder_is_one_line_naming_it(smoke_run, tmp_path, monkeypatch, capsys):
    """As root the permission bits do not stop a write: the file system's refusal is injected."""
    import errno

    import analyze_b
    import pipeline as pl
    from analysis import assemble
    from orchestration import stages

    run = copy_run(smoke_run, tmp_path / "run")
    before = snapshot(run)

    def read_only(self):
        raise OSError(errno.EROFS, "Read-only file system", str(self.path))

    monkeypatch.setattr(stages.Lock, "acquire", read_only)
    monkeypatch.chdir(ROOT)
    assert pl.main(["--config", str(SMOKE), "--out", str(run), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (f"pipeline.py: cannot write in {run}: Read-only file system ({run / '.pipeline.lock'}); "
                                        "give a folder you can write: --run DIR"), err
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


def test_a_stage_that_writes_no_report_promises_none(smoke_run, tmp_path):
    run = copy_run(smoke_run, tmp_path / "run")
    r = pipeline("--config", str(SMOKE), "--out", str(run), "--stage", "probe", "--quiet", timeout=120)
    assert r.returncode == 0 and "probe: done, skipped" in r.stdout and "all done in" in r.stdout, r.stdout
    assert "report.md" not in r.stdout  # no report promised by a stage that writes none


def test_the_eta_is_said_again_as_jobs_finish(tmp_path, monkeypatch, capsys):
    from orchestration import jobs

    calls = []
    monkeypatch.setattr(jobs, "run_grpo", lambda argv: calls.append(argv) or 0)
    runner = jobs.Runner(tmp_path, 1, 1, "local", None, True, lambda j: None, lambda j: None)
    runner.report_every = 0.0
    todo = [jobs.Job("eval", f"eval base {i}", ["eval"], samples=8) for i in range(3)]
    status = runner.run(todo)
    assert all(v["status"] == "done" for v in status.values()) and len(calls) == 3
    etas = [x for x in capsys.readouterr().out.splitlines() if "ETA" in x]
    assert len(etas) == 2 and "done 1/3; waiting 2" in etas[0] and "done 2/3; waiting 1" in etas[1], etas
    assert "~0 s" not in etas[0] and "evaluation not measured yet" in etas[0]


def test_out_of_memory_is_one_line_naming_the_job_the_memory(small_cfg, small_jobs2, tmp_path, monkeypatch, capsys):
    """Out of memory is one line naming the job the memory and the settings.

    A CUDA out-of-memory error, injected on the CPU: grpo.py's line names the job, the memory and
    the settings to lower with values; the pipeline's last line the same advice; a rerun by hand
    that fails puts back what it moved aside; the manifest says failed and not started."""
    import torch

    import grpo
    import pipeline as pl
    from method import evaluate, model

    def oom(*a, **kw):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 7.63 GiB")

    run = copy_run(small_jobs2, tmp_path / "run")
    before = snapshot(run)
    monkeypatch.setattr(evaluate, "evaluate", oom)
    monkeypatch.chdir(ROOT)
    rc = grpo.main(["eval", "--config", str(small_cfg), "--run", str(run), "--adapter", str(run / "train_4_s1" / "step_003"), "--quiet"])
    assert rc == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"grpo.py: eval {run / 'train_4_s1' / 'step_003'} (test) ran out of memory on the CPU (")
    assert ("GiB available now; this process peaked at" in err[0]
            and "--set eval.max_rows=64, then 32, then 1 (now no cap: 128 rows a call)" in err[0]  # the adapter's 16 x 8
            and "changes no sample" in err[0]), err
    assert snapshot(run) == before and not (run / "superseded").exists()  # eval_4_s1_003.json put back where it was
    monkeypatch.undo()
    shutil.rmtree(run / "train_many_s0")
    for f in run.glob("eval_many_s0_*.json"):
        f.unlink()
    monkeypatch.setattr(model, "load_model", oom)  # what grpo.py's training imports: the job's first step needs memory
    monkeypatch.chdir(ROOT)
    assert pl.main(["--config", str(small_cfg), "--out", str(run), "--quiet"]) == 3  # out of memory: 3, as the README says
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("grpo.py: train many s0 ran out of memory on the CPU"), err  # the job's line
    assert err[1].startswith("pipeline.py: 1 job(s) failed (train many s0); 2 not started because they wait for them; "
                             "train many s0 ran out of memory: lower it: --set micro_batch=8, then 4, then 1 (now 16)"), err[1]
    assert "FAILED train many s0 (out of memory: its line above names the memory it had" in cap.out
    man = json.loads((run / "manifest.json").read_text())
    assert man["jobs"]["train many s0"]["status"] == "failed" and man["jobs"]["train many s0"]["exit"] == 3
    assert man["jobs"]["eval many s0 step 6"]["status"] == "not started" and man["stages"]["train"]["status"] == "failed"
    assert man["stages"]["eval"]["status"] == "not started" and man["stages"]["analyze"]["status"] == "not started" and ended(man)


def test_a_gpu_config_plans_without_its_weights_and_gives_hours(tmp_path):
    """A gpu config plans without its weights and gives hours labelled an estimate."""
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # an empty cache: the model is not downloaded
    q = ROOT / "configs" / "qwen05b.yaml"
    r = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "--config", str(q), "--out", str(tmp_path / "q"), "--dry-run"],
                       cwd=ROOT, env={**ENV, **env}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "`hf download Qwen/Qwen2.5-0.5B-Instruct --revision 7ae557604adf67be50417f59c2c2f167def9a775`" in r.stdout
    jobs_line = next(x for x in r.stdout.splitlines() if "jobs left" in x)
    assert "156 train/eval jobs left" in jobs_line and " h (an estimate: " in jobs_line and "at the bound" in jobs_line
    assert "the registered shape of Qwen/Qwen2.5-0.5B-Instruct" in jobs_line and "~0 s" not in r.stdout
    r = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "--config", str(q), "--out", str(tmp_path / "q"), "--print-jobs"],
                       cwd=ROOT, env={**ENV, **env}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and sum(x.startswith("python grpo.py train") for x in r.stdout.splitlines()) == 24
    assert all(x.startswith(("python ", "#")) for x in r.stdout.splitlines() if x.strip())
    assert not (tmp_path / "q").exists()
    r = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "--config", str(q), "--out", str(tmp_path / "q")],
                       cwd=ROOT, env={**ENV, **env}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "q").exists()  # running it needs them


def test_the_cost_models_shape_is_qwens():
    from bases import qwen_shape
    from orchestration import cost_model

    shape = cost_model.REGISTERED_SHAPES["Qwen/Qwen2.5-0.5B-Instruct"]
    assert shape == {k: qwen_shape.ARCH[k] for k in cost_model.SHAPE_KEYS}


def test_damaged_lr_sweep_runs_are_moved_aside_and_redone(small_cfg, small_jobs2, tmp_path):
    from orchestration import provenance

    run = copy_run(small_jobs2, tmp_path / "run")
    (run / "lr_choice.json").unlink()
    truncate(run / "lr_sweep" / "lr_0.01" / "train_log.csv", 40)  # a finished candidate's log cut short
    (run / "lr_sweep" / "lr_0.001" / "done.json").unlink()  # an unfinished one whose resume point is damaged
    truncate(run / "lr_sweep" / "lr_0.001" / "last" / "optimizer.pt", 200)
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    row = next(x for x in d.stdout.splitlines() if x.startswith("  lr-sweep"))
    assert "2 damaged candidate run(s)" in row, d.stdout
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--stage", "lr-sweep", "--quiet", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "moved aside lr_sweep/lr_0.01" in r.stdout and "moved aside lr_sweep/lr_0.001" in r.stdout and "damaged" in r.stdout
    assert provenance.content_sha256(run / "lr_choice.json") == provenance.content_sha256(small_jobs2 / "lr_choice.json")
    for lr in ("0.01", "0.001"):
        assert (run / "lr_sweep" / f"lr_{lr}" / "train_log.csv").read_text().count("\n") == \
            (small_jobs2 / "lr_sweep" / f"lr_{lr}" / "train_log.csv").read_text().count("\n")


def test_memory_advice_names_each_stages_settings_and_says():
    """Memory advice names each stages settings and says when none is left."""
    from orchestration import config

    q = config.load(str(ROOT / "configs" / "qwen05b.yaml"))
    assert study.memory_advice(q, "train").startswith("lower it: --set memory_gb=6, then 4 (now 8.0; micro_batch 0 sizes")
    assert "--set eval.max_rows=128, then 64, then 1 (now 256: 256 rows a call)" in study.memory_advice(q, "eval")  # the base's
    assert "--set eval.max_rows=64, then 32, then 1 (now 256: 128 rows a call)" in study.memory_advice(q, "eval", base=False)
    assert "--set eval.max_rows=32, then 16, then 1 (now 256: 64 rows a call)" in study.memory_advice(q, "select")  # 4 x 16
    assert "--set eval.problems_per_batch=2, then 1 (now 4)" in study.memory_advice(q, "tokens")
    assert "--set eval.max_rows=128" in study.memory_advice(q, "eval", "wide")  # one problem's 256 samples, split
    assert study.memory_advice(config.load(str(ROOT / "configs" / "qwen05b.yaml"), ["eval.max_rows=1"]), "eval", "wide") == (
        "nothing left to lower: one row a call already; this needs a device with more memory")
    batch = config.load(str(ROOT / "configs" / "qwen05b.yaml"), ["eval.draw=batch", "eval.max_rows=null"])
    assert study.memory_advice(batch, "eval", "wide") == (
        "nothing left to lower: eval_sets.wide.problems_per_batch is already 1 (one "
        "problem's 256 samples are decoded together); this needs a device with more memory")
    one = config.load(str(ROOT / "configs" / "qwen05b.yaml"), ["micro_batch=1", "eval.max_rows=1"])
    assert study.memory_advice(one, "train").startswith("nothing left to lower: micro_batch is already 1")


def test_dry_run_says_the_run_would_refuse_what_other_settings(tmp_path):
    """Dry run says the run would refuse what other settings made.

    --dry-run on a committed run with a setting changed: the stages made under the old setting
    say the run would refuse them, and one line says where the run would stop, before the ETA that only
    --force would spend. Nothing is written (the run folder is the committed results/tiny_v5)."""
    run = ROOT / "results" / "tiny_v5"
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file())
    d = pipeline("--config", "configs/tiny_v5.yaml", "--out", str(run), "--dry-run", "--set", "eval.sampling.top_p=0.9", timeout=120)
    assert d.returncode == 0, d.stderr
    rows = dict(line.split(None, 1) for line in d.stdout.splitlines()[1:] if line.startswith("  ") and line[2] != " ")
    assert rows["train"] == "done" and rows["eval"] == "23 made under other settings (would refuse; --force)", d.stdout
    assert rows["probe"].startswith("made under other settings (would refuse; --force)")
    assert "the run would stop at stage probe" in d.stdout and "what --force would run" in d.stdout
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()) == before


def test_a_committed_analysis_stays_done_as_keys_are_added():
    """An analysis made before analyze keys were added (results/tiny_v3: no support, calibration,
    ceiling_null, ...) is done while the config holds them at their "as before" value, and out of date
    once one of them differs."""
    run = ROOT / "results" / "tiny_v3"

    def analyze_row(*sets):
        d = pipeline("--config", "configs/tiny.yaml", "--out", str(run), "--dry-run", *sum((["--set", x] for x in sets), []), timeout=120)
        assert d.returncode == 0, d.stderr
        return dict(line.split(None, 1) for line in d.stdout.splitlines()[1:] if line.startswith("  ") and line[2] != " ")["analyze"]

    assert analyze_row() == "done"
    assert analyze_row("analyze.selection_margin=0.1") == "out of date"


def test_a_later_run_appends_its_header_and_keeps(tmp_path, monkeypatch):
    """A later run appends its header and keeps the one that made the files.

    A stage run into an existing run by other code or another config record: the manifest's
    header is the current run's, and the header the files on disk were made under is kept in
    `earlier` with the stages and jobs done under it; a rewrite under the same header adds nothing."""
    import pipeline
    from orchestration import config

    run = tmp_path / "run"
    run.mkdir()
    first = config.load(str(SMOKE))
    monkeypatch.setattr(pipeline.provenance, "code_revision", lambda: "aaaa")
    pipeline.write_manifest(run, first, {"base": {"status": "done"}, "probe": {"status": "failed"}}, {"train many s0": {"status": "done"}})
    pipeline.write_manifest(run, first, {"base": {"status": "done"}}, {})
    assert "earlier" not in json.loads((run / "manifest.json").read_text())
    monkeypatch.setattr(pipeline.provenance, "code_revision", lambda: "bbbb")
    later = config.load(str(SMOKE), ["analyze.resamples=300"])
    pipeline.write_manifest(run, later, {"base": {"status": "done"}, "analyze": {"status": "done"}}, {})
    pipeline.write_manifest(run, later, {"base": {"status": "done"}, "analyze": {"status": "done"}}, {})
    man = json.loads((run / "manifest.json").read_text())
    assert man["revision"] == "bbbb" and man["config"]["analyze"]["resamples"] == 300
    assert len(man["earlier"]) == 1
    e = man["earlier"][0]
    assert e["revision"] == "aaaa" and e["config"] == config.to_dict(first) and e["config_hash"] == config.digest(config.to_dict(first))
    assert e["stages_done"] == ["base"] and e["jobs_done"] == []
