"""Loading a causal LM (device, dtype, tokenizer, stop and pad ids, prompts), the hand-written LoRA
(the layer, apply, switch off, fold, save and load in PEFT's format), and the completion
log-probabilities the loss is made of.

LoRA is written by hand so that every line of the method can be read; tests check it against
PEFT (same outputs, same adapter files).
"""

from __future__ import annotations

import json
import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn as nn

import countdown
from orchestration import config
from orchestration.memory import LOGPROB_CHUNK
from orchestration.provenance import readable_by_all

# ============================================================================= loading


def pick_device(cfg: config.Config) -> torch.device:
    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def free_memory_gib(device: torch.device) -> float:
    """What this process could still allocate now: a GPU's free memory plus what this process's
    allocator holds reserved but not allocated (mem_get_info counts that as used, so a worker's
    later jobs would see less than its first); a CPU's MemAvailable (Linux)."""
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return (torch.cuda.mem_get_info(device)[0] + cached) / 2**30
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) / 2**20


def setup_torch(cfg: config.Config) -> None:
    from transformers.utils import logging as hf_logging

    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    # Bit-identical resume is tested on the CPU; on CUDA cuBLAS needs this workspace setting for its
    # deterministic kernels, and some attention backward kernels stay nondeterministic.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    set_determinism(cfg.determinism)
    # lora.tf32: on CUDA the fp32 matrix products in TF32 (validated: only in a bf16 model, where the
    # only fp32 products are LoRA's, its weights and the fp32 copies of its inputs). torch 2.13's API;
    # allow_tf32 is the deprecated one, and reading it after this raises.
    precision = "tf32" if cfg.lora.tf32 else "ieee"
    torch.backends.cuda.matmul.fp32_precision = precision
    torch.backends.cudnn.conv.fp32_precision = precision
    hf_logging.disable_progress_bar()  # "Loading weights" bars on every load; our own bars show progress


def set_determinism(mode: str) -> None:
    """The `determinism` setting. full: deterministic kernels where torch has them (a warning where
    it has none), and every torch.empty filled with NaN, so a read of unwritten memory shows (the
    CPU runs' setting); kernels: the same kernels without that fill (on a GPU the sampling tail's
    buffers are then written once per token, not twice); off: torch's defaults (on CUDA, atomic
    index_add_/index_put_ instead of sorting ones)."""
    import torch.utils.deterministic

    torch.use_deterministic_algorithms(mode != "off", warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = mode == "full"


def load_tokenizer(path: str, revision: str | None = None):
    """The model's tokenizer. A folder whose tokenizer_config names PreTrainedTokenizerFast is
    loaded as exactly that class: AutoTokenizer would pick Qwen2's class from config.json and
    silently change how a character-level vocabulary splits text (FACTS.md)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tc = Path(path) / "tokenizer_config.json"
    if tc.exists() and json.loads(tc.read_text()).get("tokenizer_class") in (
        "PreTrainedTokenizerFast",
        "TokenizersBackend",
    ):
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path, revision=None if os.path.isdir(path) else revision)


def load_model(cfg: config.Config, path: str, device: torch.device):
    """A frozen causal LM and its tokenizer. No sampling setting of its generation_config is
    used: the sampler takes every setting from our config (see sample(); stop_ids() reads the
    stop tokens only)."""
    from transformers import AutoModelForCausalLM

    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[cfg.model.dtype]
    if bad := bf16_problem(cfg, device):
        raise config.ConfigError(bad)
    if dtype == torch.bfloat16 and device.type == "cpu" and native_bf16() is False:  # model.slow_bf16: meant
        print(
            "note: model.dtype bfloat16 on a CPU without native bf16, as model.slow_bf16 allows: its matrix products "
            "run about 90x slower than float32 here",
            file=sys.stderr,
            flush=True,
        )
    revision = None if os.path.isdir(path) else cfg.model.revision
    # sdpa (transformers' default, named so the sampler's boolean decode mask always fits it)
    model = AutoModelForCausalLM.from_pretrained(path, revision=revision, dtype=dtype, attn_implementation="sdpa").to(
        device
    )
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    tok = load_tokenizer(path, revision)
    return model, tok


def bf16_problem(cfg: config.Config, device: torch.device) -> str | None:
    """Why this config's model should not be loaded in bfloat16 on this device, or None: a CPU
    without native bf16 matrix products, unless model.slow_bf16 says the slow run is meant."""
    if cfg.model.dtype != "bfloat16" or device.type != "cpu" or cfg.model.slow_bf16 or native_bf16() is not False:
        return None
    return (
        "model.dtype bfloat16 on a CPU without native bf16 (no avx512_bf16 or amx_bf16 in /proc/cpuinfo): its matrix "
        "products run about 90x slower than float32 here (0.7 vs 64 GFLOP/s measured); set model.dtype=float32 "
        "with lora.tf32=false (byte-reproducible across CPUs), or model.slow_bf16=true to run it anyway"
    )


def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """Does this x86 CPU multiply bf16 natively (avx512_bf16 or amx_bf16)? None when it cannot be told
    (no /proc/cpuinfo, or not an x86 CPU)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in open(cpuinfo) if line.startswith("flags")), None)
    except OSError:
        return None
    if not flags or "sse2" not in flags:
        return None
    return "avx512_bf16" in flags or "amx_bf16" in flags


def checkpoint_layers(model) -> int:
    """Gradient checkpointing on every decoder layer (train.gradient_checkpointing): each layer's forward runs
    under torch.utils.checkpoint (non-reentrant) whenever gradients are on, and again in the backward pass, so
    autograd keeps the layer's input, not its activations. transformers checkpoints a layer only in training
    mode; the flag is set on the layer alone, so its children (attention, MLP, dropout) stay in eval mode and
    compute what they computed before. Returns the number of layers."""
    from functools import partial

    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    for layer in layers:
        casts = tuple({id(m.cast): m.cast for m in layer.modules() if isinstance(m, LoRALinear)}.values())
        layer.gradient_checkpointing = True
        layer._gradient_checkpointing_func = partial(checkpoint_clearing, casts=casts)
        layer.training = True  # not .train(): that would switch its children too
    return len(layers)


def checkpoint_clearing(fn, *args, casts: tuple = (), **kwargs):
    """torch.utils.checkpoint (non-reentrant) of fn, whose LoRA fp32 input copies are cleared whenever fn ends:
    after the forward and after the backward pass's recompute (which may stop early: hence finally), so none
    outlives its layer's turn."""
    from torch.utils.checkpoint import checkpoint

    def run(*a, **k):
        try:
            return fn(*a, **k)
        finally:
            for c in casts:
                c.clear()

    return checkpoint(run, *args, use_reentrant=False, **kwargs)


def load_policy(cfg: config.Config, path: str, adapter: str | Path | None, device: torch.device):
    """load_model, then (when `adapter` is given) the adapter's LoRA applied and loaded."""
    model, tok = load_model(cfg, path, device)
    if adapter is not None:
        acfg = adapter_config(adapter)
        apply_lora(model, acfg["r"], acfg["lora_alpha"], acfg["target_modules"], 0)
        load_adapter(model, adapter)
    return model, tok


def stop_ids(model, tok) -> list[int]:
    """Token ids that end a response: the EOS of the tokenizer, of the model config and of the
    generation config (Qwen2.5-Instruct's adds <|endoftext|> to <|im_end|>). Only the stop set is
    read from the generation config: a stop token ends a response, it does not reshape the
    distribution the samples come from."""
    ids = set()
    gen = getattr(model, "generation_config", None)
    for x in (tok.eos_token_id, getattr(model.config, "eos_token_id", None), getattr(gen, "eos_token_id", None)):
        if isinstance(x, int):
            ids.add(x)
        elif isinstance(x, (list, tuple)):
            ids.update(x)
    if not ids:
        raise ValueError("the tokenizer and model config name no EOS token")
    return sorted(ids)


def pad_id(tok) -> int:
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


def render_prompts(tok, problems, style: str, system: str | None = countdown.SYSTEM_PROMPT) -> list[list[int]]:
    """Token ids of each problem's chat prompt (countdown.prompt_messages, rendered by the model's
    chat template), with the assistant turn opened."""
    out = []
    for p in problems:
        text = tok.apply_chat_template(
            countdown.prompt_messages(p, style, system), tokenize=False, add_generation_prompt=True
        )
        out.append(tok(text, add_special_tokens=False)["input_ids"])
    return out


# ============================================================================= LoRA


class SharedCast:
    """The fp32 copy of a LoRA layer's input, shared by the LoRA layers of one parent module:
    q/k/v read the same hidden state, as do gate/up, so a bf16 base casts it once, not three
    times (an fp32 base casts nothing). The copy is remade whenever the input is another tensor
    (o_proj's, or the next forward's); holding the last input keeps its identity from being reused.
    apply_lora clears every cast after each forward of the model, so none outlives it (autograd
    keeps what backward needs by its own references)."""

    def __init__(self):
        self.src, self.out = None, None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x is not self.src:
            self.src, self.out = x, x.to(torch.float32)
        return self.out

    def clear(self) -> None:
        self.src, self.out = None, None


class LoRALinear(nn.Module):
    """y = W x + (alpha / r) * B A x, with W frozen, A (r, in) random, B (out, r) zero, so the
    wrapped layer starts out exactly equal to W. Sub-module names follow PEFT (base_layer,
    lora_A, lora_B) so our state_dict keys are PEFT's keys."""

    def __init__(
        self, base: nn.Linear, r: int, alpha: float, generator: torch.Generator, cast: "SharedCast | None" = None
    ):
        super().__init__()
        self.base_layer = base
        self.cast = cast or SharedCast()
        self.lora_A = nn.Linear(base.in_features, r, bias=False, device=base.weight.device, dtype=torch.float32)
        self.lora_B = nn.Linear(r, base.out_features, bias=False, device=base.weight.device, dtype=torch.float32)
        self.scaling = alpha / r
        # A: PEFT's default init (kaiming-uniform with a = sqrt(5)), drawn from our own generator
        bound = 1.0 / math.sqrt(base.in_features)
        with torch.no_grad():
            a = torch.rand(r, base.in_features, generator=generator) * 2 * bound - bound
            self.lora_A.weight.copy_(a)
            self.lora_B.weight.zero_()

    enabled = True  # switched off by lora_disabled(): the frozen base, with no second copy of its weights

    def forward(self, x):  # x: (..., in)
        y = self.base_layer(x)  # (..., out), base dtype
        if not self.enabled:
            return y
        delta = self.lora_B(self.lora_A(self.cast(x)))  # (..., out), fp32 LoRA
        return y + (self.scaling * delta).to(y.dtype)


def apply_lora(model: nn.Module, r: int, alpha: float, targets: list[str], seed: int) -> list[str]:
    """Wrap every nn.Linear whose name ends in one of `targets`; returns the wrapped names.
    LoRA weights are kept in fp32 even on a bf16 base: AdamW updates of ~1e-5 relative size
    vanish in bf16's 8-bit mantissa."""
    g = torch.Generator().manual_seed(seed)
    names = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    )  # for the error below
    wrapped, casts = [], []
    for name, module in list(model.named_modules()):
        cast = SharedCast()  # one per parent module (the attention block, the MLP)
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and child_name in targets:
                setattr(module, child_name, LoRALinear(child, r, alpha, g, cast))
                wrapped.append(full)
                casts.append(cast)

    def clear_casts(*_):  # no fp32 copy outlives a forward (a hook's return value would replace the output: None)
        for c in casts:
            c.clear()

    unmatched = [t for t in targets if not any(w.rsplit(".", 1)[-1] == t for w in wrapped)]
    if unmatched:
        raise ValueError(
            f"lora.targets {unmatched} match no linear layer of the model; its linear layers are named "
            f"{', '.join(names)} (set lora.targets to those of attention and MLP)"
        )
    model.register_forward_hook(clear_casts)
    for n, p in model.named_parameters():
        p.requires_grad_("lora_" in n)
    return wrapped


@contextmanager
def lora_disabled(model: nn.Module):
    """The base model itself, for the KL anchor's reference log-probabilities: every LoRA layer
    returns its frozen base layer's output while inside this block."""
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    for m in layers:
        m.enabled = False
    try:
        yield model
    finally:
        for m in layers:
            m.enabled = True


@contextmanager
def lora_folded(model: nn.Module):
    """For sampling only (no gradient): every LoRA layer runs as one linear layer whose weight is
    W + (alpha/r) B A, computed in fp32 and stored in the base's dtype, so a decoded token pays
    no LoRA kernels (7 x layers x 6 of them otherwise). The frozen W is kept and put back on exit;
    the folded copies (the wrapped layers' size, in the base dtype) live only inside the block.
    Rounding the sum to bf16 moves the policy: bench/fold_kl.py measures by how much, and
    `lora.fold_for_sampling` (off unless a config turns it on) decides whether training rollouts,
    dev checks and evaluations use it. A layer switched off (lora_disabled) stays the base.
    Everything is put back on exit, also when folding itself fails partway."""
    saved = []  # (layer, its frozen weight, whether its LoRA was on), for every layer touched so far
    try:
        with torch.no_grad():
            for m in (m for m in model.modules() if isinstance(m, LoRALinear)):
                w = m.base_layer.weight
                saved.append((m, w, m.enabled))
                if m.enabled:
                    folded = w.float() + m.scaling * (m.lora_B.weight @ m.lora_A.weight)  # (out, in) fp32
                    m.base_layer.weight = nn.Parameter(folded.to(w.dtype), requires_grad=False)
                    m.enabled = False
        yield model
    finally:
        for m, w, enabled in saved:
            m.base_layer.weight = w
            m.enabled = enabled


def lora_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in model.state_dict().items() if ".lora_A." in k or ".lora_B." in k}


def save_adapter(model: nn.Module, folder: Path, cfg: config.Config, base_path: str) -> None:
    """PEFT's adapter format: adapter_config.json + adapter_model.safetensors with PEFT's key
    names (base_model.model.<module>.lora_A.weight), so PeftModel.from_pretrained loads it."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"base_model.model.{k}": v.contiguous().cpu() for k, v in lora_state(model).items()}
    save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    adapter_cfg = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_path,
        "revision": None if os.path.isdir(base_path) else cfg.model.revision,
        "r": cfg.lora.r,
        "lora_alpha": cfg.lora.alpha,
        "lora_dropout": 0.0,
        "target_modules": cfg.lora.targets,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "init_lora_weights": True,
        "modules_to_save": None,
    }
    (folder / "adapter_config.json").write_text(json.dumps(adapter_cfg, indent=1) + "\n")
    readable_by_all(folder)


def load_adapter(model: nn.Module, folder: str | Path) -> None:
    """Load a PEFT-format adapter into a model already wrapped by apply_lora (same r, targets)."""
    from safetensors.torch import load_file

    tensors = load_file(str(Path(folder) / "adapter_model.safetensors"))
    own = lora_state(model)
    state = {k.removeprefix("base_model.model."): v for k, v in tensors.items()}
    missing, unexpected = set(own) - set(state), set(state) - set(own)
    if missing or unexpected:
        raise ValueError(
            f"{folder}: adapter does not fit the model (missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )
    model.load_state_dict(state, strict=False)


def adapter_config(folder: str | Path) -> dict:
    return json.loads((Path(folder) / "adapter_config.json").read_text())


# ============================================================================= log-probs


def last_positions(T: int, k: int, device) -> torch.Tensor:
    """The last k of T positions, as an index tensor for `logits_to_keep`. An int k makes
    transformers run lm_head on hidden[:, -k:], a non-contiguous view, and on the CPU torch's
    batched matmul then copies the whole (V, H) weight once per row (1.4 s and 272 MB per row
    at Qwen's 151,936 x 896); indexing gathers the small hidden slice instead. The same logits
    up to their last bits (the other matmul path rounds differently now and then: PLAN.md
    change 22)."""
    return torch.arange(T - k, T, device=device)


def pack(prompts: list[list[int]], completions: list[list[int]], pad: int):
    """[left-padded prompt | completion, right-padded] rows, and the completion mask built from
    lengths (never from token values: pad may equal EOS, and an emitted EOS is trained).
    Returns ids (b, Lp+Lc), attention mask (b, Lp+Lc), positions (b, Lp+Lc), completion mask (b, Lc)."""
    b = len(prompts)
    Lp, Lc = max(len(p) for p in prompts), max(max(len(c) for c in completions), 1)
    ids = torch.full((b, Lp + Lc), pad, dtype=torch.long)
    attn = torch.zeros((b, Lp + Lc), dtype=torch.long)
    cmask = torch.zeros((b, Lc), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, Lp - len(p) : Lp] = torch.tensor(p)
        ids[i, Lp : Lp + len(c)] = torch.tensor(c, dtype=torch.long)
        attn[i, Lp - len(p) : Lp + len(c)] = 1
        cmask[i, : len(c)] = 1.0
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return ids, attn, pos, cmask


class TokenLogProbs(torch.autograd.Function):
    """log softmax(logits)[target] at positions 0..Lc-1 of logits (b, Lc+1, V), in fp32, made
    a chunk of positions at a time: forward keeps only the logits it was given and logsumexp
    (b, Lc); backward writes the logits' gradient chunk by chunk. Autograd through
    `logits.float()`, logsumexp and gather would keep an fp32 copy of all the logits and build
    two more fp32 tensors of that size in backward: 16 bytes per completion position and
    vocabulary entry for a bf16 model, 4 here (for one micro-batch row of the 0.5B study, 385
    positions x 151,936 entries: 0.22 GiB instead of 0.87). The numbers are the same ops in
    the same order, per chunk: same values and gradients on the CPU (tests/test_model.py;
    a GPU's reduction kernels may split rows differently, untested)."""

    CHUNK = LOGPROB_CHUNK  # elements of one chunk's fp32 temporaries (64 MB each; orchestration/memory.py counts three)

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        b, T, V = logits.shape
        Lc = T - 1
        step = max(1, TokenLogProbs.CHUNK // (b * V))
        lse = torch.empty((b, Lc), dtype=torch.float32, device=logits.device)
        logp = torch.empty((b, Lc), dtype=torch.float32, device=logits.device)
        for c in range(0, Lc, step):
            e = min(c + step, Lc)
            x = logits[:, c:e].float()  # (b, chunk, V)
            lse[:, c:e] = x.logsumexp(-1)
            logp[:, c:e] = x.gather(-1, targets[:, c:e, None]).squeeze(-1) - lse[:, c:e]
        ctx.save_for_backward(logits, targets, lse)
        return logp

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        b, T, V = logits.shape
        step = max(1, TokenLogProbs.CHUNK // (b * V))
        grad = torch.zeros_like(logits)  # (b, Lc+1, V): the last position feeds no log-prob
        for c in range(0, T - 1, step):
            e = min(c + step, T - 1)
            x = logits[:, c:e].float()
            gc = g[:, c:e]
            d = (-gc).unsqueeze(-1) * (x - lse[:, c:e].unsqueeze(-1)).exp()  # logsumexp's backward
            d.scatter_add_(-1, targets[:, c:e, None], gc.unsqueeze(-1))  # gather's
            grad[:, c:e] = d
        return grad, None


def completion_logprobs(model, ids, attn, pos, Lc: int, with_entropy: bool = False):
    """log pi(token) for the last Lc positions: (b, Lc), and with_entropy the full-vocabulary
    entropy of pi at each of them: (b, Lc) (else None). Only the completion's logits are made
    (logits_to_keep); the log-probabilities come from TokenLogProbs, which upcasts to fp32 a
    chunk at a time. The entropy needs softmax times logits over the whole vocabulary, so with
    it the logits are upcast all at once."""
    keep = last_positions(ids.shape[1], Lc + 1, ids.device)
    logits = model(
        input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=keep
    ).logits  # (b, Lc+1, V)
    targets = ids[:, -Lc:]  # (b, Lc)
    if not with_entropy:
        return TokenLogProbs.apply(logits, targets), None
    logits = logits[:, :-1].float()  # (b, Lc, V)
    lse = logits.logsumexp(-1)  # (b, Lc)
    logp = logits.gather(-1, targets[..., None]).squeeze(-1) - lse  # (b, Lc)
    return logp, lse - (logits.softmax(-1) * logits).sum(-1)  # (b, Lc): H = logsumexp - E_pi[logit]


def memory_state(device: torch.device) -> str:
    """What the device had when memory ran out: its total and free memory, this process's peak."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return (
            f"on {device} ({total / 2**30:.1f} GiB in all, {free / 2**30:.1f} GiB free; this process peaked at "
            f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB allocated, "
            f"{torch.cuda.max_memory_reserved(device) / 2**30:.1f} "
            "GiB reserved)"
        )
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    return (
        f"on the CPU ({free_memory_gib(device):.1f} GiB available now; this process peaked at {peak:.1f} GiB resident)"
    )


def out_of_memory(e: BaseException) -> bool:
    """CUDA's out-of-memory error, or the CPU allocator's."""
    return isinstance(e, torch.OutOfMemoryError) or "can't allocate memory" in str(e)


def peak_memory_mb(device: torch.device) -> tuple[float, float]:
    """(allocated, reserved) peak MiB of this step on CUDA; on a CPU the process's peak RSS, twice."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, torch.cuda.max_memory_reserved(device) / 2**20
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB -> MiB (process peak RSS)
    return rss, rss
