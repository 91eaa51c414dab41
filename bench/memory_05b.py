"""Memory of the 0.5B study: the estimate from the code path, and (on a GPU) the measurement.

    python bench/memory_05b.py [--micro-batch 3] [--prompt-len 80] [--measure]
    python bench/memory_05b.py --cpu-check 24 --micro-batch 2 [--uniform] [--checkpointing]   # against peak RSS
    python bench/memory_05b.py --cpu-sample-check 2 [--rows 256]            # the sampling estimate against peak RSS

The estimate (memory.estimate_memory) needs no download: the shape of Qwen2.5-0.5B-Instruct is
written below. With --measure and a CUDA device, a randomly initialised model of exactly that
shape in bf16 runs one full training step at 16 x 8 completions of max_new_tokens each (every
completion forced to full length, every other one a token shorter so that micro-batches are
padded and attention takes its masked path: the worst case) and one evaluation batch, and reports
torch.cuda.max_memory_allocated for each phase (bench/gpu_check.py does this and more, in one JSON).
The CPU check makes its rows ragged the same way (--uniform: all the same length, no mask). The
sampling check decodes one call of the evaluation's largest size (--rows, default the config's
largest: eval.max_rows) with the static decode at the evaluation's settings (keyed draws, top-p,
full capacity), and compares peak resident memory growth with memory.decoder_bytes.
"""

import argparse
import time

import torch

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

from method import objective, sampler, training
from method.model import apply_lora, checkpoint_layers
from orchestration import config, memory

QWEN05B = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    rms_norm_eps=1e-6,
)


def gib(x: float) -> str:
    return f"{x / 2**30:6.3f} GiB"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "qwen05b.yaml"))
    p.add_argument(
        "--prompt-len", type=int, default=80, help="prompt tokens (the instruct prompt with Qwen's template is ~70)"
    )
    p.add_argument("--micro-batch", type=int, default=None, help="default: the config's (0 = chosen from memory_gb)")
    p.add_argument("--measure", action="store_true", help="run the step on a CUDA device and measure")
    p.add_argument(
        "--cpu-check",
        type=int,
        default=0,
        metavar="LAYERS",
        help="check the per-micro-batch part of the estimate on the CPU: a model of 0.5B's width and vocabulary "
        "with this many layers, one micro-batch forward/backward, peak RSS growth against the estimate",
    )
    p.add_argument(
        "--uniform",
        action="store_true",
        help="with --cpu-check: every row the same length (no padding, no attention mask)",
    )
    p.add_argument(
        "--checkpointing",
        action="store_true",
        help="with --cpu-check: train.gradient_checkpointing on (method/model.checkpoint_layers), estimate and step",
    )
    p.add_argument(
        "--cpu-sample-check",
        type=int,
        default=0,
        metavar="LAYERS",
        help="check memory.decoder_bytes on the CPU: one evaluation call of --rows samples of one prompt, static decode, "
        "a model of 0.5B's width and vocabulary with this many layers, peak RSS growth against the estimate",
    )
    p.add_argument(
        "--rows",
        type=int,
        default=None,
        help="with --cpu-sample-check: rows of the call (default: the config's largest)",
    )
    return p.parse_args()


def main():
    a = parse_args()
    if a.cpu_check:
        return cpu_check(a)
    if a.cpu_sample_check:
        return cpu_sample_check(a)
    from transformers import Qwen2Config

    cfg = config.load(a.config)
    mc = Qwen2Config(**QWEN05B)
    t = cfg.train
    n = t.problems_per_step * t.group_size
    mb = a.micro_batch or memory.auto_micro_batch(cfg, mc, a.prompt_len)
    print(
        f"Qwen2.5-0.5B shape, LoRA r {cfg.lora.r} on {len(cfg.lora.targets)} projections, {t.problems_per_step} x {t.group_size} "
        f"x {t.sampling.max_new_tokens} new tokens, prompt {a.prompt_len} tokens, micro-batch {mb}, budget {cfg.memory_gb} GB"
    )
    for b in sorted({1, 2, 3, 4, 8, mb}):
        e = memory.estimate_memory(mc, cfg.lora.r, len(cfg.lora.targets), a.prompt_len, t.sampling.max_new_tokens, b, n)
        print(
            f"  estimate, micro-batch {b}: train step {gib(e['train_step'])} = static {gib(e['static'])} "
            f"+ activations {gib(e['activations'])} + logits {gib(e['logits'])}"
        )
    e = memory.estimate_memory(
        mc,
        cfg.lora.r,
        len(cfg.lora.targets),
        a.prompt_len,
        cfg.eval.sampling.max_new_tokens,
        1,
        cfg.eval.problems_per_batch * cfg.eval.n,
        top_p=cfg.eval.sampling.top_p < 1,
    )
    print(
        f"  estimate, eval batch of {cfg.eval.problems_per_batch} x {cfg.eval.n}: {gib(e['sampling'])} (KV cache {gib(e['kv_cache'])})"
    )
    if a.measure:
        measure(cfg, mc, a.prompt_len, mb)


def measure(cfg, mc, prompt_len: int, mb: int) -> None:
    """The estimate's three phases run on a CUDA device at Qwen2.5-0.5B's shape (random weights), peaks measured."""
    if not torch.cuda.is_available():
        raise SystemExit("--measure needs a CUDA device")
    from transformers import Qwen2ForCausalLM

    t = cfg.train
    n = t.problems_per_step * t.group_size

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(mc).to(dtype=torch.bfloat16, device=dev).eval()
    for q in model.parameters():
        q.requires_grad_(False)
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, 0)
    opt = training.make_optimizer(model, cfg, 1e-5)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 150000, (prompt_len,), generator=g).tolist() for _ in range(t.problems_per_step)]
    for q in model.parameters():  # AdamW's moments exist from the second step on: make them now
        if q.requires_grad:
            q.grad = torch.zeros_like(q)
    opt.step()
    opt.zero_grad(set_to_none=True)
    # sampling phase: no EOS can stop a sequence (stop id out of range), so all run to full length
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    smp = sampler.sample(model, prompts, t.group_size, t.sampling, 0, [10**9], 0)
    torch.cuda.synchronize()
    print(
        f"  measured sampling {n} x {t.sampling.max_new_tokens}: peak {gib(torch.cuda.max_memory_allocated())} "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    adv = torch.randn(n)
    comps = [x[:-1] if i % 2 else x for i, x in enumerate(smp.tokens)]  # ragged by one token: the masked attention path
    objective.policy_gradient(
        model,
        [prompts[i // t.group_size] for i in range(n)],
        comps,
        adv,
        0,
        objective.Terms(n * t.sampling.max_new_tokens, mb),
    )
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(
        f"  measured train step (micro-batch {mb}): peak {gib(torch.cuda.max_memory_allocated())} ({time.perf_counter() - t0:.1f} s)"
    )
    torch.cuda.reset_peak_memory_stats()
    ev = [prompts[i % len(prompts)] for i in range(cfg.eval.problems_per_batch)]
    sampler.sample(model, ev, cfg.eval.n, cfg.eval.sampling, 0, [10**9], 0)
    print(
        f"  measured eval batch {cfg.eval.problems_per_batch} x {cfg.eval.n}: peak {gib(torch.cuda.max_memory_allocated())}"
    )


def ragged_rows(b: int, prompt_len: int, Lc: int, g: torch.Generator, uniform: bool = False):
    """b random prompts and completions. Ragged (what training sees): row 0 has the longest prompt
    and the longest completion (so the padded micro-batch is prompt_len + Lc wide, the estimate's
    T), the others are shorter, so pack() pads them and attention takes its masked path. uniform:
    every row prompt_len + Lc (no padding, no mask: the path the estimate's ragged=False counts)."""
    plens = [prompt_len if uniform or i == 0 else prompt_len - 1 - (5 * i) % max(1, prompt_len // 4) for i in range(b)]
    clens = [Lc if uniform or i == 0 else max(1, Lc - 1 - (37 * i) % max(1, Lc // 2)) for i in range(b)]
    prompts = [torch.randint(0, 150000, (n,), generator=g).tolist() for n in plens]
    comps = [torch.randint(0, 150000, (n,), generator=g).tolist() for n in clens]
    return prompts, comps


def cpu_check(a) -> None:
    """Peak resident memory growth of one micro-batch's forward + backward (bf16, CPU) against the
    estimate's activations + logits for the same depth. The CPU allocator returns large blocks to
    the system, so peak RSS tracks live tensors closely enough to check the estimate's size."""
    import resource

    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)
    mc = Qwen2Config(**{**QWEN05B, "num_hidden_layers": a.cpu_check})
    cfg = config.load(a.config)
    b, Lc = a.micro_batch or 1, cfg.train.sampling.max_new_tokens
    ragged = not a.uniform and b > 1  # one row has nothing to pad
    torch.manual_seed(0)
    model = Qwen2ForCausalLM._from_config(mc, dtype=torch.bfloat16).eval()  # built in bf16: no fp32 peak first
    for q in model.parameters():
        q.requires_grad_(False)
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, 0)
    if a.checkpointing:
        checkpoint_layers(model)
    g = torch.Generator().manual_seed(0)
    prompts, comps = ragged_rows(b, a.prompt_len, Lc, g, uniform=not ragged)
    for q in model.parameters():  # grads of LoRA exist before we measure (they are "static" in the estimate)
        if q.requires_grad:
            q.grad = torch.zeros_like(q)
    with open("/proc/self/statm") as f:  # resident pages now (ru_maxrss would be the peak so far)
        before = int(f.read().split()[1]) * resource.getpagesize()
    t0 = time.perf_counter()
    objective.policy_gradient(model, prompts, comps, torch.ones(b), 0, objective.Terms(b * Lc, b))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    args = (mc, cfg.lora.r, len(cfg.lora.targets), a.prompt_len, Lc, b, b)
    new = memory.estimate_memory(*args, ragged=ragged, checkpointing=a.checkpointing)
    old = memory.estimate_memory(*args, ragged=False, checkpointing=a.checkpointing)  # before the masked path counted
    growth = peak - before
    est = new["activations"] + new["logits"]
    print(
        f"CPU check, {a.cpu_check} layers of 0.5B's width, micro-batch {b} "
        f"{'ragged (masked attention)' if ragged else 'uniform (no mask)'}"
        f"{', gradient checkpointing' if a.checkpointing else ''}, "
        f"{a.prompt_len} + {Lc} tokens ({time.perf_counter() - t0:.0f} s):\n"
        f"  peak RSS growth {gib(growth)}\n"
        f"  estimate (activations + logits) {gib(est)} (of which masked attention {gib(new['attention_mask'])}, "
        f"logits {gib(new['logits'])}; without the mask {gib(old['activations'] + old['logits'])}); "
        f"measured / estimate {growth / est:.3f}"
    )


def cpu_sample_check(a) -> None:
    """Peak resident memory growth of one evaluation sampling call (bf16 where the CPU has native bf16,
    else fp32; one prompt's `rows` samples, the static decode with keyed draws at the config's
    temperature and top-p, its buffers at full capacity) against memory.decoder_bytes. Every token id
    is a stop, so every row ends at its first token and the decode stops at its first check
    (static_decode.CHECK_EVERY tokens at full width): the buffers and one step's temporaries, the
    estimate's two parts, are all allocated, without decoding max_new_tokens."""
    import resource
    from dataclasses import replace

    from transformers import Qwen2Config, Qwen2ForCausalLM

    from method.model import native_bf16
    from orchestration import study

    torch.set_num_threads(1)
    cfg = config.load(a.config)
    e = cfg.eval
    rows = a.rows or memory.largest_call(cfg, e.n_base or e.n, e.problems_per_batch)
    dtype, act = (torch.bfloat16, 2) if native_bf16() else (torch.float32, 4)
    mc = Qwen2Config(**{**QWEN05B, "num_hidden_layers": a.cpu_sample_check})
    torch.manual_seed(0)
    model = Qwen2ForCausalLM._from_config(mc, dtype=dtype).eval()
    prompt = torch.randint(0, 150000, (a.prompt_len,), generator=torch.Generator().manual_seed(0)).tolist()
    s = replace(e.sampling, decode="graph")
    with open("/proc/self/statm") as f:
        before = int(f.read().split()[1]) * resource.getpagesize()
    t0 = time.perf_counter()
    sampler.sample(
        model,
        [prompt],
        rows,
        s,
        [study.seed_for("memory_05b", 0, j) for j in range(rows)],
        list(range(mc.vocab_size)),
        0,
    )
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    top = s.top_p < 1.0 or s.top_k > 0
    est = memory.decoder_bytes(
        mc, rows, a.prompt_len + s.max_new_tokens, top_p=top, act_bytes=act, keyed=e.draw == "sample"
    )
    print(
        f"CPU sampling check, {a.cpu_sample_check} layers of 0.5B's width, {rows} rows, {a.prompt_len} + {s.max_new_tokens} "
        f"positions, {str(dtype).removeprefix('torch.')}, T {s.temperature:g}, top-p {s.top_p:g}, draw {e.draw} "
        f"({time.perf_counter() - t0:.0f} s):\n"
        f"  peak RSS growth {gib(growth)}\n  memory.decoder_bytes {gib(est)}; measured / estimate {growth / est:.3f}"
    )


if __name__ == "__main__":
    main()
