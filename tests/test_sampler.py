"""method/sampler.py: the fast sampler against the plain one it replaced, bit for bit, its host reads per
token, greedy output against `generate`, and every sampling setting explicit (the static decode:
tests/test_static_decode.py)."""

import json
import shutil

import pytest
import torch

import countdown
from helpers import cfg_for, prompts_for
from method import decoding, sampler
from method.model import apply_lora, last_positions, load_model, pack, pad_id, render_prompts, stop_ids
from orchestration import config

pytestmark = [
    pytest.mark.slow,  # whole pipelines or real weights: left out of the fast loop
    pytest.mark.usefixtures("fresh_decoders"),
]

CPU = torch.device("cpu")


@torch.inference_mode()  # lighter than no_grad: no version counters or autograd metadata per op
def reference_sample(
    model,
    prompts: list[list[int]],
    n: int,
    s: config.SamplingCfg,
    seed: int,
    stops: list[int],
    pad: int,
    entropy: bool = False,
) -> sampler.Samples:
    """The sampler as first written (commit 448a232..70b0d05): per-token host reads, a
    DynamicCache concatenated at every token, the mask grown by torch.cat. sampler.sample must
    give exactly its tokens, flags and entropies."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    ids, mask = sampler.left_pad(prompts, pad)  # (P, Lp)
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (P, Lp): positions count real tokens only
    cache = DynamicCache(config=model.config)
    logits = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=pos,
        cache=cache,
        use_cache=True,
        logits_to_keep=last_positions(ids.shape[1], 1, device),
    ).logits[:, -1]  # (P, V)
    cache.batch_repeat_interleave(n)  # (P*n, ...) every sample starts from its prompt's cache
    logits = logits.repeat_interleave(n, 0)  # (B, V), B = P*n
    mask = mask.repeat_interleave(n, 0)  # (B, Lp)
    next_pos = pos[:, -1:].repeat_interleave(n, 0) + 1  # (B, 1)
    B = logits.shape[0]
    out = [[] for _ in range(B)]
    truncated = [False] * B
    alive = torch.arange(B, device=device)  # row -> sample index
    done = torch.zeros(B, dtype=torch.bool, device=device)
    stop = torch.tensor(stops, device=device)
    ent_sum = torch.zeros(B, device=device)  # (B,) summed token entropy per sample
    for t in range(s.max_new_tokens):
        logits = logits.float()
        if entropy:
            lp = logits.log_softmax(-1)  # (b, V) untempered
            ent_sum.index_add_(0, alive, -(lp.exp() * lp).sum(-1) * (~done))  # rows already finished add nothing
        if s.temperature == 0:
            tok = logits.argmax(-1)  # (b,)
        else:
            logits = sampler.filter_logits(logits / s.temperature, s.top_k, s.top_p)
            tok = torch.multinomial(logits.softmax(-1), 1, generator=gen).squeeze(1)  # (b,)
        for i, t_id, d in zip(alive.tolist(), tok.tolist(), done.tolist()):
            if not d:  # a row that finished earlier but still sits in the batch records nothing
                out[i].append(t_id)
        done = done | torch.isin(tok, stop)  # (b,) finished rows (they may still sit in the batch)
        if t == s.max_new_tokens - 1:
            for i, f in zip(alive.tolist(), done.tolist()):
                truncated[i] = not f
            break
        n_done = int(done.sum())
        if n_done == len(done):
            break
        if n_done * 8 >= len(done):  # compact once an eighth has finished: each compaction copies the cache
            keep = (~done).nonzero().squeeze(1)  # rows still decoding
            cache.batch_select_indices(keep)
            alive, tok, mask, next_pos, done = alive[keep], tok[keep], mask[keep], next_pos[keep], done[keep]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)  # (b, L+1)
        logits = model(
            input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos, cache=cache, use_cache=True
        ).logits[:, -1]  # (b, V)
        next_pos = next_pos + 1
    ent = [e / max(len(o), 1) for e, o in zip(ent_sum.tolist(), out)] if entropy else None
    return sampler.Samples(out, truncated, ent)


# ============================================================================= log-probs & the loss


def load(fitted_dir, smoke_cfg, dtype="float32"):
    d = config.to_dict(smoke_cfg)
    d["model"]["build"], d["model"]["path"], d["model"]["dtype"] = None, str(fitted_dir), dtype
    d["model"]["slow_bf16"] = True  # bf16 on a CPU that may lack native bf16: meant, small models
    cfg = config._build(config.Config, d)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    return cfg, model, tok


def ragged_prompts(tok, n=5):
    _, test = countdown.make_splits("arith-1x1", 10, n, 0)
    prompts = render_prompts(tok, test, "bare")
    prompts[1] = prompts[1][:4] + prompts[1][-3:]  # different lengths: real left padding
    prompts[2] = prompts[2] + prompts[0][1:5]
    return prompts


SETTINGS = [
    config.SamplingCfg(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=40),
    config.SamplingCfg(temperature=0.6, top_p=0.95, top_k=0, max_new_tokens=40),
    config.SamplingCfg(temperature=0.7, top_p=0.8, top_k=5, max_new_tokens=12),
    config.SamplingCfg(temperature=0, max_new_tokens=40),
    config.SamplingCfg(temperature=1.0, max_new_tokens=1),
]


@pytest.mark.parametrize("s", SETTINGS, ids=lambda s: f"T{s.temperature}-p{s.top_p}-k{s.top_k}-new{s.max_new_tokens}")
@pytest.mark.parametrize("lora", [False, True], ids=["base", "lora"])
def test_fast_sampler_equals_the_plain_one_bit_for_bit(fitted_dir, smoke_cfg, s, lora):
    cfg, model, tok = load(fitted_dir, smoke_cfg)
    if lora:  # a LoRA with non-zero B, so the adapter changes the samples
        apply_lora(model, 4, 8, ["q_proj", "v_proj", "up_proj"], 0)
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    prompts = ragged_prompts(tok)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    compactions = same_as_plain(model, prompts, 6, s, stops, pad)
    if s.max_new_tokens == 40 and s.temperature > 0:
        assert compactions > 0  # finished rows left the batch during the decode


def same_as_plain(model, prompts, n, s, stops, pad) -> int:
    """Assert that the fast and the plain sampler agree exactly for two seeds; returns how many
    compactions the fast one made."""
    calls = []
    layer = decoding.growing_kv_class()
    real = layer.batch_select_indices
    layer.batch_select_indices = lambda self, idx: calls.append(1) or real(self, idx)
    try:
        for seed in (0, 11):
            fast = sampler.sample(model, prompts, n, s, seed, stops, pad, entropy=True)
            ref = reference_sample(model, prompts, n, s, seed, stops, pad, entropy=True)
            assert fast.tokens == ref.tokens
            assert fast.truncated == ref.truncated
            assert fast.entropy == ref.entropy  # same floats: same ops in the same order
    finally:
        layer.batch_select_indices = real
    return len(calls)


@pytest.mark.parametrize("batch", ["one-prompt", "equal-lengths", "padding-leaves"])
@pytest.mark.parametrize("s", [SETTINGS[0], SETTINGS[3]], ids=["T1", "greedy"])
def test_unpadded_batches_equal_the_plain_sampler_too(fitted_dir, smoke_cfg, batch, s):
    """Without padding transformers drops the mask, and attention takes another kernel path; the
    fast sampler must follow it, also when compaction leaves only unpadded rows."""
    _, model, tok = load(fitted_dir, smoke_cfg)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    prompts = ragged_prompts(tok)
    if batch == "one-prompt":  # condition "1", and the wide set's one problem per batch
        prompts = prompts[:1]
    elif batch == "equal-lengths":
        m = min(len(p) for p in prompts)
        prompts = [p[-m:] for p in prompts]
    else:  # one short prompt among long ones: once its rows finish, no padded row is left
        prompts = [prompts[0], prompts[0], prompts[1]]
    assert same_as_plain(model, prompts, 8, s, stops, pad) > 0 or s.temperature == 0


def test_bf16_model_samples_equal_the_plain_sampler(fitted_dir, smoke_cfg):
    _, model, tok = load(fitted_dir, smoke_cfg, "bfloat16")
    prompts = ragged_prompts(tok)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    s = SETTINGS[0]
    assert (
        sampler.sample(model, prompts, 4, s, 3, stops, pad).tokens
        == reference_sample(model, prompts, 4, s, 3, stops, pad).tokens
    )


def test_the_cache_refuses_to_overflow(fitted_dir, smoke_cfg):
    _, model, tok = load(fitted_dir, smoke_cfg)
    ids, mask = sampler.left_pad(ragged_prompts(tok), pad_id(tok))
    cache = decoding.kv_cache(model, ids.shape[1] - 1)
    with pytest.raises(RuntimeError, match="capacity"):
        model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True)


def test_at_most_one_host_read_per_decoded_token(fitted_dir, smoke_cfg):
    """Every op that hands a tensor's value to Python, counted with the profiler over a whole
    sampling call (sampler.count_host_reads), including those inside transformers' forward: at
    most one per decoded token, plus two per call. The plain sampler made three per token."""
    _, model, tok = load(fitted_dir, smoke_cfg)
    prompts = ragged_prompts(tok)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    s = config.SamplingCfg(temperature=1.0, max_new_tokens=40)
    sampler.sample(model, prompts, 8, s, 0, stops, pad)  # warm-up
    reads, smp = sampler.count_host_reads(lambda: sampler.sample(model, prompts, 8, s, 0, stops, pad, entropy=True))
    steps = max(len(t) for t in smp.tokens)  # decoded positions
    assert steps > 5
    assert reads <= steps + 2, (
        reads,
        steps,
    )  # one per token, plus two per call: transformers' prefill mask check, our NaN check
    old, _ = sampler.count_host_reads(lambda: reference_sample(model, prompts, 8, s, 0, stops, pad, entropy=True))
    assert old > steps  # the counter does see per-token reads: the plain sampler's int(done.sum()) and more


# ----------------------------------------------------------------------------- settings, seeds, stops, entropy


def test_greedy_equals_generate_with_left_padding(fitted_dir, smoke_cfg):
    from transformers import GenerationConfig

    cfg = cfg_for(smoke_cfg)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=6)
    prompts[1] = prompts[1][:4] + prompts[1][-3:]  # different lengths -> real left padding
    prompts[2] = prompts[2] + prompts[0][1:5]
    assert len({len(p) for p in prompts}) > 1
    stops, pad = stop_ids(model, tok), pad_id(tok)
    ours = sampler.sample(model, prompts, 1, config.SamplingCfg(temperature=0, max_new_tokens=30), 0, stops, pad)
    ids, mask = sampler.left_pad(prompts, pad)
    gc = GenerationConfig(
        do_sample=False, max_new_tokens=30, eos_token_id=stops, pad_token_id=pad, repetition_penalty=1.0
    )
    ref = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)[:, ids.shape[1] :]
    for i, toks in enumerate(ours.tokens):
        assert ref[i, : len(toks)].tolist() == toks
        if not ours.truncated[i]:
            assert toks[-1] in stops and all(t == pad for t in ref[i, len(toks) :].tolist())


def test_generation_config_file_changes_nothing(fitted_dir, smoke_cfg, tmp_path):
    cfg = cfg_for(smoke_cfg)
    plain = tmp_path / "plain"
    shutil.copytree(fitted_dir, plain)
    (plain / "generation_config.json").unlink(missing_ok=True)
    loud = tmp_path / "loud"
    shutil.copytree(fitted_dir, loud)
    (loud / "generation_config.json").write_text(
        json.dumps({"do_sample": True, "repetition_penalty": 1.3, "top_k": 3, "top_p": 0.5, "temperature": 0.1})
    )
    s = config.SamplingCfg(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=30)
    outs = []
    for d in (plain, loud):
        model, tok = load_model(cfg, str(d), CPU)
        _, prompts = prompts_for(tok, n=4)
        outs.append(sampler.sample(model, prompts, 4, s, 123, stop_ids(model, tok), pad_id(tok)).tokens)
    assert outs[0] == outs[1]
    # ...while temperature 0.1 (what the file asks for) would have given different samples
    model, tok = load_model(cfg, str(plain), CPU)
    _, prompts = prompts_for(tok, n=4)
    cold = sampler.sample(
        model,
        prompts,
        4,
        config.SamplingCfg(temperature=0.1, max_new_tokens=30),
        123,
        stop_ids(model, tok),
        pad_id(tok),
    ).tokens
    assert cold != outs[0]


def test_sampling_is_seeded(fitted_dir, smoke_cfg):
    cfg = cfg_for(smoke_cfg)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=3)
    s = config.SamplingCfg(temperature=1.0, max_new_tokens=20)
    a = sampler.sample(model, prompts, 4, s, 7, stop_ids(model, tok), pad_id(tok)).tokens
    b = sampler.sample(model, prompts, 4, s, 7, stop_ids(model, tok), pad_id(tok)).tokens
    c = sampler.sample(model, prompts, 4, s, 8, stop_ids(model, tok), pad_id(tok)).tokens
    assert a == b and a != c
    assert len(a) == 12


@pytest.mark.parametrize(
    "top_k,top_p,keep",
    [
        (0, 1.0, [0, 1, 2, 3, 4]),
        (2, 1.0, [0, 1]),
        (1, 1.0, [0]),
        (0, 0.5, [0]),  # p = .5, .25, .15, .07, .03: .5 alone reaches 0.5
        (0, 0.6, [0, 1]),  # .5 < .6 -> add the next
        (0, 0.75, [0, 1]),  # .75 reaches .75 exactly
        (0, 0.76, [0, 1, 2]),
        (0, 0.01, [0]),  # the top token is always kept
        (3, 0.76, [0, 1]),  # top-k first; the nucleus is of the renormalised rest (.56, .28, .17)
        (2, 0.9, [0, 1]),  # top-k first, then the nucleus of what is left
    ],
)
def test_filter_logits_keeps_the_intended_tokens(top_k, top_p, keep):
    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03])
    order = torch.tensor([3, 0, 4, 1, 2])  # scramble positions so sorting matters
    logits = torch.empty(5)
    logits[order] = probs.log()
    out = sampler.filter_logits(logits[None], top_k, top_p)[0]
    kept = sorted(int(order[i]) for i in keep)
    assert sorted(torch.isfinite(out).nonzero().squeeze(1).tolist()) == kept


def test_sampled_rows_end_at_their_first_stop_token(fitted_dir, smoke_cfg):
    """Finished rows stay in the batch until an eighth have finished; nothing they draw after
    their stop token may leak into their outputs, and the truncation flags must follow."""
    cfg = cfg_for(smoke_cfg)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=4)
    stops = stop_ids(model, tok)
    for max_new in (12, 40):
        smp = sampler.sample(
            model, prompts, 8, config.SamplingCfg(temperature=1.0, max_new_tokens=max_new), 3, stops, pad_id(tok)
        )
        lengths = {len(x) for x in smp.tokens}
        for toks, trunc in zip(smp.tokens, smp.truncated):
            assert 1 <= len(toks) <= max_new
            assert not any(t in stops for t in toks[:-1])  # no token after the first stop
            assert trunc == (toks[-1] not in stops)  # truncated exactly when no stop token was drawn
            assert not trunc or len(toks) == max_new
        assert max_new == 12 or len(lengths) > 1  # rows really finished at different steps (12 tokens may end none)


def test_sampler_entropy_is_the_untempered_distributions(fitted_dir, smoke_cfg):
    """Sampler entropy is the untempered distributions and draws nothing."""
    cfg = cfg_for(smoke_cfg)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    _, prompts = prompts_for(tok, n=1)
    s = config.SamplingCfg(temperature=0.6, top_p=0.95, max_new_tokens=6)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    a = sampler.sample(model, prompts, 2, s, 5, stops, pad, entropy=True)
    b = sampler.sample(model, prompts, 2, s, 5, stops, pad)
    assert a.tokens == b.tokens  # measuring the entropy changes no sample
    ids, attn, pos, cmask = pack(prompts * 2, a.tokens, pad)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits  # (2, L, V), T = 1
    Lp = ids.shape[1] - cmask.shape[1]
    for i, toks in enumerate(a.tokens):
        lp = logits[i, Lp - 1 : Lp - 1 + len(toks)].log_softmax(-1)
        assert a.entropy[i] == pytest.approx((-(lp.exp() * lp).sum(-1)).mean().item(), rel=1e-4)


# ----------------------------------------------------------------------------- the static decode and the fused tail
