"""What the study's stages and jobs cost on a GPU before any of them has run: a lower bound from
the model's shape and an assumed device, and the range that per-token overheads make of it in
practice. Every figure it gives is labelled an estimate; once a run has measured its own step and
evaluation times (jobs.estimate_seconds) those are used instead. No torch, no weights: the shape
comes from a local config.json when there is one, else from the registered model's known shape.

The bound (the README's Cost section): decoding reads the weights once per token for the whole
batch (or, at large batches, does 2 x params FLOPs per row and token, whichever is slower); a
training step's forward and backward cost 4 x params FLOPs per token (LoRA: no weight gradients);
prompts are PROMPT_TOKENS long.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

from orchestration import config, memory, study

# An assumed device, not a measured one: an RTX 4060 Laptop's class (bench/gpu_check.py measures a real one).
GPU_BYTES_PER_S = 256e9
GPU_FLOPS = 30e12  # sustained bf16
DEVICE = "a GPU that moves 256 GB/s and sustains 30 TFLOP/s in bf16 (assumed, not measured)"
PRACTICE = (2.0, 3.0)  # per-token overheads over the bound, the README's estimate until a GPU has run the study
PROMPT_TOKENS = 80  # the instruct prompt in Qwen's chat template is about 70 tokens

# Models the registered configs load from a hub, by id: their config.json's shape (Qwen2.5-0.5B-Instruct at
# revision 7ae5576, as qwen_shape.ARCH; a test checks the two agree).
REGISTERED_SHAPES = {
    "Qwen/Qwen2.5-0.5B-Instruct": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                       num_attention_heads=14, num_key_value_heads=2),
}
SHAPE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")


def model_shape(cfg: config.Config, run: Path) -> tuple[dict | None, str]:
    """The base model's shape and where it came from: RUN/base_model/config.json (a built base),
    model.path's config.json (a folder, or the local Hugging Face cache), else the registered shape
    of model.path; (None, why) when none of these is there."""
    candidates = []
    if study.builds_base(cfg):
        candidates.append(Path(run) / "base_model" / "config.json")
    elif os.path.isdir(os.path.expanduser(cfg.model.path)):
        candidates.append(Path(os.path.expanduser(cfg.model.path)) / "config.json")
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(cfg.model.path, "config.json", revision=cfg.model.revision)
            if isinstance(hit, str):
                candidates.append(Path(hit))
        except Exception:  # no cache, no hub client: fall back to the registered shape
            pass
    for f in candidates:
        try:
            d = json.loads(Path(f).read_text())
            d = d.get("text_config", d)
            return {k: d[k] for k in SHAPE_KEYS}, str(f)
        except (OSError, ValueError, KeyError):
            continue
    if not study.builds_base(cfg) and cfg.model.path in REGISTERED_SHAPES:
        return REGISTERED_SHAPES[cfg.model.path], f"the registered shape of {cfg.model.path}"
    return None, "the model's shape is not known until its config.json is here"


class CostModel:
    """Seconds at the bound for each stage and job of one config, on the assumed device."""

    def __init__(self, cfg: config.Config, shape: dict, source: str):
        self.cfg, self.source = cfg, source
        mc = SimpleNamespace(**shape)
        self.params = memory.estimate_memory(mc, cfg.lora.r, len(cfg.lora.targets), PROMPT_TOKENS, 1, 1, 1)["params"]
        self.weight_bytes = self.params * (4 if cfg.model.dtype == "float32" else 2)

    def decode(self, rows: int, new_tokens: int) -> float:
        """One batch of `rows` sequences: the prompt's forward, then new_tokens decode steps."""
        per_token = max(self.weight_bytes / GPU_BYTES_PER_S, 2 * self.params * rows / GPU_FLOPS)
        return 2 * self.params * rows * PROMPT_TOKENS / GPU_FLOPS + new_tokens * per_token

    def sample(self, problems: int, n: int, per_batch: int, new_tokens: int) -> float:
        """`problems` x `n` samples, per_batch problems at a time."""
        return math.ceil(problems / max(1, per_batch)) * self.decode(per_batch * n, new_tokens)

    def dev_check(self) -> float:
        t = self.cfg.train
        return self.sample(t.dev_problems, t.dev_samples, self.cfg.eval.problems_per_batch, self.cfg.eval.sampling.max_new_tokens)

    def train_step(self) -> float:
        t = self.cfg.train
        rows = t.problems_per_step * t.group_size
        return (self.decode(rows, t.sampling.max_new_tokens)
                + 4 * self.params * rows * (PROMPT_TOKENS + t.sampling.max_new_tokens) / GPU_FLOPS)

    def train(self, steps: int, dev_every: int) -> float:
        checks = (steps // dev_every + 1) if dev_every > 0 else 0
        return steps * self.train_step() + checks * self.dev_check()

    def single(self, stage: str) -> float:
        """A stage before the jobs: probe, select, lr-sweep (the base of a GPU config is downloaded, not built)."""
        c = self.cfg
        e = c.eval
        if stage == "probe":
            return sum(self.sample(*((c.probe.n_problems, c.probe.samples) if task == "countdown" else
                                     (c.probe.arith_problems, c.probe.arith_samples)), e.problems_per_batch, e.sampling.max_new_tokens)
                       for task in c.probe.tasks)
        if stage == "select":
            return self.sample(c.select.n_problems, c.select.samples, e.problems_per_batch, c.train.sampling.max_new_tokens)
        if stage == "lr-sweep" and study.sweep_runs(c):
            sweeps = len(c.conditions) if c.lr_sweep.per_condition else 1
            return sweeps * len(c.lr_sweep.candidates) * self.train(c.lr_sweep.steps, c.lr_sweep.steps if c.lr_sweep.rule == "dev" else 0)
        return 0.0

    def job(self, job) -> float:
        """A train, eval or tokens job (jobs.Job)."""
        c = self.cfg
        if job.stage == "train":
            return self.train(job.steps, c.train.dev_every)
        if job.stage == "tokens":
            per = c.eval.problems_per_batch
            return self.sample(c.tokens.n_problems, 1, per, c.eval.sampling.max_new_tokens) + \
                2 * math.ceil(c.tokens.n_problems / per) * self.decode(per, 0)
        es = job.argv[job.argv.index("--eval-set") + 1] if "--eval-set" in job.argv else "test"
        if es == "test":
            return self.sample(c.task.n_test, c.eval.n, c.eval.problems_per_batch, c.eval.sampling.max_new_tokens)
        s = c.eval_sets[es]
        return self.sample(s.n_problems, s.n, s.problems_per_batch, (s.sampling or c.eval.sampling).max_new_tokens)

    def describe(self, seconds: float) -> str:
        """A bound in seconds as the estimate it is: the practice range, the bound, the assumptions."""
        lo, hi = (seconds * f for f in PRACTICE)
        return (f"~{span(lo, hi)} (an estimate: {span(seconds)} at the bound, x{PRACTICE[0]:g}-{PRACTICE[1]:g} for "
                f"per-token overheads, on {DEVICE}; shape from {self.source})")


def span(lo: float, hi: float | None = None) -> str:
    """Seconds as hours (or minutes), one figure or a range: 9.8 h, 20-29 h, 40-60 min."""
    unit, div = ("h", 3600) if lo >= 3600 else ("min", 60)
    fmt = (lambda x: f"{x / div:.0f}") if lo >= 10 * div or unit == "min" else (lambda x: f"{x / div:.1f}")
    return f"{fmt(lo)} {unit}" if hi is None else f"{fmt(lo)}-{fmt(hi)} {unit}"


def for_config(cfg: config.Config, run: Path) -> CostModel | None:
    """The cost model of a GPU config (device auto or cuda), or None: a CPU config, or no known shape."""
    if cfg.device == "cpu":
        return None
    shape, source = model_shape(cfg, run)
    return CostModel(cfg, shape, source) if shape else None
