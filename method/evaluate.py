"""Evaluation: sample n answers per problem, score them (strict, loose, format), summarise pass@k,
coverage and diversity, for every registered evaluation set; the token-level comparison of a
checkpoint with the base; and the two stages that read the base before training, the base-rate
probe and the selection of the few-problem sets.

Every model is sampled with seeds tied to the problems (task.seed and the problem ids), never to a
training seed, so paired comparisons differ by the model alone. Knows nothing of training: it
meets the trainer only in adapter folders.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path

import torch

import countdown
from analysis import concentration
from analysis.stats import pass_at_k, token_summary
from method import base_support
from method.model import (
    last_positions,
    load_model,
    load_policy,
    lora_disabled,
    lora_folded,
    pack,
    pad_id,
    pick_device,
    render_prompts,
    setup_torch,
    stop_ids,
)
from method.sampler import sample
from orchestration import config, memory, study
from orchestration.eval_resume import Resume
from orchestration.provenance import atomic_write_json, file_sha256, record, stage_hash

# ============================================================================= sampling and scoring


def pass_at_k_curve(counts: list[int], n: int, k_max: int) -> dict[str, float]:
    """Mean over problems of pass@k for k = 1..k_max, keys as strings (JSON)."""
    return {str(k): sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in range(1, k_max + 1)}


def sample_problems(
    model,
    tok,
    cfg: config.Config,
    problems,
    n: int,
    s: config.SamplingCfg,
    tag: str,
    per_batch: int,
    progress: bool = True,
) -> tuple[list[list[str]], list[float]]:
    """n response texts per problem and per problem the mean token entropy: sample_problem_tokens, decoded."""
    tokens, entropies = sample_problem_tokens(model, tok, cfg, problems, n, s, tag, per_batch, progress)
    return decode_texts(tok, tokens), entropies


def decode_texts(tok, tokens: list[list[list[int]]]) -> list[list[str]]:
    return [tok.batch_decode(ts, skip_special_tokens=True) for ts in tokens]


def sample_problem_tokens(
    model,
    tok,
    cfg: config.Config,
    problems,
    n: int,
    s: config.SamplingCfg,
    tag: str,
    per_batch: int,
    progress: bool = True,
    resume: Resume | None = None,
) -> tuple[list[list[list[int]]], list[float]]:
    """n responses' token ids per problem (as drawn, EOS included), and per problem the mean full-vocabulary entropy of the
    untempered policy over all its response tokens; the prompts, seed, LoRA folding
    (lora.fold_for_sampling) and draw as cfg says. Under eval.draw: sample each sample draws from its
    own stream, seeded by (task.seed, tag, problem id, sample index), and the calls (sampling_calls:
    per_batch problems, at most eval.max_rows rows) change no sample (PLAN_CHANGES.md change 52). Under
    eval.draw: batch (the runs before it), each call's generator is seeded by (task.seed, tag, its
    first problem id), so the samples depend on per_batch; neither depends on what ran before, so with
    `resume` (orchestration/eval_resume.py) the calls it holds are taken from it, not sampled again, and
    each call sampled is recorded there as it finishes."""
    from orchestration.progress import Progress as tqdm  # a plain line a minute where stderr is not a terminal

    stops, pad = stop_ids(model, tok), pad_id(tok)
    prompts = render_prompts(tok, problems, cfg.task.prompt_style, cfg.task.system_prompt)
    keyed, seed = cfg.eval.draw == "sample", cfg.task.seed
    calls = memory.sampling_calls(len(problems), n, per_batch, cfg.eval.max_rows if keyed else None)
    done = resume.load(calls) if resume is not None else {}  # call index -> its recorded tokens and entropies
    tokens: list[list[list[int]]] = [[] for _ in problems]  # per problem, its samples' token ids in sample order
    sample_ent: list[list[float]] = [[] for _ in problems]
    with (
        tqdm(total=len(problems) * n, desc=tag, unit="sample", disable=not progress, leave=False) as bar,
        lora_folded(model) if cfg.lora.fold_for_sampling else nullcontext(),
    ):
        for c, (ps, js) in enumerate(calls):
            if c in done:
                got, ent = done[c]["tokens"], done[c]["entropy"]
            else:
                seeds = (
                    [study.seed_for(seed, tag, problems[i].id, j) for i in ps for j in js]
                    if keyed
                    else study.seed_for(seed, tag, problems[ps[0]].id)
                )
                samples = sample(model, [prompts[i] for i in ps], len(js), s, seeds, stops, pad, entropy=True)
                got, ent = samples.tokens, samples.entropy
                if resume is not None:
                    resume.save(c, got, ent)
            for r, i in enumerate(ps):
                tokens[i] += got[r * len(js) : (r + 1) * len(js)]
                sample_ent[i] += ent[r * len(js) : (r + 1) * len(js)]
            bar.update(len(got))
    entropies = [
        sum(e * len(x) for e, x in zip(es, ts)) / max(sum(len(x) for x in ts), 1) for es, ts in zip(sample_ent, tokens)
    ]
    return tokens, entropies


def answer_diversity(responses: list[str]) -> tuple[int, float]:
    """The number of distinct final answers among the responses (countdown.final_answer; no
    integer at all counts as one class) and the empirical entropy of their distribution (nats)."""
    from collections import Counter

    counts = Counter(countdown.final_answer(r) for r in responses)
    total = sum(counts.values())
    return len(counts), -sum(c / total * math.log(c / total) for c in counts.values())


def score_problems(
    problems, texts: list[list[str]], keep_responses: bool = True, token_entropy: list[float] | None = None
) -> list[dict]:
    out = []
    for i, (p, rs) in enumerate(zip(problems, texts)):
        sc = [countdown.score(p, r) for r in rs]
        distinct, ans_entropy = answer_diversity(rs)
        row = {
            "id": p.id,
            "question": p.question,
            "answer": p.answer,
            "n": len(rs),
            "correct_strict": sum(d["strict"] for d in sc),
            "correct_loose": sum(d["loose"] for d in sc),
            "format_ok": sum(d["format"] for d in sc),
            "distinct_answers": distinct,
            "answer_entropy": ans_entropy,
        }
        if token_entropy is not None:
            row["token_entropy"] = token_entropy[i]
        if keep_responses:
            row["responses"] = rs
        out.append(row)
    return out


def summarize(rows: list[dict], n: int, k_max: int) -> dict:
    return {
        "pass_at_k": {s: pass_at_k_curve([r[f"correct_{s}"] for r in rows], n, k_max) for s in ("strict", "loose")},
        "format_rate": sum(r["format_ok"] for r in rows) / (n * len(rows)),
        "coverage": {s: sum(r[f"correct_{s}"] > 0 for r in rows) for s in ("strict", "loose")},
        "n_problems": len(rows),
    }


def seed_tag(cfg: config.Config, eval_set: str) -> str:
    """The tag an evaluation set's sampling seeds are made from (with task.seed and each batch's first
    problem id): `eval` for the test set and for a set with seeds: test, `eval-<set>` for one with its own."""
    own = eval_set != "test" and cfg.eval_sets[eval_set].seeds == "own"
    return f"eval-{eval_set}" if own else "eval"


def draw_record(cfg: config.Config, per_batch: int) -> dict:
    """How an evaluation file's samples were drawn: under eval.draw: batch the problems per call, which
    decide them (as every file before PLAN_CHANGES.md change 52 records); under sample only the draw, since
    the batching settings change no sample (they stay in the provenance's config)."""
    return {"draw": "sample"} if cfg.eval.draw == "sample" else {"problems_per_batch": per_batch}


def eval_set_settings(cfg: config.Config, eval_set: str) -> tuple[list, int, int, config.SamplingCfg, int]:
    """problems, n, k_max, sampling and problems per batch of a registered evaluation set
    (`test` is the eval section; the others are eval_sets entries)."""
    if eval_set == "test":
        e = cfg.eval
        return study.test_problems(cfg), e.n, e.k_max, e.sampling, e.problems_per_batch
    es = cfg.eval_sets[eval_set]
    if es.task in (None, cfg.task.name):
        test = study.test_problems(cfg)
    else:  # another task's own test problems (out of distribution), drawn by the same task seed
        test = countdown.draw_splits(es.task, cfg.task.seed, {"test": es.n_problems})["test"]
    return test[: es.n_problems], es.n, es.k_max, es.sampling or cfg.eval.sampling, es.problems_per_batch


def evaluate(
    cfg: config.Config, base: str, adapter: str | None, out_file: Path, progress: bool = True, eval_set: str = "test"
) -> dict:
    """Sample n answers per problem of an evaluation set from the base (or base + adapter), score
    them three ways, measure diversity, and write one JSON file (atomically). Resumable: each finished
    sampling call is kept in OUT.partial/ (orchestration/eval_resume.py) until the file is written, and
    a run stopped before then continues from its calls: the file equals an uncut run's, but `seconds` is
    this part's plus those of the calls earlier parts kept, and `resumed_from_calls` counts those calls."""
    setup_torch(cfg)
    device = pick_device(cfg)
    model, tok = load_policy(cfg, base, adapter, device)
    adapter_sha, identity = None, {"condition": None, "train_seed": None, "step": None}
    if adapter is not None:
        adapter_sha = file_sha256(Path(adapter) / "adapter_model.safetensors")
        identity = study.adapter_identity(adapter)
    problems, n, k_max, sampling, per_batch = eval_set_settings(cfg, eval_set)
    if adapter is None and eval_set == "test" and cfg.eval.n_base is not None:
        n = cfg.eval.n_base  # the base's own, larger sample (PLAN.md section 6)
    t0 = time.perf_counter()
    # Every model sees the same seeds, tied to the problems (task.seed and the problem ids), never
    # to the training seed: the paired comparison then differs only by the model, and the base is
    # evaluated once. Each set other than `test` has its own seeds (new draws, so the `wide` set
    # checks the extrapolation out of sample) unless it asks for the test set's.
    tag = seed_tag(cfg, eval_set)
    inputs = study.eval_inputs(cfg, adapter_sha, eval_set)
    resume = Resume(out_file, {"stage_hash": stage_hash(cfg, "eval", inputs), "n": n, "seed_tag": tag})
    tokens, ent = sample_problem_tokens(model, tok, cfg, problems, n, sampling, tag, per_batch, progress, resume)
    rows = score_problems(problems, decode_texts(tok, tokens), cfg.eval.keep_responses, ent)
    if cfg.eval.base_support:
        add_base_support(model, tok, cfg, problems, tokens, rows, sampling, trained=adapter is not None)
    if cfg.eval.logp_all and adapter is None and base_distribution(sampling):
        add_logp_all(model, tok, cfg, problems, tokens, rows)
    result = {
        "model": "base" if adapter is None else str(adapter),
        **identity,
        "eval_set": eval_set,
        "task": problems[0].task,
        "adapter_sha256": adapter_sha,
        **summarize(rows, n, k_max),
        "sampling": {
            "n": n,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "repetition_penalty": 1.0,
            "max_new_tokens": sampling.max_new_tokens,
            "seed": cfg.task.seed,
            "seed_tag": tag,
            **draw_record(cfg, per_batch),
            "stop_ids": stop_ids(model, tok),
        },
        "seconds": round(time.perf_counter() - t0 + resume.resumed_seconds, 2),  # every part's
        **({"resumed_from_calls": resume.resumed} if resume.resumed else {}),
        "problems": rows,
        "provenance": record(cfg, "eval", inputs, str(device)),
    }
    atomic_write_json(out_file, result)
    resume.remove()
    return result


def add_base_support(
    model,
    tok,
    cfg: config.Config,
    problems,
    tokens: list[list[list[int]]],
    rows: list[dict],
    s: config.SamplingCfg,
    trained: bool = False,
) -> None:
    """Each row gains `base_support`: for every correct (loose) response, by its index, whether it lies
    outside the base's kept set at the sampler `s` that drew it, by how much, its base log-probability at
    T 1 and whether it is strictly correct (method/base_support.py; PLAN_CHANGES.md change 57). Teacher-forced
    from the drawn token ids through the base: the adapter's LoRA switched off. Under eval.within_correct
    (PLAN.md section 7e) also its length in tokens, whether it lies outside the base's kept set at the
    evaluation sampler (`outside_eval`, `excess_eval`: what a T 1 draw is read against) and its log-probability
    at T 1 under the evaluated model itself (`logp_self`: LoRA on; the base's own is logp_t1)."""
    prompts = render_prompts(tok, problems, cfg.task.prompt_style, cfg.task.system_prompt)
    scores = [[countdown.score(p, text) for text in texts] for p, texts in zip(problems, decode_texts(tok, tokens))]
    picked = [(i, j) for i, sc in enumerate(scores) for j, x in enumerate(sc) if x["loose"]]  # every correct response
    ps, rs = [prompts[i] for i, _ in picked], [tokens[i][j] for i, j in picked]
    within = cfg.eval.within_correct
    e = cfg.eval.sampling
    with lora_disabled(model):
        measured = base_support.measure(
            model,
            ps,
            rs,
            s.temperature,
            s.top_k,
            s.top_p,
            pad_id(tok),
            (e.temperature, e.top_k, e.top_p) if within else None,
        )
    keys = ["outside", "excess", "logp_t1"]
    if within:
        own = base_support.measure(model, ps, rs, 1.0, 0, 1.0, pad_id(tok)) if trained else measured  # LoRA on
        for m, o, r in zip(measured, own, rs):
            m.update(length=len(r), outside_eval=m.pop("outside_ref"), excess_eval=m.pop("excess_ref"))
            m["logp_self"] = o["logp_t1"]
        keys += ["length", "outside_eval", "excess_eval", "logp_self"]
    for row in rows:
        row["base_support"] = {"index": [], "strict": [], **{k: [] for k in keys}}
    for (i, j), m in zip(picked, measured):
        b = rows[i]["base_support"]
        b["index"].append(j)
        b["strict"].append(bool(scores[i][j]["strict"]))
        for key in keys:
            b[key].append(m[key])


def base_distribution(s: config.SamplingCfg) -> bool:
    """Whether the sampler draws from the model's own distribution: T 1, no top-p, no top-k."""
    return s.temperature == 1.0 and s.top_p >= 1.0 and s.top_k == 0


def add_logp_all(model, tok, cfg: config.Config, problems, tokens: list[list[list[int]]], rows: list[dict]) -> None:
    """Each row gains `logp_t1_all`: every response's log-probability at T 1 under the model (the base: no adapter
    is loaded), teacher-forced from the drawn token ids, in sample order (eval.logp_all, change 71)."""
    prompts = render_prompts(tok, problems, cfg.task.prompt_style, cfg.task.system_prompt)
    ps = [prompts[i] for i, t in enumerate(tokens) for _ in t]
    rs = [r for t in tokens for r in t]
    measured = iter(base_support.measure(model, ps, rs, 1.0, 0, 1.0, pad_id(tok)))
    for row, t in zip(rows, tokens):
        row["logp_t1_all"] = [next(measured)["logp_t1"] for _ in t]


# ============================================================================= held-out checks during training


def dev_problems(cfg: config.Config) -> list:
    """The held-out `dev` split, drawn after test, train and pretrain (disjoint from all three)."""
    return countdown.draw_splits(
        cfg.task.name,
        cfg.task.seed,
        {
            "test": cfg.task.n_test,
            "train": cfg.task.n_train,
            "pretrain": study.pretrain_count(cfg),
            "dev": cfg.train.dev_problems,
        },
    )["dev"]


def dev_check(model, tok, cfg: config.Config, dev: list, step: int) -> dict:
    """pass@1 and pass@n on the held-out dev problems, sampled like the evaluation with seeds
    tied to the problems (so every step and model is sampled alike), and the shares of problems locked
    on one answer and locked on a wrong one (analysis.concentration); draws nothing from training."""
    n = cfg.train.dev_samples
    texts, _ = sample_problems(
        model, tok, cfg, dev, n, cfg.eval.sampling, "dev", cfg.eval.problems_per_batch, progress=False
    )
    s = summarize(score_problems(dev, texts, keep_responses=False), n, n)
    return {
        "step": step,
        "n_problems": len(dev),
        "n": n,
        "strict_pass1": s["pass_at_k"]["strict"]["1"],
        "loose_pass1": s["pass_at_k"]["loose"]["1"],
        "strict_passn": s["pass_at_k"]["strict"][str(n)],
        "loose_passn": s["pass_at_k"]["loose"][str(n)],
        "format_rate": s["format_rate"],
        **concentration.of_problems(dev, texts),
    }


# ============================================================================= token level


def classify_tokens(base_logits: torch.Tensor, trained_logits: torch.Tensor, top: int) -> dict[str, torch.Tensor]:
    """Per response position (arXiv 2605.06241 §3): class 0 unchanged (the two argmaxes agree),
    1 reranked (the trained argmax is in the base's top `top` but not first), 2 shifted (outside
    it); the trained argmax's 1-based rank under the base; the base's full-vocabulary entropy.
    base_logits, trained_logits: (L, V) -> each (L,)."""
    choice = trained_logits.argmax(-1)  # (L,)
    chosen = base_logits.gather(-1, choice[:, None])  # (L, 1) the base's logit of the trained choice
    rank = (base_logits > chosen).sum(-1) + 1  # (L,) 1 = the base's own first choice
    cls = torch.where(rank == 1, 0, torch.where(rank <= top, 1, 2))
    logp = base_logits.float().log_softmax(-1)
    return {"classes": cls, "ranks": rank, "base_entropy": -(logp.exp() * logp).sum(-1)}


@torch.inference_mode()
def token_compare(cfg: config.Config, base: str, adapter: str, out_file: Path, progress: bool = True) -> dict:
    """The token-level picture of one checkpoint: the base decodes each test problem greedily;
    the trained model and the base then read the same base prefixes (teacher forcing), and
    every response position is classified by classify_tokens. One model in memory: the base is
    the trained model with its LoRA switched off."""
    from orchestration.progress import Progress as tqdm  # a plain line a minute where stderr is not a terminal

    setup_torch(cfg)
    device = pick_device(cfg)
    model, tok = load_policy(cfg, base, adapter, device)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    problems = study.test_problems(cfg)[: cfg.tokens.n_problems]
    prompts = render_prompts(tok, problems, cfg.task.prompt_style, cfg.task.system_prompt)
    greedy = config.SamplingCfg(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=cfg.eval.sampling.max_new_tokens)
    rows = []
    per = max(1, cfg.eval.problems_per_batch)
    for b in tqdm(range(0, len(problems), per), desc="tokens", disable=not progress, leave=False):
        with lora_disabled(model):
            comps = sample(model, prompts[b : b + per], 1, greedy, 0, stops, pad).tokens  # the base's greedy answers
        ids, attn, pos, cmask = (x.to(device) for x in pack(prompts[b : b + per], comps, pad))
        Lc = cmask.shape[1]
        keep = last_positions(ids.shape[1], Lc + 1, device)
        trained = model(
            input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=keep
        ).logits[:, :-1]
        with lora_disabled(model):
            basel = model(
                input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=keep
            ).logits[:, :-1]
        for i, c in enumerate(comps):
            r = classify_tokens(basel[i, : len(c)].float(), trained[i, : len(c)].float(), cfg.tokens.top)
            rows.append(
                {
                    "id": problems[b + i].id,
                    "classes": r["classes"].tolist(),
                    "ranks": r["ranks"].tolist(),
                    "base_entropy": [round(x, 5) for x in r["base_entropy"].tolist()],
                }
            )
    summary = token_summary(rows)  # the analysis recomputes it from `problems` with the same function
    adapter_sha = file_sha256(Path(adapter) / "adapter_model.safetensors")
    result = {
        **study.adapter_identity(adapter),
        "model": str(adapter),
        "adapter_sha256": adapter_sha,
        "top": cfg.tokens.top,
        "summary": summary,
        "problems": rows,
        "provenance": record(cfg, "tokens", {"adapter_sha256": adapter_sha}, str(device)),
    }
    atomic_write_json(out_file, result)
    return result


# ============================================================================= probe and select


def probe(cfg: config.Config, base: str, run: Path, progress: bool = True) -> list[Path]:
    """The base-rate checks behind PLAN_CHANGES.md: Countdown pass@k on probe.n_problems x
    probe.samples, and strict/loose pass@1, pass@k and format rate on each arithmetic task."""
    setup_torch(cfg)
    device = pick_device(cfg)
    model, tok = load_model(cfg, base, device)
    written = []
    for task in cfg.probe.tasks:
        n_prob, n = (
            (cfg.probe.n_problems, cfg.probe.samples)
            if task == "countdown"
            else (cfg.probe.arith_problems, cfg.probe.arith_samples)
        )
        _, problems = countdown.make_splits(task, 0, n_prob, cfg.task.seed)
        tokens, _ = sample_problem_tokens(
            model, tok, cfg, problems, n, cfg.eval.sampling, f"probe-{task}", cfg.eval.problems_per_batch, progress
        )
        texts = decode_texts(tok, tokens)
        rows = score_problems(problems, texts, keep_responses=False)
        res = {
            "task": task,
            "n": n,
            **summarize(rows, n, n),
            "examples": [t[0] for t in texts[:3]],
            "problems": rows,
            "response_tokens": [
                [len(r) for r in rs] for rs in tokens
            ],  # new tokens, EOS included: --dry-run prices them
            "provenance": record(cfg, "probe", None, str(device)),
        }
        path = run / f"probe_{task}.json"
        atomic_write_json(path, res)
        written.append(path)
    return written


def choose_sets(pass_rates: list[float], sizes: list[int]) -> dict[str, list[int]]:
    """The registered rule (PLAN.md): among problems with 0 < p < 1, rank by p(1 - p) (most
    uncertain first: the most signal per group), ties by index; the size-s set is the first s."""
    informative = [i for i, p in enumerate(pass_rates) if 0 < p < 1]
    ranked = sorted(informative, key=lambda i: (-pass_rates[i] * (1 - pass_rates[i]), i))
    return {str(z): ranked[:z] for z in sizes}


def select(cfg: config.Config, base: str, run: Path, progress: bool = True) -> dict:
    setup_torch(cfg)
    device = pick_device(cfg)
    model, tok = load_model(cfg, base, device)
    train_set, _ = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    problems = train_set[: cfg.select.n_problems]
    s = config.SamplingCfg(
        temperature=cfg.select.temperature, top_p=1.0, top_k=0, max_new_tokens=cfg.train.sampling.max_new_tokens
    )
    texts, _ = sample_problems(
        model, tok, cfg, problems, cfg.select.samples, s, "select", cfg.eval.problems_per_batch, progress
    )
    rows = score_problems(problems, texts, keep_responses=False)
    rates = [r[f"correct_{cfg.select.scoring}"] / r["n"] for r in rows]
    sets = choose_sets(rates, study.selection_sizes(cfg))
    res = {
        "rule": f"0 < {cfg.select.scoring} pass rate < 1; rank by p(1-p) descending, ties by index; take the first s",
        "pass_rates": {p.id: r for p, r in zip(problems, rates)},
        "informative": [problems[i].id for i, r in enumerate(rates) if 0 < r < 1],
        "sets": {z: [problems[i].id for i in idx] for z, idx in sets.items()},
        "short": {z: len(idx) < int(z) for z, idx in sets.items()},
        "sampling": {
            "n": cfg.select.samples,
            "temperature": s.temperature,
            "top_p": 1.0,
            "top_k": 0,
            "repetition_penalty": 1.0,
            "max_new_tokens": s.max_new_tokens,
        },
        "provenance": record(cfg, "select", {"sizes": study.selection_sizes(cfg)}, str(device)),
    }
    atomic_write_json(run / "selection.json", res)
    return res
