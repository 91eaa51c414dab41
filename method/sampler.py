"""The hand-written sampler: n completions per prompt with exactly the settings given (temperature,
top-k, top-p, max new tokens) and nothing else: no repetition penalty, nothing read from a model's
generation_config.json but its stop tokens (Qwen's would add repetition_penalty 1.1, top_k 20,
top_p 0.8, temperature 0.7; the policy gradient assumes samples from the policy itself). A KV cache
allocated once per decode, and a count of the host reads it makes (each one a device sync on a GPU).

sample_eager's speed: the prompt is run once and its KV cache copied to its n samples; the cache
and the attention mask are preallocated for the whole decode (kv_cache); tokens, finished flags and
entropies stay on the device, and the host reads one number per token (how many rows have finished)
plus the results once at the end. (Reading it every few tokens instead would move the compactions,
and with them which random draws each row gets: other samples than the registered runs were made
with.) Finished sequences leave the batch, in one compaction whenever an eighth of the rows have
finished (each compaction copies the cache). A finished row still in the batch draws tokens that
are thrown away, so under one generator which tokens a row gets depends on this schedule,
deterministically: same inputs and seed, same samples; with one seed per sample (each row reading
its own uniforms) the schedule changes none of its tokens.

sample() runs sample_eager here or, with sampling.decode graph (auto: on CUDA), the static decode
of method/static_decode.py; the pieces both share are method/decoding.py's. tests/test_sampler.py
keeps the plain per-token sampler sample_eager must equal bit for bit, and checks greedy output
against transformers' `generate`.
"""

from __future__ import annotations

import torch

from method.cut_tail import cut_draw
from method.decoding import (
    NAN_MESSAGE,
    NONE,
    Samples,
    collect,
    filter_logits,
    keyed_draw,
    kv_cache,
    left_pad,
    multinomial,
    stream_uniforms,
)
from method.model import last_positions
from method.static_decode import graph_backend, sample_static
from orchestration import config


def decode_mode(s: config.SamplingCfg, device: torch.device) -> str:
    """eager or graph: `auto` is graph on CUDA and eager elsewhere."""
    if s.decode != "auto":
        return s.decode
    return "graph" if device.type == "cuda" else "eager"


def sample(
    model,
    prompts: list[list[int]],
    n: int,
    s: config.SamplingCfg,
    seed: int | list[int],
    stops: list[int],
    pad: int,
    entropy: bool = False,
) -> Samples:
    """n completions for each prompt (prompt-major order: prompt 0's n samples first), with the decode
    `s.decode` names: eager (sample_eager, the CPU runs' sampler) or graph (sample_static: static
    shapes, every setting, CUDA graphs on a GPU). auto: graph on CUDA, eager elsewhere.

    seed: an int seeds one generator that draws every row's tokens (which tokens a row gets then
    depends on the whole batch: training's rollouts, and evaluations under eval.draw: batch); a list
    of P*n seeds, one per sample in prompt-major order, gives each sample its own stream of uniforms,
    drawn by decoding.keyed_draw: a sample's tokens then depend on its prompt and seed alone, not on
    what shares its call (evaluations under eval.draw: sample; PLAN_CHANGES.md change 52)."""
    device = next(model.parameters()).device
    if isinstance(seed, list) and len(seed) != len(prompts) * n:
        raise ValueError(
            f"sample: {len(seed)} seeds for {len(prompts)} prompts x {n} samples (one per sample, prompt-major)"
        )
    if decode_mode(s, device) == "graph":
        return sample_static(model, prompts, n, s, seed, stops, pad, entropy, graphs=graph_backend(device))
    return sample_eager(model, prompts, n, s, seed, stops, pad, entropy)


@torch.inference_mode()  # lighter than no_grad: no version counters or autograd metadata per op
def sample_eager(
    model,
    prompts: list[list[int]],
    n: int,
    s: config.SamplingCfg,
    seed: int | list[int],
    stops: list[int],
    pad: int,
    entropy: bool = False,
) -> Samples:
    """n completions for each prompt (prompt-major order: prompt 0's n samples first), with exactly
    the settings `s` gives: temperature (0 = greedy), top_k, top_p, max_new_tokens (the module
    docstring says why only these, and how the batch shrinks as rows finish). One generator seeded
    by `seed` draws every token; with one seed per sample (a list), each row reads its own uniforms.

    entropy: also return each sample's mean full-vocabulary entropy of the untempered distribution (before
    temperature and filtering), so models sampled at different temperatures compare; it draws nothing."""
    device = next(model.parameters()).device
    T = s.max_new_tokens
    keyed = isinstance(seed, list)
    gen = None if keyed else torch.Generator(device=device).manual_seed(seed)
    U = stream_uniforms(seed, T, device) if keyed and s.temperature > 0 else None  # (B, T) each sample's uniforms
    logits, cache, full_mask, padded, padded_rows, next_pos, Lp = prefill(model, prompts, n, pad, T)
    B = logits.shape[0]
    out = torch.full((B, max(T, 1)), NONE, dtype=torch.long, device=device)  # (B, T) every sample's tokens
    alive = torch.arange(B, device=device)  # row -> sample index
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (b,) the row has emitted a stop token
    stop = torch.tensor(stops, device=device)
    ent_sum = torch.zeros(B, device=device)  # (B,) summed token entropy per sample
    logp_out = torch.zeros((B, max(T, 1)), device=device)  # (B, T) log pi of each drawn token (with entropy)
    nan_seen = torch.zeros((), dtype=torch.bool, device=device)
    for t in range(T):
        logits = logits.float()
        if entropy:
            lp = logits.log_softmax(-1)  # (b, V) untempered
            ent_sum.index_add_(0, alive, -(lp.exp() * lp).sum(-1) * (~done))  # rows already finished add nothing
        if s.temperature == 0:
            tok = logits.argmax(-1)  # (b,)
        elif s.tail == "cut" and (
            s.top_k > 0 or s.top_p < 1.0
        ):  # method/cut_tail.py: one more host read, for its fallback
            x = logits / s.temperature  # (b, V)
            nan_seen |= x.isnan().any()
            tok = cut_draw(x, s.top_k, s.top_p, u=U[alive, t] if keyed else None, gen=gen)[0]  # (b,)
        else:
            logits = filter_logits(logits / s.temperature, s.top_k, s.top_p)
            probs = logits.softmax(-1)  # (b, V)
            nan_seen |= probs.isnan().any()  # read once, at the end
            tok = keyed_draw(probs, U[alive, t]) if keyed else multinomial(probs, gen)  # (b,)
        out[alive, t] = tok.masked_fill(done, NONE)  # a row that finished earlier records nothing
        if entropy:
            logp_out[alive, t] = lp.gather(-1, tok[:, None]).squeeze(-1)
        done = done | torch.isin(tok, stop)
        if t == T - 1:
            break
        b = len(alive)
        # The one host read per token carries two numbers: how many rows have finished, and
        # whether any row still decoding is padded (what the batch holds after a compaction).
        code = int(done.sum() * 2 + (padded_rows & ~done).any())
        n_done = code // 2
        if n_done == b:
            break
        if n_done * 8 >= b:  # compact once an eighth has finished: each compaction copies the cache
            keep = torch.argsort(done.to(torch.uint8), stable=True)[
                : b - n_done
            ]  # rows still decoding, in order (no sync)
            cache.batch_select_indices(keep)
            alive, tok, full_mask, next_pos, done = alive[keep], tok[keep], full_mask[keep], next_pos[keep], done[keep]
            padded_rows, padded = padded_rows[keep], bool(code % 2)
        mask = full_mask[..., : Lp + t + 1] if padded else None  # (b, 1, 1, Lp+t+1) a view, no copy
        logits = model(
            input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos, cache=cache, use_cache=True
        ).logits[:, -1]  # (b, V)
        next_pos = next_pos + 1
    if nan_seen.item():
        raise RuntimeError(NAN_MESSAGE)
    return collect(out[:, :T], ent_sum if entropy else None, logp_out[:, :T] if entropy else None, stops)


def prefill(model, prompts: list[list[int]], n: int, pad: int, T: int):
    """Run the prompts once and give each of their n samples the prompt's cache: (logits (B, V),
    cache, the decode steps' mask (B, 1, 1, Lp+T), whether any row is padded, which rows are (B,),
    the next positions (B, 1), Lp), B = P*n, prompt-major."""
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad)  # (P, Lp)
    padded = len({len(p) for p in prompts}) > 1  # does any row in the decoding batch carry padding? (kept on the host)
    padded_rows = (mask == 0).any(-1)  # (P,) prompts shorter than the longest
    ids, mask, padded_rows = ids.to(device), mask.to(device), padded_rows.to(device)
    P, Lp = ids.shape
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (P, Lp): positions count real tokens only
    cache = kv_cache(model, Lp + T)
    logits = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=pos,
        cache=cache,
        use_cache=True,
        logits_to_keep=last_positions(Lp, 1, device),
    ).logits[:, -1]  # (P, V)
    cache.batch_repeat_interleave(n)  # (P*n, ...) every sample starts from its prompt's cache
    logits = logits.repeat_interleave(n, 0)  # (B, V), B = P*n
    B = P * n
    # The decode steps' attention mask, built once: (B, 1, 1, Lp+T), True = attend, the prompt's
    # padding then ones. Given 4-D, transformers uses it as it is (the sdpa mask it would build for
    # one query) instead of rebuilding it and asking the device whether it is all ones, per token.
    # When no row in the batch is padded, no mask is passed: transformers would drop an all-ones
    # mask itself, and attention without one takes another kernel path (GQA inside SDPA) whose
    # numbers differ in the last bits from the masked path.
    full_mask = torch.ones((B, 1, 1, Lp + T), dtype=torch.bool, device=device)
    full_mask[:, 0, 0, :Lp] = mask.repeat_interleave(n, 0).bool()
    padded_rows = padded_rows.repeat_interleave(n, 0)  # (B,)
    next_pos = pos[:, -1:].repeat_interleave(n, 0) + 1  # (B, 1)
    return logits, cache, full_mask, padded, padded_rows, next_pos, Lp


HOST_READS = (
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::equal",
)  # item, int, float and bool all end in the first


def count_host_reads(fn):
    """Run fn() under torch's profiler and count the ops that hand a tensor's value to Python
    (item/int/float/bool, nonzero, equal): on a GPU each one waits for the device. Returns
    (count, fn's result). A .tolist() of a CPU tensor does not pass through the dispatcher and is
    not counted; the sampler makes two, at the end (plus one item: the NaN check)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = fn()
    return sum(e.count for e in prof.key_averages() if e.key in HOST_READS), result
