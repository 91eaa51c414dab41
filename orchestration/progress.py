"""Progress for long loops: tqdm's bar on a terminal; in a redirected log (a file, a pipe, a scheduler's
output), one plain line every `every` seconds and one at the end instead of a bar redrawn with carriage
returns, so a log of a two-night run reads line by line."""

from __future__ import annotations

import sys

from tqdm import tqdm

EVERY = 60.0  # seconds between plain lines
PLAIN = "{desc}: {n_fmt}/{total_fmt} ({percentage:.0f}%), {elapsed} so far, {remaining} left, {rate_fmt}{postfix}"


class Progress(tqdm):
    def __init__(self, *args, every: float = EVERY, **kwargs):
        stream = kwargs.get("file") or sys.stderr
        self.plain = not (hasattr(stream, "isatty") and stream.isatty())
        if self.plain:
            kwargs.update(mininterval=every, maxinterval=every, miniters=1, bar_format=PLAIN)
        super().__init__(*args, **kwargs)

    def display(self, msg=None, pos=None):
        if not self.plain:
            return super().display(msg, pos)
        if msg == "":  # tqdm clearing a bar that leaves nothing: a plain log keeps its last line instead
            return False
        self.fp.write((self.__str__() if msg is None else msg).strip() + "\n")
        self.fp.flush()
        return True

    def close(self):
        if self.plain and not self.disable and self.n != getattr(self, "last_print_n", self.n):
            self.display()  # the last count, once, whatever the interval
        super().close()
