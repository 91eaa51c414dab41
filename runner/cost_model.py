"""What the study's stages and jobs cost on a GPU before any of them has run: a lower bound from
the model's shape and an assumed device, and an uncalibrated range for what the bound leaves out.
Every figure it gives is labelled an estimate; once a run has measured its own step and evaluation
times (jobs.estimate_seconds) those are used instead. No torch, no weights: the shape comes from a
local config.json when there is one, else from the registered model's known shape.

The bound (the README's Cost section), in the parts --dry-run prints (PARTS): *compute*, decoding reads the weights
once per token for the whole batch (or, at large batches, does 2 x params FLOPs per row and token, whichever is
slower), and a training step's forward and backward cost 4 x params FLOPs per token (LoRA: no weight gradients; 6 x
with train.gradient_checkpointing, which recomputes each layer's forward); *kv*, each decoded token reads every
layer's keys and values: the static decode (graph) all PROMPT_TOKENS + max_new_tokens slots of its fixed cache, the
eager one the filled half on average; *tail*, the sampling tail moves tail_bytes per row and vocabulary entry (the
top-p sort of a whole row costs more than the weights at 128 rows); *launch*, a decoded token launches token_kernels
kernels, each at least EAGER_OP_S from the host (GRAPH_OP_S inside a CUDA graph), and only what that floor adds over
the device's own work is counted; *host*, a training micro-batch's kernels launched eagerly, beyond its compute. The
cut top-p's graph steps take its fallback on the device (cut_tail.cut_draw_static), so graphs stay on under it; a
call that needs more fallback rows than a step holds is redone eagerly, not priced (gpu_check counts them). Prompts
are PROMPT_TOKENS long.
Every response is priced at max_new_tokens, but where the run's probe has measured the base's responses at the
evaluation sampler on the study's task (probe_<task>.json, `response_tokens`): then a call at that sampler runs as
many steps as its longest row is expected to take (E max of `rows` draws from those lengths) with the rows still
decoding on average (rows x mean length / steps) in each (compaction in steps of CHECK_EVERY and buckets left out).
The same model gives the laptop's hours and an H200's class.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from orchestration import config, memory, study


@dataclass(frozen=True)
class Device:
    name: str
    bytes_per_s: float
    flops: float  # sustained bf16


# Assumed devices, not measured ones (bench/gpu_check.py measures a real one): an RTX 4060 Laptop's class,
# the study's own (PLAN.md: one 8 GB laptop GPU), and an H200's (4.8 TB/s HBM3e; ~70% of its 989 TFLOP/s dense bf16).
LAPTOP = Device("the laptop GPU: 256 GB/s, 30 TFLOP/s bf16 (assumed, not measured)", 256e9, 30e12)
H200 = Device("an H200's class: 4.8 TB/s, 700 TFLOP/s bf16 (assumed, not measured)", 4.8e12, 700e12)

# The sampling tail's bytes moved per row and vocabulary entry per decoded token, counted by reading the
# code (method/static_decode.fused_draw, decoding.filter_logits, method/cut_tail.py), not measured:
LSE_BYTES = 26  # the fused pass: each bf16 chunk read, its fp32 copy, max, exp, sums (log-prob, entropy)
RACE_BYTES = 20  # the one-generator race over the whole row: Exp(1) draws, their log, the score
TEMPERED_BYTES = 14  # the row's fp32 copy divided by the temperature (bf16 read, fp32 written, read, written)
SORT_BYTES = 195  # filter_logits' top-p: the tempered copy, a segmented radix sort of fp32 keys with int64
#                  ids (~4 passes of 24 bytes, plus ids and outputs: ~120), softmax (16), fp32 cumsum (8),
#                  mass before (12), the comparison (5), the unsort scatter (11), masked_fill (9)
KEYED_BYTES = 44  # decoding.keyed_draw over the whole row: softmax (16), the fp64 copy (12), fp64 cumsum (16)
CUT_BYTES = 46  # method/cut_tail.py: the tempered copy (14), the row's softmax (16), a radix top-1,025 select
#                 (~4 reads of fp32: 16); the cut's own work is on 1,025 entries, and a row the cut does not
#                 hold pays SORT_BYTES more (how often: measured by bench/gpu_check.py's tail phase)


def tail_bytes(s: config.SamplingCfg, keyed: bool) -> int:
    """Bytes per row and vocabulary entry the sampling tail moves per decoded token under settings s;
    keyed: each sample's own stream (eval.draw: sample), else one generator."""
    if s.temperature == 0:
        return LSE_BYTES
    if s.top_p >= 1.0 and s.top_k == 0:
        return LSE_BYTES + (TEMPERED_BYTES + KEYED_BYTES if keyed else RACE_BYTES)
    if s.tail == "cut":
        return LSE_BYTES + CUT_BYTES + (0 if keyed else 4)  # the row's Exp(1) draws, gathered at the candidates
    return LSE_BYTES + SORT_BYTES + (KEYED_BYTES if keyed else RACE_BYTES)


# Per-kernel floors (assumed, not measured; bench/gpu_check.py measures a device's seconds per kernel) and kernel
# counts: the non-view aten ops that bench/op_counts.py counts at dispatch on the CPU (Qwen2.5's layer layout in
# bf16, 2 against 4 layers; 2026-12-07 at 72f1bb3), each a kernel on a GPU at least: ~920 a decoded Qwen2.5-0.5B
# token, ~1,600 with LoRA unfolded (a reading of the code had guessed ~1,600 and ~2,500).
EAGER_OP_S = 10e-6  # an eagerly launched kernel's host dispatch (PyTorch eager: about 5-15 us)
GRAPH_OP_S = 2.8e-6  # a kernel replayed inside a CUDA graph
OPS_PER_LAYER = 36  # a decoder layer's kernels per decoded token, LoRA folded or off (counted: 35.8-36.0)
LORA_OPS = 4.0  # an unfolded LoRA target's kernels per layer and token (counted: x A, x B, the scale, the add)
TAIL_OPS = 68  # the embedding, final norm, head and sampling tail's kernels per token (counted: 35-68, the graph
# decode's at the evaluation sampler the most)
STEP_KERNELS = 3.2  # a training micro-batch's kernels over a decoded token's with LoRA (counted: 5,118 / 1,598)
PARTS = ("compute", "kv", "tail", "launch", "host")


def add(*parts: dict) -> dict:
    """Parts (seconds by PARTS' names) summed."""
    return {k: sum(p.get(k, 0.0) for p in parts) for k in PARTS}


def scale(p: dict, f: float) -> dict:
    return {k: v * f for k, v in p.items()}


def filtered(s: config.SamplingCfg) -> bool:
    return s.temperature > 0 and (s.top_p < 1.0 or s.top_k > 0)


DEVICE = LAPTOP.name
PRACTICE = (2.0, 3.0)  # what the bound leaves out (uncalibrated): the README's estimate until a GPU has run the study
PROMPT_TOKENS = 80  # the instruct prompt in Qwen's chat template is about 70 tokens

# Models the registered configs load from a hub, by id: their config.json's shape (Qwen2.5-0.5B-Instruct at
# revision 7ae5576, as qwen_shape.ARCH; a test checks the two agree).
REGISTERED_SHAPES = {
    "Qwen/Qwen2.5-0.5B-Instruct": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
    ),
}
SHAPE_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
)


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

    def __init__(
        self, cfg: config.Config, shape: dict, source: str, device: Device = LAPTOP, lengths: list[int] | None = None
    ):
        self.cfg, self.shape, self.source, self.device, self.vocab = cfg, shape, source, device, shape["vocab_size"]
        self.lengths = lengths  # the probe's response lengths at the evaluation sampler, or None (max_new_tokens)
        mc = SimpleNamespace(**shape)
        self.params = memory.estimate_memory(mc, cfg.lora.r, len(cfg.lora.targets), PROMPT_TOKENS, 1, 1, 1)["params"]
        self.dtype_bytes = 4 if cfg.model.dtype == "float32" else 2
        self.weight_bytes = self.params * self.dtype_bytes
        self.keyed = (
            cfg.eval.draw == "sample"
        )  # the evaluation-type calls' draw; training's rollouts draw from one generator
        try:  # the training step's micro-batch (memory_gb auto: unknown before a device is there; one taken)
            self.micro_batch = memory.micro_batch_choice(cfg, mc, PROMPT_TOKENS)[0]
        except ValueError:
            self.micro_batch = 1

    def on(self, device: Device) -> "CostModel":
        """The same model on another device."""
        return CostModel(self.cfg, self.shape, self.source, device, self.lengths)

    def graph(self, s: config.SamplingCfg | None) -> bool:
        """Whether the decode replays a CUDA graph: decode graph (or auto, on a GPU config), either tail."""
        return s is not None and s.decode in ("graph", "auto")

    def token_kernels(self, lora: bool) -> float:
        """Kernels one decoded token launches; lora: unfolded LoRA on every target."""
        per_layer = OPS_PER_LAYER + (len(self.cfg.lora.targets) * LORA_OPS if lora else 0)
        return self.shape["num_hidden_layers"] * per_layer + TAIL_OPS

    def kv_bytes(self, rows: int, s: config.SamplingCfg | None, static: bool) -> float:
        """Bytes of keys and values one decoded token reads over every layer: the fixed cache's every slot
        under the static decode (graphs or not), the filled half under the eager one."""
        sh, new = self.shape, (s.max_new_tokens if s is not None else 0)
        head_dim = sh["hidden_size"] // sh["num_attention_heads"]
        per_position = 2 * sh["num_hidden_layers"] * sh["num_key_value_heads"] * head_dim * self.dtype_bytes
        return rows * per_position * (PROMPT_TOKENS + (new if static else new / 2))

    def decode_parts(
        self,
        rows: int,
        new_tokens: float,
        s: config.SamplingCfg | None = None,
        keyed: bool = False,
        lora: bool = False,
        alive: float | None = None,
    ) -> dict:
        """One batch of `rows` sequences, in Parts: the prompt's forward, then new_tokens decode steps of `alive`
        rows (default rows), each reading the weights (or doing the FLOPs), the KV cache and the sampling tail of
        settings s, with the kernels' launch floor where it exceeds that work."""
        prompt = 2 * self.params * rows * PROMPT_TOKENS / self.device.flops
        rows = rows if alive is None else alive
        d, graph = self.device, self.graph(s)
        compute = max(self.weight_bytes / d.bytes_per_s, 2 * self.params * rows / d.flops)
        kv = self.kv_bytes(rows, s, s is not None and s.decode in ("graph", "auto")) / d.bytes_per_s
        tail = rows * self.vocab * tail_bytes(s, keyed) / d.bytes_per_s if s is not None else 0.0
        floor = self.token_kernels(lora) * (GRAPH_OP_S if graph else EAGER_OP_S)
        per_token = {"compute": compute, "kv": kv, "tail": tail, "launch": max(0.0, floor - compute - kv - tail)}
        return add({"compute": prompt}, scale(per_token, new_tokens))

    def decode(self, rows: int, new_tokens: int, s: config.SamplingCfg | None = None, keyed: bool = False) -> float:
        """decode_parts' seconds in all."""
        return sum(self.decode_parts(rows, new_tokens, s, keyed).values())

    def sample_parts(
        self, problems: int, n: int, per_batch: int, s: config.SamplingCfg, keyed: bool | None = None, lora=False
    ) -> dict:
        """`problems` x `n` samples, per_batch problems at a time (within eval.max_rows under draw: sample)."""
        keyed = self.keyed if keyed is None else keyed
        calls = memory.sampling_calls(problems, n, per_batch, self.cfg.eval.max_rows if keyed else None)
        parts = []
        for ps, js in calls:
            rows = len(ps) * len(js)
            steps, alive = self.call_steps(rows, s)
            parts.append(self.decode_parts(rows, steps, s, keyed, lora, alive))
        return add(*parts)

    def call_steps(self, rows: int, s: config.SamplingCfg) -> tuple[float, float]:
        """(decode steps, rows decoding on average) of one call of `rows` samples at s: max_new_tokens steps of
        every row; at the evaluation sampler with the probe's lengths, the expected longest of `rows` draws,
        E max = sum over t < T of 1 - F(t)^rows, and rows x mean length / that."""
        T = s.max_new_tokens
        if not self.lengths or s != self.cfg.eval.sampling or T == 0:
            return T, rows
        L = sorted(min(max(x, 1), T) for x in self.lengths)
        n, steps, i = len(L), 0.0, 0
        for t in range(T):
            while i < n and L[i] <= t:
                i += 1
            steps += 1 - (i / n) ** rows  # P(the longest of `rows` draws is longer than t)
        return steps, rows * (sum(L) / n) / steps

    def sample(self, problems: int, n: int, per_batch: int, s: config.SamplingCfg, keyed: bool | None = None) -> float:
        return sum(self.sample_parts(problems, n, per_batch, s, keyed).values())

    def train_step_parts(self) -> dict:
        """Rollouts (one generator; LoRA unfolded unless lora.fold_for_sampling), the forward and backward, and
        the host time of the micro-batches' eagerly launched kernels beyond their compute."""
        t, lora = self.cfg.train, not self.cfg.lora.fold_for_sampling
        rows = t.problems_per_step * t.group_size
        per_token = 6 if t.gradient_checkpointing else 4  # forward 2, backward 2 (no weight gradients), a recompute 2
        fwd_bwd = per_token * self.params * rows * (PROMPT_TOKENS + t.sampling.max_new_tokens) / self.device.flops
        batches = math.ceil(rows / min(rows, self.micro_batch))
        launch = STEP_KERNELS * self.token_kernels(True) * EAGER_OP_S  # one micro-batch's kernels
        host = batches * max(0.0, launch - fwd_bwd / batches)
        return add(
            self.decode_parts(rows, t.sampling.max_new_tokens, t.sampling, False, lora),
            {"compute": fwd_bwd, "host": host},
        )

    def train_parts(self, steps: int, dev_every: int) -> dict:
        t, lora = self.cfg.train, not self.cfg.lora.fold_for_sampling
        checks = (steps // dev_every + 1) if dev_every > 0 else 0
        dev = self.sample_parts(
            t.dev_problems, t.dev_samples, self.cfg.eval.problems_per_batch, self.cfg.eval.sampling, lora=lora
        )
        return add(scale(self.train_step_parts(), steps), scale(dev, checks))

    def train(self, steps: int, dev_every: int) -> float:
        return sum(self.train_parts(steps, dev_every).values())

    def single(self, stage: str) -> float:
        """A stage before the jobs: probe, select, lr-sweep (the base of a GPU config is downloaded, not built)."""
        c = self.cfg
        e = c.eval
        if stage == "probe":
            return sum(
                self.sample(
                    *(
                        (c.probe.n_problems, c.probe.samples)
                        if task == "countdown"
                        else (c.probe.arith_problems, c.probe.arith_samples)
                    ),
                    e.problems_per_batch,
                    e.sampling,
                )
                for task in c.probe.tasks
            )
        if stage == "select":
            return self.sample(
                c.select.n_problems,
                c.select.samples,
                e.problems_per_batch,
                replace(c.train.sampling, temperature=c.select.temperature),
            )
        if stage == "lr-sweep" and study.sweep_runs(c):
            sweeps = len(c.conditions) if c.lr_sweep.per_condition else 1
            return (
                sweeps
                * len(c.lr_sweep.candidates)
                * self.train(c.lr_sweep.steps, c.lr_sweep.steps if c.lr_sweep.rule.startswith("dev") else 0)
            )
        return 0.0

    def job_parts(self, job) -> dict:
        """A train, eval or tokens job (jobs.Job), in Parts."""
        c = self.cfg
        if job.stage == "train":
            return self.train_parts(job.steps, c.train.dev_every)
        lora = "--adapter" in job.argv and not c.lora.fold_for_sampling
        if job.stage == "tokens":
            per = c.eval.problems_per_batch
            greedy = replace(c.eval.sampling, temperature=0.0)
            forwards = 2 * math.ceil(c.tokens.n_problems / per)
            return add(
                self.sample_parts(c.tokens.n_problems, 1, per, greedy, keyed=False, lora=lora),
                scale(self.decode_parts(per, 0), forwards),
            )
        es = job.argv[job.argv.index("--eval-set") + 1] if "--eval-set" in job.argv else "test"
        if es == "test":
            n = job.samples // c.task.n_test if job.samples else c.eval.n  # the base's job draws eval.n_base each
            return self.sample_parts(c.task.n_test, n, c.eval.problems_per_batch, c.eval.sampling, lora=lora)
        s = c.eval_sets[es]
        return self.sample_parts(s.n_problems, s.n, s.problems_per_batch, s.sampling or c.eval.sampling, lora=lora)

    def job(self, job) -> float:
        return sum(self.job_parts(job).values())

    def describe(self, seconds, fast: float | None = None) -> str:
        """A bound in seconds as the estimate it is: the practice range, the bound, the assumptions, on
        this model's device and (fast: the same work's bound there) on an H200's class. seconds may be
        the pair (this device's, the H200's) that both() gives."""
        if isinstance(seconds, tuple):
            seconds, fast = seconds
        lo, hi = (seconds * f for f in PRACTICE)
        text = (
            f"~{span(lo, hi)} (an estimate: {span(seconds)} at the bound, x{PRACTICE[0]:g}-{PRACTICE[1]:g} for "
            f"what it leaves out (uncalibrated; set before launches and host time were counted), on {self.device.name}"
        )
        if fast is not None:
            text += f"; ~{span(*(fast * f for f in PRACTICE))} on {H200.name}"
        return (
            text
            + f"; the KV reads, the sampling tail, kernel launches and host time counted; shape from {self.source})"
        )

    def both(self, fn) -> tuple[float, float]:
        """fn(model) on this device and on an H200's class: the pair describe() states."""
        return fn(self), fn(self.on(H200))


def kind(job) -> str:
    """A job's line in the breakdown: training, tokens, or an evaluation of the base or of trained models."""
    if job.stage != "eval":
        return {"train": "training"}.get(job.stage, job.stage)
    return "evaluations, trained models" if "--adapter" in job.argv else "evaluations, the base"


def breakdown(cost: CostModel, jobs) -> list[str]:
    """--dry-run's lines: where the bound's hours go, per kind of job and part, on the assumed laptop GPU and an
    H200's class side by side, then what the model assumes."""
    if not jobs:
        return []
    rows = {}
    for j in jobs:
        here, fast = (c.job_parts(j) for c in (cost, cost.on(H200)))
        a, b = rows.get(kind(j), ({}, {}))
        rows[kind(j)] = (add(a, here), add(b, fast))

    def words(p: dict) -> str:
        return f"{sum(p.values()) / 3600:.1f} h (" + ", ".join(f"{k} {p[k] / 3600:.1f}" for k in PARTS) + ")"

    out = ["  where the bound's hours go, the laptop GPU | an H200's class (hours by part):"]
    out += [f"    {k}: {words(a)} | {words(b)}" for k, (a, b) in sorted(rows.items())]
    lengths = cost.lengths
    said = (
        f"the evaluation sampler's responses by the probe's {len(lengths)} lengths (mean "
        f"{sum(lengths) / len(lengths):.0f} tokens; a call runs to its longest row), the rest"
        if lengths
        else "every response"
    )
    out.append(
        f"    assumed: {said} {cost.cfg.eval.sampling.max_new_tokens} tokens (max_new_tokens), prompts "
        f"{PROMPT_TOKENS}; a kernel {EAGER_OP_S * 1e6:g} us launched eagerly, {GRAPH_OP_S * 1e6:g} us in a CUDA "
        f"graph; {cost.token_kernels(False):.0f} kernels a decoded token ({cost.token_kernels(True):.0f} with LoRA "
        f"unfolded; counted at dispatch on a CPU, bench/op_counts.py); training micro-batch {cost.micro_batch}; graphs "
        "on under either top-p tail"
    )
    return out


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
    return CostModel(cfg, shape, source, lengths=probe_lengths(cfg, run)) if shape else None


def probe_lengths(cfg: config.Config, run: Path) -> list[int] | None:
    """The base's response lengths (new tokens) the run's probe measured at the evaluation sampler on the
    study's task, or None (no probe yet, or one made before it recorded them)."""
    path = Path(run) / f"probe_{cfg.task.name}.json"
    if not path.exists():
        return None
    lengths = [x for rs in json.loads(path.read_text()).get("response_tokens", []) for x in rs]
    return lengths or None
