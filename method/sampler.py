"""The hand-written sampler: n completions per prompt with exactly the settings given (temperature,
top-k, top-p, max new tokens; no repetition penalty, nothing read from a model's
generation_config.json but its stop tokens), a KV cache allocated once per decode, and a count of
the host reads it makes (each one a device sync on a GPU).

sample() runs sample_eager here or, with sampling.decode graph (auto: on CUDA), the static decode
of method/static_decode.py. tests/test_sampler.py keeps the plain per-token sampler sample_eager must
equal bit for bit, and checks greedy output against transformers' `generate`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from method.model import last_positions
from orchestration import config


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set to -inf every logit outside the top-k and outside the top-p nucleus.
    logits: (B, V), already divided by the temperature. top_k 0 and top_p 1.0 are off.
    The nucleus is the smallest set of most likely tokens whose probability reaches top_p
    (the token that crosses the threshold is kept); the most likely token is always kept."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        mass_before = probs.cumsum(-1) - probs  # (B, V): probability of the tokens ranked above
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@dataclass
class Samples:
    tokens: list[list[int]]  # one list of completion ids per sample (EOS included if emitted)
    truncated: list[bool]  # hit max_new_tokens without an EOS
    entropy: list[float] | None = None  # mean full-vocabulary entropy of the untempered (T = 1) policy over each sample's tokens
    logprobs: list[list[float]] | None = None  # log pi(token) of each drawn token under the untempered policy (with entropy)


def left_pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, L - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, L - len(s) :] = 1
    return ids, mask


@functools.cache
def growing_kv_class():
    """GrowingKV, built on first use so that importing this module does not import transformers."""
    from transformers.cache_utils import DynamicLayer

    class GrowingKV(DynamicLayer):
        """One layer's KV cache in a buffer allocated once for the whole decode (capacity: prompt
        plus max_new_tokens). Each token is written into the next free slot and attention reads
        a view of the filled part, so nothing is concatenated per token (transformers'
        DynamicLayer copies the whole cache at every token, a copy that grows with the length;
        on the tiny CPU model it is lost in the noise). Values are the same as DynamicLayer's,
        so the samples are too."""

        def __init__(self, capacity: int):
            super().__init__()
            self.capacity, self.length = capacity, 0

        def lazy_initialization(self, key_states, value_states):
            self.device = key_states.device
            b, h, _, _ = key_states.shape
            self.rows = b  # rows in use: compaction moves the kept rows to the front
            self.kbuf = key_states.new_empty(b, h, self.capacity, key_states.shape[-1])  # (b, kv heads, capacity, head dim)
            self.vbuf = value_states.new_empty(b, h, self.capacity, value_states.shape[-1])
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.length + key_states.shape[-2]
            if end > self.capacity:
                raise RuntimeError(f"KV cache capacity {self.capacity} exceeded ({end} positions)")
            self.kbuf[: self.rows, :, self.length : end] = key_states
            self.vbuf[: self.rows, :, self.length : end] = value_states
            self.length = end
            self._views()
            return self.keys, self.values

        def _views(self):
            self.keys, self.values = self.kbuf[: self.rows, :, : self.length], self.vbuf[: self.rows, :, : self.length]

        def get_seq_length(self) -> int:
            return self.length

        def batch_repeat_interleave(self, repeats: int) -> None:
            self.kbuf, self.vbuf = self.kbuf.repeat_interleave(repeats, 0), self.vbuf.repeat_interleave(repeats, 0)
            self.rows *= repeats
            self._views()

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            """Keep rows `indices`, in that order, moved to the front of the same buffers: only
            the filled positions are copied, and nothing new the buffers' size is allocated."""
            m, L = len(indices), self.length
            self.kbuf[:m, :, :L] = self.kbuf[indices, :, :L]  # the right side is gathered into a new tensor first
            self.vbuf[:m, :, :L] = self.vbuf[indices, :, :L]
            self.rows = m
            self._views()

    return GrowingKV


def multinomial(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One draw per row of probs (b, V): argmax(p / q) with q ~ Exp(1), which is exactly how
    torch.multinomial draws one sample (same generator calls, same tokens), without its check
    that every probability is finite and >= 0, which reads the device twice per call. probs come
    from a softmax here; NaN logits are caught in sample() instead, once, at the end."""
    q = torch.empty_like(probs).exponential_(1, generator=gen)
    return (probs / q).argmax(-1)


def kv_cache(model, capacity: int):
    """A transformers Cache of GrowingKV layers, one per decoder layer, each holding `capacity` positions."""
    from transformers.cache_utils import Cache

    layer = growing_kv_class()
    return Cache(layers=[layer(capacity) for _ in range(model.config.num_hidden_layers)])


def decode_mode(s: config.SamplingCfg, device: torch.device) -> str:
    """eager or graph: `auto` is graph on CUDA and eager elsewhere."""
    return ("graph" if device.type == "cuda" else "eager") if s.decode == "auto" else s.decode


def sample(model, prompts: list[list[int]], n: int, s: config.SamplingCfg, seed: int, stops: list[int], pad: int,
           entropy: bool = False) -> Samples:
    """n completions for each prompt (prompt-major order: prompt 0's n samples first), with the decode
    `s.decode` names: eager (sample_eager, the CPU runs' sampler) or graph (sample_static: static
    shapes, every setting, CUDA graphs on a GPU). auto: graph on CUDA, eager elsewhere."""
    device = next(model.parameters()).device
    if decode_mode(s, device) == "graph":
        from method.static_decode import graph_backend, sample_static

        return sample_static(model, prompts, n, s, seed, stops, pad, entropy, graphs=graph_backend(device))
    return sample_eager(model, prompts, n, s, seed, stops, pad, entropy)


@torch.inference_mode()  # lighter than no_grad: no version counters or autograd metadata per op
def sample_eager(model, prompts: list[list[int]], n: int, s: config.SamplingCfg, seed: int, stops: list[int], pad: int,
                 entropy: bool = False) -> Samples:
    """n completions for each prompt (prompt-major order: prompt 0's n samples first).

    Written by hand so that exactly these settings apply and nothing else: temperature
    (0 = greedy), top_k, top_p, max_new_tokens. No repetition penalty, and no sampling setting is read
    from the model's generation_config.json (Qwen's would add repetition_penalty 1.1, top_k 20,
    top_p 0.8, temperature 0.7; the policy gradient assumes samples from the policy itself).

    Speed: the prompt is run once and its KV cache copied to its n samples; the cache and the
    attention mask are preallocated for the whole decode (kv_cache); tokens, finished flags and
    entropies stay on the device, and the host reads one number per token (how many rows have
    finished) plus the results once at the end. (Reading it every few tokens instead would move
    the compactions, and with them which random draws each row gets: other samples than the
    registered runs were made with.) Finished sequences leave the batch, in one
    compaction whenever an eighth of the rows have finished (each compaction copies the cache).
    A finished row still in the batch draws tokens that are thrown away, so which tokens a row
    gets depends on this schedule, deterministically: same inputs and seed, same samples. One
    generator seeded by `seed` draws all tokens. (tests/test_sampler.py holds the plain
    per-token version this one equals bit for bit.)

    entropy: also return each sample's mean full-vocabulary entropy of the untempered
    distribution (before temperature and filtering), so models sampled at different
    temperatures compare; it draws nothing, so the samples are the same either way."""
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    T = s.max_new_tokens
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
        else:
            logits = filter_logits(logits / s.temperature, s.top_k, s.top_p)
            probs = logits.softmax(-1)  # (b, V)
            nan_seen |= probs.isnan().any()  # read once, at the end
            tok = multinomial(probs, gen)  # (b,)
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
            keep = torch.argsort(done.to(torch.uint8), stable=True)[: b - n_done]  # rows still decoding, in order (no sync)
            cache.batch_select_indices(keep)
            alive, tok, full_mask, next_pos, done = alive[keep], tok[keep], full_mask[keep], next_pos[keep], done[keep]
            padded_rows, padded = padded_rows[keep], bool(code % 2)
        mask = full_mask[..., : Lp + t + 1] if padded else None  # (b, 1, 1, Lp+t+1) a view, no copy
        logits = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos, cache=cache,
                       use_cache=True).logits[:, -1]  # (b, V)
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
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                   logits_to_keep=last_positions(Lp, 1, device)).logits[:, -1]  # (P, V)
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


NONE = -1  # marks a slot with no token (the sample had finished, or left the batch)
NAN_MESSAGE = "sampler: the model's next-token probabilities hold NaN (diverged weights, or an fp16 overflow)"


def collect(out: torch.Tensor, ent_sum: torch.Tensor | None, logp: torch.Tensor | None, stops: list[int]) -> Samples:
    """Samples from the decode's device buffers: out (B, T) token ids with NONE after a sample
    ended, ent_sum (B,) summed entropies, logp (B, T) per-token log-probabilities. Two host reads."""
    stopset = set(stops)
    tokens = [[x for x in row if x != NONE] for row in out.tolist()]  # a sample's slots are filled from the start
    truncated = [bool(row) and row[-1] not in stopset for row in tokens]  # every row holds at least one token when T > 0
    ent = [e / max(len(o), 1) for e, o in zip(ent_sum.tolist(), tokens)] if ent_sum is not None else None
    lps = [row[: len(o)] for row, o in zip(logp.tolist(), tokens)] if logp is not None else None
    return Samples(tokens, truncated, ent, lps)


HOST_READS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::equal")  # item, int, float and bool all end in the first


def count_host_reads(fn):
    """Run fn() under torch's profiler and count the ops that hand a tensor's value to Python
    (item/int/float/bool, nonzero, equal): on a GPU each one waits for the device. Returns
    (count, fn's result). A .tolist() of a CPU tensor does not pass through the dispatcher and is
    not counted; the sampler makes two, at the end (plus one item: the NaN check)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = fn()
    return sum(e.count for e in prof.key_averages() if e.key in HOST_READS), result
