"""config.py: numbers as users type them and the checks that need more than one key."""
import pytest

import config


@pytest.mark.parametrize("typed, value", [("1e-4", 1e-4), ("3E-4", 3e-4), (".5", 0.5), ("1_000", 1000.0), ("2.5e+3", 2500.0)])
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
