"""What the entry points' command lines share: a wrong argument ends in one line (argparse prints the
whole usage first, seven lines for pipeline.py), naming the argument and what would be right, exit 2."""
from __future__ import annotations

import argparse
import sys


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)
