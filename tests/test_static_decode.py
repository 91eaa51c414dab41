"""method/static_decode.py: the static-shape decode (CUDA graphs on a GPU) against a plain loop with its
schedule, its fused sampling tail against the softmax race, its host reads, and its graphs captured
once, replayed, given up and redone eagerly where they differ."""

import pytest
import torch
from test_sampler import SETTINGS, load, ragged_prompts

from method import decoding, sampler, static_decode
from method.model import apply_lora, pad_id, stop_ids
from orchestration import config

pytestmark = [
    pytest.mark.slow,  # whole pipelines or real weights: left out of the fast loop
    pytest.mark.usefixtures("fresh_decoders"),
]


def race(x: torch.Tensor, s: config.SamplingCfg, gen: torch.Generator, chunk: int) -> torch.Tensor:
    """sample_eager's tail (filter_logits of x / T, softmax, the exponential race) on the random
    draws fused_draw makes: q drawn one (b, chunk) block per vocabulary chunk, in order. With one
    chunk these are sampler.multinomial's draws."""
    probs = sampler.filter_logits(x / s.temperature, s.top_k, s.top_p).softmax(-1)
    b, V = x.shape
    q = torch.cat([torch.empty(b, min(chunk, V - c)).exponential_(1, generator=gen) for c in range(0, V, chunk)], 1)
    return (probs / q).argmax(-1)


@torch.inference_mode()
def reference_static(model, prompts, n, s, seed, stops, pad, entropy=False, chunk=None):
    """The plain per-token loop with the static decode's schedule, written out: a DynamicCache
    grown by concatenation, the mask grown by torch.cat, sample_eager's filtering and race (race());
    finished rows stay in the batch (their draws thrown away) until a check every CHECK_EVERY
    tokens moves the unfinished rows to the front and keeps the smallest bucket that holds them."""
    from transformers import DynamicCache

    chunk = chunk or static_decode.TAIL_CHUNK
    gen = torch.Generator().manual_seed(seed)
    ids, mask = sampler.left_pad(prompts, pad)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True).logits[:, -1]
    cache.batch_repeat_interleave(n)
    logits, mask, nxt = (
        logits.repeat_interleave(n, 0),
        mask.repeat_interleave(n, 0),
        pos[:, -1:].repeat_interleave(n, 0) + 1,
    )
    B = logits.shape[0]
    out, lps, ent = [[] for _ in range(B)], [[] for _ in range(B)], [0.0] * B
    alive, done = list(range(B)), [False] * B
    for t in range(s.max_new_tokens):
        if t and t % static_decode.CHECK_EVERY == 0:
            left = sum(not d for d in done)
            if left == 0:
                break
            fit = min(b for b in static_decode.buckets(B) if b >= left)
            if fit < len(alive):
                keep = [i for i, d in enumerate(done) if not d] + [i for i, d in enumerate(done) if d]
                keep = keep[:fit]
                cache.batch_select_indices(torch.tensor(keep))
                alive, done = [alive[i] for i in keep], [done[i] for i in keep]
                mask, nxt, tok = mask[keep], nxt[keep], tok[keep]  # noqa: F821
        if t:
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            logits = model(
                input_ids=tok[:, None], attention_mask=mask, position_ids=nxt, cache=cache, use_cache=True
            ).logits[:, -1]
            nxt = nxt + 1
        x = logits.float()
        lp = x.log_softmax(-1)
        tok = x.argmax(-1) if s.temperature == 0 else race(x, s, gen, chunk)
        for row, (i, d) in enumerate(zip(alive, done)):
            if not d:
                out[i].append(int(tok[row]))
                lps[i].append(float(lp[row, tok[row]]))
                ent[i] += float(-(lp[row].exp() * lp[row]).sum())
        done = [d or int(tk) in stops for d, tk in zip(done, tok)]
    return out, lps, [e / max(len(o), 1) for e, o in zip(ent, out)]


def lora_model(fitted_dir, smoke_cfg):
    cfg, model, tok = load(fitted_dir, smoke_cfg)
    apply_lora(model, 4, 8, ["q_proj", "v_proj", "up_proj"], 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return cfg, model, tok


def graph(s: config.SamplingCfg, **kw) -> config.SamplingCfg:
    return config.SamplingCfg(**{**s.__dict__, "decode": "graph", **kw})


@pytest.mark.parametrize("s", SETTINGS, ids=lambda s: f"T{s.temperature}-p{s.top_p}-k{s.top_k}-new{s.max_new_tokens}")
@pytest.mark.parametrize("lora", [False, True], ids=["base", "lora"])
def test_static_decode_equals_the_plain_loop_with_its_schedule(fitted_dir, smoke_cfg, s, lora, monkeypatch):
    """Every sampling setting (top-k and top-p included) through the static decode, against the
    plain loop with eager filtering on the same random draws; the vocabulary in chunks of 7, so
    the online log-sum-exp and the per-chunk draws are used."""
    cfg, model, tok = lora_model(fitted_dir, smoke_cfg) if lora else load(fitted_dir, smoke_cfg)
    prompts = ragged_prompts(tok)
    stops, pad = stop_ids(model, tok), pad_id(tok)
    monkeypatch.setattr(static_decode, "TAIL_CHUNK", 7)
    compactions = []
    real = static_decode.compact
    monkeypatch.setattr(static_decode, "compact", lambda st, rows, fit: compactions.append(fit) or real(st, rows, fit))
    for seed in (0, 5):
        ours = sampler.sample(model, prompts, 6, graph(s), seed, stops, pad, entropy=True)
        tokens, lps, ent = reference_static(model, prompts, 6, s, seed, stops, pad)
        assert ours.tokens == tokens
        assert ours.truncated == [bool(o) and o[-1] not in stops for o in tokens]
        assert all(a == pytest.approx(b, abs=2e-5) for x, y in zip(ours.logprobs, lps) for a, b in zip(x, y))
        assert ours.entropy == pytest.approx(ent, abs=2e-5)
    if s.max_new_tokens == 40 and s.temperature > 0:
        assert compactions and set(compactions) <= set(
            static_decode.buckets(30)[1:]
        )  # finished rows left, into a bucket
    if s.top_p < 1.0:  # the filter acts: without it the same draws give other tokens
        unfiltered, _, _ = reference_static(
            model,
            prompts,
            6,
            config.SamplingCfg(temperature=s.temperature, max_new_tokens=s.max_new_tokens),
            5,
            stops,
            pad,
        )
        assert unfiltered != tokens


def test_fused_tail_draws_what_the_softmax_race_draws():
    """fused_draw against sample_eager's tail (filter, softmax, race) on the same generator calls:
    one chunk, sampler.multinomial's own draws; several, the race on the per-chunk draws; T = 1 (no
    division), 0.7 and greedy, top-k and top-p; bf16 logits. Its log-probability and entropy are
    the untempered, unfiltered policy's (log_softmax)."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        logits = (torch.randn(64, 1000, generator=g) * 3).to(dtype)
        for T, k, p in ((1.0, 0, 1.0), (0.7, 0, 1.0), (0.0, 0, 1.0), (0.6, 0, 0.95), (1.0, 0, 0.5), (0.7, 20, 0.8)):
            s = config.SamplingCfg(temperature=T, top_k=k, top_p=p)
            for chunk in (1000, 97):
                a, b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
                tok, logp, ent = static_decode.fused_draw(logits, s, a if T > 0 else None, True, chunk=chunk)
                x = logits.float()
                if T == 0:
                    ref = x.argmax(-1)
                elif chunk == 1000:
                    ref = sampler.multinomial(sampler.filter_logits(x / T, k, p).softmax(-1), b)
                else:
                    ref = race(x, s, b, chunk)
                assert torch.equal(tok, ref), (dtype, T, k, p, chunk)
                lp = x.log_softmax(-1)
                assert torch.allclose(logp, lp.gather(-1, ref[:, None]).squeeze(-1), atol=1e-5)
                assert torch.allclose(ent, -(lp.exp() * lp).sum(-1), atol=1e-4)
                if p < 1.0 and T > 0:  # every draw inside the nucleus
                    kept = torch.isfinite(sampler.filter_logits(x / T, k, p))
                    assert kept.gather(-1, tok[:, None]).all() and (~kept).any()


def test_auto_is_eager_on_a_cpu_and_graph_on_cuda():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert sampler.decode_mode(config.SamplingCfg(decode="auto"), cpu) == "eager"
    assert sampler.decode_mode(config.SamplingCfg(decode="auto"), cuda) == "graph"
    assert sampler.decode_mode(config.SamplingCfg(decode="graph"), cpu) == "graph"
    assert sampler.decode_mode(config.SamplingCfg(decode="auto", top_p=0.95, temperature=0.6), cuda) == "graph"
    assert static_decode.buckets(128) == [128, 64, 32, 16, 8] and static_decode.buckets(30) == [30, 15]


def test_top_p_takes_the_static_decode(fitted_dir, smoke_cfg, monkeypatch):
    """Evaluation's settings (top-p 0.95) with decode graph run sample_static, not sample_eager."""
    _, model, tok = load(fitted_dir, smoke_cfg)
    monkeypatch.setattr(sampler, "sample_eager", lambda *a, **k: pytest.fail("the eager sampler ran"))
    out = sampler.sample(
        model, ragged_prompts(tok), 2, graph(SETTINGS[1], max_new_tokens=10), 0, stop_ids(model, tok), pad_id(tok)
    )
    assert len(out.tokens) == 10


def test_static_decode_reads_the_host_every_few_tokens(fitted_dir, smoke_cfg):
    _, model, tok = load(fitted_dir, smoke_cfg)
    prompts = ragged_prompts(tok)
    s = config.SamplingCfg(temperature=1.0, max_new_tokens=40, decode="graph")
    stops = [10**9]  # nothing stops: every check runs
    reads, out = sampler.count_host_reads(lambda: sampler.sample(model, prompts, 4, s, 0, stops, pad_id(tok)))
    assert max(len(x) for x in out.tokens) == 40
    assert reads <= 40 // static_decode.CHECK_EVERY + 2  # a read per check, and the NaN check at the end


# ----------------------------------------------------------------------------- captures: once per process, and the fallbacks


def decode_calls(model, tok, s, calls):
    """sample() for each (prompts, n, seed) in calls."""
    stops, pad = stop_ids(model, tok), pad_id(tok)
    return [sampler.sample(model, p, n, s, seed, stops, pad, entropy=True) for p, n, seed in calls]


def same(a: sampler.Samples, b: sampler.Samples) -> bool:
    return a.tokens == b.tokens and a.truncated == b.truncated and a.logprobs == b.logprobs and a.entropy == b.entropy


def test_graphs_are_captured_once_per_process_and_calls_reuse(fitted_dir, smoke_cfg, monkeypatch):
    """Graphs are captured once per process and calls reuse the buffers.

    With a capture backend (EagerGraphs: CUDA graphs' bookkeeping on a CPU), each bucket of a
    batch size is captured once, by the first call that reaches it; later calls, with other prompt
    lengths, seeds and settings, replay the same steps on the same buffers and give what a fresh
    decoder without graphs gives."""
    _, model, tok = lora_model(fitted_dir, smoke_cfg)
    prompts = ragged_prompts(tok)
    short = [p[-min(len(x) for x in prompts) :] for p in prompts]  # another prompt length, the same rows
    calls = [(prompts, 6, 0), (short, 6, 1), (prompts, 6, 0)]
    fake = static_decode.EagerGraphs()
    monkeypatch.setattr(static_decode, "GRAPHS", fake)
    s = graph(SETTINGS[0])
    got = decode_calls(model, tok, s, calls)
    first = fake.captures
    assert 0 < first <= len(static_decode.buckets(30)) and all(
        st.checked for st in static_decode._DECODERS["by_rows"][30].steps.values()
    )
    assert len(static_decode._DECODERS["by_rows"]) == 1  # one decoder for the 30 rows, whatever the prompt length
    again = decode_calls(model, tok, s, calls)
    assert fake.captures == first  # nothing captured again
    monkeypatch.setattr(static_decode, "GRAPHS", None)
    for (p, n, seed), a, b in zip(calls, got, again):
        static_decode.reset_decoders()  # a fresh decoder, every step eager
        fresh = decode_calls(model, tok, s, [(p, n, seed)])[0]
        assert same(a, fresh) and same(b, fresh)
    assert not same(got[0], got[1])


@pytest.mark.parametrize("s", [SETTINGS[0], SETTINGS[1]], ids=["T1", "top-p"])
def test_a_capture_that_raises_falls_back_with_the_same_samples(fitted_dir, smoke_cfg, monkeypatch, capsys, s):
    """A capture that raises after it got partway (the step ran: buffers written, random numbers
    drawn) is undone: the decode goes on eagerly from the state before it, and its samples,
    random offsets included, equal those of the static decode without graphs; later calls stay
    eager. One line on stderr per failing step (batch size) says why."""
    _, model, tok = lora_model(fitted_dir, smoke_cfg)
    calls = [(ragged_prompts(tok), 6, 0), (ragged_prompts(tok), 6, 3)]
    want = decode_calls(model, tok, graph(s), calls)
    static_decode.reset_decoders()

    def fault():
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")

    fake = static_decode.EagerGraphs(fault=fault)
    monkeypatch.setattr(static_decode, "GRAPHS", fake)
    got = decode_calls(model, tok, graph(s), calls)
    assert fake.captures == 0 and static_decode.StaticStep.graphs_off.startswith(
        "capture failed (CUDA error: operation not permitted"
    )
    assert all(same(a, b) for a, b in zip(got, want))
    err = capsys.readouterr().err.strip().splitlines()
    rows = sorted(k[0] for dec in static_decode._DECODERS["by_rows"].values() for k in dec.steps)
    assert len(err) == len(rows) and all(
        "static decode runs it eagerly" in x for x in err
    )  # once per step, not per token
    assert sorted(int(x.split("for the ")[1].split("-row")[0]) for x in err) == rows


def test_one_failed_capture_leaves_only_its_shape_eager_and_the_next_job_tries_again(
    fitted_dir, smoke_cfg, monkeypatch, capsys
):
    """The first capture fails: that batch size runs eagerly (one line naming it), every other size
    is captured and replayed, the samples equal the decode without graphs; a new model (the next job)
    makes new steps, and the size that failed is captured then."""
    _, model, tok = lora_model(fitted_dir, smoke_cfg)
    s = graph(SETTINGS[0])
    calls = [(ragged_prompts(tok), 6, 0), (ragged_prompts(tok), 6, 3)]
    want = decode_calls(model, tok, s, calls)
    static_decode.reset_decoders()

    class FirstFails(static_decode.EagerGraphs):
        tries = 0

        def capture(self, step, gen):
            self.tries += 1
            if self.tries == 1:
                step()  # got partway, as a real capture does, then raised
                raise RuntimeError("forced: one capture CUDA refused")
            return super().capture(step, gen)

    fake = FirstFails()
    monkeypatch.setattr(static_decode, "GRAPHS", fake)
    got = decode_calls(model, tok, s, calls)
    assert all(same(a, b) for a, b in zip(got, want))
    steps = [st for dec in static_decode._DECODERS["by_rows"].values() for st in dec.steps.values()]
    off = [st for st in steps if st.off is not None]
    assert len(off) == 1 and off[0].off.startswith("capture failed (forced") and len(steps) > 1
    assert fake.captures == len(steps) - 1 and all(
        st.checked for st in steps if st.off is None
    )  # the others captured and replay
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"for the {off[0].rows}-row step" in err[0]
    static_decode.reset_decoders()  # what a new model does (decoder_for): the next job
    again = static_decode.EagerGraphs()
    monkeypatch.setattr(static_decode, "GRAPHS", again)
    assert all(same(a, b) for a, b in zip(decode_calls(model, tok, s, calls), want))
    assert again.captures == len(steps)  # the shape that failed is captured this time


def test_a_replay_that_differs_is_redone_eagerly(fitted_dir, smoke_cfg, monkeypatch, capsys):
    _, model, tok = load(fitted_dir, smoke_cfg)
    calls = [(ragged_prompts(tok), 6, 2)]
    want = decode_calls(model, tok, graph(SETTINGS[0]), calls)
    static_decode.reset_decoders()

    class Wrong(static_decode.EagerGraphs):
        def capture(self, step, gen):
            real = super().capture(step, gen)
            return lambda: (real(), static_decode._DECODERS["by_rows"][30].st["tok"].add_(1))

    monkeypatch.setattr(static_decode, "GRAPHS", Wrong())
    got = decode_calls(model, tok, graph(SETTINGS[0]), calls)
    assert "first replay drew other tokens" in static_decode.StaticStep.graphs_off and same(got[0], want[0])
    assert "static decode runs it eagerly" in capsys.readouterr().err


def test_a_changed_model_gets_new_decoders(fitted_dir, smoke_cfg, monkeypatch):
    """Folding the LoRA puts new weights in place and switches LoRA off: graphs captured on the
    unfolded model must not replay there."""
    from method.model import lora_folded

    _, model, tok = lora_model(fitted_dir, smoke_cfg)
    monkeypatch.setattr(static_decode, "GRAPHS", static_decode.EagerGraphs())
    calls = [(ragged_prompts(tok), 2, 0)]
    decode_calls(model, tok, graph(SETTINGS[0]), calls)
    before = static_decode._DECODERS["by_rows"][10]
    with lora_folded(model):
        decode_calls(model, tok, graph(SETTINGS[0]), calls)
        assert static_decode._DECODERS["by_rows"][10] is not before


def test_unsort_runs_outside_determinism_off_the_cpu(monkeypatch):
    """Unsort runs outside determinism off the cpu and restores it.

    decoding.unsort: the permutation scatter equals the inverse permutation; off the CPU (here the
    meta device, shapes only) it runs with deterministic algorithms off and restores the setting,
    warn_only included; on the CPU it leaves the setting alone."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 50, generator=g)
    _, order = torch.sort(logits, dim=-1, descending=True)
    vals = torch.arange(150.0).view(3, 50)
    want = torch.empty_like(vals)
    for b in range(3):
        want[b, order[b]] = vals[b]
    seen = []
    real = torch.Tensor.scatter

    def spy(self, *a, **k):
        seen.append(torch.are_deterministic_algorithms_enabled())
        return real(self, *a, **k)

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    monkeypatch.setattr(torch.Tensor, "scatter", spy)
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        assert torch.equal(decoding.unsort(vals, order), want) and seen == [True]
        out = decoding.unsort(vals.to("meta"), order.to("meta"))
        assert out.shape == vals.shape and seen == [True, False]
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
