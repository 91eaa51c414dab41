"""What a run will take before any of it has run, from a committed run of the same config: its manifest records
each job's and stage's seconds and (since change 52's era) its machine. A job left here counts when a committed
run made the job of the same name from the same config file; the figure is that run's machine's time, not this
one's, and says so. Used by `--dry-run` where nothing of this run is measured and no GPU cost model applies."""

from __future__ import annotations

import functools
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SINGLE = ("base", "probe", "select", "lr-sweep", "analyze")  # stages timed alone (eval and tokens: their jobs)


@dataclass(frozen=True)
class Reference:
    run: str  # the committed run folder, relative to the checkout
    machine: str  # in words, or "an unrecorded machine"
    revision: str | None
    parallel: int  # the jobs it ran side by side
    job_seconds: dict  # job name -> seconds
    stage_seconds: dict  # single stage -> seconds


@functools.lru_cache(maxsize=65536)
def config_of(command: str) -> str | None:
    """The --config a job's command names, or None. A command without quotes or backslashes splits on white
    space exactly as shlex.split would, at a fraction of its cost (every job of every manifest is read)."""
    if not any(c in command for c in "'\"\\"):
        argv = command.split()
    else:
        try:
            argv = shlex.split(command)
        except ValueError:
            return None
    return argv[argv.index("--config") + 1] if "--config" in argv[:-1] else None


def machine_words(m: dict | None) -> str:
    if not m:
        return "an unrecorded machine"
    return f"a {m.get('cores', '?')}-core {m.get('cpu', 'CPU')}" + (f" with {m['gpu']}" if m.get("gpu") else "")


def references(config_path: str, results: Path = ROOT / "results") -> list[Reference]:
    """Every run under `results` whose manifest's jobs were made from `config_path`, most jobs first."""
    want = Path(config_path).as_posix()
    out = []
    for f in sorted(results.glob("*/manifest.json")):
        try:
            m = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        jobs = {k: j for k, j in (m.get("jobs") or {}).items() if config_of(j.get("command", "")) == want}
        timed = {k: j["seconds"] for k, j in jobs.items() if j.get("status") == "done" and j.get("seconds")}
        if not timed:
            continue
        stages = m.get("stages") or {}
        par = max([s.get("parallel", 1) for s in stages.values() if isinstance(s, dict)] or [1])
        out.append(
            Reference(
                run=f.parent.relative_to(results.parent).as_posix() if results.parent in f.parents else str(f.parent),
                machine=machine_words(m.get("machine")),
                revision=m.get("revision"),
                parallel=par,
                job_seconds=timed,
                stage_seconds={s: v["seconds"] for s, v in stages.items() if s in SINGLE and v.get("seconds")},
            )
        )
    return sorted(out, key=lambda r: -len(r.job_seconds))


def estimate(ref: Reference, job_names: list[str], stages: list[str], n: int) -> dict:
    """Seconds for the named jobs on n workers (their recorded seconds summed, over n) and the single stages
    left, with how many jobs the reference holds."""
    known = [ref.job_seconds[j] for j in job_names if j in ref.job_seconds]
    singles = sum(ref.stage_seconds.get(s, 0.0) for s in stages if s in SINGLE)
    return {
        "seconds": sum(known) / max(1, n) + singles,
        "matched": len(known),
        "jobs": len(job_names),
        "run": ref.run,
        "machine": ref.machine,
    }


def line(
    config_path: str, job_names: list[str], stages: list[str], n: int, results: Path = ROOT / "results"
) -> str | None:
    """The dry run's sentence, or None when no committed run of this config holds any of these jobs."""
    for ref in references(config_path, results):
        e = estimate(ref, job_names, stages, n)
        if e["matched"]:
            h = e["seconds"] / 3600
            size = f"about {h:.1f} h" if h >= 2 else f"about {e['seconds'] / 60:.0f} min"
            which = "the" if e["matched"] == e["jobs"] else f"the {e['matched']} of the"
            side = f"{ref.parallel} jobs side by side on " if ref.parallel > 1 else ""
            return (
                f"{size} with --jobs {n} for {which} {e['jobs']} jobs left, by the times {e['run']} recorded for the "
                f"same jobs ({side}{e['machine']}; a faster or busier machine scales it)"
            )
    return None
