"""bench/smollm2_v2_pilot.py: change 61's rule for the rate and the per-run reading, on hand-made logs."""

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import smollm2_v2_pilot as pilot  # noqa: E402

from method import checkpoint  # noqa: E402
from orchestration import config  # noqa: E402

LOG = checkpoint.LOG_FIELDS  # the columns the trainer writes


@pytest.fixture(scope="module")
def cfg():
    return config.load(ROOT / "configs/smollm2_v2_pilot.yaml")


def run(dev: dict, collapsed: bool = False) -> dict:
    return {
        "dev": {s: {"loose_pass1": v, "loose_passn": v} for s, v in dev.items()},
        "collapse": {"collapsed": collapsed},
    }


def runs(a: tuple, b: tuple, ca=(False, False), cb=(False, False)) -> dict:
    """Two seeds per rate: a, b are ((step0, step30) of seed 100, (step0, step30) of seed 101)."""
    return {
        ("lr1e-4", 100): run({0: a[0][0], 30: a[0][1]}, ca[0]),
        ("lr1e-4", 101): run({0: a[1][0], 30: a[1][1]}, ca[1]),
        ("lr3e-4", 100): run({0: b[0][0], 30: b[0][1]}, cb[0]),
        ("lr3e-4", 101): run({0: b[1][0], 30: b[1][1]}, cb[1]),
    }


def test_the_higher_two_seed_mean_wins(cfg):
    r = pilot.choose(runs(((0.2, 0.25), (0.2, 0.25)), ((0.2, 0.30), (0.2, 0.26))), cfg)
    assert r["chosen"] == "lr3e-4" and r["lr"] == 3e-4
    r = pilot.choose(runs(((0.2, 0.30), (0.2, 0.30)), ((0.2, 0.40), (0.2, 0.10))), cfg)  # mean 0.30 vs 0.25
    assert r["chosen"] == "lr1e-4"


def test_a_tie_within_one_sample_goes_to_the_smaller_rate(cfg):
    r = pilot.choose(runs(((0.2, 0.25), (0.2, 0.25)), ((0.2, 0.25 + 1 / 512), (0.2, 0.25 + 1 / 512))), cfg)
    assert r["chosen"] == "lr1e-4" and r["tied"] == ["lr1e-4", "lr3e-4"]
    r = pilot.choose(runs(((0.2, 0.25), (0.2, 0.25)), ((0.2, 0.25 + 1 / 64), (0.2, 0.25 + 1 / 64))), cfg)
    assert r["chosen"] == "lr3e-4"


def test_a_rate_with_a_collapsed_seed_loses_to_one_without(cfg):
    r = pilot.choose(runs(((0.2, 0.22), (0.2, 0.22)), ((0.2, 0.5), (0.2, 0.5)), cb=(True, False)), cfg)
    assert r["chosen"] == "lr1e-4"
    r = pilot.choose(
        runs(((0.2, 0.22), (0.2, 0.22)), ((0.2, 0.5), (0.2, 0.5)), ca=(True, False), cb=(True, False)), cfg
    )
    assert r["chosen"] == "lr3e-4"  # both have one: the rule is the dev mean again


def test_no_choice_when_no_rate_rises(cfg):
    r = pilot.choose(runs(((0.2, 0.2), (0.2, 0.1)), ((0.2, 0.15), (0.2, 0.2))), cfg)
    assert r["chosen"] is None and "above" in r["why"]


def test_read_run_counts_skipped_steps_and_reads_collapse(cfg, tmp_path):
    folder = tmp_path / "train_lr1e-4_s100"
    folder.mkdir()
    with open(folder / "train_log.csv", "w", newline="") as f:
        w = csv.DictWriter(f, LOG)
        w.writeheader()
        for step in range(1, 31):
            quiet = step > 3  # a signal on steps 1-3 only: collapsed by change 59's rule
            w.writerow(
                {k: 0.0 for k in LOG}
                | {
                    "step": step,
                    "reward_mean": 0.0 if quiet else 0.1,
                    "no_signal": int(quiet),
                    "updated": int(not quiet),
                    "sec_sampling": 2.0,
                    "sec_fwd_bwd": 1.0,
                    "kl_mean": 0.01 if step % 10 == 0 else "nan",
                }
            )
    (folder / "train_eval.csv").write_text(
        "step,n_problems,n,strict_pass1,loose_pass1,strict_passn,loose_passn,format_rate\n"
        "0,32,8,0,0.2,0,0.5,0\n30,32,8,0,0.1,0,0.3,0\n"
    )
    r = pilot.read_run(folder, cfg, wall=130.0)
    assert r["skipped_steps"] == 27 and r["no_signal_steps"] == 27 and r["collapse"]["collapsed"] is True
    assert r["dev"][30]["loose_pass1"] == 0.1 and sorted(r["kl"]) == [10, 20, 30]
    assert r["sec_per_dev_check"] == pytest.approx((130.0 - 90.0) / 2)


def test_job_walls_reads_the_pipelines_done_lines():
    log = (
        "[pipeline 18:09:24] jobs: running train lr1e-4 s100; done 0/4\n"
        "[pipeline 18:10:41] done  train lr1e-4 s100 (3258 s)\n[pipeline 19:01:02] done  train lr3e-4 s101 (1,204.5 s)\n"
    )
    assert pilot.job_walls(log) == {("lr1e-4", 100): 3258.0, ("lr3e-4", 101): 1204.5}
