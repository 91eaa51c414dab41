"""Support from the base's own probabilities (PLAN_CHANGES.md change 57): is a response one the base could have
drawn at the sampler that drew it?

Each response is teacher-forced through the base (LoRA off), from the token ids the sampler drew (never
re-encoded text: a tokenizer may segment a text otherwise, e.g. SmolLM2 draws '\\n\\n' as one token). At
every position the base's logits at the sampler's temperature go through the sampler's own filter
(decoding.filter_logits: top-k, then the top-p nucleus). A response lies outside the base's support at
that sampler exactly when one of its tokens is filtered out: the base draws it with probability 0.

A full forward and the sampler's cached decode agree only to float rounding, so besides the exact rule
each token's distance from the nucleus' edge is kept: excess = (the base's probability of the tokens
ranked strictly above it) - top_p, in float64. The filter drops a token when the mass ranked before it
reaches top_p, so excess >= 0 is outside, and excess well above 0 is outside beyond rounding. A response's
excess is its largest token's. Top-k alone: a token with top_k or more tokens strictly above it is outside
(excess +inf). An untruncated sampler (top_k 0, top_p 1) keeps every token: nothing is outside (excess
None), and only the log-probabilities speak.

logp_t1 is the response's log-probability under the model at T 1, untruncated (the training sampler's
distribution): the sum over its tokens of log softmax(logits)[token], in float64. With `reference` (another
sampler's temperature, top_k, top_p) the same forward also gives each response's excess at that sampler
(`excess_ref`, `outside_ref`): a T 1 draw read against the base's evaluation nucleus (PLAN.md section 7e).
"""

from __future__ import annotations

import torch

from method.decoding import filter_logits
from method.model import last_positions, pack

CHUNK_BYTES = 256 * 2**20  # fp32 logits per forward: rows x positions x vocabulary x 4 bytes at most


def token_excess(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """For logits (b, L, V) (untempered, fp32) and targets (b, L): whether the sampler's filter drops each
    target (b, L) bool, and its excess (b, L) float64: the tempered probability ranked strictly above it
    (after the top-k cut) minus top_p; +inf where top-k alone drops it; -inf when nothing truncates."""
    b, L, V = logits.shape
    z = logits.reshape(b * L, V) / temperature  # (bL, V) as the sampler tempers them
    t = targets.reshape(b * L, 1)
    dropped = filter_logits(z, top_k, top_p).gather(-1, t).isinf().squeeze(-1)  # (bL,) the sampler's own rule
    zt = z.gather(-1, t)  # (bL, 1)
    above = z > zt  # (bL, V) ranked strictly above the target
    excess = torch.full((b * L,), float("-inf"), dtype=torch.float64, device=logits.device)
    if top_k > 0 and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))  # what top-p sees, as in filter_logits
        excess = excess.masked_fill(above.sum(-1) >= top_k, float("inf"))
    if top_p < 1.0:
        p = z.double().softmax(-1)  # (bL, V)
        mass = (p * above).sum(-1) - top_p  # (bL,)
        excess = torch.maximum(excess, mass)
    return dropped.reshape(b, L), excess.reshape(b, L)


@torch.inference_mode()
def measure(
    model,
    prompts: list[list[int]],
    responses: list[list[int]],
    temperature: float,
    top_k: int,
    top_p: float,
    pad: int,
    reference: tuple[float, int, float] | None = None,
) -> list[dict]:
    """For each response (token ids, EOS included where emitted) after its prompt (token ids), under
    `model` as it is (the caller switches LoRA off for the base): {"outside": the exact rule, "excess": the
    largest token excess (None when the sampler truncates nothing), "logp_t1": log-probability at T 1}, and
    with `reference` (temperature, top_k, top_p) "outside_ref" and "excess_ref" at that sampler."""
    if not responses:
        return []
    device = next(model.parameters()).device
    V = model.get_output_embeddings().weight.shape[0]
    out: list[dict] = []
    Lmax = max(len(r) for r in responses)
    rows = max(1, CHUNK_BYTES // (4 * V * (Lmax + 1)))
    for a in range(0, len(responses), rows):
        ps, rs = prompts[a : a + rows], responses[a : a + rows]
        ids, attn, pos, cmask = pack(ps, rs, pad)  # (b, Lp+Lc), ..., (b, Lc)
        Lc = cmask.shape[1]
        keep = last_positions(ids.shape[1], Lc + 1, device)
        logits = (
            model(
                input_ids=ids.to(device),
                attention_mask=attn.to(device),
                position_ids=pos.to(device),
                use_cache=False,
                logits_to_keep=keep,
            )
            .logits[:, :-1]
            .float()
        )  # (b, Lc, V) predicts each response token, on the model's device: no per-response host work
        targets = ids[:, -Lc:].to(device)  # (b, Lc)
        valid = cmask.bool().to(device)  # (b, Lc) positions that hold a response token
        # only those positions are measured (a padded position's row is wasted work, ~40% of a chunk where lengths
        # vary); each row's softmax, filter and sums are its own, so the values are the same
        own, tgt = logits[valid], targets[valid]  # (n, V), (n,)
        logp = torch.zeros(valid.shape, dtype=torch.float64, device=device)  # (b, Lc), 0 past each response
        logp[valid] = own.log_softmax(-1).gather(-1, tgt[:, None]).squeeze(-1).double()
        logp_sum = logp.sum(-1).tolist()  # (b,): read once a chunk, as the excesses below (host())
        here = host(response_excess(own, tgt, valid, (temperature, top_k, top_p), V))
        there = host(response_excess(own, tgt, valid, reference, V)) if reference is not None else None
        for i in range(len(rs)):
            row = {"outside": False, "excess": None, "logp_t1": logp_sum[i]}
            if here is not None and len(rs[i]):
                row["outside"], row["excess"] = here[0][i], here[1][i]
            if reference is not None:
                row["outside_ref"], row["excess_ref"] = False, None
                if there is not None and len(rs[i]):
                    row["outside_ref"], row["excess_ref"] = there[0][i], there[1][i]
            out.append(row)
    return out


def host(pair: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[list[bool], list[float]] | None:
    """response_excess' tensors as Python lists, read from the device once."""
    return None if pair is None else (pair[0].tolist(), pair[1].tolist())


def response_excess(
    own: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor, sampler: tuple[float, int, float], V: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Per response (b,): whether a token is dropped at sampler (temperature, top_k, top_p) and the largest
    token excess, from the logits (n, V) and targets (n,) of the n positions where valid (b, L) holds a
    response token; None where that sampler truncates nothing."""
    temperature, top_k, top_p = sampler
    if not (temperature > 0 and ((0 < top_k < V) or top_p < 1.0)):
        return None
    d, x = token_excess(own[None], targets[None], temperature, top_k, top_p)  # (1, n) each
    dropped = torch.zeros(valid.shape, dtype=torch.bool, device=valid.device)
    excess = torch.full(valid.shape, float("-inf"), dtype=torch.float64, device=valid.device)
    dropped[valid], excess[valid] = d[0], x[0]
    return dropped.any(-1), excess.max(-1).values
