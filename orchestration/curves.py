"""Live training curves for TensorBoard, off unless asked (`--tensorboard`): every logged training step's
numbers as scalars under train/, every dev check's under dev/, written to a `tensorboard/` folder beside the
run's train_log.csv. The CSV files stay the record; nothing read later comes from here."""

from __future__ import annotations

import math
from pathlib import Path

NEEDS = "--tensorboard needs the tensorboard package: pip install tensorboard==2.21.0"


def writer_class():
    """torch's SummaryWriter, or ImportError with the one line that says what to install."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ImportError(NEEDS) from None
    return SummaryWriter


class Curves:
    def __init__(self, folder: Path | None):
        self.writer = writer_class()(log_dir=str(folder)) if folder is not None else None

    def row(self, prefix: str, row: dict, step: int) -> None:
        if self.writer is None:
            return
        for key, value in row.items():
            if (
                key != "step"
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
            ):
                self.writer.add_scalar(f"{prefix}/{key}", value, step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
