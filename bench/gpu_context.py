"""What bench/gpu_check.py's phases share: its sizes (a GPU's and --dry's), the device's peak memory,
and the context every phase runs in (the 0.5B-shaped model with its LoRA, the tokenizer, prompts and
stop ids drawn so that rows finish at a chosen rate)."""

import gc
import sys
import time
from dataclasses import dataclass

import torch

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

import countdown
from bases import qwen_shape
from method import sampler, static_decode
from method.model import apply_lora, render_prompts
from orchestration import config

GIB = 2**30
# The laptop every phase measures, whatever GPU runs the check: the study's budget (memory_gb) and
# what CUDA reports of an 8 GB laptop GPU's memory, less ~0.4 GiB of CUDA context.
LAPTOP_MEMORY_GB = 8.0
LAPTOP_GIB = 7.63 - 0.4
# --dry: the same code path at sizes a 2-core CPU runs in about a minute. The vocabulary, heads (14, 2
# for K and V) and tokenizer stay Qwen's; the width shrinks (head size 8). Decode graph stands for
# the GPU's auto, so the static decode runs (with EagerGraphs) where a GPU would use it.
DRY = [
    "train.problems_per_step=2",
    "train.group_size=4",
    "train.sampling.max_new_tokens=8",
    "eval.problems_per_batch=2",
    "eval.n=2",
    "eval.k_max=2",
    "eval.n_base=4",
    "eval.max_rows=4",
    "eval.sampling.max_new_tokens=16",
    "train.sampling.decode=graph",
    "eval.sampling.decode=graph",
    "train.dev_samples=2",
]
DRY_SHAPE = dict(hidden_size=112, intermediate_size=256)
DRY_MIN_BUCKET = (
    2  # with --dry: 8 rows compact to buckets 8, 4, 2 (static_decode.MIN_BUCKET is 8: a GPU's 128 rows give 5 buckets)
)


@dataclass
class Sizes:
    tokens_graph: int = 64  # phase 01 and the child
    tokens_decode: int = 384  # phase 04
    tokens_short: int = 128  # phase 06, the determinism runs
    tokens_profiled: int = 16  # phase 04's profiles
    layers: int = 24
    child_layers: int = 2
    invariance_problems: int = 4  # phase 08: 4 x 64 samples, one call of 256 rows against four of 64
    invariance_samples: int = 64
    invariance_rows: tuple = (256, 64)
    tail_rows: tuple = (128, 256)  # phase 09: rows of the full vocabulary
    tail_reps: int = 20
    tokens_paths: int = 128  # phases 10 and 11


DRY_SIZES = Sizes(
    tokens_graph=24,
    tokens_decode=16,
    tokens_short=8,
    tokens_profiled=8,
    layers=1,
    child_layers=1,
    invariance_problems=2,
    invariance_samples=4,
    invariance_rows=(8, 2),
    tail_rows=(4, 8),
    tail_reps=2,
    tokens_paths=2,
)


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class Peak:
    """Peak memory of the phase inside `with`: the CUDA allocator's (reset at the start), or on the
    CPU the growth of the process's resident high-water mark (reset through /proc/self/clear_refs)
    over what was resident at the start."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # Linux: reset the peak RSS (VmHWM) to the current RSS
            self.before = _status_kib("VmRSS")
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.allocated = torch.cuda.max_memory_allocated() / GIB
            self.reserved = torch.cuda.max_memory_reserved() / GIB
        else:
            self.allocated = self.reserved = (_status_kib("VmHWM") - self.before) * 1024 / GIB
        self.seconds = time.perf_counter() - self.t0


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


# ============================================================================= the model and its inputs


@dataclass
class Ctx:
    cfg: config.Config
    config_path: str
    dry: bool
    sizes: Sizes
    device: torch.device
    model: object = None
    tok: object = None
    prompts: list = None
    pad: int = 0
    measured_step_seconds: float | None = None


def build(ctx: Ctx, layers: int) -> None:
    """The random Qwen-shaped bf16 model with the config's LoRA (B random, non-zero), the tokenizer
    and the first problems_per_step training prompts."""
    cfg, device = ctx.cfg, ctx.device
    model = qwen_shape.random_model(layers, 0, device, **(DRY_SHAPE if ctx.dry else {}))
    for q in model.parameters():
        q.requires_grad_(False)
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, 0)
    g = torch.Generator(device=device).manual_seed(1)
    with torch.no_grad():
        for name, q in model.named_parameters():
            if "lora_B" in name:
                q.normal_(0, 0.02, generator=g)
    ctx.model, ctx.tok = model, qwen_shape.load_tokenizer()
    ctx.pad = ctx.tok.pad_token_id
    train_set, _ = countdown.make_splits(cfg.task.name, 64, 8, cfg.task.seed)
    ctx.prompts = render_prompts(
        ctx.tok, train_set[: cfg.train.problems_per_step], cfg.task.prompt_style, cfg.task.system_prompt
    )


def laptop_free_gib(model) -> float:
    """What `memory_gb: auto` reads on the 8 GB laptop once the model and its LoRA are loaded
    (model.free_memory_gib there): LAPTOP_GIB less the parameters' bytes. On a larger GPU the
    device's own free memory would choose another micro-batch (about 83 on an H200), which says
    nothing about the laptop."""
    return LAPTOP_GIB - sum(q.numel() * q.element_size() for q in model.parameters()) / GIB


def no_stop(ctx: Ctx) -> list[int]:
    return [10**9]  # no token has this id: every row runs to max_new_tokens


def choose_stops(ctx: Ctx, n: int, s: config.SamplingCfg, seed: int, hazard: float) -> tuple[list[int], float]:
    """Stop ids under which about `hazard` of the rows still decoding finish per token: a first decode
    with no stop gives the tokens the model draws in these prompts; a random subset of the
    vocabulary (seeded) is grown until that share of the drawn tokens falls in it. Returns the ids
    and the share measured on that decode."""
    probe = static_decode.sample_static(ctx.model, ctx.prompts, n, s, seed, no_stop(ctx), ctx.pad, graphs=None)
    drawn = torch.tensor([t for row in probe.tokens for t in row])
    order = torch.randperm(ctx.model.config.vocab_size, generator=torch.Generator().manual_seed(seed))
    lo, hi = 0, len(order)
    while hi - lo > 1:  # the smallest prefix of the permutation whose share of the drawn tokens reaches the hazard
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if torch.isin(drawn, order[:mid]).float().mean().item() >= hazard else (mid, hi)
    stops = order[:hi].tolist()
    return stops, torch.isin(drawn, order[:hi]).float().mean().item()


def same_samples(a: sampler.Samples, b: sampler.Samples) -> dict:
    rows = [i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x != y]
    return {
        "equal": a.tokens == b.tokens
        and a.truncated == b.truncated
        and a.logprobs == b.logprobs
        and a.entropy == b.entropy,
        "rows_with_other_tokens": len(rows),
        "first_such_row": rows[0] if rows else None,
        "logprobs_equal": a.logprobs == b.logprobs,
        "entropy_equal": a.entropy == b.entropy,
    }


def fresh_graphs() -> None:
    """Each phase starts with no decoder kept and graphs not given up, so it measures them itself."""
    static_decode.reset_decoders()
    static_decode.StaticStep.graphs_off = None


def free_decoders(device: torch.device) -> dict:
    """Drop this process's static decoders (their buffers and captured graphs, whose private pool
    then has no user) and, on CUDA, hand the allocator's cached blocks back, so that a peak measured
    next is the next call's alone. Returns how many decoders were dropped and, on CUDA, the memory
    allocated and reserved before and after."""
    out = {"decoders_dropped": len(static_decode._DECODERS["by_rows"])}
    if device.type == "cuda":
        torch.cuda.synchronize()
        out["allocated_gib_before"] = round(torch.cuda.memory_allocated() / GIB, 3)
        out["reserved_gib_before"] = round(torch.cuda.memory_reserved() / GIB, 3)
    fresh_graphs()
    gc.collect()  # a graph or a buffer held by a reference cycle
    if device.type == "cuda":
        torch.cuda.empty_cache()
        out["allocated_gib_after"] = round(torch.cuda.memory_allocated() / GIB, 3)
        out["reserved_gib_after"] = round(torch.cuda.memory_reserved() / GIB, 3)
    out["decoders_left"] = len(static_decode._DECODERS["by_rows"])
    return out
