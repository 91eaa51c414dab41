"""method/evaluate.py: answer diversity, evaluation sets, the token-level comparison and the selection rule."""

import json
import math

import pytest
import torch

from helpers import CPU, cfg_for
from method import evaluate
from method.model import apply_lora, load_model, save_adapter
from orchestration import config


@pytest.mark.parametrize(
    "responses, distinct, entropy",
    [
        (["<answer>5</answer>", "<answer>5</answer>"], 1, 0.0),
        (
            ["<answer>5</answer>", "so 5", "the answer is 6", "no number"],
            3,
            -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)),
        ),
        (["a", "b"], 1, 0.0),  # no integer at all is one class
        (["<answer>7</answer> then 9", "9"], 2, math.log(2)),  # the block's integer wins over a later one
    ],
)
def test_answer_diversity(responses, distinct, entropy):
    d, h = evaluate.answer_diversity(responses)
    assert d == distinct and h == pytest.approx(entropy)


def test_an_evaluation_set_samples_like_the_eval_section_unless():
    """An evaluation set samples like the eval section unless it says otherwise."""
    cfg = config.load(None, ["eval.sampling.max_new_tokens=96", "eval_sets.wide.n=16", "eval_sets.wide.k_max=16"])
    problems, n, k_max, s, _ = evaluate.eval_set_settings(cfg, "wide")
    assert s == cfg.eval.sampling and s.max_new_tokens == 96 and (n, k_max) == (16, 16)
    cfg = config.load(None, ["eval.sampling.max_new_tokens=96", "eval_sets.wide.sampling.max_new_tokens=50"])
    s = evaluate.eval_set_settings(cfg, "wide")[3]
    assert (s.temperature, s.top_p, s.max_new_tokens) == (1.0, 1.0, 50)  # a mapping given in full is taken as is
    # a partial mapping keeps the field's own defaults for the keys it does not name
    cfg = config.load(None, ["eval.sampling.max_new_tokens=96"])
    assert (cfg.eval.sampling.temperature, cfg.eval.sampling.top_p) == (0.6, 0.95)


def test_a_wide_set_with_the_test_sets_n_and_batching_reproduces(fitted_dir, smoke_cfg, tmp_path):
    """A wide set with the test sets n and batching reproduces its counts."""
    cfg = cfg_for(smoke_cfg)
    cfg.eval.n_base = None  # the base at the trained models' n, as a set with the test set's n and seeds draws it
    cfg.eval_sets = {
        "wide": config.EvalSetCfg(
            n_problems=cfg.task.n_test,
            n=cfg.eval.n,
            k_max=cfg.eval.k_max,
            models="final",
            problems_per_batch=cfg.eval.problems_per_batch,
            seeds="test",
        )
    }
    t = evaluate.evaluate(cfg, str(fitted_dir), None, tmp_path / "t.json", progress=False)
    w = evaluate.evaluate(cfg, str(fitted_dir), None, tmp_path / "w.json", progress=False, eval_set="wide")
    assert w["eval_set"] == "wide" and t["eval_set"] == "test"
    assert [p["responses"] for p in w["problems"]] == [p["responses"] for p in t["problems"]]
    assert w["provenance"]["stage_hash"] != t["provenance"]["stage_hash"]  # a set of its own, with its own files
    cfg.eval_sets["wide"].seeds = "own"  # the default: new draws
    o = evaluate.evaluate(cfg, str(fitted_dir), None, tmp_path / "o.json", progress=False, eval_set="wide")
    assert [p["responses"] for p in o["problems"]] != [p["responses"] for p in t["problems"]]


def test_classify_tokens_on_hand_made_logits():
    base = torch.tensor(
        [
            [5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0],  # base order: 0 1 2 3 4 5 6
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],  # base order: 6 5 4 3 2 1 0
            [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        ]
    )
    trained = torch.tensor(
        [
            [9.0, 0, 0, 0, 0, 0, 0],  # picks 0: the base's first -> unchanged
            [0, 0, 0, 9.0, 0, 0, 0],  # picks 3: base rank 4 -> reranked
            [0, 0, 0, 0, 0, 0, 9.0],
        ]
    )  # picks 6 where every base logit ties: rank 1 -> unchanged
    r = evaluate.classify_tokens(base, trained, top=3)
    assert r["classes"].tolist() == [0, 2, 0] and r["ranks"].tolist() == [1, 4, 1]  # rank 4 > top 3: shifted
    r = evaluate.classify_tokens(base, trained, top=5)
    assert r["classes"].tolist() == [0, 1, 0]
    assert r["base_entropy"][2].item() == pytest.approx(math.log(7))


def test_token_compare_finds_no_change_against_itself(fitted_dir, smoke_cfg, tmp_path):
    """Token compare finds no change against itself and changes where made."""
    cfg = cfg_for(smoke_cfg)
    cfg.tokens.n_problems = 4
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed=0)
    save_adapter(model, tmp_path / "train_x_s0" / "step_001", cfg, str(fitted_dir))  # B = 0: the base itself
    same = evaluate.token_compare(
        cfg, str(fitted_dir), str(tmp_path / "train_x_s0" / "step_001"), tmp_path / "t0.json", progress=False
    )
    assert same["summary"]["positions"] > 0 and same["summary"]["unchanged"] == same["summary"]["positions"]
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(3))
    save_adapter(model, tmp_path / "train_x_s0" / "step_002", cfg, str(fitted_dir))
    moved = evaluate.token_compare(
        cfg, str(fitted_dir), str(tmp_path / "train_x_s0" / "step_002"), tmp_path / "t1.json", progress=False
    )
    s = moved["summary"]
    assert s["reranked"] + s["shifted"] > 0 and s["unchanged"] + s["reranked"] + s["shifted"] == s["positions"]
    assert (moved["condition"], moved["train_seed"], moved["step"]) == ("x", 0, 2)
    saved = json.loads((tmp_path / "t1.json").read_text())
    assert sum(len(p["classes"]) for p in saved["problems"]) == s["positions"]


def test_choose_sets_rule():
    rates = [0.0, 0.5, 1.0, 0.25, 0.75, 0.5, 0.125]
    sets = evaluate.choose_sets(rates, [3, 1, 10])
    assert sets["3"] == [1, 5, 3]  # p(1-p): .25, .25 (tie by index), then .1875 (index 3 before 4)
    assert sets["1"] == [1]
    assert sets["10"] == [1, 5, 3, 4, 6]  # only the five informative problems exist


@pytest.mark.parametrize("scoring", ["strict", "loose"])
def test_select_reads_the_pass_rate_of_its_scoring(scoring, tmp_path, monkeypatch):
    """select.scoring (PLAN_CHANGES.md change 31): a model that answers right but never writes the tags has
    strict pass rate 0 everywhere, so only the loose rule finds informative problems."""
    import countdown

    cfg = config.load(
        None,
        [
            "task.name=arith-1x1",
            "task.n_train=20",
            "select.n_problems=4",
            "select.samples=4",
            f"select.scoring={scoring}",
            "device=cpu",
        ],
    )
    problems = countdown.make_splits("arith-1x1", 20, cfg.task.n_test, cfg.task.seed)[0][:4]
    wrong = [p.answer + 1 for p in problems]
    # problem 0: right once in four, untagged (loose only); problem 1: right twice, tagged (both); 2, 3: never
    texts = [
        [f"so {problems[0].answer}"] + [f"so {wrong[0]}"] * 3,
        [f"<answer>{problems[1].answer}</answer>"] * 2 + [f"<answer>{wrong[1]}</answer>"] * 2,
        [str(wrong[2])] * 4,
        [str(wrong[3])] * 4,
    ]
    monkeypatch.setattr(evaluate, "load_model", lambda *a, **k: (None, None))
    monkeypatch.setattr(evaluate, "sample_problems", lambda *a, **k: (texts, [0.0] * 4))
    res = evaluate.select(cfg, "unused", tmp_path, progress=False)
    rates = list(res["pass_rates"].values())
    assert rates == ([0.0, 0.5, 0.0, 0.0] if scoring == "strict" else [0.25, 0.5, 0.0, 0.0])
    assert res["informative"] == [p.id for p, r in zip(problems, rates) if 0 < r < 1]
    assert res["rule"].startswith(f"0 < {scoring} pass rate < 1")
    assert res["sets"]["1"] == [problems[1].id]  # p(1 - p) is largest at 0.5


def test_the_base_is_sampled_n_base_times_on_the_test_set_and_n(fitted_dir, smoke_cfg, tmp_path):
    """The base is sampled n base times on the test set and n times elsewhere.

    eval.n_base (PLAN.md section 6): the base's test-set evaluation draws n_base samples per problem;
    the other sets keep their own n."""
    cfg = cfg_for(smoke_cfg)
    assert cfg.eval.n_base == 16 and cfg.eval.n == 8
    t = evaluate.evaluate(cfg, str(fitted_dir), None, tmp_path / "t.json", progress=False)
    assert t["sampling"]["n"] == 16 and all(p["n"] == 16 and len(p["responses"]) == 16 for p in t["problems"])
    cfg.eval.n_base = None
    u = evaluate.evaluate(cfg, str(fitted_dir), None, tmp_path / "u.json", progress=False)
    assert u["sampling"]["n"] == 8
