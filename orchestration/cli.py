"""What the entry points' command lines share: a wrong argument ends in one line (argparse prints the
whole usage first, seven lines for pipeline.py), naming the argument and what would be right, exit 2;
and the one builder of a pipeline command that makes a run folder's files (again)."""

from __future__ import annotations

import argparse
import shlex
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
