"""An evaluation stopped between sampling calls and run again ends with the file an uncut run writes
(orchestration/eval_resume.py), in this process and across processes; a resume folder made for
another evaluation is never read."""
import json
import subprocess
import sys

import pytest
import torch
from pipeline_runs import ENV, ROOT

from helpers import CPU, cfg_for
from method import evaluate
from method.model import apply_lora, load_model, save_adapter
from orchestration import eval_resume, provenance

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
def test_an_evaluation_cut_after_two_calls_resumes_to_the_uncut_file(draw, fitted_dir, smoke_cfg, tmp_path, monkeypatch):
    cfg = cfg_for(smoke_cfg, **{"eval.draw": draw, "eval.problems_per_batch": 4})  # 16 problems: 4 calls of 4 x 16 samples
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


def test_a_resume_folder_of_another_adapter_or_settings_is_not_used(fitted_dir, smoke_cfg, tmp_path, monkeypatch, capsys):
    cfg = cfg_for(smoke_cfg, **{"eval.problems_per_batch": 4})  # adapters: n 8, 4 calls
    a, b = adapters(cfg, fitted_dir, tmp_path)
    uncut = evaluate.evaluate(cfg, str(fitted_dir), b, tmp_path / "uncut.json", progress=False)
    out = tmp_path / "eval_x.json"
    for other_cfg, adapter, why in [(cfg, a, "made for another evaluation (stage hash"),
                                    (cfg_for(smoke_cfg, **{"eval.problems_per_batch": 4, "eval.sampling.temperature": 1.0}), b,
                                     "made for another evaluation (stage hash"),
                                    (cfg_for(smoke_cfg, **{"eval.problems_per_batch": 2}), b, "made with other sampler calls")]:
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
    args = {"root": str(ROOT / "tests"), "smoke": str(ROOT / "configs" / "smoke.yaml"), "base": str(fitted_dir), "out": str(out)}
    env = {**ENV, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    first = subprocess.run([sys.executable, "-c", FIRST_PART.format(**args)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert first.returncode == 130 and not out.exists() and eval_resume.progress(out) == (2, 4), first.stderr[-2000:]
    second = subprocess.run([sys.executable, "-c", SECOND_PART.format(**args)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    resumed = json.loads(out.read_text())
    assert resumed["resumed_from_calls"] == 2 and resumed["problems"] == uncut["problems"]
    assert computed(resumed) == computed(uncut)
    assert not eval_resume.folder_of(out).exists()
