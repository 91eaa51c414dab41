"""What the two decodes share (method/sampler.py's eager one and method/static_decode.py's static
one): the top-k / top-p filter, the two draws (the one-generator multinomial, and the keyed draw
from each sample's own stream), the growing KV cache, left padding, and the Samples they return.
Nothing here decodes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


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
        drop = unsort(drop_sorted, order)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def unsort(values: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """values (B, V) in sorted order back in the original one: out[b, order[b, j]] = values[b, j].
    order is a permutation of each row, so every slot is written exactly once and any scatter
    kernel gives the same result. Off the CPU, determinism is switched off around this one call:
    torch's deterministic scatter on CUDA is an index-put with a sort of every index (19.4M int64
    keys per decoded token at 128 rows of a 151,936-token vocabulary), exact either way."""
    if values.device.type == "cpu" or not torch.are_deterministic_algorithms_enabled():
        return torch.zeros_like(values).scatter(-1, order, values)
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        return torch.zeros_like(values).scatter(-1, order, values)
    finally:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)


@dataclass
class Samples:
    tokens: list[list[int]]  # one list of completion ids per sample (EOS included if emitted)
    truncated: list[bool]  # hit max_new_tokens without an EOS
    entropy: list[float] | None = (
        None  # mean full-vocabulary entropy of the untempered (T = 1) policy over each sample's tokens
    )
    logprobs: list[list[float]] | None = (
        None  # log pi(token) of each drawn token under the untempered policy (with entropy)
    )


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
            self.kbuf = key_states.new_empty(
                b, h, self.capacity, key_states.shape[-1]
            )  # (b, kv heads, capacity, head dim)
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


def stream_uniforms(seeds: list[int], T: int, device: torch.device) -> torch.Tensor:
    """(B, T) float64 uniforms in [0, 1): row i is the first T draws of a CPU generator seeded by
    seeds[i], so a sample's stream is the same on every device and in every batch (PLAN_CHANGES.md change 52)."""
    out = torch.empty((len(seeds), max(T, 1)), dtype=torch.float64)
    g = torch.Generator()
    for i, seed in enumerate(seeds):
        torch.rand(out.shape[1], generator=g.manual_seed(seed), dtype=torch.float64, out=out[i])
    return out.to(device)


def keyed_draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row of probs (b, V) by its inverse CDF at u (b,): the first token whose cumulative
    probability (float64, vocabulary order) exceeds u times the row's total. Each token comes out with
    its probability (a token of probability 0 never: the sum must grow past it), and a row's draw reads
    nothing of the other rows, so a sample's tokens do not depend on its batch. (On CUDA torch has no
    deterministic cumsum: a u within a rounding error of a boundary may fall either side, run to run.)"""
    cum = probs.double().cumsum(-1)  # (b, V)
    total = cum[:, -1:]  # (b, 1)
    x = torch.minimum(
        u[:, None] * total, total.nextafter(torch.zeros_like(total))
    )  # below the total: u * total can round up to it
    tok = torch.searchsorted(cum, x, right=True).squeeze(-1)  # (b,)
    return tok.clamp_(max=probs.shape[-1] - 1)  # only a row with no mass at all (NaN: the sampler raises) reaches V


def kv_cache(model, capacity: int):
    """A transformers Cache of GrowingKV layers, one per decoder layer, each holding `capacity` positions."""
    from transformers.cache_utils import Cache

    layer = growing_kv_class()
    return Cache(layers=[layer(capacity) for _ in range(model.config.num_hidden_layers)])


NONE = -1  # marks a slot with no token (the sample had finished, or left the batch)
NAN_MESSAGE = "sampler: the model's next-token probabilities hold NaN (diverged weights, or an fp16 overflow)"


def collect(out: torch.Tensor, ent_sum: torch.Tensor | None, logp: torch.Tensor | None, stops: list[int]) -> Samples:
    """Samples from the decode's device buffers: out (B, T) token ids with NONE after a sample
    ended, ent_sum (B,) summed entropies, logp (B, T) per-token log-probabilities. Two host reads."""
    stopset = set(stops)
    tokens = [[x for x in row if x != NONE] for row in out.tolist()]  # a sample's slots are filled from the start
    truncated = [
        bool(row) and row[-1] not in stopset for row in tokens
    ]  # every row holds at least one token when T > 0
    ent = [e / max(len(o), 1) for e, o in zip(ent_sum.tolist(), tokens)] if ent_sum is not None else None
    lps = [row[: len(o)] for row, o in zip(logp.tolist(), tokens)] if logp is not None else None
    return Samples(tokens, truncated, ent, lps)
