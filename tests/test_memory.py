"""memory.py: the memory estimate against the parameter count and the automatic micro-batch."""
import pytest

import config
import memory
from model import TokenLogProbs


def test_memory_estimate_and_automatic_micro_batch(smoke_cfg):
    from transformers import Qwen2Config

    mc = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                     num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
    est = [memory.estimate_memory(mc, 32, 7, 80, 384, b, 128) for b in (1, 2, 3)]
    assert round(est[0]["params"] / 1e6) == 494  # Qwen2.5-0.5B's parameter count (tied embeddings)
    assert round(est[0]["lora_params"] / 1e6, 1) == 17.6  # r 32 on the seven projections of 24 layers
    # the micro-batch-dependent parts scale linearly; the static part does not move
    assert est[1]["activations"] == pytest.approx(2 * est[0]["activations"])
    assert est[2]["logits"] - est[0]["logits"] == pytest.approx(2 * (est[1]["logits"] - est[0]["logits"]))  # + one chunk's fp32 temporaries
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
