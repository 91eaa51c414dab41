"""An evaluation under way, kept call by call, so that a job stopped between two parts of a run
resumes where it stopped and ends with the file an uncut run writes.

Beside the output file OUT (RUN/[evalsets/<set>/]eval_*.json) the folder OUT.partial/ holds
identity.json (which evaluation: its stage hash, so its settings, adapter sha256 and evaluation
set; n, the seed tag and the sampler calls as (problems, samples) ranges) and one call_<i>.json
per finished sampling call (each sample's token ids and mean token entropy, prompt-major, and the
seconds since the call before). A later run of the same evaluation samples only the calls not
there and builds the result from all of them: decoding, scoring, the base support and the summary
read nothing else. That is exact because no call's draws depend on an earlier call: under
eval.draw: sample each sample has its own stream (task.seed, tag, problem id, sample index), under
batch each call its own generator seeded by (task.seed, tag, its first problem id); the calls must
be the same ones (a changed eval.problems_per_batch or eval.max_rows starts over). The folder is
removed once OUT is written; one made for another evaluation is not read but removed, with a note.
No torch: the pipeline reads it too (--dry-run's progress, the move-aside of what a rerun replaces).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from orchestration.provenance import atomic_write_json, atomic_write_text, read_json

IDENTITY = "identity.json"


def folder_of(out_file: str | Path) -> Path:
    """OUT.partial/: where the evaluation that writes OUT keeps its finished calls."""
    out_file = Path(out_file)
    return out_file.with_name(out_file.name + ".partial")


def recorded_hash(out_file: str | Path) -> str | None:
    """The stage hash a resume folder was made under, or None (no folder, or no readable identity)."""
    return (read_json(folder_of(out_file) / IDENTITY) or {}).get("stage_hash")


def progress(out_file: str | Path) -> tuple[int, int] | None:
    """(finished calls, all calls) of the evaluation under way that writes OUT, or None when none is."""
    folder = folder_of(out_file)
    calls = (read_json(folder / IDENTITY) or {}).get("calls")
    if not isinstance(calls, list):
        return None
    return sum((folder / call_name(i)).exists() for i in range(len(calls))), len(calls)


def call_name(i: int) -> str:
    return f"call_{i:05d}.json"


def spans(calls: list[tuple[range, range]]) -> list[list[int]]:
    """The calls as JSON: [first problem, end, first sample, end] each."""
    return [[ps.start, ps.stop, js.start, js.stop] for ps, js in calls]


class Resume:
    """The resume folder of one evaluation, `identity` saying which (its stage hash, n, seed tag).
    load(calls) gives the finished calls a matching folder holds; save() records one more (the first
    also writes identity.json); remove() once the output is written. After load, `resumed` is the
    number of calls taken from the folder and `resumed_seconds` the seconds they took."""

    def __init__(self, out_file: str | Path, identity: dict):
        self.folder = folder_of(out_file)
        self.identity = dict(identity)
        self.resumed, self.resumed_seconds = 0, 0.0
        self.last = time.perf_counter()  # each call's seconds: from the call before (the first: from here)

    def load(self, calls: list[tuple[range, range]]) -> dict[int, dict]:
        """{call index: {"span", "seconds", "tokens": [...], "entropy": [...]}} for each finished call of
        `calls` recorded for this evaluation; {} when there is none. A folder recorded for another
        evaluation, or for other calls, is removed (one line says so): never mixed with this one's."""
        self.identity["calls"] = spans(calls)
        if not self.folder.exists():
            return {}
        got = read_json(self.folder / IDENTITY)
        if got != self.identity:
            print(
                f"{self.folder}: {self.mismatch(got)}; not used, removed (this evaluation starts from its first call)",
                flush=True,
            )
            shutil.rmtree(self.folder)
            return {}
        done = {}
        for i, span in enumerate(self.identity["calls"]):
            d = read_json(self.folder / call_name(i))
            rows = (span[1] - span[0]) * (span[3] - span[2])
            if (
                isinstance(d, dict)
                and d.get("span") == span
                and len(d.get("tokens", ())) == rows == len(d.get("entropy", ()))
            ):
                done[i] = d
        self.resumed, self.resumed_seconds = len(done), sum(d.get("seconds", 0.0) for d in done.values())
        return done

    def mismatch(self, got: dict | None) -> str:
        """Why a resume folder is not this evaluation's, in a few words."""
        if not isinstance(got, dict):
            return f"no readable {IDENTITY}"
        if got.get("stage_hash") != self.identity["stage_hash"]:
            return (
                f"made for another evaluation (stage hash {str(got.get('stage_hash'))[:12]} there, "
                f"{self.identity['stage_hash'][:12]} here: other settings, adapter or evaluation set)"
            )
        if got.get("calls") != self.identity["calls"]:
            return "made with other sampler calls (eval.problems_per_batch or eval.max_rows)"
        return (
            "made for another evaluation ("
            + ", ".join(k for k in self.identity if got.get(k) != self.identity[k])
            + ")"
        )

    def save(self, i: int, tokens: list[list[int]], entropy: list[float]) -> None:
        """Record call i as finished: its samples' token ids and mean token entropies (prompt-major)."""
        if not (self.folder / IDENTITY).exists():
            atomic_write_json(self.folder / IDENTITY, self.identity)
        now = time.perf_counter()
        record = {
            "span": self.identity["calls"][i],
            "seconds": round(now - self.last, 3),
            "tokens": tokens,
            "entropy": entropy,
        }
        atomic_write_text(
            self.folder / call_name(i), json.dumps(record, separators=(",", ":")) + "\n"
        )  # compact: ids add up
        self.last = now

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
