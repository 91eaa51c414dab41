"""The analysis' own settings blocks (the `analyze` section's nested entries): the planned effect for
the power statement, the calibration arms, the support tests (PLAN_CHANGES.md changes 42 and 57) and the
collapse rule (change 59). Defined here and read through orchestration/config.py, where AnalyzeCfg
holds them; config.py re-exports every name."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PlannedCfg:
    """The power analysis a design was planned with (PLAN.md section 7, "Planned power"): the effect
    it names and the variance components of the primary Delta pass@1 it assumed (problem, seed,
    residual), from a pilot. The report states the design's power at them beside what it measured."""

    effect: float = 0.04
    problem_var: float = 0.0187
    seed_var: float = 0.00038
    residual_var: float = 0.0222
    seed_df: int = 2  # the degrees of freedom the pilot's seed variance was estimated on (its upper limit is reported)


@dataclass
class MixedArmCfg:
    w: float = 2.0
    eps: float = 0.01


@dataclass
class CalibrationCfg:
    """The calibration arms (PLAN.md section 7): conditions whose truth is known, made from a pool of
    base samples (the test set's base evaluation and the `pool_set` evaluation set's) and judged by the
    same code as the trained models, outside the Holm families."""

    pool_set: str = "pool"  # the registered evaluation set (models: base) holding the pool's extra samples
    resplits: int = 100  # re-splits of the pool per arm
    resamples: int = 2000  # bootstrap replicates per re-split
    selection_w: list[float] = field(default_factory=lambda: [2.0, 5.0])  # selection arms: the base reweighted by w
    teaching_eps: list[float] = field(
        default_factory=lambda: [0.01, 0.05]
    )  # teaching arms: a share eps of gold answers
    mixed: list[MixedArmCfg] = field(default_factory=lambda: [MixedArmCfg()])  # selection plus teaching
    taught: str | None = (
        None  # a condition trained on one stratum's written solutions (problems: stratum:<name>): the taught arm
    )


@dataclass
class SupportCfg:
    """The support test (PLAN_CHANGES.md change 42): the base's rate on the test problems it never solves,
    measured on fresh draws of base-only evaluation sets, one per sampler, against the trained model's."""

    w_star: float = 94.0  # the largest tilt a selection may apply (change 42: tiny_v4's 95th percentile outside Z)
    pools: dict[str, str] = field(
        default_factory=lambda: {"eval": "pool"}
    )  # sampler name -> eval set (models: base, seeds: own)
    # The registered primary question is this test at the evaluation sampler (tiny_v5's, change 42): verdicts.json's
    # primary.label is then its answer ("support expanded", ...) and the selection-null label a secondary reading.
    primary: bool = False


@dataclass
class BaseSupportCfg:
    """Support from the base's own probabilities (PLAN_CHANGES.md change 57; needs eval.base_support): the share of
    correct responses outside the base's kept set at the sampler that drew them, and at an untruncated
    sampler their base log-probabilities; `matched` names the evaluation set of the trained models at the
    training sampler, so each sampler's comparison is of draws made alike."""

    primary: bool = False  # the registered primary question is this test at the evaluation sampler
    tolerance: float = 1e-4  # outside when a token lies beyond the nucleus by at least this much probability mass
    kept_margin: float = 0.005  # "kept": the outside rate per sample shown below this
    matched: str | None = None  # eval set: the trained models at the training sampler (models: final)
    w_grid: list[float] = field(default_factory=lambda: [1, 2, 5, 10, 14, 20, 50, 94, 119, 200, 355, 500, 1000, 2000])


@dataclass
class WithinCorrectCfg:
    """Which correct answers RL favours at the training sampler (PLAN.md section 7e; needs eval.within_correct):
    the within-correct exponent of the trained models' correct T 1 responses (`matched`) and the outside gap
    against the base's own correct T 1 responses (`pool`), decided three ways (analysis/within_correct.py)."""

    matched: str = "matched"  # eval set: the trained models at the training sampler (models: final)
    pool: str = "pool-train"  # eval set: the base at the training sampler (models: base)
    exponent_margin: float = 0.1  # reweighting: alpha within 1 +- this; sharpening above, toward-rare below
    gap_margin: float = 0.02  # reweighting: the outside gap within +- this
    permutations: int = 9999  # draws of the stratified permutation null (each seed's own; PLAN_CHANGES.md change 68)
    post_hoc: bool = False  # a re-analysis of files made before the measure was registered: labelled, decides nothing
    clean: bool = (
        False  # also the clean-computation gap (change 71; a * b - c tasks): the outside gap's test on that flag
    )


@dataclass
class BaselinesCfg:
    """Reward-free baselines beside RL's pass@k (PLAN.md section 7e, change 71; descriptive, deciding nothing):
    the base at a sweep of temperatures (`sweep`: eval sets with models: base, besides the test set), and the
    base's T 1 pool resampled under the outcome reweighting that meets RL's T 1 pass@1 and under powers of the
    base (`powers`; needs eval.logp_all); the Z-at-T 1 reading from the trained models' correct T 1 answers."""

    pool: str = "pool-train"  # eval set: the base at the training sampler (models: base)
    matched: str = "matched"  # eval set: the trained models at the training sampler (models: final)
    sweep: list[str] = field(default_factory=list)  # eval sets: the base at other temperatures
    powers: list[float] = field(default_factory=lambda: [2.0, 4.0])  # a in pi_base^a


@dataclass
class CollapseCfg:
    """A collapsed training run, on its log alone (PLAN_CHANGES.md change 59): no signal on >= share of the steps
    after late_from x its last step. Reported with the rate over seeds; every seed still counts."""

    late_from: float = 0.5
    share: float = 0.9
