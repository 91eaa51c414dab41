"""runner/parts.py (pipeline.py --until / --hours; bench/study_part.py at its cited path): what a part of a study
runs (from --print-jobs) and how it stops at its deadline."""

import shlex
import signal
import time
from pathlib import Path

from runner import parts as study_part

ROOT = Path(__file__).resolve().parents[1]


def test_a_seed_is_its_training_run_with_its_adapters_evaluations_and_the_base_evaluations_resume(tmp_path):
    """configs/smollm2_v2.yaml on an empty folder whose path has a space: step 1, 16 seeds each trained then evaluated on both
    sets (in that order), and the base's three evaluations (test, pool-train, matched) as resumable."""
    run = tmp_path / "my run"  # --print-jobs quotes a path with a space for the shell
    first, seeds, resumable = study_part.left("configs/smollm2_v2.yaml", str(run))
    assert [c.split("--stage ")[1] for c in first] == ["base", "probe", "select"]
    assert [name for name, _ in seeds] == [f"many_s{s}" for s in range(200, 216)]
    name, commands = seeds[3]
    assert name == "many_s203" and len(commands) == 3
    assert commands[0].startswith("python grpo.py train") and commands[0].endswith("--condition many --seed 203")
    assert all(shlex.quote(str(run / "train_many_s203/step_030")) in c for c in commands[1:])
    assert "--eval-set matched" in commands[2] and "--eval-set" not in commands[1]
    assert [n for n, _ in resumable] == ["eval_base", "eval_base_pool-train", "eval_base_matched"]
    assert not any("--adapter" in c for _, c in resumable)


def test_a_resumable_job_gets_sigint_at_the_deadline_and_the_part_log_says_so(tmp_path):
    """A job that would run 60 s, with the deadline 1 s away, is stopped by SIGINT and counts as ended
    well, whether it exits 130 as grpo.py does or dies of the signal as grpo.py did before it caught one (-2);
    a job that fails, or exits 130 without being stopped, or cannot start marks the part failed; the log
    names each."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a script starts: SIGINT ignored
    try:
        part = study_part.Part(tmp_path / "run", deadline=time.time() + 1, train_s=3600)
    finally:
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored, so its jobs stop
    dies = "python -c 'import time; time.sleep(60)'"
    exits = "python -c 'import time\ntry:\n time.sleep(60)\nexcept KeyboardInterrupt:\n raise SystemExit(130)'"
    t0 = time.time()
    assert part.job(dies, "eval_base", resumable=True)
    part.deadline = time.time() + 1  # past it, SIGINT would come before the child's handler is set
    assert part.job(exits, "eval_base_matched", resumable=True)
    assert not part.failed and time.time() - t0 < 30
    log = (tmp_path / "run/parts/part_1.log").read_text()
    assert "end eval_base rc=-2" in log and "end eval_base_matched rc=130" in log and log.count("it resumes") == 2
    assert not part.job("python -c 'raise SystemExit(130)'", "many_s200_0", resumable=False) and part.failed
    part.failed = False
    assert not part.job("python -c 'raise SystemExit(3)'", "many_s200_1", resumable=False) and part.failed
    part.failed = False
    assert not part.job("no-such-program --x", "many_s200_2", resumable=False) and part.failed
    log = (tmp_path / "run/parts/part_1.log").read_text()
    assert "end many_s200_1 rc=3" in log and "end many_s200_2: could not start" in log
    assert (tmp_path / "run/parts/part_1/eval_base.out").exists()
    assert study_part.Part(tmp_path / "run", time.time(), 1).log_file.name == "part_2.log"


def test_a_training_run_is_taken_as_long_as_the_longest_a_part_measured(tmp_path):
    """Only `grpo.py train` jobs that ended well count (part 2 of smollm2_v3's log, shortened): an evaluation,
    a failed training run and a stopped one do not; none before the first."""
    parts = tmp_path / "run" / "parts"
    parts.mkdir(parents=True)
    assert study_part.measured_train_s(tmp_path / "run") is None
    (parts / "part_1.log").write_text(
        "2026-12-07 17:44:43 start eval_base_matched: python grpo.py eval --config c.yaml --run r --eval-set matched\n"
        "2026-12-07 17:44:43 start many_s300_0: python grpo.py train --config c.yaml --run r --condition many --seed 300\n"
        "2026-12-07 18:05:40 end eval_base_matched rc=0 in 1257 s\n"
        "2026-12-07 18:05:40 start many_s301_0: python grpo.py train --config c.yaml --run r --condition many --seed 301\n"
        "2026-12-07 18:23:05 end many_s300_0 rc=0 in 2303 s\n"
        "2026-12-07 18:45:42 end many_s301_0 rc=0 in 2402 s\n"
    )
    (parts / "part_2.log").write_text(
        "x start many_s302_0: python grpo.py train --config c.yaml --run r --condition many --seed 302\n"
        "x end many_s302_0 rc=1 in 9000 s\n"
        "x start eval_base: python grpo.py eval --config c.yaml --run r\nx end eval_base rc=0 in 9999 s\n"
    )
    assert study_part.measured_train_s(tmp_path / "run") == 2402


def test_a_seed_is_admitted_by_its_training_and_its_evaluations_resume():
    """A seed still to train needs its training's length before the deadline; one already trained needs none.
    Its evaluations resume across parts (SIGINT at the deadline); its training and token comparisons do not."""
    train = "python grpo.py train --config c.yaml --run r --condition many --seed 300"
    ev = "python grpo.py eval --config c.yaml --run r --adapter r/train_many_s300/step_030"
    tok = "python grpo.py tokens --config c.yaml --run r --adapter r/train_many_s300/step_030"
    assert study_part.trains([train, ev]) and not study_part.trains([ev]) and not study_part.trains([])
    assert [study_part.resumes(c) for c in (train, ev, tok)] == [False, True, False]
    assert study_part.admits([train, ev], 0, 2400, 2400) and not study_part.admits([train, ev], 1, 2400, 2400)
    assert study_part.admits([ev], 2399, 2400, 2400)  # trained: its evaluations start while time is left


def test_token_comparisons_go_with_their_seed_and_the_analysis_is_not_a_job(tmp_path):
    """The smoke config (tokens on, a learning-rate sweep): every `grpo.py tokens` line is in its seed's
    unit after that seed's training command, step 1 ends with the sweep, and the pipeline's own last line
    (the analysis) is no job of a part."""
    first, seeds, resumable = study_part.left("configs/smoke.yaml", str(tmp_path / "run"))
    assert first[-1].endswith("--stage lr-sweep")
    tokens = [(name, c) for name, cs in seeds for c in cs if c.startswith("python grpo.py tokens")]
    assert tokens and all(f"train_{name}/" in c for name, c in tokens)
    assert all(cs[0].startswith("python grpo.py train") for _, cs in seeds)
    assert not any(c.startswith("python pipeline.py") for _, cs in seeds for c in cs)
    assert all(c.startswith("python grpo.py eval") and "--adapter" not in c for _, c in resumable)


def test_pipeline_until_runs_a_part_and_refuses_what_a_part_cannot_take(tmp_path, capsys, monkeypatch):
    """pipeline.py --until hands the config, run, jobs and deadline to runner/parts.main; with --set it refuses in
    one line (a part runs the config as written); bench/study_part.py, the cited path, is the same main."""
    import pipeline

    seen = []
    monkeypatch.setattr(study_part, "main", lambda argv: seen.append(argv) or 0)
    run = str(tmp_path / "r")
    assert pipeline.main(["--config", "configs/smoke.yaml", "--run", run, "--until", "03:48", "--jobs", "2"]) == 0
    assert seen == [
        ["--config", "configs/smoke.yaml", "--run", run, "--jobs", "2", "--train-hours", "1.0", "--until", "03:48"]
    ]
    assert (
        pipeline.main(["--config", "configs/smoke.yaml", "--run", run, "--hours", "2", "--set", "train.lr=0.001"]) == 2
    )
    assert "no --set, --stage, --force, --dry-run" in capsys.readouterr().err
    assert pipeline.main(["--config", "configs/smoke.yaml", "--run", run, "--until", "03:48", "--dry-run"]) == 2
    assert len(seen) == 1  # a part that was asked for a plan starts nothing
    assert "from runner.parts import main" in (ROOT / "bench" / "study_part.py").read_text()
