"""method/objective.py and method/training.py (what grpo.py runs): advantages, the Dr. GRPO loss and the
control terms, the micro-batched policy gradient, and training with resume for every condition of the
smoke registry (one test, parametrized over it)."""

import json
import math
from pathlib import Path

import pytest
import torch

import countdown
import grpo
from helpers import CPU, cfg_for, model_with_lora, prompts_for, train_smoke
from method import evaluate, objective, sampler, training
from method.model import (
    LoRALinear,
    apply_lora,
    completion_logprobs,
    load_model,
    lora_disabled,
    pack,
    pad_id,
    render_prompts,
    stop_ids,
)
from orchestration import config, provenance, study

# ----------------------------------------------------------------------------- the loss


def test_advantages_and_loss_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    adv = objective.group_advantages(rewards)
    assert adv.tolist() == [[0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0]]  # no std division; equal group -> 0
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0], [-3.0, -1.0], [-1.0, -1.0]], requires_grad=True)
    cmask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    a = torch.tensor([0.5, -0.5, 0.0, 0.25])
    loss = objective.drgrpo_loss(logp, cmask, a, normalizer=10.0)
    # -(0.5*(-3) + -0.5*(-0.5) + 0 + 0.25*(-2)) / 10 = -(-1.5 + 0.25 - 0.5)/10 = 0.175
    assert loss.item() == pytest.approx(0.175)
    loss.backward()
    expected = -(a[:, None] * cmask) / 10.0
    assert torch.equal(logp.grad, expected)
    assert logp.grad[2].abs().sum() == 0 and logp.grad[1, 1] == 0  # zero advantage, masked token


def test_k3_gradient_matches_autograd_of_the_hand_written(fitted_dir, smoke_cfg):
    """K3 gradient matches autograd of the hand written formula.

    The KL term's gradient through the real model equals autograd of exp(r) - r - 1 written
    out by hand on the same log-probabilities; and at B = 0 (step 0) the KL is exactly 0."""
    cfg = cfg_for(smoke_cfg)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    apply_lora(model, 4, 8, cfg.lora.targets, seed=1)
    _, prompts = prompts_for(tok, n=2)
    comps = [[7, 8, tok.eos_token_id], [9, 10, 11]]
    ids, attn, pos, cmask = pack(prompts, comps, pad_id(tok))
    with torch.no_grad(), lora_disabled(model):
        ref, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    logp, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    assert torch.equal(logp, ref)  # B = 0: the adapter changes nothing yet
    assert objective.k3(logp, ref).abs().max().item() == 0.0
    with torch.no_grad():  # move the adapter away from the base
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(2))
    params = [p for p in model.parameters() if p.requires_grad]
    logp, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    ours = objective.control_terms(logp, cmask, 30.0, ref, kl=0.5)
    g_ours = torch.autograd.grad(ours, params)
    logp2, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
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
    term = objective.control_terms(torch.zeros(1, 2), cmask, 4.0, ent=ent, entropy=0.2)
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
    assert objective.METHODS["grpo"].rollouts and objective.METHODS["grpo"].advantages(rewards).tolist() == [
        0.5,
        -0.5,
        -0.5,
        0.5,
    ]
    # the correct, weight 1
    assert objective.METHODS["rft"].rollouts and objective.METHODS["rft"].advantages(rewards).tolist() == [
        1.0,
        0.0,
        0.0,
        1.0,
    ]
    # gold solutions: one per problem, weight G (the gradient of G copies: next test)
    assert not objective.METHODS["sft"].rollouts and objective.METHODS["sft"].advantages(rewards).tolist() == [4.0]


def test_sft_one_gold_copy_of_weight_g_is_the_gradient_of_g(fitted_dir, smoke_cfg):
    """Sft one gold copy of weight g is the gradient of g copies.

    PLAN_CHANGES.md change 29: SFT trains each gold solution once with advantage G instead of G identical
    copies with advantage 1; the loss is linear in the advantage, so the gradient is the same."""
    grads = []
    for copies, weight in ((4, 1.0), (1, 4.0)):
        _, model, tok, _ = model_with_lora(fitted_dir, smoke_cfg)
        _, test = countdown.make_splits("arith-1x1", 10, 2, 0)
        prompts = render_prompts(tok, test, "bare")
        gold = [[7, 8, 9], [10, tok.eos_token_id]]
        P = [prompts[i] for i in range(2) for _ in range(copies)]
        comps = [gold[i] for i in range(2) for _ in range(copies)]
        loss = objective.policy_gradient(
            model, P, comps, torch.full((2 * copies,), weight), pad_id(tok), objective.Terms(8 * 10, 3)
        )["loss"]
        grads.append((loss, torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])))
    assert grads[1][0] == pytest.approx(grads[0][0], rel=1e-5)
    torch.testing.assert_close(grads[1][1], grads[0][1], rtol=1e-4, atol=1e-7)
    assert grads[0][1].abs().sum() > 0


def test_policy_gradient_is_microbatch_invariant_and_skips_zero(fitted_dir, smoke_cfg):
    """Policy gradient is microbatch invariant and skips zero advantage."""
    cfg = cfg_for(smoke_cfg)
    grads = []
    for mb in (1, 3, 16):
        model, tok = load_model(cfg, str(fitted_dir), CPU)
        apply_lora(model, 4, 8, cfg.lora.targets, seed=5)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if ".lora_B." in n:
                    p.fill_(0.01)
        _, prompts = prompts_for(tok, n=2)
        P = [prompts[0]] * 3 + [prompts[1]] * 3
        comps = [[7, 8, tok.eos_token_id], [9], [10, 11, 12, 13], [7], [8, 8], [tok.eos_token_id]]
        adv = torch.tensor([0.5, -0.25, -0.25, 0.0, 0.0, 0.0])
        packed = []
        real_pack = objective.pack
        objective.pack = lambda p, c, pad: packed.append(len(c)) or real_pack(p, c, pad)
        try:
            loss = objective.policy_gradient(model, P, comps, adv, pad_id(tok), objective.Terms(6 * 5, mb))["loss"]
        finally:
            objective.pack = real_pack
        assert sum(packed) == 3  # only the three rows with a nonzero advantage go through the model
        grads.append((loss, torch.cat([p.grad.flatten() for n, p in model.named_parameters() if p.requires_grad])))
        # the same loss computed in one go, by hand, including the zero-advantage rows
        ids, attn, pos, cmask = pack(P, comps, pad_id(tok))
        with torch.no_grad():
            lp, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
        assert loss == pytest.approx(-(adv[:, None] * lp * cmask).sum().item() / 30, abs=1e-6)
    for loss, g in grads[1:]:
        assert loss == pytest.approx(grads[0][0], abs=1e-6)
        torch.testing.assert_close(g, grads[0][1], atol=1e-6, rtol=1e-5)
    assert grads[0][1].abs().sum() > 0


def test_length_sorted_micro_batches_give_the_same_gradient(fitted_dir, smoke_cfg, monkeypatch):
    """Length sorted micro batches give the same gradient with less padding."""
    grads, padding = [], []
    for sort in (False, True):
        _, model, tok, _ = model_with_lora(fitted_dir, smoke_cfg)
        _, test = countdown.make_splits("arith-1x1", 10, 2, 0)
        prompts = render_prompts(tok, test, "bare")
        P = [prompts[0]] * 4 + [prompts[1]] * 4
        comps = [[7] * n for n in (1, 9, 2, 8, 3, 7, 1, 9)]
        adv = torch.tensor([0.5, -0.5, 0.25, -0.25, 0.5, -0.5, 0.25, -0.25])
        real = pack
        pads = []
        monkeypatch.setattr(
            objective,
            "pack",
            lambda p, c, pad: pads.append(len(c) * max(map(len, c)) - sum(map(len, c))) or real(p, c, pad),
        )
        objective.policy_gradient(model, P, comps, adv, pad_id(tok), objective.Terms(8 * 10, 2, sort_by_length=sort))
        monkeypatch.setattr(objective, "pack", real)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad]))
        padding.append(sum(pads))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-7)
    assert padding == [sum(abs(a - b) for a, b in [(1, 9), (2, 8), (3, 7), (1, 9)]), 0 + 1 + 1 + 0]


# ----------------------------------------------------------------------------- training and resume


def test_step_problems_cycles_and_shuffles():
    pool = list(range(10))
    many = [training.step_problems(pool, s, 4, seed=1, shuffle=True) for s in (1, 2, 3)]
    flat = many[0] + many[1] + many[2][:2]
    assert sorted(flat) == pool  # the first epoch is a permutation of the pool
    assert flat != pool
    assert training.step_problems(pool, 2, 4, seed=1, shuffle=True) == many[1]  # depends only on (seed, step)
    assert training.step_problems([42], 3, 4, seed=0, shuffle=False) == [42] * 4  # copies of one problem


def test_training_learns_something_and_resume_is_bit_identical(fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg, **{"train.save_last_every": 1, "train.dev_every": 0})  # count rollouts only
    straight = train_smoke(cfg, fitted_dir, tmp_path / "straight", steps=4)
    rows = training.read_log(straight / "train_log.csv")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert min(r["zero_signal_frac"] for r in rows) < 1.0  # some group had signal...
    assert any(r["grad_norm"] > 0 for r in rows)  # ...so the adapter really moved
    from safetensors.torch import load_file

    b = load_file(str(straight / "last" / "adapter_model.safetensors"))
    assert any(v.abs().sum() > 0 for k, v in b.items() if "lora_B" in k)
    assert (straight / "step_002" / "adapter_config.json").exists()
    # two steps, "killed", then resumed to four: the same bytes as four straight through
    train_smoke(cfg, fitted_dir, tmp_path / "resumed", steps=2)
    assert json.loads((tmp_path / "resumed" / "last" / "state.json").read_text())["step"] == 2
    calls = []
    real_sample = sampler.sample
    with pytest.MonkeyPatch.context() as mp:  # count steps actually run: a resume runs 2, a restart 4
        mp.setattr(training, "sample", lambda *a, **k: calls.append(1) or real_sample(*a, **k))
        train_smoke(cfg, fitted_dir, tmp_path / "resumed", steps=4)
    assert len(calls) == 2
    for f in ("last/adapter_model.safetensors", "step_002/adapter_model.safetensors"):
        assert (straight / f).read_bytes() == (tmp_path / "resumed" / f).read_bytes(), f
    a, b = training.read_log(straight / "train_log.csv"), training.read_log(tmp_path / "resumed" / "train_log.csv")
    keys = ["step", "reward_mean", "loss", "grad_norm", "tokens"]
    assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b]


def test_nan_loss_stops_and_keeps_last_good_checkpoint(fitted_dir, smoke_cfg, tmp_path, monkeypatch):
    cfg = cfg_for(smoke_cfg, **{"train.save_last_every": 1})
    out = train_smoke(cfg, fitted_dir, tmp_path / "run", steps=1)
    good = (out / "last" / "adapter_model.safetensors").read_bytes()
    real = objective.drgrpo_loss
    monkeypatch.setattr(objective, "drgrpo_loss", lambda *a: real(*a) * float("nan"))
    with pytest.raises(training.Diverged, match="not finite"):
        train_smoke(cfg, fitted_dir, out, steps=3)
    assert (out / "last" / "adapter_model.safetensors").read_bytes() == good
    assert json.loads((out / "last" / "state.json").read_text())["step"] == 1


# Every condition the smoke config registers (the report's three and the four controls), plus the
# entropy knob, which no registered condition uses: one path trains them all.
SMOKE_REGISTRY = config.load(str(Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml")).conditions
CONDITIONS = {**SMOKE_REGISTRY, "entropy": config.ConditionCfg(problems="all", entropy=0.01)}


@pytest.fixture(scope="module")
def selected(fitted_dir, smoke_cfg, tmp_path_factory):
    """A run folder holding the select stage's selection.json for the fitted base (what select-N conditions train on)."""
    run = tmp_path_factory.mktemp("selected")
    evaluate.select(cfg_for(smoke_cfg), str(fitted_dir), run, progress=False)
    return run


@pytest.mark.parametrize("name", list(CONDITIONS))
def test_every_condition_trains_and_resumes_bit_identically(name, fitted_dir, smoke_cfg, selected, tmp_path):
    cfg = cfg_for(
        smoke_cfg,
        **{
            "train.save_last_every": 1,
            "train.dev_every": 2,
            "train.dev_problems": 3,
            "train.dev_samples": 2,
            "train.log_kl_every": 1,
        },
    )
    cond = CONDITIONS[name]
    pool, _ = study.condition_pool(cfg, cond, selected)
    straight = train_smoke(cfg, fitted_dir, tmp_path / "straight", steps=3, condition=(name, cond), pool=pool)
    train_smoke(cfg, fitted_dir, tmp_path / "resumed", steps=1, condition=(name, cond), pool=pool)
    train_smoke(cfg, fitted_dir, tmp_path / "resumed", steps=3, condition=(name, cond), pool=pool)
    for f in ("last/adapter_model.safetensors", "step_002/adapter_model.safetensors", "train_eval.csv"):
        assert (straight / f).read_bytes() == (tmp_path / "resumed" / f).read_bytes(), f
    rows = training.read_log(straight / "train_log.csv")
    assert any(r["grad_norm"] > 0 for r in rows)  # the condition really trained
    assert all(math.isfinite(r["kl_mean"]) for r in rows)  # measured every step (log_kl_every 1)
    if cond.kl > 0:
        assert rows[0]["kl_mean"] == 0.0 and rows[-1]["kl_mean"] > 0  # exactly 0 while B = 0
    if cond.method == "sft":
        assert all(math.isnan(r["reward_mean"]) for r in rows)  # no rollouts
    else:
        assert all(0 <= r["reward_mean"] <= 1 for r in rows)
    dev = provenance.read_csv_rows(straight / "train_eval.csv")
    assert [int(r["step"]) for r in dev] == [0, 2]
    for r in dev:  # change 70's concentration, a share of the 3 dev problems; locked wrong is part of locked
        assert 0 <= float(r["locked_wrong"]) <= float(r["locked"]) <= 1 and 3 * float(r["locked"]) % 1 == 0


def test_grad_clip_is_logged_before_and_after(fitted_dir, smoke_cfg, tmp_path, monkeypatch):
    """The logged norm after clipping is measured from the clipped gradients: with clip_grad_norm_
    switched off it is the norm before, which would fail the test."""
    cfg = cfg_for(smoke_cfg, **{"train.dev_every": 0, "train.grad_clip": 1e-4})
    out = train_smoke(cfg, fitted_dir, tmp_path / "clip", steps=2)
    rows = training.read_log(out / "train_log.csv")
    moved = [r for r in rows if r["grad_norm"] > 1e-4]
    assert moved and all(r["grad_norm_clipped"] == pytest.approx(1e-4, rel=1e-3) for r in moved)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, max_norm: None)  # a clip that does nothing
    out = train_smoke(cfg, fitted_dir, tmp_path / "noclip", steps=2)
    rows = training.read_log(out / "train_log.csv")
    assert all(r["grad_norm_clipped"] == pytest.approx(r["grad_norm"]) for r in rows)


def test_fold_for_sampling_reaches_training_and_evaluation(fitted_dir, smoke_cfg, tmp_path, monkeypatch):
    cfg, model, tok, _ = model_with_lora(fitted_dir, smoke_cfg)
    cfg.lora.fold_for_sampling = True
    seen = []
    real = sampler.sample

    def spy(m, *a, **k):  # records whether every LoRA layer was folded away when the sampler ran
        seen.append(all(not x.enabled for x in m.modules() if isinstance(x, LoRALinear)))
        return real(m, *a, **k)

    monkeypatch.setattr(evaluate, "sample", spy)  # evaluation and dev checks
    monkeypatch.setattr(training, "sample", spy)  # training rollouts
    _, test = countdown.make_splits("arith-1x1", 10, 3, 0)
    evaluate.sample_problems(model, tok, cfg, test, 2, cfg.eval.sampling, "t", 8, progress=False)
    cfg.lora.fold_for_sampling = False
    evaluate.sample_problems(model, tok, cfg, test, 2, cfg.eval.sampling, "t", 8, progress=False)
    cfg.lora.fold_for_sampling = True
    assert seen == [True, False]
    train_set, _ = countdown.make_splits("arith-1x1", 20, 2, 0)
    cfg.model.path = str(fitted_dir)
    seen.clear()
    training.train(
        cfg,
        training.TrainingRun("many", config.ConditionCfg(), 0, train_set, 1e-3, 1, [], dev_every=cfg.train.dev_every),
        tmp_path / "t",
        str(fitted_dir),
        progress=False,
    )
    assert seen and all(seen)


def test_k3_is_its_formula_up_to_the_cap_and_its_tangent_beyond():
    ref = torch.tensor([0.0, 0.0, 0.0, 0.0], requires_grad=False)
    logp = torch.tensor([0.0, -1.0, -5.0, -14.0], requires_grad=True)  # r = ref - logp = 0, 1, 5, 14
    k = objective.k3(logp, ref)
    r = (ref - logp).detach()
    assert torch.allclose(k[:3], torch.exp(r[:3]) - r[:3] - 1)
    R = objective.K3_LOG_RATIO_MAX
    assert k[3].item() == pytest.approx(
        math.exp(R) - R - 1 + (math.exp(R) - 1) * (14 - R)
    )  # continuous, linear above R
    k.sum().backward()
    weight = -logp.grad  # d k3 / d log pi = -(exp(r) - 1)
    assert weight[:3].tolist() == pytest.approx((torch.exp(r[:3]) - 1).tolist())
    assert weight[3].item() == pytest.approx(math.exp(R) - 1)  # capped: one token cannot outweigh the batch
    assert torch.allclose(
        objective.k3(torch.tensor([-0.3]), torch.tensor([-0.3 + 5.0 - 1e-6])),
        objective.k3(torch.tensor([-0.3]), torch.tensor([-0.3 + 5.0 + 1e-6])),
        atol=1e-3,
    )  # no jump at the cap


def test_the_policy_gap_is_logged_and_is_rounding_in_fp32(fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg, **{"train.dev_every": 0})
    out = train_smoke(cfg, fitted_dir, tmp_path / "run", steps=2)
    rows = training.read_log(out / "train_log.csv")
    assert any(r["grad_norm"] > 0 for r in rows), rows  # some step went through the trainer
    assert all(0 <= r["logp_gap_mean"] <= r["logp_gap_max"] < 1e-4 for r in rows if r["grad_norm"] > 0), rows
    sft = train_smoke(cfg, fitted_dir, tmp_path / "sft", steps=1, condition=("sft", config.ConditionCfg(method="sft")))
    assert math.isnan(
        training.read_log(sft / "train_log.csv")[0]["logp_gap_mean"]
    )  # no rollouts: nothing sampled to compare


def test_the_gap_is_measured_against_what_the_sampler_reported(fitted_dir, smoke_cfg):
    model, tok = load_model(cfg_for(smoke_cfg, **{"model.path": str(fitted_dir)}), str(fitted_dir), CPU)
    apply_lora(model, 4, 8, ["q_proj", "v_proj"], 0)
    _, prompts = prompts_for(tok, n=2)
    comps = [[7, 8, tok.eos_token_id], [9, 10]]
    adv = torch.tensor([0.5, -0.5])
    exact = objective.policy_gradient(
        model, prompts, comps, adv, pad_id(tok), objective.Terms(10.0, 2), sampled_logp=None
    )
    assert math.isnan(exact["logp_gap_mean"])
    ids, attn, pos, cmask = pack(prompts, comps, pad_id(tok))
    with torch.no_grad():
        lp, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    true = [lp[0, :3].tolist(), lp[1, :2].tolist()]
    off = [[x + 0.25 for x in true[0]], true[1]]  # one sample's log-probs off by 0.25 nats
    model.zero_grad()
    g = objective.policy_gradient(model, prompts, comps, adv, pad_id(tok), objective.Terms(10.0, 2), sampled_logp=off)
    assert g["logp_gap_max"] == pytest.approx(0.25, abs=1e-5) and g["logp_gap_mean"] == pytest.approx(
        0.25 * 3 / 5, abs=1e-5
    )


def test_resume_loads_the_optimizer_state_as_an_uninterrupted(fitted_dir, smoke_cfg, tmp_path, monkeypatch):
    """Resume loads the optimizer state as an uninterrupted run holds it.

    AdamW's step counters stay on the CPU and its moments on the parameters' device, as in a run that
    never stopped: the saved state is loaded to the CPU, whatever device the run is on."""
    cfg = cfg_for(smoke_cfg, **{"train.save_last_every": 1, "train.dev_every": 0})
    train_smoke(cfg, fitted_dir, tmp_path / "run", steps=1)
    seen = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: seen.append(k.get("map_location")) or real(*a, **k))
    train_smoke(cfg, fitted_dir, tmp_path / "run", steps=2)
    assert seen == ["cpu"]


@pytest.mark.parametrize("rule,chosen", [("dev", 0.001), ("reward", 0.003)])
def test_lr_sweep_rule_dev_ignores_the_training_reward(tmp_path, monkeypatch, rule, chosen):
    """PLAN_CHANGES.md change 29: with lr_sweep.rule dev the rate with the best held-out dev pass@1 wins even
    where another has the higher training reward (the effect under test); rule reward is the
    report's choice. The sweep's training is replaced by one that writes the two logs."""
    cfg = config.load(
        None, ["lr_sweep.candidates=[0.001, 0.003]", "lr_sweep.steps=4", "lr_sweep.last=2", f"lr_sweep.rule={rule}"]
    )
    reward = {0.001: 0.2, 0.003: 0.6}
    dev = {0.001: 0.30, 0.003: 0.10}
    seen = []

    def fake_train(cfg, run, out, base, progress):
        seen.append(run.dev_every)
        out.mkdir(parents=True)
        (out / "train_log.csv").write_text(
            "step,reward_mean\n" + "".join(f"{s},{reward[run.lr]}\n" for s in range(1, 5))
        )
        (out / "train_eval.csv").write_text(f"step,loose_pass1\n0,0.05\n4,{dev[run.lr]}\n")
        (out / "done.json").write_text("{}")

    monkeypatch.setattr(training, "train", fake_train)
    monkeypatch.setattr(training.study, "condition_pool", lambda cfg, cond, run: ([], {"problems": "all"}))
    res = training.lr_sweep(cfg, "base", tmp_path, progress=False)
    assert res["chosen"] == chosen and res["rule_name"] == rule
    assert seen == (
        [4, 4] if rule == "dev" else [0, 0]
    )  # the dev check runs after the sweep's last step, only under dev
    assert ("dev_loose_pass1" in res) == (rule == "dev")
    assert json.loads((tmp_path / "lr_choice.json").read_text())["chosen"] == chosen


@pytest.mark.parametrize(
    "locked, chosen",
    [
        ({0.001: 0.0, 0.003: 0.0}, 0.003),  # neither locks in: the best dev pass@1, as under dev
        ({0.001: 0.0, 0.003: 0.125}, 0.001),  # the best locks onto wrong answers: excluded
        ({0.001: 0.5, 0.003: 0.125}, 0.001),  # every rate locks in: the smallest
        ({0.001: 0.0, 0.003: None}, 0.001),  # a check without the lock-in columns (older code): not admissible
    ],
)
def test_lr_sweep_dev_guarded_excludes_a_rate_that_locks_in(tmp_path, monkeypatch, locked, chosen):
    """PLAN_CHANGES.md change 72: lr_sweep.rule dev-guarded is dev among the rates whose last dev check has at most
    lr_sweep.max_lock_in of the dev problems locked on a wrong answer; lr_choice.json records each rate's."""
    cfg = config.load(None, ["lr_sweep.candidates=[0.001, 0.003]", "lr_sweep.steps=4", "lr_sweep.last=2"])
    assert cfg.lr_sweep.rule == "dev-guarded" and cfg.lr_sweep.max_lock_in == 0.10  # the registered study's
    dev = {0.001: 0.30, 0.003: 0.50}

    def fake_train(cfg, run, out, base, progress):
        out.mkdir(parents=True)
        (out / "train_log.csv").write_text("step,reward_mean\n" + "".join(f"{s},0.1\n" for s in range(1, 5)))
        lock = locked[run.lr]
        cols, last = (
            ("step,loose_pass1", f"4,{dev[run.lr]}")
            if lock is None
            else ("step,loose_pass1,locked_wrong", f"4,{dev[run.lr]},{lock}")
        )
        (out / "train_eval.csv").write_text(f"{cols}\n{last}\n")
        (out / "done.json").write_text("{}")

    monkeypatch.setattr(training, "train", fake_train)
    monkeypatch.setattr(training.study, "condition_pool", lambda cfg, cond, run: ([], {"problems": "all"}))
    res = training.lr_sweep(cfg, "base", tmp_path, progress=False)
    assert res["chosen"] == chosen and "locked on a wrong answer" in res["rule"]
    assert set(res["dev_locked_wrong"]) == {"0.001", "0.003"}


# ----------------------------------------------------------------------------- the sampler-trainer mismatch


def test_importance_weights_correct_a_bf16_sampler_against(fitted_dir, smoke_cfg):
    """Importance weights correct a bf16 sampler against the fp32 trainer.

    Samples drawn by a bf16 copy of the policy, trained by the fp32 one: their log-probabilities
    really differ, and with train.importance_cap each token's gradient is weighed by
    min(pi_trainer / pi_sampler, C), detached, some of them capped; without it, by 1."""
    _, sampler_model, tok, _ = model_with_lora(fitted_dir, smoke_cfg, dtype="bfloat16")
    _, trainer, _, _ = model_with_lora(fitted_dir, smoke_cfg)  # the same LoRA weights, fp32
    _, prompts = prompts_for(tok, n=3)
    s = config.SamplingCfg(temperature=1.0, max_new_tokens=12)
    smp = sampler.sample(sampler_model, prompts, 4, s, 0, [tok.eos_token_id], pad_id(tok), entropy=True)
    P = [prompts[i // 4] for i in range(12)]
    adv = torch.linspace(-1.0, 1.0, 12)
    ids, attn, pos, cmask = pack(P, smp.tokens, pad_id(tok))
    sampled = objective.pack_logprobs(smp.logprobs, cmask.shape[1])
    with torch.no_grad():
        lp, _ = completion_logprobs(trainer, ids, attn, pos, cmask.shape[1])
    ratio = torch.exp(lp - sampled)[cmask.bool()]
    cap = ratio.quantile(0.75).item()  # a quarter of the tokens above the cap
    params = [p for p in trainer.parameters() if p.requires_grad]

    def grad(**kw):
        trainer.zero_grad()
        out = objective.policy_gradient(
            trainer, P, smp.tokens, adv, pad_id(tok), objective.Terms(12 * 12, 12, **kw), sampled_logp=smp.logprobs
        )
        return out, torch.cat([p.grad.flatten() for p in params])

    plain, g_plain = grad()
    corrected, g_ours = grad(importance_cap=cap)
    assert plain["logp_gap_mean"] > 1e-4 and (ratio - 1).abs().max() > 1e-3  # the policies really differ
    logp, _ = completion_logprobs(trainer, ids, attn, pos, cmask.shape[1])
    w = torch.minimum(torch.exp(logp.detach() - sampled), torch.tensor(cap))
    by_hand = -(adv[:, None] * w * logp * cmask).sum() / (12 * 12)
    g_hand = torch.cat([g.flatten() for g in torch.autograd.grad(by_hand, params)])
    torch.testing.assert_close(g_ours, g_hand, rtol=1e-4, atol=1e-8)
    assert corrected["loss"] == pytest.approx(by_hand.item(), rel=1e-5)
    assert not torch.allclose(g_ours, g_plain, rtol=1e-3, atol=0)  # the weights changed the gradient
    assert (w[cmask.bool()] == cap).sum() >= 2 and (w[cmask.bool()] < cap).any()  # some capped, some not


@pytest.mark.parametrize("key, what", [("logp_gap_limit", "mean"), ("logp_gap_max_limit", "largest")])
def test_a_policy_gap_above_the_limit_stops_the_run_in_one_line(fitted_dir, smoke_cfg, tmp_path, capsys, key, what):
    """train.logp_gap_limit (the step's mean gap) and train.logp_gap_max_limit (its largest token's):
    grpo.py train exits 1 with one line at the first step whose gap is above it, before that step's
    update, and the log keeps the steps before it. An fp32 gap is rounding (~1e-6), so a limit of 1e-9
    trips at the first step that trains any token."""
    import yaml

    d = config.to_dict(
        cfg_for(smoke_cfg, **{"train.lr": 0.01, "train.dev_every": 0, "train.save_last_every": 1, f"train.{key}": 1e-9})
    )
    d["model"]["path"] = str(fitted_dir)
    d["conditions"] = {"many": d["conditions"]["many"]}
    d["analyze"]["calibration"] = None  # its taught arm names a condition left out here
    cfg_file = tmp_path / "gap.yaml"
    cfg_file.write_text(yaml.safe_dump(d))
    run = tmp_path / "run"
    rc = grpo.main(
        ["train", "--config", str(cfg_file), "--run", str(run), "--condition", "many", "--seed", "0", "--quiet"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert (
        f"exceeds train.{key} 1e-09" in err[0]
        and f"({what} |log pi" in err[0]
        and "stopped before this step's update" in err[0]
    )
    step = int(err[0].split("step ")[1].split(":")[0])
    rows = training.read_log(run / "train_many_s0" / "train_log.csv") if step > 1 else []
    assert [r["step"] for r in rows] == list(range(1, step)) and all(math.isnan(r["logp_gap_mean"]) for r in rows)
    assert not (run / "train_many_s0" / "done.json").exists()
    limit = config.load(str(cfg_file))
    assert provenance.stage_hash(limit, "train") == provenance.stage_hash(
        config.load(str(cfg_file), [f"train.{key}=null"]), "train"
    )


def test_no_signal_warning_reads_the_first_steps():
    rows = [
        {"step": s, "zero_signal_frac": z} for s, z in enumerate([1.0, 1.0, 0.875, 0.875, 0.875, 0.0, 0.0], start=1)
    ]
    w = training.no_signal_warning(rows, "train many s0")
    assert w.startswith("warning: train many s0: 92% of groups") and "steps 1-5" in w and "\n" not in w
    # 0.9 (PLAN_CHANGES.md change 45): tiny_v4's seeds that learned started at 0.70-0.85, tiny_v3's that did not at 0.95-1.00
    assert training.no_signal_warning([{**r, "zero_signal_frac": 0.85} for r in rows], "x") is None
    assert (
        training.no_signal_warning([{**r, "zero_signal_frac": 0.9} for r in rows], "x") is None
    )  # above it, not at it
    assert "steps 1-2" in training.no_signal_warning(rows[:2], "x")  # a shorter run: all its steps
    assert training.no_signal_warning([{"step": 1, "zero_signal_frac": float("nan")}], "x") is None  # sft: no groups


def test_training_prints_the_no_signal_warning_by_its_rule(fitted_dir, smoke_cfg, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(training, "NO_SIGNAL_STEPS", 2)
    cfg = cfg_for(smoke_cfg, **{"train.dev_every": 0})
    out = train_smoke(cfg, fitted_dir, tmp_path / "run", steps=3)
    rows = training.read_log(out / "train_log.csv")
    share = (rows[0]["zero_signal_frac"] + rows[1]["zero_signal_frac"]) / 2
    err = [x for x in capsys.readouterr().out.splitlines() if x.startswith("warning:")]
    assert err == (
        [
            f"warning: train many s0: {share:.0%} of groups carried no reward signal over steps 1-2 (all samples of a problem "
            "scored alike: zero advantage, no gradient); most of each step's samples teach nothing"
        ]
        if share > 0.9
        else []
    )


def test_the_training_figure_draws_the_no_signal_share(fitted_dir, smoke_cfg, tmp_path, monkeypatch):
    """The training figure draws the no signal share with the warnings threshold."""
    from analysis import figures

    cfg = cfg_for(smoke_cfg, **{"train.dev_every": 0})
    run = tmp_path / "run"
    train_smoke(cfg, fitted_dir, run / "train_many_s0", steps=2)
    drawn = []
    real = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.append(fig) or real(fig, path))
    assert figures.training_figure(run, [2], dev=False) == run / "figures" / "training.png"
    ax = next(a for a in drawn[0].axes if a.get_ylabel() == "groups with no signal (share)")
    rows = training.read_log(run / "train_many_s0" / "train_log.csv")
    assert list(ax.lines[0].get_ydata()) == [r["zero_signal_frac"] for r in rows]
    assert any(list(line.get_ydata()) == [0.9, 0.9] for line in ax.lines)  # the threshold of no_signal_warning


@pytest.mark.parametrize("rule", ["step", "skip"])
def test_a_zero_gradient_steps_or_not_by_the_registered_rule(rule):
    """train.no_signal_update (PLAN_CHANGES.md change 45): after a step with signal, a step whose gradient is
    exactly zero (every group scored alike) still moves the weights under `step` (AdamW's momentum), and
    leaves weights and optimizer state as they were under `skip`; the log says which."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4))
    opt = torch.optim.AdamW([w], lr=0.1)
    tc = config.TrainCfg(no_signal_update=rule)
    grad = {"loss": 0.0, "logp_gap_mean": float("nan"), "logp_gap_max": float("nan")}
    w.grad = torch.ones(4)
    assert training.update(opt, [w], grad, 1, tc, Path(".")).updated is True
    before, state = w.detach().clone(), opt.state_dict()["state"][0]["step"].item()
    upd = training.update(opt, [w], grad, 2, tc, Path("."))  # no .grad: every advantage was 0
    assert upd.gnorm == 0.0 and upd.updated is (rule == "step")
    assert torch.equal(w.detach(), before) is (rule == "skip")
    assert opt.state_dict()["state"][0]["step"].item() == state + (rule == "step")
    samples = sampler.Samples([[1, 2]], [False], [0.5])
    drawn = training.Drawn(samples, [{"format": 1.0}], torch.zeros(1, 1), [[1, 2]])
    grad = {**grad, "kl_mean": 0.0}
    row = training.log_row(2, 0.1, objective.METHODS["grpo"], drawn, grad, upd, (0.0, 0.0), (0.0, 0.0))
    assert (row["no_signal"], row["updated"]) == (1, int(rule == "step"))


def test_a_read_only_run_folder_ends_in_one_line(fitted_dir, smoke_cfg, tmp_path, capsys, monkeypatch):
    """grpo.py eval into a run folder it cannot write (moving the old file aside fails): one line naming
    the file, exit 1, no traceback."""
    import yaml

    d = config.to_dict(cfg_for(smoke_cfg))
    d["model"]["path"], d["model"]["build"] = str(fitted_dir), None
    cfg_file = tmp_path / "ro.yaml"
    cfg_file.write_text(yaml.safe_dump(d))

    def refuse(run, path, when=None):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(provenance, "move_aside", refuse)
    rc = grpo.main(["eval", "--config", str(cfg_file), "--run", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert (
        err[0].startswith("grpo.py eval: Permission denied (")
        and "eval_base.json" in err[0]
        and "must be writable" in err[0]
    )


def test_the_micro_batch_is_said_only_when_computed(fitted_dir, smoke_cfg, tmp_path, capsys):
    """A training run says its micro-batch when it sized it from memory_gb (micro_batch 0), not when the
    config sets it (before: the smoke run's 18 training runs each printed "micro_batch 16, set in the
    config (it wins: ...)"); done.json records the reason either way."""
    pool, _ = countdown.make_splits(
        smoke_cfg.task.name, smoke_cfg.task.n_train, smoke_cfg.task.n_test, smoke_cfg.task.seed
    )
    said = {}
    for mb in (16, 0):
        cfg = cfg_for(smoke_cfg, **{"train.dev_every": 0, "micro_batch": mb})
        run = training.TrainingRun("many", config.ConditionCfg(), 0, pool, 0.01, 1, [1], dev_every=0)
        out = training.train(cfg, run, tmp_path / f"mb{mb}", str(fitted_dir), progress=True)
        said[mb] = [x for x in capsys.readouterr().out.splitlines() if "micro_batch" in x]
        assert "micro_batch" in json.loads((out / "done.json").read_text())["micro_batch_why"]
    assert said[16] == [] and len(said[0]) == 1 and said[0][0].startswith("train many s0: micro_batch "), said


def test_the_unlikeliness_reward_ranks_a_groups_correct_answers_by_likelihood():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    logp = torch.tensor([[-3.0, -9.0, -1.0, -5.0], [-1.0, -2.0, -3.0, -4.0], [-2.0, -2.0, -1.0, -3.0]])
    got = objective.unlikeliness_rewards(rewards, logp, 0.5)
    # group 0: correct ones least likely first: -5 (j 0), -3 (j 1), -1 (j 2); 1 - 0.5 j / 4
    assert got[0].tolist() == [1 - 0.5 / 4, 0.0, 1 - 1.0 / 4, 1.0]
    assert got[1].tolist() == [0.0] * 4  # nothing rewarded, nothing to rank
    # a tie (-2, -2) ranks by position: -3 (j 0), -2 at 0 (j 1), -2 at 1 (j 2), -1 (j 3)
    assert got[2].tolist() == [1 - 0.5 / 4, 1 - 1.0 / 4, 1 - 1.5 / 4, 1.0]
    assert torch.equal(objective.unlikeliness_rewards(rewards, logp, 0.0), rewards)


def test_an_unlikeliness_condition_trains_on_its_reranked_rewards(fitted_dir, smoke_cfg, tmp_path):
    """The same samples (same seed and name) and scores as plain GRPO at step 1; another gradient where a group
    holds two correct answers of different likelihood; the stage hash of an unlikeliness of 0 is as before."""
    cfg = cfg_for(smoke_cfg, **{"train.dev_every": 0, "train.log_kl_every": 0})
    loose = config.ConditionCfg(reward="loose")  # more correct answers per group than strict
    plain = train_smoke(cfg, fitted_dir, tmp_path / "plain", steps=2, condition=("many", loose))
    unlikely = config.ConditionCfg(reward="loose", unlikeliness=1.0)
    moved = train_smoke(cfg, fitted_dir, tmp_path / "unlikely", steps=2, condition=("many", unlikely))
    a, b = training.read_log(plain / "train_log.csv"), training.read_log(moved / "train_log.csv")
    assert a[0]["reward_mean"] == b[0]["reward_mean"]  # the log keeps the scores of the same samples
    f = "step_002/adapter_model.safetensors"
    assert (plain / f).read_bytes() != (moved / f).read_bytes()
    _, _, inputs = study.train_inputs(cfg_for(smoke_cfg, **{"train.lr": 0.001}), "many", 0, tmp_path)
    assert "unlikeliness" not in inputs["settings"]  # an older run's hash is unchanged


def test_policy_gradient_reads_the_device_once_per_step_not_per_micro_batch(fitted_dir, smoke_cfg, monkeypatch):
    """Issue 67: the running sums (loss, KL, policy gap) stay on the device; the number of host reads (.item(),
    float(), .tolist() on a tensor) does not grow with the number of micro-batches, and the numbers are those of
    one micro-batch of everything."""
    cfg = cfg_for(smoke_cfg)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    apply_lora(model, 4, 8, cfg.lora.targets, seed=5)
    _, prompts = prompts_for(tok, n=2)
    P = [prompts[0]] * 3 + [prompts[1]] * 3
    comps = [[7, 8, tok.eos_token_id], [9], [10, 11, 12, 13], [7], [8, 8], [tok.eos_token_id]]
    adv = torch.tensor([0.5, -0.25, -0.25, 0.1, 0.2, -0.3])
    sampled = [[-1.0] * len(c) for c in comps]
    reads, results = [], []
    for name in ("item", "__float__", "tolist"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _r=real, **k: reads.append(1) or _r(self, *a, **k))
    for mb in (1, 6):
        reads.clear()
        model.zero_grad()
        results.append(
            objective.policy_gradient(
                model, P, comps, adv, pad_id(tok), objective.Terms(30, mb, kl=0.01), sampled_logp=sampled
            )
        )
        results[-1]["reads"] = len(reads)
    assert results[0]["reads"] == results[1]["reads"] <= len(comps) + 4  # the advantages once each, the sums once
    for key in ("loss", "kl_mean", "logp_gap_mean", "logp_gap_max"):
        assert results[0][key] == pytest.approx(results[1][key], rel=1e-6), key


def test_gradient_checkpointing_gives_the_same_loss_and_gradients_bit_for_bit(fitted_dir, smoke_cfg):
    """train.gradient_checkpointing (method/model.checkpoint_layers): every decoder layer runs again in the
    backward pass, and the loss and every LoRA gradient are the same bits as without it."""
    from method.model import checkpoint_layers

    out, calls = [], []
    for on in (False, True):
        _, model, tok, _ = model_with_lora(fitted_dir, smoke_cfg)
        if on:
            assert checkpoint_layers(model) == model.config.num_hidden_layers
        layer = model.model.layers[0]
        hook = layer.self_attn.register_forward_pre_hook(
            lambda *_: calls.append(on)
        )  # recompute stops early: a pre-hook
        _, test = countdown.make_splits("arith-1x1", 10, 2, 0)
        prompts = render_prompts(tok, test, "bare")
        P = [prompts[0]] * 2 + [prompts[1]] * 2
        comps = [[7, 8, tok.eos_token_id], [9], [10, 11, 12, 13], [7, 7]]
        adv = torch.tensor([0.5, -0.5, 0.25, -0.25])
        loss = objective.policy_gradient(model, P, comps, adv, pad_id(tok), objective.Terms(4 * 10, 2))["loss"]
        hook.remove()
        out.append((loss, torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])))
    assert calls.count(True) == 2 * calls.count(False)  # each micro-batch's layer ran twice: forward, recompute
    assert out[1][0] == out[0][0] and torch.equal(out[1][1], out[0][1]) and out[0][1].abs().sum() > 0


def test_gradient_checkpointing_lowers_the_estimated_training_peak():
    from types import SimpleNamespace

    from orchestration import memory

    mc = SimpleNamespace(**cost_model_shape())
    args = (mc, 32, 7, 80, 384, 8, 64)
    full, ckpt = memory.estimate_memory(*args), memory.estimate_memory(*args, checkpointing=True)
    assert ckpt["activations"] < full["activations"] / 4 and ckpt["static"] == full["static"]


def cost_model_shape():
    from runner import cost_model

    return cost_model.REGISTERED_SHAPES["Qwen/Qwen2.5-0.5B-Instruct"]


def test_the_kl_diagnostic_is_the_per_micro_batch_sum_read_once(fitted_dir, smoke_cfg):
    """measure_kl (train.log_kl_every) keeps its sum on the device and reads it once: the same bits as summing
    each micro-batch's k3 total on the host, in order, over the completions' token count."""
    _, model, tok, _ = model_with_lora(fitted_dir, smoke_cfg, scale=0.3)
    _, test = countdown.make_splits("arith-1x1", 10, 2, 0)
    prompts = render_prompts(tok, test, "bare")
    P = [prompts[0]] * 3 + [prompts[1]] * 3
    comps = [[7, 8, tok.eos_token_id], [9], [10, 11, 12, 13], [7, 7], [8], [9, 9, 9]]
    got = objective.policy_gradient(
        model, P, comps, torch.zeros(6), pad_id(tok), objective.Terms(6 * 5, 2, measure_kl=True)
    )
    by_hand, tokens = 0.0, 0
    with torch.no_grad():
        for a in range(0, 6, 2):
            ids, attn, pos, cmask = objective.pack(P[a : a + 2], comps[a : a + 2], pad_id(tok))
            logp, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
            with objective.lora_disabled(model):
                ref, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
            by_hand += (objective.k3(logp, ref) * cmask).sum().item()
            tokens += int(cmask.sum().item())
    assert by_hand > 0 and got["kl_mean"] == by_hand / tokens


@pytest.mark.parametrize("draw", ["batch", "sample"])
def test_rollouts_under_train_draw_sample_do_not_depend_on_their_call(draw, fitted_dir, smoke_cfg):
    """train.draw: sample keys each rollout's stream by (run, step, problem id, index): a problem's G rollouts are
    the same tokens whether it is sampled alone or beside another problem; under batch (one generator per call,
    every run so far) they are not, and the two draws differ."""
    from types import SimpleNamespace

    cfg = cfg_for(smoke_cfg, **{"train.draw": draw})
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    problems, prompts = prompts_for(tok, 2)
    run = training.TrainingRun("many", cfg.conditions["many"], 0, problems, 1e-3, 1, [1])
    st = SimpleNamespace(model=model, tok=tok, cfg=cfg, run=run, stops=stop_ids(model, tok), pad=pad_id(tok))
    G = cfg.train.group_size
    both, _ = training.rollouts(st, problems, prompts, 3)
    alone, _ = training.rollouts(st, problems[1:], prompts[1:], 3)
    assert (both.tokens[G:] == alone.tokens) is (draw == "sample")
    batch, _ = training.rollouts(SimpleNamespace(**{**vars(st), "cfg": cfg_for(smoke_cfg)}), problems, prompts, 3)
    assert (both.tokens == batch.tokens) is (draw == "batch")
