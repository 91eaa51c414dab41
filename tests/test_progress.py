"""orchestration/progress.py: a bar on a terminal, plain lines in a redirected log."""

import io

from orchestration.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_redirected_log_gets_whole_lines_and_the_last_count():
    log = io.StringIO()
    with Progress(total=50, desc="eval", unit="sample", file=log, every=3600, leave=False) as bar:
        for _ in range(5):
            bar.update(10)
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert lines[0].startswith("eval: 0/50 (0%)") and lines[-1].startswith("eval: 50/50 (100%)")
    assert len(lines) == 2  # nothing in between: the interval (an hour) never passed


def test_a_terminal_gets_tqdms_redrawn_bar():
    term = Terminal()
    with Progress(total=5, desc="eval", file=term, leave=False, mininterval=0) as bar:
        for _ in range(5):
            bar.update(1)
    assert "\r" in term.getvalue() and "|" in term.getvalue()


def test_disabled_writes_nothing():
    log = io.StringIO()
    for _ in Progress(range(3), file=log, disable=True):
        pass
    assert log.getvalue() == ""
