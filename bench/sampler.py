"""Sampling throughput: our hand-written sampler against `model.generate`, same model, batch,
settings and seed, alternating A/B runs on one thread. Also checks that greedy outputs agree, and
counts the ops that read a tensor's value into Python (each one a host sync on a GPU) per
decoded token, with the profiler (sampler.count_host_reads).

    python bench/sampler.py [--model results/tiny/base_model] [--prompts 16 --group 8 --max-new 96 --repeats 5]
    python bench/sampler.py --adapter results/tiny_seeds/train_many_s0/step_100 --model results/tiny_seeds/base_model

"keyed" is ours with one seed per sample (the keyed inverse-CDF draw, one uniform per sample and token:
evaluations under eval.draw: sample) in place of one generator for the batch (the exponential race
that training's rollouts use). With --adapter the model carries that LoRA (as it does when training
samples its rollouts), and three more samplers join the rotation: ours with the LoRA folded into the
weights (lora.fold_for_sampling), unkeyed and keyed, and the plain per-token sampler this one replaced
(kept in tests/test_sampler.py, whose tests show both give the same tokens).
"""

import argparse
import sys
from contextlib import nullcontext

import torch

from common import ROOT, Timer, median, model_dir  # noqa: F401  (ROOT puts the repo on sys.path)

import countdown
from orchestration import config

sys.path.insert(0, str(ROOT / "tests"))
from test_sampler import reference_sample  # noqa: E402  (the plain sampler, kept beside its bit-for-bit test)

from method import sampler
from method.model import (
    adapter_config,
    apply_lora,
    load_adapter,
    load_model,
    lora_folded,
    pad_id,
    render_prompts,
    stop_ids,
)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--task", default="arith-2x1")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new", type=int, default=96)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--adapter", default=None, help="a PEFT-format adapter folder to sample with (LoRA on)")
    p.add_argument(
        "--prompt-style",
        default="bare",
        choices=["bare", "instruct"],
        help="bare, or instruct: the chat template with the model's own system prompt (configs/smollm2_v2.yaml)",
    )
    return p.parse_args()


def greedy_agreement(model, prompts, ids, mask, stops, pad, max_new: int) -> None:
    """Our greedy decode against generate's, token for token."""
    from transformers import GenerationConfig

    s0 = config.SamplingCfg(temperature=0, max_new_tokens=max_new)
    ours = sampler.sample(model, prompts, 1, s0, 0, stops, pad).tokens
    g0 = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new,
        eos_token_id=stops,
        pad_token_id=pad,
        repetition_penalty=1.0,
        top_k=None,
        top_p=None,
        temperature=None,
    )
    ref = model.generate(input_ids=ids, attention_mask=mask, generation_config=g0)[:, ids.shape[1] :].tolist()
    agree = all(r[: len(o)] == o for r, o in zip(ref, ours))
    print(f"greedy outputs identical to generate: {agree} ({len(ours)} prompts, up to {max_new} tokens)")


def forward_share(model, sample) -> None:
    """Where our sampler's time goes: the model's forward calls against everything else (one run)."""
    spent = []
    real_forward = model.forward

    def timed_forward(*args, **kw):
        with Timer() as t:
            out = real_forward(*args, **kw)
        spent.append(t.seconds)
        return out

    model.forward = timed_forward
    with Timer() as whole:
        sample()
    model.forward = real_forward
    print(
        f"ours, one run: {whole.seconds:.3f} s, of which the model's {len(spent)} forward calls {sum(spent):.3f} s "
        f"({sum(spent) / whole.seconds:.0%}); the sampler's own work {whole.seconds - sum(spent):.3f} s"
    )


def alternating_rates(runners: dict, repeats: int) -> dict:
    """Tokens per second of each runner over `repeats` runs, alternating which goes first; the medians."""
    rates = {name: [] for name in runners}
    for r in range(repeats):
        order = list(runners.items())
        for name, fn in order if r % 2 == 0 else order[::-1]:
            rates[name].append(fn(r))
        print(f"  repeat {r}: " + "   ".join(f"{name} {rates[name][-1]:8.0f} tok/s" for name in runners))
    return {name: median(v) for name, v in rates.items()}


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    from transformers import GenerationConfig

    path = model_dir(a.model)
    cfg = config.load(None, ["model.dtype=float32", "lora.tf32=false", f"model.path={path}"])
    model, tok = load_model(cfg, str(path), torch.device("cpu"))
    if a.adapter:
        acfg = adapter_config(a.adapter)
        apply_lora(model, acfg["r"], acfg["lora_alpha"], acfg["target_modules"], 0)
        load_adapter(model, a.adapter)
    _, test = countdown.make_splits(a.task, 0, a.prompts, 0)
    system = None if a.prompt_style == "instruct" else countdown.SYSTEM_PROMPT  # as configs/smollm2_v2.yaml
    prompts = render_prompts(tok, test, a.prompt_style, system)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    ids, mask = sampler.left_pad(prompts, pad)
    greedy_agreement(model, prompts, ids, mask, stops, pad, a.max_new)

    s = config.SamplingCfg(temperature=a.temperature, top_p=1.0, top_k=0, max_new_tokens=a.max_new)
    gs = GenerationConfig(
        do_sample=True,
        temperature=a.temperature,
        top_p=1.0,
        top_k=0,
        repetition_penalty=1.0,
        max_new_tokens=a.max_new,
        num_return_sequences=a.group,
        eos_token_id=stops,
        pad_token_id=pad,
    )
    reads, smp = sampler.count_host_reads(lambda: sampler.sample(model, prompts, a.group, s, 0, stops, pad))
    steps = max(len(t) for t in smp.tokens)
    g_reads, g = sampler.count_host_reads(
        lambda: model.generate(input_ids=ids, attention_mask=mask, generation_config=gs)
    )
    g_steps = g.shape[1] - ids.shape[1]
    print(
        f"host reads (item/nonzero/equal, counted by the profiler): ours {reads} over {steps} decoded positions "
        f"({reads / steps:.2f} per token), generate {g_reads} over {g_steps} ({g_reads / g_steps:.2f} per token)"
    )

    def run_ours(r, fold=False, keyed=False):
        n = len(prompts) * a.group
        seed = [r * n + i for i in range(n)] if keyed else r  # keyed: one stream of uniforms per sample
        with lora_folded(model) if fold else nullcontext(), Timer() as t:
            out = sampler.sample(model, prompts, a.group, s, seed, stops, pad)
        return sum(len(x) for x in out.tokens) / t.seconds

    def run_plain(r):
        with Timer() as t:
            out = reference_sample(model, prompts, a.group, s, r, stops, pad)
        return sum(len(x) for x in out.tokens) / t.seconds

    def run_generate(r):
        torch.manual_seed(r)
        with Timer() as t:
            g = model.generate(input_ids=ids, attention_mask=mask, generation_config=gs)[:, ids.shape[1] :]
        return int((g != pad).sum()) / t.seconds  # generate pads after EOS; the model never emits the pad id here

    forward_share(model, lambda: sampler.sample(model, prompts, a.group, s, 0, stops, pad))
    runners = {"ours": run_ours, "keyed": lambda r: run_ours(r, keyed=True), "generate": run_generate}
    if a.adapter:
        runners.update(
            {
                "folded": lambda r: run_ours(r, fold=True),
                "folded keyed": lambda r: run_ours(r, fold=True, keyed=True),
                "plain": run_plain,
            }
        )
    med = alternating_rates(runners, a.repeats)
    print(
        f"median tokens/s over {a.repeats} alternating runs, batch {a.prompts} x {a.group}, T {a.temperature}, "
        f"{a.threads} thread(s){', LoRA ' + a.adapter if a.adapter else ''}: "
        + ", ".join(f"{name} {v:.0f}" for name, v in med.items())
        + f"; ours / generate {med['ours'] / med['generate']:.2f}x, keyed / ours {med['keyed'] / med['ours']:.2f}x"
        + (
            f", folded / generate {med['folded'] / med['generate']:.2f}x, ours / plain {med['ours'] / med['plain']:.2f}x"
            if a.adapter
            else ""
        )
    )


if __name__ == "__main__":
    main()
