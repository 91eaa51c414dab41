"""orchestration/config.py: numbers as users type them and the checks that need more than one key."""

from pathlib import Path

import pytest

from orchestration import config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
REPORT = CONFIGS / "report.yaml"


@pytest.mark.parametrize(
    "typed, value", [("1e-4", 1e-4), ("3E-4", 3e-4), (".5", 0.5), ("1_000", 1000.0), ("2.5e+3", 2500.0)]
)
def test_numbers_as_users_type_them(typed, value):
    assert config.load(None, [f"train.lr={typed}"]).train.lr == value
    assert config.load(None, [f"lr_sweep.candidates=[{typed}, 2e-4]"]).lr_sweep.candidates == [value, 2e-4]


def test_numbers_in_a_yaml_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  lr: 1e-4\nlr_sweep:\n  candidates: [1e-5, 3E-4, .5]\n")
    cfg = config.load(str(f))
    assert cfg.train.lr == 1e-4 and cfg.lr_sweep.candidates == [1e-5, 3e-4, 0.5]


@pytest.mark.parametrize("typed", ["hot", "1e-4x", ".nan", "nan", "inf", "_1"])
def test_numbers_that_are_not_numbers_are_still_one_line_errors(typed):
    with pytest.raises(config.ConfigError, match=r"train\.lr: expected a number"):
        config.load(None, [f"train.lr={typed}"])


def test_per_condition_sweep_needs_an_lr_for_sft():
    with pytest.raises(config.ConfigError, match=r"conditions\.sft\.lr"):
        config.load(None, ["lr_sweep.per_condition=true", "conditions.sft.method=sft"])


def test_seeds_by_condition_gives_one_condition_its_own_seeds():
    """Seeds by condition gives one condition its own seeds and no other hash moves."""
    from orchestration import provenance

    cfg = config.load(None, ["train.seeds_by_condition={many: [0, 1, 2, 3]}"])
    assert config.seeds_of(cfg, "many") == list(range(4)) and config.seeds_of(cfg, "16") == [0, 1, 2]
    plain = config.load(None)
    for stage in ("train", "lr-sweep"):  # the per-condition seeds enter no stage's shared hash
        assert provenance.hashed_settings(config.to_dict(cfg), stage) == provenance.hashed_settings(
            config.to_dict(plain), stage
        )
    with pytest.raises(config.ConfigError, match=r"train\.seeds_by_condition\.nope: is not a condition"):
        config.load(None, ["train.seeds_by_condition={nope: [0]}"])
    with pytest.raises(
        config.ConfigError, match=r"train\.seeds_by_condition\.many: must be a non-empty list of distinct"
    ):
        config.load(None, ["train.seeds_by_condition={many: [1, 1]}"])
    with pytest.raises(config.ConfigError, match=r"eval_sets\.pool\.n: .* needs >= 8 primary seeds x eval\.n \(32\)"):
        config.load(
            None, ["train.seeds_by_condition={many: [0, 1, 2, 3, 4, 5, 6, 7]}"]
        )  # the registered pool holds 6 x 32


def test_lr_sweep_rule_is_dev_or_reward_and_the_default():
    """Lr sweep rule is dev, dev-guarded or reward: the default the registered study's (dev-guarded, change 72), the
    report's in report.yaml; and the study skips a step without signal while the CPU worlds keep stepping."""
    assert config.load(None).lr_sweep.rule == "dev-guarded" and config.load(str(REPORT)).lr_sweep.rule == "reward"
    with pytest.raises(config.ConfigError, match=r"lr_sweep\.rule"):
        config.load(None, ["lr_sweep.rule=best"])
    with pytest.raises(config.ConfigError, match=r"lr_sweep\.max_lock_in: must be a share"):
        config.load(None, ["lr_sweep.max_lock_in=2"])
    assert config.load(None).train.no_signal_update == "skip"
    assert config.load(str(REPORT)).train.no_signal_update == "step"


def test_tf32_only_in_a_bf16_model_and_determinism_by_name():
    assert config.load(None).lora.tf32  # the registered study's, in a bf16 model
    with pytest.raises(config.ConfigError, match="lora.tf32: only with model.dtype bfloat16.*set lora.tf32: false"):
        config.load(None, ["model.dtype=float32"])
    assert not config.load(None, ["model.dtype=float32", "lora.tf32=false"]).lora.tf32
    with pytest.raises(config.ConfigError, match="determinism: must be full, kernels or off"):
        config.load(None, ["determinism=fast"])
    for key in ("train.importance_cap", "train.logp_gap_limit"):
        with pytest.raises(config.ConfigError, match=key):
            config.load(None, [f"{key}=0"])


def test_the_settings_added_for_the_gpu_path_leave_every_hash():
    """The settings added for the gpu path leave every hash alone at their defaults.

    determinism full, importance_cap and logp_gap_limit null: out of every stage hash, so runs made
    before they existed keep theirs; another value is in the hashes it governs (the gap limit in none)."""
    from orchestration import provenance

    base = config.load(None)
    made = config.to_dict(base)
    del made["determinism"], made["train"]["importance_cap"], made["train"]["logp_gap_limit"]
    for stage in provenance.STAGE_KEYS:
        assert provenance.hashed_settings(made, stage) == provenance.hashed_settings(config.to_dict(base), stage)
    assert provenance.config_identity(made) == provenance.config_identity(config.to_dict(base))
    for sets, stages in (
        (["determinism=kernels"], {"probe", "select", "lr-sweep", "train", "eval", "tokens"}),
        (["train.importance_cap=2.0"], {"lr-sweep", "train"}),
        (["train.logp_gap_limit=0.1"], set()),
    ):
        other = config.load(None, sets)
        assert {
            s for s in provenance.STAGE_KEYS if provenance.stage_hash(other, s) != provenance.stage_hash(base, s)
        } == stages, sets


def test_a_mistyped_key_gets_a_did_you_mean():
    with pytest.raises(
        config.ConfigError, match=r"unknown key 'train\.setps' \(did you mean 'train\.steps'\? known here"
    ):
        config.load(None, ["train.setps=3"])
    with pytest.raises(config.ConfigError, match=r"unknown key 'zzz' \(known here"):  # nothing near: no guess
        config.load(None, ["zzz=3"])


def test_train_draw_is_batch_or_sample_and_hashed_only_where_it_draws():
    """train.draw: batch (every run so far) is out of every hash, so no run made before the key changes; sample is
    in the hashes of the stages that draw rollouts (the sweep and training), and anything else is one line."""
    from orchestration import provenance

    base = config.load(None)
    made = config.to_dict(base)
    del made["train"]["draw"]
    for stage in provenance.STAGE_KEYS:
        assert provenance.hashed_settings(made, stage) == provenance.hashed_settings(config.to_dict(base), stage)
    other = config.load(None, ["train.draw=sample"])
    changed = {s for s in provenance.STAGE_KEYS if provenance.stage_hash(other, s) != provenance.stage_hash(base, s)}
    assert changed == {"lr-sweep", "train"}
    with pytest.raises(config.ConfigError, match=r"train\.draw: must be batch .* or sample"):
        config.load(None, ["train.draw=keyed"])
