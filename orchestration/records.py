"""A config recorded by any version of this code (manifest.json's, or a provenance's "config"), read
back as today's typed Config: `from_record`, the one compatibility layer for old runs.

A record holds every key its code had. A key added since reads the value that means "as before"
(ADDED_OFF, which the stage hashes read too: at that value a key is left out of the hash, so the
runs made before it existed keep theirs); any other key a record lacks reads the seed report's
design (REPORT_DESIGN), which the defaults were until PLAN_CHANGES.md change 55. The oldest layout (a
top-level `seed`, the conditions as a list of names under `train`) is upgraded first.
"""

from __future__ import annotations

import copy
import dataclasses
import typing

import countdown
from orchestration import config

# Keys added after runs were made, with the value that means "as before".
ADDED_OFF = {
    "lora.fold_for_sampling": False,
    "train.sort_by_length": False,
    "model.gguf": None,
    "task.system_prompt": countdown.SYSTEM_PROMPT,
    "train.sampling.decode": "eager",
    "eval.sampling.decode": "eager",
    "lora.tf32": False,
    "lr_sweep.rule": "reward",
    "train.no_signal_update": "step",
    "train.gradient_checkpointing": False,
    "select.scoring": "strict",
    "determinism": "full",
    "train.importance_cap": None,
    "train.logp_gap_limit": None,
    "train.logp_gap_max_limit": None,
    "train.no_signal_update": "step",
    "lr_sweep.max_lock_in": 0.10,
    "model.build.p_borrow_slip": [],
    "model.build.n_drill": 0,
    "model.build.wrong_offsets": [1, 2, 5, 10, 20, 100],
    "eval.n_base": None,
    "analyze.ceiling_null": "base",
    "analyze.selection_margin": 0.05,
    "analyze.coverage_sims": 2000,
    "analyze.calibration": None,
    "analyze.planned.seed_df": 2,
    "analyze.support": None,
    "analyze.support.primary": False,
    "task.test_split": "test",
    "model.base_from": None,
    "model.base_sha256": None,
    "eval.draw": "batch",
    "eval.max_rows": None,
    "eval.base_support": False,
    "eval.within_correct": False,
    "eval.logp_all": False,
    "analyze.base_support": None,
    "analyze.collapse": None,
    "analyze.within_correct": None,
    "analyze.within_correct.post_hoc": False,
    "analyze.within_correct.clean": False,
    "analyze.baselines": None,
    "train.sampling.tail": "sort",
    "eval.sampling.tail": "sort",
    "train.draw": "batch",
}

# The seed report's design where it departs from the defaults (the registered study's, PLAN.md
# change 55): the defaults before that change, so a record that lacks one of these keys was made
# under this value. configs/report.yaml sets exactly these and one training seed (a test keeps them equal).
REPORT_DESIGN = {
    "conditions": {"many": {"problems": "all"}, "16": {"problems": "select-16"}, "1": {"problems": "select-1"}},
    "lora.tf32": False,
    "train.seeds_by_condition": {},
    "train.log_kl_every": 0,
    "train.sort_by_length": False,
    "train.dev_every": 0,
    "train.sampling.decode": "eager",
    "eval.n_base": None,
    "eval.max_rows": None,
    "eval.sampling.decode": "eager",
    "eval.sampling.tail": "sort",
    "eval_sets": {},
    "tokens.enabled": False,
    "lr_sweep.rule": "reward",
    "train.no_signal_update": "step",
    "analyze.resamples": 2000,
    "analyze.ceiling_null": "base",
    "analyze.planned": None,
    "analyze.calibration": None,
    "analyze.support": None,
}


def from_record(recorded: dict) -> config.Config:
    """Today's typed Config for a recorded one, checked by config.validate (but for files on this
    machine: a recorded model.path may name another machine's folder). A ConfigError names the key."""
    if not isinstance(recorded, dict):
        raise config.ConfigError(f"expected a mapping of settings, got {type(recorded).__name__}")
    data = upgrade(copy.deepcopy(recorded))
    for key in sorted({**REPORT_DESIGN, **ADDED_OFF}, key=lambda k: k.count(".")):  # a section before its keys
        _fill(data, key, {**REPORT_DESIGN, **ADDED_OFF}[key])
    cfg = config._build(config.Config, data)
    config.validate(cfg, files=False)
    return cfg


def upgrade(data: dict) -> dict:
    """The oldest layout (results/tiny, results/tiny_first_run) in today's: its top-level `seed` drew
    the problems and seeded the bootstrap; train.conditions named the report's conditions, each with
    the recipe of its name, and one training seed, 0."""
    if "seed" in data:
        seed = data.pop("seed")
        data.setdefault("task", {}).setdefault("seed", seed)
        data.setdefault("analyze", {}).setdefault("seed", seed)
    train = data.get("train")
    if isinstance(train, dict) and isinstance(train.get("conditions"), list):
        names = train.pop("conditions")
        data.setdefault("conditions", {c: {"problems": f"select-{c}" if c.isdigit() else "all"} for c in names})
        train.setdefault("seeds", [0])
    return data


def _fill(data: dict, key: str, value) -> None:
    """Set the dotted `key` where the record lacks it. A missing section on the way is created where the
    Config always has one (train.sampling; a null one too: `tokens: null` lacks every key of the section,
    as config._build reads it), never where it may be null (model.build, analyze.planned)."""
    node, cls = data, config.Config
    *path, name = key.split(".")
    for part in path:
        hint = typing.get_type_hints(cls)[part]
        if node.get(part) is None:
            if not dataclasses.is_dataclass(hint):  # an optional section the record does not have, or null
                return
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):  # null, or a malformed record (config._build names it)
            return
        cls = next(a for a in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(a))
    node.setdefault(name, copy.deepcopy(value))
