"""The model stages, one command each: `python grpo.py <command>` (pipeline.py runs them in PLAN.md's order).

    python grpo.py train    --config configs/smoke.yaml --run RUN --condition many --seed 0
    python grpo.py eval     --config configs/smoke.yaml --run RUN [--adapter RUN/train_many_s0/step_006] [--eval-set wide]
    python grpo.py tokens   --config configs/smoke.yaml --run RUN --adapter RUN/train_many_s0/step_006
    python grpo.py select | lr-sweep | probe --config ... --run RUN

The method is Dr. GRPO (Liu et al., arXiv 2503.20783): its departures from GRPO, numbered [D1]..[D5]
and tagged at the lines that make them, head method/objective.py (advantages, the loss, the controls' terms);
method/training.py holds the loop and the learning-rate sweep. The commands' arguments, checks and
faults are runner/commands.py's.
"""

import sys

from orchestration import cli


def main(argv: list[str] | None = None) -> int:
    from runner import commands  # torch: seconds to load, after an entry's signal handlers

    return commands.main(argv)


def entry() -> int:
    """This script as a process: SIGTERM and SIGHUP end it as Ctrl-C does, and an interruption, from the
    first import on, ends in one line with exit 130 (README: exit codes)."""
    cli.interrupt_on_signals()
    try:
        from runner import commands
    except KeyboardInterrupt:
        return cli.interrupted("grpo.py", "nothing was written")
    return commands.entry()


if __name__ == "__main__":
    sys.exit(entry())
