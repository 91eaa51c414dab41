"""A training run's files: its log (train_log.csv, LOG_FIELDS; train_eval.csv, DEV_FIELDS), its
checkpoints (step_NNN/, an adapter in PEFT's format) and the rolling resume point (last/: adapter,
optimizer state, step), each written to a temporary folder and swapped in whole; resuming from it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import torch

from analysis.run_files import DEV_COLUMNS
from method.model import load_adapter, save_adapter
from orchestration import config, provenance
from orchestration.provenance import atomic_replace_dir, read_csv_rows, write_csv_rows

LOG_FIELDS = [
    "step",
    "reward_mean",
    "zero_signal_frac",
    "format_rate",
    "len_mean",
    "len_max",
    "truncated_frac",
    "entropy_mean",
    "kl_mean",
    "logp_gap_mean",
    "logp_gap_max",
    "loss",
    "grad_norm",
    "grad_norm_clipped",
    "lr",
    "sec_sampling",
    "sec_fwd_bwd",
    "tokens",
    "peak_mem_mb",
    "peak_reserved_mb",
    "no_signal",
    "updated",
]
INT_FIELDS = ("step", "len_max", "tokens", "no_signal", "updated")
DEV_FIELDS = ["step", *DEV_COLUMNS]  # train_eval.csv: its columns are the analysis' (analysis/run_files.py)


def write_log(path: Path, rows: list[dict]) -> None:
    write_csv_rows(path, rows, LOG_FIELDS)


def read_log(path: Path) -> list[dict]:
    """train_log.csv's rows; an empty cell (a column added after the run's first steps were logged) is left out."""
    with open(path) as f:
        return [
            {k: (int(v) if k in INT_FIELDS else float(v)) for k, v in r.items() if v != ""} for r in csv.DictReader(f)
        ]


def save_last(model, opt, step: int, rows: list[dict], out: Path, cfg: config.Config, base: str, meta: dict) -> None:
    """The rolling resume point: adapter, optimizer state, step, the log so far. The data order
    and every sampling seed derive from (seed, step), so they need no saved state."""
    tmp = out / ".last.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_adapter(model, tmp, cfg, base)
    torch.save(opt.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **meta}, indent=1) + "\n")
    write_log(out / "train_log.csv", rows)  # first: a log ahead of last/ is harmless (resume keeps rows <= its step)
    atomic_replace_dir(tmp, out / "last")


def save_checkpoint(model, out: Path, step: int, cfg: config.Config, base: str) -> None:
    tmp = out / f".step_{step:03d}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_adapter(model, tmp, cfg, base)
    atomic_replace_dir(tmp, out / f"step_{step:03d}")


def resume(out: Path, model, opt, meta: dict) -> tuple[int, list[dict], list[dict]]:
    """(first step to run, log rows, dev rows) from out/last, or (1, [], []) for a fresh run."""
    old = out / ".last.old"
    if not (out / "last").exists() and (old / "state.json").exists():
        os.replace(old, out / "last")  # killed between the two renames of atomic_replace_dir
    if not (out / "last" / "state.json").exists():
        return 1, [], []
    last = out / "last"
    damaged = f"is damaged, so this run cannot resume: move {out} aside (it then starts again from step 1)"
    bad = provenance.json_problem(last / "state.json", ("step", "provenance")) or provenance.adapter_problem(last)
    if bad:
        raise RuntimeError(f"{last}, the resume point, {damaged} ({bad})")
    state = json.loads((last / "state.json").read_text())
    if state["provenance"]["stage_hash"] != meta["provenance"]["stage_hash"]:
        raise RuntimeError(f"{last} was made by a different config or inputs; delete {out} or use --force")
    load_adapter(model, last)
    try:  # to the CPU: load_state_dict moves each moment to its parameter's device and leaves AdamW's step
        # counter on the CPU, as in a run that never stopped (on a GPU the counters would cost a host sync
        # per parameter per step: another code path than the uninterrupted run's)
        opt.load_state_dict(torch.load(last / "optimizer.pt", weights_only=True, map_location="cpu"))
        rows = [r for r in read_log(out / "train_log.csv") if r["step"] <= state["step"]]
        dev_rows = [r for r in read_csv_rows(out / "train_eval.csv") if int(r["step"]) <= state["step"]]
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, TypeError) as e:
        raise RuntimeError(f"{last}, the resume point, {damaged} ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
    print(
        f"{meta['provenance']['stage']} {meta['condition']} s{meta['train_seed']}: resuming {out} from step {state['step'] + 1} "
        f"(last checkpoint: step {state['step']})",
        flush=True,
    )
    return state["step"] + 1, rows, dev_rows
