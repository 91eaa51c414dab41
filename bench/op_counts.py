"""Kernels and host reads counted, not guessed: the aten ops that a decoded token and a training micro-batch
dispatch, on Qwen2.5's layer structure at a toy width, beside runner/cost_model.py's constants.

    python bench/op_counts.py [--layers 2 4] [--rows 4] [--tokens 8 16]

Every aten op that is not a view launches at least one kernel on a GPU (a view launches none), so the count of
non-view ops is what the cost model's per-kernel floor multiplies; a host read (item, nonzero, equal) waits for the
device. The counts depend on the layer structure, not the width: a random Qwen2 model at hidden 64 stands in for
Qwen2.5-0.5B, and a layer's ops are the difference between two depths over the layers added. Counted on the CPU:
CUDA dispatches the same aten ops above the kernels, but an op may launch more than one kernel there (gpu_check's
04_decode measures seconds per kernel launched).
"""

import argparse

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Qwen2Config, Qwen2ForCausalLM

from common import ROOT

from method import model as mm, objective, sampler
from orchestration import config
from runner import cost_model

HOST_READS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::equal"}  # method/sampler.HOST_READS


class Count(TorchDispatchMode):
    """The non-view aten ops dispatched inside the block, and the host reads among them, less the reads of
    `host_side` tensors (or views of them): tensors that live on the host in a run, whatever the device."""

    def __init__(self, host_side: tuple = ()):
        super().__init__()
        self.host_side = host_side

    def __enter__(self):
        self.ops, self.reads = 0, 0
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += not func.is_view
        if func._schema.name in HOST_READS:
            x = args[0] if args else None
            self.reads += not any(x is t or getattr(x, "_base", None) is t for t in self.host_side)
        return func(*args, **(kwargs or {}))


def toy(layers: int, lora: bool, cfg: config.Config) -> Qwen2ForCausalLM:
    """A random Qwen2 model of `layers` layers at hidden 64 (Qwen2.5's layout: GQA, biased q/k/v, SwiGLU), in the
    config's dtype, frozen, with LoRA on every target where `lora`."""
    torch.manual_seed(0)
    shape = Qwen2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    shape._attn_implementation = "sdpa"  # as method/model.load_model loads it
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[cfg.model.dtype]
    model = Qwen2ForCausalLM(shape).to(dtype).eval()
    for p in model.parameters():  # frozen, as load_model leaves the base: only LoRA's factors train
        p.requires_grad_(False)
    if lora:
        mm.apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed=0)
    return model


def decode_ops(model, s: config.SamplingCfg, rows: int, tokens: tuple[int, int]) -> tuple[float, float]:
    """(ops, host reads) per decoded token: two eager sampling calls that differ only in max_new_tokens, no stop."""
    got = []
    for t in tokens:
        with Count() as c:
            sampler.sample(
                model, [[5, 6, 7, 8]], rows, config.SamplingCfg(**{**vars(s), "max_new_tokens": t}), 0, [], 0
            )
        got.append((c.ops, c.reads))
    (o1, r1), (o2, r2) = got
    return (o2 - o1) / (tokens[1] - tokens[0]), (r2 - r1) / (tokens[1] - tokens[0])


def micro_batch_ops(model, rows: int, length: int, micro_batch: int | None = None) -> tuple[int, int]:
    """(ops, device reads) of one training micro-batch of `rows` completions of `length` tokens: forward, loss,
    backward, and the step's reads of its sums (objective.policy_gradient). The advantages are a host tensor in
    training (method/training.one_step makes them from the rewards), so reading them waits for no device.
    micro_batch: the rows of each micro-batch (all of them by default: one micro-batch)."""
    model.train()
    prompts = [[5, 6, 7, 8]] * rows
    completions = [[9 + (i + j) % 50 for j in range(length)] for i in range(rows)]
    adv = torch.linspace(-1, 1, rows)
    with Count(host_side=(adv,)) as c:
        objective.policy_gradient(
            model, prompts, completions, adv, 0, objective.Terms(float(rows * length), micro_batch or rows)
        )
    model.eval()
    return c.ops, c.reads


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, nargs=2, default=[2, 4])
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--tokens", type=int, nargs=2, default=[8, 16])
    p.add_argument("--length", type=int, default=16, help="a training completion's tokens")
    a = p.parse_args()
    cfg = config.load(str(ROOT / "configs" / "qwen05b.yaml"))
    torch.set_num_threads(1)
    lo, hi = a.layers
    print(
        f"torch {torch.__version__}, CPU; rows {a.rows}; Qwen2 layout at hidden 64 in {cfg.model.dtype}; "
        f"LoRA targets {cfg.lora.targets}"
    )
    samplers = [("train sampler", cfg.train.sampling), ("eval sampler", cfg.eval.sampling)]
    for (label, s), decode in [(x, d) for x in samplers for d in ("eager", "graph")]:
        s, label = config.SamplingCfg(**{**vars(s), "decode": decode}), f"{label}, {decode} decode"
        per = {}
        for lora in (False, True):
            (a_ops, a_reads), (b_ops, _) = (decode_ops(toy(L, lora, cfg), s, a.rows, a.tokens) for L in (lo, hi))
            layer = (b_ops - a_ops) / (hi - lo)
            per[lora] = (layer, a_ops - lo * layer, a_reads)
        (layer, rest, reads), (layer_lora, _, _) = per[False], per[True]
        lora_per_target = (layer_lora - layer) / len(cfg.lora.targets)
        print(
            f"{label} (T {s.temperature}, top-p {s.top_p}, tail {s.tail}): per decoded token {layer:.1f} ops a layer "
            f"(model {cost_model.OPS_PER_LAYER}), {lora_per_target:.1f} a LoRA target (model {cost_model.LORA_OPS}), "
            f"{rest:.1f} besides the layers: embedding, final norm, head and the sampling tail (model tail "
            f"{cost_model.TAIL_OPS}); {reads:.2f} host reads a token"
        )
        layers = 24  # Qwen2.5-0.5B
        print(
            f"  at 24 layers: {layers * layer + rest:.0f} ops a token, {layers * layer_lora + rest:.0f} with LoRA unfolded"
        )
    one = {L: micro_batch_ops(toy(L, True, cfg), a.rows, a.length) for L in (lo, hi)}
    layer = (one[hi][0] - one[lo][0]) / (hi - lo)
    rest = one[lo][0] - lo * layer
    split = micro_batch_ops(toy(lo, True, cfg), a.rows, a.length, micro_batch=1)[1]  # one row a micro-batch
    per = (split - one[lo][1]) / (a.rows - 1)
    print(
        f"training micro-batch ({a.rows} x {a.length} tokens, LoRA): {layer:.1f} ops a layer, {rest:.1f} besides; "
        f"at 24 layers {24 * layer + rest:.0f} ops (model: {cost_model.STEP_KERNELS} x a LoRA token's kernels); "
        f"device reads: {per:g} a micro-batch, {one[lo][1] - per:g} a step (its sums, read once)"
    )


if __name__ == "__main__":
    main()
