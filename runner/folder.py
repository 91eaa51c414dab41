"""The run folder's lock (one pipeline per folder) and its move-aside (a rerun replaces nothing in
place: RUN/superseded/<time>/), and the refusal both raise. No torch."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from orchestration import eval_resume, provenance
from runner.jobs import log, now


class Refused(Exception):
    """An output in the run folder was made under another config (or the folder is locked)."""


class Lock:
    """RUN/.pipeline.lock: one pipeline per run folder. A lock whose process is gone (killed) is
    reported and taken over, not obeyed forever."""

    def __init__(self, run: Path):
        self.path = run / ".pipeline.lock"
        self.held = False

    def acquire(self) -> None:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": now()}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                other = provenance.read_json(self.path) or {}
                if other.get("host") == me["host"] and _alive(other.get("pid")):
                    raise Refused(
                        f"{self.path.parent} is in use by another pipeline.py (pid {other.get('pid')}, started "
                        f"{other.get('started')}); wait for it to finish or stop it"
                    )
                if other.get("host") not in (None, me["host"]):
                    raise Refused(
                        f"{self.path} is held by host {other['host']} (pid {other.get('pid')}); "
                        "if that run is dead, delete the file"
                    )
                log(
                    f"stale lock from pid {other.get('pid')} (no longer running, started {other.get('started')}): taken over"
                )
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return
        raise Refused(f"{self.path}: could not take the lock")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


def _alive(pid) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Aside:
    """Moves outputs a rerun replaces to RUN/superseded/<time>/ (never deletes a result); one
    <time> folder per pipeline run."""

    def __init__(self, run: Path):
        self.run = run
        self.when = provenance.stamp()

    def move(self, path: Path, why: str) -> None:
        """Move `path` aside, and with it an evaluation's resume folder (eval_resume.folder_of): an
        evaluation redone under --force or other settings never continues from the calls of the old one."""
        for p in (path, eval_resume.folder_of(path)):
            dest = provenance.move_aside(self.run, p, self.when)
            if dest is not None:
                log(f"moved aside {p.relative_to(self.run)} -> {dest.relative_to(self.run)} ({why})")
