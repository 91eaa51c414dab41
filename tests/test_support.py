"""The support test and the two-axis answer (analysis/support.py, PLAN_CHANGES.md change 42), on synthetic
worlds whose truth is built in (analysis/synthetic.py) at the CPU world's design and Qwen's."""

from collections import Counter

import numpy as np
import pytest
from scipy import stats as st

from analysis import reweight, support, synthetic as sy, verdict

W_STAR = 94.0  # PLAN_CHANGES.md change 42: tilt_quantile on results/tiny_v4's many, step 100, loose
LEVELS = verdict.Levels()
CPU = {"N": 384, "S": 6, "n_base": 256, "n_pool": 192, "world": (0.27, 0.874), "target": (0.657, 0.863)}


# The calibration arms of the support answer (PLAN_CHANGES.md change 46): truths that select (no rate on Z can pass what a
# tilt of at most w* gives, so *expanded* is forbidden) and truths that teach (*kept* is forbidden).
SELECTING = ("sharpened", "tilt-at-w*", "stratum-tilts", "hard-tilt", "gamma-2", "uniform-to-target", "pool-support")
TEACHING = ("sharpen+teach-hard", "gold")
STRATUM_W = (6.05, 7.52, 42.4)  # tiny_v4's per-stratum tilts, borrows-0/1/2, given here to the rate tertiles


def _rates(kind: str, p: np.ndarray, S: int, target: tuple, rng, w_star: float, k: int = 32) -> np.ndarray:
    """The trained rates (S, N) of a truth; target: its (pass@1, pass@k) where a truth needs one."""
    if kind == "stratum-tilts":  # one tilt per stratum, the hardest third tilted most (all below w*)
        w = np.select(
            [p <= np.quantile(p, 1 / 3), p <= np.quantile(p, 2 / 3)], [STRATUM_W[2], STRATUM_W[1]], STRATUM_W[0]
        )
        return np.tile(p * w / (p * w + 1 - p), (S, 1))
    if kind == "hard-tilt":  # the whole bounded tilt spent on the hard problems (rate < 0.05), none elsewhere
        return np.tile(np.where(p < 0.05, reweight.reweighted(p, w_star), p), (S, 1))
    if kind == "gamma-2":  # sharpening p -> p^2 normalised over right and wrong: the hard problems fall
        return np.tile(p**2 / (p**2 + (1 - p) ** 2), (S, 1))
    if kind == "uniform-to-target":  # one uniform tilt to the trained pass@1, on the true (not plug-in) rates
        return np.tile(reweight.reweighted(p, min(sy.w_for(p, target[0]), w_star)), (S, 1))
    if kind == "sharpened":
        return np.tile(sy.sharpened(p, *sy.sharpening_for(p, target[0], target[1], k)), (S, 1))
    if kind == "sharpen+teach-hard":  # every problem sharpened, those the base almost never solves taught to 0.45
        q = sy.sharpened(p, *sy.sharpening_for(p, target[0], target[1], k))
        return np.tile(np.where(p < 0.005, 0.45, q), (S, 1))
    if kind == "tilt-at-w*":  # a selection exactly at the bound's tilt on every problem: the test's size
        return np.tile(reweight.reweighted(p, w_star), (S, 1))
    if kind == "gold":
        return sy.teaching(p, sy.eps_for(p, target[0]), S, 0.1, rng)
    return np.tile(p, (S, 1))  # the base against itself


def _answers(
    kind: str, sims: int, design: dict, seed: int, axes: bool = False, w_star: float = W_STAR, old_rule: bool = False
) -> Counter:
    """How often each support answer (with axes: sharpening / support) is given over `sims` data sets;
    old_rule: also the old one-label rule's labels (verdict.compare's), keyed "old rule: <label>".
    design: N problems, S seeds, n_base, n_pool, the base's world (pass@1, pass@32) and the trained
    target (pass@1, pass@k_target); n samples per seed (32 unless given), pass@k read at k = n."""
    a, b = sy.beta_for(*design["world"], 32)
    n = design.get("n", 32)
    out = Counter()
    for i in range(sims):
        rng = np.random.default_rng([seed, i])
        p = sy.rates(rng, design["N"], a, b)
        rates = _rates(kind, p, design["S"], design["target"], rng, w_star, design.get("k_target", 32))
        base, pool = sy.counts(rng, p, design["n_base"]), sy.counts(rng, p, design["n_pool"])
        if kind == "pool-support":  # the support arm: never leaves the pool's support (0 where the pool never succeeds)
            rates = np.tile(np.where(pool > 0, reweight.reweighted(p, w_star), 0.0), (design["S"], 1))
        rl = sy.counts(rng, rates, n)
        s = support.support_test(base, pool, design["n_pool"], rl, n, w_star, LEVELS.one_sided, 1000, i, "test", "pool")
        if axes or old_rule:
            e = verdict.compare(
                base,
                design["n_base"],
                rl,
                n,
                n,
                reweight.selection_null(base, design["n_base"], n),
                verdict.Draws(design["N"], 1000, i),
                LEVELS,
            )
            if old_rule:
                out[f"old rule: {e['label']}"] += 1
        if axes:
            out[support.two_axes(e, {"eval": s}, LEVELS.one_sided)["sharpening"] + " / " + s["answer"]] += 1
        else:
            out[s["answer"]] += 1
    return out


def test_the_upper_bound_is_the_exact_binomial_one():
    for x, m in [(0, 4608), (1, 4608), (7, 300), (30, 30)]:
        want = st.binomtest(x, m).proportion_ci(confidence_level=0.95, method="exact").high
        assert support.upper_bound(x, m, 0.025) == pytest.approx(want, rel=1e-9)


def test_z_chosen_and_measured_on_the_same_draws_is_refused():
    base = np.array([0, 3, 0, 5])
    with pytest.raises(ValueError, match="chosen on"):
        support.support_test(base, base, 256, np.ones((2, 4), int), 32, W_STAR, 0.05, 100, 0, "test", "test")


@pytest.mark.parametrize("w_star", [14.0, W_STAR])
def test_a_selection_at_the_bounds_tilt_is_never_read(w_star):
    """A selection at the bounds tilt is never read as expanded.

    The size at w*: every problem's rate tilted by exactly w* reaches f_w*(p) on Z, at most the
    bound; 'expanded' must stay at or below the test's level (0.05: at most 4 of 40)."""
    got = _answers("tilt-at-w*", 40, CPU, seed=1, w_star=w_star)
    assert got["expanded"] <= 4, got


def test_sharpening_alone_never_reads_support_expanded():
    """Sharpening alone never reads support expanded and teaching the hard problems does.

    The two cases that broke the old rule, at the CPU world's design: sharpening every problem (no
    new support) is never 'expanded' and nearly always 'kept'; sharpening everything and teaching the
    base's near-never problems (rate < 0.005 raised to 0.45; the old rule called it selection 71%) is
    'expanded' with power 0.90 at w* = 14 and only 0.28 at the registered w* = 94 (40 data sets; a gold mixture 0.78)
    (PLAN_CHANGES.md change 42's power table: Z holds problems whose rates the pool cannot tell from 0.01, and f_94(0.005) = 0.32)."""
    sharp = _answers("sharpened", 40, CPU, seed=2)
    assert sharp["expanded"] == 0 and sharp["kept"] >= 38, sharp
    low = _answers("sharpen+teach-hard", 40, CPU, seed=3, w_star=14.0)
    high = _answers("sharpen+teach-hard", 40, CPU, seed=3)
    assert low["expanded"] >= 32 and 4 <= high["expanded"] <= 20, (low, high)
    gold = _answers("gold", 40, CPU, seed=3)
    assert gold["expanded"] >= 26, gold


@pytest.mark.parametrize("kind", SELECTING[2:])
def test_no_selecting_arm_reads_support_expanded(kind):
    """The arms that broke the old rule or could break this one (stratum tilts 6 / 7.5 / 42, the tilt spent on
    the hard problems, gamma-2 sharpening, a uniform tilt to the trained pass@1 on the true rates, a model that
    never leaves the pool's support), at the CPU world's design: *expanded* at most at the test's level
    (one-sided 0.0125 per half: at most 3 of 40)."""
    got = _answers(kind, 40, CPU, seed=11)
    assert got["expanded"] <= 3, (kind, got)


def test_a_gold_mixture_never_reads_support_kept_and_teach_hard():
    """A gold mixture never reads support kept and teach hard rarely.

    Truths that teach. A gold mixture (every problem given a share of correct answers) never reads *kept*.
    Sharpen + teach-hard can: the test reads Z's mean, and Z also holds problems of base rate 0.005-0.02 that
    the truth sharpens towards 0, so the taught ones' 0.45 can average below f_94(bound). Measured: 3 of 40
    at w* 94 (seed 12), 0 at w* 14; a *kept* on the mean does not exclude that some problems were taught
    (PLAN_CHANGES.md change 46)."""
    assert _answers("gold", 40, CPU, seed=12)["kept"] == 0
    high, low = (
        _answers("sharpen+teach-hard", 40, CPU, seed=12),
        _answers("sharpen+teach-hard", 40, CPU, seed=12, w_star=14.0),
    )
    assert high["kept"] <= 6 and low["kept"] == 0, (high, low)


def test_the_qwen_design_can_return_every_answer():
    """configs/qwen05b.yaml's design with the report's rates (base 0.25 / 0.84, many 0.66 / 0.81) and
    its pool: a sharpened model reads 'sharpened / kept'; sharpen + teach-hard and a gold mixture read
    support 'expanded'; the base against itself is neither sharpened nor expanded."""
    from orchestration import config

    cfg = config.load("configs/qwen05b.yaml")
    q = {
        "N": cfg.task.n_test,
        "S": len(config.seeds_of(cfg, "many")),
        "n_base": cfg.eval.n_base,
        "n_pool": cfg.eval_sets[cfg.analyze.calibration.pool_set].n,
        "world": (0.25, 0.84),
        "target": (0.66, 0.81),
    }
    sharp = _answers("sharpened", 10, q, seed=4, axes=True)
    assert sharp["sharpened / kept"] >= 9, sharp
    for kind, seed in (
        ("sharpen+teach-hard", 5),
        ("gold", 6),
    ):  # at w* = 14: at the registered 94 the Qwen pool is underpowered
        got = _answers(kind, 20, q, seed=seed, w_star=14.0)
        assert got["expanded"] >= {"sharpen+teach-hard": 7, "gold": 13}[kind], (kind, got)
    null = _answers("null", 10, q, seed=7, axes=True)
    assert not any(k.startswith("sharpened") or k.endswith("expanded") for k in null), null


def test_the_two_samplers_disagree_where_the_nucleus_cuts():
    """The two samplers disagree where the nucleus cuts the rare token.

    A two-token toy: the base puts 0.03 on the correct token. Top-p 0.95 (the evaluation sampler,
    through the project's own filter) cuts it, so the base's fresh draws there never succeed; at the
    training sampler (top-p 1) they succeed ~3%. A trained model at 0.08 reads 'expanded' at the
    evaluation sampler and not at the training sampler, with w* = 3 (f_3(0.03) ~ 0.085)."""
    torch = pytest.importorskip("torch")
    from method.sampler import filter_logits

    logits = torch.log(torch.tensor([[0.97, 0.03]]))
    gen = torch.Generator().manual_seed(0)

    def draws(top_p, n):
        probs = filter_logits(logits.clone(), 0, top_p).softmax(-1)
        return int(torch.multinomial(probs.expand(n, 2), 1, generator=gen).sum())

    N, n_pool = 16, 400
    base = np.zeros(N, int)  # the base never solves these in its test samples
    rl = np.random.default_rng(0).binomial(32, 0.08, (6, N))
    out = {}
    for name, top_p in (("eval", 0.95), ("train", 1.0)):
        pool = np.array([draws(top_p, n_pool) for _ in range(N)])
        out[name] = support.support_test(base, pool, n_pool, rl, 32, 3.0, 0.05, 1000, 0, "test", f"pool-{name}")
    assert out["eval"]["base_successes"] == 0 and out["train"]["base_successes"] > 0
    assert out["eval"]["answer"] == "expanded" and out["train"]["answer"] != "expanded", out


def test_support_changes_count_kept_lost_and_gained_problems():
    base = np.array([0, 0, 5, 9, 1])
    rl = np.array([[1, 0, 3, 0, 2], [0, 0, 1, 1, 1]])
    got = support.support_changes(base, rl)
    assert got["per_seed"] == [{"retained": 2, "lost": 1, "gained": 1}, {"retained": 3, "lost": 0, "gained": 0}]
    assert got["discovery"] == pytest.approx(0.25) and got["net"] == pytest.approx((0.5 - 0.5) / 5)


def test_the_tilt_quantile_recovers_a_known_uniform_tilt():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.2, 0.6, 400)
    base, rl = rng.binomial(100000, p), rng.binomial(100000, reweight.reweighted(p, 3.0))[None]
    got = support.tilt_quantile(base, 100000, rl, 100000, q=0.5)
    assert got["w"] == pytest.approx(3.0, rel=0.02)


def test_the_config_refuses_a_support_pool_that_is_not_fresh():
    """The config refuses a support pool that is not fresh base draws."""
    from orchestration import config

    cfg = config.load("configs/qwen05b.yaml")
    assert cfg.analyze.support.pools == {"eval": "pool", "train": "pool-train"}
    assert cfg.eval_sets["pool-train"].sampling.temperature == cfg.train.sampling.temperature
    assert cfg.eval_sets["pool-train"].sampling.top_p == cfg.train.sampling.top_p
    for bad in ("analyze.support.pools={eval: wide}", "eval_sets.pool.seeds=test", "analyze.support.w_star=0.5"):
        with pytest.raises(config.ConfigError, match="analyze.support"):
            config.load("configs/qwen05b.yaml", [bad])


def _design(seeds="own"):
    from types import SimpleNamespace

    analyze = SimpleNamespace(support=None, calibration=SimpleNamespace(pool_set="pool"))
    return SimpleNamespace(
        primary_scoring="loose",
        checkpoints=[10],
        seeds_of=lambda c: [0, 1],
        cfg=SimpleNamespace(analyze=analyze, eval_sets={"pool": SimpleNamespace(seeds=seeds)}),
    )


def test_the_analysis_runs_the_post_hoc_test_on_the_pool():
    """The analysis runs the post hoc test on the pool and refuses test seeds.

    primary_checks.support_tests: --support-post-hoc on a run without analyze.support uses its calibration
    pool at the evaluation sampler, says post hoc, and gives the numbers support_test gives; a pool sampled
    with the test set's seeds is one InputError."""
    from types import SimpleNamespace

    from analysis import primary_checks
    from analysis.run_files import InputError
    from analysis.run_inputs import EvalSet, RunInputs

    rng = np.random.default_rng(0)
    base_c, pool_c, rl_c = np.array([0, 0, 3, 8] * 10), rng.binomial(64, 0.01, 40), rng.binomial(8, 0.4, (2, 40))
    doc = lambda c, n: {
        "problems": [{"id": i, "correct_loose": int(x)} for i, x in enumerate(c)],
        "sampling": {"n": n, "temperature": 0.6},
    }
    base, pool = doc(base_c, 16), doc(pool_c, 64)
    rl = {("many", s, 10): doc(rl_c[s], 8) for s in (0, 1)}
    entry = {
        "condition": "many",
        "scoring": "loose",
        "step": 10,
        "seeds": [0, 1],
        "primary": True,
        "adjusted": {"rises": 0.001, "falls": 0.9, "below": 0.5},
    }
    inf = SimpleNamespace(n=8, levels=SimpleNamespace(one_sided=0.025), draws=SimpleNamespace(resamples=500, seed=3))
    inputs = lambda design: RunInputs(design, EvalSet(base, rl), {"pool": EvalSet(pool, {}, "evalsets/pool/")})  # noqa: E731
    got = primary_checks.support_tests(inputs(_design()), [entry], inf, post_hoc_w=5.0)
    want = support.support_test(base_c, pool_c, 64, rl_c, 8, 5.0, 0.025, 500, 3, "test", "pool")
    assert got["registered"] is False and got["w_star"] == 5.0
    assert got["conditions"]["many"]["tests"]["eval"] == want
    assert got["conditions"]["many"]["axes"] == {"sharpening": "pass@1 up", "support": {"eval": want["answer"]}}
    assert primary_checks.support_tests(inputs(_design()), [entry], inf)["skipped"]  # not registered
    with pytest.raises(InputError, match="seeds: own"):
        primary_checks.support_tests(inputs(_design("test")), [entry], inf, post_hoc_w=5.0)
