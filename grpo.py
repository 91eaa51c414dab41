"""LoRA, sampling, Dr. GRPO training, pass@k evaluation, problem selection and the LR sweep.

Dr. GRPO (Liu et al., arXiv 2503.20783) as this study runs it. Departures from GRPO
(Shao et al., arXiv 2402.03300), each tagged [D1]..[D5] at the line that makes it:

  1. [D1] Advantage = reward - group mean. No division by the group's std, which up-weights
          groups that are nearly all right or all wrong.
  2. [D2] The loss is summed over response tokens and divided by a constant,
          problems x group size x max_new_tokens, not by each response's length, which
          rewards long wrong answers and short right ones.
  3. [D3] No KL term to a reference model.
  4. [D4] One sampling, one update: the policy that sampled is the policy being updated, so
          the PPO ratio is exactly 1 and clipping never acts; the loss is the plain
          policy-gradient surrogate -A * log pi.
  5. [D5] The reward is the strict score only (answer inside <answer> tags); no format reward.

The controls of PLAN.md section 4 are entries of the condition registry, read by the same loop
(no per-condition branch): `kl` adds the k3 KL anchor to the base (departing from [D3]),
`entropy` an entropy bonus, `reward: format` the format-only reward (departing from [D5]), and
`method` changes only which completions are trained and with which weight, all through the same
surrogate -sum(A * log pi) / constant:
  grpo  the policy's samples, A = reward - group mean               [D1]
  rft   the policy's samples, A = reward (the correct ones, weight 1; rejection-sampling fine-tuning)
  sft   gold solutions written by code (countdown.gold_solution), A = 1; no rollouts

LoRA and the sampler are written by hand so that every line of the method can be read here;
tests check them against PEFT and `model.generate`.

    python grpo.py train   --config configs/smoke.yaml --run RUN --condition many --seed 0
    python grpo.py eval    --config configs/smoke.yaml --run RUN [--adapter RUN/train_many_s0/step_006] [--eval-set wide]
    python grpo.py tokens  --config configs/smoke.yaml --run RUN --adapter RUN/train_many_s0/step_006
    python grpo.py select | lr-sweep | probe --config ... --run RUN
"""
from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import io
import json
import math
import os
import re
import shutil
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

import config as C
import countdown
from analyze_b import pass_at_k  # one estimator for the whole study (analyze_b imports no torch)
from provenance import atomic_replace_dir, atomic_write_json, atomic_write_text, file_sha256, provenance, stage_hash

ROOT = Path(__file__).resolve().parent

# ============================================================================= seeds


def seed_for(*parts) -> int:
    """A 63-bit seed from explicit parts (task or training seed, stage, step, problem id, ...)."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big") >> 1


# ============================================================================= model & tokenizer


def pick_device(cfg: C.Config) -> torch.device:
    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def setup_torch(cfg: C.Config) -> None:
    from transformers.utils import logging as hf_logging

    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    # Deterministic kernels where torch has them. Bit-identical resume is tested on the CPU; on CUDA
    # cuBLAS needs this workspace setting, and some attention backward kernels stay nondeterministic.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    hf_logging.disable_progress_bar()  # "Loading weights" bars on every load; our own bars show progress


def builds_base(cfg: C.Config) -> bool:
    """True when the `base` stage makes the base model (the CPU world, the rehearsal)."""
    return cfg.model.build is not None or cfg.model.qwen_shape is not None


def model_path(cfg: C.Config, run: str | Path | None) -> str:
    """The base model: the run's own `base_model/` when the config builds one, else model.path."""
    if builds_base(cfg):
        key = "model.build" if cfg.model.build is not None else "model.qwen_shape"
        if run is None:
            raise C.ConfigError(f"{key}: this config builds its own base model; pass --run RUN (the folder holding base_model/)")
        path = Path(run) / "base_model"
        if not (path / "config.json").exists():
            raise C.ConfigError(f"{key}: no base model at {path}; run `pipeline.py --stage base` first")
        return str(path)
    return cfg.model.path


def check_model_reachable(cfg: C.Config) -> None:
    """Fail early, in one line, when model.path can be neither found locally nor downloaded:
    a hub id with no network and no local cache, a misspelt id, a missing revision. Reads only
    the model's config.json (from the cache, or the hub when it can be reached)."""
    if builds_base(cfg) or os.path.isdir(os.path.expanduser(cfg.model.path)):
        return
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(cfg.model.path, revision=cfg.model.revision)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise C.ConfigError(
            f"model.path {cfg.model.path!r} (model.revision {cfg.model.revision[:12]}) cannot be loaded ({first}): download it "
            f"first (huggingface-cli download {cfg.model.path} --revision {cfg.model.revision}) or set model.path to a local model folder")


def load_tokenizer(path: str, revision: str | None = None):
    """The model's tokenizer. A folder whose tokenizer_config names PreTrainedTokenizerFast is
    loaded as exactly that class: AutoTokenizer would pick Qwen2's class from config.json and
    silently change how a character-level vocabulary splits text (FACTS.md)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tc = Path(path) / "tokenizer_config.json"
    if tc.exists() and json.loads(tc.read_text()).get("tokenizer_class") in ("PreTrainedTokenizerFast", "TokenizersBackend"):
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path, revision=None if os.path.isdir(path) else revision)


def load_model(cfg: C.Config, path: str, device: torch.device):
    """A frozen causal LM and its tokenizer. No sampling setting of its generation_config is
    used: the sampler takes every setting from our config (see sample(); stop_ids() reads the
    stop tokens only)."""
    from transformers import AutoModelForCausalLM

    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[cfg.model.dtype]
    revision = None if os.path.isdir(path) else cfg.model.revision
    # sdpa (transformers' default, named so the sampler's boolean decode mask always fits it)
    model = AutoModelForCausalLM.from_pretrained(path, revision=revision, dtype=dtype, attn_implementation="sdpa").to(device)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    tok = load_tokenizer(path, revision)
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


def render_prompts(tok, problems, style: str) -> list[list[int]]:
    """Token ids of each problem's chat prompt, with the assistant turn opened."""
    out = []
    for p in problems:
        text = tok.apply_chat_template(countdown.prompt_messages(p, style), tokenize=False, add_generation_prompt=True)
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

    def __init__(self, base: nn.Linear, r: int, alpha: float, generator: torch.Generator, cast: "SharedCast | None" = None):
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

    model.register_forward_hook(clear_casts)
    if not wrapped:
        raise ValueError(f"lora.targets {targets} match no linear layer of the model")
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


def save_adapter(model: nn.Module, folder: Path, cfg: C.Config, base_path: str) -> None:
    """PEFT's adapter format: adapter_config.json + adapter_model.safetensors with PEFT's key
    names (base_model.model.<module>.lora_A.weight), so PeftModel.from_pretrained loads it."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"base_model.model.{k}": v.contiguous().cpu() for k, v in lora_state(model).items()}
    save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    adapter_cfg = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_path,
        "revision": None if os.path.isdir(base_path) else cfg.model.revision,
        "r": cfg.lora.r, "lora_alpha": cfg.lora.alpha, "lora_dropout": 0.0, "target_modules": cfg.lora.targets,
        "bias": "none", "fan_in_fan_out": False, "use_rslora": False, "init_lora_weights": True, "modules_to_save": None,
    }
    (folder / "adapter_config.json").write_text(json.dumps(adapter_cfg, indent=1) + "\n")


def load_adapter(model: nn.Module, folder: str | Path) -> None:
    """Load a PEFT-format adapter into a model already wrapped by apply_lora (same r, targets)."""
    from safetensors.torch import load_file

    tensors = load_file(str(Path(folder) / "adapter_model.safetensors"))
    own = lora_state(model)
    state = {k.removeprefix("base_model.model."): v for k, v in tensors.items()}
    missing, unexpected = set(own) - set(state), set(state) - set(own)
    if missing or unexpected:
        raise ValueError(f"{folder}: adapter does not fit the model (missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    model.load_state_dict(state, strict=False)


def adapter_config(folder: str | Path) -> dict:
    return json.loads((Path(folder) / "adapter_config.json").read_text())


# ============================================================================= sampling


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set to -inf every logit outside the top-k and outside the top-p nucleus.
    logits: (B, V), already divided by the temperature. top_k 0 and top_p 1.0 are off.
    The nucleus is the smallest set of most likely tokens whose probability reaches top_p
    (the token that crosses the threshold is kept); the most likely token is always kept."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        mass_before = probs.cumsum(-1) - probs  # (B, V): probability of the tokens ranked above
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def last_positions(T: int, k: int, device) -> torch.Tensor:
    """The last k of T positions, as an index tensor for `logits_to_keep`. An int k makes
    transformers run lm_head on hidden[:, -k:], a non-contiguous view, and on the CPU torch's
    batched matmul then copies the whole (V, H) weight once per row (1.4 s and 272 MB per row
    at Qwen's 151,936 x 896); indexing gathers the small hidden slice instead. The same logits
    up to their last bits (the other matmul path rounds differently now and then: PLAN.md
    change 22)."""
    return torch.arange(T - k, T, device=device)


@dataclass
class Samples:
    tokens: list[list[int]]  # one list of completion ids per sample (EOS included if emitted)
    truncated: list[bool]  # hit max_new_tokens without an EOS
    entropy: list[float] | None = None  # mean full-vocabulary entropy of the untempered (T = 1) policy over each sample's tokens


def left_pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, L - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, L - len(s) :] = 1
    return ids, mask


@functools.cache
def growing_kv_class():
    """GrowingKV, built on first use so that importing grpo does not import transformers."""
    from transformers.cache_utils import DynamicLayer

    class GrowingKV(DynamicLayer):
        """One layer's KV cache in a buffer allocated once for the whole decode (capacity: prompt
        plus max_new_tokens). Each token is written into the next free slot and attention reads
        a view of the filled part, so nothing is concatenated per token (transformers'
        DynamicLayer copies the whole cache at every token, a copy that grows with the length;
        on the tiny CPU model it is lost in the noise). Values are the same as DynamicLayer's,
        so the samples are too."""

        def __init__(self, capacity: int):
            super().__init__()
            self.capacity, self.length = capacity, 0

        def lazy_initialization(self, key_states, value_states):
            self.device = key_states.device
            b, h, _, _ = key_states.shape
            self.rows = b  # rows in use: compaction moves the kept rows to the front
            self.kbuf = key_states.new_empty(b, h, self.capacity, key_states.shape[-1])  # (b, kv heads, capacity, head dim)
            self.vbuf = value_states.new_empty(b, h, self.capacity, value_states.shape[-1])
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.length + key_states.shape[-2]
            if end > self.capacity:
                raise RuntimeError(f"KV cache capacity {self.capacity} exceeded ({end} positions)")
            self.kbuf[: self.rows, :, self.length : end] = key_states
            self.vbuf[: self.rows, :, self.length : end] = value_states
            self.length = end
            self._views()
            return self.keys, self.values

        def _views(self):
            self.keys, self.values = self.kbuf[: self.rows, :, : self.length], self.vbuf[: self.rows, :, : self.length]

        def get_seq_length(self) -> int:
            return self.length

        def batch_repeat_interleave(self, repeats: int) -> None:
            self.kbuf, self.vbuf = self.kbuf.repeat_interleave(repeats, 0), self.vbuf.repeat_interleave(repeats, 0)
            self.rows *= repeats
            self._views()

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            """Keep rows `indices`, in that order, moved to the front of the same buffers: only
            the filled positions are copied, and nothing new the buffers' size is allocated."""
            m, L = len(indices), self.length
            self.kbuf[:m, :, :L] = self.kbuf[indices, :, :L]  # the right side is gathered into a new tensor first
            self.vbuf[:m, :, :L] = self.vbuf[indices, :, :L]
            self.rows = m
            self._views()

    return GrowingKV


def multinomial(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One draw per row of probs (b, V): argmax(p / q) with q ~ Exp(1), which is exactly how
    torch.multinomial draws one sample (same generator calls, same tokens), without its check
    that every probability is finite and >= 0, which reads the device twice per call. probs come
    from a softmax here; NaN logits are caught in sample() instead, once, at the end."""
    q = torch.empty_like(probs).exponential_(1, generator=gen)
    return (probs / q).argmax(-1)


def kv_cache(model, capacity: int):
    """A transformers Cache of GrowingKV layers, one per decoder layer, each holding `capacity` positions."""
    from transformers.cache_utils import Cache

    layer = growing_kv_class()
    return Cache(layers=[layer(capacity) for _ in range(model.config.num_hidden_layers)])


@torch.inference_mode()  # lighter than no_grad: no version counters or autograd metadata per op
def sample(model, prompts: list[list[int]], n: int, s: C.SamplingCfg, seed: int, stops: list[int], pad: int,
           entropy: bool = False) -> Samples:
    """n completions for each prompt (prompt-major order: prompt 0's n samples first).

    Written by hand so that exactly these settings apply and nothing else: temperature
    (0 = greedy), top_k, top_p, max_new_tokens. No repetition penalty, and no sampling setting is read
    from the model's generation_config.json (Qwen's would add repetition_penalty 1.1, top_k 20,
    top_p 0.8, temperature 0.7; the policy gradient assumes samples from the policy itself).

    Speed: the prompt is run once and its KV cache copied to its n samples; the cache and the
    attention mask are preallocated for the whole decode (kv_cache); tokens, finished flags and
    entropies stay on the device, and the host reads one number per token (how many rows have
    finished) plus the results once at the end. (Reading it every few tokens instead would move
    the compactions, and with them which random draws each row gets: other samples than the
    registered runs were made with.) Finished sequences leave the batch, in one
    compaction whenever an eighth of the rows have finished (each compaction copies the cache).
    A finished row still in the batch draws tokens that are thrown away, so which tokens a row
    gets depends on this schedule, deterministically: same inputs and seed, same samples. One
    generator seeded by `seed` draws all tokens. (tests/test_sampler.py holds the plain
    per-token version this one equals bit for bit.)

    entropy: also return each sample's mean full-vocabulary entropy of the untempered
    distribution (before temperature and filtering), so models sampled at different
    temperatures compare; it draws nothing, so the samples are the same either way."""
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    ids, mask = left_pad(prompts, pad)  # (P, Lp)
    padded = len({len(p) for p in prompts}) > 1  # does any row in the decoding batch carry padding? (kept on the host)
    padded_rows = (mask == 0).any(-1)  # (P,) prompts shorter than the longest
    ids, mask, padded_rows = ids.to(device), mask.to(device), padded_rows.to(device)
    P, Lp = ids.shape
    T = s.max_new_tokens
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (P, Lp): positions count real tokens only
    cache = kv_cache(model, Lp + T)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                   logits_to_keep=last_positions(Lp, 1, device)).logits[:, -1]  # (P, V)
    cache.batch_repeat_interleave(n)  # (P*n, ...) every sample starts from its prompt's cache
    logits = logits.repeat_interleave(n, 0)  # (B, V), B = P*n
    B = P * n
    # The decode steps' attention mask, built once: (B, 1, 1, Lp+T), True = attend, the prompt's
    # padding then ones. Given 4-D, transformers uses it as it is (the sdpa mask it would build for
    # one query) instead of rebuilding it and asking the device whether it is all ones, per token.
    # When no row in the batch is padded, no mask is passed: transformers would drop an all-ones
    # mask itself, and attention without one takes another kernel path (GQA inside SDPA) whose
    # numbers differ in the last bits from the masked path.
    full_mask = torch.ones((B, 1, 1, Lp + T), dtype=torch.bool, device=device)
    full_mask[:, 0, 0, :Lp] = mask.repeat_interleave(n, 0).bool()
    padded_rows = padded_rows.repeat_interleave(n, 0)  # (B,)
    next_pos = pos[:, -1:].repeat_interleave(n, 0) + 1  # (B, 1)
    NONE = -1  # marks a slot with no token (the sample had finished, or left the batch)
    out = torch.full((B, max(T, 1)), NONE, dtype=torch.long, device=device)  # (B, T) every sample's tokens
    alive = torch.arange(B, device=device)  # row -> sample index
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (b,) the row has emitted a stop token
    stop = torch.tensor(stops, device=device)
    ent_sum = torch.zeros(B, device=device)  # (B,) summed token entropy per sample
    nan_seen = torch.zeros((), dtype=torch.bool, device=device)
    for t in range(T):
        logits = logits.float()
        if entropy:
            lp = logits.log_softmax(-1)  # (b, V) untempered
            ent_sum.index_add_(0, alive, -(lp.exp() * lp).sum(-1) * (~done))  # rows already finished add nothing
        if s.temperature == 0:
            tok = logits.argmax(-1)  # (b,)
        else:
            logits = filter_logits(logits / s.temperature, s.top_k, s.top_p)
            probs = logits.softmax(-1)  # (b, V)
            nan_seen |= probs.isnan().any()  # read once, at the end
            tok = multinomial(probs, gen)  # (b,)
        out[alive, t] = tok.masked_fill(done, NONE)  # a row that finished earlier records nothing
        done = done | torch.isin(tok, stop)
        if t == T - 1:
            break
        b = len(alive)
        # The one host read per token carries two numbers: how many rows have finished, and
        # whether any row still decoding is padded (what the batch holds after a compaction).
        code = int(done.sum() * 2 + (padded_rows & ~done).any())
        n_done = code // 2
        if n_done == b:
            break
        if n_done * 8 >= b:  # compact once an eighth has finished: each compaction copies the cache
            keep = torch.argsort(done.to(torch.uint8), stable=True)[: b - n_done]  # rows still decoding, in order (no sync)
            cache.batch_select_indices(keep)
            alive, tok, full_mask, next_pos, done = alive[keep], tok[keep], full_mask[keep], next_pos[keep], done[keep]
            padded_rows, padded = padded_rows[keep], bool(code % 2)
        mask = full_mask[..., : Lp + t + 1] if padded else None  # (b, 1, 1, Lp+t+1) a view, no copy
        logits = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos, cache=cache, use_cache=True).logits[:, -1]  # (b, V)
        next_pos = next_pos + 1
    if nan_seen.item():
        raise RuntimeError("sampler: the model's next-token probabilities hold NaN (diverged weights, or an fp16 overflow)")
    stopset = set(stops)
    tokens = [[x for x in row if x != NONE] for row in out[:, :T].tolist()]  # a sample's slots are filled from the start
    truncated = [bool(row) and row[-1] not in stopset for row in tokens]  # every row holds at least one token when T > 0
    ent = [e / max(len(o), 1) for e, o in zip(ent_sum.tolist(), tokens)] if entropy else None
    return Samples(tokens, truncated, ent)


HOST_READS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::equal")  # item, int, float and bool all end in the first


def count_host_reads(fn):
    """Run fn() under torch's profiler and count the ops that hand a tensor's value to Python
    (item/int/float/bool, nonzero, equal): on a GPU each one waits for the device. Returns
    (count, fn's result). A .tolist() of a CPU tensor does not pass through the dispatcher and is
    not counted; the sampler makes two, at the end (plus one item: the NaN check)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = fn()
    return sum(e.count for e in prof.key_averages() if e.key in HOST_READS), result


# ============================================================================= log-probs & the loss


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
    positions x 151,936 entries: 0.87 GiB before, 0.22 GiB here). The numbers are the same ops in
    the same order, per chunk: same values and gradients on the CPU (tests/test_speed_options.py;
    a GPU's reduction kernels may split rows differently, untested)."""

    CHUNK = 2**24  # elements of one chunk's fp32 temporaries (64 MB each)

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
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=keep).logits  # (b, Lc+1, V)
    targets = ids[:, -Lc:]  # (b, Lc)
    if not with_entropy:
        return TokenLogProbs.apply(logits, targets), None
    logits = logits[:, :-1].float()  # (b, Lc, V)
    lse = logits.logsumexp(-1)  # (b, Lc)
    logp = logits.gather(-1, targets[..., None]).squeeze(-1) - lse  # (b, Lc)
    return logp, lse - (logits.softmax(-1) * logits).sum(-1)  # (b, Lc): H = logsumexp - E_pi[logit]


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """rewards (P, G) -> advantages (P, G). [D1] reward - group mean; no division by std."""
    return rewards - rewards.mean(dim=1, keepdim=True)


def drgrpo_loss(logp: torch.Tensor, cmask: torch.Tensor, adv: torch.Tensor, normalizer: float) -> torch.Tensor:
    """[D2][D3][D4] -sum(A * log pi * mask) / constant. logp, cmask: (b, Lc); adv: (b,).
    With one update per sample the PPO ratio is 1, so this is the whole objective."""
    return -(adv[:, None] * logp * cmask).sum() / normalizer


def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate k3 = exp(r) - r - 1 with r = log ref - log pi (Schulman's
    estimator, as TRL and most GRPO code use): >= 0, unbiased on samples from pi. (b, Lc)."""
    r = ref_logp - logp
    return torch.exp(r) - r - 1


def control_terms(logp, cmask, normalizer: float, ref_logp=None, kl: float = 0.0, ent=None, entropy: float = 0.0) -> torch.Tensor:
    """The controls' additions to the loss, normalised by the same constant as [D2]:
    + kl * sum(k3) / constant (the KL anchor to the base; [D3] departs from Dr. GRPO here, on
    purpose, only in conditions that register kl > 0), and - entropy * sum(H) / constant (the
    entropy bonus: minimising the loss raises the policy's entropy). 0 when both are off."""
    out = logp.new_zeros(())
    if kl > 0:
        out = out + kl * (k3(logp, ref_logp) * cmask).sum() / normalizer
    if entropy > 0:
        out = out - entropy * (ent * cmask).sum() / normalizer
    return out


def policy_gradient(model, prompts, completions, adv: torch.Tensor, normalizer: float, micro_batch: int, pad: int,
                    kl: float = 0.0, entropy: float = 0.0, measure_kl: bool = False, sort_by_length: bool = False) -> dict:
    """Accumulate the gradient over micro-batches (exact: the loss is a plain sum with a
    constant normalizer). Without a KL or entropy term, samples whose advantage is exactly 0 add
    nothing and are skipped. Returns the loss and, when computed, the mean per-token k3 KL to
    the base (kl > 0, or measure_kl) and the mean policy entropy over the trained tokens."""
    device = next(model.parameters()).device
    every_row = kl > 0 or entropy > 0
    rows = [i for i in range(len(completions)) if every_row or adv[i].item() != 0.0]
    order = (lambda idx: sorted(idx, key=lambda i: len(completions[i]))) if sort_by_length else list  # train.sort_by_length
    rows = order(rows)
    total, kl_sum, ent_sum, n_tok = 0.0, 0.0, 0.0, 0.0

    def micro_batches(idx):
        for start in range(0, len(idx), micro_batch):
            chunk = idx[start : start + micro_batch]
            ids, attn, pos, cmask = pack([prompts[i] for i in chunk], [completions[i] for i in chunk], pad)
            yield chunk, ids.to(device), attn.to(device), pos.to(device), cmask.to(device)

    for chunk, ids, attn, pos, cmask in micro_batches(rows):
        ref = None
        if kl > 0:
            with torch.no_grad(), lora_disabled(model):
                ref, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])  # (b, Lc) the base's log-probs
        logp, ent = completion_logprobs(model, ids, attn, pos, cmask.shape[1], with_entropy=entropy > 0)
        loss = drgrpo_loss(logp, cmask, adv[chunk].to(device), normalizer) + control_terms(logp, cmask, normalizer, ref, kl, ent, entropy)
        loss.backward()
        total += loss.item()
        n_tok += cmask.sum().item()
        if ref is not None:
            kl_sum += (k3(logp.detach(), ref) * cmask).sum().item()
        if ent is not None:
            ent_sum += (ent.detach() * cmask).sum().item()
    out = {"loss": total, "kl_mean": kl_sum / max(n_tok, 1) if kl > 0 else float("nan"),
           "entropy_trained": ent_sum / max(n_tok, 1) if entropy > 0 else float("nan")}
    if measure_kl and kl == 0:  # a diagnostic only: no gradient, every sample
        kl_sum, n_tok = 0.0, 0.0
        with torch.no_grad():
            for _, ids, attn, pos, cmask in micro_batches(order(range(len(completions)))):
                logp, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
                with lora_disabled(model):
                    ref, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
                kl_sum += (k3(logp, ref) * cmask).sum().item()
                n_tok += cmask.sum().item()
        out["kl_mean"] = kl_sum / max(n_tok, 1)
    return out


# ============================================================================= memory


def estimate_memory(mc, lora_r: int, n_targets: int, prompt_len: int, new_tokens: int, micro_batch: int,
                    n_samples: int, weight_bytes: int = 2, top_p: bool = False, ragged: bool = True, fold: bool = False) -> dict[str, float]:
    """Peak accelerator bytes of a training step and of sampling, from this file's code path.
    mc: the model's config (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
    num_key_value_heads, vocab_size). Counts what autograd keeps per token and layer (bf16
    activations, the fp32 copies LoRALinear makes of its inputs, one per parent module: SharedCast), the completion logits
    (bf16 out of lm_head, the fp32 upcast, and their gradients), the KV cache, and LoRA weights with
    grads and AdamW state (fp32). Leaves out the allocator's slack and the CUDA context.
    ragged: the micro-batch is padded (prompts or completions of different lengths, as in every
    real step), so attention takes its masked path (counted in "attention_mask"); False: the
    unpadded path, as when every row has the same length. fold: sampling holds a folded copy of
    the wrapped weights (lora.fold_for_sampling)."""
    H, I, L, V = mc.hidden_size, mc.intermediate_size, mc.num_hidden_layers, mc.vocab_size
    kv = H // mc.num_attention_heads * mc.num_key_value_heads
    params = V * H + L * (H * H + H + 2 * (H * kv + kv) + H * H + 3 * H * I + 2 * H) + H  # tied embeddings
    lora_params = L * lora_r * (2 * (H + H) + 2 * (H + kv) + 3 * (H + I)) * n_targets / 7
    T, Lc, b, a = prompt_len + new_tokens, new_tokens, micro_batch, 2  # a: bytes per bf16 activation
    per_token_layer = (
        H * (a * 2 + 4)  # attention RMSNorm: its input and output (+ fp32 statistics, rounded up)
        + H * 4 + H * a + 2 * kv * a + H * a + 2 * kv * a  # the LoRA fp32 copy q, k, v share; q, k, v before and after RoPE
        + H * a + H * 4 + H * a  # attention output, o_proj's LoRA fp32 copy, residual
        + H * (a * 2 + 4)  # MLP RMSNorm
        + H * 4 + 4 * I * a + I * 4  # the LoRA copy gate/up share; gate, up, silu(gate), product; down's LoRA copy
        + 7 * lora_r * 4  # LoRA A outputs
    )
    # A padded micro-batch passes transformers' bool mask (b, 1, T, T) to SDPA, which then cannot do GQA itself:
    # repeat_kv expands K and V to all H heads in every layer, and SDPA keeps those instead of the kv-head ones
    # (and the mask, converted to the activation dtype, in every layer) for backward. Checked against the peak
    # RSS of padded vs unpadded micro-batches (bench/memory_05b.py --cpu-check 8 --micro-batch 2 [--uniform]).
    attention_mask = (b * T * T + L * b * T * T * a + L * b * T * 2 * (H - kv) * a) if ragged else 0
    activations = b * T * L * per_token_layer + attention_mask
    # The bf16 logits TokenLogProbs keeps and their bf16 gradient, plus its fp32 temporaries: about three of one
    # chunk's size (the chunk's upcast, exp(x - lse), the chunk's gradient); checked against peak RSS on the CPU
    # (bench/memory_05b.py --cpu-check). The entropy bonus (a control no registered condition uses) upcasts all
    # the logits at once and is not counted.
    logits = b * (Lc + 1) * V * (a + a) + 3 * 4 * min(TokenLogProbs.CHUNK, b * Lc * V)
    static = params * weight_bytes + lora_params * 4 * 4  # LoRA: weight, grad, two AdamW moments
    kv_cache = n_samples * T * L * 2 * kv * a
    sample_logits = n_samples * V * (4 + 4 + (4 + 8 + 4 + 4 + 1 + 1 if top_p else 0))  # fp32 logits, probs, top-p sort
    folded = L * (2 * H * H + 2 * H * kv + 3 * H * I) * n_targets / 7 * weight_bytes if fold else 0
    return {"params": params, "lora_params": lora_params, "static": static, "activations": activations, "attention_mask": attention_mask, "logits": logits,
            "train_step": static + activations + logits, "kv_cache": kv_cache,
            "sampling": static + kv_cache + sample_logits + folded}


# Peak RSS growth of one micro-batch over the estimate's activations + logits, measured on the CPU at the
# 0.5B's width, vocabulary and 24 layers (bench/memory_05b.py --cpu-check 24): 1.10 at micro-batch 2, 1.13 at 4
# (2026-12-01). The cause of the gap is not pinned down; the automatic micro-batch counts it.
MEASURED_OVER_ESTIMATE = 1.15


def auto_micro_batch(cfg: C.Config, mc, prompt_len: int) -> int:
    """cfg.micro_batch, or (when it is 0) the largest micro-batch whose training peak (the
    estimate, its per-micro-batch part raised by MEASURED_OVER_ESTIMATE) fits 85% of
    cfg.memory_gb (at least 1); the rest is left for the CUDA context and the allocator's
    fragmentation, which the estimate does not count."""
    if cfg.micro_batch > 0:
        return cfg.micro_batch
    wb = 2 if cfg.model.dtype != "float32" else 4
    fits = 1
    for b in range(1, cfg.train.problems_per_step * cfg.train.group_size + 1):
        est = estimate_memory(mc, cfg.lora.r, len(cfg.lora.targets), prompt_len, cfg.train.sampling.max_new_tokens, b,
                              cfg.train.problems_per_step * cfg.train.group_size, wb)
        if est["static"] + MEASURED_OVER_ESTIMATE * (est["activations"] + est["logits"]) > 0.85 * cfg.memory_gb * 2**30:
            break
        fits = b
    return fits


# ============================================================================= training


class Diverged(RuntimeError):
    pass


def step_problems(pool: list, step: int, per_step: int, seed: int, shuffle: bool) -> list:
    """The problems of one step (1-based). shuffle: a fresh seeded permutation of the pool per
    epoch (problems: all); otherwise the pool is cycled (copies of the 16 or 1 problems).
    Depends only on (seed, step): resuming needs no data-loader state."""
    out = []
    for j in range((step - 1) * per_step, step * per_step):
        epoch, i = divmod(j, len(pool))
        if shuffle:
            g = torch.Generator().manual_seed(seed_for(seed, "order", epoch))
            i = torch.randperm(len(pool), generator=g)[i].item()
        out.append(pool[i])
    return out


LOG_FIELDS = ["step", "reward_mean", "zero_signal_frac", "format_rate", "len_mean", "len_max", "truncated_frac",
              "entropy_mean", "kl_mean", "loss", "grad_norm", "grad_norm_clipped", "lr", "sec_sampling", "sec_fwd_bwd",
              "tokens", "peak_mem_mb"]


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB -> MiB (process peak RSS)


def write_csv_rows(path: Path, rows: list[dict], fields: list[str]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def read_csv_rows(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def write_log(path: Path, rows: list[dict]) -> None:
    write_csv_rows(path, rows, LOG_FIELDS)


def read_log(path: Path) -> list[dict]:
    with open(path) as f:
        return [{k: (int(v) if k in ("step", "len_max", "tokens") else float(v)) for k, v in r.items()} for r in csv.DictReader(f)]


def make_optimizer(model, cfg: C.Config, lr: float):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, betas=tuple(cfg.train.betas), eps=cfg.train.eps, weight_decay=cfg.train.weight_decay)


def save_last(model, opt, step: int, rows: list[dict], out: Path, cfg: C.Config, base: str, meta: dict) -> None:
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


def method_batch(method: str, rewards: torch.Tensor, rollouts: list[list[int]], gold: list[list[int]] | None):
    """(completions, advantages (P*G,)) that a method trains on. rewards (P, G)."""
    if method == "grpo":
        return rollouts, group_advantages(rewards).view(-1)  # [D1]
    if method == "rft":
        return rollouts, rewards.view(-1).clone()  # keep the correct samples, drop the rest
    if method == "sft":
        return gold, torch.ones(rewards.numel())
    raise ValueError(f"unknown method {method!r}")


def dev_check(model, tok, cfg: C.Config, dev: list, step: int) -> dict:
    """pass@1 and pass@n on the held-out dev problems, sampled like the evaluation with seeds
    tied to the problems (so every step and model is sampled alike); draws nothing from training."""
    tc = cfg.train
    texts, _ = sample_problems(model, tok, dev, tc.dev_samples, cfg.eval.sampling, cfg.task.seed, "dev", cfg.task.prompt_style,
                               cfg.eval.problems_per_batch, progress=False, fold=cfg.lora.fold_for_sampling)
    rows = score_problems(dev, texts, keep_responses=False)
    n = tc.dev_samples
    s = summarize(rows, n, n)
    return {"step": step, "n_problems": len(dev), "n": n, "strict_pass1": s["pass_at_k"]["strict"]["1"], "loose_pass1": s["pass_at_k"]["loose"]["1"],
            "strict_passn": s["pass_at_k"]["strict"][str(n)], "loose_passn": s["pass_at_k"]["loose"][str(n)], "format_rate": s["format_rate"]}


DEV_FIELDS = ["step", "n_problems", "n", "strict_pass1", "loose_pass1", "strict_passn", "loose_passn", "format_rate"]


def train(cfg: C.Config, name: str, cond: C.ConditionCfg, seed: int, pool: list, lr: float, out: Path, base: str, *,
          steps: int | None = None, checkpoints: list[int] | None = None, inputs: dict | None = None, stage: str = "train",
          progress: bool = True) -> Path:
    """Condition `name` (its settings `cond`) with training seed `seed` on `pool` for `steps`
    steps into `out`; resumes from out/last if it is there. Returns out. Writes
    out/train_log.csv, out/step_XXX/ adapters, out/last/, out/done.json.
    The seed draws the LoRA initialisation, the data order and every rollout; nothing else.
    With train.dev_every > 0 it also writes out/train_eval.csv (held-out dev problems)."""
    from tqdm import tqdm

    tc = cfg.train
    steps = tc.steps if steps is None else steps
    checkpoints = tc.checkpoints if checkpoints is None else checkpoints
    setup_torch(cfg)
    device = pick_device(cfg)
    model, tok = load_model(cfg, base, device)
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed_for(seed, "lora-init"))
    opt = make_optimizer(model, cfg, lr)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"condition": name, "train_seed": seed, "lr": lr, "steps": steps, "provenance": provenance(cfg, stage, inputs, str(device))}
    rows: list[dict] = []
    dev_rows: list[dict] = []
    start = 1
    old = out / ".last.old"
    if not (out / "last").exists() and (old / "state.json").exists():
        os.replace(old, out / "last")  # killed between the two renames of atomic_replace_dir
    if (out / "last" / "state.json").exists():
        state = json.loads((out / "last" / "state.json").read_text())
        if state["provenance"]["stage_hash"] != meta["provenance"]["stage_hash"]:
            raise RuntimeError(f"{out}/last was made by a different config or inputs; delete {out} or use --force")
        load_adapter(model, out / "last")
        # map_location: a run started on a GPU resumes on a CPU-only machine (and the reverse)
        opt.load_state_dict(torch.load(out / "last" / "optimizer.pt", weights_only=True, map_location=device))
        rows = [r for r in read_log(out / "train_log.csv") if r["step"] <= state["step"]]
        dev_rows = [r for r in read_csv_rows(out / "train_eval.csv") if int(r["step"]) <= state["step"]]
        start = state["step"] + 1
        print(f"{stage} {name} s{seed}: resuming {out} from step {start} (last checkpoint: step {state['step']})", flush=True)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    P, G, s = tc.problems_per_step, tc.group_size, tc.sampling
    prompt_len = max(len(p) for p in render_prompts(tok, pool[:256], cfg.task.prompt_style))
    micro_batch = auto_micro_batch(cfg, model.config, prompt_len)
    mem = estimate_memory(model.config, cfg.lora.r, len(cfg.lora.targets), prompt_len, s.max_new_tokens, micro_batch, P * G,
                          2 if cfg.model.dtype != "float32" else 4, fold=cfg.lora.fold_for_sampling)
    normalizer = P * G * s.max_new_tokens  # [D2] a constant, not the response lengths
    params = [p for p in model.parameters() if p.requires_grad]
    dev = []
    if tc.dev_every > 0 and stage == "train":
        dev = countdown.draw_splits(cfg.task.name, cfg.task.seed, {"test": cfg.task.n_test, "train": cfg.task.n_train,
                                                                     "pretrain": pretrain_count(cfg), "dev": tc.dev_problems})["dev"]
        if start == 1:
            dev_rows = [dev_check(model, tok, cfg, dev, 0)]  # the base itself (B = 0)
    bar = tqdm(range(start, steps + 1), desc=f"{stage} {name} s{seed} lr={lr:g}", disable=not progress, initial=start - 1, total=steps, leave=False)
    for step in bar:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        problems = step_problems(pool, step, P, seed_for(seed, name), shuffle=(cond.problems == "all"))
        prompts = render_prompts(tok, problems, cfg.task.prompt_style)
        t0 = time.perf_counter()
        if cond.method == "sft":  # trains on written solutions: no rollouts to draw
            smp = Samples([[] for _ in range(P * G)], [False] * (P * G), [float("nan")] * (P * G))
            scored = [{"strict": float("nan"), "loose": float("nan"), "format": float("nan")}] * (P * G)
        else:
            with lora_folded(model) if cfg.lora.fold_for_sampling else nullcontext():
                smp = sample(model, prompts, G, s, seed_for(seed, stage, name, step), stops, pad, entropy=True)
            texts = tok.batch_decode(smp.tokens, skip_special_tokens=True)
            scored = [countdown.score(problems[i // G], x) for i, x in enumerate(texts)]
        t1 = time.perf_counter()
        rewards = torch.tensor([float(d[cond.reward]) for d in scored]).view(P, G)  # [D5] strict score only (format: the control)
        gold = [tok(countdown.gold_solution(p, cfg.task.prompt_style), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                for p in problems for _ in range(G)] if cond.method == "sft" else None
        completions, adv = method_batch(cond.method, rewards, smp.tokens, gold)  # (P*G,)
        # The model stays in eval mode: Qwen2 has no dropout, and train-mode dropout would draw
        # from torch's unseeded global generator.
        measure_kl = tc.log_kl_every > 0 and step % tc.log_kl_every == 0
        pg = policy_gradient(model, [prompts[i // G] for i in range(P * G)], completions, adv, normalizer, micro_batch, pad,
                             kl=cond.kl, entropy=cond.entropy, measure_kl=measure_kl, sort_by_length=tc.sort_by_length)
        for p in params:
            if p.grad is None:  # every advantage was 0: a zero gradient, and AdamW still steps (momentum), as usual
                p.grad = torch.zeros_like(p)
        gnorm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])).item()
        if not (math.isfinite(pg["loss"]) and math.isfinite(gnorm)):
            raise Diverged(f"step {step}: loss {pg['loss']} / grad norm {gnorm} is not finite; stopped, {out}/last holds the last good state")
        gnorm_after = gnorm
        if tc.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, tc.grad_clip)
            gnorm_after = min(gnorm, tc.grad_clip)
        opt.step()  # [D4] one update per sampling
        opt.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        lens = [len(x) for x in completions]
        rows.append({
            "step": step, "reward_mean": rewards.mean().item(),
            "zero_signal_frac": float("nan") if cond.method == "sft" else (rewards.max(1).values == rewards.min(1).values).float().mean().item(),
            "format_rate": sum(float(d["format"]) for d in scored) / len(scored),
            "len_mean": sum(lens) / len(lens), "len_max": max(lens), "truncated_frac": sum(smp.truncated) / len(lens),
            "entropy_mean": sum(e * n for e, n in zip(smp.entropy, lens)) / max(sum(lens), 1), "kl_mean": pg["kl_mean"],
            "loss": pg["loss"], "grad_norm": gnorm, "grad_norm_clipped": gnorm_after, "lr": lr,
            "sec_sampling": round(t1 - t0, 4), "sec_fwd_bwd": round(t2 - t1, 4),
            "tokens": sum(lens), "peak_mem_mb": round(peak_memory_mb(device), 1),
        })
        bar.set_postfix(reward=f"{rows[-1]['reward_mean']:.2f}", fmt=f"{rows[-1]['format_rate']:.2f}", len=f"{rows[-1]['len_mean']:.0f}")
        if dev and step % tc.dev_every == 0:
            dev_rows.append(dev_check(model, tok, cfg, dev, step))
        if step in checkpoints:
            tmp = out / f".step_{step:03d}.tmp"
            if tmp.exists():
                shutil.rmtree(tmp)
            save_adapter(model, tmp, cfg, base)
            atomic_replace_dir(tmp, out / f"step_{step:03d}")
        if step % tc.save_last_every == 0 or step == steps or step in checkpoints:
            if dev:
                write_csv_rows(out / "train_eval.csv", dev_rows, DEV_FIELDS)  # before last/, like the log
            save_last(model, opt, step, rows, out, cfg, base, meta)
    bar.close()
    atomic_write_json(out / "done.json", {
        "steps": steps, **meta, "micro_batch": micro_batch, "micro_batch_auto": cfg.micro_batch == 0,
        "memory_estimate_gib": round(mem["train_step"] / 2**30, 3), "stop_ids": stops, "dtype": cfg.model.dtype})
    return out


# ============================================================================= evaluation


def pass_at_k_curve(counts: list[int], n: int, k_max: int) -> dict[str, float]:
    """Mean over problems of pass@k for k = 1..k_max, keys as strings (JSON)."""
    return {str(k): sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in range(1, k_max + 1)}


def sample_problems(model, tok, problems, n: int, s: C.SamplingCfg, seed: int, tag: str, style: str,
                    per_batch: int, progress: bool = True, fold: bool = False) -> tuple[list[list[str]], list[float]]:
    """n response texts per problem, and per problem the mean full-vocabulary entropy of the
    untempered policy over all its response tokens. Batches of `per_batch` problems; each
    batch's generator is seeded from (seed, tag, first problem id) so results do not depend on
    what ran before. fold: sample with the LoRA folded into the weights (lora.fold_for_sampling)."""
    from tqdm import tqdm

    stops, pad = stop_ids(model, tok), pad_id(tok)
    prompts = render_prompts(tok, problems, style)
    texts: list[list[str]] = []
    entropies: list[float] = []
    with tqdm(total=len(problems) * n, desc=tag, unit="sample", disable=not progress, leave=False) as bar, \
            (lora_folded(model) if fold else nullcontext()):
        for b in range(0, len(problems), per_batch):
            smp = sample(model, prompts[b : b + per_batch], n, s, seed_for(seed, tag, problems[b].id), stops, pad, entropy=True)
            dec = tok.batch_decode(smp.tokens, skip_special_tokens=True)
            texts += [dec[i : i + n] for i in range(0, len(dec), n)]
            for i in range(0, len(dec), n):
                lens = [len(t) for t in smp.tokens[i : i + n]]
                entropies.append(sum(e * k for e, k in zip(smp.entropy[i : i + n], lens)) / max(sum(lens), 1))
            bar.update(len(dec))
    return texts, entropies


def answer_diversity(responses: list[str]) -> tuple[int, float]:
    """The number of distinct final answers among the responses (countdown.final_answer; no
    integer at all counts as one class) and the empirical entropy of their distribution (nats)."""
    from collections import Counter

    counts = Counter(countdown.final_answer(r) for r in responses)
    total = sum(counts.values())
    return len(counts), -sum(c / total * math.log(c / total) for c in counts.values())


def score_problems(problems, texts: list[list[str]], keep_responses: bool = True, token_entropy: list[float] | None = None) -> list[dict]:
    out = []
    for i, (p, rs) in enumerate(zip(problems, texts)):
        sc = [countdown.score(p, r) for r in rs]
        distinct, ans_entropy = answer_diversity(rs)
        row = {"id": p.id, "question": p.question, "answer": p.answer, "n": len(rs),
               "correct_strict": sum(d["strict"] for d in sc), "correct_loose": sum(d["loose"] for d in sc),
               "format_ok": sum(d["format"] for d in sc), "distinct_answers": distinct, "answer_entropy": ans_entropy}
        if token_entropy is not None:
            row["token_entropy"] = token_entropy[i]
        if keep_responses:
            row["responses"] = rs
        out.append(row)
    return out


def summarize(rows: list[dict], n: int, k_max: int) -> dict:
    return {
        "pass_at_k": {s: pass_at_k_curve([r[f"correct_{s}"] for r in rows], n, k_max) for s in ("strict", "loose")},
        "format_rate": sum(r["format_ok"] for r in rows) / (n * len(rows)),
        "coverage": {s: sum(r[f"correct_{s}"] > 0 for r in rows) for s in ("strict", "loose")},
        "n_problems": len(rows),
    }


def eval_set_settings(cfg: C.Config, eval_set: str) -> tuple[list, int, int, C.SamplingCfg, int]:
    """problems, n, k_max, sampling and problems per batch of a registered evaluation set
    (`test` is the eval section; the others are eval_sets entries)."""
    if eval_set == "test":
        e = cfg.eval
        _, test = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
        return test, e.n, e.k_max, e.sampling, e.problems_per_batch
    es = cfg.eval_sets[eval_set]
    if es.task in (None, cfg.task.name):
        _, test = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    else:  # another task's own test problems (out of distribution), drawn by the same task seed
        test = countdown.draw_splits(es.task, cfg.task.seed, {"test": es.n_problems})["test"]
    return test[: es.n_problems], es.n, es.k_max, es.sampling or cfg.eval.sampling, es.problems_per_batch


def eval_extra(cfg: C.Config, adapter_sha: str | None, eval_set: str) -> dict:
    """What an evaluation's stage hash depends on besides the config's eval keys."""
    if eval_set == "test":
        return {"adapter_sha256": adapter_sha}
    return {"adapter_sha256": adapter_sha, "eval_set": eval_set, "settings": C.to_dict(cfg.eval_sets[eval_set])}


def evaluate(cfg: C.Config, base: str, adapter: str | None, out_file: Path, progress: bool = True, eval_set: str = "test") -> dict:
    """Sample n answers per problem of an evaluation set from the base (or base + adapter), score
    them three ways, measure diversity, and write one JSON file (atomically)."""
    setup_torch(cfg)
    device = pick_device(cfg)
    model, tok = load_model(cfg, base, device)
    adapter_sha, who = None, {"condition": None, "train_seed": None, "step": None}
    if adapter is not None:
        acfg = adapter_config(adapter)
        apply_lora(model, acfg["r"], acfg["lora_alpha"], acfg["target_modules"], 0)
        load_adapter(model, adapter)
        adapter_sha = file_sha256(Path(adapter) / "adapter_model.safetensors")
        who = adapter_identity(adapter)
    problems, n, k_max, sampling, per_batch = eval_set_settings(cfg, eval_set)
    t0 = time.perf_counter()
    # Every model sees the same seeds, tied to the problems (task.seed and the problem ids), never
    # to the training seed: the paired comparison then differs only by the model, and the base is
    # evaluated once. Each set other than `test` has its own seeds (new draws, so the `wide` set
    # checks the extrapolation out of sample) unless it asks for the test set's.
    own = eval_set != "test" and cfg.eval_sets[eval_set].seeds == "own"
    tag = f"eval-{eval_set}" if own else "eval"
    texts, ent = sample_problems(model, tok, problems, n, sampling, cfg.task.seed, tag, cfg.task.prompt_style, per_batch, progress,
                                 fold=cfg.lora.fold_for_sampling)
    rows = score_problems(problems, texts, cfg.eval.keep_responses, ent)
    result = {
        "model": "base" if adapter is None else str(adapter),
        **who,
        "eval_set": eval_set, "task": problems[0].task,
        "adapter_sha256": adapter_sha,
        **summarize(rows, n, k_max),
        "sampling": {"n": n, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
                     "repetition_penalty": 1.0, "max_new_tokens": sampling.max_new_tokens, "seed": cfg.task.seed,
                     "seed_tag": tag, "problems_per_batch": per_batch, "stop_ids": stop_ids(model, tok)},
        "seconds": round(time.perf_counter() - t0, 2),
        "problems": rows,
        "provenance": provenance(cfg, "eval", eval_extra(cfg, adapter_sha, eval_set), str(device)),
    }
    atomic_write_json(out_file, result)
    return result


def classify_tokens(base_logits: torch.Tensor, trained_logits: torch.Tensor, top: int) -> dict[str, torch.Tensor]:
    """Per response position (arXiv 2605.06241 §3): class 0 unchanged (the two argmaxes agree),
    1 reranked (the trained argmax is in the base's top `top` but not first), 2 shifted (outside
    it); the trained argmax's 1-based rank under the base; the base's full-vocabulary entropy.
    base_logits, trained_logits: (L, V) -> each (L,)."""
    choice = trained_logits.argmax(-1)  # (L,)
    chosen = base_logits.gather(-1, choice[:, None])  # (L, 1) the base's logit of the trained choice
    rank = (base_logits > chosen).sum(-1) + 1  # (L,) 1 = the base's own first choice
    cls = torch.where(rank == 1, 0, torch.where(rank <= top, 1, 2))
    logp = base_logits.float().log_softmax(-1)
    return {"classes": cls, "ranks": rank, "base_entropy": -(logp.exp() * logp).sum(-1)}


@torch.inference_mode()
def token_compare(cfg: C.Config, base: str, adapter: str, out_file: Path, progress: bool = True) -> dict:
    """The token-level picture of one checkpoint: the base decodes each test problem greedily;
    the trained model and the base then read the same base prefixes (teacher forcing), and
    every response position is classified by classify_tokens. One model in memory: the base is
    the trained model with its LoRA switched off."""
    from tqdm import tqdm

    setup_torch(cfg)
    device = pick_device(cfg)
    model, tok = load_model(cfg, base, device)
    acfg = adapter_config(adapter)
    apply_lora(model, acfg["r"], acfg["lora_alpha"], acfg["target_modules"], 0)
    load_adapter(model, adapter)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    _, test = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    problems = test[: cfg.tokens.n_problems]
    prompts = render_prompts(tok, problems, cfg.task.prompt_style)
    greedy = C.SamplingCfg(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=cfg.eval.sampling.max_new_tokens)
    rows = []
    per = max(1, cfg.eval.problems_per_batch)
    for b in tqdm(range(0, len(problems), per), desc="tokens", disable=not progress, leave=False):
        with lora_disabled(model):
            comps = sample(model, prompts[b : b + per], 1, greedy, 0, stops, pad).tokens  # the base's greedy answers
        ids, attn, pos, cmask = (x.to(device) for x in pack(prompts[b : b + per], comps, pad))
        Lc = cmask.shape[1]
        keep = last_positions(ids.shape[1], Lc + 1, device)
        trained = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=keep).logits[:, :-1]
        with lora_disabled(model):
            basel = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=keep).logits[:, :-1]
        for i, c in enumerate(comps):
            r = classify_tokens(basel[i, : len(c)].float(), trained[i, : len(c)].float(), cfg.tokens.top)
            rows.append({"id": problems[b + i].id, "classes": r["classes"].tolist(), "ranks": r["ranks"].tolist(),
                         "base_entropy": [round(x, 5) for x in r["base_entropy"].tolist()]})
    cls = [c for r in rows for c in r["classes"]]
    ranks = [k for r in rows for k, c in zip(r["ranks"], r["classes"]) if c > 0]
    ent = {0: [], 1: []}
    for r in rows:
        for c, e in zip(r["classes"], r["base_entropy"]):
            ent[min(c, 1)].append(e)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
    summary = {"positions": len(cls), "unchanged": cls.count(0), "reranked": cls.count(1), "shifted": cls.count(2),
               "share_unchanged": cls.count(0) / max(len(cls), 1), "share_reranked": cls.count(1) / max(len(cls), 1),
               "share_shifted": cls.count(2) / max(len(cls), 1), "mean_rank_changed": mean(ranks),
               "base_entropy_changed": mean(ent[1]), "base_entropy_unchanged": mean(ent[0]),
               "entropy_ratio": mean(ent[1]) / mean(ent[0]) if ent[0] and ent[1] and mean(ent[0]) > 0 else float("nan")}
    adapter_sha = file_sha256(Path(adapter) / "adapter_model.safetensors")
    result = {**adapter_identity(adapter), "model": str(adapter), "adapter_sha256": adapter_sha, "top": cfg.tokens.top,
              "summary": summary, "problems": rows,
              "provenance": provenance(cfg, "tokens", {"adapter_sha256": adapter_sha}, str(device))}
    atomic_write_json(out_file, result)
    return result


# ============================================================================= probe, select, lr sweep


def probe(cfg: C.Config, base: str, run: Path, progress: bool = True) -> list[Path]:
    """The base-rate checks behind PLAN.md's change log: Countdown pass@k on probe.n_problems x
    probe.samples, and strict/loose pass@1, pass@k and format rate on each arithmetic task."""
    setup_torch(cfg)
    device = pick_device(cfg)
    model, tok = load_model(cfg, base, device)
    written = []
    for task in cfg.probe.tasks:
        n_prob, n = (cfg.probe.n_problems, cfg.probe.samples) if task == "countdown" else (cfg.probe.arith_problems, cfg.probe.arith_samples)
        _, problems = countdown.make_splits(task, 0, n_prob, cfg.task.seed)
        texts, _ = sample_problems(model, tok, problems, n, cfg.eval.sampling, cfg.task.seed, f"probe-{task}", cfg.task.prompt_style, cfg.eval.problems_per_batch, progress)
        rows = score_problems(problems, texts, keep_responses=False)
        res = {"task": task, "n": n, **summarize(rows, n, n), "examples": [t[0] for t in texts[:3]], "problems": rows,
               "provenance": provenance(cfg, "probe", None, str(device))}
        path = run / f"probe_{task}.json"
        atomic_write_json(path, res)
        written.append(path)
    return written


def choose_sets(pass_rates: list[float], sizes: list[int]) -> dict[str, list[int]]:
    """The registered rule (PLAN.md): among problems with 0 < p < 1, rank by p(1 - p) (most
    uncertain first: the most signal per group), ties by index; the size-s set is the first s."""
    informative = [i for i, p in enumerate(pass_rates) if 0 < p < 1]
    ranked = sorted(informative, key=lambda i: (-pass_rates[i] * (1 - pass_rates[i]), i))
    return {str(z): ranked[:z] for z in sizes}


def selection_sizes(cfg: C.Config) -> list[int]:
    """The set sizes the select stage picks: N of every registered `problems: select-N`."""
    return sorted({n for c in cfg.conditions.values() if (n := C.selection_size(c)) is not None}, reverse=True)


def select(cfg: C.Config, base: str, run: Path, progress: bool = True) -> dict:
    setup_torch(cfg)
    device = pick_device(cfg)
    model, tok = load_model(cfg, base, device)
    train_set, _ = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    problems = train_set[: cfg.select.n_problems]
    s = C.SamplingCfg(temperature=cfg.select.temperature, top_p=1.0, top_k=0, max_new_tokens=cfg.train.sampling.max_new_tokens)
    texts, _ = sample_problems(model, tok, problems, cfg.select.samples, s, cfg.task.seed, "select", cfg.task.prompt_style, cfg.eval.problems_per_batch, progress)
    rows = score_problems(problems, texts, keep_responses=False)
    rates = [r["correct_strict"] / r["n"] for r in rows]
    sets = choose_sets(rates, selection_sizes(cfg))
    res = {
        "rule": "0 < strict pass rate < 1; rank by p(1-p) descending, ties by index; take the first s",
        "pass_rates": {p.id: r for p, r in zip(problems, rates)},
        "informative": [problems[i].id for i, r in enumerate(rates) if 0 < r < 1],
        "sets": {z: [problems[i].id for i in idx] for z, idx in sets.items()},
        "short": {z: len(idx) < int(z) for z, idx in sets.items()},
        "sampling": {"n": cfg.select.samples, "temperature": s.temperature, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0, "max_new_tokens": s.max_new_tokens},
        "provenance": provenance(cfg, "select", {"sizes": selection_sizes(cfg)}, str(device)),
    }
    atomic_write_json(run / "selection.json", res)
    return res


def condition_pool(cfg: C.Config, cond: C.ConditionCfg, run: Path) -> tuple[list, dict]:
    """The training problems of a condition and what they came from (for the stage hash)."""
    train_set, _ = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    size = C.selection_size(cond)
    if size is None:
        return train_set, {"problems": "all"}
    sel_path = run / "selection.json"
    if not sel_path.exists():
        raise FileNotFoundError(f"{sel_path} is missing: run the select stage before training on {cond.problems}")
    sel = json.loads(sel_path.read_text())
    ids = sel["sets"].get(str(size))
    if not ids:
        raise ValueError(f"{sel_path}: no problems for {cond.problems} (the base solved none of the first "
                         f"{cfg.select.n_problems} train problems sometimes-but-not-always)")
    by_id = {p.id: p for p in train_set}
    return [by_id[i] for i in ids], {"problems": cond.problems, "ids": ids}


def read_lr(cfg: C.Config, run: Path, name: str | None = None) -> float:
    """A condition's learning rate: its own `lr` if it registers one, else train.lr, else the
    lr-sweep's choice (its own sweep's, with lr_sweep.per_condition)."""
    cond = cfg.conditions.get(name) if name is not None else None
    if cond is not None and cond.lr is not None:
        return cond.lr
    if cfg.train.lr is not None:
        return cfg.train.lr
    path = run / "lr_choice.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run the lr-sweep stage, or set train.lr")
    d = json.loads(path.read_text())
    if cfg.lr_sweep.per_condition and name is not None:
        if name not in d.get("per_condition", {}):
            raise FileNotFoundError(f"{path} has no rate for condition {name}: run the lr-sweep stage again (lr_sweep.per_condition)")
        return float(d["per_condition"][name])
    return float(d["chosen"])


def pretrain_count(cfg: C.Config) -> int:
    """Problems in the pretrain split (drawn before dev, so dev stays disjoint from it)."""
    return cfg.model.build.n_pretrain if cfg.model.build is not None else 0


def train_job(cfg: C.Config, name: str, seed: int, run: Path) -> tuple[list, float, dict]:
    """The pool, learning rate and stage-hash inputs of one (condition, seed) training run."""
    cond = cfg.conditions[name]
    pool, inputs = condition_pool(cfg, cond, run)
    lr = read_lr(cfg, run, name)
    return pool, lr, {"condition": name, "settings": C.to_dict(cond), "seed": seed, **inputs, "lr": lr}


def train_dir(run: Path, name: str, seed: int) -> Path:
    return Path(run) / f"train_{name}_s{seed}"


SWEEP_CONDITION = C.ConditionCfg(problems="all")  # the report's rule: the many condition's recipe


def lr_sweep(cfg: C.Config, base: str, run: Path, progress: bool = True) -> dict:
    """lr_sweep.steps steps of the many condition per candidate, on the first training seed; the
    highest mean reward over the last lr_sweep.last steps wins (ties: the smaller rate). With
    lr_sweep.per_condition, every condition is swept with its own recipe and gets its own rate."""
    seed = cfg.train.seeds[0]
    sweeps = [(name, c, run / "lr_sweep" / name) for name, c in cfg.conditions.items()] if cfg.lr_sweep.per_condition \
        else [("many", SWEEP_CONDITION, run / "lr_sweep")]
    chosen, means = {}, {}
    for name, cond, folder in sweeps:
        pool, inputs = condition_pool(cfg, cond, run)
        inputs = {**inputs, "seed": seed} if not cfg.lr_sweep.per_condition else {**inputs, "seed": seed, "condition": name, "settings": C.to_dict(cond)}
        results = {}
        want = stage_hash(cfg, "lr-sweep", inputs)
        for lr in cfg.lr_sweep.candidates:
            out = folder / f"lr_{lr:g}"
            done = out / "done.json"
            for marker in (done, out / "last" / "state.json"):
                if marker.exists() and json.loads(marker.read_text())["provenance"]["stage_hash"] != want:
                    shutil.rmtree(out)  # made under other settings (the pipeline asks first): run it again
                    break
            if not done.exists():
                train(cfg, name, cond, seed, pool, lr, out, base, steps=cfg.lr_sweep.steps, checkpoints=[], inputs=inputs,
                      stage="lr-sweep", progress=progress)
            rows = read_log(out / "train_log.csv")
            results[f"{lr:g}"] = sum(r["reward_mean"] for r in rows[-cfg.lr_sweep.last :]) / cfg.lr_sweep.last
        means[name] = results
        chosen[name] = sorted(cfg.lr_sweep.candidates, key=lambda lr: (-results[f"{lr:g}"], lr))[0]
    first = next(iter(chosen))
    res = {"rule": f"highest mean reward over the last {cfg.lr_sweep.last} of {cfg.lr_sweep.steps} steps of "
                   + ("each condition's own recipe" if cfg.lr_sweep.per_condition else "the many condition")
                   + f", training seed {seed}; ties: the smaller rate",
           "mean_reward_last": means[first], "chosen": chosen[first],
           "provenance": provenance(cfg, "lr-sweep", {"problems": "all", "seed": seed})}
    if cfg.lr_sweep.per_condition:
        res["per_condition"], res["mean_reward_by_condition"] = chosen, means
    atomic_write_json(run / "lr_choice.json", res)
    return res


# ============================================================================= CLI


def default_run(config_path: str | None) -> Path:
    return ROOT / "results" / (Path(config_path).stem if config_path else "qwen05b")


def adapter_identity(adapter: str | Path) -> dict:
    """condition, train_seed and step of RUN/train_<condition>_s<seed>/step_<step> (None where
    the folder is not named that way, e.g. an adapter from elsewhere)."""
    a = Path(adapter)
    m = ADAPTER_RE.match(f"{a.parent.name}/{a.name}")
    if not m:
        return {"condition": None, "train_seed": None, "step": None}
    return {"condition": m["cond"], "train_seed": int(m["seed"]), "step": int(m["step"])}


ADAPTER_RE = re.compile(r"^train_(?P<cond>.+)_s(?P<seed>\d+)/step_(?P<step>\d+)$")


def eval_dir(run: Path, eval_set: str) -> Path:
    """Where an evaluation set's files go: the run folder for `test`, RUN/evalsets/<set>/ for the others."""
    return Path(run) if eval_set == "test" else Path(run) / "evalsets" / eval_set


def eval_name(adapter: str | None) -> str:
    """eval_base.json, or eval_<condition>_s<seed>_<step>.json for RUN/train_<condition>_s<seed>/step_<step>."""
    if adapter is None:
        return "eval_base.json"
    who = adapter_identity(adapter)
    if who["condition"] is None:
        raise C.ConfigError(f"--adapter {adapter}: not a RUN/train_<condition>_s<seed>/step_<step> folder; pass --out FILE")
    return f"eval_{who['condition']}_s{who['train_seed']}_{who['step']:03d}.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("train", "eval", "tokens", "select", "lr-sweep", "probe"):
        q = sub.add_parser(name)
        q.add_argument("--config", default=None, help="YAML config (default: the built-in qwen05b settings)")
        q.add_argument("--run", default=None, help="run folder (default: results/<config name>)")
        q.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. train.steps=10")
        q.add_argument("--quiet", action="store_true", help="no progress bars")
        if name == "train":
            q.add_argument("--condition", required=True, help="a condition registered in the config's `conditions` (many, 16, 1, ...)")
            q.add_argument("--seed", type=int, default=None, help="a training seed from train.seeds (default: the first)")
            q.add_argument("--out", default=None, help="output folder (default: RUN/train_<condition>_s<seed>)")
        if name == "eval":
            q.add_argument("--adapter", default=None, help="a PEFT adapter folder (default: evaluate the base)")
            q.add_argument("--eval-set", default="test", help="test (the eval section), or a set registered in eval_sets (wide, ood)")
            q.add_argument("--out", default=None, help="output JSON (default: RUN[/evalsets/<set>]/eval_base.json or eval_<cond>_s<seed>_<step>.json)")
        if name == "tokens":
            q.add_argument("--adapter", required=True, help="a PEFT adapter folder RUN/train_<cond>_s<seed>/step_<step>")
            q.add_argument("--out", default=None, help="output JSON (default: RUN/tokens_<cond>_s<seed>_<step>.json)")
    a = p.parse_args(argv)
    try:
        cfg = C.load(a.config, a.set)
        run = Path(a.run) if a.run else default_run(a.config)
        if a.cmd == "train":
            if a.condition not in cfg.conditions:
                raise C.ConfigError(f"--condition {a.condition!r}: not registered in conditions ({', '.join(cfg.conditions)})")
            seed = cfg.train.seeds[0] if a.seed is None else a.seed
            if seed not in cfg.train.seeds:
                raise C.ConfigError(f"--seed {seed}: not in train.seeds {cfg.train.seeds}")
        if a.cmd in ("eval", "tokens") and a.adapter and not (Path(a.adapter) / "adapter_config.json").exists():
            raise C.ConfigError(f"--adapter: no adapter_config.json in {a.adapter}")
        if a.cmd == "eval" and a.eval_set != "test" and a.eval_set not in cfg.eval_sets:
            raise C.ConfigError(f"--eval-set {a.eval_set!r}: not registered (test, or one of eval_sets: {', '.join(cfg.eval_sets) or 'none'})")
        out_eval = None
        if a.cmd == "eval":
            out_eval = Path(a.out) if a.out else eval_dir(run, a.eval_set) / eval_name(a.adapter)
        if a.cmd == "tokens":
            out_eval = Path(a.out) if a.out else run / eval_name(a.adapter).replace("eval_", "tokens_", 1)
        check_model_reachable(cfg)
        base = model_path(cfg, run)
    except C.ConfigError as e:
        print(f"grpo.py: {e}", file=sys.stderr)
        return 2
    run.mkdir(parents=True, exist_ok=True)
    prog = not a.quiet
    try:
        if a.cmd == "train":
            pool, lr, inputs = train_job(cfg, a.condition, seed, run)
            out = Path(a.out) if a.out else train_dir(run, a.condition, seed)
            train(cfg, a.condition, cfg.conditions[a.condition], seed, pool, lr, out, base, inputs=inputs, progress=prog)
        elif a.cmd == "tokens":
            r = token_compare(cfg, base, a.adapter, out_eval, prog)["summary"]
            print(f"{out_eval}: {r['positions']} positions, reranked {r['share_reranked']:.4f}, shifted {r['share_shifted']:.4f}")
        elif a.cmd == "eval":
            r = evaluate(cfg, base, a.adapter, out_eval, prog, a.eval_set)
            print(f"{out_eval}: strict pass@1 {r['pass_at_k']['strict']['1']:.3f}  loose pass@1 {r['pass_at_k']['loose']['1']:.3f}  "
                  f"loose pass@{(k := max(r['pass_at_k']['loose'], key=int))} {r['pass_at_k']['loose'][k]:.3f}  format {r['format_rate']:.3f}")
        elif a.cmd == "select":
            r = select(cfg, base, run, prog)
            print(f"{run / 'selection.json'}: {len(r['informative'])} of {cfg.select.n_problems} informative; sets {r['sets']}")
        elif a.cmd == "lr-sweep":
            r = lr_sweep(cfg, base, run, prog)
            print(f"{run / 'lr_choice.json'}: {r['mean_reward_last']} -> {r['chosen']:g}")
        elif a.cmd == "probe":
            for path in probe(cfg, base, run, prog):
                print(path)
    except (FileNotFoundError, ValueError, Diverged, RuntimeError) as e:
        print(f"grpo.py {a.cmd}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"grpo.py {a.cmd}: {e.strerror or e} ({e.filename or 'no file name'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
