"""What the pipeline says before it runs, and the faults that stop it at once: broken configs and
overrides, an unreachable model, --print-jobs, --dry-run on committed runs, GPU assignment, the cost
and memory plans, help texts."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from pipeline_runs import ENV, N_EVAL, N_TRAIN, ROOT, SMOKE, env_after, grpo_cmd, pipeline

from orchestration import study

pytestmark = pytest.mark.slow  # whole pipelines or real weights: left out of the fast loop


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


def test_print_jobs_lists_every_job_as_a_command(tmp_path):
    r = pipeline("--config", str(SMOKE), "--out", str(tmp_path / "new"), "--print-jobs", timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [x.split("--stage ")[1] for x in lines if x.startswith("python pipeline.py") and "--stage" in x] == [
        "base",
        "probe",
        "select",
        "lr-sweep",
    ]
    train = [x for x in lines if x.startswith("python grpo.py train")]
    evals = [x for x in lines if x.startswith("python grpo.py eval")]
    assert len(train) == N_TRAIN and len(evals) == N_EVAL + 9 + 17 + 1
    assert len([x for x in lines if x.startswith("python grpo.py tokens")]) == 32
    assert any("--condition 4-kl --seed 1" in x for x in train)
    assert any(x.endswith("train_1_s1/step_006") for x in evals)
    assert not (tmp_path / "new").exists()  # printing writes nothing
    # every printed pipeline command names the folder as the jobs' own commands do (before: --out)
    assert all(" --run " in x and " --out " not in x for x in lines if x.startswith("python pipeline.py"))


def test_print_jobs_trains_a_condition_on_its_own_seeds(tmp_path):
    """train.seeds_by_condition (PLAN_CHANGES.md change 29): many on seeds 0-3, the rest on train.seeds
    [0, 1]: two more training jobs, each with its two test evaluations and its ood one; the wide
    set still evaluates the first seed only (the calibration's pool grows to 4 seeds x 8 samples)."""
    r = pipeline(
        "--config",
        str(SMOKE),
        "--out",
        str(tmp_path / "new"),
        "--print-jobs",
        "--set",
        "train.seeds_by_condition={many: [0, 1, 2, 3]}",
        "--set",
        "eval_sets.pool.n=32",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    train = [x for x in lines if x.startswith("python grpo.py train")]
    assert len(train) == N_TRAIN + 2 and sum("--condition many " in x for x in train) == 4
    assert any("--condition many --seed 3" in x for x in train) and not any(
        "--condition 16 --seed 2" in x for x in train
    )
    evals = [x for x in lines if x.startswith("python grpo.py eval")]
    assert len(evals) == N_EVAL + 9 + 17 + 1 + 2 * 2 + 2
    assert (
        sum("train_many_s3/step_006" in x for x in evals) == 2
    )  # test and ood at the last step, test at step 3: below
    assert any(x.endswith("train_many_s3/step_003") for x in evals)


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
    r = pipeline(
        "--config",
        str(SMOKE),
        "--out",
        str(tmp_path / "r"),
        "--set",
        "lr_sweep.candidates=[1e-4, 3E-4]",
        "--dry-run",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr  # numbers as users type them


def test_offline_the_hub_model_fails_in_a_second_with_the_right(tmp_path):
    """Offline the hub model fails in a second with the right command."""
    cfg = tmp_path / "empty.yaml"
    cfg.write_text("")
    for env in ({"HF_HUB_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}):
        t0 = time.perf_counter()
        r = subprocess.run(
            [sys.executable, str(ROOT / "pipeline.py"), "--config", str(cfg), "--out", str(tmp_path / "run")],
            cwd=ROOT,
            env={**ENV, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        took = time.perf_counter() - t0
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert (
            "`hf download Qwen/Qwen2.5-0.5B-Instruct --revision 7ae557604adf67be50417f59c2c2f167def9a775`" in r.stderr
        )
        assert took < 5, took  # the hub client's own retries take about 27 s


def test_help_texts_list_choices_and_subcommands():
    out = subprocess.run([sys.executable, str(ROOT / "countdown.py"), "--help"], capture_output=True, text=True).stdout
    assert "arith-3x2" in out and "countdown" in out and "bare" in out
    out = grpo_cmd("--help").stdout
    for cmd in ("base", "probe", "select", "lr-sweep", "train", "eval", "tokens"):
        assert cmd in out
    assert "token-level comparison" in out and "build the base model" in out


def test_one_gpu_per_job_from_a_fake_device_list(monkeypatch):
    import functools

    from runner import jobs

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7,9")
    assert jobs.visible_gpus() == ["7", "9"]
    assert jobs.assign_gpus(2, ["7", "9"]) == ["7", "9"] and jobs.assign_gpus(1, ["7", "9"]) == ["7"]
    assert jobs.assign_gpus(3, []) == []  # a CPU machine: nothing to assign
    with pytest.raises(Exception, match="a job needs a GPU of its own"):
        jobs.assign_gpus(3, ["7", "9"])
    assert jobs.assign_gpus(2, ["7", "7"]) == ["7", "7"]  # sharing one GPU only when asked
    pool = jobs.worker_pool(2, ["7", "9"])
    try:
        seen = [f.result() for f in [pool.submit(functools.partial(env_after, 0.3)) for _ in range(6)]]
    finally:
        pool.shutdown()
    assert set(seen) == {"7", "9"}  # each worker sees exactly its own GPU
    r = pipeline("--config", str(SMOKE), "--out", "/tmp/never", "--jobs", "3", "--gpus", "0,1", "--dry-run", timeout=60)
    assert r.returncode == 0  # the smoke config runs on the CPU (device: cpu): GPUs do not apply
    cfg_gpu = ROOT / "configs" / "rehearsal.yaml"
    r = pipeline(
        "--config",
        str(cfg_gpu),
        "--out",
        "/tmp/never",
        "--set",
        "device=auto",
        "--jobs",
        "3",
        "--gpus",
        "0,1",
        "--dry-run",
        timeout=60,
    )
    assert r.returncode == 2 and "--jobs 3 with 2 GPU(s) (0,1)" in r.stderr


@pytest.mark.parametrize("ids,ok", [("x", False), ("0,", False), ("0;1", False), ("0,1", True), ("GPU-8f3a-12", True)])
def test_gpus_are_checked_like_jobs(ids, ok, capsys):
    """--gpus takes what CUDA_VISIBLE_DEVICES takes; anything else ends in one line, exit 2, even on a CPU config."""
    import pipeline as pl

    rc = pl.main(["--config", str(SMOKE), "--run", "/tmp/never", "--gpus", ids, "--dry-run"])
    err = capsys.readouterr().err
    assert (rc == 0) == ok and (ok or f"--gpus {ids}: expected GPU indices" in err), err


def test_single_stages_run_in_a_worker_on_the_first_assigned_gpu(monkeypatch, tmp_path, fitted_dir):
    """base, probe, select and lr-sweep run before the jobs; with GPUs they run in a worker that sees
    only the first assigned one (a fake device list), so the pipeline's own process never starts CUDA."""
    import pipeline as pl
    from runner import jobs, session

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert jobs.in_worker(env_after, 0.0, gpu="9") == "9"  # the worker sees exactly that GPU
    assert (
        jobs.in_worker(env_after, 0.0) is None and "CUDA_VISIBLE_DEVICES" not in os.environ
    )  # no GPU: here, unchanged
    seen = []
    monkeypatch.setattr(session, "in_worker", lambda fn, argv, gpu=None: seen.append((fn, argv[0], gpu)) or 0)
    monkeypatch.chdir(ROOT)
    shutil.copytree(fitted_dir, tmp_path / "run" / "base_model")  # the probe reads the base (stage_checks.check_inputs)
    args = [
        "--config",
        str(SMOKE),
        "--out",
        str(tmp_path / "run"),
        "--set",
        "device=auto",
        "--stage",
        "probe",
        "--quiet",
    ]
    assert pl.main(args + ["--gpus", "7,9", "--jobs", "2"]) == 0
    assert pl.main(args + ["--gpus", "5", "--force"]) == 0
    assert seen == [(jobs.run_grpo, "probe", "7"), (jobs.run_grpo, "probe", "5")]
    assert pl.main([*args[:4], "--stage", "probe", "--force", "--quiet"]) == 0  # smoke's device: cpu, no GPU at all
    assert seen[-1] == (jobs.run_grpo, "probe", None)


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


def test_a_model_folder_without_weights_is_not_a_model(tmp_path, fitted_dir):
    from orchestration import provenance

    d = tmp_path / "m"
    shutil.copytree(fitted_dir, d)
    assert provenance.model_folder_problem(d) is None
    (d / "model.safetensors").unlink()  # as results/smollm2/base_model is committed
    assert provenance.model_folder_problem(d) == f"{d / 'model.safetensors'}: missing (the folder holds no weights)"
    shutil.copy(fitted_dir / "model.safetensors", d / "model-00001-of-00002.safetensors")
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    assert (
        "model-00002-of-00002.safetensors: missing (named by model.safetensors.index.json)"
        in provenance.model_folder_problem(d)
    )


def test_the_eta_is_said_again_as_jobs_finish(tmp_path, monkeypatch, capsys):
    from runner import jobs

    calls = []
    monkeypatch.setattr(jobs, "run_grpo", lambda argv: calls.append(argv) or 0)
    runner = jobs.Runner(tmp_path, jobs.Workers(n=1, threads=1), True, lambda j: None, lambda j: None)
    runner.report_every = 0.0
    todo = [jobs.Job("eval", f"eval base {i}", ["eval"], samples=8) for i in range(3)]
    status = runner.run(todo)
    assert all(v["status"] == "done" for v in status.values()) and len(calls) == 3
    etas = [x for x in capsys.readouterr().out.splitlines() if "ETA" in x]
    assert len(etas) == 2 and "done 1/3; waiting 2" in etas[0] and "done 2/3; waiting 1" in etas[1], etas
    assert "~0 s" not in etas[0] and "evaluation not measured yet" in etas[0]


def test_a_gpu_config_plans_without_its_weights_and_gives_hours(tmp_path):
    """A gpu config plans without its weights and gives hours labelled an estimate."""
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # an empty cache: the model is not downloaded
    q = ROOT / "configs" / "qwen05b.yaml"
    r = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "--config", str(q), "--out", str(tmp_path / "q"), "--dry-run"],
        cwd=ROOT,
        env={**ENV, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "`hf download Qwen/Qwen2.5-0.5B-Instruct --revision 7ae557604adf67be50417f59c2c2f167def9a775`" in r.stdout
    jobs_line = next(x for x in r.stdout.splitlines() if "jobs left" in x)
    assert "156 train/eval jobs left" in jobs_line and " h (an estimate: " in jobs_line and "at the bound" in jobs_line
    assert "the registered shape of Qwen/Qwen2.5-0.5B-Instruct" in jobs_line and "~0 s" not in r.stdout
    assert (
        "on the laptop GPU" in jobs_line
        and "on an H200's class" in jobs_line
        and "the KV reads, the sampling tail, kernel launches and host time counted" in jobs_line
    )
    # the README's GPU section states these very hours (laptop range, its bound, the H200's range)
    got = re.search(
        r"~(\d+)-(\d+) h \(an estimate: (\d+) h at the bound.*?~([\d.]+)-([\d.]+) h on an H200", jobs_line
    ).groups()
    readme = (ROOT / "README.md").read_text()
    assert (
        re.search(
            r"156 jobs, \*\*about (\d+)–(\d+) h\*\*.*? (\d+) h at the bound.*?about ([\d.]+)–([\d.]+) h on\s+an H200",
            readme,
            re.S,
        ).groups()
        == got
    )
    # and its one-night plan: the report's design by the same estimate, the study in nights of --hours 10
    night = re.search(r"the seed report's design fits one \(~([\d.]+)-([\d.]+) h", r.stdout).groups()
    said = re.search(
        r"report.yaml`, ~([\d.]+)–([\d.]+) h by the same\s+estimate\); the registered study takes (\d+)–(\d+)"
        r" nights of `--hours 10`",
        readme,
    ).groups()
    assert said == (*night, *(str(math.ceil(int(h) / 10)) for h in got[:2]))
    r = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "--config", str(q), "--out", str(tmp_path / "q"), "--print-jobs"],
        cwd=ROOT,
        env={**ENV, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and sum(x.startswith("python grpo.py train") for x in r.stdout.splitlines()) == 24
    assert all(x.startswith(("python ", "#")) for x in r.stdout.splitlines() if x.strip())
    assert not (tmp_path / "q").exists()
    r = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "--config", str(q), "--out", str(tmp_path / "q")],
        cwd=ROOT,
        env={**ENV, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "q").exists()
    )  # running it needs them


def test_the_cost_models_shape_is_qwens():
    from bases import qwen_shape
    from runner import cost_model

    shape = cost_model.REGISTERED_SHAPES["Qwen/Qwen2.5-0.5B-Instruct"]
    assert shape == {k: qwen_shape.ARCH[k] for k in cost_model.SHAPE_KEYS}


def test_memory_advice_names_each_stages_settings_and_says():
    """Memory advice names each stages settings and says when none is left."""
    from orchestration import config

    q = config.load(str(ROOT / "configs" / "qwen05b.yaml"))
    assert study.memory_advice(q, "train").startswith(
        "lower it: --set memory_gb=6, then 4 (now 8.0; micro_batch 0 sizes"
    )
    assert "--set eval.max_rows=128, then 64, then 1 (now 256: 256 rows a call)" in study.memory_advice(
        q, "eval"
    )  # the base's
    assert "--set eval.max_rows=64, then 32, then 1 (now 256: 128 rows a call)" in study.memory_advice(
        q, "eval", base=False
    )
    assert "--set eval.max_rows=32, then 16, then 1 (now 256: 64 rows a call)" in study.memory_advice(
        q, "select"
    )  # 4 x 16
    assert "--set eval.problems_per_batch=2, then 1 (now 4)" in study.memory_advice(q, "tokens")
    assert "--set eval.max_rows=128" in study.memory_advice(q, "eval", "wide")  # one problem's 256 samples, split
    assert study.memory_advice(
        config.load(str(ROOT / "configs" / "qwen05b.yaml"), ["eval.max_rows=1"]), "eval", "wide"
    ) == ("nothing left to lower: one row a call already; this needs a device with more memory")
    batch = config.load(str(ROOT / "configs" / "qwen05b.yaml"), ["eval.draw=batch", "eval.max_rows=null"])
    assert study.memory_advice(batch, "eval", "wide") == (
        "nothing left to lower: eval_sets.wide.problems_per_batch is already 1 (one "
        "problem's 256 samples are decoded together); this needs a device with more memory"
    )
    one = config.load(str(ROOT / "configs" / "qwen05b.yaml"), ["micro_batch=1", "eval.max_rows=1"])
    assert study.memory_advice(one, "train").startswith("nothing left to lower: micro_batch is already 1")


def test_dry_run_says_the_run_would_refuse_what_other_settings(tmp_path):
    """Dry run says the run would refuse what other settings made.

    --dry-run on a committed run with a setting changed: the stages made under the old setting
    say the run would refuse them, and one line says what it would refuse before writing anything, before the ETA that only
    --force would spend. Nothing is written (the run folder is the committed results/tiny_v5)."""
    run = ROOT / "results" / "tiny_v5"
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file())
    d = pipeline(
        "--config",
        "configs/tiny_v5.yaml",
        "--out",
        str(run),
        "--dry-run",
        "--set",
        "eval.sampling.top_p=0.9",
        timeout=120,
    )
    assert d.returncode == 0, d.stderr
    rows = dict(line.split(None, 1) for line in d.stdout.splitlines()[1:] if line.startswith("  ") and line[2] != " ")
    assert rows["train"] == "done" and rows["eval"] == "23 made under other settings (would refuse; --force)", d.stdout
    assert rows["probe"].startswith("made under other settings (would refuse; --force)")
    assert (
        "the run would refuse before writing anything: "
        + str(run / "probe_countdown.json")
        + ": made under eval.sampling.top_p=0.95 there, 0.9 here"
    ) in d.stdout and "what --force would run" in d.stdout
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()) == before


def test_a_committed_analysis_stays_done_as_keys_are_added():
    """An analysis made before analyze keys were added (results/tiny_v3: no support, calibration,
    ceiling_null, ...) is done while the config holds them at their "as before" value, and out of date
    once one of them differs."""
    run = ROOT / "results" / "tiny_v3"

    def analyze_row(*sets):
        d = pipeline(
            "--config",
            "configs/tiny.yaml",
            "--out",
            str(run),
            "--dry-run",
            *sum((["--set", x] for x in sets), []),
            timeout=120,
        )
        assert d.returncode == 0, d.stderr
        return dict(
            line.split(None, 1) for line in d.stdout.splitlines()[1:] if line.startswith("  ") and line[2] != " "
        )["analyze"]

    assert analyze_row() == "done"
    assert analyze_row("analyze.selection_margin=0.1") == "out of date"


def test_a_later_run_appends_its_header_and_keeps(tmp_path, monkeypatch):
    """A later run appends its header and keeps the one that made the files.

    A stage run into an existing run by other code or another config record: the manifest's
    header is the current run's, and the header the files on disk were made under is kept in
    `earlier` with the stages and jobs done under it; a rewrite under the same header adds nothing."""
    from orchestration import config, provenance
    from runner import manifest

    run = tmp_path / "run"
    run.mkdir()
    first = config.load(str(SMOKE))
    monkeypatch.setattr(provenance, "code_revision", lambda: "aaaa")
    manifest.write_manifest(
        run, first, {"base": {"status": "done"}, "probe": {"status": "failed"}}, {"train many s0": {"status": "done"}}
    )
    manifest.write_manifest(run, first, {"base": {"status": "done"}}, {})
    assert "earlier" not in json.loads((run / "manifest.json").read_text())
    monkeypatch.setattr(provenance, "code_revision", lambda: "bbbb")
    later = config.load(str(SMOKE), ["analyze.resamples=300"])
    manifest.write_manifest(run, later, {"base": {"status": "done"}, "analyze": {"status": "done"}}, {})
    manifest.write_manifest(run, later, {"base": {"status": "done"}, "analyze": {"status": "done"}}, {})
    man = json.loads((run / "manifest.json").read_text())
    assert man["revision"] == "bbbb" and man["config"]["analyze"]["resamples"] == 300
    assert len(man["earlier"]) == 1
    e = man["earlier"][0]
    assert (
        e["revision"] == "aaaa"
        and e["config"] == config.to_dict(first)
        and e["config_hash"] == config.digest(config.to_dict(first))
    )
    assert e["stages_done"] == ["base"] and e["jobs_done"] == []
    changes = provenance.file_sha256(ROOT / "PLAN_CHANGES.md")  # the change log's hash, in both headers
    assert changes and man["changes_sha256"] == e["changes_sha256"] == changes


def test_a_part_on_another_machine_is_kept_in_earlier_and_an_unknown_one_is_not(tmp_path, monkeypatch):
    """A run made in parts (PLAN_CHANGES.md change 62) records each part's machine: a part on another CPU
    appends the header the files were made under, with its machine; a manifest written before machines
    were recorded is not read as another machine."""
    from orchestration import config, provenance
    from runner import manifest

    run = tmp_path / "run"
    run.mkdir()
    cfg = config.load(str(SMOKE))
    epyc = {"cpu": "AMD EPYC", "cores": 2, "cpu_features": ["avx2"], "gpu": None}
    xeon = {"cpu": "Intel Xeon", "cores": 2, "cpu_features": ["avx2", "amx_bf16"], "gpu": None}
    monkeypatch.setattr(provenance, "machine", lambda: epyc)
    manifest.write_manifest(run, cfg, {"base": {"status": "done"}}, {})
    monkeypatch.setattr(provenance, "machine", lambda: xeon)
    manifest.write_manifest(run, cfg, {"base": {"status": "done"}}, {})
    man = json.loads((run / "manifest.json").read_text())
    assert man["machine"] == xeon and [e["machine"] for e in man["earlier"]] == [epyc]
    assert man["earlier"][0]["stages_done"] == ["base"]

    old = {k: v for k, v in man.items() if k not in ("machine", "earlier")}
    (run / "manifest.json").write_text(json.dumps(old))
    manifest.write_manifest(run, cfg, {"base": {"status": "done"}}, {})
    assert "earlier" not in json.loads((run / "manifest.json").read_text())


def test_the_machine_record_reads_the_cpu_and_its_matmul_features(tmp_path):
    from orchestration import provenance

    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: fpu sse2 avx2 avx512f amx_bf16 avx512_bf16\n"
    )
    m = provenance.machine(str(info))
    assert m["cpu"] == "Some CPU 9000" and m["cpu_features"] == ["avx2", "avx512f", "avx512_bf16", "amx_bf16"]
    assert m["cores"] >= 1 and (m["gpu"] is None or isinstance(m["gpu"], str))
    assert provenance.machine(str(tmp_path / "absent"))["cpu_features"] == []


def test_the_revision_is_dirty_for_changed_code_and_not_for_changed_results(tmp_path):
    """A study's part rebuilds its base and rewrites the committed build record before any output is
    written: the revision its outputs name must still be the clean commit that ran."""
    import subprocess

    from orchestration import provenance

    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results" / "run").mkdir(parents=True)
    (tmp_path / "results" / "run" / "build.json").write_text("{}")
    (tmp_path / "grpo.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    rev = provenance.code_revision(tmp_path)
    assert len(rev) == 40

    (tmp_path / "results" / "run" / "build.json").write_text('{"seconds": 2}')
    assert provenance.code_revision(tmp_path) == rev
    (tmp_path / "grpo.py").write_text("x = 2\n")
    assert provenance.code_revision(tmp_path) == rev + "+dirty"


def test_the_revision_says_unknown_where_git_cannot_say(tmp_path, monkeypatch):
    """A git whose status refuses the pathspec (older than 1.9) names HEAD "+unknown", never clean; a
    folder outside any checkout is "unknown"."""
    import subprocess

    from orchestration import provenance

    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git must not find a checkout above it
    assert provenance.code_revision(outside) == "unknown"

    real = subprocess.run

    def old_git(argv, *a, **kw):
        if argv[:2] == ["git", "status"]:
            return subprocess.CompletedProcess(argv, 128, "", "fatal: unknown pathspec magic\n")
        return real(argv, *a, **kw)

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "grpo.py").write_text("x = 1\n")
    for argv in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c"],
    ):
        real(["git", *argv], cwd=repo, check=True, capture_output=True)
    monkeypatch.setattr(subprocess, "run", old_git)
    rev = provenance.code_revision(repo)
    assert len(rev) == 48 and rev.endswith("+unknown"), rev


def test_the_remake_command_is_one_pipeline_command_the_cli_reads_back(tmp_path):
    """cli.pipeline_command is the one builder of `python pipeline.py ...` in every message (Plan.command,
    --print-jobs, grpo.py's refusals, analyze_b's hint): its words, quoted, are pipeline.py's own flags
    and read back as the values given; grpo.py's default config is written as the file of those defaults."""
    import shlex
    from pathlib import Path

    import pipeline as pl
    from orchestration import cli, config
    from runner.stages import Plan

    run = tmp_path / "a run"
    cmd = cli.pipeline_command("configs/smoke.yaml", run, ["train.steps=4", "eval.n=2"], "train", force=True)
    assert cmd == (
        f"python pipeline.py --config configs/smoke.yaml --run {shlex.quote(str(run))} --set train.steps=4 "
        "--set eval.n=2 --stage train --force"
    )
    words = shlex.split(cmd)
    assert words[:2] == ["python", "pipeline.py"]
    a = pl.parse_args(words[2:])
    assert (a.config, Path(a.run), a.set, a.stage, a.force) == (
        "configs/smoke.yaml",
        run,
        ["train.steps=4", "eval.n=2"],
        "train",
        True,
    )
    plan = Plan(config.load(str(SMOKE)), run, str(SMOKE), ["eval.n=2"])
    assert plan.command("probe") == cli.pipeline_command(str(SMOKE), run, ["eval.n=2"], "probe")
    assert shlex.split(cli.pipeline_command(None, run))[3] == cli.REGISTERED_CONFIG
    assert config.to_dict(config.load(cli.REGISTERED_CONFIG)) == config.to_dict(config.load(None))


def test_the_training_figure_is_drawn_first_then_once_a_minute_and_at_the_end():
    """The first training run draws the figure, a run within FIGURE_EVERY_S of the last draw does not, a run
    after it does, and the stage's last run always does."""
    from runner.session import FIGURE_EVERY_S, figure_due

    first = -float("inf")
    assert figure_due(False, first, 5.0)
    assert not figure_due(False, 5.0, 5.0 + FIGURE_EVERY_S - 1)
    assert figure_due(False, 5.0, 5.0 + FIGURE_EVERY_S)
    assert figure_due(True, 5.0, 6.0)  # the last training run: the figure the evaluations are read beside


def test_config_of_reads_a_command_as_the_shell_splits_it():
    """The white-space fast path of reference_times.config_of against shlex.split on every job of every committed
    manifest and on quoted, escaped, unbalanced and trailing cases."""
    import shlex

    from runner.reference_times import config_of

    def want(c):
        try:
            a = shlex.split(c)
        except ValueError:
            return None
        return a[a.index("--config") + 1] if "--config" in a[:-1] else None

    commands = [
        j.get("command", "")
        for f in sorted((ROOT / "results").glob("*/manifest.json"))
        for j in (json.loads(f.read_text()).get("jobs") or {}).values()
    ]
    commands += [
        "python grpo.py eval --config 'configs/a b.yaml' --run r",
        'python grpo.py eval --config "c d.yaml"',
        r"python grpo.py eval --config e\ f.yaml",
        "python grpo.py eval --config 'unbalanced",
        "python grpo.py eval --config",
        "python grpo.py eval --run r",
    ]
    assert len(commands) > 500
    assert [config_of(c) for c in commands] == [want(c) for c in commands]
    assert config_of("python grpo.py eval --config 'configs/a b.yaml' --run r") == "configs/a b.yaml"
