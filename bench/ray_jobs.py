"""--executor ray writes the same bytes as --jobs 1: the smoke study (three of its conditions)
run twice from the same base, once in this process and once through a local Ray instance.

    python bench/ray_jobs.py            # needs: pip install -r requirements-optional.txt

Prints the wall time of each and whether every adapter and evaluation count matches. A bench,
not a test: starting Ray takes longer than the test suite's budget allows.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def run(cfg: Path, out: Path, *extra: str) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "--config", str(cfg), "--run", str(out), "--quiet", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        sys.exit(f"pipeline failed ({' '.join(extra) or '--jobs 1'}): {r.stderr.strip()[-2000:]}")
    return time.perf_counter() - t0


def outputs(run_dir: Path) -> dict[str, object]:
    out = {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.glob("train_*/step_*/adapter_model.safetensors"))
    }
    for p in sorted(run_dir.glob("eval_*.json")):
        d = json.loads(p.read_text())
        out[p.name] = [(q["id"], q["correct_strict"], q["correct_loose"], q.get("responses")) for q in d["problems"]]
    return out


def main() -> int:
    try:
        import ray  # noqa: F401
    except ImportError:
        print("ray is not installed: pip install -r requirements-optional.txt", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        d = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
        d["conditions"] = {k: v for k, v in d["conditions"].items() if k in ("many", "4", "sft")}
        d["eval_sets"] = {}  # left out, the registered study's sets would apply
        d["analyze"]["calibration"] = None  # its pool is an evaluation set, its taught arm a condition left out
        d["tokens"]["enabled"] = False
        cfg = tmp / "small.yaml"
        cfg.write_text(yaml.safe_dump(d, sort_keys=False))
        t_local = run(cfg, tmp / "local")
        (tmp / "ray").mkdir()
        shutil.copytree(tmp / "local" / "base_model", tmp / "ray" / "base_model")
        t_ray = run(cfg, tmp / "ray", "--executor", "ray")
        a, b = outputs(tmp / "local"), outputs(tmp / "ray")
        same = a.keys() == b.keys() and all(a[k] == b[k] for k in a)
        print(
            json.dumps(
                {
                    "files_compared": len(a),
                    "identical": same,
                    "seconds_jobs1_with_base": round(t_local, 1),
                    "seconds_ray_without_base": round(t_ray, 1),
                }
            )
        )
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
