"""runner/cost_model.py: the sampling tail's bytes enter every decoded token's bound, by
settings (greedy, plain, top-p sorted or cut, keyed or one generator), and the same model gives the
laptop's and an H200's hours."""

from dataclasses import replace
from pathlib import Path

import pytest

from orchestration import config
from runner import cost_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def qwen():
    cfg = config.load(str(ROOT / "configs" / "qwen05b.yaml"))
    return cfg, cost_model.CostModel(cfg, cost_model.REGISTERED_SHAPES[cfg.model.path], "registered")


def test_the_tail_adds_its_bytes_to_every_decoded_token(qwen):
    cfg, cm = qwen
    s = cfg.eval.sampling
    rows, V = 256, cm.vocab
    per_token = cm.decode(rows, 2, s, keyed=True) - cm.decode(rows, 1, s, keyed=True)
    weights = max(cm.weight_bytes / cost_model.LAPTOP.bytes_per_s, 2 * cm.params * rows / cost_model.LAPTOP.flops)
    assert per_token == pytest.approx(
        weights + rows * V * cost_model.tail_bytes(s, True) / cost_model.LAPTOP.bytes_per_s
    )
    assert per_token > 3 * weights  # at 256 rows the sorted top-p tail, not the weights, sets the time


def test_the_tail_bytes_by_settings(qwen):
    cfg, _ = qwen
    e, t = cfg.eval.sampling, cfg.train.sampling
    tb = cost_model.tail_bytes
    assert (
        tb(e, True) == 265 and tb(e, False) == 241
    )  # the registered evaluation: sorted top-p, keyed (eval.draw: sample)
    assert tb(replace(e, tail="cut"), True) == 72 < tb(e, True) / 3
    assert tb(t, False) == cost_model.LSE_BYTES + cost_model.RACE_BYTES  # rollouts: no filter, one generator
    assert tb(replace(e, temperature=0.0), True) == cost_model.LSE_BYTES


def test_an_h200_takes_a_fraction_of_the_laptops_hours(qwen):
    cfg, cm = qwen
    laptop, h200 = cm.both(lambda c: c.single("probe"))
    ratios = (
        cost_model.LAPTOP.bytes_per_s / cost_model.H200.bytes_per_s,
        cost_model.LAPTOP.flops / cost_model.H200.flops,
    )
    assert (
        min(ratios) * laptop < h200 < max(ratios) * laptop
    )  # each part scales by the bandwidths' or the FLOP rates' ratio
    text = cm.describe((laptop, h200))
    assert "on the laptop GPU" in text and "on an H200's class" in text and "(assumed, not measured)" in text
