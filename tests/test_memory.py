"""orchestration/memory.py: the memory estimate against the parameter count and the automatic micro-batch."""

import pytest
import torch

from method import sampler
from method.model import TokenLogProbs
from orchestration import config, memory


def test_memory_estimate_and_automatic_micro_batch(smoke_cfg):
    from transformers import Qwen2Config

    mc = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    est = [memory.estimate_memory(mc, 32, 7, 80, 384, b, 128) for b in (1, 2, 3)]
    assert round(est[0]["params"] / 1e6) == 494  # Qwen2.5-0.5B's parameter count (tied embeddings)
    assert round(est[0]["lora_params"] / 1e6, 1) == 17.6  # r 32 on the seven projections of 24 layers
    # the micro-batch-dependent parts scale linearly; the static part does not move
    assert est[1]["activations"] == pytest.approx(2 * est[0]["activations"])
    assert est[2]["logits"] - est[0]["logits"] == pytest.approx(
        2 * (est[1]["logits"] - est[0]["logits"])
    )  # + one chunk's fp32 temporaries
    assert est[0]["logits"] - (est[1]["logits"] - est[0]["logits"]) == 3 * 4 * TokenLogProbs.CHUNK
    assert est[0]["static"] == est[2]["static"]
    cfg = config.load(None)  # the study's defaults: micro_batch 0 -> chosen from memory_gb 8
    b = memory.auto_micro_batch(cfg, mc, 80)

    def fits(m):
        e = memory.estimate_memory(mc, 32, 7, 80, 384, m, 128)
        return e["static"] + memory.MEASURED_OVER_ESTIMATE * (e["activations"] + e["logits"]) <= 0.85 * 8 * 2**30

    assert fits(b) and not fits(b + 1)
    assert b == 3  # the README's figure for an 8 GB GPU at 16 x 8 x 384
    cfg.micro_batch = 5
    assert memory.auto_micro_batch(cfg, mc, 80) == 5  # an explicit micro-batch is taken as is
    cfg.micro_batch, cfg.memory_gb = 0, 0.5
    assert memory.auto_micro_batch(cfg, mc, 80) == 1  # never below one


def test_memory_gb_auto_does_not_count_the_loaded_weights_twice():
    """memory_gb auto measures what is still free once the model and its LoRA are loaded: those weights are
    outside that number already. On an 8 GB laptop GPU (about 7.6 GiB usable, less ~0.4 GiB of CUDA context
    and the 0.92 GiB of bf16 weights: ~6.3 GiB free) the micro-batch is the 3 that memory_gb 8 gives; counting
    the weights again gave 2."""
    from transformers import Qwen2Config

    mc = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    cfg = config.load(None, ["memory_gb=auto"])
    e = [memory.estimate_memory(mc, 32, 7, 80, 384, b, 128) for b in range(1, 6)]
    resident = e[0]["params"] * 2 + e[0]["lora_params"] * 4  # bf16 weights, fp32 LoRA weights

    def fits(b, free):  # the rule, with the resident weights taken out of the static part
        x = e[b - 1]
        return (
            x["static"] - resident + memory.MEASURED_OVER_ESTIMATE * (x["activations"] + x["logits"])
            <= 0.85 * free * 2**30
        )

    free = 6.3
    b, why = memory.micro_batch_choice(cfg, mc, 80, free)
    assert fits(b, free) and not fits(b + 1, free) and b == 3
    old_count = e[2]["static"] + memory.MEASURED_OVER_ESTIMATE * (e[2]["activations"] + e[2]["logits"])
    assert old_count > 0.85 * free * 2**30  # counting the weights again, 3 did not fit: 2
    assert "memory_gb auto" in why and "free with the model loaded" in why


def test_a_set_micro_batch_says_it_wins_over_memory_gb():
    cfg = config.load(None, ["micro_batch=5", "memory_gb=2"])
    assert memory.micro_batch_choice(cfg, None, 80) == (
        5,
        "micro_batch 5, set in the config (it wins: memory_gb 2.0 is not read)",
    )


def test_what_the_static_decoders_hold_is_taken_from_the_budget(smoke_cfg):
    from transformers import Qwen2Config

    mc = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    cfg = config.load(None)
    held = memory.decoders_held(cfg, mc, 80, rollouts=True, dev=True)
    kv = 24 * 2 * 2 * 64 * 2  # bytes per position and row: layers x (K, V) x kv heads x head dim x bf16
    assert held > 128 * 512 * kv  # the rollouts' KV cache alone (80 + 384 positions, rounded up to 512)
    assert memory.decoders_held(cfg, mc, 80, rollouts=False, dev=False) == 0.0  # the eager decode keeps nothing
    b = memory.auto_micro_batch(cfg, mc, 80)
    assert memory.auto_micro_batch(cfg, mc, 80, held_bytes=0.0) == b  # nothing held: as before
    e = memory.estimate_memory(mc, 32, 7, 80, 384, b, 128)
    room = 0.85 * 8 * 2**30 - e["static"] - memory.MEASURED_OVER_ESTIMATE * (e["activations"] + e["logits"])
    assert (
        memory.auto_micro_batch(cfg, mc, 80, held_bytes=room + 1) == b - 1
    )  # what the decoders hold is not there for the step


def test_decoder_bytes_counts_the_decoders_buffers(fitted_dir, smoke_cfg):
    """The KV cache, mask and outputs of a real Decoder, byte for byte (the graph pool's temporaries
    are the estimate's other part, which only a GPU can measure)."""
    from helpers import cfg_for, prompts_for
    from method import static_decode
    from method.model import load_model, pad_id, stop_ids

    model, tok = load_model(cfg_for(smoke_cfg), str(fitted_dir), torch.device("cpu"))
    _, prompts = prompts_for(tok, n=2)
    s = config.SamplingCfg(temperature=1.0, max_new_tokens=30, decode="graph")
    static_decode.reset_decoders()
    sampler.sample(model, prompts, 3, s, 0, stop_ids(model, tok), pad_id(tok))
    dec = static_decode._DECODERS["by_rows"][6]
    held = sum(t.numel() * t.element_size() for layer in dec.st["cache"].layers for t in (layer.kfull, layer.vfull))
    held += sum(dec.st[k].numel() * dec.st[k].element_size() for k in ("mask", "out", "logp", "u"))
    positions = max(len(p) for p in prompts) + 30
    est = memory.decoder_bytes(model.config, 6, positions, act_bytes=4)
    step = 6 * model.config.vocab_size * 4 + 6 * min(model.config.vocab_size, memory.TAIL_CHUNK) * 16
    assert est - step == held
    static_decode.reset_decoders()


def test_the_readme_and_the_config_promise_the_micro_batch_the_code_picks():
    """README's GPU section and configs/qwen05b.yaml's comment say the micro-batch memory_gb 8 gives on a GPU
    (the decoders held, counted with the graph pool's second copy of a step's temporaries), the
    step's estimate, and the 256-row call's estimate with graphs: each read back and compared."""
    import re
    from pathlib import Path
    from types import SimpleNamespace

    root = Path(__file__).resolve().parents[1]
    mc = SimpleNamespace(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
    )
    cfg = config.load(str(root / "configs" / "qwen05b.yaml"))
    held = memory.decoders_held(cfg, mc, 80, rollouts=True, dev=True)
    b, _ = memory.micro_batch_choice(cfg, mc, 80, None, held)
    e = memory.estimate_memory(mc, cfg.lora.r, len(cfg.lora.targets), 80, 384, b, 128)
    step = (e["static"] + held + memory.MEASURED_OVER_ESTIMATE * (e["activations"] + e["logits"])) / 2**30
    call = memory.decoder_bytes(mc, 256, 80 + 384, top_p=True, keyed=True, graphs=True) / 2**30
    readme = (root / "README.md").read_text()
    m = re.search(
        r"At `memory_gb: 8` the automatic\s+micro-batch is (\d+) .*?estimated peak is\s+([\d.]+) GiB, of which ([\d.]+) GiB"
        r".*?\(256 rows at `eval.max_rows: 256`\) ([\d.]+) GiB with CUDA\s+graphs",
        readme,
        re.S,
    )
    assert m and int(m[1]) == b == 2
    assert (float(m[2]), float(m[3]), float(m[4])) == (round(step, 1), round(held / 2**30, 1), round(call, 1))
    assert f"({b} here on a GPU: memory.auto_micro_batch)" in (root / "configs" / "qwen05b.yaml").read_text()
    assert memory.decoder_bytes(mc, 256, 464, True, 2, True, graphs=True) > memory.decoder_bytes(
        mc, 256, 464, True, 2, True
    )
