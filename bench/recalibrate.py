"""Re-analyse a committed run under the calibrated verdict (PLAN.md section 7, change 36), into a new
folder, leaving the run as it is: its inputs are copied (analysis/run_files.copy_inputs) with its base model,
the calibration's pool is sampled from that base (the `pool` evaluation set: S x n more samples per
test problem under the set's own seeds, S the primary condition's seeds), the run's recorded config
gains the registered analysis settings (ceiling_null selection, the calibration arms, the pool set),
and analyze_b.py runs on the copy. Only base samples are drawn; no trained model is touched.

    python bench/recalibrate.py --run results/tiny_v3 --out /tmp/tiny_v3_calibrated [--jobs 2]

The config the pool was sampled under is written to OUT/recalibration.yaml; the pool to
OUT/evalsets/pool/eval_base.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.run_files import copy_inputs  # noqa: E402

CALIBRATION = {
    "pool_set": "pool",
    "resplits": 100,
    "resamples": 2000,
    "selection_w": [2.0, 5.0],
    "teaching_eps": [0.01, 0.05],
}


def recalibrated_config(cfg: dict) -> dict:
    """The run's recorded config with the pool set and the registered analysis of change 36 added."""
    primary = (cfg.get("analyze") or {}).get("primary_condition", "many")
    seeds = (cfg["train"].get("seeds_by_condition") or {}).get(primary, cfg["train"]["seeds"])
    n, k = cfg["eval"]["n"], cfg["eval"].get("k_max", cfg["eval"]["n"])
    from orchestration import config, records  # a record lacks keys added since: read at their values then

    out = config.to_dict(records.from_record(cfg))
    model = out["model"]
    if any(
        model.get(k) is not None for k in ("build", "qwen_shape", "gguf")
    ):  # a built base: model.path is not set with it
        model.pop("path", None)
        model.pop("revision", None)
    out.setdefault("eval_sets", {})["pool"] = {
        "n_problems": cfg["task"]["n_test"],
        "n": len(seeds) * n,
        "k_max": k,
        "models": "base",
        "problems_per_batch": 1,
    }
    out["analyze"] = {
        **out["analyze"],
        "ceiling_null": "selection",
        "selection_margin": 0.05,
        "coverage_sims": 2000,
        "calibration": dict(CALIBRATION),
    }
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description="Re-analyse a committed run under the calibrated verdict, into a new folder."
    )
    p.add_argument("--run", required=True)
    p.add_argument("--out", required=True, help="a new (or empty) folder")
    a = p.parse_args(argv)
    run, out = Path(a.run), Path(a.out)
    if out.exists() and any(out.iterdir()):
        print(f"recalibrate.py: --out {out}: exists and is not empty; give a new folder", file=sys.stderr)
        return 2
    manifest = json.loads((run / "manifest.json").read_text())
    copy_inputs(run, out)
    if (run / "base_model").is_dir():
        shutil.copytree(
            run / "base_model", out / "base_model", dirs_exist_ok=True
        )  # the weights too: the pool samples the base
    cfg = recalibrated_config(manifest["config"])
    (out / "recalibration.yaml").write_text(
        "# "
        + f"{run}'s recorded config, with the pool set and the analysis of PLAN.md change 36\n"
        + yaml.safe_dump(cfg, sort_keys=False)
    )
    manifest["config"] = cfg
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    rc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "grpo.py"),
            "eval",
            "--config",
            str(out / "recalibration.yaml"),
            "--run",
            str(out),
            "--eval-set",
            "pool",
            "--quiet",
        ]
    ).returncode
    if rc != 0:
        print(f"recalibrate.py: the pool's evaluation failed (exit {rc}); its line above says why", file=sys.stderr)
        return rc
    shutil.rmtree(out / "base_model")  # a copy of the run's: not kept
    return subprocess.run([sys.executable, str(ROOT / "analyze_b.py"), "--run", str(out)]).returncode


if __name__ == "__main__":
    sys.exit(main())
