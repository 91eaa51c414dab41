"""Shared fixtures: tiny offline Qwen2-architecture models. Nothing here touches the network."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from bases import tiny_base  # noqa: E402
from orchestration import (
    config,  # noqa: E402
    provenance,
)

torch.set_num_threads(1)


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
def fitted_dir(tmp_path_factory, smoke_cfg):
    """The smoke configuration's base, fitted for ~20 s on 1-digit traces: it sometimes answers
    right, so strict rewards vary inside groups and GRPO has signal."""

    d = tmp_path_factory.mktemp("fitted") / "base_model"
    # recorded with the base stage's hash, so the pipeline accepts a copy of it as its own base
    tiny_base.train_base(smoke_cfg, d, progress=False, stage_hash=provenance.stage_hash(smoke_cfg, "base"))
    return d
