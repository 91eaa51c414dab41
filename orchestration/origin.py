"""What made an output, besides its settings: the code revision, the machine and the package versions, as
provenance.record and the run's manifest write them. provenance.py re-exports every name."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def code_revision(root: Path = ROOT) -> str:
    """HEAD's commit, with "+dirty" where a tracked file outside results/ differs from it ("+unknown" where
    git cannot say); "unknown" outside a git checkout. Results are what runs write (a study's base rebuild
    rewrites its committed build record), not the code that made them."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        if not rev:
            return "unknown"
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if status.returncode != 0:  # a git too old for the pathspec: say so, never "clean"
            return rev + "+unknown"
        return rev + ("+dirty" if status.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """The machine an output was made on: the CPU's model name, the cores this process may use, the CPU
    features that set the speed of matrix products here (AVX2, AVX-512, native bf16), and the GPU this
    process computes on (where it has started CUDA). A run made in parts on different machines records each part's in its files."""
    name, flags = platform.processor() or platform.machine(), []
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = value.split()
                    break
    except OSError:
        pass
    gpu = None
    try:
        import torch

        if torch.cuda.is_initialized():  # a job on its GPU; never start CUDA here (the pipeline sets each job's GPU)
            gpu = torch.cuda.get_device_name()
    except ImportError:
        pass
    return {
        "cpu": name,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_features": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags],
        "gpu": gpu,
    }


def versions() -> dict:
    import numpy
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
    }
