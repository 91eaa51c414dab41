"""orchestration/study.py: seeds, the run folder's names and their parsers, what each stage reads; and the stage
hashes of orchestration/provenance.py that decide what is done."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import countdown
from bases import tiny_base
from orchestration import config, provenance, study

ROOT = Path(__file__).resolve().parents[1]


def test_seed_for_is_the_documented_hash_of_its_parts():
    for parts in [(0, "train", "many", 1), (2, "lora-init"), ("x",)]:
        digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
        assert study.seed_for(*parts) == int.from_bytes(digest[:8], "big") >> 1  # the same on every machine and Python
    assert study.seed_for(0, "train", "many", 1) != study.seed_for(0, "train", "many", 2)
    assert 0 <= study.seed_for("x") < 2**63


@pytest.mark.parametrize("cond, seed, step", [("many", 0, 50), ("16-kl", 2, 100), ("4", 11, 3), ("a-b-c", 1, 1500)])
def test_every_name_parses_back_to_what_made_it(tmp_path, cond, seed, step):
    adapter = study.adapter_dir(tmp_path, cond, seed, step)
    assert adapter == tmp_path / f"train_{cond}_s{seed}" / f"step_{step:03d}"
    assert study.adapter_identity(adapter) == {"condition": cond, "train_seed": seed, "step": step}
    m = study.EVAL_FILE.match(study.adapter_eval_name(adapter))
    assert (m["cond"], int(m["seed"]), int(m["step"])) == (cond, seed, step)
    m = study.TOKENS_FILE.match(study.adapter_tokens_name(adapter))
    assert (m["cond"], int(m["seed"]), int(m["step"])) == (cond, seed, step)
    m = study.TRAIN_DIR.match(study.train_name(cond, seed))
    assert (m["cond"], int(m["seed"])) == (cond, seed)
    m = study.TRAIN_DIR.match(study.train_name(cond, seed, legacy=True))  # single-seed runs: train_<cond>
    assert (m["cond"], m["seed"]) == (cond, None)
    assert study.EVAL_FILE_V1.match(study.eval_name(cond, seed, step, legacy=True))["cond"] == cond
    assert study.adapter_eval_name(None) == "eval_base.json"
    assert (
        study.eval_dir(tmp_path, "test") == tmp_path
        and study.eval_dir(tmp_path, "wide") == tmp_path / "evalsets" / "wide"
    )


def test_a_foreign_adapter_folder_has_no_name_and_says_so(tmp_path):
    assert study.adapter_identity(tmp_path / "my_adapter") == {"condition": None, "train_seed": None, "step": None}
    with pytest.raises(config.ConfigError, match="pass --out FILE"):
        study.adapter_eval_name(tmp_path / "my_adapter")


# every module of the two groups that say they need no torch, and the entry points that run on them alone
NO_TORCH = ["countdown", "analyze_b", "pipeline"] + [
    f"{g}.{p.stem}"
    for g in ("analysis", "orchestration")
    for p in sorted((ROOT / g).glob("*.py"))
    if p.stem != "__init__"
]


def test_the_no_torch_modules_import_with_torch_blocked():
    """Each module that says it needs no torch imports with torch and transformers made unimportable."""
    # a finder that refuses them, as an environment without them would (sys.modules[...] = None would
    # also break scipy.stats, which looks torch up in sys.modules to recognise its arrays)
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers'):\n"
        "            raise ImportError(f'{name} blocked')\n"
        "sys.meta_path.insert(0, Block()); sys.path.insert(0, '.')\n"
        + "".join(f"import {m}\n" for m in NO_TORCH)
        + "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-800:]


def test_dry_run_and_print_jobs_import_no_torch(tmp_path):
    for flag in ("--dry-run", "--print-jobs"):
        code = (
            "import sys, runpy; sys.modules['torch'] = None; sys.modules['transformers'] = None; sys.path.insert(0, '.'); "
            f"sys.argv = ['pipeline.py', '--config', 'configs/smoke.yaml', '--out', {str(tmp_path / 'run')!r}, '{flag}']; "
            "runpy.run_path('pipeline.py', run_name='__main__')"
        )
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-800:]
        assert ("grpo.py train" if flag == "--print-jobs" else "\n  train ") in out.stdout, out.stdout


def test_pretrain_and_dev_splits_are_disjoint_and_leave_train():
    """Pretrain and dev splits are disjoint and leave train and test alone."""
    d = countdown.draw_splits("arith-2x1", 0, {"test": 128, "train": 4000, "pretrain": 4000, "dev": 64})
    qs = {k: {p.question for p in v} for k, v in d.items()}
    assert [len(qs[k]) for k in ("test", "train", "pretrain", "dev")] == [128, 4000, 4000, 64]
    for a in qs:
        for b in qs:
            assert a == b or not (qs[a] & qs[b]), (a, b)
    train, test = countdown.make_splits("arith-2x1", 4000, 128, 0)
    assert train == d["train"] and test == d["test"]  # adding later splits changes nothing before them
    pre = tiny_base.pretrain_problems("arith-2x1", 4000, 128, 0, 4000)
    assert pre == d["pretrain"]


def test_learning_rate_sources(tmp_path):
    """A condition's own lr, else train.lr, else the sweep's choice (its own with per_condition)."""
    cfg = config.load(None, ["conditions.many.lr=0.5"])
    assert study.read_lr(cfg, tmp_path, "many") == 0.5
    with pytest.raises(FileNotFoundError, match="lr_choice.json"):
        study.read_lr(cfg, tmp_path, "16")
    (tmp_path / "lr_choice.json").write_text(json.dumps({"chosen": 0.01, "per_condition": {"16": 0.02}}))
    assert study.read_lr(cfg, tmp_path, "16") == 0.01  # the single-rate rule (the default)
    cfg = config.load(None, ["lr_sweep.per_condition=true", "conditions.sft.lr=0.001"])  # sft sweeps nothing
    assert study.read_lr(cfg, tmp_path, "16") == 0.02 and study.read_lr(cfg, tmp_path, "sft") == 0.001
    with pytest.raises(FileNotFoundError, match="no rate for condition 1"):
        study.read_lr(cfg, tmp_path, "1")
    assert (
        config.load(None, ["train.lr=0.003"]).train.lr == 0.003
        and study.read_lr(config.load(None, ["train.lr=0.003"]), tmp_path, "1") == 0.003
    )


def test_an_output_records_both_plan_files_and_no_stage_hash_reads_them(smoke_cfg, tmp_path, monkeypatch):
    """provenance.record holds PLAN.md's sha256 (plan_sha256) and PLAN_CHANGES.md's (changes_sha256), each
    the file's bytes hash; a new change-log entry or rule text changes them and no stage hash."""
    rec = provenance.record(smoke_cfg, "eval")
    assert rec["plan_sha256"] == hashlib.sha256((ROOT / "PLAN.md").read_bytes()).hexdigest()
    assert rec["changes_sha256"] == hashlib.sha256((ROOT / "PLAN_CHANGES.md").read_bytes()).hexdigest()
    hashes = {st: provenance.stage_hash(smoke_cfg, st) for st in provenance.STAGE_KEYS}
    (tmp_path / "PLAN.md").write_text("rules\n")
    (tmp_path / "PLAN_CHANGES.md").write_text("1. **2026-01-01 — a change.**\n")
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    other = provenance.record(smoke_cfg, "eval")
    assert other["plan_sha256"] == hashlib.sha256(b"rules\n").hexdigest() != rec["plan_sha256"]
    assert other["changes_sha256"] != rec["changes_sha256"] and other["stage_hash"] == rec["stage_hash"]
    assert {st: provenance.stage_hash(smoke_cfg, st) for st in provenance.STAGE_KEYS} == hashes


def test_new_switches_left_off_keep_old_hashes_and_turned(smoke_cfg):
    """New switches left off keep old hashes and turned on change them."""
    d = config.to_dict(smoke_cfg)
    old = {
        **d,
        "lora": {k: v for k, v in d["lora"].items() if k != "fold_for_sampling"},
        "train": {k: v for k, v in d["train"].items() if k != "sort_by_length"},
    }  # a config from before the keys existed
    for stage in ("train", "eval", "lr-sweep"):
        assert provenance.hashed_settings(old, stage) == provenance.hashed_settings(d, stage)
    on = config._build(config.Config, {**d, "lora": {**d["lora"], "fold_for_sampling": True}})
    assert provenance.stage_hash(on, "eval") != provenance.stage_hash(smoke_cfg, "eval")
    assert provenance.stage_hash(on, "train") != provenance.stage_hash(smoke_cfg, "train")
    assert "lora.fold_for_sampling=false there, true here" == provenance.differing_setting({"config": d}, on, "eval")
    srt = config._build(config.Config, {**d, "train": {**d["train"], "sort_by_length": True}})
    assert provenance.stage_hash(srt, "train") != provenance.stage_hash(smoke_cfg, "train")
    assert provenance.stage_hash(srt, "eval") == provenance.stage_hash(smoke_cfg, "eval")


@pytest.mark.parametrize(
    "entry, argv, names",
    [
        ("pipeline", ["--config", "configs/smoke.yaml", "--stage", "nope"], "argument --stage: invalid choice: 'nope'"),
        ("grpo", ["frob"], "invalid choice: 'frob'"),
        ("analyze_b", [], "give one of --run RUN (analyse), --report-only RUN (print its report again), --summary RUN"),
    ],
)
def test_a_wrong_argument_ends_in_one_line(entry, argv, names, capsys):
    """orchestration/cli.Parser: argparse's usage block is not printed; one line names the argument and the
    right values, exit 2."""
    import importlib

    with pytest.raises(SystemExit) as e:
        importlib.import_module(entry).main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and names in err[0] and err[0].endswith("--help)"), err
