"""Shared helpers for the benchmarks: find the model folder, time things, print medians."""

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def model_dir(arg: str | None) -> Path:
    path = Path(arg) if arg else ROOT / "results" / "tiny" / "base_model"
    if not (path / "config.json").exists():
        sys.exit(
            f"bench: no model folder at {path}; build it with `python pipeline.py --config configs/tiny.yaml --stage base` "
            "or pass --model DIR"
        )
    return path


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0


def median(xs):
    return statistics.median(xs) if xs else float("nan")
