"""The controls and the evaluation extras: KL anchor, entropy bonus, format reward, RFT and SFT,
held-out dev checks, evaluation sets, answer diversity and the token-level comparison; plus the
splits and the config's number parsing they rely on. Tiny offline models only."""
import json
import math
import random

import pytest
import torch

import config as C
import countdown
import grpo
import tiny_base
from test_grpo import CPU, _train, cfg_for, prompts_for


# ----------------------------------------------------------------------------- KL anchor and entropy


def test_k3_gradient_matches_autograd_of_the_hand_written_formula(fitted_dir, smoke_cfg):
    """The KL term's gradient through the real model equals autograd of exp(r) - r - 1 written
    out by hand on the same log-probabilities; and at B = 0 (step 0) the KL is exactly 0."""
    cfg = cfg_for(smoke_cfg)
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    grpo.apply_lora(model, 4, 8, cfg.lora.targets, seed=1)
    _, prompts = prompts_for(tok, n=2)
    comps = [[7, 8, tok.eos_token_id], [9, 10, 11]]
    ids, attn, pos, cmask = grpo.pack(prompts, comps, grpo.pad_id(tok))
    with torch.no_grad(), grpo.lora_disabled(model):
        ref, _ = grpo.completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    logp, _ = grpo.completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    assert torch.equal(logp, ref)  # B = 0: the adapter changes nothing yet
    assert grpo.k3(logp, ref).abs().max().item() == 0.0
    with torch.no_grad():  # move the adapter away from the base
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(2))
    params = [p for p in model.parameters() if p.requires_grad]
    logp, _ = grpo.completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    ours = grpo.control_terms(logp, cmask, 30.0, ref, kl=0.5)
    g_ours = torch.autograd.grad(ours, params)
    logp2, _ = grpo.completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    r = ref - logp2
    by_hand = 0.5 * ((torch.exp(r) - r - 1) * cmask).sum() / 30.0
    g_hand = torch.autograd.grad(by_hand, params)
    assert ours.item() > 0 and ours.item() == pytest.approx(by_hand.item(), rel=1e-6)
    for a, b in zip(g_ours, g_hand):
        torch.testing.assert_close(a, b)


def test_entropy_bonus_sign_and_value():
    """Minimising loss - alpha * sum(H) / constant raises the entropy; the value is the masked sum."""
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]]], requires_grad=True)  # (1, 2, 3)
    lse = logits.logsumexp(-1)
    ent = lse - (logits.softmax(-1) * logits).sum(-1)  # the formula completion_logprobs uses
    p = logits.softmax(-1)
    assert torch.allclose(ent, -(p * p.log()).sum(-1))
    cmask = torch.tensor([[1.0, 0.0]])
    term = grpo.control_terms(torch.zeros(1, 2), cmask, 4.0, ent=ent, entropy=0.2)
    assert term.item() == pytest.approx(-0.2 * ent[0, 0].item() / 4.0)
    term.backward()
    step = logits - 1.0 * logits.grad  # one gradient step on the loss
    p2 = step.softmax(-1)[0, 0]
    assert -(p2 * p2.log()).sum() > ent[0, 0]  # the entropy of the trained position went up
    assert logits.grad[0, 1].abs().sum() == 0  # the masked position is not trained


def test_format_reward_ignores_the_value():
    p = countdown.generate("arith-2x1", 1, 0)[0]
    wrong = f"<think>...</think><answer>{p.answer + 1}</answer>"
    s = countdown.score(p, wrong)
    assert s["format"] and not s["strict"]
    assert countdown.score(p, "the answer is 5")["format"] is False


def test_method_batches():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    rollouts = [[1], [2], [3], [4]]
    comps, adv = grpo.method_batch("grpo", rewards, rollouts, None)
    assert comps is rollouts and adv.tolist() == [0.5, -0.5, -0.5, 0.5]
    comps, adv = grpo.method_batch("rft", rewards, rollouts, None)
    assert comps is rollouts and adv.tolist() == [1.0, 0.0, 0.0, 1.0]  # the correct ones, weight 1
    gold = [[9, 9]] * 4
    comps, adv = grpo.method_batch("sft", rewards, rollouts, gold)
    assert comps is gold and adv.tolist() == [1.0] * 4


CONTROLS = {
    "kl": ("4-kl", C.ConditionCfg(problems="all", kl=0.05, entropy=0.01)),
    "format": ("format", C.ConditionCfg(problems="all", reward="format")),
    "rft": ("rft", C.ConditionCfg(problems="all", method="rft")),
    "sft": ("sft", C.ConditionCfg(problems="all", method="sft")),
}


@pytest.mark.parametrize("which", sorted(CONTROLS))
def test_controls_train_and_resume_bit_identically(which, fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg, **{"train.save_last_every": 1, "train.dev_every": 2, "train.dev_problems": 3, "train.dev_samples": 2,
                                "train.log_kl_every": 1})
    cond = CONTROLS[which]
    straight = _train(cfg, fitted_dir, tmp_path / "straight", steps=3, condition=cond)
    _train(cfg, fitted_dir, tmp_path / "resumed", steps=1, condition=cond)
    _train(cfg, fitted_dir, tmp_path / "resumed", steps=3, condition=cond)
    for f in ("last/adapter_model.safetensors", "step_002/adapter_model.safetensors", "train_eval.csv"):
        assert (straight / f).read_bytes() == (tmp_path / "resumed" / f).read_bytes(), f
    rows = grpo.read_log(straight / "train_log.csv")
    assert any(r["grad_norm"] > 0 for r in rows)  # the control really trained
    assert all(math.isfinite(r["kl_mean"]) for r in rows)  # measured every step (log_kl_every 1)
    if which == "kl":
        assert rows[0]["kl_mean"] == 0.0 and rows[-1]["kl_mean"] > 0  # exactly 0 while B = 0
    if which == "sft":
        assert all(math.isnan(r["reward_mean"]) for r in rows)  # no rollouts
    dev = grpo.read_csv_rows(straight / "train_eval.csv")
    assert [int(r["step"]) for r in dev] == [0, 2]


def test_gold_solutions_are_right_and_match_the_tiny_traces():
    for task in ("arith-3x2", "arith-2x1", "arith-3x3", "arith-1x1"):
        for p in countdown.generate(task, 20, 3):
            for style in ("instruct", "bare"):
                g = countdown.gold_solution(p, style)
                assert countdown.score(p, g) == {"strict": True, "loose": True, "format": True}, g
    # the CPU world's gold solution is the tiny base's own correct, tagged, decomposed trace
    b = C.TinyBaseCfg(p_decomposed=1.0, p_slip=0.0, p_tags=1.0)
    for p in countdown.generate("arith-2x1", 20, 1):
        assert countdown.gold_solution(p, "bare") == tiny_base.trace(p, random.Random(0), b)
    p = countdown.Problem("x", "arith-3x2", "413 * 41 - 882", 16051, (413, 41, 882), "")
    assert countdown.gold_solution(p) == ("<think>413 * 41 = 413 * 40 + 413 * 1 = 16520 + 413 = 16933. 16933 - 882 = 16051"
                                          "</think>\n<answer>16051</answer>")


# ----------------------------------------------------------------------------- evaluation extras


@pytest.mark.parametrize("responses, distinct, entropy", [
    (["<answer>5</answer>", "<answer>5</answer>"], 1, 0.0),
    (["<answer>5</answer>", "so 5", "the answer is 6", "no number"], 3, -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))),
    (["a", "b"], 1, 0.0),  # no integer at all is one class
    (["<answer>7</answer> then 9", "9"], 2, math.log(2)),  # the block's integer wins over a later one
])
def test_answer_diversity(responses, distinct, entropy):
    d, h = grpo.answer_diversity(responses)
    assert d == distinct and h == pytest.approx(entropy)


def test_sampler_entropy_is_the_untempered_distributions_and_draws_nothing(fitted_dir, smoke_cfg):
    cfg = cfg_for(smoke_cfg)
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=1)
    s = C.SamplingCfg(temperature=0.6, top_p=0.95, max_new_tokens=6)
    stops, pad = grpo.stop_ids(model, tok), grpo.pad_id(tok)
    a = grpo.sample(model, prompts, 2, s, 5, stops, pad, entropy=True)
    b = grpo.sample(model, prompts, 2, s, 5, stops, pad)
    assert a.tokens == b.tokens  # measuring the entropy changes no sample
    ids, attn, pos, cmask = grpo.pack(prompts * 2, a.tokens, pad)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits  # (2, L, V), T = 1
    Lp = ids.shape[1] - cmask.shape[1]
    for i, toks in enumerate(a.tokens):
        lp = logits[i, Lp - 1 : Lp - 1 + len(toks)].log_softmax(-1)
        assert a.entropy[i] == pytest.approx((-(lp.exp() * lp).sum(-1)).mean().item(), rel=1e-4)


def test_an_evaluation_set_samples_like_the_eval_section_unless_it_says_otherwise():
    cfg = C.load(None, ["eval.sampling.max_new_tokens=96", "eval_sets.wide.n=16", "eval_sets.wide.k_max=16"])
    problems, n, k_max, s, _ = grpo.eval_set_settings(cfg, "wide")
    assert s == cfg.eval.sampling and s.max_new_tokens == 96 and (n, k_max) == (16, 16)
    cfg = C.load(None, ["eval.sampling.max_new_tokens=96", "eval_sets.wide.sampling.max_new_tokens=50"])
    s = grpo.eval_set_settings(cfg, "wide")[3]
    assert (s.temperature, s.top_p, s.max_new_tokens) == (1.0, 1.0, 50)  # a mapping given in full is taken as is
    # a partial mapping keeps the field's own defaults for the keys it does not name
    cfg = C.load(None, ["eval.sampling.max_new_tokens=96"])
    assert (cfg.eval.sampling.temperature, cfg.eval.sampling.top_p) == (0.6, 0.95)


def test_a_wide_set_with_the_test_sets_n_and_batching_reproduces_its_counts(fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg)
    cfg.eval_sets = {"wide": C.EvalSetCfg(n_problems=cfg.task.n_test, n=cfg.eval.n, k_max=cfg.eval.k_max, models="final",
                                          problems_per_batch=cfg.eval.problems_per_batch, seeds="test")}
    t = grpo.evaluate(cfg, str(fitted_dir), None, tmp_path / "t.json", progress=False)
    w = grpo.evaluate(cfg, str(fitted_dir), None, tmp_path / "w.json", progress=False, eval_set="wide")
    assert w["eval_set"] == "wide" and t["eval_set"] == "test"
    assert [p["responses"] for p in w["problems"]] == [p["responses"] for p in t["problems"]]
    assert w["provenance"]["stage_hash"] != t["provenance"]["stage_hash"]  # a set of its own, with its own files
    cfg.eval_sets["wide"].seeds = "own"  # the default: new draws
    o = grpo.evaluate(cfg, str(fitted_dir), None, tmp_path / "o.json", progress=False, eval_set="wide")
    assert [p["responses"] for p in o["problems"]] != [p["responses"] for p in t["problems"]]


def test_classify_tokens_on_hand_made_logits():
    base = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0],   # base order: 0 1 2 3 4 5 6
                         [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],    # base order: 6 5 4 3 2 1 0
                         [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    trained = torch.tensor([[9.0, 0, 0, 0, 0, 0, 0],   # picks 0: the base's first -> unchanged
                            [0, 0, 0, 9.0, 0, 0, 0],   # picks 3: base rank 4 -> reranked
                            [0, 0, 0, 0, 0, 0, 9.0]])  # picks 6 where every base logit ties: rank 1 -> unchanged
    r = grpo.classify_tokens(base, trained, top=3)
    assert r["classes"].tolist() == [0, 2, 0] and r["ranks"].tolist() == [1, 4, 1]  # rank 4 > top 3: shifted
    r = grpo.classify_tokens(base, trained, top=5)
    assert r["classes"].tolist() == [0, 1, 0]
    assert r["base_entropy"][2].item() == pytest.approx(math.log(7))


def test_token_compare_finds_no_change_against_itself_and_changes_where_made(fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg)
    cfg.tokens.n_problems = 4
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    grpo.apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed=0)
    grpo.save_adapter(model, tmp_path / "train_x_s0" / "step_001", cfg, str(fitted_dir))  # B = 0: the base itself
    same = grpo.token_compare(cfg, str(fitted_dir), str(tmp_path / "train_x_s0" / "step_001"), tmp_path / "t0.json", progress=False)
    assert same["summary"]["positions"] > 0 and same["summary"]["unchanged"] == same["summary"]["positions"]
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(3))
    grpo.save_adapter(model, tmp_path / "train_x_s0" / "step_002", cfg, str(fitted_dir))
    moved = grpo.token_compare(cfg, str(fitted_dir), str(tmp_path / "train_x_s0" / "step_002"), tmp_path / "t1.json", progress=False)
    s = moved["summary"]
    assert s["reranked"] + s["shifted"] > 0 and s["unchanged"] + s["reranked"] + s["shifted"] == s["positions"]
    assert (moved["condition"], moved["train_seed"], moved["step"]) == ("x", 0, 2)
    saved = json.loads((tmp_path / "t1.json").read_text())
    assert sum(len(p["classes"]) for p in saved["problems"]) == s["positions"]


# ----------------------------------------------------------------------------- splits and numbers


def test_pretrain_and_dev_splits_are_disjoint_and_leave_train_and_test_alone():
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


@pytest.mark.parametrize("typed, value", [("1e-4", 1e-4), ("3E-4", 3e-4), (".5", 0.5), ("1_000", 1000.0), ("2.5e+3", 2500.0)])
def test_numbers_as_users_type_them(typed, value):
    assert C.load(None, [f"train.lr={typed}"]).train.lr == value
    assert C.load(None, [f"lr_sweep.candidates=[{typed}, 2e-4]"]).lr_sweep.candidates == [value, 2e-4]


def test_numbers_in_a_yaml_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  lr: 1e-4\nlr_sweep:\n  candidates: [1e-5, 3E-4, .5]\n")
    cfg = C.load(str(f))
    assert cfg.train.lr == 1e-4 and cfg.lr_sweep.candidates == [1e-5, 3e-4, 0.5]


@pytest.mark.parametrize("typed", ["hot", "1e-4x", ".nan", "nan", "inf", "_1"])
def test_numbers_that_are_not_numbers_are_still_one_line_errors(typed):
    with pytest.raises(C.ConfigError, match=r"train\.lr: expected a number"):
        C.load(None, [f"train.lr={typed}"])


# ----------------------------------------------------------------------------- learning rates and clipping


def test_learning_rate_sources(tmp_path):
    """A condition's own lr, else train.lr, else the sweep's choice (its own with per_condition)."""
    cfg = C.load(None, ["conditions.many.lr=0.5"])
    assert grpo.read_lr(cfg, tmp_path, "many") == 0.5
    with pytest.raises(FileNotFoundError, match="lr_choice.json"):
        grpo.read_lr(cfg, tmp_path, "16")
    (tmp_path / "lr_choice.json").write_text(json.dumps({"chosen": 0.01, "per_condition": {"16": 0.02}}))
    assert grpo.read_lr(cfg, tmp_path, "16") == 0.01  # the single-rate rule (the default)
    cfg = C.load(None, ["lr_sweep.per_condition=true"])
    assert grpo.read_lr(cfg, tmp_path, "16") == 0.02
    with pytest.raises(FileNotFoundError, match="no rate for condition 1"):
        grpo.read_lr(cfg, tmp_path, "1")
    assert C.load(None, ["train.lr=0.003"]).train.lr == 0.003 and grpo.read_lr(C.load(None, ["train.lr=0.003"]), tmp_path, "1") == 0.003


def test_per_condition_sweep_needs_an_lr_for_sft():
    with pytest.raises(C.ConfigError, match=r"conditions\.sft\.lr"):
        C.load(None, ["lr_sweep.per_condition=true", "conditions.sft.method=sft"])


def test_grad_clip_is_logged_before_and_after(fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg, **{"train.dev_every": 0, "train.grad_clip": 1e-4})
    out = _train(cfg, fitted_dir, tmp_path / "clip", steps=2)
    rows = grpo.read_log(out / "train_log.csv")
    moved = [r for r in rows if r["grad_norm"] > 1e-4]
    assert moved and all(r["grad_norm_clipped"] == pytest.approx(1e-4) for r in moved)
