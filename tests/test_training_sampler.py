"""The answer at the training sampler read from evaluation files (analysis/training_sampler.py, PLAN.md section 7e):
correctness is the reward the condition trained on, files without the records are skipped with the reason, the
config refuses the measure without its records, and the report prints the answer."""

from types import SimpleNamespace

import numpy as np
import pytest

from analysis import report_base_support, training_sampler, verdict
from analysis.run_inputs import EvalSet, RunInputs
from orchestration import config
from orchestration.analysis_settings import WithinCorrectCfg

P, SEEDS = 30, 3


def row(strict: int, strict_out: int, loose: int, loose_out: int, self_shift, seed: int) -> dict:
    """One problem's base_support record: `strict` strictly correct responses (the first strict_out outside the
    evaluation nucleus), then `loose` loosely correct only (the first loose_out outside); log-probabilities
    -1, -2, ...; logp_self = logp_t1 + self_shift(logp_t1, strict)."""
    n = strict + loose
    lp = [-(k + 1.0) - 0.1 * seed for k in range(n)]
    is_strict = [k < strict for k in range(n)]
    out = [k < strict_out if k < strict else k - strict < loose_out for k in range(n)]
    return {
        "base_support": {
            "index": list(range(n)),
            "strict": is_strict,
            "outside": [False] * n,
            "excess": [None] * n,
            "logp_t1": lp,
            "length": [5 + (k * 7) % 11 for k in range(n)],
            "excess_eval": [0.2 if o else -0.2 for o in out],
            "outside_eval": out,
            "logp_self": [x + self_shift(x, s) for x, s in zip(lp, is_strict)],
        }
    }


def docs() -> RunInputs:
    """Strict answers: the trained models reweight them (a constant shift) with the base's outside share (3 of
    10 against 6 of 20); loose-only answers: all outside and favoured where the base finds them unlikely."""
    t1 = {"n": 32, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
    shift = lambda x, strict: 1.0 if strict else 1.0 - 0.5 * x  # noqa: E731
    trained = {
        (c, s, 100): {"sampling": t1, "problems": [row(10, 3, 5, 5, shift, s) for _ in range(P)]}
        for c in ("many", "loosely")
        for s in range(SEEDS)
    }
    pool = {"sampling": {**t1, "n": 192}, "problems": [row(20, 6, 5, 1, lambda x, s: 0.0, 9) for _ in range(P)]}
    test = {
        "sampling": {"n": 32, "temperature": 0.6, "top_p": 0.95, "top_k": 0},
        "problems": [{"correct_strict": 3 * (i > 4), "correct_loose": 4 * (i > 4)} for i in range(P)],
    }
    return RunInputs(design(), EvalSet(test, {}), {"pool-train": EvalSet(pool, {}), "matched": EvalSet(None, trained)})


def design():
    conditions = {"many": config.ConditionCfg(), "loosely": config.ConditionCfg(reward="loose")}
    analyze = SimpleNamespace(
        within_correct=WithinCorrectCfg(permutations=999), base_support=SimpleNamespace(tolerance=1e-4)
    )
    return SimpleNamespace(
        cfg=SimpleNamespace(analyze=analyze, conditions=conditions),
        primary_scoring="strict",
        checkpoints=[100],
        conditions=list(conditions),
        primary_condition="many",
        seeds_of=lambda c: list(range(SEEDS)),
    )


def inference():
    return SimpleNamespace(levels=verdict.Levels(0.95, 0.10, 0.05, 1 / 3), draws=verdict.Draws(P, 1000, 0))


def test_correct_is_the_reward_the_condition_trained_on():
    out = training_sampler.analyze(docs(), inference())
    strict, loose = out["conditions"]["many"], out["conditions"]["loosely"]
    assert strict["scoring"] == "strict" and loose["scoring"] == "loose"
    assert strict["exponent"]["alpha"] == pytest.approx(1.0) and strict["gap"]["gap"] == pytest.approx(0.0)
    assert strict["answer"] == "reweighting" and out["answer"] == "reweighting"
    # the same files read by the loose reward take in answers the strict models were never rewarded for
    assert loose["answer"] == "toward-rare" and loose["gap"]["gap"] > 0.2
    assert loose["exponent"]["alpha"] < 1
    assert strict["n_z"] == 5 and strict["exponent_on_z"]["alpha"] == pytest.approx(1.0)


def test_files_without_the_records_are_skipped_with_the_reason():
    inputs = docs()
    for p in inputs.sets["pool-train"].base["problems"]:
        del p["base_support"]["logp_self"]
    out = training_sampler.analyze(inputs, inference())
    assert out["skipped"] and "pool-train" in out["skipped"]
    inputs = docs()
    for d in inputs.sets["matched"].trained.values():
        del d["problems"][0]["base_support"]["excess_eval"]
    out = training_sampler.analyze(inputs, inference())
    assert "records" in out["conditions"]["many"]["skipped"]


def test_the_config_refuses_the_measure_without_its_records():
    with pytest.raises(config.ConfigError, match=r"analyze\.within_correct: needs eval\.within_correct"):
        config.load(None, ["analyze.within_correct={}"])
    with pytest.raises(config.ConfigError, match=r"eval\.within_correct: needs eval\.base_support"):
        config.load(None, ["eval.within_correct=true"])


def test_the_report_prints_the_answer_with_its_deciding_numbers():
    wc = training_sampler.analyze(docs(), inference())
    doc = {"within_correct": wc, "primary": {"condition": "many"}}
    text = "\n".join(report_base_support.within_correct_section(doc))
    assert "**reweighting**" in text and "1.000" in text and "| loosely | loose | 3 | toward-rare |" in text
    assert np.isfinite(wc["conditions"]["many"]["exponent"]["interval"][0])
