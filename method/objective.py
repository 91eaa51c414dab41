"""The Dr. GRPO objective: advantages, the surrogate loss, the controls' terms, and the gradient
accumulated over micro-batches (method/training.py runs the loop that calls it).

Dr. GRPO (Liu et al., arXiv 2503.20783) as this study runs it. Departures from GRPO
(Shao et al., arXiv 2402.03300), each tagged [D1]..[D5] at the line that makes it:

  1. [D1] Advantage = reward - group mean. No division by the group's std, which up-weights
          groups that are nearly all right or all wrong.
  2. [D2] The loss is summed over response tokens and divided by a constant,
          problems x group size x max_new_tokens, not by each response's length, which
          rewards long wrong answers and short right ones.
  3. [D3] No KL term to a reference model.
  4. [D4] One sampling, one update: the policy that sampled is the policy being updated, so
          the PPO ratio is 1 and clipping never acts; the loss is the plain policy-gradient
          surrogate -A * log pi. "Is 1" holds as far as the sampler's log-probabilities equal the
          trainer's: in fp32 they agree to rounding, in bf16 (and with folded LoRA) they do not;
          train_log.csv logs the gap (logp_gap_mean, logp_gap_max) every step, train.logp_gap_limit
          stops a run whose mean gap exceeds it, and train.importance_cap C (off unless a config
          sets it) weighs each token by min(pi_trainer / pi_sampler, C), detached: truncated
          importance sampling for the mismatch, as TRL's vLLM correction.
  5. [D5] The reward is the strict score only (answer inside <answer> tags); no format reward.

The controls of PLAN.md section 4 are entries of the condition registry, read by the same loop
(no per-condition branch): `kl` adds the k3 KL anchor to the base (departing from [D3]),
`entropy` an entropy bonus, `reward: format` the format-only reward (departing from [D5]), `unlikeliness`
the positive control that rewards a group's less likely correct answers more (departing from [D5]), and
`method` (METHODS) says only which completions are trained and with which weight, all through the
same surrogate -sum(A * log pi) / constant:
  grpo  the policy's samples, A = reward - group mean               [D1]
  rft   the policy's samples, A = reward (the correct ones, weight 1; rejection-sampling fine-tuning)
  sft   gold solutions written by code (countdown.gold_solution), one copy each with A = G; no rollouts
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from method.model import completion_logprobs, lora_disabled, pack

# ============================================================================= the loss


def unlikeliness_rewards(rewards: torch.Tensor, seq_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """rewards (P, G), seq_logp (P, G) each response's log-probability under the policy that sampled it ->
    (P, G). Within a group, the rewarded responses (reward > 0) ranked from least to most likely (ties by
    position): the j-th (j = 0 the least likely) keeps reward * (1 - beta * j / G). After He, Fried & Welleck
    (arXiv 2506.02355): the more likely a correct answer already is, the less it earns."""
    P, G = rewards.shape
    key = torch.where(rewards > 0, seq_logp.double(), torch.inf)  # (P, G) the unrewarded last
    order = torch.sort(key, dim=1, stable=True).indices  # (P, G) least likely first
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(G).expand(P, G))  # (P, G)
    return torch.where(rewards > 0, rewards * (1 - beta * rank.to(rewards.dtype) / G), rewards)


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """rewards (P, G) -> advantages (P, G). [D1] reward - group mean; no division by std."""
    return rewards - rewards.mean(dim=1, keepdim=True)


def drgrpo_loss(
    logp: torch.Tensor, cmask: torch.Tensor, adv: torch.Tensor, normalizer: float, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """[D2][D3][D4] -sum(A * log pi * mask) / constant. logp, cmask: (b, Lc); adv: (b,).
    With one update per sample the PPO ratio is 1, so this is the whole objective. weight (b, Lc),
    no gradient: the importance weight of each token (importance_weights), else 1."""
    if weight is not None:
        cmask = cmask * weight  # [D4] departs here when train.importance_cap is set
    return -(adv[:, None] * logp * cmask).sum() / normalizer


def importance_weights(logp: torch.Tensor, sampled_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """min(pi_trainer / pi_sampler, cap) per token, (b, Lc), detached: truncated importance
    sampling for the sampler-trainer mismatch (Yao et al. 2025; TRL's vLLM correction). The
    gradient of the weighted surrogate is then sum(w * A * grad log pi), an estimate under the
    trainer's policy of what the sampler's samples estimate, its variance bounded by the cap."""
    return torch.exp(logp.detach() - sampled_logp).clamp(max=cap)


K3_LOG_RATIO_MAX = 5.0  # above this log(ref / pi) k3 grows linearly: a token's weight stays e^5 - 1 = 147


def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 = exp(r) - r - 1 with r = log ref - log pi (Schulman's estimator, as TRL and veRL
    use), (b, Lc). Its value estimates KL(pi || ref), unbiased on samples from pi; its gradient
    as a loss on those samples, (exp(r) - 1) grad log pi, estimates that of KL(ref || pi), the
    reverse direction: it pulls up tokens the base likes more than the policy does. Above
    r = K3_LOG_RATIO_MAX the curve continues as its tangent, so the gradient's weight is capped at
    exp(5) - 1: one token with log(ref / pi) = 14 would otherwise weigh exp(14) ~ 1.2e6 times its
    policy-gradient share (~2,500 times at beta = 0.001) and fill AdamW's second moment."""
    r = ref_logp - logp
    R = K3_LOG_RATIO_MAX
    inside = torch.exp(r.clamp(max=R)) - r - 1
    return torch.where(r > R, math.exp(R) - R - 1 + (math.exp(R) - 1) * (r - R), inside)


def control_terms(
    logp, cmask, normalizer: float, ref_logp=None, kl: float = 0.0, ent=None, entropy: float = 0.0
) -> torch.Tensor:
    """The controls' additions to the loss, normalised by the same constant as [D2]:
    + kl * sum(k3) / constant (the KL anchor to the base; [D3] departs from Dr. GRPO here, on
    purpose, only in conditions that register kl > 0), and - entropy * sum(H) / constant (the
    entropy bonus: minimising the loss raises the policy's entropy). 0 when both are off."""
    out = logp.new_zeros(())
    if kl > 0:
        out = out + kl * (k3(logp, ref_logp) * cmask).sum() / normalizer
    if entropy > 0:
        out = out - entropy * (ent * cmask).sum() / normalizer
    return out


@dataclass(frozen=True)
class Terms:
    """The loss's settings besides the samples: the constant the summed loss is divided by (Dr. GRPO's), the
    micro-batch, the KL-to-base and entropy weights, whether the KL is measured where it is not trained
    (train.log_kl_every), micro-batches by length (train.sort_by_length) and the importance cap."""

    normalizer: float
    micro_batch: int
    kl: float = 0.0
    entropy: float = 0.0
    measure_kl: bool = False
    sort_by_length: bool = False
    importance_cap: float | None = None


def policy_gradient(
    model,
    prompts,
    completions,
    adv: torch.Tensor,
    pad: int,
    terms: Terms,
    sampled_logp: list[list[float]] | None = None,
) -> dict:
    """Accumulate the gradient over micro-batches (exact: the loss is a plain sum with a
    constant normalizer). Without a KL or entropy term, samples whose advantage is exactly 0 add
    nothing and are skipped. Returns the loss and, when computed, the mean per-token k3 KL to
    the base (kl > 0, or measure_kl) and the mean policy entropy over the trained tokens; with
    sampled_logp (the sampler's log pi of each completion token) the mean and largest |log pi
    (trainer) - log pi (sampler)| over the trained tokens: the policy gap [D4] assumes is 0.
    importance_cap (with sampled_logp): the policy-gradient term's tokens weighed by
    importance_weights; the KL and entropy terms are not weighed."""
    normalizer, micro_batch, kl, entropy = terms.normalizer, terms.micro_batch, terms.kl, terms.entropy
    measure_kl, sort_by_length, importance_cap = terms.measure_kl, terms.sort_by_length, terms.importance_cap
    device = next(model.parameters()).device
    every_row = kl > 0 or entropy > 0
    rows = [i for i in range(len(completions)) if every_row or adv[i].item() != 0.0]
    order = (
        (lambda idx: sorted(idx, key=lambda i: len(completions[i]))) if sort_by_length else list
    )  # train.sort_by_length
    rows = order(rows)
    # Running sums stay on the device and are read once, after the last micro-batch: no host sync inside the loop.
    # Each is accumulated in float64 in the order the per-micro-batch .item() sums were, so the logged numbers are
    # the same bits. The token count comes from the completions' lengths (pack's mask is 1 on each token).
    zero = torch.zeros((), dtype=torch.float64, device=device)
    total, kl_sum, gap_sum, gap_max, n_tok = zero, zero, zero, None, 0.0
    for chunk, tokens, ids, attn, pos, cmask in micro_batches(prompts, completions, rows, micro_batch, pad, device):
        ref = None
        if kl > 0:
            with torch.no_grad(), lora_disabled(model):
                ref, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])  # (b, Lc) the base's log-probs
        logp, ent = completion_logprobs(model, ids, attn, pos, cmask.shape[1], with_entropy=entropy > 0)
        sampled = (
            pack_logprobs([sampled_logp[i] for i in chunk], cmask.shape[1]).to(device, non_blocking=True)
            if sampled_logp is not None
            else None
        )  # (b, Lc)
        w = (
            importance_weights(logp, sampled, importance_cap)
            if importance_cap is not None and sampled is not None
            else None
        )
        loss = drgrpo_loss(logp, cmask, adv[chunk].to(device, non_blocking=True), normalizer, w) + control_terms(
            logp, cmask, normalizer, ref, kl, ent, entropy
        )
        loss.backward()
        total = total + loss.detach().double()
        n_tok += tokens
        if ref is not None:
            kl_sum = kl_sum + (k3(logp.detach(), ref) * cmask).sum().double()
        if sampled is not None:
            gap = (logp.detach() - sampled).abs() * cmask  # (b, Lc)
            gap_sum = gap_sum + gap.sum().double()
            gap_max = gap.max() if gap_max is None else torch.maximum(gap_max, gap.max())
    total, kl_sum, gap_sum = total.item(), kl_sum.item(), gap_sum.item()  # the step's one read of the device
    gap_max = float("nan") if gap_max is None else gap_max.item()
    out = {
        "loss": total,
        "kl_mean": kl_sum / max(n_tok, 1) if kl > 0 else float("nan"),
        "logp_gap_mean": gap_sum / n_tok if sampled_logp is not None and n_tok else float("nan"),
        "logp_gap_max": gap_max,
    }
    if measure_kl and kl == 0:  # a diagnostic only: no gradient, every sample
        every = order(range(len(completions)))
        out["kl_mean"] = kl_to_base(model, micro_batches(prompts, completions, every, micro_batch, pad, device))
    return out


def micro_batches(prompts, completions, idx: list[int], micro_batch: int, pad: int, device):
    """The rows idx in micro-batches: (their indices, their completion tokens (the mask's sum, from the
    lengths), and pack's ids, attention mask, positions and completion mask, moved to the device)."""
    for start in range(0, len(idx), micro_batch):
        chunk = idx[start : start + micro_batch]
        ids, attn, pos, cmask = pack([prompts[i] for i in chunk], [completions[i] for i in chunk], pad)
        moved = (x.to(device, non_blocking=True) for x in (ids, attn, pos, cmask))
        yield chunk, float(sum(len(completions[i]) for i in chunk)), *moved


def kl_to_base(model, batches) -> float:
    """The mean per-token k3 KL of the model to its base (LoRA off) over micro_batches' `batches`, without a
    gradient: summed on the device in float64 and read once (the same bits as one read per micro-batch)."""
    kl_sum, n_tok = torch.zeros((), dtype=torch.float64, device=next(model.parameters()).device), 0.0
    with torch.no_grad():
        for _, tokens, ids, attn, pos, cmask in batches:
            logp, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
            with lora_disabled(model):
                ref, _ = completion_logprobs(model, ids, attn, pos, cmask.shape[1])
            kl_sum = kl_sum + (k3(logp, ref) * cmask).sum().double()
            n_tok += tokens
    return kl_sum.item() / max(n_tok, 1)


def pack_logprobs(rows: list[list[float]], Lc: int) -> torch.Tensor:
    """(b, Lc) the sampler's per-token log-probabilities, right-padded with 0 as pack() pads completions."""
    out = torch.zeros((len(rows), Lc))
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


@dataclass(frozen=True)
class Method:
    """What a method trains on: the policy's own samples (rollouts: G per problem) or the written
    gold solutions (one per problem), and the advantage of each: advantages(rewards (P, G)) ->
    (P*G,) with rollouts, (P,) without."""

    rollouts: bool
    advantages: Callable[[torch.Tensor], torch.Tensor]


METHODS = {
    "grpo": Method(True, lambda rewards: group_advantages(rewards).view(-1)),  # [D1]
    "rft": Method(True, lambda rewards: rewards.view(-1).clone()),  # the correct samples, weight 1; the rest 0
    # each problem's gold solution once, with weight G: the gradient of G identical copies (the same
    # examples per step as GRPO's P x G), at 1/G of the work (PLAN_CHANGES.md change 29)
    "sft": Method(False, lambda rewards: torch.full((rewards.shape[0],), float(rewards.shape[1]))),
}
