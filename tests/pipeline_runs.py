"""What the pipeline tests share (test_pipeline*.py): running pipeline.py, grpo.py and bench/recheck.py as a
user does, the smoke design's expected files, and comparisons of run folders."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


SMOKE = ROOT / "configs" / "smoke.yaml"


ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def pipeline(*args, **kw):
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *args], cwd=ROOT, env=ENV, capture_output=True, text=True, **kw
    )


CONDS, SEEDS, STEPS = ("many", "4", "1", "4-kl", "format", "rft", "sft"), (0, 1), (3, 6)


N_TRAIN, N_EVAL = 8 * 2, 1 + 8 * 2 * 2  # jobs of the smoke config: training runs; test-set evaluations


def expected_files(run: Path) -> list[Path]:
    files = [
        "manifest.json",
        "base_model/config.json",
        "base_model/model.safetensors",
        "base_model/tokenizer.json",
        "probe_countdown.json",
        "probe_arith-1x1.json",
        "selection.json",
        "lr_choice.json",
        "lr_sweep/lr_0.001/train_log.csv",
        "lr_sweep/lr_0.01/train_log.csv",
        "eval_base.json",
        "verdicts.json",
        "report.md",
        "figures/passk_many.png",
        "figures/training.png",
        "figures/lr_sweep.png",
    ]
    for c in CONDS:
        for seed in SEEDS:
            d = f"train_{c}_s{seed}"
            files += [f"{d}/train_log.csv", f"{d}/done.json", f"{d}/last/optimizer.pt"]
            for s in STEPS:
                files += [
                    f"{d}/step_{s:03d}/adapter_model.safetensors",
                    f"{d}/step_{s:03d}/adapter_config.json",
                    f"eval_{c}_s{seed}_{s:03d}.json",
                ]
    return [run / f for f in files]


def outputs_bytes(run: Path) -> dict[str, bytes]:
    """Adapters and evaluation counts: what --jobs and resuming must not change."""
    out = {
        str(p.relative_to(run)): p.read_bytes() for p in sorted(run.glob("train_*/step_*/adapter_model.safetensors"))
    }
    for p in sorted(run.glob("eval_*.json")):
        out[p.name] = json.dumps(eval_content(p), sort_keys=True).encode()
    return out


def eval_content(path: Path) -> dict:
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


def ended(manifest: dict) -> bool:
    """No stage or job is recorded as running or waiting: done, interrupted, failed and not started are the end states."""
    return all(
        v.get("status") in ("done", "interrupted", "failed", "not started")
        for part in ("stages", "jobs")
        for v in manifest[part].values()
    )


def grpo_cmd(*args, **kw):
    return subprocess.run(
        [sys.executable, str(ROOT / "grpo.py"), *args], cwd=ROOT, env=ENV, capture_output=True, text=True, **kw
    )


def truncate(path: Path, keep: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def env_after(seconds):
    time.sleep(seconds)
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def recheck(*args, **kw):
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "recheck.py"), *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        **kw,
    )
