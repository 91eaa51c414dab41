"""The confirmatory run's pieces (PLAN_CHANGES.md change 44): the fresh test split, the reused base (copied only
when its stage hash and sha256 agree, and checked by that sha256 before any stage loads it), the
evaluation sets' sampling seeds, and the computation table."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import countdown  # noqa: E402
from analysis import secondary  # noqa: E402
from bases import reuse  # noqa: E402
from method import evaluate  # noqa: E402
from orchestration import config, provenance, study  # noqa: E402
from runner import stage_checks, stages  # noqa: E402


@pytest.fixture(scope="module")
def v5():
    return config.load(str(ROOT / "configs/tiny_v5.yaml"))


def test_confirm_split_shares_no_problem_with_tiny_v4(v5):
    v4 = config.load(str(ROOT / "configs/tiny_skill.yaml"))
    t = v4.task
    old = countdown.draw_splits(
        t.name,
        t.seed,
        {"test": t.n_test, "train": t.n_train, "pretrain": study.pretrain_count(v4), "dev": v4.train.dev_problems},
    )
    fresh = study.test_problems(v5)
    assert len(fresh) == v5.task.n_test == len({p.question for p in fresh})
    for split, problems in old.items():  # tiny_v4's test, train, the base's pretraining problems and dev
        assert not {p.question for p in fresh} & {p.question for p in problems}, split
    assert [p.question for p in study.test_problems(v4)] == [
        p.question for p in old["test"]
    ]  # test_split test: as before
    # the training problems are tiny_v4's: the condition trains on what the base's world was built around
    assert [p.question for p in study.condition_pool(v5, v5.conditions["many"], Path("."))[0]] == [
        p.question for p in old["train"]
    ]
    assert {countdown.stratum(p) for p in fresh} == {"borrows-0", "borrows-1", "borrows-2"}


def assert_fresh(cfg, previous, last_split: str) -> None:
    """cfg's test split shares no problem with any split drawn before it (test, train, pretrain, dev and the
    confirm splits up to last_split), and `previous` (the run before) keeps its own as it was."""
    t = cfg.task
    counts = {
        "test": t.n_test,
        "train": t.n_train,
        "pretrain": study.pretrain_count(cfg),
        "dev": cfg.train.dev_problems,
    }
    counts |= {s: t.n_test for s in ("confirm", "confirm2")[: ("confirm", "confirm2").index(last_split) + 1]}
    earlier = countdown.draw_splits(t.name, t.seed, counts)
    fresh = study.test_problems(cfg)
    assert len(fresh) == t.n_test == len({p.question for p in fresh})
    for split, problems in earlier.items():
        assert not {p.question for p in fresh} & {p.question for p in problems}, split
    assert [p.question for p in earlier[last_split]] == [p.question for p in study.test_problems(previous)]


def test_confirm2_split_is_fresh_against_every_earlier_split(v5):
    """tiny_v6's test problems (PLAN_CHANGES.md change 57): drawn after tiny_v5's confirm split; new seeds."""
    v6 = config.load(str(ROOT / "configs/tiny_v6.yaml"))
    assert_fresh(v6, v5, "confirm")
    assert not set(config.seeds_of(v6, "many")) & set(config.seeds_of(v5, "many"))  # new training seeds


def test_confirm3_split_is_fresh_against_every_earlier_split(v5):
    """tiny_v7's test problems (PLAN_CHANGES.md change 65): drawn after tiny_v6's confirm2; new seeds."""
    v6, v7 = (config.load(str(ROOT / f"configs/tiny_v{k}.yaml")) for k in (6, 7))
    assert_fresh(v7, v6, "confirm2")
    assert not set(config.seeds_of(v7, "many")) & (set(config.seeds_of(v6, "many")) | set(config.seeds_of(v5, "many")))


def test_test_split_is_validated(v5):
    with pytest.raises(config.ConfigError, match="task.test_split"):
        config.load(str(ROOT / "configs/tiny_v5.yaml"), ["task.test_split=fresh"])
    with pytest.raises(config.ConfigError, match="model.base_sha256"):
        config.load(str(ROOT / "configs/tiny_v5.yaml"), ["model.base_sha256=abc"])


def test_pool_seeds_are_not_the_test_seeds(v5):
    """The pools are fresh draws: every batch seed of pool, pool-train and the test set differs, because
    their tags do (this fails if a pool took the test set's tag)."""
    seeds = {}
    for name in ("test", "pool", "pool-train"):
        problems, _, _, _, per = evaluate.eval_set_settings(v5, name)
        seeds[name] = {
            study.seed_for(v5.task.seed, evaluate.seed_tag(v5, name), problems[b].id)
            for b in range(0, len(problems), per)
        }
    assert evaluate.seed_tag(v5, "pool") != evaluate.seed_tag(v5, "test") != evaluate.seed_tag(v5, "pool-train")
    assert (
        not seeds["test"] & seeds["pool"]
        and not seeds["test"] & seeds["pool-train"]
        and not seeds["pool"] & seeds["pool-train"]
    )
    same = copy.deepcopy(v5)  # (the config refuses a support pool with the test seeds; here only the tag is asked)
    same.eval_sets["pool"].seeds = "test"
    assert evaluate.seed_tag(same, "pool") == evaluate.seed_tag(same, "test")  # the tag is what keeps them apart


def fake_base(folder: Path, stage_hash: str, value: float = 1.0) -> str:
    """A model folder as the base stage leaves it (config.json, a whole safetensors file, build.json); its weights' sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    save_file({"w": np.full(3, value, np.float32)}, str(folder / "model.safetensors"))
    (folder / "build.json").write_text(json.dumps({"stage_hash": stage_hash, "steps": 2000}))
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_reused_base_is_copied_only_when_hash_and_sha256_agree(v5, tmp_path):
    h = provenance.stage_hash(v5, "base")
    sha = fake_base(tmp_path / "src", h)
    cfg = config.load(
        str(ROOT / "configs/tiny_v5.yaml"), [f"model.base_from={tmp_path / 'src'}", f"model.base_sha256={sha}"]
    )
    info = reuse.copy_base(cfg, tmp_path / "run" / "base_model", h)
    assert info["reused_from"] == str(tmp_path / "src") and info["stage_hash"] == h and info["steps"] == 2000
    assert (tmp_path / "run/base_model/model.safetensors").read_bytes() == (
        tmp_path / "src/model.safetensors"
    ).read_bytes()
    assert json.loads((tmp_path / "run/base_model/build.json").read_text())["sha256"] == sha
    assert provenance.weights_problem(tmp_path / "run/base_model", sha) is None

    with pytest.raises(config.ConfigError, match="base stage hash"):  # another recipe
        reuse.copy_base(cfg, tmp_path / "other", "0123456789abcdef")
    wrong = config.load(
        str(ROOT / "configs/tiny_v5.yaml"), [f"model.base_from={tmp_path / 'src'}", "model.base_sha256=" + "f" * 64]
    )
    with pytest.raises(config.ConfigError, match="other weights than the registered base"):
        reuse.copy_base(wrong, tmp_path / "other", h)
    assert not (tmp_path / "other").exists()  # nothing half-written


def test_tampered_weights_stop_every_stage_before_it_loads(v5, tmp_path):
    h = provenance.stage_hash(v5, "base")
    sha = fake_base(tmp_path / "src", h)
    cfg = config.load(
        str(ROOT / "configs/tiny_v5.yaml"), [f"model.base_from={tmp_path / 'src'}", f"model.base_sha256={sha}"]
    )
    run = tmp_path / "run"
    reuse.copy_base(cfg, run / "base_model", h)
    plan = stages.Plan(cfg, run, "configs/tiny_v5.yaml", [])
    stage_checks.check_inputs(plan, "probe")  # whole: passes
    fake_base(run / "base_model", h, value=2.0)  # whole, but other weights
    with pytest.raises(stage_checks.MissingInput, match="sha256"):
        stage_checks.check_inputs(plan, "probe")
    shutil.rmtree(run / "base_model")


def test_the_committed_base_is_the_registered_one(v5):
    """configs/tiny_v5.yaml names results/tiny_v4's committed weights, built under the same base stage hash."""
    src = ROOT / v5.model.base_from
    assert provenance.weights_problem(src, v5.model.base_sha256) is None
    assert provenance.read_json(src / "build.json")["stage_hash"] == provenance.stage_hash(v5, "base")


def test_computation_table_counts_each_response_once():
    doc = {
        "task": "arith-2x1",
        "problems": [
            {
                "id": "a",
                "question": "15 * 7 - 38",
                "answer": 67,
                "responses": [
                    "15 * 7 = 10 * 7 + 5 * 7 = 70 + 35 = 105. 105 - 38 = 67",  # clean split
                    "15 * 7 = 105. 105 - 38 = 67",  # clean one-step
                    "15 * 7 = 95. 95 - 38 = 67",  # compensating: a product 10 too small, a forgotten borrow
                    "15 * 7 = 105. 105 - 38 = 77",  # wrong
                    "It is 67",
                ],
            },  # other correct
            {"id": "b", "question": "58 * 8 - 54", "answer": 410, "responses": ["58 * 8 = 464. 464 - 54 = 410"] * 5},
        ],
    }
    counts = secondary.strategy_counts(doc)
    strata = secondary.problem_strata(doc)
    rows = {r["stratum"]: r for r in secondary.computation_table("m", counts, strata)}
    assert strata.tolist() == ["borrows-2", "borrows-0"]
    assert {k: rows["borrows-2"][k] for k in secondary.COMPUTATION_ROWS} == {
        "clean split": 1,
        "clean one-step": 1,
        "compensating": 1,
        "other correct": 1,
        "wrong": 1,
    }
    assert rows["borrows-2"]["compensating_share_of_correct"] == 0.25
    assert rows["all"]["clean one-step"] == 6 and sum(rows["all"][k] for k in secondary.COMPUTATION_ROWS) == 10
    assert np.isclose(rows["borrows-0"]["compensating_share_of_correct"], 0.0)
