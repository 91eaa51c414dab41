"""orchestration/records.py: a config recorded by any version of the code read back as today's
typed Config, and the defaults it reads a missing key at (the report's design, the keys added since)."""

import copy
import glob
import json
from pathlib import Path

import pytest

from orchestration import config, records

ROOT = Path(__file__).resolve().parents[1]


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d[part]
    return d


def _recorded_configs() -> list[tuple[str, dict]]:
    out = []
    for f in sorted(
        glob.glob(str(ROOT / "results" / "*" / "manifest.json"))
        + glob.glob(str(ROOT / "results" / "*" / "eval_base.json"))
    ):
        d = json.loads(Path(f).read_text())
        out.append((str(Path(f).relative_to(ROOT)), d.get("config") or d["provenance"]["config"]))
    return out


def _same(got, recorded) -> bool:
    """A registry entry's recorded settings are kept (its other keys at their defaults)."""
    if isinstance(recorded, dict) and isinstance(got, dict):
        return set(recorded) <= set(got) and all(_same(got[k], v) for k, v in recorded.items())
    return got == recorded


def _reads(got, value) -> bool:
    """`got` is the setting `value` writes: a registry with exactly its entries."""
    return _same(got, value) and (not isinstance(value, dict) or set(got) == set(value))


def test_the_defaults_are_the_registered_study():
    """config.py's defaults are configs/qwen05b.yaml's settings, key for key."""
    assert config.to_dict(config.load(None)) == config.to_dict(config.load(str(ROOT / "configs" / "qwen05b.yaml")))


def test_report_yaml_is_the_report_design_table():
    """configs/report.yaml sets exactly records.REPORT_DESIGN (and one training seed), and every entry
    of the table departs from the defaults: the table is what the defaults were before change 55."""
    report, defaults = (
        config.to_dict(config.load(str(ROOT / "configs" / "report.yaml"))),
        config.to_dict(config.Config()),
    )
    for key, value in records.REPORT_DESIGN.items():
        assert _reads(_get(report, key), value) and not _reads(_get(defaults, key), value), key
    rebuilt = {"train": {"seeds": [0]}}
    for key, value in records.REPORT_DESIGN.items():
        records._fill(rebuilt, key, value)
    assert config.to_dict(config._build(config.Config, rebuilt)) == report


@pytest.mark.parametrize("key", sorted(records.REPORT_DESIGN))
def test_a_record_without_a_key_reads_the_report_value(key):
    """A record made under the report's design that lacks one key (a run from before the key existed)
    reads back as the report's design: the key takes its old default, not today's."""
    report = config.load(str(ROOT / "configs" / "report.yaml"))
    made = config.to_dict(report)
    *path, name = key.split(".")
    del (_get(made, ".".join(path)) if path else made)[name]
    assert config.to_dict(records.from_record(made)) == config.to_dict(report)


def test_every_committed_record_reads_back_with_its_own_settings():
    """Every config recorded in results/ builds, passes config.validate, and keeps every setting it
    records (the oldest layout's `seed` and train.conditions apart, which are upgraded)."""

    def flat(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict) and v and k not in ("conditions", "eval_sets", "seeds_by_condition", "pools"):
                yield from flat(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v

    seen = 0
    for name, rec in _recorded_configs():
        read = config.to_dict(records.from_record(rec))
        for key, value in flat(rec):
            if key in ("seed", "train.conditions"):
                continue
            assert _same(_get(read, key), value), (name, key)
            seen += 1
    assert seen > 1000


def test_the_oldest_layout_is_upgraded():
    """results/tiny's config (a top-level seed, train.conditions as names): the seed draws the problems
    and seeds the bootstrap, each condition gets the recipe of its name, and one training seed, 0."""
    [(_, rec)] = [(n, r) for n, r in _recorded_configs() if n == "results/tiny/manifest.json"]
    assert "seed" in rec and isinstance(rec["train"]["conditions"], list)
    cfg = records.from_record(rec)
    assert cfg.task.seed == cfg.analyze.seed == rec["seed"] and cfg.train.seeds == [0]
    assert {c: x.problems for c, x in cfg.conditions.items()} == {"many": "all", "16": "select-16", "1": "select-1"}
    assert cfg.analyze.ceiling_null == "base" and cfg.eval_sets == {} and not cfg.tokens.enabled  # its time's behaviour
    assert rec == json.loads((ROOT / "results/tiny/manifest.json").read_text())["config"]  # the record itself untouched


def test_a_malformed_record_is_a_config_error_naming_the_key():
    made = config.to_dict(config.load(str(ROOT / "configs" / "smoke.yaml")))
    bad = copy.deepcopy(made)
    bad["analyze"]["primary_condition"] = "nope"
    with pytest.raises(config.ConfigError, match=r"analyze\.primary_condition: must name a registered condition"):
        records.from_record(bad)
    bad = copy.deepcopy(made)
    bad["train"]["sampling"] = 3
    with pytest.raises(config.ConfigError, match=r"train\.sampling: expected a mapping"):
        records.from_record(bad)
    with pytest.raises(config.ConfigError, match="expected a mapping of settings"):
        records.from_record([1])
    made["model"]["path"] = "/no/such/folder/on/this/machine"  # a record names another machine's folders
    assert records.from_record(made).model.path == "/no/such/folder/on/this/machine"


def test_a_set_edits_one_entry_of_a_default_registry():
    """--set on a registry the file leaves out edits one entry of the default registry; a registry the
    file writes replaces the default one, and --set edits that."""
    cfg = config.load(None, ["conditions.many.lr=0.5", "eval_sets.wide.n=300"])
    assert list(cfg.conditions) == list(config.default_conditions()) and cfg.conditions["many"].lr == 0.5
    assert cfg.conditions["16"] == config.default_conditions()["16"]
    assert list(cfg.eval_sets) == ["wide", "ood", "pool", "pool-train"] and cfg.eval_sets["wide"].n == 300
    smol = config.load(str(ROOT / "configs" / "smollm2.yaml"), ["conditions.many.lr=0.5"])
    assert list(smol.conditions) == ["many", "4", "1"] and smol.conditions["many"].reward == "loose"


def test_a_set_naming_a_whole_registry_replaces_it():
    """--set on a registry itself replaces it, whether or not the file writes it (`eval_sets={}` runs
    none); a later --set edits the replaced registry's entry."""
    cfg = config.load(
        None,
        [
            "eval_sets={}",
            "train.seeds_by_condition={}",
            "analyze.support=null",
            "analyze.calibration=null",
            "conditions={many: {problems: all}}",
            "conditions.many.lr=0.5",
        ],
    )
    assert cfg.eval_sets == {} and cfg.train.seeds_by_condition == {}
    assert list(cfg.conditions) == ["many"] and cfg.conditions["many"].lr == 0.5
    assert config.load(None, ["analyze.support.pools={eval: pool}"]).analyze.support.pools == {"eval": "pool"}
    smol = config.load(str(ROOT / "configs" / "smollm2.yaml"), ["conditions={many: {problems: all, reward: loose}}"])
    assert list(smol.conditions) == ["many"]


def test_a_partial_optional_section_keeps_the_registered_values():
    """A mapping that names some keys of a section keeps the registered study's value of the others,
    an optional section's too (the code's default, not its class's): the support test keeps both pools."""
    cfg = config.load(None, ["analyze.support.w_star=50", "analyze.planned.problem_var=0.01"])
    assert cfg.analyze.support.pools == config.Config().analyze.support.pools and cfg.analyze.support.w_star == 50
    assert len(cfg.analyze.support.pools) == 2
    assert cfg.analyze.planned.effect == config.Config().analyze.planned.effect != config.PlannedCfg().effect


def test_a_null_section_in_a_record_reads_as_one_it_lacks():
    """A record whose non-optional section is null (`tokens: null`) reads as one without the section:
    the report's design (the token stage off), not today's default (on)."""
    report = config.load(str(ROOT / "configs" / "report.yaml"))
    made = config.to_dict(report)
    lacking, null = copy.deepcopy(made), copy.deepcopy(made)
    del lacking["tokens"]
    null["tokens"] = None
    assert records.from_record(null).tokens == records.from_record(lacking).tokens == report.tokens
    assert not records.from_record(null).tokens.enabled


@pytest.mark.parametrize("run", ["tiny_v3", "tiny_v4", "tiny_seeds", "smollm2"])
def test_recalibrate_config_loads_with_the_runs_settings(run, tmp_path):
    """bench/recalibrate.py's config for a committed run loads as a config file and keeps what made the
    run's files: every training and test-evaluation stage hash the record gives (before 7f00bb0 it read
    today's defaults for keys the record lacks, and failed to load on these four runs)."""
    import sys

    import yaml

    from orchestration import provenance

    sys.path.insert(0, str(ROOT / "bench"))
    import recalibrate

    rec = json.loads((ROOT / "results" / run / "manifest.json").read_text())["config"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(recalibrate.recalibrated_config(rec), sort_keys=False))
    got, recorded = config.load(str(tmp_path / "c.yaml")), records.from_record(rec)
    for stage in ("base", "probe", "select", "lr-sweep", "train", "eval"):
        assert provenance.stage_hash(got, stage) == provenance.stage_hash(recorded, stage), stage
    seeds = config.seeds_of(recorded, recorded.analyze.primary_condition)
    assert got.eval_sets["pool"].n == len(seeds) * recorded.eval.n and got.eval_sets["pool"].models == "base"
    assert got.analyze.ceiling_null == "selection" and got.analyze.calibration.pool_set == "pool"
