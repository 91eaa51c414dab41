"""The CPU's own limit for a model's work: the time of the model's matrix products alone, at
the shapes a decode step and a training step run, one thread, fp32 and (where the CPU has native bf16
matmuls) bf16. Against it, the measured sampler and training step say how much is overhead.

    python bench/matmul_bound.py --model /tmp/sm2/base_model --rows 64 --prompt 40 --new 48

Prints one JSON object: per dtype, GFLOP/s of the decode products (M = rows) and of the training
products (M = rows x sequence), and the per-token and per-step lower bounds they imply.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def shapes(cfg) -> list[tuple[int, int, str]]:
    """(in, out, name) of every product a layer and the head make per token: q, k, v, o, gate, up, down; the vocabulary head."""
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    kv = H // cfg.num_attention_heads * cfg.num_key_value_heads
    layer = [(H, H, "q"), (H, kv, "k"), (H, kv, "v"), (H, H, "o"), (H, I, "gate"), (H, I, "up"), (I, H, "down")]
    return layer * cfg.num_hidden_layers + [(H, V, "head")]


def time_products(M: int, prods, dtype, repeats: int) -> float:
    """Seconds for one pass of every product at M rows (the median of `repeats`), weights preallocated."""
    ws = {(i, o): torch.randn(i, o, dtype=dtype) for i, o, _ in prods}
    xs = {i: torch.randn(M, i, dtype=dtype) for i, _, _ in prods}
    for i, o, _ in prods:  # warm-up
        xs[i] @ ws[(i, o)]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i, o, _ in prods:
            xs[i] @ ws[(i, o)]
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main(argv=None) -> int:
    from transformers import AutoConfig

    from method.model import native_bf16

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a model folder (its config.json gives the shapes)")
    ap.add_argument(
        "--rows", type=int, default=64, help="rows decoded together (a step's rollouts, or an evaluation call)"
    )
    ap.add_argument("--prompt", type=int, default=40, help="prompt tokens")
    ap.add_argument("--new", type=int, default=48, help="new tokens per row")
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = AutoConfig.from_pretrained(a.model)
    prods = shapes(cfg)
    flops_per_row = 2 * sum(i * o for i, o, _ in prods)  # one token of one row
    total = sum(i * o for i, o, _ in prods)
    out = {
        "model": a.model,
        "threads": 1,
        "rows": a.rows,
        "prompt": a.prompt,
        "new": a.new,
        "micro_batch": a.micro_batch,
        "params_in_products": total,
        "head_share": cfg.hidden_size * cfg.vocab_size / total,
    }
    dtypes = [torch.float32] + ([torch.bfloat16] if native_bf16() else [])
    for dt in dtypes:
        dec = time_products(a.rows, prods, dt, a.repeats)  # one decode step of every row
        seq = a.prompt + a.new
        trn = time_products(a.micro_batch * seq, prods, dt, max(2, a.repeats // 2))  # one micro-batch's forward
        out[str(dt).split(".")[1]] = {
            "decode_gflops": flops_per_row * a.rows / dec / 1e9,
            "decode_step_s": dec,
            "decode_tokens_per_s_bound": a.rows / dec,
            "train_forward_gflops": flops_per_row * a.micro_batch * seq / trn / 1e9,
            # forward + backward (input and weight gradients: 3 products per forward product) over a step's rows
            "train_step_s_bound": 3 * trn * a.rows / a.micro_batch,
        }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
