"""A run folder is checked against the config before anything is written (runner/foreign.py):
the look-ahead (--dry-run, --print-jobs) on every committed folder under every committed config ends
without a traceback, and a refused command (pipeline.py, grpo.py's commands) leaves every byte of the
folder as it was, naming the setting a user fixes first (the model, then the task, then the rest)."""

import contextlib
import hashlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_runs import ROOT, grpo_cmd, pipeline

import pipeline as pipeline_py
from orchestration import config, provenance, study

pytestmark = pytest.mark.slow  # every committed folder, or copies of committed runs

CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))
RUNS = sorted(p for p in (ROOT / "results").iterdir() if p.is_dir())


def folder_bytes(run: Path) -> dict[str, str]:
    """Every file under `run` (the file list) with its sha256."""
    return {
        p.relative_to(run).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file()
    }


def analyze_b(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "analyze_b.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def look_ahead(cfg_name: str, run: Path, mode: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = pipeline_py.main(["--config", f"configs/{cfg_name}", "--run", str(run), mode])
    return rc, out.getvalue(), err.getvalue()


def foreign_selection(cfg: config.Config, run: Path) -> bool:
    """selection.json is there and records other select settings than cfg's (read here, not by the code under test)."""
    rec = provenance.read_json(run / "selection.json")
    return bool(rec) and provenance.hashed_settings(
        rec["provenance"]["config"], "select"
    ) != provenance.hashed_settings(config.to_dict(cfg), "select")


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_look_ahead_on_every_committed_folder_never_crashes(cfg_name, monkeypatch):
    """--dry-run and --print-jobs of every committed config on every committed run folder of another task
    (or with no manifest): exit 0, no traceback; a folder whose selection.json was made under other settings says so on the train row,
    and no training run's inputs are read from it (before: KeyError 'arith-2x1/train/103', exit 1)."""
    monkeypatch.chdir(ROOT)
    cfg = config.load(f"configs/{cfg_name}")
    read = []
    real = study.train_inputs
    monkeypatch.setattr(study, "train_inputs", lambda c, name, seed, run: read.append(run) or real(c, name, seed, run))
    for run in RUNS:
        made = (provenance.read_json(run / "manifest.json") or {}).get("config") or {}
        if made.get("task", {}).get("name") == cfg.task.name:
            continue  # one world's folders (the same problem ids) are left out for time: ~4 of ~5 minutes
        read.clear()
        shown = {}
        for mode in ("--dry-run", "--print-jobs"):
            rc, shown[mode], err = look_ahead(cfg_name, run, mode)
            assert rc == 0 and "Traceback" not in shown[mode] + err, f"{cfg_name} on {run.name} {mode}: {err[-2000:]}"
        if foreign_selection(cfg, run) and study.selection_sizes(cfg):
            out = shown["--dry-run"]
            rows = dict(x.split(None, 1) for x in out.splitlines() if x.startswith("  ") and x[2] != " ")
            assert "made under other settings" in rows["train"], (cfg_name, run.name, out)
            assert "the run would refuse before writing anything" in out
            assert "# stage train: " in shown["--print-jobs"] and "made under other settings" in shown["--print-jobs"]
            here = [r for r in read if Path(r).resolve() == run.resolve()]  # not the one-night line's report plan
            assert not here, f"{cfg_name} on {run.name}: read a selection.json made under other settings"


def test_a_refused_pipeline_or_command_leaves_every_byte(tmp_path):
    """The smoke config into a copy of results/smollm2_study (a weightless SmolLM2 base, other task): the
    pipeline, one stage of it and each grpo.py command refuse in the same one line, exit 2, naming
    model.build (the model first), and every file's bytes and the file list are as before (before: the
    base moved aside as damaged, the toy base built, probe files written, then eval.draw named)."""
    run = shutil.copytree(ROOT / "results" / "smollm2_study", tmp_path / "run")
    before = folder_bytes(run)
    smoke = ["--config", "configs/smoke.yaml", "--run", str(run)]
    lines = set()
    for r in [pipeline(*smoke, "--quiet", timeout=300), pipeline(*smoke, "--stage", "eval", "--quiet", timeout=300)]:
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
        assert r.stderr.startswith("pipeline.py: ")
        lines.add(r.stderr.strip()[len("pipeline.py: ") :])
    for cmd in (["eval"], ["probe"], ["select"], ["train", "--condition", "many"]):
        r = grpo_cmd(cmd[0], *smoke, *cmd[1:], "--quiet", timeout=300)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
        lines.add(r.stderr.strip()[len("grpo.py: ") :])
    r = analyze_b("--run", str(run), "--config", "configs/smoke.yaml")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    lines.add(r.stderr.strip()[len("analyze_b.py: ") :])
    assert len(lines) == 1, lines  # the same line from every entry script
    line = lines.pop()
    made = f"{run} was made by configs/smollm2_study.yaml (its manifest), not configs/smoke.yaml; "
    assert line.startswith(f"{made}{run / 'base_model' / 'build.json'}: made under model.build=null there"), line
    assert folder_bytes(run) == before


def test_the_refusal_names_the_task_before_the_rest(tmp_path):
    """Two settings changed on a copy of results/tiny_v5, task.prompt_style and eval.sampling.top_p: the
    refusal names the task's (before: probe's eval.sampling.top_p, the first stage's first key by name);
    grpo.py eval of the base refuses on the same line; the folder is unchanged."""
    run = shutil.copytree(ROOT / "results" / "tiny_v5", tmp_path / "run", ignore=shutil.ignore_patterns("figures"))
    before = folder_bytes(run)
    sets = ["--set", "task.prompt_style=instruct", "--set", "eval.sampling.top_p=0.9"]
    r = pipeline("--config", "configs/tiny_v5.yaml", "--run", str(run), *sets, "--quiet", timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert ': made under task.prompt_style="bare" there, "instruct" here' in r.stderr, r.stderr
    assert "was made by" not in r.stderr  # its own config: nothing to name
    g = grpo_cmd("eval", "--config", "configs/tiny_v5.yaml", "--run", str(run), *sets, timeout=300)
    assert g.returncode == 2 and g.stderr.strip()[len("grpo.py: ") :] == r.stderr.strip()[len("pipeline.py: ") :], (
        g.stderr
    )
    assert folder_bytes(run) == before
    d = pipeline("--config", "configs/tiny_v5.yaml", "--run", str(run), *sets, "--dry-run", timeout=300)
    assert d.returncode == 0 and 'task.prompt_style="bare" there' in d.stdout, d.stdout


def test_an_evaluation_by_hand_refuses_a_folder_of_another_config(tmp_path):
    """grpo.py eval of the base, under the smoke config, into a copy of results/tiny_v4 (its base's weights
    are there, so it could run): the pipeline's refusal, exit 2, eval_base.json and every other byte as
    they were (before: the tiny base evaluated on smoke's test set, eval_base.json moved aside, exit 0)."""
    run = shutil.copytree(
        ROOT / "results" / "tiny_v4",
        tmp_path / "run",
        ignore=shutil.ignore_patterns("train_*", "evalsets", "figures", "tokens_*", "eval_*_s*", "lr_sweep"),
    )
    before = folder_bytes(run)
    g = grpo_cmd("eval", "--config", "configs/smoke.yaml", "--run", str(run), "--quiet", timeout=300)
    p = pipeline("--config", "configs/smoke.yaml", "--run", str(run), "--stage", "eval", timeout=300)
    assert g.returncode == p.returncode == 2, g.stderr[-2000:]
    assert g.stderr.strip()[len("grpo.py: ") :] == p.stderr.strip()[len("pipeline.py: ") :], (g.stderr, p.stderr)
    assert "made under model.build." in g.stderr
    assert folder_bytes(run) == before


def test_an_analysis_by_hand_checks_against_the_config_it_is_given(tmp_path):
    """analyze_b.py --config with the run's own config analyses (the check passes a folder made under it);
    --set without --config is a usage error, exit 2, nothing written."""
    run = shutil.copytree(
        ROOT / "results" / "smollm2_study", tmp_path / "run", ignore=shutil.ignore_patterns("figures")
    )
    (run / "verdicts.json").unlink()
    r = analyze_b("--run", str(run), "--set", "analyze.resamples=50")
    assert r.returncode == 2 and "--set needs --config" in r.stderr and not (run / "verdicts.json").exists()
    r = analyze_b("--run", str(run), "--config", "configs/smollm2_study.yaml", "--resamples", "50", "--no-figures")
    assert r.returncode == 0 and (run / "verdicts.json").exists(), r.stderr[-2000:]


OWN = {
    "smollm2_study": "smollm2_study.yaml",
    "smollm2": "smollm2.yaml",
    "tiny_v5": "tiny_v5.yaml",
    "tiny_v4": "tiny_skill.yaml",
    "tiny_v3": "tiny.yaml",
    "tiny_v6": "tiny_v6.yaml",
    "tiny_v7": "tiny_v7.yaml",
    "tiny_v8": "tiny_v8.yaml",
}  # each committed run whose config is committed as it made it (results/README.md)


@pytest.mark.parametrize("name", sorted(OWN))
def test_a_committed_run_reads_done_under_its_own_config(name, monkeypatch):
    """--dry-run on a committed run with its own config: every stage done, no job left; where weights are
    not committed (smollm2_study's 8 training runs, its base) the row says so and what remaking them costs
    (before: "train 8 without their weights (would be remade)", "eval 3 done, 8 out of date", 16 jobs)."""
    monkeypatch.chdir(ROOT)
    run = ROOT / "results" / name
    rc, out, err = look_ahead(OWN[name], run, "--dry-run")
    rows = dict(x.split(None, 1) for x in out.splitlines() if x.startswith("  ") and x[2] != " ")
    assert rc == 0 and "0 train/eval jobs left" in out, out + err
    assert all(v == "done" or v.startswith("done; ") for k, v in rows.items() if k[0].isalpha() and k != "0"), out
    weightless = [d for d in run.glob("train_*") if d.is_dir() and not list(d.glob("step_*/adapter_model.safetensors"))]
    assert (f"the weights of {len(weightless)} training run(s) are not committed" in rows["train"]) == bool(
        weightless
    ), out
    assert ("its weights are not committed" in rows.get("base", "")) == (
        not (run / "base_model" / "model.safetensors").exists()
    )


def test_the_pipeline_on_a_committed_run_changes_nothing(tmp_path):
    """The pipeline with its own config on a copy of results/smollm2_study (no weights committed): every
    stage done and skipped, exit 0, every file byte for byte as it was, manifest.json too (before: the base
    and 8 training runs moved aside and remade, 8 evaluations redone; later the manifest rewritten)."""
    run = shutil.copytree(ROOT / "results" / "smollm2_study", tmp_path / "run")
    before = folder_bytes(run)
    r = pipeline("--config", "configs/smollm2_study.yaml", "--run", str(run), "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert folder_bytes(run) == before  # the manifest too (before: rewritten, +240/-10 lines)


DEFAULT_COMMITTED = [c for c in CONFIGS if study.committed_run(study.default_run(c))]


@pytest.mark.parametrize("cfg_name", DEFAULT_COMMITTED)
def test_leaving_out_run_never_touches_a_committed_run(cfg_name, monkeypatch, capsys):
    """pipeline.py and grpo.py's commands without --run, where results/<config name> is a committed run: refused
    in one line (exit 2) that proposes results/my_<name>, and not one byte under results/ changes."""
    monkeypatch.chdir(ROOT)
    stem = Path(cfg_name).stem
    before = folder_bytes(ROOT / "results" / stem)
    assert pipeline_py.main(["--config", f"configs/{cfg_name}", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--run results/my_{stem}" in err, err
    r = grpo_cmd("probe", "--config", f"configs/{cfg_name}", timeout=120)
    assert r.returncode == 2 and f"--run results/my_{stem}" in r.stderr, r.stderr
    assert folder_bytes(ROOT / "results" / stem) == before
    assert pipeline_py.main(["--config", f"configs/{cfg_name}", "--dry-run"]) == 0  # the plan reads, writes nothing
    assert folder_bytes(ROOT / "results" / stem) == before


def test_a_default_folder_that_is_not_a_committed_run_is_free():
    assert len(DEFAULT_COMMITTED) >= 7  # smollm2, smollm2_study, smollm2_v2, smollm2_v2_pilot, tiny_v5, tiny_v6, ...
    assert study.default_run_refusal("configs/smoke.yaml") is None  # results/smoke: no such committed run


def test_the_readme_names_the_runs_whose_weights_are_committed():
    """README's note on committed weights is `git ls-files results | grep safetensors`, folder by folder."""
    import subprocess

    files = subprocess.run(
        ["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    weights = [f.split("/") for f in files if f.endswith(".safetensors")]
    base = sorted({p[1] for p in weights if p[2] == "base_model"})
    adapters = sorted({p[1] for p in weights if p[2].startswith("train_")} - set(base))

    def listed(xs):
        return ", ".join(f"`{x}`" for x in xs[:-1]) + (" and " if len(xs) > 1 else "") + f"`{xs[-1]}`"

    said = (
        f"results/ keeps the base and adapter weights of {listed(base)}, the adapter weights of {listed(adapters)}, "
        "and no weights of the other runs"
    )
    assert said in " ".join((ROOT / "README.md").read_text().split())


def test_a_checkpoint_that_is_not_there_names_those_that_are(tmp_path):
    """grpo.py eval --adapter RUN/train_many_s0/step_100 where the run saved steps 3 and 6: one line naming
    step_003 and step_006, exit 2, nothing written (before: "adapter_config.json: missing", and advice
    to retrain the run)."""
    run = tmp_path / "run"
    for step in ("step_003", "step_006"):
        shutil.copytree(ROOT / "results" / "tiny_v5" / "train_many_s0" / "step_100", run / "train_many_s0" / step)
    before = folder_bytes(run)
    r = grpo_cmd(
        "eval",
        "--config",
        "configs/smoke.yaml",
        "--run",
        str(run),
        "--adapter",
        str(run / "train_many_s0" / "step_100"),
        timeout=120,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.strip().endswith(f"no such checkpoint; {run / 'train_many_s0'} holds step_003, step_006"), r.stderr
    assert "retrain" not in r.stderr and folder_bytes(run) == before


def test_analysis_faults_end_alike_in_every_entry_script(tmp_path):
    """The same fault, the same exit code (README's table): an evaluation file cut short, and one whose
    counts exceed its samples, in a copy of results/smollm2_study: `pipeline.py --stage analyze` and
    `analyze_b.py --run` both exit 2 (before: analyze_b.py 1 for both, the pipeline 1 for the second)."""
    import subprocess
    import sys

    from pipeline_runs import ENV

    def analyze_b(*args):
        return subprocess.run(
            [sys.executable, str(ROOT / "analyze_b.py"), *args],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=300,
        )

    codes = dict(
        line.split(" | ")[0:2]
        for line in (x.strip("| ") for x in (ROOT / "README.md").read_text().splitlines())
        if line.split(" | ")[0].isdigit()
    )
    assert sorted(map(int, codes)) == [0, 1, 2, 3, 130] and codes["2"].startswith("a fault in what was given")
    assert study.EXIT_OUT_OF_MEMORY == 3 and codes["3"].startswith("out of memory")
    for fault in ("cut short", "counts above n"):
        run = shutil.copytree(ROOT / "results" / "smollm2_study", tmp_path / fault.replace(" ", "_"))
        f = run / "eval_many_s0_030.json"
        if fault == "cut short":
            f.write_bytes(f.read_bytes()[:200])
        else:
            d = json.loads(f.read_text())
            d["problems"][0]["correct_strict"] = 10**6
            f.write_text(json.dumps(d))
        p = pipeline(
            "--config", "configs/smollm2_study.yaml", "--run", str(run), "--stage", "analyze", "--quiet", timeout=300
        )
        a = analyze_b("--run", str(run), "--no-figures")
        assert (p.returncode, a.returncode) == (2, 2), (fault, p.stderr[-1500:], a.stderr[-1500:])
        assert len(a.stderr.strip().splitlines()) == 1 and "eval_many_s0_030.json" in a.stderr


def test_an_evaluation_written_elsewhere_is_checked_against_the_base_alone(tmp_path):
    """Issue 68: grpo.py eval --out ELSEWHERE under another sampler was refused over a probe file it neither reads
    nor writes; it runs, writes only --out, and the folder is unchanged. Another base still refuses."""
    run = shutil.copytree(
        ROOT / "results" / "tiny_v7", tmp_path / "run", ignore=shutil.ignore_patterns("figures", "evalsets", "eval_*")
    )
    weights = ROOT / "results" / "tiny_v4" / "base_model" / "model.safetensors"  # tiny_v7's base (by sha256), committed
    shutil.copyfile(weights, run / "base_model" / "model.safetensors")  # a fresh clone has no copy in tiny_v7
    before = folder_bytes(run)
    sets = ["eval.sampling.temperature=0.8", "eval.n=1", "eval.k_max=1", "eval.base_support=false"]
    sets += ["eval.within_correct=false", "analyze.within_correct=null", "analyze.base_support=null"]

    def evaluate_elsewhere(out: str, *more: str):
        adapter = str(run / "train_many_s2000" / "step_100")
        setting = [x for kv in [*sets, *more] for x in ("--set", kv)]
        argv = ["--config", "configs/tiny_v7.yaml", "--run", str(run), "--adapter", adapter, *setting]
        return grpo_cmd("eval", *argv, "--out", str(tmp_path / out), "--quiet", timeout=300)

    g = evaluate_elsewhere("elsewhere.json")
    assert g.returncode == 0, g.stderr[-2000:]
    assert (tmp_path / "elsewhere.json").exists() and folder_bytes(run) == before
    g = evaluate_elsewhere("other.json", "model.build.hidden=64")
    assert g.returncode == 2 and "base_model/build.json: made under model.build" in g.stderr, g.stderr[-2000:]
