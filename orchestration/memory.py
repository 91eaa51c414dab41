"""How much accelerator memory a training step and the sampler need, counted from this code's own
path (method/model.py's LoRA and log-probs, method/training.py's micro-batches, method/sampler.py's cache), and the
automatic micro-batch that fits a budget. No torch: it reads only the model's config numbers, so
`pipeline.py --dry-run` and the benches can ask it before a model is loaded.
"""

from __future__ import annotations

from orchestration import config

# Elements of one chunk of model.TokenLogProbs' fp32 temporaries (64 MB each): the log-probs are
# computed a chunk of positions at a time, and the estimate below counts three chunks.
LOGPROB_CHUNK = 2**24
TAIL_CHUNK = 2**15  # vocabulary entries per chunk of the static decode's fused sampling tail (static_decode.fused_draw)
CAPACITY_STEP = 64  # the static decode's positions are rounded up to a multiple of this (static_decode.Decoder)


def estimate_memory(
    mc,
    lora_r: int,
    n_targets: int,
    prompt_len: int,
    new_tokens: int,
    micro_batch: int,
    n_samples: int,
    weight_bytes: int = 2,
    top_p: bool = False,
    ragged: bool = True,
    fold: bool = False,
    keyed: bool = False,
    checkpointing: bool = False,
) -> dict[str, float]:
    """Peak accelerator bytes of a training step and of sampling, from the training code's path.
    mc: the model's config (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
    num_key_value_heads, vocab_size). Counts what autograd keeps per token and layer (bf16
    activations, the fp32 copies LoRALinear makes of its inputs, one per parent module: SharedCast), the completion logits
    (bf16 out of lm_head, the fp32 upcast, and their gradients), the KV cache, and LoRA weights with
    grads and AdamW state (fp32). Leaves out the allocator's slack and the CUDA context.
    ragged: the micro-batch is padded (prompts or completions of different lengths, as in every
    real step), so attention takes its masked path (counted in "attention_mask"); False: the
    unpadded path, as when every row has the same length. fold: sampling holds a folded copy of
    the wrapped weights (lora.fold_for_sampling). keyed: the draw is decoding.keyed_draw (evaluations
    under eval.draw: sample), which holds the row's fp32 probabilities, their fp64 copy and its cumulative sum.
    checkpointing: train.gradient_checkpointing: every layer's input (bf16) and one recomputed layer's activations
    (method/model.checkpoint_layers clears a layer's fp32 copies after each pass); checked at depth (bench/README)."""
    H, I, L, V = mc.hidden_size, mc.intermediate_size, mc.num_hidden_layers, mc.vocab_size
    kv = H // mc.num_attention_heads * mc.num_key_value_heads
    params = V * H + L * (H * H + H + 2 * (H * kv + kv) + H * H + 3 * H * I + 2 * H) + H  # tied embeddings
    lora_params = L * lora_r * (2 * (H + H) + 2 * (H + kv) + 3 * (H + I)) * n_targets / 7
    T, Lc, b, a = prompt_len + new_tokens, new_tokens, micro_batch, 2  # a: bytes per bf16 activation
    per_token_layer = layer_bytes_per_token(H, I, kv, lora_r, a)
    # A padded micro-batch passes transformers' bool mask (b, 1, T, T) to SDPA, which then cannot do GQA itself:
    # repeat_kv expands K and V to all H heads in every layer, and SDPA keeps those instead of the kv-head ones
    # (and the mask, converted to the activation dtype, in every layer) for backward. Checked against the peak
    # RSS of padded vs unpadded micro-batches (bench/memory_05b.py --cpu-check 8 --micro-batch 2 [--uniform]).
    layers_kept = 1 if checkpointing else L  # layers whose activations autograd holds at once
    attention_mask = (b * T * T + layers_kept * (b * T * T * a + b * T * 2 * (H - kv) * a)) if ragged else 0
    activations = b * T * layers_kept * per_token_layer + attention_mask + (b * T * L * H * a if checkpointing else 0)
    # The bf16 logits TokenLogProbs keeps and their bf16 gradient, plus its fp32 temporaries: about three of one
    # chunk's size (the chunk's upcast, exp(x - lse), the chunk's gradient); checked against peak RSS on the CPU
    # (bench/memory_05b.py --cpu-check). The entropy bonus (a control no registered condition uses) upcasts all
    # the logits at once and is not counted.
    logits = b * (Lc + 1) * V * (a + a) + 3 * 4 * min(LOGPROB_CHUNK, b * Lc * V)
    static = params * weight_bytes + lora_params * 4 * 4  # LoRA: weight, grad, two AdamW moments
    kv_cache = n_samples * T * L * 2 * kv * a
    sample_logits = (
        n_samples
        * V
        * (
            4
            + 4
            + (4 + 8 + 4 + 4 + 1 + 1 if top_p else 0)  # fp32 logits, probs, top-p sort
            + (KEYED_DRAW_BYTES if keyed else 0)
        )
    )
    folded = L * (2 * H * H + 2 * H * kv + 3 * H * I) * n_targets / 7 * weight_bytes if fold else 0
    return {
        "params": params,
        "lora_params": lora_params,
        "static": static,
        "activations": activations,
        "attention_mask": attention_mask,
        "logits": logits,
        "train_step": static + activations + logits,
        "kv_cache": kv_cache,
        "sampling": static + kv_cache + sample_logits + folded,
    }


def layer_bytes_per_token(H: int, I: int, kv: int, lora_r: int, a: int) -> int:
    """What autograd keeps per token in one decoder layer (a: bytes per activation; hidden H, MLP I, kv width)."""
    return (
        H * (a * 2 + 4)  # attention RMSNorm: its input and output (+ fp32 statistics, rounded up)
        + H * 4
        + H * a
        + 2 * kv * a
        + H * a
        + 2 * kv * a  # the LoRA fp32 copy q, k, v share; q, k, v before and after RoPE
        + H * a
        + H * 4
        + H * a  # attention output, o_proj's LoRA fp32 copy, residual
        + H * (a * 2 + 4)  # MLP RMSNorm
        + H * 4
        + 4 * I * a
        + I * 4  # the LoRA copy gate/up share; gate, up, silu(gate), product; down's LoRA copy
        + 7 * lora_r * 4  # LoRA A outputs
    )


# per row and vocabulary entry, live at once in decoding.keyed_draw: the fp32 probabilities, their fp64
# copy, and its cumulative sum
KEYED_DRAW_BYTES = 4 + 8 + 8


def decoder_bytes(
    mc, rows: int, positions: int, top_p: bool = False, act_bytes: int = 2, keyed: bool = False, graphs: bool = False
) -> float:
    """Bytes the static decode keeps on the device between calls (static_decode.Decoder: made once
    per process and batch size, so that its captured graphs replay): the KV cache of `rows` x
    `positions` (rounded up to CAPACITY_STEP), its mask and outputs, and in the graph pool one step's
    largest temporaries: the logits, the fused tail's fp32 chunk (x, exp, q and the score), and with
    top-k/top-p the whole-vocabulary fp32 filter (tempered logits, sorted values, int64 order,
    probabilities, cumulative sum, two masks); keyed (each sample's own stream, eval.draw: sample): the
    draw's whole-row probabilities, their fp64 copy and its cumulative sum (KEYED_DRAW_BYTES). Every decoder also keeps
    each row's uniforms (fp64 per position). graphs (the decode captures CUDA graphs): the step's
    temporaries twice, in the graph pool and in the allocator's general cache, where the eager step
    run before each capture (static_decode.StaticStep) left them; the graph pool is private, so
    neither serves the other. Counted from the code, not measured."""
    L, H, V = mc.num_hidden_layers, mc.hidden_size, mc.vocab_size
    kv = H // mc.num_attention_heads * mc.num_key_value_heads
    cap = -(-positions // CAPACITY_STEP) * CAPACITY_STEP
    cache = (
        rows * cap * (L * 2 * kv * act_bytes + 1 + 8 + 4 + 8)
    )  # keys and values; mask, token ids, log-probs, uniforms
    step = (
        rows * V * act_bytes
        + rows * min(V, TAIL_CHUNK) * 4 * 4
        + (rows * V * (4 + 4 + 8 + 4 + 4 + 1 + 1) if top_p else 0)
        + (rows * V * KEYED_DRAW_BYTES if keyed else 0)
    )
    return cache + step * (2 if graphs else 1)


def decoders_held(cfg: config.Config, mc, prompt_len: int, rollouts: bool, dev: bool) -> float:
    """Bytes a training run's static decoders keep between steps (decoder_bytes): the rollouts'
    (rollouts: train.sampling decodes with graph) and the dev checks' (dev: they run, with graph)."""
    act = 2 if cfg.model.dtype != "float32" else 4
    tc, e = cfg.train, cfg.eval.sampling
    held = (
        decoder_bytes(
            mc,
            tc.problems_per_step * tc.group_size,
            prompt_len + tc.sampling.max_new_tokens,
            act_bytes=act,
            graphs=True,
        )
        if rollouts
        else 0.0
    )
    if dev:
        held += decoder_bytes(
            mc,
            largest_call(cfg, tc.dev_samples, cfg.eval.problems_per_batch),
            prompt_len + e.max_new_tokens,
            top_p=e.top_p < 1.0 or e.top_k > 0,
            act_bytes=act,
            keyed=cfg.eval.draw == "sample",
            graphs=True,
        )
    return held


def sampling_calls(n_problems: int, n: int, per_batch: int, max_rows: int | None) -> list[tuple[range, range]]:
    """How n samples of each of n_problems problems are split into sampler calls: (problems, sample
    indices) per call, in order. A call holds per_batch problems' n samples, fewer problems where
    that passes max_rows, or one problem's samples max_rows at a time where n alone does."""
    cap = max_rows or per_batch * n
    if n > cap:
        return [(range(i, i + 1), range(j, min(j + cap, n))) for i in range(n_problems) for j in range(0, n, cap)]
    per = min(per_batch, cap // n)
    return [(range(b, min(b + per, n_problems)), range(n)) for b in range(0, n_problems, per)]


def largest_call(cfg: config.Config, n: int, per_batch: int, n_problems: int | None = None) -> int:
    """The most rows one evaluation-type sampling call decodes (n samples per problem, per_batch
    problems per call, eval.max_rows under eval.draw: sample)."""
    cap = cfg.eval.max_rows if cfg.eval.draw == "sample" else None
    calls = sampling_calls(n_problems if n_problems is not None else per_batch, n, per_batch, cap)
    return max(len(ps) * len(js) for ps, js in calls)


# Peak RSS growth of one micro-batch over the estimate's activations + logits, measured on the CPU at the
# 0.5B's width, vocabulary and 24 layers (bench/memory_05b.py --cpu-check 24): 1.10 at micro-batch 2, 1.13 at 4
# (2026-12-01). The cause of the gap is not pinned down; the automatic micro-batch counts it.
MEASURED_OVER_ESTIMATE = 1.15


def auto_micro_batch(
    cfg: config.Config, mc, prompt_len: int, free_gib: float | None = None, held_bytes: float = 0.0
) -> int:
    """The micro-batch of micro_batch_choice."""
    return micro_batch_choice(cfg, mc, prompt_len, free_gib, held_bytes)[0]


def micro_batch_choice(
    cfg: config.Config, mc, prompt_len: int, free_gib: float | None = None, held_bytes: float = 0.0
) -> tuple[int, str]:
    """(micro-batch, why, in words): cfg.micro_batch when it is set (memory_gb is then not read), else
    the largest micro-batch whose training peak (the estimate, its per-micro-batch part raised by
    MEASURED_OVER_ESTIMATE) plus `held_bytes` (what else the process keeps between steps: the static
    decode's decoders, decoder_bytes) fits 85% of the budget (at least 1): cfg.memory_gb, or with
    memory_gb auto `free_gib`, what the caller measured the process could still allocate once the model
    and its LoRA were loaded, so those weights are not counted again (before: they were, twice). The
    rest is left for the CUDA context and the allocator's fragmentation, which the estimate does not count."""
    if cfg.micro_batch > 0:
        return (
            cfg.micro_batch,
            f"micro_batch {cfg.micro_batch}, set in the config (it wins: memory_gb {cfg.memory_gb} is not read)",
        )
    auto = cfg.memory_gb == "auto"
    budget = free_gib if auto else cfg.memory_gb
    if budget is None:
        raise ValueError("memory_gb: auto needs the device's free memory (free_gib)")
    wb = 2 if cfg.model.dtype != "float32" else 4
    fits = 1
    for b in range(1, cfg.train.problems_per_step * cfg.train.group_size + 1):
        est = estimate_memory(
            mc,
            cfg.lora.r,
            len(cfg.lora.targets),
            prompt_len,
            cfg.train.sampling.max_new_tokens,
            b,
            cfg.train.problems_per_step * cfg.train.group_size,
            wb,
            checkpointing=cfg.train.gradient_checkpointing,
        )
        resident = (
            est["params"] * wb + est["lora_params"] * 4 if auto else 0.0
        )  # already outside a measured free memory
        if (
            est["static"] - resident + held_bytes + MEASURED_OVER_ESTIMATE * (est["activations"] + est["logits"])
            > 0.85 * budget * 2**30
        ):
            break
        fits = b
    where = f"memory_gb auto: {budget:.1f} GiB free with the model loaded" if auto else f"memory_gb {budget:g} GiB"
    return fits, f"micro_batch {fits}, the largest whose estimated step fits 85% of {where}"
