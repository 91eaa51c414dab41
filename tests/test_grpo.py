"""LoRA, sampler, log-probs, the Dr. GRPO loss and resumable training, on tiny offline models."""
import json
import shutil

import pytest
import torch

import config as C
import countdown
import grpo

CPU = torch.device("cpu")


def cfg_for(smoke_cfg, **sets):
    # the smoke settings, minus the build (the fixtures hand us a model folder)
    d = C.to_dict(smoke_cfg)
    d["model"]["build"] = None
    d["model"]["path"] = "unused"
    cfg = C._build(C.Config, d)
    for k, v in sets.items():
        node = cfg
        *parts, last = k.split(".")
        for p in parts:
            node = getattr(node, p)
        setattr(node, last, v)
    return cfg


def prompts_for(tok, n=3, task="arith-1x1"):
    _, test = countdown.make_splits(task, 10, n, 0)
    return test, grpo.render_prompts(tok, test, "bare")


# ----------------------------------------------------------------------------- LoRA


def test_lora_starts_equal_to_base_and_only_lora_trains(fitted_dir, smoke_cfg):
    cfg = cfg_for(smoke_cfg)
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok)
    ids, mask = grpo.left_pad(prompts, grpo.pad_id(tok))
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    before = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    frozen = {k: v.clone() for k, v in model.state_dict().items()}
    wrapped = grpo.apply_lora(model, 4, 8, cfg.lora.targets, seed=1)
    assert len(wrapped) == 7 * 2  # seven projections in each of two layers
    after = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert torch.equal(before, after)  # B = 0: exactly the base
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # one optimizer step on a nonzero loss changes LoRA tensors and nothing else
    opt = grpo.make_optimizer(model, cfg, 1e-2)
    model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.pow(2).mean().backward()
    opt.step()
    for k, v in model.state_dict().items():
        base_key = k.replace(".base_layer.", ".")
        if ".lora_" in k:
            continue
        assert torch.equal(v, frozen[base_key]), k
    assert any(v.abs().sum() > 0 for k, v in model.state_dict().items() if ".lora_B." in k)


def test_adapter_loads_in_peft_with_same_logits(fitted_dir, smoke_cfg, tmp_path):
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    cfg = cfg_for(smoke_cfg)
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    grpo.apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed=3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)  # a non-trivial adapter
    grpo.save_adapter(model, tmp_path / "adapter", cfg, str(fitted_dir))
    _, prompts = prompts_for(tok)
    ids, mask = grpo.left_pad(prompts, grpo.pad_id(tok))
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    ours = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    base = AutoModelForCausalLM.from_pretrained(str(fitted_dir), dtype=torch.float32)
    theirs_model = peft.PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    theirs = theirs_model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert (ours - grpo.load_model(cfg, str(fitted_dir), CPU)[0](input_ids=ids, attention_mask=mask, position_ids=pos).logits).abs().max() > 1e-3
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    # and our loader reads the same file back exactly
    model2, _ = grpo.load_model(cfg, str(fitted_dir), CPU)
    grpo.apply_lora(model2, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed=99)
    grpo.load_adapter(model2, tmp_path / "adapter")
    assert torch.equal(model2(input_ids=ids, attention_mask=mask, position_ids=pos).logits, ours)


# ----------------------------------------------------------------------------- sampler


def test_greedy_equals_generate_with_left_padding(fitted_dir, smoke_cfg):
    from transformers import GenerationConfig

    cfg = cfg_for(smoke_cfg)
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=6)
    prompts[1] = prompts[1][:4] + prompts[1][-3:]  # different lengths -> real left padding
    prompts[2] = prompts[2] + prompts[0][1:5]
    assert len({len(p) for p in prompts}) > 1
    stops, pad = grpo.stop_ids(model, tok), grpo.pad_id(tok)
    ours = grpo.sample(model, prompts, 1, C.SamplingCfg(temperature=0, max_new_tokens=30), 0, stops, pad)
    ids, mask = grpo.left_pad(prompts, pad)
    gc = GenerationConfig(do_sample=False, max_new_tokens=30, eos_token_id=stops, pad_token_id=pad, repetition_penalty=1.0)
    ref = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)[:, ids.shape[1]:]
    for i, toks in enumerate(ours.tokens):
        assert ref[i, : len(toks)].tolist() == toks
        if not ours.truncated[i]:
            assert toks[-1] in stops and all(t == pad for t in ref[i, len(toks):].tolist())


def test_generation_config_file_changes_nothing(fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg)
    plain = tmp_path / "plain"
    shutil.copytree(fitted_dir, plain)
    (plain / "generation_config.json").unlink(missing_ok=True)
    loud = tmp_path / "loud"
    shutil.copytree(fitted_dir, loud)
    (loud / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "repetition_penalty": 1.3, "top_k": 3, "top_p": 0.5, "temperature": 0.1}))
    s = C.SamplingCfg(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=30)
    outs = []
    for d in (plain, loud):
        model, tok = grpo.load_model(cfg, str(d), CPU)
        _, prompts = prompts_for(tok, n=4)
        outs.append(grpo.sample(model, prompts, 4, s, 123, grpo.stop_ids(model, tok), grpo.pad_id(tok)).tokens)
    assert outs[0] == outs[1]
    # ...while temperature 0.1 (what the file asks for) would have given different samples
    model, tok = grpo.load_model(cfg, str(plain), CPU)
    _, prompts = prompts_for(tok, n=4)
    cold = grpo.sample(model, prompts, 4, C.SamplingCfg(temperature=0.1, max_new_tokens=30), 123, grpo.stop_ids(model, tok), grpo.pad_id(tok)).tokens
    assert cold != outs[0]


def test_sampling_is_seeded(fitted_dir, smoke_cfg):
    cfg = cfg_for(smoke_cfg)
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=3)
    s = C.SamplingCfg(temperature=1.0, max_new_tokens=20)
    a = grpo.sample(model, prompts, 4, s, 7, grpo.stop_ids(model, tok), grpo.pad_id(tok)).tokens
    b = grpo.sample(model, prompts, 4, s, 7, grpo.stop_ids(model, tok), grpo.pad_id(tok)).tokens
    c = grpo.sample(model, prompts, 4, s, 8, grpo.stop_ids(model, tok), grpo.pad_id(tok)).tokens
    assert a == b and a != c
    assert len(a) == 12


@pytest.mark.parametrize("top_k,top_p,keep", [
    (0, 1.0, [0, 1, 2, 3, 4]),
    (2, 1.0, [0, 1]),
    (1, 1.0, [0]),
    (0, 0.5, [0]),        # p = .5, .25, .15, .07, .03: .5 alone reaches 0.5
    (0, 0.6, [0, 1]),     # .5 < .6 -> add the next
    (0, 0.75, [0, 1]),    # .75 reaches .75 exactly
    (0, 0.76, [0, 1, 2]),
    (0, 0.01, [0]),       # the top token is always kept
    (3, 0.76, [0, 1]),    # top-k first; the nucleus is of the renormalised rest (.56, .28, .17)
    (2, 0.9, [0, 1]),     # top-k first, then the nucleus of what is left
])
def test_filter_logits_keeps_the_intended_tokens(top_k, top_p, keep):
    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03])
    order = torch.tensor([3, 0, 4, 1, 2])  # scramble positions so sorting matters
    logits = torch.empty(5)
    logits[order] = probs.log()
    out = grpo.filter_logits(logits[None], top_k, top_p)[0]
    kept = sorted(int(order[i]) for i in keep)
    assert sorted(torch.isfinite(out).nonzero().squeeze(1).tolist()) == kept


# ----------------------------------------------------------------------------- log-probs and the loss


def test_pack_mask_comes_from_lengths_even_when_pad_is_eos():
    eos = 1
    ids, attn, pos, cmask = grpo.pack([[5, 6, 7], [8]], [[9, eos], [eos, 4, eos]], pad=eos)
    assert ids.tolist() == [[5, 6, 7, 9, eos, eos], [eos, eos, 8, eos, 4, eos]]
    assert cmask.tolist() == [[1, 1, 0], [1, 1, 1]]  # the emitted EOS is trained, the pad is not
    assert attn.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert pos[1].tolist()[2:] == [0, 1, 2, 3]


def test_completion_logprobs_match_full_softmax(fitted_dir, smoke_cfg):
    cfg = cfg_for(smoke_cfg)
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=2)
    comps = [[7, 8, 9, tok.eos_token_id], [10, 11]]
    ids, attn, pos, cmask = grpo.pack(prompts, comps, grpo.pad_id(tok))
    lp, _ = grpo.completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    full = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits.log_softmax(-1)
    Lp = ids.shape[1] - cmask.shape[1]
    for i, c in enumerate(comps):
        for j, t in enumerate(c):
            assert lp[i, j].item() == pytest.approx(full[i, Lp + j - 1, t].item(), abs=1e-5)


def test_advantages_and_loss_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    adv = grpo.group_advantages(rewards)
    assert adv.tolist() == [[0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0]]  # no std division; equal group -> 0
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0], [-3.0, -1.0], [-1.0, -1.0]], requires_grad=True)
    cmask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    a = torch.tensor([0.5, -0.5, 0.0, 0.25])
    loss = grpo.drgrpo_loss(logp, cmask, a, normalizer=10.0)
    # -(0.5*(-3) + -0.5*(-0.5) + 0 + 0.25*(-2)) / 10 = -(-1.5 + 0.25 - 0.5)/10 = 0.175
    assert loss.item() == pytest.approx(0.175)
    loss.backward()
    expected = -(a[:, None] * cmask) / 10.0
    assert torch.equal(logp.grad, expected)
    assert logp.grad[2].abs().sum() == 0 and logp.grad[1, 1] == 0  # zero advantage, masked token


def test_policy_gradient_is_microbatch_invariant_and_skips_zero_advantage(fitted_dir, smoke_cfg):
    cfg = cfg_for(smoke_cfg)
    grads = []
    for mb in (1, 3, 16):
        model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
        grpo.apply_lora(model, 4, 8, cfg.lora.targets, seed=5)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if ".lora_B." in n:
                    p.fill_(0.01)
        _, prompts = prompts_for(tok, n=2)
        P = [prompts[0]] * 3 + [prompts[1]] * 3
        comps = [[7, 8, tok.eos_token_id], [9], [10, 11, 12, 13], [7], [8, 8], [tok.eos_token_id]]
        adv = torch.tensor([0.5, -0.25, -0.25, 0.0, 0.0, 0.0])
        packed = []
        real_pack = grpo.pack
        grpo.pack = lambda p, c, pad: packed.append(len(c)) or real_pack(p, c, pad)
        try:
            loss = grpo.policy_gradient(model, P, comps, adv, 6 * 5, mb, grpo.pad_id(tok))["loss"]
        finally:
            grpo.pack = real_pack
        assert sum(packed) == 3  # only the three rows with a nonzero advantage go through the model
        grads.append((loss, torch.cat([p.grad.flatten() for n, p in model.named_parameters() if p.requires_grad])))
        # the same loss computed in one go, by hand, including the zero-advantage rows
        ids, attn, pos, cmask = grpo.pack(P, comps, grpo.pad_id(tok))
        with torch.no_grad():
            lp, _ = grpo.completion_logprobs(model, ids, attn, pos, cmask.shape[1])
        assert loss == pytest.approx(-(adv[:, None] * lp * cmask).sum().item() / 30, abs=1e-6)
    for loss, g in grads[1:]:
        assert loss == pytest.approx(grads[0][0], abs=1e-6)
        torch.testing.assert_close(g, grads[0][1], atol=1e-6, rtol=1e-5)
    assert grads[0][1].abs().sum() > 0


def test_step_problems_cycles_and_shuffles():
    pool = list(range(10))
    many = [grpo.step_problems(pool, s, 4, seed=1, shuffle=True) for s in (1, 2, 3)]
    flat = many[0] + many[1] + many[2][:2]
    assert sorted(flat) == pool  # the first epoch is a permutation of the pool
    assert flat != pool
    assert grpo.step_problems(pool, 2, 4, seed=1, shuffle=True) == many[1]  # depends only on (seed, step)
    assert grpo.step_problems([42], 3, 4, seed=0, shuffle=False) == [42] * 4  # copies of one problem


# ----------------------------------------------------------------------------- training and resume


def _train(cfg, fitted_dir, out, steps, **kw):
    train_set, _ = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    name, cond = kw.pop("condition", ("many", C.ConditionCfg()))
    return grpo.train(cfg, name, cond, 0, train_set, 0.01, out, str(fitted_dir), steps=steps, checkpoints=[2], progress=False, **kw)


def test_training_learns_something_and_resume_is_bit_identical(fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg, **{"train.save_last_every": 1, "train.dev_every": 0})  # count rollouts only
    straight = _train(cfg, fitted_dir, tmp_path / "straight", steps=4)
    rows = grpo.read_log(straight / "train_log.csv")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert min(r["zero_signal_frac"] for r in rows) < 1.0  # some group had signal...
    assert any(r["grad_norm"] > 0 for r in rows)  # ...so the adapter really moved
    from safetensors.torch import load_file

    b = load_file(str(straight / "last" / "adapter_model.safetensors"))
    assert any(v.abs().sum() > 0 for k, v in b.items() if "lora_B" in k)
    assert (straight / "step_002" / "adapter_config.json").exists()
    # two steps, "killed", then resumed to four: the same bytes as four straight through
    _train(cfg, fitted_dir, tmp_path / "resumed", steps=2)
    assert json.loads((tmp_path / "resumed" / "last" / "state.json").read_text())["step"] == 2
    calls = []
    real_sample = grpo.sample
    with pytest.MonkeyPatch.context() as mp:  # count steps actually run: a resume runs 2, a restart 4
        mp.setattr(grpo, "sample", lambda *a, **k: calls.append(1) or real_sample(*a, **k))
        _train(cfg, fitted_dir, tmp_path / "resumed", steps=4)
    assert len(calls) == 2
    for f in ("last/adapter_model.safetensors", "step_002/adapter_model.safetensors"):
        assert (straight / f).read_bytes() == (tmp_path / "resumed" / f).read_bytes(), f
    a, b = grpo.read_log(straight / "train_log.csv"), grpo.read_log(tmp_path / "resumed" / "train_log.csv")
    keys = ["step", "reward_mean", "loss", "grad_norm", "tokens"]
    assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b]


def test_nan_loss_stops_and_keeps_last_good_checkpoint(fitted_dir, smoke_cfg, tmp_path, monkeypatch):
    cfg = cfg_for(smoke_cfg, **{"train.save_last_every": 1})
    out = _train(cfg, fitted_dir, tmp_path / "run", steps=1)
    good = (out / "last" / "adapter_model.safetensors").read_bytes()
    real = grpo.drgrpo_loss
    monkeypatch.setattr(grpo, "drgrpo_loss", lambda *a: real(*a) * float("nan"))
    with pytest.raises(grpo.Diverged, match="not finite"):
        _train(cfg, fitted_dir, out, steps=3)
    assert (out / "last" / "adapter_model.safetensors").read_bytes() == good
    assert json.loads((out / "last" / "state.json").read_text())["step"] == 1


def test_pass_at_k_matches_closed_form():
    from math import comb

    for n in (1, 2, 5, 16, 32, 100):
        for c in range(n + 1):
            prev = -1.0
            for k in range(1, n + 1):
                exact = 1 - comb(n - c, k) / comb(n, k)
                got = grpo.pass_at_k(n, c, k)
                assert got == pytest.approx(exact, abs=1e-12)
                assert got >= prev - 1e-15  # non-decreasing in k
                prev = got
    assert grpo.pass_at_k(32, 0, 32) == 0.0 and grpo.pass_at_k(32, 32, 1) == 1.0
    assert grpo.pass_at_k(10, 1, 1) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        grpo.pass_at_k(8, 2, 9)  # k > n is an error, never a silent skip
    with pytest.raises(ValueError):
        grpo.pass_at_k(8, 9, 1)


def test_choose_sets_rule():
    rates = [0.0, 0.5, 1.0, 0.25, 0.75, 0.5, 0.125]
    sets = grpo.choose_sets(rates, [3, 1, 10])
    assert sets["3"] == [1, 5, 3]  # p(1-p): .25, .25 (tie by index), then .1875 (index 3 before 4)
    assert sets["1"] == [1]
    assert sets["10"] == [1, 5, 3, 4, 6]  # only the five informative problems exist


def test_seed_for_is_stable():
    assert grpo.seed_for(0, "train", "many", 1) == grpo.seed_for(0, "train", "many", 1)
    assert grpo.seed_for(0, "train", "many", 1) != grpo.seed_for(0, "train", "many", 2)
    assert 0 <= grpo.seed_for("x") < 2**63


def test_memory_estimate_and_automatic_micro_batch(smoke_cfg):
    from transformers import Qwen2Config

    mc = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                     num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
    est = [grpo.estimate_memory(mc, 32, 7, 80, 384, b, 128) for b in (1, 2, 3)]
    assert round(est[0]["params"] / 1e6) == 494  # Qwen2.5-0.5B's parameter count (tied embeddings)
    assert round(est[0]["lora_params"] / 1e6, 1) == 17.6  # r 32 on the seven projections of 24 layers
    # the micro-batch-dependent parts scale linearly; the static part does not move
    assert est[1]["activations"] == pytest.approx(2 * est[0]["activations"])
    assert est[2]["logits"] - est[0]["logits"] == pytest.approx(2 * (est[1]["logits"] - est[0]["logits"]))  # + one chunk's fp32 temporaries
    assert est[0]["logits"] - (est[1]["logits"] - est[0]["logits"]) == 3 * 4 * grpo.TokenLogProbs.CHUNK
    assert est[0]["static"] == est[2]["static"]
    cfg = C.load(None)  # the study's defaults: micro_batch 0 -> chosen from memory_gb 8
    b = grpo.auto_micro_batch(cfg, mc, 80)
    def fits(m):
        e = grpo.estimate_memory(mc, 32, 7, 80, 384, m, 128)
        return e["static"] + grpo.MEASURED_OVER_ESTIMATE * (e["activations"] + e["logits"]) <= 0.85 * 8 * 2**30
    assert fits(b) and not fits(b + 1)
    assert b == 3  # 2 before the log-probs were chunked (TokenLogProbs) and q/k/v shared one fp32 copy
    cfg.micro_batch = 5
    assert grpo.auto_micro_batch(cfg, mc, 80) == 5  # an explicit micro-batch is taken as is
    cfg.micro_batch, cfg.memory_gb = 0, 0.5
    assert grpo.auto_micro_batch(cfg, mc, 80) == 1  # never below one


def test_sampled_rows_end_at_their_first_stop_token(fitted_dir, smoke_cfg):
    """Finished rows stay in the batch until an eighth have finished; nothing they draw after
    their stop token may leak into their outputs, and the truncation flags must follow."""
    cfg = cfg_for(smoke_cfg)
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=4)
    stops = grpo.stop_ids(model, tok)
    for max_new in (12, 40):
        smp = grpo.sample(model, prompts, 8, C.SamplingCfg(temperature=1.0, max_new_tokens=max_new), 3, stops, grpo.pad_id(tok))
        lengths = {len(x) for x in smp.tokens}
        for toks, trunc in zip(smp.tokens, smp.truncated):
            assert 1 <= len(toks) <= max_new
            assert not any(t in stops for t in toks[:-1])  # no token after the first stop
            assert trunc == (toks[-1] not in stops)  # truncated exactly when no stop token was drawn
            assert not trunc or len(toks) == max_new
        assert max_new == 12 or len(lengths) > 1  # rows really finished at different steps (12 tokens may end none)
