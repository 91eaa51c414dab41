"""Our Dr. GRPO step against TRL's GRPOTrainer on the same work, side by side, alternating.

Both: the same model folder, 16 prompts x 8 completions, the same max completion length,
temperature 1.0 (top-p 1, top-k off, no repetition penalty), LoRA r 32 / alpha 64 on the seven
projections, constant learning rate, no KL (beta 0), Dr. GRPO loss with unscaled rewards, one
update per sampling, gradient checkpointing off, fp32, one torch thread. TRL comes from
requirements-dev.txt (it is not a runtime dependency).

    python bench/trl_compare.py [--model results/tiny/base_model] [--steps 4 --rounds 3] [--set lora.fold_for_sampling=true]

Each round runs `--steps` steps of each, alternating which goes first; the first step of every run is left out
(warm-up). Prints the median seconds per step of each and the ratio.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from common import median, model_dir

import countdown
from method import training
from method.model import load_tokenizer
from orchestration import config


def ours(path: Path, a, tmp: Path, round_: int) -> list[float]:
    cfg = config.load(
        None,
        [
            f"model.path={path}",
            "model.dtype=float32",
            "lora.tf32=false",
            "train.sort_by_length=false",
            "train.log_kl_every=0",
            "train.dev_every=0",
            f"threads={a.threads}",
            "device=cpu",
            f"task.name={a.task}",
            "task.prompt_style=bare",
            "train.problems_per_step=16",
            "train.group_size=8",
            f"train.sampling.max_new_tokens={a.max_new}",
            "lora.r=32",
            "lora.alpha=64",
            f"micro_batch={a.micro_batch}",
            *a.set,
        ],
    )
    train_set, _ = countdown.make_splits(a.task, 200, 16, 0)
    out = training.train(
        cfg,
        training.TrainingRun(
            "many", config.ConditionCfg(), round_, train_set, a.lr, a.steps, [], dev_every=cfg.train.dev_every
        ),
        tmp / f"ours_{round_}",
        str(path),
        progress=False,
    )
    rows = training.read_log(out / "train_log.csv")
    return [r["sec_sampling"] + r["sec_fwd_bwd"] for r in rows][1:]


def trl_run(path: Path, a, tmp: Path, round_: int) -> list[float]:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    train_set, _ = countdown.make_splits(a.task, 200, 16, 0)
    ds = Dataset.from_list([{"prompt": countdown.prompt_messages(p, "bare"), "answer": p.answer} for p in train_set])

    def reward(completions, answer, **kw):  # the strict score, as in ours
        return [
            float(countdown.score_strict(c[0]["content"] if isinstance(c, list) else c, int(y)))
            for c, y in zip(completions, answer)
        ]

    times = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    args = GRPOConfig(
        output_dir=str(tmp / f"trl_{round_}"),
        per_device_train_batch_size=128,
        num_generations=8,
        gradient_accumulation_steps=1,
        max_completion_length=a.max_new,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        repetition_penalty=1.0,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        loss_type="dr_grpo",
        scale_rewards="none",
        beta=0.0,
        num_iterations=1,
        max_steps=a.steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        seed=round_,
        dataloader_num_workers=0,
        disable_dropout=True,
        log_completions=False,
    )
    lora = LoraConfig(
        r=32,
        lora_alpha=64,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    tok = load_tokenizer(str(path))
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=ds,
        processing_class=tok,
        peft_config=lora,
        callbacks=[StepTimer()],
    )
    trainer.train()
    return times[1:]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--task", default="arith-2x1")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-new", type=int, default=96)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--micro-batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--set", action="append", default=[], help="a config override for ours (e.g. train.sort_by_length=true)"
    )
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = model_dir(a.model)
    res = {"ours": [], "trl": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = [("ours", ours), ("trl", trl_run)]
            for name, fn in order if r % 2 == 0 else order[::-1]:  # alternate which goes first
                res[name] += fn(path, a, Path(tmp), r)
            print(
                f"round {r}: ours median {median(res['ours']):.2f} s/step, TRL median {median(res['trl']):.2f} s/step",
                flush=True,
            )
    mo, mt = median(res["ours"]), median(res["trl"])
    print(
        f"seconds per step, 16 x 8, max {a.max_new} new tokens, LoRA r32, {a.threads} thread(s)"
        f"{', ours with ' + ' '.join(a.set) if a.set else ''}, medians over "
        f"{len(res['ours'])} / {len(res['trl'])} steps: ours {mo:.2f}, TRL {mt:.2f}, TRL/ours {mt / mo:.2f}x"
    )


if __name__ == "__main__":
    main()
