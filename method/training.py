"""Dr. GRPO's training loop and the learning-rate sweep: one run's steps (rollouts, scores,
advantages, the update), what each step leaves (log, dev checks, checkpoints, resume point), and
the sweep's short runs with the registered choice. The objective and its departures from GRPO,
[D1]..[D5], are method/objective.py's; loading and LoRA live in method/model.py, the sampler in
method/sampler.py, evaluation in method/evaluate.py, a run's log, checkpoints and resume point in
method/checkpoint.py.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

import countdown
from method import evaluate
from method.checkpoint import DEV_FIELDS, read_log, resume, save_checkpoint, save_last
from method.model import (
    apply_lora,
    checkpoint_layers,
    free_memory_gib,
    load_model,
    lora_folded,
    pad_id,
    peak_memory_mb,
    pick_device,
    render_prompts,
    setup_torch,
    stop_ids,
)
from method.objective import METHODS, Method, Terms, policy_gradient, unlikeliness_rewards
from method.sampler import Samples, decode_mode, sample
from orchestration import config, provenance, study
from orchestration.curves import Curves
from orchestration.memory import decoders_held, estimate_memory, micro_batch_choice
from orchestration.provenance import atomic_write_json, read_csv_rows, record, stage_hash, write_csv_rows

# ============================================================================= training


@dataclass
class TrainingRun:
    """One training run: condition `name` (its settings `cond`) with training seed `seed`, on the
    problems `pool` at rate `lr`, for `steps` steps, saving adapters at `checkpoints`."""

    name: str
    cond: config.ConditionCfg
    seed: int
    pool: list
    lr: float
    steps: int
    checkpoints: list[int]
    inputs: dict | None = None  # what its stage hash records besides the config
    stage: str = "train"  # "lr-sweep" for the sweep's short runs: their own hash and sampling seeds
    dev_every: int = 0  # held-out dev checks every this many steps (0: none)


class Diverged(RuntimeError):
    pass


def step_problems(pool: list, step: int, per_step: int, seed: int, shuffle: bool) -> list:
    """The problems of one step (1-based). shuffle: a fresh seeded permutation of the pool per
    epoch (problems: all); otherwise the pool is cycled (copies of the 16 or 1 problems).
    Depends only on (seed, step): resuming needs no data-loader state."""
    out = []
    for j in range((step - 1) * per_step, step * per_step):
        epoch, i = divmod(j, len(pool))
        if shuffle:
            g = torch.Generator().manual_seed(study.seed_for(seed, "order", epoch))
            i = torch.randperm(len(pool), generator=g)[i].item()
        out.append(pool[i])
    return out


def rollouts(st: "Step", problems: list, prompts: list, step: int) -> tuple[Samples, list[dict]]:
    """G samples of the current policy per problem (seeded by the run and the step) and their scores."""
    model, tok, cfg, run, stops, pad = st.model, st.tok, st.cfg, st.run, st.stops, st.pad
    G, s = cfg.train.group_size, cfg.train.sampling
    seed = study.seed_for(run.seed, run.stage, run.name, step)
    if cfg.train.draw == "sample":  # each rollout its own stream: its tokens depend on its problem and index alone
        seed = [study.seed_for(seed, p.id, j) for p in problems for j in range(G)]
    with lora_folded(model) if cfg.lora.fold_for_sampling else nullcontext():
        samples = sample(model, prompts, G, s, seed, stops, pad, entropy=True)
    texts = tok.batch_decode(samples.tokens, skip_special_tokens=True)
    return samples, [countdown.score(problems[i // G], x) for i, x in enumerate(texts)]


def trained_rewards(rewards: torch.Tensor, samples: Samples, unlikeliness: float) -> torch.Tensor:
    """The rewards (P, G) the advantages are made from: the scores, or under a condition's unlikeliness the
    scores reweighted by each response's likelihood rank in its group (objective.unlikeliness_rewards, from the
    sampler's own token log-probabilities). train_log.csv keeps the scores."""
    if unlikeliness == 0.0:
        return rewards
    seq_logp = torch.tensor([sum(lp) for lp in samples.logprobs], dtype=torch.float64).view(rewards.shape)
    return unlikeliness_rewards(rewards, seq_logp, unlikeliness)


def no_rollouts(n: int) -> tuple[Samples, list[dict]]:
    """What a method without rollouts (sft) logs in their place: nothing sampled, no scores."""
    return Samples([[] for _ in range(n)], [False] * n, [float("nan")] * n), [
        {"strict": float("nan"), "loose": float("nan"), "format": float("nan")}
    ] * n


def gold_completions(tok, problems: list, style: str) -> list[list[int]]:
    """Each problem's written solution (countdown.gold_solution) with its EOS, once (SFT weighs it G)."""
    return [
        tok(countdown.gold_solution(p, style), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        for p in problems
    ]


@dataclass
class Drawn:
    """What a step trained on: the samples (none under sft), their scores, the rewards (P, G) and the completions."""

    samples: Samples
    scored: list[dict]
    rewards: torch.Tensor
    completions: list[list[int]]


@dataclass
class Updated:
    """The step's update: the gradients' global norm before and after clipping, and whether the optimizer stepped."""

    gnorm: float
    gnorm_after: float
    updated: bool = True


def log_row(
    step: int,
    lr: float,
    method: Method,
    drawn: Drawn,
    grad: dict,
    upd: Updated,
    seconds: tuple[float, float],
    peak_mb: tuple[float, float],
) -> dict:
    """One row of train_log.csv (LOG_FIELDS). no_signal: the gradient was exactly zero; updated: the optimizer
    stepped (train.no_signal_update)."""
    rewards, scored, samples, completions = drawn.rewards, drawn.scored, drawn.samples, drawn.completions
    gnorm, gnorm_after, updated = upd.gnorm, upd.gnorm_after, upd.updated
    lens = [len(x) for x in completions]
    return {
        "step": step,
        "reward_mean": rewards.mean().item(),
        "zero_signal_frac": (rewards.max(1).values == rewards.min(1).values).float().mean().item()
        if method.rollouts
        else float("nan"),
        "format_rate": sum(float(d["format"]) for d in scored) / len(scored),
        "len_mean": sum(lens) / len(lens),
        "len_max": max(lens),
        "truncated_frac": sum(samples.truncated) / len(samples.truncated),
        "entropy_mean": sum(e * n for e, n in zip(samples.entropy, lens)) / max(sum(lens), 1),
        "kl_mean": grad["kl_mean"],
        "logp_gap_mean": grad["logp_gap_mean"],
        "logp_gap_max": grad["logp_gap_max"],
        "loss": grad["loss"],
        "grad_norm": gnorm,
        "grad_norm_clipped": gnorm_after,
        "lr": lr,
        "sec_sampling": round(seconds[0], 4),
        "sec_fwd_bwd": round(seconds[1], 4),
        "tokens": sum(lens),
        "peak_mem_mb": round(peak_mb[0], 1),
        "peak_reserved_mb": round(peak_mb[1], 1),
        "no_signal": int(gnorm == 0.0),
        "updated": int(updated),
    }


NO_SIGNAL_STEPS = 5  # the first steps whose zero-advantage share no_signal_warning reads


def no_signal_warning(rows: list[dict], what: str) -> str | None:
    """One warning line when most groups carried no signal at the start of a run, else None. The
    rule: over the first NO_SIGNAL_STEPS steps (all of them if the run is shorter), the mean of
    train_log.csv's zero_signal_frac (the share of groups whose G samples all scored alike, so
    every advantage is 0 and the group adds nothing to the gradient) is above study.NO_SIGNAL_WARN.
    A run that learns from so few groups moves slowly and mostly by noise (tiny_v3 showed 92-99%)."""
    first = [r["zero_signal_frac"] for r in rows if r["step"] <= NO_SIGNAL_STEPS]
    if not first or not all(math.isfinite(x) for x in first):  # sft: no rollouts, no groups
        return None
    share = sum(first) / len(first)
    if share <= study.NO_SIGNAL_WARN:
        return None
    return (
        f"warning: {what}: {share:.0%} of groups carried no reward signal over steps 1-{len(first)} (all samples of a "
        f"problem scored alike: zero advantage, no gradient); most of each step's samples teach nothing"
    )


def make_optimizer(model, cfg: config.Config, lr: float):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        params, lr=lr, betas=tuple(cfg.train.betas), eps=cfg.train.eps, weight_decay=cfg.train.weight_decay
    )


def global_norm(params) -> float:
    """The gradients' global L2 norm (what clip_grad_norm_ clips)."""
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])).item()


def train(
    cfg: config.Config, run: TrainingRun, out: Path, base: str, progress: bool = True, tensorboard: bool = False
) -> Path:
    """Train `run` into `out`, resuming from out/last if it is there: out/train_log.csv, out/step_XXX/ adapters,
    out/last/ (the resume point), out/done.json, with run.dev_every out/train_eval.csv. The training seed draws
    the LoRA initialisation, the data order and every rollout; nothing else."""
    from orchestration.progress import Progress as tqdm  # a plain line a minute where stderr is not a terminal

    tc = cfg.train
    P, G, s = tc.problems_per_step, tc.group_size, tc.sampling
    method = METHODS[run.cond.method]
    setup_torch(cfg)
    model, tok = load_model(cfg, base, device := pick_device(cfg))
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, study.seed_for(run.seed, "lora-init"))
    if tc.gradient_checkpointing:
        checkpoint_layers(model)
    opt = make_optimizer(model, cfg, run.lr)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "condition": run.name,
        "train_seed": run.seed,
        "lr": run.lr,
        "steps": run.steps,
        "provenance": record(cfg, run.stage, run.inputs, str(device)),
    }
    start, rows, dev_rows = resume(out, model, opt, meta)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    micro_batch, mem, why = memory_plan(cfg, model, tok, run, device)
    if progress and not cfg.micro_batch:  # set in the config, it is what the user wrote (done.json keeps why)
        print(f"{run.stage} {run.name} s{run.seed}: {why}", flush=True)
    normalizer = P * G * s.max_new_tokens  # [D2] a constant, not the response lengths
    params = [p for p in model.parameters() if p.requires_grad]
    dev = evaluate.dev_problems(cfg) if run.dev_every > 0 else []
    if dev and start == 1:
        dev_rows = [evaluate.dev_check(model, tok, cfg, dev, 0)]  # the base itself (B = 0)
    curves = Curves(out / "tensorboard" if tensorboard else None)  # live curves, off unless asked
    if dev_rows and start == 1:
        curves.row("dev", dev_rows[0], 0)
    bar = tqdm(
        range(start, run.steps + 1),
        desc=f"{run.stage} {run.name} s{run.seed} lr={run.lr:g}",
        disable=not progress,
        initial=start - 1,
        total=run.steps,
        leave=False,
    )
    # The model stays in eval mode: Qwen2 has no dropout, and train-mode dropout would draw from
    # torch's unseeded global generator.
    st = Step(cfg, run, model, tok, opt, params, method, stops, pad, micro_batch, normalizer, out, device)
    for step in bar:
        rows.append(one_step(st, step))
        bar.set_postfix(
            reward=f"{rows[-1]['reward_mean']:.2f}",
            fmt=f"{rows[-1]['format_rate']:.2f}",
            len=f"{rows[-1]['len_mean']:.0f}",
        )
        if step == min(NO_SIGNAL_STEPS, run.steps) and (
            warning := no_signal_warning(rows, f"{run.stage} {run.name} s{run.seed}")
        ):
            bar.write(warning, file=sys.stdout)  # above the progress bar; stdout: stderr carries the one-line errors
        keep(st, base, meta, step, rows, dev, dev_rows)
        curves.row("train", rows[-1], step)
        if dev_rows and dev_rows[-1]["step"] == step:
            curves.row("dev", dev_rows[-1], step)
    bar.close()
    curves.close()
    atomic_write_json(
        out / "done.json",
        {
            "steps": run.steps,
            **meta,
            "micro_batch": micro_batch,
            "micro_batch_auto": cfg.micro_batch == 0,
            "micro_batch_why": why,
            "memory_estimate_gib": round(mem["train_step"] / 2**30, 3),
            "stop_ids": stops,
            "dtype": cfg.model.dtype,
        },
    )
    return out


@dataclass
class Step:
    """What every step of one training run reads: the run, the model and its optimizer, and what train() settled
    before the first step (the micro-batch, the loss's constant normalizer, the stop and pad ids)."""

    cfg: config.Config
    run: TrainingRun
    model: object
    tok: object
    opt: torch.optim.Optimizer
    params: list
    method: Method
    stops: list[int]
    pad: int
    micro_batch: int
    normalizer: int
    out: Path
    device: torch.device


def one_step(st: Step, step: int) -> dict:
    """One optimizer step of st.run: this step's problems, rollouts (or gold completions), rewards, advantages,
    the policy gradient and the update; returns the step's train_log.csv row."""
    cfg, run, tc, device = st.cfg, st.run, st.cfg.train, st.device
    P, G = tc.problems_per_step, tc.group_size
    model, tok, method = st.model, st.tok, st.method
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    shuffled = run.cond.problems == "all" or run.cond.problems.startswith("stratum:")  # a fresh permutation per epoch
    problems = step_problems(run.pool, step, P, study.seed_for(run.seed, run.name), shuffle=shuffled)
    prompts = render_prompts(tok, problems, cfg.task.prompt_style, cfg.task.system_prompt)
    t0 = time.perf_counter()
    samples, scored = rollouts(st, problems, prompts, step) if method.rollouts else no_rollouts(P * G)
    t1 = time.perf_counter()
    rewards = torch.tensor([float(d[run.cond.reward]) for d in scored]).view(
        P, G
    )  # [D5] strict score only (format: the control)
    completions = samples.tokens if method.rollouts else gold_completions(tok, problems, cfg.task.prompt_style)
    adv = method.advantages(trained_rewards(rewards, samples, run.cond.unlikeliness))  # [D5] but `rare`; (P*G,) or (P,)
    copies = G if method.rollouts else 1
    terms = Terms(
        st.normalizer,
        st.micro_batch,
        kl=run.cond.kl,
        entropy=run.cond.entropy,
        measure_kl=tc.log_kl_every > 0 and step % tc.log_kl_every == 0,
        sort_by_length=tc.sort_by_length,
        importance_cap=tc.importance_cap,
    )
    rows = [prompts[i // copies] for i in range(P * copies)]
    sampled = samples.logprobs if method.rollouts else None
    grad = policy_gradient(model, rows, completions, adv, st.pad, terms, sampled_logp=sampled)
    upd = update(st.opt, st.params, grad, step, tc, st.out)
    t2 = time.perf_counter()
    drawn = Drawn(samples, scored, rewards, completions)
    return log_row(step, run.lr, method, drawn, grad, upd, (t1 - t0, t2 - t1), peak_memory_mb(device))


def keep(st: "Step", base: str, meta: dict, step: int, rows: list, dev: list, dev_rows: list) -> None:
    """What a step leaves once its update is made, as due: the dev check, the registered checkpoint,
    and the resume point with the logs (out/last/)."""
    model, tok, opt, cfg, run, out = st.model, st.tok, st.opt, st.cfg, st.run, st.out
    if dev and step % run.dev_every == 0:
        dev_rows.append(evaluate.dev_check(model, tok, cfg, dev, step))
    if step in run.checkpoints:
        save_checkpoint(model, out, step, cfg, base)
    if step % cfg.train.save_last_every == 0 or step == run.steps or step in run.checkpoints:
        if dev:
            write_csv_rows(out / "train_eval.csv", dev_rows, DEV_FIELDS)  # before last/, like the log
        save_last(model, opt, step, rows, out, cfg, base, meta)


def memory_plan(cfg: config.Config, model, tok, run: TrainingRun, device: torch.device) -> tuple[int, dict, str]:
    """The micro-batch (config's, or the largest the memory budget holds beside what the static
    decoders keep), the memory estimate of a step, from the longest prompt of the run's pool, and why
    that micro-batch (memory.micro_batch_choice)."""
    s = cfg.train.sampling
    prompt_len = max(len(p) for p in render_prompts(tok, run.pool[:256], cfg.task.prompt_style, cfg.task.system_prompt))
    held = decoders_held(
        cfg,
        model.config,
        prompt_len,
        decode_mode(s, device) == "graph",
        run.dev_every > 0 and decode_mode(cfg.eval.sampling, device) == "graph",
    )
    micro_batch, why = micro_batch_choice(
        cfg, model.config, prompt_len, free_memory_gib(device) if cfg.memory_gb == "auto" else None, held
    )
    mem = estimate_memory(
        model.config,
        cfg.lora.r,
        len(cfg.lora.targets),
        prompt_len,
        s.max_new_tokens,
        micro_batch,
        cfg.train.problems_per_step * cfg.train.group_size,
        2 if cfg.model.dtype != "float32" else 4,
        fold=cfg.lora.fold_for_sampling,
        checkpointing=cfg.train.gradient_checkpointing,
    )
    return micro_batch, mem, why


def update(opt, params: list, grad: dict, step: int, tc: config.TrainCfg, out: Path) -> Updated:
    """The step's one update ([D4]): the gradients' global norm before and after clipping, and whether
    the optimizer stepped (not on an exactly zero gradient under train.no_signal_update skip). Stops the
    run (Diverged) before the update when the loss or the norm is not finite, or when the logged
    policy gap exceeds train.logp_gap_limit (its mean) or train.logp_gap_max_limit (its largest token)."""
    for key, limit, what in (
        ("logp_gap_mean", tc.logp_gap_limit, "mean"),
        ("logp_gap_max", tc.logp_gap_max_limit, "largest"),
    ):
        if limit is not None and grad[key] > limit:  # NaN (nothing trained) passes
            raise Diverged(
                f"step {step}: the policy gap ({what} |log pi trainer - log pi sampler| over the trained tokens) "
                f"{grad[key]:.4g} exceeds train.{'logp_gap_limit' if what == 'mean' else 'logp_gap_max_limit'} "
                f"{limit:g}; stopped before this step's update, {out}/last holds the last good state"
            )
    for p in params:
        if (
            p.grad is None
        ):  # every advantage was 0: a zero gradient; AdamW still steps (momentum) unless no_signal_update skip
            p.grad = torch.zeros_like(p)
    gnorm = global_norm(params)
    if not (math.isfinite(grad["loss"]) and math.isfinite(gnorm)):
        raise Diverged(
            f"step {step}: loss {grad['loss']} / grad norm {gnorm} is not finite; stopped, {out}/last holds the last good state"
        )
    gnorm_after = gnorm
    if tc.grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(params, tc.grad_clip)
        gnorm_after = global_norm(params)  # measured from the gradients the optimizer will use
    updated = not (gnorm == 0.0 and tc.no_signal_update == "skip")
    if updated:
        opt.step()  # [D4] one update per sampling
    opt.zero_grad(set_to_none=True)
    return Updated(gnorm, gnorm_after, updated)


def training_run(cfg: config.Config, name: str, seed: int, run_folder: Path) -> TrainingRun:
    """The registered training run of condition `name` with training seed `seed`."""
    pool, lr, inputs = study.train_inputs(cfg, name, seed, run_folder)
    return TrainingRun(
        name,
        cfg.conditions[name],
        seed,
        pool,
        lr,
        cfg.train.steps,
        cfg.train.checkpoints,
        inputs,
        dev_every=cfg.train.dev_every,
    )


def lr_sweep(cfg: config.Config, base: str, run: Path, progress: bool = True) -> dict:
    """lr_sweep.steps steps of the many condition per candidate, on the first training seed, and
    the registered choice (PLAN.md section 5; ties: the smaller rate): with lr_sweep.rule dev the
    highest loose pass@1 on the held-out dev problems after the last step (never the training
    reward: that is the effect under test, measured in sample); with rule reward the report's
    rule, the highest mean training reward over the last lr_sweep.last steps. With
    lr_sweep.per_condition, every condition is swept with its own recipe and gets its own rate."""
    seed, ls = cfg.train.seeds[0], cfg.lr_sweep
    sweeps = (
        [(name, c, run / "lr_sweep" / name) for name, c in cfg.conditions.items()]
        if ls.per_condition
        else [("many", study.SWEEP_CONDITION, run / "lr_sweep")]
    )
    chosen, means, devs, locks = {}, {}, {}, {}
    for name, cond, folder in sweeps:
        pool, inputs = study.condition_pool(cfg, cond, run)
        inputs = (
            {**inputs, "seed": seed}
            if not ls.per_condition
            else {**inputs, "seed": seed, "condition": name, "settings": config.to_dict(cond)}
        )
        rewards, dev, locked = {}, {}, {}
        want = stage_hash(cfg, "lr-sweep", inputs)
        for lr in ls.candidates:
            out = folder / f"lr_{lr:g}"
            done = out / "done.json"
            for marker in (done, out / "last" / "state.json"):
                if marker.exists() and provenance.recorded_hash(marker) != want:
                    shutil.rmtree(out)  # made under other settings (the pipeline asks first): run it again
                    break
            if not done.exists():
                train(
                    cfg,
                    TrainingRun(
                        name,
                        cond,
                        seed,
                        pool,
                        lr,
                        ls.steps,
                        [],
                        inputs,
                        stage="lr-sweep",
                        dev_every=ls.steps if ls.rule.startswith("dev") else 0,
                    ),
                    out,
                    base,
                    progress,
                )
            rows = read_log(out / "train_log.csv")
            rewards[f"{lr:g}"] = sum(r["reward_mean"] for r in rows[-ls.last :]) / ls.last
            if ls.rule.startswith("dev"):
                last_check = read_csv_rows(out / "train_eval.csv")[-1]
                dev[f"{lr:g}"] = float(last_check["loose_pass1"])
                locked[f"{lr:g}"] = float(last_check.get("locked_wrong") or "nan")
        means[name], devs[name], locks[name] = rewards, dev, locked
        chosen[name] = choose_rate(ls, dev if ls.rule.startswith("dev") else rewards, locked)
    first = next(iter(chosen))
    res = {
        "rule": sweep_rule(cfg, seed),
        "rule_name": ls.rule,
        "mean_reward_last": means[first],
        "chosen": chosen[first],
        "provenance": record(cfg, "lr-sweep", {"problems": "all", "seed": seed}),
    }
    if ls.rule.startswith("dev"):
        res["dev_loose_pass1"] = devs[first]
    if ls.rule == "dev-guarded":
        res["dev_locked_wrong"] = locks[first]
    if ls.per_condition:
        res["per_condition"], res["mean_reward_by_condition"] = chosen, means
    atomic_write_json(run / "lr_choice.json", res)
    return res


def sweep_rule(cfg: config.Config, seed: int) -> str:
    """lr_choice.json's rule, in words."""
    ls = cfg.lr_sweep
    what = "each condition's own recipe" if ls.per_condition else "the many condition"
    rule = (
        f"highest loose pass@1 on the {cfg.train.dev_problems} held-out dev problems x {cfg.train.dev_samples} samples after "
        f"{ls.steps} steps of {what}"
        if ls.rule.startswith("dev")
        else f"highest mean reward over the last {ls.last} of {ls.steps} steps of {what}"
    )
    if ls.rule == "dev-guarded":
        rule += f", among the rates with at most {ls.max_lock_in:g} of them locked on a wrong answer (none such: the smallest)"
    return rule + f", training seed {seed}; ties: the smaller rate"


def choose_rate(ls: config.LrSweepCfg, score: dict, locked: dict) -> float:
    """The sweep's rate: the highest score, ties to the smaller rate; under dev-guarded only among the rates whose last
    dev check has at most ls.max_lock_in of its problems locked on a wrong answer (an unmeasured one is not), and the
    smallest candidate when none is."""
    pool = list(ls.candidates)
    if ls.rule == "dev-guarded":
        pool = [lr for lr in pool if locked.get(f"{lr:g}", float("nan")) <= ls.max_lock_in]
        if not pool:
            return min(ls.candidates)
    return sorted(pool, key=lambda lr: (-score[f"{lr:g}"], lr))[0]


def train_command(
    cfg: config.Config,
    condition: str,
    seed: int,
    run_folder: Path,
    out: Path,
    base: str,
    progress: bool,
    tensorboard: bool = False,
) -> Path:
    """`grpo.py train`: one condition's training run with one seed (with --tensorboard, live curves too)."""
    return train(cfg, training_run(cfg, condition, seed, run_folder), out, base, progress, tensorboard)
