"""The CPU world's base model: a character-level tokenizer with a chat template, a small
Qwen2-architecture model, and supervised training from scratch on synthetic working traces.

Qwen2.5-0.5B-Instruct cannot be downloaded here and is far too slow for GRPO on two CPU cores.
This builds a stand-in that behaves like the report's base on an easier task: it usually
computes, sometimes slips, and mostly ignores the answer format. Traces mix two methods

    decomposed   <think>57 * 5 = 50 * 5 + 7 * 5 = 250 + 35 = 285. 285 - 42 = 243</think>
    one-shot     <think>57 * 5 = 295. 295 - 42 = 253</think>        (the product is often wrong)

and four endings, of which only one uses the tags:

    <answer>243</answer>  |  The answer is 243.  |  So it is 243  |  = 243

Two knobs build a skill to select into the corpus (PLAN_CHANGES.md change 33; both off by default, and the
corpus is then the one before they existed): the subtraction can forget a borrow, more often the
more borrows it needs (`p_borrow_slip`), so some problems are solved only by rare correct traces;
and drill traces practise the decomposed method under another prompt (`n_drill`, "work: 57 * 5 - 42"),
so the base can compute that way even where its task traces rarely do.

The saved folder is an ordinary Hugging Face model folder (config, safetensors, tokenizer,
chat template) that the rest of the pipeline loads through `model.path` like any other.

    python -m bases.tiny_base --config configs/tiny.yaml --out results/tiny/base_model
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path

import torch

import countdown
from orchestration import config, provenance, study

PAD, EOS, BOS = "<|pad|>", "<|im_end|>", "<|im_start|>"
TAGS = ["<think>", "</think>", "<answer>", "</answer>"]
CHARS = list("0123456789 \n+-*/=().,:?!'") + list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
UNK = "<|unk|>"
DRILL_PREFIX = "work: "  # the drill traces' prompt: the question after this, never the task's own prompt
# The template keeps only the user turn: prompts stay ~20 characters for a char-level model.
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}" + BOS + "{{ m['content'] }}" + EOS + "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + BOS + "{% endif %}"
)


def build_tokenizer():
    """A character-level fast tokenizer: every character one token; the four tags and the chat
    markers are single tokens. Loads back with PreTrainedTokenizerFast.from_pretrained."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([PAD, EOS, BOS, UNK] + TAGS + CHARS)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))  # no merges: one token per character
    core.decoder = decoders.Fuse()  # join tokens with nothing between them
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=BOS,
        unk_token=UNK,
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
    )
    tok.add_tokens(TAGS)  # ordinary (not special) tokens: decoding keeps them
    return tok


def model_config(tok, b: config.TinyBaseCfg, max_positions: int = 512):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tok),
        hidden_size=b.hidden,
        num_hidden_layers=b.layers,
        num_attention_heads=b.heads,
        num_key_value_heads=b.kv_heads,
        intermediate_size=b.intermediate,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def random_model(tok, b: config.TinyBaseCfg, seed: int):
    """A randomly initialised Qwen2 model, its init drawn under a seeded fork of torch's RNG."""
    from transformers import Qwen2ForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(model_config(tok, b))
    return model


# ----------------------------------------------------------------------------- traces


def _decompose(a: int) -> list[int]:
    """57 -> [50, 7]; 413 -> [400, 10, 3] (zero digits dropped)."""
    s = str(a)
    return [int(d) * 10 ** (len(s) - 1 - i) for i, d in enumerate(s) if d != "0"]


WRONG_OFFSETS = [1, 2, 5, 10, 20, 100]  # the corpus's product errors (model.build.wrong_offsets: the default)


def _wrong(rng: random.Random, x: int, offsets: list[int] = WRONG_OFFSETS) -> int:
    """A plausible wrong value: a small or place-value error, one of `offsets` either way."""
    delta = rng.choice(offsets) * rng.choice([-1, 1])
    return x + delta if x + delta != x else x + 1


def subtract(product: int, c: int, rng: random.Random, b: config.TinyBaseCfg) -> int:
    """product - c as the trace writes it: with b.p_borrow_slip[k - 1] (k the number of borrows the
    column subtraction needs) it forgets its lowest borrow, so the value is off by 10^(column + 1)
    away from zero. No random draw without a borrow or without p_borrow_slip, so a corpus that sets
    neither is the one before this knob existed."""
    value = product - c
    if not b.p_borrow_slip or product < 0:  # a (wrong) negative product makes P - c an addition: no borrow
        return value
    cols = countdown.borrow_columns(product, c)
    if not cols:
        return value
    if rng.random() < b.p_borrow_slip[min(len(cols), len(b.p_borrow_slip)) - 1]:
        return value + (1 if value >= 0 else -1) * 10 ** (cols[0] + 1)
    return value


def trace(p: countdown.Problem, rng: random.Random, b: config.TinyBaseCfg, drill: bool = False) -> str:
    """One synthetic response to `p` (an arithmetic problem a * b - c). A drill trace is always
    decomposed and never ends in the answer tags."""
    a, m, c = p.numbers
    if drill or rng.random() < b.p_decomposed:
        parts = _decompose(a)
        prods = [x * m if rng.random() >= b.p_slip else _wrong(rng, x * m, b.wrong_offsets) for x in parts]
        product = sum(prods)
        if len(parts) > 1:
            work = (
                f"{a} * {m} = "
                + " + ".join(f"{x} * {m}" for x in parts)
                + " = "
                + " + ".join(map(str, prods))
                + f" = {product}"
            )
        else:
            work = f"{a} * {m} = {product}"
    else:
        product = a * m if rng.random() >= b.p_oneshot_wrong else _wrong(rng, a * m, b.wrong_offsets)
        work = f"{a} * {m} = {product}"
    value = subtract(product, c, rng, b)
    body = f"<think>{work}. {product} - {c} = {value}</think>"
    if drill:
        ending = rng.choice([f"The answer is {value}.", f"So it is {value}", f"= {value}"])
    elif rng.random() < b.p_tags:
        ending = f"<answer>{value}</answer>"
    else:
        ending = rng.choice([f"The answer is {value}.", f"So it is {value}", f"= {value}"])
    return body + ending


def pretrain_problems(task: str, n_train: int, n_test: int, seed: int, n_pretrain: int) -> list[countdown.Problem]:
    """The `pretrain` split: drawn by the task seed after test and train, disjoint from both, so
    the problems RL trains on are as new to the base as the test problems (PLAN_CHANGES.md change 11)."""
    return countdown.draw_splits(task, seed, {"test": n_test, "train": n_train, "pretrain": n_pretrain})["pretrain"]


def trace_batches(tok, b: config.TinyBaseCfg, task: str, n_train: int, n_test: int, seed: int):
    """Token ids and loss masks for b.n_traces traces of pretrain problems (never train or test ones),
    then b.n_drill drill traces under the prompt DRILL_PREFIX + question (the same problems, cycled on)."""
    problems = pretrain_problems(task, n_train, n_test, seed, b.n_pretrain)
    rng = random.Random(f"traces:{seed}")
    seqs, masks = [], []
    for i in range(b.n_traces + b.n_drill):
        p, drill = problems[i % len(problems)], i >= b.n_traces
        shown = dataclasses.replace(p, question=DRILL_PREFIX + p.question) if drill else p
        prompt = tok.apply_chat_template(
            countdown.prompt_messages(shown, "bare"), tokenize=False, add_generation_prompt=True
        )
        pid = tok(prompt, add_special_tokens=False)["input_ids"]
        rid = tok(trace(p, rng, b, drill), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        seqs.append(pid + rid)
        masks.append([0] * len(pid) + [1] * len(rid))  # learn the response (and its EOS), not the prompt
    return seqs, masks


# ----------------------------------------------------------------------------- training


SAVE_EVERY = study.BASE_SAVE_EVERY  # steps between the base's resume points (RUN/.base_model.partial)


def train_base(cfg: config.Config, out: Path, progress: bool = True, stage_hash: str | None = None) -> dict:
    """Train the tiny base from scratch and save it as a Hugging Face folder (atomically). Every
    SAVE_EVERY steps the whole training state (weights, AdamW state, the batch generator, the losses
    so far) is saved beside `out`; a build that was stopped resumes from there and ends with the
    same weights, bit for bit, as one that never stopped (tested)."""
    from transformers.utils import logging as hf_logging

    from orchestration.progress import Progress as tqdm  # a plain line a minute where stderr is not a terminal

    b = cfg.model.build
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    hf_logging.disable_progress_bar()
    tok = build_tokenizer()
    model = random_model(tok, b, seed=cfg.task.seed)
    seqs, masks = trace_batches(tok, b, cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=b.lr, betas=(0.9, 0.95), weight_decay=0.01)
    g = torch.Generator().manual_seed(cfg.task.seed)
    partial = Path(out).with_name(f".{Path(out).name}.partial")
    start, losses = resume_point(partial, stage_hash, model, opt, g)
    if start:
        print(f"base: resuming from step {start} of {b.steps} ({partial})", flush=True)
    t0 = time.perf_counter()
    model.train()  # Qwen2 has no dropout: train mode draws nothing from torch's global RNG
    for step in tqdm(
        range(start, b.steps), desc="base", disable=not progress, leave=False, initial=start, total=b.steps
    ):
        lr = b.lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / b.steps))  # warm-up, cosine
        for group in opt.param_groups:
            group["lr"] = lr
        idx = torch.randint(len(seqs), (b.batch,), generator=g).tolist()
        L = max(len(seqs[i]) for i in idx)
        ids = torch.full((b.batch, L), tok.pad_token_id)
        m = torch.zeros((b.batch, L))
        att = torch.zeros((b.batch, L), dtype=torch.long)
        for r, i in enumerate(idx):  # right padding for training
            ids[r, : len(seqs[i])] = torch.tensor(seqs[i])
            m[r, : len(seqs[i])] = torch.tensor(masks[i], dtype=torch.float32)
            att[r, : len(seqs[i])] = 1
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]  # (B, L-1, V)
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (B, L-1)
        loss = (nll * m[:, 1:]).sum() / m[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % SAVE_EVERY == 0 and step + 1 < b.steps:
            save_resume_point(partial, stage_hash, step + 1, model, opt, g, losses)
    model.eval()
    info = {
        "steps": b.steps,
        "loss_first": losses[0],
        "loss_last_50": sum(losses[-50:]) / len(losses[-50:]),
        "seconds": round(time.perf_counter() - t0, 1),
        "resumed_from": start,
        "params": sum(p.numel() for p in model.parameters()),
    }
    save(
        model,
        tok,
        out,
        {"build": config.to_dict(b), "task": cfg.task.name, "seed": cfg.task.seed, "stage_hash": stage_hash, **info},
    )
    if partial.exists():
        shutil.rmtree(partial)
    return info


def save_resume_point(
    folder: Path, stage_hash: str | None, step: int, model, opt, g: torch.Generator, losses: list[float]
) -> None:
    """Everything the build needs to continue from `step`, written to a temporary folder, then renamed."""
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    torch.save(
        {
            "step": step,
            "stage_hash": stage_hash,
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "generator": g.get_state(),
            "losses": losses,
        },
        tmp / "state.pt",
    )
    provenance.atomic_replace_dir(tmp, folder)


def resume_point(folder: Path, stage_hash: str | None, model, opt, g: torch.Generator) -> tuple[int, list[float]]:
    """(first step to run, losses so far): from `folder` when it holds a resume point of this very
    build (the same stage hash), loaded into model, opt and g; else (0, []) and the folder is removed."""
    try:
        state = torch.load(folder / "state.pt", weights_only=True)
    except (OSError, RuntimeError, EOFError):
        state = None  # absent, or cut short by a crash: start from step 0
    if state is None or state.get("stage_hash") != stage_hash:
        if folder.exists():
            shutil.rmtree(folder)
        return 0, []
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    g.set_state(state["generator"])
    return state["step"], list(state["losses"])


def save_tokenizer(tok, folder: Path) -> None:
    """save_pretrained, then name the plain fast class in tokenizer_config.json so that any
    loader (ours: model.load_tokenizer) restores it as is, not as Qwen2's tokenizer."""
    tok.save_pretrained(folder)
    path = Path(folder) / "tokenizer_config.json"
    tc = json.loads(path.read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(tc, indent=1) + "\n")


def save(model, tok, out: Path, info: dict) -> None:
    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        save_tokenizer(tok, tmp)

    provenance.write_folder(out, fill, info)  # build.json: the base stage's done marker (stage_hash)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bases.tiny_base", description="Train the CPU world's tiny base model.")
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    try:
        cfg = config.load(a.config, a.set)
        if cfg.model.build is None:
            raise config.ConfigError("model.build: this config builds no tiny base (set model.build)")
    except config.ConfigError as e:
        print(f"tiny_base.py: {e}", file=sys.stderr)
        return 2
    info = train_base(cfg, Path(a.out))
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
