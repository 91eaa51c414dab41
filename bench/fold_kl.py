"""The policy mismatch of lora.fold_for_sampling: KL between the exact policy (base + LoRA) and
the folded one (W + (alpha/r) B A rounded to the base dtype), per completion token, on
sequences sampled from the exact policy; with the KL of the exact policy to the base beside it,
for scale (how far training moved the policy at all).

    python bench/fold_kl.py [--model results/tiny_seeds/base_model] [--adapter results/tiny_seeds/train_many_s0/step_100]
                            [--dtypes float32 bfloat16] [--prompts 32 --group 4 --max-new 96] [--task arith-3x2 --style instruct]

On a bf16 base the fold rounds each updated weight to 8 mantissa bits, so an update smaller
than half a unit in the last place of its weight is lost: run this on the study's own base and a
trained adapter before turning the fold on for training.
"""

import argparse

import torch

from common import ROOT, model_dir

import countdown
from method import sampler
from method.model import (
    adapter_config,
    apply_lora,
    last_positions,
    load_adapter,
    load_model,
    lora_disabled,
    lora_folded,
    pack,
    pad_id,
    render_prompts,
    stop_ids,
)
from orchestration import config


def token_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) per position, over the full vocabulary, in fp32."""
    lp, lq = p_logits.float().log_softmax(-1), q_logits.float().log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "results" / "tiny_seeds" / "base_model"))
    p.add_argument("--adapter", default=str(ROOT / "results" / "tiny_seeds" / "train_many_s0" / "step_100"))
    p.add_argument("--task", default="arith-2x1", help="the study's task (arith-3x2 for Qwen)")
    p.add_argument("--style", default="bare", help="the prompt style (instruct for Qwen)")
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--max-new", type=int, default=96)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    path = model_dir(a.model)
    acfg = adapter_config(a.adapter)
    print(
        f"model {path}, adapter {a.adapter} (r {acfg['r']}, alpha {acfg['lora_alpha']}), {a.prompts} prompts x {a.group} samples, "
        f"T 1, up to {a.max_new} new tokens"
    )
    print(
        f"{'dtype':<9} {'tokens':>7} {'KL exact||folded: mean':>23} {'p99':>9} {'max':>9}   {'argmax differs':>14}   "
        f"{'KL exact||base: mean':>21}"
    )
    for dtype in a.dtypes:
        cfg = config.load(None, [f"model.dtype={dtype}", "lora.tf32=false", f"model.path={path}"])
        model, tok = load_model(cfg, str(path), torch.device("cpu"))
        apply_lora(model, acfg["r"], acfg["lora_alpha"], acfg["target_modules"], 0)
        load_adapter(model, a.adapter)
        _, test = countdown.make_splits(a.task, 0, a.prompts, 0)
        prompts = render_prompts(tok, test, a.style)
        s = config.SamplingCfg(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=a.max_new)
        smp = sampler.sample(model, prompts, a.group, s, 0, stop_ids(model, tok), pad_id(tok))
        ids, attn, pos, cmask = pack([pr for pr in prompts for _ in range(a.group)], smp.tokens, pad_id(tok))
        keep = last_positions(ids.shape[1], cmask.shape[1] + 1, ids.device)

        def logits():
            return model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=keep).logits[:, :-1]  # noqa: F821

        with torch.no_grad():
            exact = logits()
            with lora_folded(model):
                folded = logits()
            with lora_disabled(model):
                base = logits()
        m = cmask.bool()
        kl_fold = token_kl(exact, folded)[m]
        kl_base = token_kl(exact, base)[m]
        differs = (exact.argmax(-1) != folded.argmax(-1))[m].float().mean().item()
        q = sorted(kl_fold.tolist())
        p99 = q[min(len(q) - 1, int(0.99 * len(q)))]
        print(
            f"{dtype:<9} {int(m.sum()):>7} {kl_fold.mean().item():>23.2e} {p99:>9.2e} {kl_fold.max().item():>9.2e}   "
            f"{differs:>14.4f}   {kl_base.mean().item():>21.2e}"
        )
        del model
    print("KL in nats per completion token; 'argmax differs': share of tokens whose most likely next token changes")


if __name__ == "__main__":
    main()
