"""Every setting of a config checked, section by section (`validate`, which config.load calls):
the first problem is a ConfigError naming the key and what would be right, printed by the scripts
on one line before any work starts. The names a check accepts (BUILDS, REWARDS, ...) and a condition's
seeds (seeds_of) are here too; orchestration/config.py holds the settings themselves and re-exports
these. Config is imported for its type only: config imports this module, never the reverse.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestration.config import Config


class ConfigError(ValueError):
    pass


BUILDS = ("build", "qwen_shape", "gguf")  # the model settings that make the `base` stage build RUN/base_model
CONDITION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
REWARDS = ("strict", "loose", "format")
METHODS = ("grpo", "rft", "sft")
EVAL_MODELS = ("all", "final", "final-first-seed", "base")


def seeds_of(cfg: Config, condition: str) -> list[int]:
    """The training seeds of one condition: train.seeds_by_condition's list, else train.seeds (here, where
    the checks read it, and re-exported as config.seeds_of)."""
    return cfg.train.seeds_by_condition.get(condition, cfg.train.seeds)


def _need(ok: bool, key: str, msg: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {msg}")


def validate(cfg: Config, files: bool = True) -> None:
    """Every setting checked, section by section; the first problem raises ConfigError (one line
    naming the key and what would be right). files=False leaves out what a check would read on this
    machine (model.path's folder): for a config recorded elsewhere."""
    _check_run(cfg)
    _check_model(cfg, files)
    for check in (
        _check_task,
        _check_lora,
        _check_sampling,
        _check_train,
        _check_conditions,
        _check_eval,
        _check_lr_sweep,
        _check_tokens,
        _check_analyze,
        _check_select,
        _check_probe,
    ):
        check(cfg)


def _check_run(cfg: Config) -> None:
    """The top-level run settings."""
    _need(cfg.threads >= 0, "threads", "must be >= 0 (0 = torch's default)")
    _need(cfg.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda")
    _need(cfg.determinism in ("full", "kernels", "off"), "determinism", "must be full, kernels or off")
    _need(cfg.micro_batch >= 0, "micro_batch", "must be >= 0 (0 = chosen from memory_gb)")
    _need(
        cfg.memory_gb == "auto" or (not isinstance(cfg.memory_gb, str) and cfg.memory_gb > 0),
        "memory_gb",
        "must be a number of GiB > 0, or auto (the device's free memory)",
    )


def _check_model(cfg: Config, files: bool = True) -> None:
    """model: the base, its dtype, how it is built or reused."""
    _need(
        cfg.model.dtype != "float16",
        "model.dtype",
        "float16 needs loss scaling, which this code does not do: use bfloat16 (GPU) or float32",
    )
    _need(cfg.model.dtype in ("bfloat16", "float32"), "model.dtype", "must be bfloat16 or float32")
    if files and all(getattr(cfg.model, k) is None for k in BUILDS):
        path = cfg.model.path
        hub_id = not path.startswith((".", "/", "~")) and path.count("/") == 1  # e.g. Qwen/Qwen2.5-0.5B-Instruct
        _need(
            hub_id or os.path.isdir(os.path.expanduser(path)),
            "model.path",
            f"no model folder at {path!r} (and it is not a hub id such as Qwen/Qwen2.5-0.5B-Instruct)",
        )
    _need(
        cfg.model.base_from is None or cfg.model.build is not None,
        "model.base_from",
        "reuses a base built by model.build: set model.build to the recipe it was built with",
    )
    _need(
        (cfg.model.base_from is None) == (cfg.model.base_sha256 is None),
        "model.base_sha256",
        "model.base_from and model.base_sha256 go together (the folder, and its model.safetensors' sha256)",
    )
    _need(
        cfg.model.base_sha256 is None or re.fullmatch(r"[0-9a-f]{64}", str(cfg.model.base_sha256)) is not None,
        "model.base_sha256",
        "must be 64 lowercase hex digits (sha256sum of model.safetensors)",
    )
    if cfg.model.build is not None:
        b = cfg.model.build
        _need(
            b.hidden % b.heads == 0 and b.heads % b.kv_heads == 0,
            "model.build.heads",
            "hidden must divide by heads, heads by kv_heads",
        )
        _need(b.steps >= 1 and b.batch >= 1, "model.build.steps", "steps and batch must be >= 1")
        _need(b.n_pretrain >= 1, "model.build.n_pretrain", "must be >= 1")
        _need(all(0 <= x <= 1 for x in b.p_borrow_slip), "model.build.p_borrow_slip", "must be probabilities in [0, 1]")
        _need(b.n_drill >= 0, "model.build.n_drill", "must be >= 0 (0 = no drill traces)")
        _need(
            bool(b.wrong_offsets) and all(x >= 1 for x in b.wrong_offsets),
            "model.build.wrong_offsets",
            "must be integers >= 1",
        )
    if cfg.model.qwen_shape is not None:
        _need(cfg.model.qwen_shape.layers >= 1, "model.qwen_shape.layers", "must be >= 1")
    if cfg.model.gguf is not None:
        g = cfg.model.gguf
        _need((g.package is None) != (g.path is None), "model.gguf", "give either package (and file) or path, not both")
        _need(g.path is not None or bool(g.file), "model.gguf.file", "the GGUF file's name inside the package")


def _check_task(cfg: Config) -> None:
    """task: the problems and the prompt."""
    from countdown import PROMPT_STYLES, TASKS  # no torch: cheap

    _need(
        cfg.task.name in TASKS and cfg.task.name != "countdown",
        "task.name",
        f"must be one of {', '.join(t for t in TASKS if t != 'countdown')}",
    )
    _need(cfg.task.n_train >= 1, "task.n_train", "must be >= 1")
    _need(cfg.task.n_test >= 1, "task.n_test", "must be >= 1")
    _need(cfg.task.prompt_style in PROMPT_STYLES, "task.prompt_style", f"must be one of {', '.join(PROMPT_STYLES)}")
    _need(cfg.task.seed >= 0, "task.seed", "must be >= 0")
    _need(
        cfg.task.test_split in ("test", "confirm", "confirm2", "confirm3", "confirm4"),
        "task.test_split",
        "must be test (the test split), confirm (a fresh split drawn after the others), confirm2 (one drawn after "
        "confirm), confirm3 (one drawn after confirm2) or confirm4 (one drawn after confirm3)",
    )


def _check_lora(cfg: Config) -> None:
    """lora: the adapter."""
    _need(cfg.lora.r >= 1, "lora.r", "must be >= 1")
    _need(
        not cfg.lora.tf32 or cfg.model.dtype == "bfloat16",
        "lora.tf32",
        "only with model.dtype bfloat16: in a float32 model TF32 would round every matrix product, not only "
        "LoRA's (set lora.tf32: false)",
    )
    _need(len(cfg.lora.targets) > 0, "lora.targets", "must name at least one module")


def _check_sampling(cfg: Config) -> None:
    """train.sampling and eval.sampling."""
    ts = cfg.train.sampling
    _need(
        ts.temperature == 1.0 and ts.top_p == 1.0 and ts.top_k == 0,
        "train.sampling",
        "must be temperature 1.0, top_p 1.0, top_k 0: the policy gradient uses the untempered, untruncated "
        f"log-probabilities, so rollouts must come from that policy "
        f"(got temperature {ts.temperature:g}, top_p {ts.top_p:g}, top_k {ts.top_k})",
    )
    for name, s in (("train.sampling", cfg.train.sampling), ("eval.sampling", cfg.eval.sampling)):
        _need(s.decode in ("eager", "graph", "auto"), f"{name}.decode", "must be eager, graph or auto")
        _need(s.tail in ("sort", "cut"), f"{name}.tail", "must be sort or cut")
        _need(s.temperature >= 0, f"{name}.temperature", "must be >= 0 (0 = greedy)")
        _need(0 < s.top_p <= 1, f"{name}.top_p", "must be in (0, 1]")
        _need(s.top_k >= 0, f"{name}.top_k", "must be >= 0 (0 = off)")
        _need(s.max_new_tokens >= 1, f"{name}.max_new_tokens", "must be >= 1")


def _check_train(cfg: Config) -> None:
    """train (its sampling apart)."""
    _need(
        cfg.train.draw in ("sample", "batch"),
        "train.draw",
        "must be batch (one generator per rollout call, as before) or sample (each rollout its own keyed stream)",
    )
    t = cfg.train
    _need(t.problems_per_step >= 1, "train.problems_per_step", "must be >= 1")
    _need(t.group_size >= 2, "train.group_size", "must be >= 2 (advantages are relative to the group)")
    _need(t.steps >= 1, "train.steps", "must be >= 1")
    _need(t.lr is None or t.lr > 0, "train.lr", "must be > 0, or null to use the lr-sweep's choice")
    _need(len(t.betas) == 2 and all(0 <= b < 1 for b in t.betas), "train.betas", "must be two numbers in [0, 1)")
    _need(
        all(1 <= c <= t.steps for c in t.checkpoints),
        "train.checkpoints",
        f"every checkpoint must be in 1..train.steps ({t.steps})",
    )
    _need(t.save_last_every >= 1, "train.save_last_every", "must be >= 1")
    _need(
        bool(t.seeds) and all(x >= 0 for x in t.seeds) and len(set(t.seeds)) == len(t.seeds),
        "train.seeds",
        "must be a non-empty list of distinct integers >= 0, e.g. [0, 1, 2]",
    )
    for name, ss in t.seeds_by_condition.items():
        _need(
            name in cfg.conditions,
            f"train.seeds_by_condition.{name}",
            f"is not a condition ({', '.join(cfg.conditions)})",
        )
        _need(
            isinstance(ss, list)
            and bool(ss)
            and all(isinstance(x, int) and x >= 0 for x in ss)
            and len(set(ss)) == len(ss),
            f"train.seeds_by_condition.{name}",
            "must be a non-empty list of distinct integers >= 0",
        )
    _need(t.log_kl_every >= 0, "train.log_kl_every", "must be >= 0 (0 = never)")
    _need(t.grad_clip is None or t.grad_clip > 0, "train.grad_clip", "must be > 0, or null for no clipping")
    _need(
        t.importance_cap is None or t.importance_cap > 0,
        "train.importance_cap",
        "must be > 0 (e.g. 2.0), or null for no correction",
    )
    _need(
        t.no_signal_update in ("step", "skip"),
        "train.no_signal_update",
        "must be step (AdamW steps on a zero gradient, as TRL does) or skip (no optimizer step on it)",
    )
    _need(
        t.logp_gap_limit is None or t.logp_gap_limit > 0,
        "train.logp_gap_limit",
        "must be > 0 (nats), or null for no limit",
    )
    _need(
        t.logp_gap_max_limit is None or t.logp_gap_max_limit > 0,
        "train.logp_gap_max_limit",
        "must be > 0 (nats), or null for no limit",
    )
    _need(
        t.dev_every >= 0 and t.dev_problems >= 1 and t.dev_samples >= 1,
        "train.dev_every",
        "dev_every must be >= 0 (0 = off), dev_problems and dev_samples >= 1",
    )


def _check_conditions(cfg: Config) -> None:
    """conditions: the registry."""
    _need(bool(cfg.conditions), "conditions", "must register at least one condition, e.g. {many: {problems: all}}")
    for name, c in cfg.conditions.items():
        _need(
            bool(CONDITION_NAME.fullmatch(name)),
            f"conditions.{name}",
            "names use letters, digits and '-' only (they become file names: train_<name>_s<seed>)",
        )
        _need(
            c.problems == "all"
            or (c.problems.startswith("select-") and c.problems[7:].isdigit() and int(c.problems[7:]) >= 1)
            or bool(re.fullmatch(r"stratum:borrows-[0-9]+", c.problems)),
            f"conditions.{name}.problems",
            f"must be 'all', 'select-N' with N >= 1 or 'stratum:borrows-K', got {c.problems!r}",
        )
        _need(c.reward in REWARDS, f"conditions.{name}.reward", f"must be one of {', '.join(REWARDS)}")
        _need(c.method in METHODS, f"conditions.{name}.method", f"must be one of {', '.join(METHODS)}")
        _need(c.kl >= 0, f"conditions.{name}.kl", "must be >= 0")
        _need(c.entropy >= 0, f"conditions.{name}.entropy", "must be >= 0")
        _need(
            0 <= c.unlikeliness <= 1 and (c.unlikeliness == 0 or c.method == "grpo"),
            f"conditions.{name}.unlikeliness",
            "must be in [0, 1], and 0 unless method is grpo (it reranks the group's rewards)",
        )
        _need(c.lr is None or c.lr > 0, f"conditions.{name}.lr", "must be > 0, or null for the lr-sweep's choice")


def _check_eval(cfg: Config) -> None:
    """eval and eval_sets."""
    from countdown import TASKS  # no torch: cheap

    for name, es in cfg.eval_sets.items():
        _need(
            bool(CONDITION_NAME.fullmatch(name)) and name != "test",
            f"eval_sets.{name}",
            "names use letters, digits and '-' ('test' is the eval section)",
        )
        _need(
            es.task is None or (es.task in TASKS and es.task != "countdown"),
            f"eval_sets.{name}.task",
            f"must be null or one of {', '.join(t for t in TASKS if t != 'countdown')}",
        )
        _need(
            es.n_problems >= 1 and es.n >= 1 and 1 <= es.k_max <= es.n,
            f"eval_sets.{name}.k_max",
            "need n_problems >= 1 and 1 <= k_max <= n",
        )
        _need(
            es.task not in (None, cfg.task.name) or es.n_problems <= cfg.task.n_test,
            f"eval_sets.{name}.n_problems",
            f"the set takes the first test problems: at most task.n_test ({cfg.task.n_test})",
        )
        _need(es.models in EVAL_MODELS, f"eval_sets.{name}.models", f"must be one of {', '.join(EVAL_MODELS)}")
        sm = es.sampling or cfg.eval.sampling
        _need(
            sm.temperature > 0 and 0 < sm.top_p <= 1 and sm.top_k >= 0 and sm.max_new_tokens >= 1,
            f"eval_sets.{name}.sampling",
            "needs temperature > 0, top_p in (0, 1], top_k >= 0, max_new_tokens >= 1",
        )
        _need(sm.tail in ("sort", "cut"), f"eval_sets.{name}.sampling.tail", "must be sort or cut")
        _need(es.problems_per_batch >= 1, f"eval_sets.{name}.problems_per_batch", "must be >= 1")
        _need(es.seeds in ("own", "test"), f"eval_sets.{name}.seeds", "must be own or test")
    _need(cfg.eval.n >= 1, "eval.n", "must be >= 1")
    _need(1 <= cfg.eval.k_max <= cfg.eval.n, "eval.k_max", f"must be in 1..eval.n ({cfg.eval.n}): pass@k needs k <= n")
    _need(
        cfg.eval.n_base is None or cfg.eval.n_base >= cfg.eval.n,
        "eval.n_base",
        f"must be null or >= eval.n ({cfg.eval.n})",
    )
    _need(cfg.eval.problems_per_batch >= 1, "eval.problems_per_batch", "must be >= 1")
    _need(
        cfg.eval.draw in ("sample", "batch"),
        "eval.draw",
        "must be sample (each sample its own stream: PLAN_CHANGES.md change 52) or batch (one generator per call, as before)",
    )
    _need(cfg.eval.max_rows is None or cfg.eval.max_rows >= 1, "eval.max_rows", "must be null (no cap) or >= 1")
    _need(
        cfg.eval.max_rows is None or cfg.eval.draw == "sample",
        "eval.max_rows",
        "needs eval.draw: sample (under draw: batch, splitting a call changes its samples)",
    )


def _check_lr_sweep(cfg: Config) -> None:
    """lr_sweep: the learning-rate sweep."""
    if cfg.lr_sweep.per_condition:
        for name, c in cfg.conditions.items():
            _need(
                c.method != "sft" or c.lr is not None,
                f"conditions.{name}.lr",
                "an sft condition draws no rollouts, so it has no reward to sweep on: give it its own lr "
                "(or set lr_sweep.per_condition: false)",
            )
    _need(
        len(cfg.lr_sweep.candidates) >= 1 and all(c > 0 for c in cfg.lr_sweep.candidates),
        "lr_sweep.candidates",
        "must be positive numbers",
    )
    _need(1 <= cfg.lr_sweep.last <= cfg.lr_sweep.steps, "lr_sweep.last", "must be in 1..lr_sweep.steps")
    _need(
        cfg.lr_sweep.rule in ("dev", "dev-guarded", "reward"),
        "lr_sweep.rule",
        "must be dev (held-out dev pass@1), dev-guarded (dev among rates that do not lock in) or reward (the report's rule)",
    )
    _need(0 <= cfg.lr_sweep.max_lock_in <= 1, "lr_sweep.max_lock_in", "must be a share in [0, 1]")


def _check_tokens(cfg: Config) -> None:
    """tokens: the token-level comparison."""
    _need(cfg.tokens.top >= 1 and cfg.tokens.n_problems >= 1, "tokens.top", "top and n_problems must be >= 1")


def _need_t1_set(cfg: Config, name: str, key: str, models: str, t1: bool) -> None:
    """`name` is an eval set of the trained task with these models, n_problems = task.n_test and its own sampling,
    at the training sampler (temperature 1, top_p 1, top_k 0) where t1; else a one-line ConfigError on `key`."""
    es = cfg.eval_sets.get(name)
    s = es.sampling if es is not None else None
    _need(
        es is not None
        and es.models == models
        and es.task in (None, cfg.task.name)
        and es.n_problems == cfg.task.n_test
        and s is not None
        and (not t1 or (s.temperature, s.top_p, s.top_k) == (1.0, 1.0, 0)),
        key,
        f"must name an eval set of the trained task with models: {models}, n_problems = task.n_test and "
        + ("the training sampler (temperature 1, top_p 1, top_k 0)" if t1 else "its own sampling"),
    )


def _check_baselines(cfg: Config) -> None:
    """analyze.baselines (change 71): its sets exist with the models and samplers it reads."""
    bl = cfg.analyze.baselines
    if bl is None:
        return
    for key, models, t1 in [("pool", "base", True), ("matched", "final", True)] + [
        (f"sweep[{i}]", "base", False) for i in range(len(bl.sweep))
    ]:
        name = getattr(bl, key) if not key.startswith("sweep") else bl.sweep[int(key[6:-1])]
        _need_t1_set(cfg, name, f"analyze.baselines.{key}", models, t1)
    _need(
        all(a > 0 for a in bl.powers) and (not bl.powers or cfg.eval.logp_all),
        "analyze.baselines.powers",
        "must be > 0, and needs eval.logp_all: true (the pool's log-probabilities weigh the resample)",
    )


def _check_analyze(cfg: Config) -> None:
    """analyze: its settings, then each registered analysis' own (in this order: the first failure is the line)."""
    _need(cfg.analyze.extrapolate_to >= 1, "analyze.extrapolate_to", "must be >= 1")
    _need(
        cfg.analyze.primary_condition in cfg.conditions,
        "analyze.primary_condition",
        f"must name a registered condition ({', '.join(cfg.conditions)})",
    )
    _need(cfg.analyze.primary_scoring in ("strict", "loose"), "analyze.primary_scoring", "must be strict or loose")
    _need(0 < cfg.analyze.equivalence_margin < 1, "analyze.equivalence_margin", "must be in (0, 1)")
    _need(0 < cfg.analyze.margin_headroom_fraction <= 1, "analyze.margin_headroom_fraction", "must be in (0, 1]")
    _need(cfg.analyze.beyond_resamples >= 10, "analyze.beyond_resamples", "must be >= 10")
    _need(0 < cfg.analyze.power < 1, "analyze.power", "must be in (0, 1)")
    _need(cfg.analyze.ceiling_null in ("selection", "base"), "analyze.ceiling_null", "must be selection or base")
    _need(0 < cfg.analyze.selection_margin < 1, "analyze.selection_margin", "must be in (0, 1)")
    _need(cfg.analyze.coverage_sims >= 100, "analyze.coverage_sims", "must be >= 100")
    _check_support(cfg)
    _check_base_support(cfg)
    _check_within_correct(cfg)
    _check_baselines(cfg)
    col = cfg.analyze.collapse
    _need(
        col is None or (0 <= col.late_from < 1 and 0 < col.share <= 1),
        "analyze.collapse",
        "late_from in [0, 1) and share in (0, 1]",
    )
    _check_calibration(cfg)
    _need(cfg.analyze.resamples >= 100, "analyze.resamples", "must be >= 100")
    _need(0 < cfg.analyze.ci < 1, "analyze.ci", "must be in (0, 1)")


def _check_support(cfg: Config) -> None:
    """analyze.support (change 42's test)."""
    sup = cfg.analyze.support
    if sup is not None:
        _need(sup.w_star >= 1, "analyze.support.w_star", "must be >= 1 (a tilt towards correct answers)")
        _need(
            not sup.primary or "eval" in sup.pools,
            "analyze.support.primary",
            "needs a pool at the evaluation sampler (pools.eval)",
        )
        _need(
            not (sup.primary and cfg.analyze.base_support is not None and cfg.analyze.base_support.primary),
            "analyze.support.primary",
            "one registered primary question: analyze.base_support.primary is set too",
        )
        for sampler, name in sup.pools.items():
            es = cfg.eval_sets.get(name)
            _need(
                es is not None
                and es.models == "base"
                and es.seeds == "own"
                and es.task in (None, cfg.task.name)
                and es.n_problems == cfg.task.n_test,
                f"analyze.support.pools.{sampler}",
                "must name an eval set of the trained task with models: base, seeds: own and n_problems = task.n_test",
            )


def _check_base_support(cfg: Config) -> None:
    """eval.base_support and analyze.base_support (change 57)."""
    _need(
        cfg.eval.base_support or not cfg.eval.within_correct,
        "eval.within_correct",
        "needs eval.base_support: true (it adds to the base_support records)",
    )
    bs = cfg.analyze.base_support
    if bs is not None:
        _need(
            cfg.eval.base_support,
            "analyze.base_support",
            "needs eval.base_support: true (the evaluations record the measure)",
        )
    if (
        cfg.eval.base_support
    ):  # the measure applies decoding.filter_logits, the sort tail's rule: cut breaks ties otherwise
        tails = [cfg.eval.sampling.tail] + [
            es.sampling.tail for es in cfg.eval_sets.values() if es.sampling is not None
        ]
        _need(
            all(t == "sort" for t in tails),
            "eval.base_support",
            "needs every evaluation sampler's tail: sort (the rule it applies)",
        )
        _need(
            bs is None or 0 <= bs.tolerance < 1 and 0 < bs.kept_margin < 1,
            "analyze.base_support.tolerance",
            "tolerance in [0, 1) and kept_margin in (0, 1)",
        )
        es = cfg.eval_sets.get(bs.matched) if bs is not None and bs.matched is not None else None
        _need(
            bs is None
            or bs.matched is None
            or (
                es is not None
                and es.models == "final"
                and es.seeds == "own"
                and es.task in (None, cfg.task.name)
                and es.n_problems == cfg.task.n_test
            ),
            "analyze.base_support.matched",
            "must be null or name an eval set of the trained task with models: final, seeds: own and n_problems = task.n_test",
        )


def _check_within_correct(cfg: Config) -> None:
    """analyze.within_correct (PLAN.md section 7e)."""
    wc = cfg.analyze.within_correct
    if wc is not None:
        _need(
            cfg.eval.within_correct and cfg.analyze.base_support is not None,
            "analyze.within_correct",
            "needs eval.within_correct: true and analyze.base_support (its tolerance reads outside)",
        )
        for key, models in (("matched", "final"), ("pool", "base")):
            _need_t1_set(cfg, getattr(wc, key), f"analyze.within_correct.{key}", models, True)
        e = cfg.eval.sampling
        _need(
            e.temperature > 0 and (e.top_p < 1.0 or e.top_k > 0),
            "analyze.within_correct",
            "needs an evaluation sampler that truncates (top_p < 1 or top_k > 0): its nucleus is what 'outside' reads",
        )
        _need(
            wc.exponent_margin > 0 and 0 < wc.gap_margin < 1 and wc.permutations >= 99,
            "analyze.within_correct",
            "exponent_margin > 0, gap_margin in (0, 1) and permutations >= 99",
        )


def _check_calibration(cfg: Config) -> None:
    """analyze.calibration (change 36)."""
    cal = cfg.analyze.calibration
    if cal is not None:
        _need(
            cal.pool_set in cfg.eval_sets
            and cfg.eval_sets[cal.pool_set].models == "base"
            and cfg.eval_sets[cal.pool_set].task in (None, cfg.task.name)
            and cfg.eval_sets[cal.pool_set].n_problems == cfg.task.n_test,
            "analyze.calibration.pool_set",
            "must name an eval set of the trained task with models: base and n_problems = task.n_test",
        )
        primary_seeds = len(seeds_of(cfg, cfg.analyze.primary_condition))
        _need(
            cfg.eval_sets[cal.pool_set].n >= primary_seeds * cfg.eval.n,
            f"eval_sets.{cal.pool_set}.n",
            f"the null arm takes disjoint slices of the pool: needs >= {primary_seeds} primary seeds x eval.n ({cfg.eval.n})",
        )
        _need(
            cal.resplits >= 10 and cal.resamples >= 100,
            "analyze.calibration.resplits",
            "resplits >= 10 and resamples >= 100",
        )
        _need(
            all(w > 0 for w in cal.selection_w) and all(0 < e < 1 for e in cal.teaching_eps),
            "analyze.calibration.selection_w",
            "w > 0 and teaching_eps in (0, 1)",
        )
        _need(
            cal.taught is None
            or (cal.taught in cfg.conditions and cfg.conditions[cal.taught].problems.startswith("stratum:")),
            "analyze.calibration.taught",
            "must name a condition whose problems are stratum:<name>",
        )


def _check_select(cfg: Config) -> None:
    """select: the few-problem sets."""
    s = cfg.select
    _need(1 <= s.n_problems <= cfg.task.n_train, "select.n_problems", "must be in 1..task.n_train")
    _need(s.samples >= 2, "select.samples", "must be >= 2")
    _need(
        cfg.select.scoring in ("strict", "loose"),
        "select.scoring",
        "must be strict or loose (the pass rate the selection rule reads)",
    )


def _check_probe(cfg: Config) -> None:
    """probe: the base rates on the probe tasks."""
    from countdown import TASKS  # no torch: cheap

    _need(all(x in TASKS for x in cfg.probe.tasks), "probe.tasks", f"must be drawn from {', '.join(TASKS)}")
    _need(cfg.probe.arith_samples >= 1 and cfg.probe.samples >= 1, "probe.samples", "must be >= 1")
