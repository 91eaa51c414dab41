"""The analysis' spine: a run's inputs read once, typed, and handed to every measure.

`read_inputs(run)` reads the run folder (each file read and checked by analysis/run_files.py) into a
`RunInputs`: the design, the registered test set and every other registered evaluation set as an `EvalSet`
(the base's file and the trained models' by (condition, seed, step)), the token-level files and what is
missing. A measure takes a `RunInputs` (and the bootstrap's `Inference`) and asks it for the seeds and files
at a checkpoint (`seeds_at`, `docs_at`), so the design's order of seeds is written once, here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from analysis.run_files import Design, InputError, find_evals, find_set, find_tokens

Key = tuple[str, int, int]  # (condition, seed, step)


@dataclass(frozen=True)
class EvalSet:
    """One evaluation set of a run: the base's file (None where it is missing) and the trained models'
    files by (condition, seed, step); `prefix` is where its files lie in the run folder."""

    base: dict | None
    trained: dict[Key, dict]
    prefix: str = ""  # "" for the test set, "evalsets/<name>/" for a registered set


@dataclass(frozen=True)
class RunInputs:
    """Everything an analysis of one run reads, read once: the design, the test set, the registered
    evaluation sets by name, the token-level files (with the warnings their check raised) and the
    expected files not found (only a --partial analysis has any)."""

    design: Design
    test: EvalSet
    sets: dict[str, EvalSet] = field(default_factory=dict)
    tokens: dict[Key, dict] = field(default_factory=dict)
    token_warnings: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    run: Path | None = None  # the folder, where a measure reads a training log

    @property
    def base(self) -> dict:
        """The base's test-set file."""
        return self.test.base

    @property
    def trained(self) -> dict[Key, dict]:
        """The trained models' test-set files."""
        return self.test.trained

    @property
    def last(self) -> int:
        """The last registered checkpoint."""
        return self.design.checkpoints[-1]

    def files(self, name: str | None = None) -> EvalSet:
        """The test set (name None) or the registered set `name`; an empty set where it was not read."""
        return self.test if name is None else self.sets.get(name, EvalSet(None, {}, f"evalsets/{name}/"))

    def seeds_at(self, cond: str, step: int | None = None, name: str | None = None) -> list[int]:
        """The seeds of `cond` (in the design's order) whose file at `step` (the last checkpoint when None)
        is in the test set, or in the set `name`."""
        step, there = self.last if step is None else step, self.files(name).trained
        return [s for s in self.design.seeds_of(cond) if (cond, s, step) in there]

    def docs_at(self, cond: str, step: int | None = None, name: str | None = None) -> list[dict]:
        """The files of seeds_at(cond, step, name), in that order."""
        step, there = self.last if step is None else step, self.files(name).trained
        return [there[(cond, s, step)] for s in self.seeds_at(cond, step, name)]


def ordered_keys(design: Design, docs: dict[Key, dict], step: int | None = None) -> list[Key]:
    """The keys of docs in the design's order (conditions as registered, then seeds, then steps), at `step` if given."""
    return [k for k in design.expected() if k in docs and (step is None or k[2] == step)]


def read_inputs(run: Path, partial: bool = False) -> RunInputs:
    """Read and check every input of the analysis of `run`. Raises InputError for a malformed input, an
    evaluation outside the design, or (unless partial) an expected evaluation that is missing."""
    base, rl, missing, design = find_evals(run)
    sets = {}
    for name in design.eval_sets:
        sb, srl, smiss = find_set(run, design, name)
        sets[name] = EvalSet(sb, srl, f"evalsets/{name}/")
        missing = missing + smiss
    tokens, tok_missing, tok_warnings = find_tokens(run, design)
    missing = missing + tok_missing
    if missing and not partial:
        raise InputError(
            f"{run}: {len(missing)} of {design.n_expected()} expected evaluations are missing "
            f"({', '.join(missing)}); rerun the eval stage, or analyse what is there with --partial",
            path=run,
        )
    return RunInputs(design, EvalSet(base, rl), sets, tokens, tok_warnings, missing, run)
