"""RUN/manifest.json: what made the run folder's files (the config, PLAN.md's sha256, the code revision,
the versions) and every stage's and job's state; a later run under another header keeps the earlier
one in `earlier`. The states end as done, interrupted, failed or not started (end_states).
"""

from __future__ import annotations

from pathlib import Path

from orchestration import config, provenance
from runner.jobs import Job
from runner.stages import registered_stages

ROOT = Path(__file__).resolve().parents[1]


MANIFEST_HEADER = (
    "config",
    "config_hash",
    "plan_sha256",
    "changes_sha256",
    "revision",
    "versions",
    "machine",
)  # what made the files


def write_manifest(run: Path, cfg: config.Config, stages: dict, jobs: dict) -> None:
    """RUN/manifest.json: this pipeline run's config, the sha256 of PLAN.md and PLAN_CHANGES.md, the code revision and the
    versions, with every stage's and job's state. The record of what made the files already there is
    never rewritten: when the manifest on disk was written under another header (another config
    record, revision, PLAN.md, versions or machine: a stage run into an existing run by later code), that
    header is appended to `earlier`, with the stages and jobs that were done under it."""
    here = {
        "config": config.to_dict(cfg),
        "config_hash": config.digest(config.to_dict(cfg)),
        **provenance.plan_hashes(),
        "revision": provenance.code_revision(),
        "versions": provenance.versions(),
        "machine": provenance.machine(),
    }
    old = provenance.read_json(run / "manifest.json") or {}
    earlier = list(old.get("earlier", []))
    # a manifest from before the machine was recorded is read as made here: unknown is not another machine
    header = [k for k in MANIFEST_HEADER if k != "machine" or "machine" in old]
    if "config" in old and any(old.get(k) != here[k] for k in header):
        earlier.append(
            {
                **{k: old[k] for k in MANIFEST_HEADER if k in old},
                "stages_done": _done(old.get("stages")),
                "jobs_done": _done(old.get("jobs")),
            }
        )
    provenance.atomic_write_json(
        run / "manifest.json",
        {
            **here,
            **({"earlier": earlier} if earlier else {}),
            "stage_order": registered_stages(cfg),
            "stages": stages,
            "jobs": jobs,
        },
    )


def job_record(run: Path, job: Job, status: str, **more) -> dict:
    """A job's entry in manifest.json: its state, the command that makes its output, and that output
    (relative to the run folder), so "the command that makes this file again" is a lookup."""
    return {"status": status, "command": job.command(), "output": Path(job.output).relative_to(run).as_posix(), **more}


def _done(states: dict | None) -> list[str]:
    return sorted(k for k, r in (states or {}).items() if isinstance(r, dict) and r.get("status") == "done")


def done_record(old: dict) -> dict:
    """A stage found done: its status, and its measured time if it has one (no error or start time
    left from a run that stopped)."""
    return {"status": "done", **{k: old[k] for k in ("seconds", "finished", "jobs", "parallel") if k in old}}


def end_states(stages: dict, jobs: dict, status: str, why: str, later: list[str] = ()) -> None:
    """Give every stage and job still recorded as running an end state (`status`, with `why`), and
    what never began (the stages in `later`, stages and jobs still waiting) `not started`, so that
    the manifest never says `running` once no process runs it: done, interrupted, failed and not
    started are the end states."""
    for s in later:
        stages[s] = {"status": "not started", "error": f"not reached: {why}"}
    for part in (stages, jobs):
        for k, v in part.items():
            if v.get("status") == "running":
                part[k] = {**v, "status": status, "error": why}
            elif v.get("status") == "waiting":
                part[k] = {**v, "status": "not started", "error": why}
