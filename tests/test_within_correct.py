"""The within-correct measures at the training sampler (analysis/within_correct.py) on bases whose every
response's probability is exact (analysis/token_tree.py): an exact outcome reweighting gives alpha = 1 and an
outside gap of 0 to rounding, a power sharpening gives its exponent, the base against itself reads 0, the
permutation null holds its size on placebos, a length preference is not read as sharpening, and the three-way
answer follows its rule."""

import numpy as np
import pytest
from scipy import stats as st

from analysis import token_tree, verdict, within_correct
from analysis.within_correct import Responses

N, V, L = 24, 5, 4
EVAL = (0.6, 0.95)


@pytest.fixture(scope="module")
def world():
    rates = np.linspace(0.05, 0.5, N)
    return token_tree.make_world(N, V, L, scale=2.0, rates=rates, seed=3)


def responses(world, policy_logp, seeds: int, n: int, rng_seed: int) -> Responses:
    """The correct responses of `seeds` independent draws of n per problem from policy_logp (N, V^L) at T 1."""
    base = token_tree.base_log_probs(world)
    out = token_tree.outside(world, *EVAL)
    rng = np.random.default_rng(rng_seed)
    rows = []
    for s in range(seeds):
        idx = token_tree.draw(policy_logp, n, rng)  # (N, n)
        for i in range(N):
            rows += [(s, i, y) for y in idx[i] if world.correct[i, y]]
    s, i, y = (np.array(c) for c in zip(*rows))
    return Responses(s, i, base[i, y], policy_logp[i, y], np.full(len(y), L), out[i, y])


def population_gap(world, policy_logp) -> float:
    """D with every response weighted by its exact probability (no sampling)."""
    base = token_tree.base_log_probs(world)
    out, corr = token_tree.outside(world, *EVAL), world.correct

    def sides(logp):
        p = np.exp(logp)
        return (p * corr * out).sum(-1) * 1e6, (p * corr).sum(-1) * 1e6

    return float(within_correct.weighted_gap(*sides(policy_logp), *sides(base)))


def test_the_world_truncates_some_correct_answers(world):
    p = np.exp(token_tree.base_log_probs(world)) * world.correct  # the base's correct mass at T 1
    share = (p * token_tree.outside(world, *EVAL)).sum() / p.sum()
    assert 0.1 < share < 0.9  # the eval nucleus leaves some of the base's correct answers out, not all


def test_a_sampler_filter_matches_the_projects_own():
    """token_tree's top-p equals method/decoding.filter_logits on the same logits."""
    import torch

    from method.decoding import filter_logits

    rng = np.random.default_rng(0)
    z = rng.normal(0, 2, size=(50, 7))
    ours = np.isfinite(token_tree.node_log_probs(z, 0.6, 0.95))
    theirs = torch.isfinite(filter_logits(torch.tensor(z / 0.6), 0, 0.95)).numpy()
    assert (ours == theirs).all()


def test_node_logits_of_a_policy_give_back_its_response_probabilities(world):
    base = token_tree.base_log_probs(world)
    q = token_tree.reweighting(base, world.correct, 7.0)
    assert np.allclose(token_tree.sampler_log_probs(world, q, 1.0, 1.0), q, atol=1e-10)
    assert np.allclose(np.exp(token_tree.sampler_log_probs(world, q, 0.6, 0.95)).sum(-1), 1.0)


@pytest.mark.parametrize("w", [1.0, 3.0, 30.0])
def test_an_exact_reweighting_reads_alpha_one_and_no_gap(world, w):
    base = token_tree.base_log_probs(world)
    q = token_tree.reweighting(base, world.correct, w)
    r = responses(world, q, seeds=3, n=64, rng_seed=1)
    mom = within_correct.cell_moments(r, 3, N)
    alpha = within_correct.exponent_from(mom.sum(axis=(0, 1)), with_length=False)
    assert alpha == pytest.approx(1.0, abs=1e-9)
    assert population_gap(world, q) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("a", [0.5, 2.0])
def test_a_power_sharpening_reads_its_exponent(world, a):
    base = token_tree.base_log_probs(world)
    q = token_tree.power(base, a)
    r = responses(world, q, seeds=2, n=64, rng_seed=2)
    alpha = within_correct.exponent_from(within_correct.cell_moments(r, 2, N).sum(axis=(0, 1)), False)
    assert alpha == pytest.approx(a, abs=1e-9)
    # sharpening puts fewer correct answers outside than the base's own; flattening more
    assert (population_gap(world, q) < 0) == (a > 1)


def test_the_base_against_itself_reads_alpha_one_and_no_gap(world):
    base = token_tree.base_log_probs(world)
    r = responses(world, base, seeds=2, n=64, rng_seed=3)
    alpha = within_correct.exponent_from(within_correct.cell_moments(r, 2, N).sum(axis=(0, 1)), False)
    assert alpha == pytest.approx(1.0, abs=1e-12)
    assert population_gap(world, base) == 0.0


def test_policy_gradient_flow_sharpens_within_the_correct_answers(world):
    """dz/dt = pi (r - J) moves likely correct answers more: alpha > 1, and it reaches its target."""
    base = token_tree.base_log_probs(world)
    q = token_tree.policy_gradient_flow(base, world.correct, target=0.7)
    assert (np.exp(q) * world.correct).sum(-1).min() >= 0.7 - 1e-6
    r = responses(world, q, seeds=2, n=64, rng_seed=4)
    alpha = within_correct.exponent_from(within_correct.cell_moments(r, 2, N).sum(axis=(0, 1)), False)
    assert alpha > 1.05


def test_a_length_preference_is_not_read_as_sharpening():
    """d = 0.3 L + a cell constant, with x correlated with L: alpha 1 with the covariate, not without."""
    rng = np.random.default_rng(5)
    seed, problem = rng.integers(0, 2, 400), rng.integers(0, 10, 400)
    length = rng.integers(5, 30, 400)
    x = -0.8 * length + rng.normal(0, 1, 400)
    d = 0.3 * length + (seed * 10 + problem) * 0.1
    r = Responses(seed, problem, x, x + d, length, np.zeros(400, bool))
    mom = within_correct.cell_moments(r, 2, 10)
    assert within_correct.uses_length(mom)
    assert within_correct.exponent_from(mom.sum(axis=(0, 1)), True) == pytest.approx(1.0, abs=1e-9)
    assert abs(within_correct.exponent_from(mom.sum(axis=(0, 1)), False) - 1.0) > 0.1


def test_the_exponents_interval_covers_and_decides(world):
    base = token_tree.base_log_probs(world)
    draws = verdict.Draws(N, 500, 0)
    sharp = within_correct.exponent(responses(world, token_tree.power(base, 2.0), 3, 32, 6), 3, N, draws, 0.1, 0.95)
    assert sharp.alpha == pytest.approx(2.0) and sharp.interval[0] == pytest.approx(2.0)
    assert sharp.p_above < 0.025 and sharp.p_below > 0.5
    q = token_tree.reweighting(base, world.correct, 10.0)
    flat = within_correct.exponent(responses(world, q, 3, 32, 7), 3, N, draws, 0.1, 0.95)
    assert flat.p_within < 0.025 and flat.p_above > 0.5


def test_the_permutation_null_holds_its_size_on_placebos(world):
    """Base against base, 200 placebo studies: the one-sided permutation test (more outside) rejects at
    0.025 no more often than 0.025 plus its Clopper-Pearson margin; the gap has no sign on average."""
    base = token_tree.base_log_probs(world)
    draws = verdict.Draws(N, 50, 0)
    rejections, gaps, sims = 0, [], 200
    for k in range(sims):
        trained = responses(world, base, seeds=2, n=16, rng_seed=1000 + k)
        pool = responses(world, base, seeds=1, n=32, rng_seed=5000 + k)
        g = within_correct.outside_gap(trained, pool, 2, N, draws, 0.02, 0.95, permutations=499)
        rejections += g.p_more < 0.025
        gaps.append(g.gap)
    upper = st.beta.ppf(0.975, rejections + 1, sims - rejections)  # Clopper-Pearson upper bound
    assert rejections / sims <= 0.025 + (upper - rejections / sims)
    assert rejections / sims <= 0.06
    assert abs(np.mean(gaps)) < 3 * np.std(gaps) / np.sqrt(sims)


def test_seeds_drawn_with_common_uniforms_keep_the_size_only_with_the_seeds_combined(world):
    """The matched set's keyed draws: every seed of a placebo (the base itself) drawn with the same uniforms gives
    each of its 6 seeds the same responses. Over 200 placebo studies the permutation null alone (which counts them as
    independent) rejects 'more outside' too often; each seed's own exact test, combined as twice the mean p,
    holds 0.025 within its Clopper-Pearson margin (PLAN_CHANGES.md change 68)."""
    base = token_tree.base_log_probs(world)
    out = token_tree.outside(world, *EVAL)
    draws = verdict.Draws(N, 400, 0)
    perm_only, larger, sims = 0, 0, 200
    for k in range(sims):
        rng = np.random.default_rng([7, k])
        u = rng.random((N, 16, L))  # shared by the 6 seeds
        drawn = token_tree.draw_keyed(world, base, u)  # (N, 16): every seed's, the same
        rows = [(s, i, y) for s in range(6) for i in range(N) for y in drawn[i]]
        s, i, y = (np.array(c) for c in zip(*[r for r in rows if world.correct[r[1], r[2]]]))
        trained = Responses(s, i, base[i, y], base[i, y], np.full(len(y), L), out[i, y])
        pool = responses(world, base, seeds=1, n=128, rng_seed=9000 + k)  # tiny_v7's sizes: 6 x 16 against 128
        g = within_correct.outside_gap(trained, pool, 6, N, draws, 0.02, 0.95, permutations=499)
        perm_only += g.p_more_permutation < 0.025
        larger += g.p_more < 0.025
        assert g.p_more == min(1.0, 2 * np.mean(g.p_more_seeds))
    upper = st.beta.ppf(0.975, larger + 1, sims - larger)
    assert larger / sims <= 0.025 + (upper - larger / sims)
    assert perm_only / sims > 0.06  # why the permutation p alone does not decide


def test_a_cell_of_one_repeated_response_carries_no_slope():
    """Duplicates (a sharpened model at T 1 repeats itself) leave the moments 0 exactly, not rounding: the
    exponent is undefined rather than noise; a cell with two distinct answers still reads exactly."""
    x = np.array([-7.3, -7.3, -7.3])
    r = Responses(
        np.zeros(3, int), np.zeros(3, int), x, x + 0.1 * np.array([1, -1, 1]), np.full(3, 5), np.zeros(3, bool)
    )
    mom = within_correct.cell_moments(r, 1, 1)
    assert (mom == 0).all()
    e = within_correct.exponent(r, 1, 1, verdict.Draws(1, 50, 0), 0.1, 0.95)
    assert e.alpha is None and e.cells == 0 and e.p_above is None
    x2 = np.array([-7.3, -7.3, -2.0, -7.3])
    r2 = Responses(np.zeros(4, int), np.zeros(4, int), x2, 2 * x2 + 1.0, np.full(4, 5), np.zeros(4, bool))
    assert within_correct.exponent_from(within_correct.cell_moments(r2, 1, 1).sum(axis=(0, 1)), False) == pytest.approx(
        2.0, abs=1e-12
    )


def test_a_taught_rare_subset_reads_more_outside(world):
    base = token_tree.base_log_probs(world)
    out = token_tree.outside(world, *EVAL)
    q = token_tree.reweighting(base, world.correct, 5.0)
    q = token_tree.normalised(q + np.log(30.0) * (world.correct & out))  # rare correct answers taught
    draws = verdict.Draws(N, 500, 0)
    g = within_correct.outside_gap(
        responses(world, q, 3, 32, 8), responses(world, base, 1, 96, 9), 3, N, draws, 0.02, 0.95, 999
    )
    assert g.gap > 0.2 and g.p_more < 0.01 and g.interval[0] > 0


def exponent(p_above=0.5, p_below=0.5, p_within=0.5):
    return within_correct.Exponent(1.0, [0.9, 1.1], p_above, p_below, p_within, 0.1, False, 10, 100)


def gap(p_more=0.5, p_within=0.5):
    return within_correct.OutsideGap(
        0.0, [-0.01, 0.01], p_more, [p_more], p_more, p_more, 0.5, p_within, 0.02, 0.1, 0.1, 10, 50, 50
    )


@pytest.mark.parametrize(
    "e, g, expected",
    [
        (exponent(p_below=0.01), gap(), "toward-rare"),
        (exponent(p_above=0.01), gap(p_more=0.01), "toward-rare"),  # more outside wins over the exponent
        (exponent(p_above=0.01), gap(), "sharpening"),
        (exponent(p_within=0.01), gap(p_within=0.01), "reweighting"),
        (exponent(p_within=0.01), gap(), "not shown"),  # the gap not shown equivalent
        (exponent(p_within=0.01), gap(p_more=None, p_within=None), "not shown"),  # no problem to compare on
    ],
)
def test_the_three_way_rule(e, g, expected):
    assert within_correct.answer(e, g, 0.025).answer == expected


def test_the_exponents_reading_takes_the_first_test_that_passes():
    """Change 77's reading: below, above, within margin in that order, at the one-sided level; else not shown."""
    r = within_correct.exponent_reading
    assert r(0.001, 0.9, 0.9, 0.025) == "toward-rare by the exponent"
    assert r(0.9, 0.001, 0.9, 0.025) == "sharpening by the exponent"
    assert r(0.9, 0.9, 0.001, 0.025) == "within margin"
    assert r(0.9, 0.9, 0.03, 0.025) == "not shown"
    assert r(None, None, None, 0.025) == "not shown"
    assert r(0.025, 0.9, 0.9, 0.025) == "not shown"  # strictly below the level
