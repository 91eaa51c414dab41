"""The study's settings: one typed set of defaults (the registered study, configs/qwen05b.yaml:
Qwen2.5-0.5B-Instruct on an 8 GB GPU), overridden by a YAML file and then by `--set a.b=value` on
the command line. configs/report.yaml lists where the seed report's own design departs from them.

An unknown key, a wrong type or an impossible value is a ConfigError naming the key; the
scripts print it on one line and exit with code 2 before any work starts.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field

import yaml

import countdown
from orchestration.analysis_settings import (  # noqa: F401  (the analyze section's blocks, readable as config.X)
    BaselinesCfg,
    BaseSupportCfg,
    CalibrationCfg,
    CollapseCfg,
    MixedArmCfg,
    PlannedCfg,
    SupportCfg,
    WithinCorrectCfg,
)
from orchestration.base_settings import GgufCfg, QwenShapeCfg, TinyBaseCfg  # noqa: F401  (model.build, .shape, .gguf)
from orchestration.validation import (  # noqa: F401  (the checks; these names stay readable as config.X)
    BUILDS,
    CONDITION_NAME,
    EVAL_MODELS,
    METHODS,
    REWARDS,
    ConfigError,
    seeds_of,
    validate,
)


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
    # by the same task seed, so a confirmatory run measures new problems on the same base (PLAN_CHANGES.md change 44).
    test_split: str = "test"


@dataclass
class LoraCfg:
    r: int = 32
    alpha: int = 64
    targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    # Sample (training rollouts, dev checks, evaluations) with W + (alpha/r) B A folded into one
    # weight in the base's dtype: no LoRA kernels per decoded token, at the cost of rounding the
    # sum (bench/fold_kl.py measures the policy mismatch; PLAN_CHANGES.md change 21). Off: the exact policy.
    fold_for_sampling: bool = False
    # On CUDA, LoRA's fp32 matrix products (its weights and the fp32 copies of its inputs) in TF32: about
    # 8x the fp32 throughput at a 10-bit mantissa, finer than the bf16 output the update is added to.
    # Only with model.dtype bfloat16 (validated): a float32 config sets it false. Off: exact fp32.
    tf32: bool = True


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
    # eager for a SamplingCfg made in code (the selection, the token stage's greedy decode); the train and
    # eval sections' default is auto.
    decode: str = "eager"
    # What top-k / top-p and the draw run on (with a filter on): sort (decoding.filter_logits: a sort of the
    # whole row, as every run so far) or cut (method/cut_tail.py: the top 1,024 tokens first, the full sort
    # only for a row whose nucleus they do not hold; another rounding of the nucleus and the draw, so a
    # rare token falls the other way: the registered study's evaluation sampler since change 79, where the
    # eval section's default is cut; every CPU world's config writes sort).
    tail: str = "sort"


@dataclass
class ConditionCfg:
    """One condition of the study: what it trains on and how. The trainer reads these knobs;
    there is no per-condition branch (PLAN.md section 4)."""

    problems: str = "all"  # all | select-N (the N problems the select stage picks)
    # strict (answer in tags, correct) | loose (strict, or the last integer correct) | format (a complete <answer> block with an integer)
    reward: str = "strict"
    method: str = (
        "grpo"  # grpo (Dr. GRPO) | rft (cross-entropy on the correct samples) | sft (cross-entropy on gold solutions)
    )
    kl: float = 0.0  # beta of the k3 KL anchor to the base (0 = none, as the report ran)
    entropy: float = 0.0  # alpha of the entropy bonus (0 = none)
    lr: float | None = None  # None: the lr-sweep stage's choice
    # beta of the unlikeliness reward (objective.unlikeliness_rewards; after He, Fried & Welleck, arXiv
    # 2506.02355): the more likely of a group's correct responses earn less. 0 = off. A positive control that
    # moves RL toward rare correct answers (PLAN.md section 7e).
    unlikeliness: float = 0.0


def default_conditions() -> dict[str, ConditionCfg]:
    """PLAN.md section 4, in its order: the report's three, then the controls (H4-H6)."""
    return {
        "many": ConditionCfg("all"),
        "16": ConditionCfg("select-16"),
        "1": ConditionCfg("select-1"),
        "16-kl": ConditionCfg("select-16", kl=0.001),
        "format": ConditionCfg("all", reward="format"),
        "rft": ConditionCfg("all", method="rft"),
        "sft": ConditionCfg("all", method="sft"),
    }


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
    # condition gets the seeds its planned power needs (PLAN_CHANGES.md change 29) without multiplying the rest.
    seeds_by_condition: dict[str, list[int]] = field(default_factory=lambda: {"many": [0, 1, 2, 3, 4, 5]})
    log_kl_every: int = 10  # log the k3 KL to the base every this many steps when no KL term is trained (0 = never)
    grad_clip: float | None = None  # clip the gradient's global norm to this (None = off, as the report ran)
    # Micro-batches of completions of similar length (sorted by length before they are cut), so
    # less of each is padding. The gradient is the same sum in another order: equal up to float
    # rounding, not bit for bit, so it is a setting (PLAN_CHANGES.md change 21).
    sort_by_length: bool = True
    # Held-out checks during training: pass@1 and pass@n on `dev` problems (a split disjoint from
    # train and test), sampled like the evaluation, every dev_every steps -> train_eval.csv.
    dev_every: int = 25  # 0 = off
    dev_problems: int = 64
    dev_samples: int = 8
    # The policy gradient uses untempered log-probabilities, so rollouts must be drawn from the
    # untempered, untruncated policy: temperature 1, top-p 1, top-k off (validated).
    sampling: SamplingCfg = field(default_factory=lambda: SamplingCfg(decode="auto"))
    # How a step's rollouts are drawn: batch, one generator per call, seeded by the run and the step (every run
    # so far; a row's tokens depend on the whole call); sample, each rollout its own stream of uniforms keyed by
    # (run, step, problem id, index) and drawn by its inverse CDF, as eval.draw: sample (PLAN_CHANGES.md change
    # 52): one uniform per token instead of an exponential per vocabulary entry (bench/README.md: faster per
    # sampling call on the CPU; within noise over a whole step). The same distribution, other draws: a setting.
    draw: str = "batch"
    # The sampler-trainer mismatch ([D4]: the ratio is 1 only where the sampler's log pi equals the
    # trainer's). importance_cap C: weigh each trained token by min(pi_trainer / pi_sampler, C), detached
    # (truncated importance sampling, as TRL's vLLM correction); None: off, the plain surrogate.
    importance_cap: float | None = None
    # A step whose gradient is exactly zero (every group without reward signal, no KL or entropy term):
    # step, AdamW steps anyway, its momentum and second moment moving the weights (TRL's and the
    # Dr. GRPO code's behaviour, and every run made before the key existed); skip, no optimizer step
    # (PLAN_CHANGES.md change 45; the registered study's since change 72). train_log.csv's no_signal and updated
    # columns say which steps were which.
    no_signal_update: str = "skip"
    # Recompute each decoder layer in the backward pass instead of keeping its activations
    # (method/model.checkpoint_layers): the same loss and gradients bit for bit on the CPU (tests/test_grpo.py),
    # one more forward's time; memory.estimate_memory's peak for it checked at 6-24 layers (bench/README.md).
    # False: every layer's activations kept, as every run so far.
    gradient_checkpointing: bool = False
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
    n_base: int | None = 256
    sampling: SamplingCfg = field(
        default_factory=lambda: SamplingCfg(temperature=0.6, top_p=0.95, decode="auto", tail="cut")
    )  # tail cut: the registered study's (PLAN_CHANGES.md change 79); every CPU world's config writes tail: sort
    problems_per_batch: int = 4  # problems decoded together (each with its n samples)
    # How every evaluation sampling call (this section's, eval_sets', the dev checks', probe's, select's)
    # draws (PLAN_CHANGES.md change 52): sample, each sample from its own stream keyed by (task.seed, tag,
    # problem id, sample index), so problems_per_batch and max_rows change no sample; batch, one
    # generator per call seeded by its first problem (the runs made before change 52).
    draw: str = "sample"
    # The most rows (samples) one sampling call decodes: a call then holds fewer problems, or a share
    # of one problem's samples. None: no cap (problems_per_batch problems' n samples). Needs draw: sample.
    # 256: the largest call ~5.2 GiB with CUDA graphs (3.4 eager) by memory.decoder_bytes at Qwen's size (changes 52, 54).
    max_rows: int | None = 256
    keep_responses: bool = True
    # Teacher-force every correct response through the base (LoRA off) and record, from the token ids the
    # sampler drew, whether a token lies outside the base's kept set at the sampler that drew it, and the
    # response's base log-probability at T 1, untruncated (method/base_support.py; PLAN_CHANGES.md change 57).
    base_support: bool = False
    # With base_support, also record for every correct response its length, whether it lies outside the
    # base's kept set at the evaluation sampler (whatever sampler drew it) and its log-probability at T 1 under
    # the evaluated model itself (LoRA on): the within-correct measures at the training sampler (PLAN.md 7e).
    within_correct: bool = False
    # In a base-only evaluation at T 1, top-p 1, top-k 0 (the base's own distribution), record every response's
    # log-probability (`logp_t1_all`, teacher-forced): the weights of the reward-free baselines that resample the
    # pool under a power of the base (PLAN.md section 7e, change 71).
    logp_all: bool = False


@dataclass
class EvalSetCfg:
    """A registered evaluation besides `test` (the `eval` section): its own problems, samples and
    models, written to RUN/evalsets/<name>/."""

    task: str | None = (
        None  # None: task.name (the test problems); else another task's test problems (out of distribution)
    )
    n_problems: int = 64  # the first n_problems test problems of that task
    n: int = 256
    k_max: int = 256
    models: str = (
        "final-first-seed"  # all | final | final-first-seed | base (the base alone): which checkpoints besides the base
    )
    sampling: SamplingCfg | None = None  # None: the eval section's sampling (the same as the test set's)
    problems_per_batch: int = 1
    seeds: str = "own"  # own: the set's own sampling seeds (new draws); test: the test set's (same n and batching reproduce its counts)


def default_eval_sets() -> dict[str, EvalSetCfg]:
    """PLAN.md section 6: the wide set (pass@k to 256), out of distribution (arith-3x3), and the base
    alone at both samplers on fresh draws (the calibration's pool, the support test's, change 42)."""
    train_sampler = SamplingCfg(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=384, decode="auto")
    return {
        "wide": EvalSetCfg(),
        "ood": EvalSetCfg(task="arith-3x3", n_problems=128, n=32, k_max=32, models="final", problems_per_batch=4),
        "pool": EvalSetCfg(n_problems=128, n=192, k_max=32, models="base"),
        "pool-train": EvalSetCfg(n_problems=128, n=192, k_max=32, models="base", sampling=train_sampler),
    }


@dataclass
class TokensCfg:
    """The token-level comparison of each trained checkpoint with the base (arXiv 2605.06241 §3)."""

    enabled: bool = True
    top: int = 5  # "reranked": the trained model's choice is in the base's top `top`
    n_problems: int = 128  # the first test problems, decoded greedily by the base


@dataclass
class SelectCfg:
    n_problems: int = 128  # the first train problems the base answers
    samples: int = 16
    temperature: float = 1.0
    # the pass rate the rule reads: strict (the report's; the reward the conditions train on) or
    # loose, for a model trained on the loose reward because it never writes the tags (PLAN_CHANGES.md change 31)
    scoring: str = "strict"


@dataclass
class LrSweepCfg:
    candidates: list[float] = field(default_factory=lambda: [1e-5, 5e-5, 2e-4])
    steps: int = 30
    # How the rate is chosen (PLAN.md section 5): dev, the highest loose pass@1 on the held-out dev
    # problems after `steps` steps (train.dev_problems x train.dev_samples); reward, the report's rule,
    # the highest mean training reward over the last `last` steps (the effect under test, in sample).
    # dev-guarded (PLAN_CHANGES.md change 72, the registered study's): dev among the candidates whose last dev
    # check has at most max_lock_in of the dev problems locked on a wrong answer (analysis/concentration.py);
    # none such: the smallest candidate. The rule was dev (change 29); the report's is reward.
    rule: str = "dev-guarded"
    max_lock_in: float = 0.10
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
class AnalyzeCfg:
    resamples: int = 10000  # Holm over every family's tests needs p-values far below 1 / 2001
    ci: float = 0.95
    seed: int = 0  # the bootstrap's generator
    equivalence_margin: float = 0.10  # TOST margin for "the ceiling is unchanged" (PLAN.md section 7)
    # The ceiling half of the primary question: against the selection null (the base reweighted to the
    # trained model's pass@1, PLAN.md section 7) or, as the seed report read it, against the base itself
    ceiling_null: str = "selection"
    selection_margin: float = 0.05  # TOST margin for "within the selection null's ceiling"
    # The equivalence test is asked only when the margin is at most this share of the base's headroom,
    # 1 - its pass@k_max on the set (PLAN_CHANGES.md change 29): otherwise it could hardly fail
    margin_headroom_fraction: float = 1 / 3
    # the report's effect (loose pass@1 0.25 -> 0.66) at the CPU pilot's variance components
    planned: PlannedCfg | None = field(default_factory=lambda: PlannedCfg(effect=0.41))
    beyond_resamples: int = 200  # the parametric bootstrap of the model-based curves (PLAN.md section 7c)
    primary_condition: str = "many"  # the one primary entry: this condition, its last checkpoint ...
    primary_scoring: str = "loose"  # ... on this scoring
    power: float = 0.8  # the power at which the report states the smallest detectable effects
    extrapolate_to: int = 1024  # the largest k of the model-based (beta-binomial) pass@k curve
    note: str | None = None  # printed first in report.md, e.g. that a run is a pipeline check and answers nothing
    coverage_sims: int = 2000  # count-level simulations of the crossed interval's coverage (the sensitivity analysis)
    calibration: CalibrationCfg | None = field(default_factory=CalibrationCfg)  # None: no calibration arms
    support: SupportCfg | None = field(
        default_factory=lambda: SupportCfg(pools={"eval": "pool", "train": "pool-train"})
    )  # None: none
    base_support: BaseSupportCfg | None = None  # None: not measured (change 57)
    collapse: CollapseCfg | None = None  # None: not reported (change 59)
    within_correct: WithinCorrectCfg | None = None  # None: not measured (PLAN.md section 7e)
    baselines: BaselinesCfg | None = None  # None: not reported (PLAN.md section 7e, change 71)


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
    eval_sets: dict[str, EvalSetCfg] = field(default_factory=default_eval_sets)  # further registered sets
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
            near = difflib.get_close_matches(k, names, n=1)
            mean = f"did you mean {(f'{prefix}.' if prefix else '') + near[0]!r}? " if near else ""
            raise ConfigError(f"unknown key {where!r} ({mean}known here: {', '.join(sorted(names))})")
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
    """A dataclass's fields as a mapping, one level deep (nested dataclasses are left out and rebuilt by
    _build from their own defaults only when the mapping names them; lists of them, such as
    calibration.mixed, become lists of mappings)."""
    plain = dataclasses.asdict(obj)
    return {
        f.name: plain[f.name] for f in dataclasses.fields(obj) if not dataclasses.is_dataclass(getattr(obj, f.name))
    }


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _with_registries(data: dict, default) -> dict:
    """`data` with each registry it leaves out (a mapping-typed setting: conditions, eval_sets,
    train.seeds_by_condition, analyze.support.pools) written at its default, so that `--set
    conditions.many.lr=0.5` changes one entry of the default registry instead of replacing it."""
    hints = typing.get_type_hints(type(default))
    for f in dataclasses.fields(default):
        value, given = getattr(default, f.name), data.get(f.name, {})
        if typing.get_origin(hints[f.name]) is dict and f.name not in data:
            data[f.name] = {
                k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else copy.deepcopy(v) for k, v in value.items()
            }
        elif dataclasses.is_dataclass(value) and isinstance(given, dict):
            data[f.name] = _with_registries(dict(given), value)
    return data


def _names_registry(parts: list[str]) -> bool:
    """Whether the dotted key `parts` names a whole registry (conditions, eval_sets,
    train.seeds_by_condition, analyze.support.pools), not a section or one of its entries."""
    tp, i = Config, 0
    while i < len(parts):
        if not dataclasses.is_dataclass(tp) or parts[i] not in typing.get_type_hints(tp):
            return False  # not a known key (config._build names it)
        tp = typing.get_type_hints(tp)[parts[i]]
        tp = (
            next((a for a in typing.get_args(tp) if a is not type(None)), tp)
            if type(None) in typing.get_args(tp)
            else tp
        )
        if typing.get_origin(tp) is dict:
            if i == len(parts) - 1:
                return True
            tp, i = typing.get_args(tp)[1], i + 1  # an entry of the registry
        i += 1
    return False


def _apply_set(data: dict, items: list[str]) -> dict:
    """`data` with each `--set key=value` applied in order, the value parsed as a YAML scalar: a value that
    names a whole registry replaces it (`--set eval_sets={}` runs none); another mapping is merged into its section."""
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. train.steps=10")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        *path, name = parts = key.strip().split(".")
        node = data
        for p in path:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        if isinstance(value, dict) and isinstance(node.get(name), dict) and not _names_registry(parts):
            node[name] = _merge(node[name], value)
        else:
            node[name] = value
    return data


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
    data = _apply_set(_with_registries(data, Config()), overrides or [])
    model = data.get("model")
    if isinstance(model, dict):
        for key in ("build", "qwen_shape"):
            if model.get(key) is True:
                model[key] = {}  # `build: true` = the tiny base with its defaults
        built = [k for k in BUILDS if model.get(k) is not None]
        if built and "path" in model:
            raise ConfigError(
                f"model.path: goes with no model.{built[0]} (that config builds its own base into RUN/base_model); "
                "remove one of them"
            )
        if len(built) > 1:
            raise ConfigError(
                f"model.{built[0]}: and model.{built[1]} both set; a run builds one base model, remove one of them"
            )
    cfg = _build(Config, data)
    validate(cfg)
    return cfg


def selection_size(c: ConditionCfg) -> int | None:
    """N for a condition that trains on the select stage's N problems, else None."""
    return int(c.problems[7:]) if c.problems.startswith("select-") else None


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def digest(obj) -> str:
    """sha256 (first 16 hex digits) of a JSON-able object, keys sorted."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
