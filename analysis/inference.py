"""What every test of one analysis shares (Inference), and a file's correct counts per problem. At the
bottom of analysis/: the modules that compute take these whole, so a test's sizes travel as one value."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis import stats, verdict


@dataclass
class Inference:
    """What every test of one analysis shares: its levels and margins, the bootstrap's draws, and the
    sizes of the evaluations (trained models' n, the base's n_base, k_max, N problems)."""

    levels: verdict.Levels
    draws: verdict.Draws
    n: int
    n_base: int
    k: int

    def seed_draws(self, S: int) -> np.ndarray:
        """The crossed bootstrap's seed draws for S seeds, at this analysis' resamples and bootstrap seed."""
        return stats.seed_resample_indices(S, self.draws.resamples, self.draws.seed)


def counts(doc: dict, sc: str) -> np.ndarray:
    """(N,) an evaluation file's correct samples per problem under scoring sc."""
    return np.array([p[f"correct_{sc}"] for p in doc["problems"]])
