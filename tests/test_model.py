"""method/model.py: the hand-written LoRA against PEFT (outputs, adapter files), the shared fp32 cast and
the folded sampling weights, and the completion log-probabilities against plain autograd."""

import peft
import pytest
import torch

from helpers import CPU, cfg_for, model_with_lora, prompts_for
from method import sampler, training
from method.model import (
    LoRALinear,
    SharedCast,
    TokenLogProbs,
    apply_lora,
    completion_logprobs,
    load_adapter,
    load_model,
    lora_disabled,
    lora_folded,
    pack,
    pad_id,
    save_adapter,
)

# ----------------------------------------------------------------------------- LoRA


def test_lora_starts_equal_to_base_and_only_lora_trains(fitted_dir, smoke_cfg):
    cfg = cfg_for(smoke_cfg)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok)
    ids, mask = sampler.left_pad(prompts, pad_id(tok))
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    before = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    frozen = {k: v.clone() for k, v in model.state_dict().items()}
    wrapped = apply_lora(model, 4, 8, cfg.lora.targets, seed=1)
    assert len(wrapped) == 7 * 2  # seven projections in each of two layers
    after = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert torch.equal(before, after)  # B = 0: exactly the base
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # one optimizer step on a nonzero loss changes LoRA tensors and nothing else
    opt = training.make_optimizer(model, cfg, 1e-2)
    model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.pow(2).mean().backward()
    opt.step()
    for k, v in model.state_dict().items():
        base_key = k.replace(".base_layer.", ".")
        if ".lora_" in k:
            continue
        assert torch.equal(v, frozen[base_key]), k
    assert any(v.abs().sum() > 0 for k, v in model.state_dict().items() if ".lora_B." in k)


def test_adapter_loads_in_peft_with_same_logits(fitted_dir, smoke_cfg, tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = cfg_for(smoke_cfg)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    apply_lora(model, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed=3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)  # a non-trivial adapter
    save_adapter(model, tmp_path / "adapter", cfg, str(fitted_dir))
    _, prompts = prompts_for(tok)
    ids, mask = sampler.left_pad(prompts, pad_id(tok))
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    ours = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    base = AutoModelForCausalLM.from_pretrained(str(fitted_dir), dtype=torch.float32)
    theirs_model = peft.PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    theirs = theirs_model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert (
        ours - load_model(cfg, str(fitted_dir), CPU)[0](input_ids=ids, attention_mask=mask, position_ids=pos).logits
    ).abs().max() > 1e-3
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    # and our loader reads the same file back exactly
    model2, _ = load_model(cfg, str(fitted_dir), CPU)
    apply_lora(model2, cfg.lora.r, cfg.lora.alpha, cfg.lora.targets, seed=99)
    load_adapter(model2, tmp_path / "adapter")
    assert torch.equal(model2(input_ids=ids, attention_mask=mask, position_ids=pos).logits, ours)


def casts(model, batch) -> int:
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        model(**batch)
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")


def test_shared_cast_gives_the_same_logits_and_gradients(fitted_dir, smoke_cfg):
    """Shared cast gives the same logits and gradients with fewer casts."""
    _, model, _, batch = model_with_lora(fitted_dir, smoke_cfg, "bfloat16")
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    assert len({id(m.cast) for m in layers}) == 2 * 2  # one per attention block and per MLP, two layers

    def run():
        model.zero_grad()
        logits = model(**batch).logits
        logits.float().pow(2).mean().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]

    shared_logits, shared_grads = run()
    shared_casts = casts(model, batch)
    for m in layers:
        m.cast = SharedCast()  # every layer casts its own input: the reference
    own_logits, own_grads = run()
    assert torch.equal(shared_logits, own_logits)
    # with the shared copy the input gradients of q/k/v (and gate/up) meet in fp32 and are rounded to bf16 once, not
    # rounded three times and summed in bf16: the LoRA gradients of earlier layers move by rounding
    rel = [((a - b).norm() / b.norm()).item() for a, b in zip(shared_grads, own_grads)]
    assert max(rel) < 0.02 and max(rel) > 0
    assert casts(model, batch) - shared_casts == 2 * 3  # q/k/v save two casts per layer, gate/up one


def test_folded_sampling_weights_are_w_plus_scaled_ba(fitted_dir, smoke_cfg):
    """Folded sampling weights are w plus scaled ba and restored."""
    _, model, _, batch = model_with_lora(fitted_dir, smoke_cfg)
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    frozen = [m.base_layer.weight for m in layers]
    with torch.no_grad():
        exact = model(**batch).logits
        with lora_folded(model):
            m = layers[0]
            assert not m.enabled
            torch.testing.assert_close(
                m.base_layer.weight, frozen[0] + m.scaling * m.lora_B.weight @ m.lora_A.weight, rtol=0, atol=1e-6
            )
            folded = model(**batch).logits
        assert all(m.base_layer.weight is w and m.enabled for m, w in zip(layers, frozen))
        assert torch.equal(model(**batch).logits, exact)
    assert (exact - folded).abs().max() > 0  # fp32 rounding differs in the last bits...
    torch.testing.assert_close(folded, exact, rtol=1e-5, atol=1e-5)  # ...and only there
    # the folded bf16 model is another policy: rounding W + s B A to bf16 drops part of the update
    _, m16, _, b16 = model_with_lora(fitted_dir, smoke_cfg, "bfloat16", scale=0.002)
    with torch.no_grad():
        e16 = m16(**b16).logits.float()
        with lora_folded(m16):
            f16 = m16(**b16).logits.float()
    kl = (e16.log_softmax(-1).exp() * (e16.log_softmax(-1) - f16.log_softmax(-1))).sum(-1)
    assert kl.max() > 1e-6


def test_fold_puts_everything_back_after_an_error_and_keeps(fitted_dir, smoke_cfg):
    """Fold puts everything back after an error and keeps switched off layers the base."""
    _, model, _, batch = model_with_lora(fitted_dir, smoke_cfg)
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    frozen = [m.base_layer.weight for m in layers]
    with torch.no_grad():
        exact = model(**batch).logits
        with lora_disabled(model):
            base = model(**batch).logits
            with lora_folded(model):  # inside lora_disabled: nothing to fold, the base it stays
                assert torch.equal(model(**batch).logits, base)
            assert all(not m.enabled for m in layers)  # still switched off after the fold
    assert all(m.enabled for m in layers)
    # a failure while folding the fifth layer (a shape error here; out of memory on a GPU) leaves nothing folded
    good = layers[4].lora_A.weight
    layers[4].lora_A.weight = torch.nn.Parameter(torch.zeros(good.shape[0] + 1, good.shape[1]))
    with pytest.raises(RuntimeError):
        with lora_folded(model):
            pass
    layers[4].lora_A.weight = good
    assert all(m.base_layer.weight is w and m.enabled for m, w in zip(layers, frozen))
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, exact)


def test_no_fp32_copy_outlives_a_forward(fitted_dir, smoke_cfg):
    _, model, _, batch = model_with_lora(fitted_dir, smoke_cfg, "bfloat16")
    casts = {id(m.cast): m.cast for m in model.modules() if isinstance(m, LoRALinear)}.values()
    seen = []
    layer = next(m for m in model.modules() if isinstance(m, LoRALinear))
    layer.register_forward_hook(lambda mod, args, out: seen.append(mod.cast.out is not None) and None)
    with torch.no_grad():
        model(**batch)
    assert seen == [True]  # held while the model runs...
    assert all(c.src is None and c.out is None for c in casts)  # ...and let go when it returns


# ----------------------------------------------------------------------------- log-probs


def test_pack_mask_comes_from_lengths_even_when_pad_is_eos():
    eos = 1
    ids, attn, pos, cmask = pack([[5, 6, 7], [8]], [[9, eos], [eos, 4, eos]], pad=eos)
    assert ids.tolist() == [[5, 6, 7, 9, eos, eos], [eos, eos, 8, eos, 4, eos]]
    assert cmask.tolist() == [[1, 1, 0], [1, 1, 1]]  # the emitted EOS is trained, the pad is not
    assert attn.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert pos[1].tolist()[2:] == [0, 1, 2, 3]


def test_completion_logprobs_match_full_softmax(fitted_dir, smoke_cfg):
    cfg = cfg_for(smoke_cfg)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=2)
    comps = [[7, 8, 9, tok.eos_token_id], [10, 11]]
    ids, attn, pos, cmask = pack(prompts, comps, pad_id(tok))
    lp, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
    full = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits.log_softmax(-1)
    Lp = ids.shape[1] - cmask.shape[1]
    for i, c in enumerate(comps):
        for j, t in enumerate(c):
            assert lp[i, j].item() == pytest.approx(full[i, Lp + j - 1, t].item(), abs=1e-5)


def plain_logprobs(logits, targets):
    """The plain autograd log-probabilities: the reference TokenLogProbs must equal."""
    x = logits[:, :-1].float()
    lse = x.logsumexp(-1)
    return x.gather(-1, targets[..., None]).squeeze(-1) - lse


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [2**24, 2 * 3 * 50])  # one chunk; chunks of two positions (b * V = 150): 2, 2, 2, 1
def test_chunked_token_logprobs_equal_autograd_bit_for_bit(dtype, chunk, monkeypatch):
    monkeypatch.setattr(TokenLogProbs, "CHUNK", chunk)
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 8, 50, generator=g) * 4).to(dtype)
    targets = torch.randint(0, 50, (3, 7), generator=g)
    w = torch.randn(3, 7, generator=g)  # a weighted sum, as the loss is
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    ours = TokenLogProbs.apply(a, targets)
    ref = plain_logprobs(b, targets)
    assert torch.equal(ours, ref)
    (ours * w).sum().backward()
    (ref * w).sum().backward()
    assert torch.equal(a.grad, b.grad)
    assert a.grad[:, -1].abs().sum() == 0  # the last position feeds no log-prob


def test_completion_entropy_and_logprobs_are_the_full_vocabulary(fitted_dir, smoke_cfg):
    """Completion entropy and logprobs are the full vocabulary ones.

    completion_logprobs(with_entropy=True) against log_softmax and -sum p log p of the model's
    own full logits at the completion positions (the entropy the entropy bonus and the logs use)."""
    _, model, _, _ = model_with_lora(fitted_dir, smoke_cfg)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 20, (2, 9), generator=g)
    attn, pos = torch.ones_like(ids), torch.arange(9).expand(2, 9)
    Lc = 4
    lp, ent = completion_logprobs(model, ids, attn, pos, Lc, with_entropy=True)
    with torch.no_grad():
        full = (
            model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, -Lc - 1 : -1].float().log_softmax(-1)
        )
    assert torch.allclose(lp, full.gather(-1, ids[:, -Lc:, None])[..., 0], atol=1e-6)
    assert torch.allclose(ent, -(full.exp() * full).sum(-1), atol=1e-6)
    assert completion_logprobs(model, ids, attn, pos, Lc)[1] is None


# ----------------------------------------------------------------------------- the torch settings


def test_tf32_and_determinism_settings_reach_torch(smoke_cfg):
    """lora.tf32 through torch 2.13's fp32_precision API (the deprecated allow_tf32 is not set), and
    the three determinism settings."""
    import torch.utils.deterministic

    from method.model import setup_torch

    try:
        for tf32, determinism in ((True, "kernels"), (False, "off"), (False, "full")):
            cfg = cfg_for(smoke_cfg, **{"lora.tf32": tf32, "determinism": determinism})
            setup_torch(cfg)
            want = "tf32" if tf32 else "ieee"
            assert (
                torch.backends.cuda.matmul.fp32_precision == want and torch.backends.cudnn.conv.fp32_precision == want
            )
            assert torch.are_deterministic_algorithms_enabled() == (determinism != "off")
            assert torch.utils.deterministic.fill_uninitialized_memory == (determinism == "full")
            if determinism == "full":  # the CPU runs' setting: an unwritten tensor reads NaN
                assert torch.empty(4).isnan().all()
    finally:
        setup_torch(cfg_for(smoke_cfg))


def test_free_memory_counts_what_this_process_holds_unallocated(monkeypatch):
    """memory_gb: auto on a GPU, from a fake device query: 3 GiB free, this process's allocator
    holding 2 GiB of which 0.5 GiB are allocated -> 4.5 GiB it could allocate."""
    from method.model import free_memory_gib

    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * gib, 8 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 2 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: gib // 2)
    assert free_memory_gib(torch.device("cuda")) == 4.5
