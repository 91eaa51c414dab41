"""An evaluation stopped between sampling calls and run again ends with the file an uncut run writes
(orchestration/eval_resume.py): in this process, across processes, and through the pipeline; a resume
folder made for another evaluation is never read; the pipeline keeps a matching one and moves aside
the rest."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from pipeline_runs import ENV, ROOT, copy_run, pipeline

from helpers import CPU, cfg_for
from method import evaluate
from method.model import apply_lora, load_model, save_adapter
from orchestration import config, eval_resume, provenance
from runner import preview
from runner.folder import Aside
from runner.stage_checks import check_stage
from runner.stages import Plan

SAMPLE = evaluate.sample  # the sampler itself, whatever a test has patched in since


def computed(d: dict) -> dict:
    """An evaluation without what times or describes the process (the stage hash stays)."""
    out = {k: v for k, v in d.items() if k not in ("seconds", "resumed_from_calls", "provenance")}
    return {**out, "stage_hash": d["provenance"]["stage_hash"]}


def cut_after(monkeypatch, calls: int) -> list:
    """evaluate's sampler, stopped by a KeyboardInterrupt (Ctrl-C) as call `calls` + 1 begins; the list
    counts the calls that ran."""
    ran = []

    def cutting(*args, **kw):
        if len(ran) == calls:
            raise KeyboardInterrupt
        ran.append(1)
        return SAMPLE(*args, **kw)

    monkeypatch.setattr(evaluate, "sample", cutting)
    return ran


def counting(monkeypatch) -> list:
    ran = []

    def count(*args, **kw):
        ran.append(1)
        return SAMPLE(*args, **kw)

    monkeypatch.setattr(evaluate, "sample", count)
    return ran


@pytest.mark.parametrize("draw", ["sample", "batch"])
def test_an_evaluation_cut_after_two_calls_resumes_to_the_uncut_file(
    draw, fitted_dir, smoke_cfg, tmp_path, monkeypatch
):
    cfg = cfg_for(
        smoke_cfg, **{"eval.draw": draw, "eval.problems_per_batch": 4}
    )  # 16 problems: 4 calls of 4 x 16 samples
    uncut = evaluate.evaluate(cfg, str(fitted_dir), None, tmp_path / "uncut.json", progress=False)
    out = tmp_path / "eval_base.json"
    cut_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        evaluate.evaluate(cfg, str(fitted_dir), None, out, progress=False)
    assert not out.exists() and eval_resume.progress(out) == (2, 4)
    kept = json.loads((eval_resume.folder_of(out) / "call_00001.json").read_text())
    assert kept["span"] == [4, 8, 0, 16] and len(kept["tokens"]) == 4 * 16
    earlier = sum(json.loads(f.read_text())["seconds"] for f in eval_resume.folder_of(out).glob("call_*.json"))
    ran = counting(monkeypatch)
    resumed = evaluate.evaluate(cfg, str(fitted_dir), None, out, progress=False)
    assert len(ran) == 2  # only the calls the first part had not finished
    assert resumed["resumed_from_calls"] == 2 and "resumed_from_calls" not in uncut
    assert resumed["seconds"] >= round(earlier, 2)  # both parts' time
    assert resumed["problems"] == uncut["problems"] and resumed["pass_at_k"] == uncut["pass_at_k"]
    assert computed(resumed) == computed(uncut) == computed(json.loads(out.read_text()))
    assert not eval_resume.folder_of(out).exists()  # removed once the file is written
    assert provenance.content_sha256(out) == provenance.content_sha256(tmp_path / "uncut.json")


def adapters(cfg, base, tmp_path) -> list[str]:
    """Two adapters of the base: LoRA B = 0 (the base itself) and B drawn at random (another model)."""
    model, _ = load_model(cfg, str(base), CPU)
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed=0)
    save_adapter(model, tmp_path / "train_x_s0" / "step_001", cfg, str(base))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(3))
    save_adapter(model, tmp_path / "train_x_s0" / "step_002", cfg, str(base))
    return [str(tmp_path / "train_x_s0" / f"step_00{i}") for i in (1, 2)]


def test_a_resume_folder_of_another_adapter_or_settings_is_not_used(
    fitted_dir, smoke_cfg, tmp_path, monkeypatch, capsys
):
    cfg = cfg_for(smoke_cfg, **{"eval.problems_per_batch": 4})  # adapters: n 8, 4 calls
    a, b = adapters(cfg, fitted_dir, tmp_path)
    uncut = evaluate.evaluate(cfg, str(fitted_dir), b, tmp_path / "uncut.json", progress=False)
    out = tmp_path / "eval_x.json"
    for other_cfg, adapter, why in [
        (cfg, a, "made for another evaluation (stage hash"),
        (
            cfg_for(smoke_cfg, **{"eval.problems_per_batch": 4, "eval.sampling.temperature": 1.0}),
            b,
            "made for another evaluation (stage hash",
        ),
        (cfg_for(smoke_cfg, **{"eval.problems_per_batch": 2}), b, "made with other sampler calls"),
    ]:
        cut = cut_after(monkeypatch, 3)
        with pytest.raises(KeyboardInterrupt):
            evaluate.evaluate(other_cfg, str(fitted_dir), adapter, out, progress=False)
        assert len(cut) == 3 and eval_resume.folder_of(out).exists()
        capsys.readouterr()
        ran = counting(monkeypatch)
        got = evaluate.evaluate(cfg, str(fitted_dir), b, out, progress=False)
        assert len(ran) == 4 and "resumed_from_calls" not in got  # started over
        assert f"{eval_resume.folder_of(out)}: {why}" in capsys.readouterr().out
        assert computed(got) == computed(uncut)
        out.unlink()


FIRST_PART = """
import sys
sys.path.insert(0, {root!r})
from helpers import cfg_for
from method import evaluate
from orchestration import config
real, ran = evaluate.sample, []
def cutting(*args, **kw):
    if len(ran) == 2:
        raise SystemExit(130)  # as an interrupted job ends
    ran.append(1)
    return real(*args, **kw)
evaluate.sample = cutting
cfg = cfg_for(config.load({smoke!r}), **{{"eval.problems_per_batch": 4}})
evaluate.evaluate(cfg, {base!r}, None, {out!r}, progress=False)
"""
SECOND_PART = FIRST_PART.replace("evaluate.sample = cutting", "")


def test_an_evaluation_cut_in_one_process_finishes_in_another(fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg, **{"eval.problems_per_batch": 4})
    uncut = evaluate.evaluate(cfg, str(fitted_dir), None, tmp_path / "uncut.json", progress=False)
    out = tmp_path / "eval_base.json"
    args = {
        "root": str(ROOT / "tests"),
        "smoke": str(ROOT / "configs" / "smoke.yaml"),
        "base": str(fitted_dir),
        "out": str(out),
    }
    env = {**ENV, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    first = subprocess.run(
        [sys.executable, "-c", FIRST_PART.format(**args)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert first.returncode == 130 and not out.exists() and eval_resume.progress(out) == (2, 4), first.stderr[-2000:]
    second = subprocess.run(
        [sys.executable, "-c", SECOND_PART.format(**args)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert second.returncode == 0, second.stderr[-2000:]
    resumed = json.loads(out.read_text())
    assert resumed["resumed_from_calls"] == 2 and resumed["problems"] == uncut["problems"]
    assert computed(resumed) == computed(uncut)
    assert not eval_resume.folder_of(out).exists()


def partial(out, stage_hash: str, calls: int = 4, done: int = 1) -> None:
    """A resume folder as an evaluation stopped after `done` of `calls` calls leaves it."""
    folder = eval_resume.folder_of(out)
    folder.mkdir(parents=True)
    spans = [[4 * i, 4 * i + 4, 0, 16] for i in range(calls)]
    (folder / "identity.json").write_text(
        json.dumps({"stage_hash": stage_hash, "n": 16, "seed_tag": "eval", "calls": spans})
    )
    for i in range(done):
        (folder / eval_resume.call_name(i)).write_text(
            json.dumps({"span": spans[i], "seconds": 1.0, "tokens": [], "entropy": []})
        )


def test_the_pipeline_keeps_a_matching_resume_folder_and_moves_aside_the_rest(smoke_cfg, tmp_path, capsys):
    run = tmp_path / "run"
    plan = Plan(smoke_cfg, run, str(ROOT / "configs" / "smoke.yaml"), [])
    base = run / "eval_base.json"
    want = plan.eval_hash(None)
    partial(base, want)
    partial(run / "evalsets" / "pool" / "eval_base.json", "0" * 64)  # another evaluation's settings
    partial(run / "eval_gone_s0_003.json", "1" * 64)  # an evaluation this design does not have
    preview.dry_run(plan, ["eval"], 1)
    said = capsys.readouterr().out
    assert "under way, resumed by the next run: eval_base.json 1 of 4 sampling calls done" in said
    assert "evalsets/pool" not in said
    check_stage(plan, "eval", False, Aside(run))
    assert eval_resume.progress(base) == (1, 4)  # kept: the next run continues it
    assert not eval_resume.folder_of(run / "evalsets" / "pool" / "eval_base.json").exists()
    assert not eval_resume.folder_of(run / "eval_gone_s0_003.json").exists()
    moved = sorted(p.relative_to(run).as_posix() for p in run.glob("superseded/*/**/identity.json"))
    assert [m.split("/", 2)[2] for m in moved] == [
        "eval_gone_s0_003.json.partial/identity.json",
        "evalsets/pool/eval_base.json.partial/identity.json",
    ]
    # an evaluation that is done (a run stopped after writing it) leaves nothing to continue
    base.write_text(json.dumps({"provenance": {"stage_hash": want, "config": config.to_dict(smoke_cfg)}}))
    check_stage(plan, "eval", False, Aside(run))
    assert not eval_resume.folder_of(base).exists() and len(list(run.glob("superseded/*/eval_base.json.partial"))) == 1


def test_force_moves_an_evaluations_resume_folder_aside_with_it(smoke_cfg, tmp_path):
    run = tmp_path / "run"
    base = run / "eval_base.json"
    partial(base, Plan(smoke_cfg, run, "smoke.yaml", []).eval_hash(None))
    base.write_text("{}")
    Aside(run).move(base, "--force")
    assert not base.exists() and not eval_resume.folder_of(base).exists()
    assert len(list(run.glob("superseded/*/eval_base.json.partial/identity.json"))) == 1


@pytest.mark.slow
def test_a_study_cut_during_an_evaluation_and_continued_in_a_copy_equals_the_uncut_one(
    small_cfg, small_jobs2, tmp_path, monkeypatch
):
    """The pipeline interrupted (Ctrl-C, exit 130) inside an evaluation, its folder copied as a fresh clone of
    a commit holds it (no adapter weights, no resume points: .gitignore keeps them out of git), and the same
    command run again on the copy in a fresh process: bench/same_run.py finds the files of the same command
    run uncut (a study made in parts, PLAN_CHANGES.md change 62). The training run whose evaluation is left
    is trained again, to the same bytes; the others read done without their weights."""
    import pipeline as pl

    sets = ["--set", "eval.problems_per_batch=4"]  # 4 calls per evaluation (the hashes leave it out: draw sample)
    redo = ["eval_base.json", "eval_many_s0_006.json"]
    uncut, run = copy_run(small_jobs2, tmp_path / "uncut"), copy_run(small_jobs2, tmp_path / "part1")
    for f in redo:
        (uncut / f).unlink()
        (run / f).unlink()
    r = pipeline("--config", str(small_cfg), "--out", str(uncut), "--quiet", *sets, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    cut_after(monkeypatch, 2)
    monkeypatch.chdir(ROOT)
    assert pl.main(["--config", str(small_cfg), "--out", str(run), "--quiet", *sets]) == 130
    assert eval_resume.progress(run / "eval_base.json") == (2, 4)
    clone = copy_run(run, tmp_path / "part2")
    uncommitted = {  # every adapter's weights and every resume point (last/)
        p.relative_to(clone)
        for p in clone.rglob("*")
        if p.is_file() and (p.name == "adapter_model.safetensors" or "last" in p.relative_to(clone).parts)
    }
    assert any(p.name == "adapter_model.safetensors" and "last" not in p.parts for p in uncommitted)
    for p in uncommitted:
        (clone / p).unlink()
    r = pipeline("--config", str(small_cfg), "--out", str(clone), "--quiet", *sets, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    retrained = {p.relative_to(clone) for p in clone.glob("train_*/step_*/adapter_model.safetensors")}
    assert retrained == {p.relative_to(uncut) for p in uncut.glob("train_many_s0/step_*/adapter_model.safetensors")}
    for p in uncommitted:  # what the clone never had and did not make again
        if not (clone / p).exists():
            (uncut / p).unlink()
    for p in uncut.glob("train_many_s0/*/adapter_config.json"):  # copied, they name the fixture's folder; the
        p.write_text(p.read_text().replace(str(small_jobs2), str(uncut)))  # clone's, made again, name the clone
    assert json.loads((clone / "eval_base.json").read_text())["resumed_from_calls"] == 2
    assert not list(clone.rglob("*.partial"))  # removed once written; none moved aside (superseded/ included)
    shutil.rmtree(clone / "superseded", ignore_errors=True)  # the weightless run moved aside before retraining
    same = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "same_run.py"), str(uncut), str(clone)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert same.returncode == 0, same.stdout[-3000:]
