"""The 0.5B study's GPU figures in one run (under 8 min): memory of a full training step with the
automatic micro-batch, an evaluation batch, seconds per step, and our sampler against generate.

    python bench/gpu_check.py            > gpu_check.json   # on a CUDA machine: the figures the README quotes
    python bench/gpu_check.py --dry                         # the same code path on the CPU at toy sizes (a test runs it)

The model is Qwen2.5-0.5B-Instruct's exact shape (qwen_shape.py: 24 layers, vocabulary 151,936,
tied embeddings) with random bf16 weights, built on the device; prompts are real arith-3x2
prompts through Qwen's tokenizer. No download. Each phase is measured by the CUDA allocator
(torch.cuda.max_memory_allocated and max_memory_reserved, reset before the phase); with --dry,
by the process's peak RSS (a code-path check, not a measurement).

  train_step  16 x 8 completions of exactly max_new_tokens (no stop token can be drawn), every
              other one a token shorter so the micro-batches are padded and attention takes its
              masked path (the worst case: memory.estimate_memory's ragged=True); advantages
              random and non-zero so every row goes through forward and backward; AdamW state
              exists (the second of two steps is measured). Micro-batch: memory.auto_micro_batch
              for configs/qwen05b.yaml (micro_batch 0, memory_gb 8).
  eval_batch  eval.problems_per_batch x eval.n samples at eval's settings, full length.
  sampler     tokens/s of sampler.sample against model.generate, same prompts, batch and settings
              (temperature 1, no top-k/top-p, no repetition penalty), alternating, median of 3;
              also sampler.sample with the LoRA folded (lora.fold_for_sampling) and its host reads per
              decoded token (sampler.count_host_reads).
  lm_head_on_slice  what lm_head costs on a non-contiguous slice of the hidden states (as
              logits_to_keep makes it) against a contiguous copy: on the CPU torch copies the
              (V, H) weight once per row there (bench/memory_05b.py); this says whether CUDA does.
  decode      the training rollout's decode both ways (sampling.decode eager and graph: static
              shapes, CUDA graphs, the fused tail): tokens/s, kernel launches and host reads per
              decoded token (torch.profiler), and with graph whether the graphs were kept.
  tail        bytes the sampling tail allocates per decoded token, eager (upcast, log-softmax,
              softmax, race) against fused (sampler.fused_draw), at the rollout's 128 rows.
  device_speed  the measured device-to-device copy bandwidth and bf16 matrix throughput, and from
              them the bound of a training step: decoding reads the weights once per token, the
              forward and backward cost 6 x params x tokens FLOPs; the step's ratio to it.
  train_step_auto  the training step again with memory_gb: auto (the device's free memory).

Prints one JSON object on stdout (progress goes to stderr).
"""
import argparse
import json
import statistics
import sys
import time
from contextlib import nullcontext

import torch

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

import config
import countdown
import grpo
import memory
import provenance
import qwen_shape
import sampler
from model import apply_lora, lora_folded, render_prompts

GIB = 2**30
# --dry: the same code path at sizes a 2-core CPU runs in seconds. The vocabulary, heads (14, 2 for
# K and V) and tokenizer stay Qwen's; the width shrinks (head size 8), so the bf16 products are cheap.
DRY = ["train.problems_per_step=2", "train.group_size=2", "train.sampling.max_new_tokens=8", "eval.problems_per_batch=2",
       "eval.n=2", "eval.k_max=2", "eval.sampling.max_new_tokens=8"]
DRY_SHAPE = dict(hidden_size=112, intermediate_size=256)


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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


def train_step(model, opt, prompts, G: int, s: config.SamplingCfg, micro_batch: int, pad: int, seed: int, sort: bool = False) -> dict:
    """One Dr. GRPO step as grpo.train runs it, forced to full length and padded (see the docstring)."""
    t0 = time.perf_counter()
    smp = sampler.sample(model, prompts, G, s, seed, [10**9], pad, entropy=True)  # no stop id can be drawn: full length
    t1 = time.perf_counter()
    n = len(smp.tokens)
    completions = [x[:-1] if i % 2 else x for i, x in enumerate(smp.tokens)]  # (n,) ragged by one token
    adv = torch.randn(n, generator=torch.Generator().manual_seed(seed)).clamp(min=0.1)  # (n,) non-zero: every row trains
    grpo.policy_gradient(model, [prompts[i // G] for i in range(n)], completions, adv, n * s.max_new_tokens, micro_batch, pad,
                         sort_by_length=sort)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    return {"sec_sampling": t1 - t0, "sec_fwd_bwd": t2 - t1, "tokens": sum(len(x) for x in smp.tokens)}


def sampler_vs_generate(model, prompts, G: int, s: config.SamplingCfg, stops: list[int], pad: int, repeats: int) -> dict:
    """Tokens/s of sampler.sample and of model.generate on the same batch and settings, alternating."""
    from transformers import GenerationConfig

    device = model.device
    ids, mask = sampler.left_pad(prompts, pad)
    ids, mask = ids.to(device), mask.to(device)
    gc = GenerationConfig(do_sample=True, temperature=s.temperature, top_k=0, top_p=1.0, repetition_penalty=1.0,
                          max_new_tokens=s.max_new_tokens, num_return_sequences=G, eos_token_id=stops, pad_token_id=pad)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def ours(r, fold=False):
        sync()
        t = time.perf_counter()
        with lora_folded(model) if fold else nullcontext():
            out = sampler.sample(model, prompts, G, s, r, stops, pad)
        sync()
        return sum(len(x) for x in out.tokens) / (time.perf_counter() - t)

    def generate(r):
        torch.manual_seed(r)
        sync()
        t = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)[:, ids.shape[1]:]  # (P*G, <=Lc)
        sync()
        done = torch.isin(out, torch.tensor(stops, device=device))  # (P*G, Lc): tokens after a stop are padding
        n_tok = int((done.cumsum(1) - done.long() == 0).sum())  # tokens up to and including each row's first stop
        return n_tok / (time.perf_counter() - t)

    ours(0), generate(0)  # warm-up (kernels, allocator)
    rates = {"ours": [], "generate": [], "folded": []}
    for r in range(1, repeats + 1):
        pair = [("ours", ours), ("generate", generate), ("folded", lambda r: ours(r, fold=True))]
        for name, fn in pair if r % 2 else pair[::-1]:
            rates[name].append(fn(r))
    mo, mg = statistics.median(rates["ours"]), statistics.median(rates["generate"])
    reads, smp = sampler.count_host_reads(lambda: sampler.sample(model, prompts, G, s, 0, stops, pad))
    return {"rows": len(prompts) * G, "max_new_tokens": s.max_new_tokens, "repeats": repeats,
            "ours_host_reads_per_token": round(reads / max(max(len(x) for x in smp.tokens), 1), 3),
            "ours_folded_tokens_per_s": round(statistics.median(rates["folded"]), 1),
            "ours_tokens_per_s": round(mo, 1), "generate_tokens_per_s": round(mg, 1), "speedup": round(mo / mg, 3)}


def model_free_gib(device: torch.device) -> float:
    from model import free_memory_gib

    return free_memory_gib(device)


def decode_both_ways(model, prompts, G: int, s: config.SamplingCfg, stops: list[int], pad: int) -> dict:
    """The rollout's decode with sampling.decode eager and graph: tokens/s (a warm-up first, then one
    timed run each), and under torch.profiler the kernel launches (CUDA) or operator calls (CPU) and
    host reads per decoded token."""
    from dataclasses import replace

    from torch.profiler import ProfilerActivity, profile

    device = model.device
    out = {}
    for mode in ("eager", "graph"):
        sm = replace(s, decode=mode)
        sampler.sample(model, prompts, G, sm, 0, stops, pad, entropy=True)  # warm-up; with graph: capture
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        smp = sampler.sample(model, prompts, G, sm, 1, stops, pad, entropy=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        sec = time.perf_counter() - t0
        steps = max(len(x) for x in smp.tokens)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=acts) as prof:
            sampler.sample(model, prompts, G, sm, 1, stops, pad, entropy=True)
        events = prof.key_averages()
        launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch"))
        ops = sum(e.count for e in events if e.key.startswith("aten::"))
        reads = sum(e.count for e in events if e.key in sampler.HOST_READS)
        out[mode] = {"tokens_per_s": round(sum(len(x) for x in smp.tokens) / sec, 1), "seconds": round(sec, 3), "positions": steps,
                     "kernel_launches_per_token": round(launches / steps, 1) if device.type == "cuda" else None,
                     "aten_calls_per_token": round(ops / steps, 1), "host_reads_per_token": round(reads / steps, 3)}
    out["graphs_off"] = sampler.StaticStep.graphs_off  # why CUDA graphs were given up (None: kept, or a CPU)
    out["graph_over_eager"] = round(out["graph"]["tokens_per_s"] / out["eager"]["tokens_per_s"], 2)
    return out


def tail_bytes(V: int, rows: int, device: torch.device) -> dict:
    """Bytes allocated per decoded token by the sampling tail at `rows` rows and vocabulary V (bf16
    logits in): the eager tail's (upcast, log-softmax for the entropy, softmax, the race) against
    sampler.fused_draw's, from torch.profiler's memory accounting."""
    from torch.profiler import ProfilerActivity, profile

    logits = torch.randn(rows, V, device=device, dtype=torch.bfloat16)
    gen = torch.Generator(device=device).manual_seed(0)

    def eager():
        x = logits.float()
        lp = x.log_softmax(-1)
        _ = -(lp.exp() * lp).sum(-1)
        return sampler.multinomial(x.softmax(-1), gen)

    out = {"rows": rows, "vocab": V, "logits_bytes": rows * V * 2, "chunk": sampler.TAIL_CHUNK}
    for name, fn in (("eager", eager), ("fused", lambda: sampler.fused_draw(logits, 1.0, gen, True))):
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
        with profile(activities=acts, profile_memory=True) as prof:
            fn()
        key = "self_device_memory_usage" if device.type == "cuda" else "self_cpu_memory_usage"
        out[f"{name}_bytes_allocated"] = int(sum(max(getattr(e, key, 0) or 0, 0) for e in prof.key_averages()))
        out[f"{name}_peak_bytes"] = int(torch.cuda.max_memory_allocated() - start) if device.type == "cuda" else None
    out["note"] = ("allocated: every temporary's bytes, summed; peak: the most held at once (CUDA). The fused tail holds q "
                   "(rows x V fp32) and one chunk's temporaries, which can stay in L2; the eager tail several rows x V fp32 tensors")
    return out


def device_speed(device: torch.device, small: bool) -> dict:
    """A device-to-device copy's bandwidth (bytes read and written) and a bf16 matrix product's FLOP/s,
    each the best of 5 timed runs after a warm-up."""
    n = (2**24 if small else 2**30) // 2  # bf16 elements: 16 MiB or 1 GiB
    a, b = torch.empty(n, dtype=torch.bfloat16, device=device), torch.empty(n, dtype=torch.bfloat16, device=device)
    m = 256 if small else 8192
    x = torch.randn(m, m, dtype=torch.bfloat16, device=device)

    def best(fn):
        fn()
        times = []
        for _ in range(5):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return min(times)

    copy = best(lambda: b.copy_(a))
    mm = best(lambda: x @ x)
    return {"copy_gb_per_s": round(2 * n * 2 / copy / 1e9, 1), "bf16_tflops": round(2 * m**3 / mm / 1e12, 3),
            "copy_bytes": 2 * n, "matmul_size": m}


def lm_head_on_slice(model, b: int, T: int, k: int) -> dict:
    """Peak memory (over what was allocated at the start; the (b, k, V) output included in both)
    and time of lm_head on hidden[:, -k:] (non-contiguous, as logits_to_keep makes it) vs on a
    contiguous copy of the same slice: the difference is what the slice costs on this device."""
    device, W = model.device, model.lm_head.weight
    out = {}
    for name in ("slice", "contiguous"):
        h = torch.randn(b, T, W.shape[1], device=device, dtype=W.dtype)  # (b, T, H)
        x = h[:, -k:, :] if name == "slice" else h[:, -k:, :].contiguous()  # (b, k, H)
        with torch.inference_mode(), Peak(device) as pk:
            base = torch.cuda.memory_allocated() / GIB if device.type == "cuda" else 0.0
            torch.nn.functional.linear(x, W)  # (b, k, V)
        out[name] = {"seconds": round(pk.seconds, 4), "peak_over_start_gib": round(pk.allocated - base, 3)}
    out["rows"], out["positions"] = b, k
    out["weight_gib"] = round(W.numel() * W.element_size() / GIB, 3)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "qwen05b.yaml"))
    p.add_argument("--dry", action="store_true", help="the same code path on the CPU at toy sizes (1 layer, width 112, 8 new tokens)")
    p.add_argument("--layers", type=int, default=None, help="default: 24 (1 with --dry)")
    p.add_argument("--repeats", type=int, default=None, help="sampler timings per side (default 3; 1 with --dry)")
    a = p.parse_args(argv)
    if not a.dry and not torch.cuda.is_available():
        print("gpu_check.py: no CUDA device; run with --dry for the CPU code-path check", file=sys.stderr)
        return 2
    device = torch.device("cpu" if a.dry else "cuda")
    cfg = config.load(a.config, DRY if a.dry else [])
    layers = a.layers or (1 if a.dry else 24)
    if a.dry:
        torch.set_num_threads(1)
    torch.use_deterministic_algorithms(False)  # speed as the GPU gives it; setup_torch is not called here
    t_all = time.perf_counter()

    log(f"building Qwen2.5-0.5B's shape{' (width 112: --dry)' if a.dry else ''}, {layers} layers, bf16, on {device}")
    model = qwen_shape.random_model(layers, 0, device, **(DRY_SHAPE if a.dry else {}))
    for q in model.parameters():
        q.requires_grad_(False)
    tok = qwen_shape.load_tokenizer()
    t, e = cfg.train, cfg.eval
    train_set, _ = countdown.make_splits(cfg.task.name, 64, 8, cfg.task.seed)
    prompts = render_prompts(tok, train_set[: t.problems_per_step], cfg.task.prompt_style)
    prompt_len = max(len(x) for x in prompts)
    stops, pad = [qwen_shape.IM_END, qwen_shape.ENDOFTEXT], tok.pad_token_id
    res = {
        "script": "bench/gpu_check.py", "dry": a.dry, "device": device.type,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / GIB, 1) if device.type == "cuda" else None,
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": provenance.versions()["transformers"],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "revision": provenance.code_revision(),
        "shape": {"layers": layers, "hidden": model.config.hidden_size, "vocab": model.config.vocab_size,
                  "params": sum(q.numel() for q in model.parameters()), "dtype": "bfloat16"},
        "config": {"file": a.config, "problems_per_step": t.problems_per_step, "group_size": t.group_size,
                   "max_new_tokens": t.sampling.max_new_tokens, "prompt_len": prompt_len, "lora_r": cfg.lora.r,
                   "micro_batch": cfg.micro_batch, "memory_gb": cfg.memory_gb},
    }

    # ---- training step: LoRA, AdamW, the automatic micro-batch
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, 0)
    opt = grpo.make_optimizer(model, cfg, 1e-5)
    mb = memory.auto_micro_batch(cfg, model.config, prompt_len)
    n = t.problems_per_step * t.group_size
    est = memory.estimate_memory(model.config, cfg.lora.r, len(cfg.lora.targets), prompt_len, t.sampling.max_new_tokens, mb, n)
    log(f"train step: {t.problems_per_step} x {t.group_size} x {t.sampling.max_new_tokens}, micro-batch {mb}, "
        f"estimate {est['train_step'] / GIB:.2f} GiB; step 1 (warm-up, makes AdamW's state)")
    train_step(model, opt, prompts, t.group_size, t.sampling, mb, pad, seed=1, sort=t.sort_by_length)
    log("train step 2 (measured)")
    with Peak(device) as pk:
        st = train_step(model, opt, prompts, t.group_size, t.sampling, mb, pad, seed=2, sort=t.sort_by_length)
    res["train_step"] = {
        "micro_batch": mb, "micro_batch_auto": cfg.micro_batch == 0, "rows": n, "tokens": st["tokens"],
        "estimate_gib": round(est["train_step"] / GIB, 3), "estimate_parts_gib": {k: round(est[k] / GIB, 3) for k in ("static", "activations", "attention_mask", "logits")},
        "peak_allocated_gib": round(pk.allocated, 3), "peak_reserved_gib": round(pk.reserved, 3),
        "under_budget": pk.reserved < cfg.memory_gb if device.type == "cuda" else None,  # memory_gb counts GiB, as the estimate does
        "seconds": round(pk.seconds, 2), "sec_sampling": round(st["sec_sampling"], 2), "sec_fwd_bwd": round(st["sec_fwd_bwd"], 2),
    }

    # ---- one evaluation batch (the adapter on, as when a checkpoint is evaluated)
    opt = None
    for q in model.parameters():
        q.grad = None
    ev_prompts = [prompts[i % len(prompts)] for i in range(e.problems_per_batch)]
    ev_est = memory.estimate_memory(model.config, cfg.lora.r, len(cfg.lora.targets), prompt_len, e.sampling.max_new_tokens, 1,
                                  e.problems_per_batch * e.n, top_p=e.sampling.top_p < 1)
    log(f"eval batch: {e.problems_per_batch} x {e.n} x {e.sampling.max_new_tokens}")
    with Peak(device) as pk:
        smp = sampler.sample(model, ev_prompts, e.n, e.sampling, 3, [10**9], pad)
    res["eval_batch"] = {
        "rows": e.problems_per_batch * e.n, "max_new_tokens": e.sampling.max_new_tokens, "temperature": e.sampling.temperature,
        "top_p": e.sampling.top_p, "estimate_gib": round(ev_est["sampling"] / GIB, 3),
        "peak_allocated_gib": round(pk.allocated, 3), "peak_reserved_gib": round(pk.reserved, 3), "seconds": round(pk.seconds, 2),
        "tokens_per_s": round(sum(len(x) for x in smp.tokens) / pk.seconds, 1),
    }

    # ---- sampler against generate (LoRA on: the sampler's real load)
    repeats = a.repeats or (1 if a.dry else 3)
    log(f"sampler vs generate: {len(prompts)} x {t.group_size} x {t.sampling.max_new_tokens}, {repeats} each")
    res["sampler"] = sampler_vs_generate(model, prompts, t.group_size, t.sampling, stops, pad, repeats)

    # ---- the decode both ways, the tail's bytes, the device's bandwidth and throughput, the bound
    res["decode"] = decode_both_ways(model, prompts, t.group_size, t.sampling, stops, pad)
    res["tail"] = tail_bytes(model.config.vocab_size, len(prompts) * t.group_size, device)
    res["device_speed"] = device_speed(device, small=a.dry)
    weight_bytes = sum(q.numel() * q.element_size() for q in model.parameters())
    rows = len(prompts) * t.group_size
    speed = res["device_speed"]
    bound = (t.sampling.max_new_tokens * weight_bytes / (speed["copy_gb_per_s"] * 1e9)
             + 6 * res["shape"]["params"] * rows * (prompt_len + t.sampling.max_new_tokens) / (speed["bf16_tflops"] * 1e12))
    res["bound"] = {"step_seconds": round(bound, 3), "measured_step_seconds": res["train_step"]["seconds"],
                    "ratio": round(res["train_step"]["seconds"] / bound, 2),
                    "how": "max_new_tokens x weight bytes / copy bandwidth + 6 x params x rows x (prompt + new tokens) / bf16 FLOP/s"}
    if device.type == "cuda" or a.dry:
        auto = config.load(a.config, (DRY if a.dry else []) + ["memory_gb=auto"])
        free = model_free_gib(device)
        mb_auto = memory.auto_micro_batch(auto, model.config, prompt_len, free)
        log(f"train step with memory_gb auto ({free:.1f} GiB free): micro-batch {mb_auto}")
        opt = grpo.make_optimizer(model, cfg, 1e-5)
        train_step(model, opt, prompts, t.group_size, t.sampling, mb_auto, pad, seed=4, sort=t.sort_by_length)
        with Peak(device) as pk:
            st = train_step(model, opt, prompts, t.group_size, t.sampling, mb_auto, pad, seed=5, sort=t.sort_by_length)
        res["train_step_auto"] = {"free_gib": round(free, 2), "micro_batch": mb_auto, "peak_allocated_gib": round(pk.allocated, 3),
                                  "peak_reserved_gib": round(pk.reserved, 3), "seconds": round(pk.seconds, 2),
                                  "sec_sampling": round(st["sec_sampling"], 2), "sec_fwd_bwd": round(st["sec_fwd_bwd"], 2)}
        opt = None
        for q in model.parameters():
            q.grad = None

    # ---- lm_head on a non-contiguous slice (logits_to_keep), as the training forward makes it
    res["lm_head_on_slice"] = lm_head_on_slice(model, max(mb, 1), prompt_len + t.sampling.max_new_tokens, t.sampling.max_new_tokens + 1)
    res["total_seconds"] = round(time.perf_counter() - t_all, 1)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
