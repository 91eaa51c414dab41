"""What the entry points' command lines share: a wrong argument ends in one line (argparse prints the
whole usage first, seven lines for pipeline.py), naming the argument and what would be right, exit 2;
an interruption (Ctrl-C, SIGTERM, SIGHUP) ends in one line, exit 130; and the one builder of a pipeline
command that makes a run folder's files (again)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

# The config file that writes out config.py's defaults, the registered study: what a command run
# without --config (grpo.py's default) ran under.
REGISTERED_CONFIG = "configs/qwen05b.yaml"


def pipeline_command(
    config_path: str | None, run: Path | str, sets: list[str] = (), stage: str | None = None, force: bool = False
) -> str:
    """`python pipeline.py --config C --run R [--set K=V ...] [--stage S] [--force]`, shell-quoted: the
    command every message prints to make a run folder's files, or one stage of them, again."""
    argv = ["python", "pipeline.py", "--config", config_path or REGISTERED_CONFIG, "--run", str(run)]
    argv += [x for s in sets for x in ("--set", s)]
    return shlex.join(argv + (["--stage", stage] if stage else []) + (["--force"] if force else []))


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_INTERRUPTED = 130  # README: exit codes


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def interrupt_on_signals() -> None:
    """An entry script's first act: SIGTERM (a scheduler's time limit) and SIGHUP (a closed terminal) end it
    as Ctrl-C does, by a KeyboardInterrupt that the command turns into one line (interrupted). A signal
    its parent set to be ignored stays ignored (nohup's SIGHUP, a background job's SIGINT)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _interrupt)


def interrupted(script: str, what: str) -> int:
    """The one line an interrupted entry script ends with, and its exit code (130, README: exit codes).
    Further signals wait while it is written; a closed terminal cannot turn it into a traceback."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    try:
        print(f"{script}: interrupted (Ctrl-C or a signal); {what}", file=sys.stderr, flush=True)
    except OSError:
        pass
    for sig in SIGNALS:  # a second Ctrl-C while the process tears down ends it
        signal.signal(sig, signal.SIG_DFL)
    return EXIT_INTERRUPTED
