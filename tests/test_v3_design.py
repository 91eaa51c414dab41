"""bench/smollm2_v3_design.py (PLAN_CHANGES.md change 75): the linearised exponent against the crossed bootstrap,
the planned truth's rule, the powers, and the pool's beta-binomial extrapolation against the closed form."""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import smollm2_v3_design as design  # noqa: E402

from analysis import verdict, within_correct  # noqa: E402


def fake_docs(S=3, N=40, n=16, alpha=1.2, seed=0):
    """Evaluation files under eval.within_correct whose correct responses follow d = (alpha - 1) x + noise."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(S):
        problems = []
        for _ in range(N):
            idx = sorted(rng.choice(n, size=rng.integers(0, 6), replace=False).tolist())
            x = rng.normal(-30, 10, len(idx))
            b = {
                "index": idx,
                "strict": [False] * len(idx),
                "logp_t1": x.tolist(),
                "logp_self": (x + (alpha - 1) * x + 1 + rng.normal(0, 0.5, len(idx))).tolist(),
                "length": rng.integers(10, 40, len(idx)).tolist(),
                "excess_eval": rng.choice([-0.1, 0.3], len(idx)).tolist(),
            }
            problems.append({"n": n, "correct_loose": len(idx), "base_support": b})
        docs.append({"problems": problems})
    return docs


def test_the_linearised_exponent_matches_the_crossed_bootstrap():
    docs = fake_docs()
    parts = design.exponent_parts(docs)
    assert parts["alpha"] == pytest.approx(1.2, abs=0.05)
    assert abs(parts["z"].sum()) < 1e-6 * np.abs(parts["z"]).sum()  # alpha is homogeneous of degree 0
    check = design.check_linearisation(docs)
    assert check["linearised_se"] == pytest.approx(check["bootstrap_se"], rel=0.25)


def test_first_n_keeps_only_the_first_samples():
    docs = fake_docs(S=1, N=5, n=16)
    cut = design.first(docs[0], 8)
    for p, q in zip(docs[0]["problems"], cut["problems"]):
        keep = [i for i in p["base_support"]["index"] if i < 8]
        assert q["base_support"]["index"] == keep
        assert len(q["base_support"]["logp_self"]) == len(keep)


def test_the_planned_truth_is_the_smaller_deviation_less_30_percent_with_a_common_sign():
    assert design.planned_delta([0.6, 0.8]) == pytest.approx(-0.7 * 0.2)
    assert design.planned_delta([1.5, 1.3]) == pytest.approx(0.7 * 0.3)
    assert design.planned_delta([0.9, 1.1]) == 0.0


def test_powers_directional_and_reweighting():
    # directional: P(estimate below 0.9 by the one-sided test) at alpha 0.7, SE 0.05
    assert design.power_of(-0.3, 0.05, 1.0) == pytest.approx(st.norm.cdf(0.2 / 0.05 - design.Z))
    # reweighting: the TOST powers multiply; D's SE 0.0062 gives about 0.8 at D = 0
    assert design.tost(0.0, 0.0062, 0.02) == pytest.approx(0.8, abs=0.01)
    assert design.power_of(0.0, 1e-3, 0.0062) == pytest.approx(design.tost(0.0, 0.0062, 0.02), abs=1e-6)
    assert design.power_of(0.0, 1e-3, 0.05) == 0.0


def test_the_pool_share_follows_the_fitted_beta_binomial():
    rng = np.random.default_rng(1)
    a, b, n = 0.7, 40.0, 128
    counts = rng.binomial(n, rng.beta(a, b, 4000))
    fa, fb, share = design.pool_share(counts, n)
    truth = lambda m: 1 - np.mean([st.betabinom.pmf(0, m, a, b)])  # noqa: E731
    for m in (64, 512, 2048):
        assert share(m) == pytest.approx(truth(m), abs=0.03)


def test_exponent_parts_agree_with_the_registered_exponent():
    docs = fake_docs(alpha=0.8, seed=3)
    r = design.training_sampler.responses(docs, "loose", design.TOLERANCE)
    exp = within_correct.exponent(r, 3, 40, verdict.Draws(40, 200, 0), 0.1, 0.95)
    assert design.exponent_parts(docs)["alpha"] == pytest.approx(exp.alpha, rel=1e-12)
