"""bench/gpu_check.py's two phases that measure what runner/cost_model.py prices: whole decode calls at the
evaluation sampler through each path the study can take (graph or eager decode, the top-p tail by sort or by
cut, LoRA folded or not), 10; and a training step's fixed cost per micro-batch (its launches and host time),
11, from the same rows split into micro-batches of different sizes."""

import time
from dataclasses import replace

import numpy as np
import torch
from gpu_context import Ctx, fresh_graphs, no_stop, sync

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

from method import objective, sampler, static_decode
from method.model import lora_folded
from runner import cost_model


def _timed(ctx: Ctx, fn) -> float:
    sync(ctx.device)
    t0 = time.perf_counter()
    fn()
    sync(ctx.device)
    return time.perf_counter() - t0


def decode_paths(ctx: Ctx) -> dict:
    """Seconds per decode step of a whole sampling call at the evaluation sampler (the rows of phase 04, no
    stop: every row runs max_new_tokens), for the graph and the eager decode, the tail by sort and by cut,
    LoRA folded and unfolded; a warm-up call first (with graphs: the captures), then the timed one. Under the
    cut the graph decode's steps take the fallback on the device (cut_tail.cut_draw_static) and capture too;
    a call that needs more fallback rows than a step holds is redone eagerly (`redone`)."""
    cfg, G = ctx.cfg, ctx.cfg.train.group_size
    steps, backend = ctx.sizes.tokens_paths, static_decode.graph_backend(ctx.device)
    rows, out = len(ctx.prompts) * G, {}
    for decode in ("graph", "eager"):
        for tail in ("sort", "cut"):
            for folded in (False, True):
                s = replace(cfg.eval.sampling, max_new_tokens=steps, decode=decode, tail=tail)
                fresh_graphs()
                before, redone = backend.captures, static_decode.REDONE["calls"]
                with lora_folded(ctx.model) if folded else torch.no_grad():

                    def call(seed):
                        return sampler.sample(ctx.model, ctx.prompts, G, s, seed, no_stop(ctx), ctx.pad)

                    _timed(ctx, lambda: call(0))
                    sec = _timed(ctx, lambda: call(1))
                key = f"{decode}_{tail}_{'folded' if folded else 'unfolded'}"
                out[key] = {
                    "seconds_per_step": round(sec / steps, 6),
                    "tokens_per_s": round(rows * steps / sec, 1),
                    "captures": backend.captures - before,
                    "redone": static_decode.REDONE["calls"] - redone,  # calls the cut's graph steps could not hold
                    "graphs_off": static_decode.StaticStep.graphs_off,
                }
    fastest = min(out, key=lambda k: out[k]["seconds_per_step"])
    return {
        "rows": rows,
        "max_new_tokens": steps,
        "temperature": cfg.eval.sampling.temperature,
        "top_p": cfg.eval.sampling.top_p,
        "paths": out,
        "fastest": fastest,
    }


def step_host(ctx: Ctx) -> dict:
    """A training step's fixed cost per micro-batch: the same rows (fixed tokens, every advantage non-zero)
    through objective.policy_gradient in micro-batches of 1, 2, 4 and 8 rows, each timed after a warm-up; a
    least-squares line seconds = fixed x micro-batches + per_row x rows gives the fixed part (launches, host
    time: what a micro-batch costs whatever its rows), beside the cost model's floor for it (its kernels at
    cost_model.EAGER_OP_S each)."""
    cfg, model = ctx.cfg, ctx.model
    rows, length = 8, ctx.sizes.tokens_paths
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    completions = torch.randint(100, vocab - 100, (rows, length), generator=gen).tolist()
    prompts = [ctx.prompts[i % len(ctx.prompts)] for i in range(rows)]
    adv = torch.linspace(0.1, 1.0, rows)
    model.train()
    secs = {}
    try:
        for mb in (1, 2, 4, 8):

            def step(mb=mb):
                objective.policy_gradient(
                    model, prompts, completions, adv, ctx.pad, objective.Terms(float(rows * length), mb)
                )
                for p in model.parameters():
                    p.grad = None

            step()  # warm-up
            secs[mb] = _timed(ctx, step)
    finally:
        model.eval()
    n_batches = np.array([rows / mb for mb in secs])
    fixed, per_row = np.linalg.lstsq(
        np.stack([n_batches, np.full(len(secs), float(rows))], axis=1), np.array(list(secs.values())), rcond=None
    )[0]
    layers, targets = model.config.num_hidden_layers, len(cfg.lora.targets)
    kernels = cost_model.STEP_KERNELS * (
        layers * (cost_model.OPS_PER_LAYER + targets * cost_model.LORA_OPS) + cost_model.TAIL_OPS
    )
    return {
        "rows": rows,
        "tokens_per_row": length,
        "seconds_by_micro_batch": {str(k): round(v, 4) for k, v in secs.items()},
        "fixed_seconds_per_micro_batch": round(float(fixed), 5),
        "seconds_per_row": round(float(per_row), 5),
        "cost_model_floor_per_micro_batch": round(kernels * cost_model.EAGER_OP_S, 5),
        "cost_model_kernels_per_micro_batch": round(kernels),
    }
