"""Seconds per Dr. GRPO step, split into sampling and forward/backward, for a stated config.

    python bench/step.py --config configs/tiny.yaml [--steps 6] [--set train.problems_per_step=16]

Trains `--steps` steps of the many condition into a temporary folder (the model comes from
model.path, or RUN/base_model for configs that build one) and prints the medians of the
per-step columns of train_log.csv, leaving out the first step (warm-up).
"""

import argparse
import tempfile
from pathlib import Path

from common import ROOT, median

import countdown
from method import training
from method.model import pick_device
from orchestration import config, study


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "tiny.yaml"))
    p.add_argument("--run", default=None, help="run folder holding base_model/ (default: results/<config name>)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--set", action="append", default=[])
    a = p.parse_args()
    cfg = config.load(a.config, a.set)
    run = Path(a.run) if a.run else study.default_run(a.config)
    base = study.model_path(cfg, run)
    train_set, _ = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    with tempfile.TemporaryDirectory() as tmp:
        out = training.train(
            cfg,
            training.TrainingRun(
                "many", config.ConditionCfg(), 0, train_set, a.lr, a.steps, [], dev_every=cfg.train.dev_every
            ),
            Path(tmp) / "t",
            base,
            progress=False,
        )
        rows = training.read_log(out / "train_log.csv")[1:]
    t = cfg.train
    print(
        f"config {a.config}: {t.problems_per_step} x {t.group_size}, max {t.sampling.max_new_tokens} new tokens, "
        f"LoRA r {cfg.lora.r}, micro-batch {cfg.micro_batch or 'auto (memory_gb)'}, {cfg.threads or 'default'} thread(s), "
        f"device {pick_device(cfg)}"
    )
    for col in ("sec_sampling", "sec_fwd_bwd", "tokens", "len_mean", "reward_mean", "peak_mem_mb"):
        print(f"  median {col:<13} {median([r[col] for r in rows]):10.3f}")
    total = [r["sec_sampling"] + r["sec_fwd_bwd"] for r in rows]
    print(f"  median seconds per step {median(total):.3f} over steps 2..{a.steps}")


if __name__ == "__main__":
    main()
