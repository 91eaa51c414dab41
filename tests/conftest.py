"""Shared fixtures: tiny offline Qwen2-architecture models, and a finished small study on the smoke
config (read only: a test that changes it works on a copy). Nothing here touches the network."""

import os
import shutil
import sys
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402  (after the environment above)
from pipeline_runs import (  # noqa: E402  (tests/pipeline_runs.py: the small study below runs pipeline.py)
    SMOKE,
    pipeline,
)
from transformers.utils import logging as hf_logging  # noqa: E402

from bases import tiny_base  # noqa: E402
from method import static_decode  # noqa: E402
from orchestration import config, provenance  # noqa: E402

torch.set_num_threads(1)
# as method.model.setup_torch does for every stage: no "Loading weights" bars in the tests' stderr,
# whichever fixture happened to load a model first
hf_logging.disable_progress_bar()


@pytest.fixture(scope="session")
def smoke_cfg():
    return config.load(str(ROOT / "configs" / "smoke.yaml"))


@pytest.fixture(scope="session")
def random_dir(tmp_path_factory):
    """A randomly initialised tiny Qwen2 model with the character tokenizer (scores 0 everywhere)."""
    d = tmp_path_factory.mktemp("random_model")
    tok = tiny_base.build_tokenizer()
    b = config.TinyBaseCfg(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64)
    tiny_base.random_model(tok, b, seed=0).save_pretrained(d)
    tiny_base.save_tokenizer(tok, d)
    return d


@pytest.fixture(scope="session")
def fitted_dir(tmp_path_factory, smoke_cfg, worker_id):
    """The smoke configuration's base, fitted for ~20 s on 1-digit traces: it sometimes answers
    right, so strict rewards vary inside groups and GRPO has signal. Built once per test session and
    shared, read-only, by the xdist workers (`shared`)."""

    def build(d: Path) -> Path:
        # recorded with the base stage's hash, so the pipeline accepts a copy of it as its own base
        tiny_base.train_base(smoke_cfg, d, progress=False, stage_hash=provenance.stage_hash(smoke_cfg, "base"))
        return d

    return shared(tmp_path_factory, worker_id, "fitted", lambda f: build(f / "base_model")) / "base_model"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: a test file that runs whole pipelines or real weights (left out by -m 'not slow')"
    )


def shared(tmp_path_factory, worker_id: str, name: str, build) -> Path:
    """`build(folder)` made once per test session at one path that every xdist worker reads: the first worker
    to take the lock builds it and marks it done; a folder left unmarked by a failed build is built again.
    Without xdist, a folder of this process's own. The result is read only (a test that changes it copies it)."""
    if worker_id == "master":
        build(d := tmp_path_factory.mktemp(name))
        return d
    root = tmp_path_factory.getbasetemp().parent  # the same folder for every worker of this session
    d, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            build(d)
            done.touch()
    return d


@pytest.fixture(scope="session")
def small_cfg(tmp_path_factory, worker_id):
    """The smoke config with three of its conditions (one control), no extra evaluation sets, no
    calibration and no token stage: the same hashes, so its training runs and evaluations must equal smoke's
    byte for byte, at a third of the cost (for the tests that run a study more than once)."""
    import yaml

    d = yaml.safe_load(SMOKE.read_text())
    d["conditions"] = {k: v for k, v in d["conditions"].items() if k in ("many", "4", "sft")}
    d["eval_sets"] = {}  # left out, the registered study's sets would apply
    d["analyze"]["calibration"] = None  # its pool is an evaluation set
    d["tokens"]["enabled"] = False
    # one path for every worker: small_jobs2's manifest names it, and tests run the pipeline on copies of that run
    folder = shared(
        tmp_path_factory, worker_id, "cfg", lambda f: (f / "small.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    )
    return folder / "small.yaml"


@pytest.fixture(scope="session")
def small_jobs2(small_cfg, fitted_dir, tmp_path_factory, worker_id):
    """The small study with --jobs 2 (worker processes), run once for all the workers of a session."""

    def build(folder: Path) -> None:
        run = folder / "run"
        run.mkdir()
        shutil.copytree(fitted_dir, run / "base_model")
        r = pipeline("--config", str(small_cfg), "--out", str(run), "--quiet", "--jobs", "2", timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]

    return shared(tmp_path_factory, worker_id, "jobs2", build) / "run"


@pytest.fixture
def fresh_decoders(monkeypatch):
    """No decoder kept and graphs not given up when a test starts, nor after it (both live for a process)."""
    static_decode.reset_decoders()
    monkeypatch.setattr(static_decode.StaticStep, "graphs_off", None)
    yield
    static_decode.reset_decoders()
