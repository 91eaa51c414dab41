"""What the pipeline does when things break, on copies of a finished small study: damaged adapters,
resume points and evaluations, interrupts at every point, out of memory, missing inputs, the manifest
after each, and bench/recheck.py's reruns."""

import json
import shutil
import subprocess
import sys

import pytest
from pipeline_runs import (
    ENV,
    ROOT,
    SMOKE,
    copy_run,
    ended,
    eval_content,
    grpo_cmd,
    pipeline,
    recheck,
    snapshot,
    truncate,
)

pytestmark = pytest.mark.slow  # whole pipelines or real weights: left out of the fast loop


INTERRUPTS = {  # where a Ctrl-C lands: (what raises it, the stage it interrupts)
    "in a single stage": ("runner.session.run_grpo", "probe"),
    "mid-job": ("runner.jobs.run_grpo", "eval"),
    "between jobs": ("runner.jobs.log", "eval"),
    "in the analysis": ("analysis.assemble.run_analysis", "analyze"),
}


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


def test_a_damaged_adapter_is_one_line_for_grpo_and_redone(small_cfg, small_jobs2, tmp_path):
    """A damaged adapter is one line for grpo and redone by the pipeline."""
    run = copy_run(small_jobs2, tmp_path / "run")
    adapter = run / "train_many_s0" / "step_006"
    original = (small_jobs2 / "train_many_s0" / "step_006" / "adapter_model.safetensors").read_bytes()
    truncate(adapter / "adapter_model.safetensors")
    before = snapshot(run)
    r = grpo_cmd("eval", "--config", str(small_cfg), "--run", str(run), "--adapter", str(adapter), timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (
        "adapter_model.safetensors" in r.stderr
        and "cut short" in r.stderr
        and f"--run {run}): it moves that training run aside and retrains it, and redoes what reads it" in r.stderr
    )
    assert snapshot(run) == before  # nothing moved or written
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--quiet", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "moved aside train_many_s0" in r.stdout and "damaged" in r.stdout
    assert (adapter / "adapter_model.safetensors").read_bytes() == original  # retrained, bit for bit
    assert list((run / "superseded").glob("*/train_many_s0/step_006/adapter_model.safetensors"))
    assert eval_content(run / "eval_many_s0_006.json") == eval_content(small_jobs2 / "eval_many_s0_006.json")
    man = json.loads((run / "manifest.json").read_text())
    assert ended(man) and all(v["status"] == "done" for v in man["stages"].values())


def untrain_s0(run) -> None:
    """The small study as if training run many s0 had not run: its folder and its evaluations removed."""
    shutil.rmtree(run / "train_many_s0")
    for f in run.glob("eval_many_s0_*.json"):
        f.unlink()


def test_a_damaged_resume_point_or_base_is_one_line_and_writes(small_cfg, small_jobs2, tmp_path):
    """A damaged resume point or base is one line and writes nothing."""
    run = copy_run(small_jobs2, tmp_path / "run")
    shutil.rmtree(run / "train_many_s0")
    shutil.copytree(
        small_jobs2 / "train_many_s0", run / "train_many_s0", ignore=shutil.ignore_patterns("done.json", "step_006")
    )
    truncate(run / "train_many_s0" / "last" / "optimizer.pt")
    before = snapshot(run)
    r = grpo_cmd(
        "train",
        "--config",
        str(small_cfg),
        "--run",
        str(run),
        "--condition",
        "many",
        "--seed",
        "0",
        "--quiet",
        timeout=300,
    )
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "the resume point" in r.stderr and "move" in r.stderr and str(run / "train_many_s0") in r.stderr
    assert snapshot(run) == before
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    assert d.returncode == 0 and "1 damaged" in next(x for x in d.stdout.splitlines() if x.startswith("  train ")), (
        d.stdout
    )
    truncate(run / "base_model" / "model.safetensors", 1000)
    r = grpo_cmd("eval", "--config", str(small_cfg), "--run", str(run), timeout=120)
    assert (
        r.returncode == 2
        and len(r.stderr.strip().splitlines()) == 1
        and "model.safetensors" in r.stderr
        and "--stage base" in r.stderr
    )
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    assert d.returncode == 0 and "damaged (would be redone)" in d.stdout, d.stdout


@pytest.mark.parametrize("where", list(INTERRUPTS))
def test_the_manifest_never_says_running_after_an_interrupt(
    where, small_cfg, small_jobs2, tmp_path, monkeypatch, capsys
):
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
    later = pl.STAGES[pl.STAGES.index(stage) + 1 :]
    assert all(man["stages"][s]["status"] == "not started" for s in later if s in man["stages"])  # never reached
    # only the job under way (if any) was interrupted; the ones still waiting never started
    assert sum(v["status"] == "interrupted" for k, v in man["jobs"].items() if k != "train many s0") <= (
        stage == "eval"
    )
    assert {v["status"] for v in man["jobs"].values()} <= {"done", "interrupted", "not started"}
    assert not (run / ".pipeline.lock").exists()
    if where != "in a single stage":
        return
    monkeypatch.setattr(
        owner, attr, real
    )  # the rerun recovers: every stage and job done, no error left from the interrupt
    capsys.readouterr()
    assert pl.main(["--config", str(small_cfg), "--out", str(run), "--quiet"]) == 0
    man = json.loads((run / "manifest.json").read_text())
    states = {k: v for part in ("stages", "jobs") for k, v in man[part].items()}
    assert all(v["status"] == "done" and "error" not in v for v in states.values()), {
        k: v for k, v in states.items() if v["status"] != "done"
    }


def test_a_hand_rerun_moves_the_old_output_aside_and_leaves(small_cfg, small_jobs2, tmp_path):
    """A hand rerun moves the old output aside and leaves the analysis done."""
    run = copy_run(small_jobs2, tmp_path / "run")
    r = grpo_cmd(
        "eval",
        "--config",
        str(small_cfg),
        "--run",
        str(run),
        "--adapter",
        str(run / "train_4_s1" / "step_003"),
        "--quiet",
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    moved = list((run / "superseded").glob("*/eval_4_s1_003.json"))
    assert len(moved) == 1 and eval_content(moved[0]) == eval_content(
        run / "eval_4_s1_003.json"
    )  # the same counts, rewritten
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    assert "  analyze   done" in d.stdout, d.stdout  # timings and time stamps are not what the analysis computed from


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
    r = recheck(
        "--run", str(committed), "--config", str(small_cfg), "--out", str(out), "--train", "many:0", timeout=600
    )
    assert r.returncode == 1, r.stderr[-3000:]  # one file differs
    rec = json.loads((out / "recheck.json").read_text())
    by = {x["file"]: x for x in rec["files"]}
    assert set(by) == {
        "train_many_s0/step_003/adapter_model.safetensors",
        "train_many_s0/step_006/adapter_model.safetensors",
        "train_many_s0/train_log.csv",
        "train_many_s0/train_eval.csv",
        "eval_many_s0_003.json",
        "eval_many_s0_006.json",
        "eval_base.json",
        "verdicts.json",
    }
    assert [k for k, x in by.items() if not x["equal"]] == ["eval_many_s0_006.json"]
    bad = by["eval_many_s0_006.json"]
    assert (bad["problems_differing_loose"], bad["responses_differing"]) == (1, 1)
    assert bad["correct_loose"][0] == bad["correct_loose"][1] + 1
    assert (
        by["verdicts.json"]["numbers"] > 100
        and by["verdicts.json"]["primary_answer"][0] == by["verdicts.json"]["primary_answer"][1]
    )
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
    r = recheck(
        "--run",
        str(committed),
        "--config",
        str(small_cfg),
        "--out",
        str(tmp_path / "b"),
        "--train",
        "many:0",
        timeout=120,
    )
    assert r.returncode == 2 and "train sft s0" in r.stderr and "revision" in r.stderr, r.stderr
    assert not (tmp_path / "b").exists()
    r = recheck(
        "--run",
        str(small_jobs2),
        "--config",
        str(small_cfg),
        "--out",
        str(tmp_path / "c"),
        "--train",
        "many:9",
        timeout=120,
    )
    assert r.returncode == 2 and "many:9" in r.stderr and not (tmp_path / "c").exists()


def test_an_interrupt_during_eval_after_this_runs_training_names(small_cfg, small_jobs2, tmp_path, monkeypatch, capsys):
    """An interrupt during eval after this runs training names eval.

    Training ran in this invocation and finished; a Ctrl-C during the next evaluation is eval's,
    and the finished stage stays done: a group of job stages is not all train's."""
    import pipeline as pl
    from runner import jobs

    run = copy_run(small_jobs2, tmp_path / "run")
    untrain_s0(run)
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


def test_a_job_a_signal_stopped_on_its_own_reads_interrupted(small_cfg, small_jobs2, tmp_path, monkeypatch, capsys):
    """A job whose own grpo.py a signal ended (exit 130: a node's time limit under --executor ray) while the
    pipeline went on is logged as stopped with the command that resumes it, recorded interrupted (its stage
    too), and the pipeline ends in one line and exit 130 (before: "FAILED ... (exit 130)", recorded failed,
    exit 1: the README's "failed while it ran" for a job that resumes)."""
    import pipeline as pl
    from runner import jobs

    run = copy_run(small_jobs2, tmp_path / "run")
    untrain_s0(run)
    real = jobs.run_grpo

    def stopped(argv, *args, **kw):
        return 130 if argv[0] == "train" else real(argv, *args, **kw)

    monkeypatch.setattr(jobs, "run_grpo", stopped)
    monkeypatch.chdir(ROOT)
    assert pl.main(["--config", str(small_cfg), "--out", str(run), "--quiet"]) == 130
    cap = capsys.readouterr()
    assert "STOPPED train many s0 (interrupted, exit 130); the same command resumes it: python grpo.py train" in cap.out
    assert "FAILED" not in cap.out
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "pipeline.py: 1 job(s) stopped by a signal (train many s0); 2 not started because they wait for them; "
        "the same pipeline command again resumes them"
    ), err
    man = json.loads((run / "manifest.json").read_text())
    assert man["jobs"]["train many s0"]["status"] == "interrupted" and man["jobs"]["train many s0"]["exit"] == 130
    assert man["stages"]["train"]["status"] == "interrupted" and man["stages"]["analyze"]["status"] == "not started"
    assert man["jobs"]["eval many s0 step 6"]["status"] == "not started" and ended(man)


def test_weightless_only_when_every_fault_is_absent_weights(small_cfg, small_jobs2, tmp_path):
    """Plan.state's "weightless" (a training run done but for absent weights) needs every fault of a
    training run to be an absent weights file: one checkpoint's weights absent and another's cut short read "damaged" (before, only the
    first checkpoint's fault was read)."""
    from orchestration import config
    from runner import stages

    run = copy_run(small_jobs2, tmp_path / "run")
    cfg = config.load(str(small_cfg))
    plan = stages.Plan(cfg, run, str(small_cfg), [])
    [(_, marker, want)] = [o for o in plan.outputs("train") if o[1].parent.name == "train_many_s0"]
    assert plan.state("train", marker, want) == "done"
    (marker.parent / "step_003" / "adapter_model.safetensors").unlink()
    assert plan.state("train", marker, want) == "weightless"
    (marker.parent / "step_006" / "adapter_model.safetensors").unlink()
    assert plan.state("train", marker, want) == "weightless"
    (marker.parent / "step_006" / "adapter_model.safetensors").write_bytes(b"cut")
    assert len(plan.faults("train", marker)) == 2 and plan.state("train", marker, want) == "damaged"


def test_dry_run_says_which_runs_without_weights_are_remade(small_cfg, small_jobs2, tmp_path, capsys):
    """--dry-run's train row when some training runs are missing and others done but for their weights:
    those no job still to do reads count as done, one an evaluation still to do reads "would be remade",
    and only that one is a job (before: every run without weights "would be remade" once any run was
    missing, though no job retrained them; results/smollm2_v2 between its parts)."""
    from orchestration import config
    from runner import preview, stages

    run = copy_run(small_jobs2, tmp_path / "run")
    cfg = config.load(str(small_cfg))
    dirs = sorted(d for d in run.glob("train_*") if d.is_dir())
    assert len(dirs) >= 3
    for d in dirs[:2]:  # two runs committed without weights
        for w in d.glob("step_*/adapter_model.safetensors"):
            w.unlink()
    shutil.rmtree(dirs[2])  # one not trained yet

    def train_row() -> tuple[str, list[str]]:
        plan = stages.Plan(cfg, run, str(small_cfg), [])
        preview.dry_run(plan, ["train"], 1)
        row = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  train"))
        return row, sorted(j.output for j in plan.jobs(["train"]))

    kept = f"{len(dirs) - 3} done, " if len(dirs) > 3 else ""
    row, jobs = train_row()
    assert (
        row
        == f"  train     {kept}2 done without their weights (not committed; nothing still to do reads them), 1 missing"
    )
    assert jobs == [str(dirs[2])]
    for f in run.glob(dirs[0].name.replace("train_", "eval_", 1) + "_*.json"):  # an evaluation of the first to redo
        f.unlink()
    row, jobs = train_row()
    assert "1 done without their weights (not committed; nothing still to do reads them)" in row, row
    assert "1 without their weights, which a job still to do reads (would be remade)" in row, row
    assert jobs == sorted([str(dirs[0]), str(dirs[2])])


def test_a_run_committed_without_its_base_weights_moves_nothing(small_cfg, small_jobs2, fitted_dir, tmp_path):
    """A run committed without its base weights reads done, and its base stage rebuilds them once a stage reads them.

    results/smollm2 is committed without base_model's weights: before, the base counted as done,
    training folders and evaluations were moved aside, then every job died on the missing weights;
    then, the whole study moved the weightless base aside and rebuilt it though nothing read it."""
    run = copy_run(small_jobs2, tmp_path / "run")
    (run / "base_model" / "model.safetensors").unlink()
    before = snapshot(run)
    r = grpo_cmd("eval", "--config", str(small_cfg), "--run", str(run), timeout=120)  # the base's evaluation by hand
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "base_model/model.safetensors: missing" in r.stderr and "--stage base" in r.stderr
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    assert "  base      done; its weights are not committed" in d.stdout and "  train     done" in d.stdout, d.stdout
    j = pipeline("--config", str(small_cfg), "--out", str(run), "--print-jobs", timeout=120).stdout
    assert "--stage base" not in j and "grpo.py" not in j, j  # nothing left reads the base: it is not rebuilt
    r = pipeline(
        "--config", str(small_cfg), "--out", str(run), "--quiet", timeout=600
    )  # everything done: nothing reads the base
    assert r.returncode == 0 and r.stdout.count("done, skipped") == 6, r.stdout + r.stderr[-3000:]
    assert "base: done; its weights are not committed" in r.stdout and "skipped (--force makes them now)" in r.stdout
    assert snapshot(run) == before  # the manifest too
    (run / "eval_base.json").unlink()  # now a stage still to do reads the base
    before = snapshot(run)
    for stage in ("train", "eval"):  # a later stage alone: one line naming the base and the command, nothing moved
        r = pipeline("--config", str(small_cfg), "--out", str(run), "--stage", stage, "--quiet", timeout=120)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"stage {stage} cannot run: {run / 'base_model' / 'model.safetensors'}: missing" in r.stderr
        assert f"--run {run} --stage base" in r.stderr
    assert snapshot(run) == before  # nothing moved aside, not even the manifest rewritten
    d = pipeline("--config", str(small_cfg), "--out", str(run), "--dry-run", timeout=120)
    assert "  base      without its weights (would be remade)" in d.stdout and "  train     done" in d.stdout, d.stdout
    j = pipeline("--config", str(small_cfg), "--out", str(run), "--print-jobs", timeout=120).stdout
    first = j.splitlines()[:2]  # the base stage first, which rebuilds it: a part in a fresh clone begins there
    assert first[0].startswith("# 1. one after another") and first[1].startswith("python pipeline.py"), j
    assert first[1].endswith(f"--run {run} --stage base"), j
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--stage", "base", "--quiet", timeout=600)
    assert r.returncode == 0 and "base: running" in r.stdout, r.stdout + r.stderr[-3000:]  # what a part runs first
    assert (run / "base_model" / "model.safetensors").read_bytes() == (fitted_dir / "model.safetensors").read_bytes()
    r = pipeline(
        "--config", str(small_cfg), "--out", str(run), "--quiet", timeout=600
    )  # the whole study: the base stage rebuilds it
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run / "base_model" / "model.safetensors").read_bytes() == (fitted_dir / "model.safetensors").read_bytes()
    moved = sorted({p.relative_to(run / "superseded").parts[1] for p in (run / "superseded").rglob("*") if p.is_file()})
    assert moved == ["base_model"]  # the weightless folder; every training run and evaluation was still done
    assert "train: done, skipped" in r.stdout and (run / "eval_base.json").exists()


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
    assert (
        r.returncode == 2
        and "train_many_s0/step_006/adapter_config.json: missing" in r.stderr
        and "--stage train" in r.stderr
    )
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
    done = subprocess.run(
        [sys.executable, *fix.split()[1:], "--quiet"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert eval_content(run / "eval_many_s0_006.json") == eval_content(small_jobs2 / "eval_many_s0_006.json")
    # an evaluation that is valid JSON but wrong inside: the analysis finds it; the manifest says failed, not running
    d = json.loads((run / "eval_many_s0_003.json").read_text())
    d["problems"][0]["correct_loose"] = 999
    (run / "eval_many_s0_003.json").write_text(json.dumps(d))
    r = pipeline("--config", str(small_cfg), "--out", str(run), "--stage", "analyze", "--quiet", timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (
        r.stderr
    )  # an input's fault
    assert "eval_many_s0_003.json: problem" in r.stderr and "make it again: python grpo.py eval" in r.stderr
    man = json.loads((run / "manifest.json").read_text())
    assert man["stages"]["analyze"]["status"] == "failed" and ended(man)
    # analyze_b.py by hand says the same, with the command from the manifest
    r = subprocess.run(
        [sys.executable, str(ROOT / "analyze_b.py"), "--run", str(run), "--no-figures"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (
        r.stderr
    )  # the pipeline's code for the same fault
    assert (
        "make it again: python grpo.py eval" in r.stderr
        and f"--adapter {run / 'train_many_s0' / 'step_003'}" in r.stderr
    )


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


def test_out_of_memory_is_one_line_naming_the_job_the_memory(small_cfg, small_jobs2, tmp_path, monkeypatch, capsys):
    """Out of memory is one line naming the job the memory and the settings.

    A CUDA out-of-memory error, injected on the CPU: grpo.py's line names the job, the memory and
    the settings to lower with values; the pipeline's last line the same advice; a rerun by hand
    that fails puts back what it moved aside; the manifest says failed and not started."""
    import torch

    import grpo
    import pipeline as pl
    from method import evaluate, training

    def oom(*a, **kw):
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 7.63 GiB"
        )

    run = copy_run(small_jobs2, tmp_path / "run")
    before = snapshot(run)
    monkeypatch.setattr(evaluate, "evaluate", oom)
    monkeypatch.chdir(ROOT)
    rc = grpo.main(
        [
            "eval",
            "--config",
            str(small_cfg),
            "--run",
            str(run),
            "--adapter",
            str(run / "train_4_s1" / "step_003"),
            "--quiet",
        ]
    )
    assert rc == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"grpo.py: eval {run / 'train_4_s1' / 'step_003'} (test) ran out of memory on the CPU ("
    )
    assert (
        "GiB available now; this process peaked at" in err[0]
        and "--set eval.max_rows=64, then 32, then 1 (now no cap: 128 rows a call)" in err[0]  # the adapter's 16 x 8
        and "changes no sample" in err[0]
    ), err
    assert snapshot(run) == before and not (run / "superseded").exists()  # eval_4_s1_003.json put back where it was
    monkeypatch.undo()
    untrain_s0(run)
    monkeypatch.setattr(training, "load_model", oom)  # what the training loop loads: the job's first step needs memory
    monkeypatch.chdir(ROOT)
    assert (
        pl.main(["--config", str(small_cfg), "--out", str(run), "--quiet"]) == 3
    )  # out of memory: 3, as the README says
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("grpo.py: train many s0 ran out of memory on the CPU"), (
        err
    )  # the job's line
    assert err[1].startswith(
        "pipeline.py: 1 job(s) failed (train many s0); 2 not started because they wait for them; "
        "train many s0 ran out of memory: lower it: --set micro_batch=8, then 4, then 1 (now 16)"
    ), err[1]
    assert "FAILED train many s0 (out of memory: its line above names the memory it had" in cap.out
    man = json.loads((run / "manifest.json").read_text())
    assert man["jobs"]["train many s0"]["status"] == "failed" and man["jobs"]["train many s0"]["exit"] == 3
    assert (
        man["jobs"]["eval many s0 step 6"]["status"] == "not started" and man["stages"]["train"]["status"] == "failed"
    )
    assert (
        man["stages"]["eval"]["status"] == "not started"
        and man["stages"]["analyze"]["status"] == "not started"
        and ended(man)
    )


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
    assert (
        "moved aside lr_sweep/lr_0.01" in r.stdout
        and "moved aside lr_sweep/lr_0.001" in r.stdout
        and "damaged" in r.stdout
    )
    assert provenance.content_sha256(run / "lr_choice.json") == provenance.content_sha256(
        small_jobs2 / "lr_choice.json"
    )
    for lr in ("0.01", "0.001"):
        assert (run / "lr_sweep" / f"lr_{lr}" / "train_log.csv").read_text().count("\n") == (
            small_jobs2 / "lr_sweep" / f"lr_{lr}" / "train_log.csv"
        ).read_text().count("\n")
