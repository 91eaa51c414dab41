"""How an entry script ends when it is interrupted (README: exit codes): SIGTERM and SIGHUP as Ctrl-C,
one line, exit 130; a signal its parent ignored stays ignored; analyze_b.py takes its --out folder away.
grpo.py and pipeline.py by a real signal: tests/test_pipeline.py."""

import json
import signal
import subprocess
import sys

import pytest

import analyze_b
from orchestration import cli
from runner import jobs

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.fixture
def handlers():
    """The handlers these tests change, put back after each (pytest needs its Ctrl-C)."""
    saved = {sig: signal.getsignal(sig) for sig in cli.SIGNALS}
    yield
    for sig, h in saved.items():
        signal.signal(sig, h)


def test_sigterm_and_sighup_interrupt_unless_the_parent_ignored_them(handlers):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a command
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cli.interrupt_on_signals()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)


def test_the_line_is_one_and_the_code_130(handlers, capsys):
    assert cli.interrupted("grpo.py eval", "run the same command again: x") == 130
    err = capsys.readouterr().err
    assert err == "grpo.py eval: interrupted (Ctrl-C or a signal); run the same command again: x\n"
    assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL  # a second Ctrl-C ends the teardown


def test_analyze_b_interrupted_takes_its_out_folder_away(handlers, tmp_path, monkeypatch, capsys):
    run = ROOT / "results" / "tiny_v5"
    from analysis import assemble

    def interrupt(target, *a, **kw):
        assert (target / "manifest.json").exists()  # the copy was made: the interruption comes after it
        raise KeyboardInterrupt

    monkeypatch.setattr(assemble, "run_analysis", interrupt)
    out = tmp_path / "new"
    monkeypatch.setattr(sys, "argv", ["analyze_b.py", "--run", str(run), "--out", str(out), "--no-figures"])
    assert analyze_b.entry() == 130
    assert not out.exists()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("analyze_b.py: interrupted (Ctrl-C or a signal)"), lines
    json.loads((run / "verdicts.json").read_text())  # the run it read is as it was


def test_a_pipeline_job_names_grpo_py_in_its_argument_errors(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pipeline.py"])
    assert jobs.run_grpo(["train", "--no-such-flag"]) == 2
    assert capsys.readouterr().err.startswith("grpo.py train: ")  # not pipeline.py


def test_grpo_py_interrupted_while_loading_torch_ends_in_the_line():
    """SIGTERM before the command has loaded (its imports take seconds): the line, exit 130."""
    code = (
        "import signal, sys, runpy, builtins; real = builtins.__import__\n"
        "def imp(name, *a, **k):\n"
        "    if name == 'runner': signal.raise_signal(signal.SIGTERM)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = imp; sys.argv = ['grpo.py', 'eval']\n"
        "runpy.run_path('grpo.py', run_name='__main__')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 130, r.stderr
    assert r.stderr == "grpo.py: interrupted (Ctrl-C or a signal); nothing was written\n"
