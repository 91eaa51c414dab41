"""Where the CPU's time goes in a study's three kinds of work (issue 69): an evaluation-type sampling call, a
training micro-batch's policy gradient and change 57's base-support pass, each once under torch's profiler, the
self time of every aten op summed into a few kinds (matrix products, attention, norms and elementwise, the
sampling tail, copies and the rest) beside the wall time, so that what to speed up is read off, not guessed.

    python bench/profile_cpu.py --config configs/smollm2_v3.yaml --model RUN/base_model [--threads 1]

The config gives the task, its prompts, the evaluation sampler (with eval.draw: sample, each sample its own
keyed stream) and LoRA's shape; the model folder is a built base (`pipeline.py --stage base`). A profiler adds its
own cost to each op: the shares are what to read, the seconds an upper bound; an op's kind is read from its name
(KINDS), roughly. Timings belong to the machine they
ran on: quote them with its name, one thread, nothing else running.
"""

import argparse
import json
import time
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

import countdown
from method import base_support, objective, sampler
from method.model import apply_lora, load_model, pad_id, render_prompts, stop_ids
from orchestration import config

KINDS = (  # the first kind whose words an op's name holds
    ("products", ("mm", "matmul", "linear", "addmm", "bmm", "baddbmm")),
    ("attention", ("attention", "_efficient", "_flash", "scaled_dot")),
    ("tail", ("sort", "topk", "cumsum", "searchsorted", "softmax", "exponential", "multinomial", "argmax", "gather")),
    ("copies", ("copy", "cat", "index", "clone", "contiguous", "to", "fill", "zero", "empty", "scatter")),
    ("norms and elementwise", ("mul", "add", "pow", "mean", "rsqrt", "silu", "neg", "div", "sub", "exp", "log", "sum")),
)


def kind(name: str) -> str:
    op = name.removeprefix("aten::")
    return next((k for k, words in KINDS if any(w in op for w in words)), "other")


def profiled(fn) -> dict:
    """fn() once under the profiler: wall seconds, and the ops' self CPU seconds by kind (and the five largest ops)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
    by_kind, by_op = {}, {}
    for e in prof.key_averages():
        if not e.key.startswith("aten::"):
            continue
        s = e.self_cpu_time_total / 1e6
        by_kind[kind(e.key)] = by_kind.get(kind(e.key), 0.0) + s
        by_op[e.key] = s
    total = sum(by_kind.values())
    return {
        "wall_s": round(wall, 3),
        "ops_self_s": round(total, 3),
        "shares": {k: round(v / total, 3) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "largest_ops": {k: round(v, 3) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:5]},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/smollm2_v3.yaml")
    p.add_argument("--model", required=True, help="a built base folder (RUN/base_model)")
    p.add_argument("--problems", type=int, default=4)
    p.add_argument("--samples", type=int, default=16, help="samples per problem in the sampling call")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    cfg = config.load(a.config)
    model, tok = load_model(cfg, a.model, torch.device("cpu"))
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed=0)  # B = 0: the base's outputs, LoRA's cost
    _, problems = countdown.make_splits(cfg.task.name, 0, a.problems, cfg.task.seed)
    prompts = render_prompts(tok, problems, cfg.task.prompt_style, cfg.task.system_prompt)
    s, stops, pad = replace(cfg.eval.sampling, decode="eager"), stop_ids(model, tok), pad_id(tok)
    seeds = list(range(len(prompts) * a.samples))
    out = {"config": a.config, "model": a.model, "threads": a.threads, "rows": len(seeds), "sampler": vars(s)}
    samples = []
    out["sample"] = profiled(lambda: samples.append(sampler.sample(model, prompts, a.samples, s, seeds, stops, pad)))
    comps = samples[0].tokens
    rows = [prompts[i // a.samples] for i in range(len(comps))]
    adv = torch.linspace(-1, 1, len(comps))
    out["train"] = profiled(
        lambda: objective.policy_gradient(
            model, rows, comps, adv, pad, objective.Terms(float(len(comps) * s.max_new_tokens), a.micro_batch)
        )
    )
    out["base_support"] = profiled(
        lambda: base_support.measure(model, rows, comps, s.temperature, s.top_k, s.top_p, pad, reference=(1.0, 0, 1.0))
    )
    out["tokens_sampled"] = sum(len(c) for c in comps)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
