"""The speed work's switches: the shared fp32 cast of LoRA inputs (always on: same numbers),
lora.fold_for_sampling and train.sort_by_length (settings: nearly the same numbers), and the
rule that keeps the hashes of runs made before these keys existed."""
import pytest
import torch

import config as C
import countdown
import grpo
import provenance

CPU = torch.device("cpu")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def model_with_lora(fitted_dir, smoke_cfg, dtype="float32", scale=0.05):
    d = C.to_dict(smoke_cfg)
    d["model"]["build"], d["model"]["path"], d["model"]["dtype"] = None, str(fitted_dir), dtype
    cfg = C._build(C.Config, d)
    model, tok = grpo.load_model(cfg, str(fitted_dir), CPU)
    grpo.apply_lora(model, 4, 8, TARGETS, 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
    _, test = countdown.make_splits("arith-1x1", 10, 4, 0)
    ids, mask = grpo.left_pad(grpo.render_prompts(tok, test, "bare"), grpo.pad_id(tok))
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return cfg, model, tok, dict(input_ids=ids, attention_mask=mask, position_ids=pos)


def casts(model, batch) -> int:
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        model(**batch)
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")


def test_shared_cast_gives_the_same_logits_and_gradients_with_fewer_casts(fitted_dir, smoke_cfg):
    _, model, _, batch = model_with_lora(fitted_dir, smoke_cfg, "bfloat16")
    layers = [m for m in model.modules() if isinstance(m, grpo.LoRALinear)]
    assert len({id(m.cast) for m in layers}) == 2 * 2  # one per attention block and per MLP, two layers

    def run():
        model.zero_grad()
        logits = model(**batch).logits
        logits.float().pow(2).mean().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]

    shared_logits, shared_grads = run()
    shared_casts = casts(model, batch)
    for m in layers:
        m.cast = grpo.SharedCast()  # every layer casts its own input, as before
    own_logits, own_grads = run()
    assert torch.equal(shared_logits, own_logits)
    # the input gradients of q/k/v (and gate/up) now meet in fp32 and are rounded to bf16 once, not
    # rounded three times and summed in bf16: the LoRA gradients of earlier layers move by rounding
    rel = [((a - b).norm() / b.norm()).item() for a, b in zip(shared_grads, own_grads)]
    assert max(rel) < 0.02 and max(rel) > 0
    assert casts(model, batch) - shared_casts == 2 * 3  # q/k/v save two casts per layer, gate/up one


def test_folded_sampling_weights_are_w_plus_scaled_ba_and_restored(fitted_dir, smoke_cfg):
    _, model, _, batch = model_with_lora(fitted_dir, smoke_cfg)
    layers = [m for m in model.modules() if isinstance(m, grpo.LoRALinear)]
    frozen = [m.base_layer.weight for m in layers]
    with torch.no_grad():
        exact = model(**batch).logits
        with grpo.lora_folded(model):
            m = layers[0]
            assert not m.enabled
            torch.testing.assert_close(m.base_layer.weight, frozen[0] + m.scaling * m.lora_B.weight @ m.lora_A.weight, rtol=0, atol=1e-6)
            folded = model(**batch).logits
        assert all(m.base_layer.weight is w and m.enabled for m, w in zip(layers, frozen))
        assert torch.equal(model(**batch).logits, exact)
    assert (exact - folded).abs().max() > 0  # fp32 rounding differs in the last bits...
    torch.testing.assert_close(folded, exact, rtol=1e-5, atol=1e-5)  # ...and only there
    # the folded bf16 model is another policy: rounding W + s B A to bf16 drops part of the update
    _, m16, _, b16 = model_with_lora(fitted_dir, smoke_cfg, "bfloat16", scale=0.002)
    with torch.no_grad():
        e16 = m16(**b16).logits.float()
        with grpo.lora_folded(m16):
            f16 = m16(**b16).logits.float()
    kl = (e16.log_softmax(-1).exp() * (e16.log_softmax(-1) - f16.log_softmax(-1))).sum(-1)
    assert kl.max() > 1e-6


def test_fold_puts_everything_back_after_an_error_and_keeps_switched_off_layers_the_base(fitted_dir, smoke_cfg):
    _, model, _, batch = model_with_lora(fitted_dir, smoke_cfg)
    layers = [m for m in model.modules() if isinstance(m, grpo.LoRALinear)]
    frozen = [m.base_layer.weight for m in layers]
    with torch.no_grad():
        exact = model(**batch).logits
        with grpo.lora_disabled(model):
            base = model(**batch).logits
            with grpo.lora_folded(model):  # inside lora_disabled: nothing to fold, the base it stays
                assert torch.equal(model(**batch).logits, base)
            assert all(not m.enabled for m in layers)  # still switched off after the fold
    assert all(m.enabled for m in layers)
    # a failure while folding the fifth layer (a shape error here; out of memory on a GPU) leaves nothing folded
    good = layers[4].lora_A.weight
    layers[4].lora_A.weight = torch.nn.Parameter(torch.zeros(good.shape[0] + 1, good.shape[1]))
    with pytest.raises(RuntimeError):
        with grpo.lora_folded(model):
            pass
    layers[4].lora_A.weight = good
    assert all(m.base_layer.weight is w and m.enabled for m, w in zip(layers, frozen))
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, exact)


def test_no_fp32_copy_outlives_a_forward(fitted_dir, smoke_cfg):
    _, model, _, batch = model_with_lora(fitted_dir, smoke_cfg, "bfloat16")
    casts = {id(m.cast): m.cast for m in model.modules() if isinstance(m, grpo.LoRALinear)}.values()
    seen = []
    layer = next(m for m in model.modules() if isinstance(m, grpo.LoRALinear))
    layer.register_forward_hook(lambda mod, args, out: seen.append(mod.cast.out is not None) and None)
    with torch.no_grad():
        model(**batch)
    assert seen == [True]  # held while the model runs...
    assert all(c.src is None and c.out is None for c in casts)  # ...and let go when it returns


def test_fold_for_sampling_reaches_training_and_evaluation(fitted_dir, smoke_cfg, tmp_path, monkeypatch):
    cfg, model, tok, _ = model_with_lora(fitted_dir, smoke_cfg)
    cfg.lora.fold_for_sampling = True
    seen = []
    real = grpo.sample
    monkeypatch.setattr(grpo, "sample", lambda m, *a, **k: seen.append(all(not x.enabled for x in m.modules() if isinstance(x, grpo.LoRALinear))) or real(m, *a, **k))
    _, test = countdown.make_splits("arith-1x1", 10, 3, 0)
    grpo.sample_problems(model, tok, test, 2, cfg.eval.sampling, 0, "t", "bare", 8, progress=False, fold=True)
    grpo.sample_problems(model, tok, test, 2, cfg.eval.sampling, 0, "t", "bare", 8, progress=False)
    assert seen == [True, False]
    train_set, _ = countdown.make_splits("arith-1x1", 20, 2, 0)
    cfg.model.path = str(fitted_dir)
    seen.clear()
    grpo.train(cfg, "many", C.ConditionCfg(), 0, train_set, 1e-3, tmp_path / "t", str(fitted_dir), steps=1, checkpoints=[], progress=False)
    assert seen and all(seen)


def test_length_sorted_micro_batches_give_the_same_gradient_with_less_padding(fitted_dir, smoke_cfg, monkeypatch):
    grads, padding = [], []
    for sort in (False, True):
        _, model, tok, _ = model_with_lora(fitted_dir, smoke_cfg)
        _, test = countdown.make_splits("arith-1x1", 10, 2, 0)
        prompts = grpo.render_prompts(tok, test, "bare")
        P = [prompts[0]] * 4 + [prompts[1]] * 4
        comps = [[7] * n for n in (1, 9, 2, 8, 3, 7, 1, 9)]
        adv = torch.tensor([0.5, -0.5, 0.25, -0.25, 0.5, -0.5, 0.25, -0.25])
        real = grpo.pack
        pads = []
        monkeypatch.setattr(grpo, "pack", lambda p, c, pad: pads.append(len(c) * max(map(len, c)) - sum(map(len, c))) or real(p, c, pad))
        grpo.policy_gradient(model, P, comps, adv, 8 * 10, 2, grpo.pad_id(tok), sort_by_length=sort)
        monkeypatch.setattr(grpo, "pack", real)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad]))
        padding.append(sum(pads))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-7)
    assert padding == [sum(abs(a - b) for a, b in [(1, 9), (2, 8), (3, 7), (1, 9)]), 0 + 1 + 1 + 0]


def test_new_switches_left_off_keep_old_hashes_and_turned_on_change_them(smoke_cfg):
    d = C.to_dict(smoke_cfg)
    old = {**d, "lora": {k: v for k, v in d["lora"].items() if k != "fold_for_sampling"},
           "train": {k: v for k, v in d["train"].items() if k != "sort_by_length"}}  # a config from before the keys existed
    for stage in ("train", "eval", "lr-sweep"):
        assert provenance.hashed_settings(old, stage) == provenance.hashed_settings(d, stage)
    on = C._build(C.Config, {**d, "lora": {**d["lora"], "fold_for_sampling": True}})
    assert provenance.stage_hash(on, "eval") != provenance.stage_hash(smoke_cfg, "eval")
    assert provenance.stage_hash(on, "train") != provenance.stage_hash(smoke_cfg, "train")
    assert "lora.fold_for_sampling=false there, true here" == provenance.differing_setting({"config": d}, on, "eval")
    srt = C._build(C.Config, {**d, "train": {**d["train"], "sort_by_length": True}})
    assert provenance.stage_hash(srt, "train") != provenance.stage_hash(smoke_cfg, "train")
    assert provenance.stage_hash(srt, "eval") == provenance.stage_hash(smoke_cfg, "eval")


def plain_logprobs(logits, targets):
    """The autograd version TokenLogProbs replaced."""
    x = logits[:, :-1].float()
    lse = x.logsumexp(-1)
    return x.gather(-1, targets[..., None]).squeeze(-1) - lse


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [2**24, 2 * 3 * 50])  # one chunk; chunks of two positions (b * V = 150): 2, 2, 2, 1
def test_chunked_token_logprobs_equal_autograd_bit_for_bit(dtype, chunk, monkeypatch):
    monkeypatch.setattr(grpo.TokenLogProbs, "CHUNK", chunk)
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 8, 50, generator=g) * 4).to(dtype)
    targets = torch.randint(0, 50, (3, 7), generator=g)
    w = torch.randn(3, 7, generator=g)  # a weighted sum, as the loss is
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    ours = grpo.TokenLogProbs.apply(a, targets)
    ref = plain_logprobs(b, targets)
    assert torch.equal(ours, ref)
    (ours * w).sum().backward()
    (ref * w).sum().backward()
    assert torch.equal(a.grad, b.grad)
    assert a.grad[:, -1].abs().sum() == 0  # the last position feeds no log-prob
