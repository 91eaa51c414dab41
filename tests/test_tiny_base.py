"""The CPU world's base: traces, tokenizer round trip, and that pre-training learns."""

import json
import random

import pytest
import torch

import countdown
from bases import tiny_base
from method import sampler
from method.model import load_model, load_tokenizer, pad_id, render_prompts, stop_ids
from orchestration import config


def test_tokenizer_round_trip_and_chat_template(tmp_path):
    tok = tiny_base.build_tokenizer()
    tiny_base.save_tokenizer(tok, tmp_path)
    back = load_tokenizer(str(tmp_path))
    text = "<think>57 * 5 = 50 * 5 + 7 * 5 = 250 + 35 = 285. 285 - 42 = 243</think>The answer is 243."
    ids = back(text, add_special_tokens=False)["input_ids"]
    assert back.decode(ids) == text  # spaces and newlines survive (AutoTokenizer's Qwen2 class dropped them)
    assert len(ids) == len(text) - sum(
        len(t) - 1 for t in tiny_base.TAGS if t in text
    )  # one token per character, tags whole
    p = countdown.Problem("x/0", "arith-2x1", "57 * 5 - 42", 243, (57, 5, 42))
    prompt = back.apply_chat_template(countdown.prompt_messages(p, "bare"), tokenize=False, add_generation_prompt=True)
    assert prompt == f"{tiny_base.BOS}57 * 5 - 42{tiny_base.EOS}{tiny_base.BOS}"
    assert back.padding_side == "left" and back.pad_token_id != back.eos_token_id


@pytest.mark.parametrize("decomposed", [1.0, 0.0])
def test_traces_compute_right_without_slips_and_use_tags(decomposed):
    """Traces compute right without slips and use tags as configured."""
    b = config.TinyBaseCfg(p_decomposed=decomposed, p_slip=0.0, p_oneshot_wrong=0.0, p_tags=0.5)
    train, _ = countdown.make_splits("arith-2x1", 200, 10, 0)
    rng = random.Random(0)
    tagged = 0
    for p in train:
        t = tiny_base.trace(p, rng, b)
        assert countdown.score_loose(t, p.answer)  # no slips: the working ends in the right value
        assert t.startswith(f"<think>{p.numbers[0]} * {p.numbers[1]} = ")
        assert (" + " in t.split("</think>")[0]) == (decomposed == 1.0 and p.numbers[0] % 10 != 0)
        tagged += countdown.format_ok(t)
        assert countdown.score_strict(t, p.answer) == countdown.format_ok(t)
    assert 0.35 < tagged / len(train) < 0.65


def test_slips_and_wrong_one_shot_products_make_wrong_answers():
    b = config.TinyBaseCfg(p_decomposed=0.0, p_oneshot_wrong=1.0, p_tags=1.0)
    train, _ = countdown.make_splits("arith-2x1", 100, 10, 0)
    rng = random.Random(1)
    assert not any(countdown.score_loose(tiny_base.trace(p, rng, b), p.answer) for p in train)


def test_pretraining_learns_to_copy_operands(fitted_dir, smoke_cfg, tmp_path):
    """The smoke base (400 steps, ~20 s): its loss fell, and greedy decoding copies the operands
    into its working where the same architecture untrained never does."""
    info = json.loads((fitted_dir / "build.json").read_text())
    assert info["loss_last_50"] < 0.25 * info["loss_first"]
    cfg = config._build(
        config.Config, {**config.to_dict(smoke_cfg), "model": {"path": str(fitted_dir), "dtype": "float32"}}
    )
    _, test = countdown.make_splits(
        smoke_cfg.task.name, smoke_cfg.task.n_train, smoke_cfg.task.n_test, smoke_cfg.task.seed
    )
    untrained = tmp_path / "untrained"  # the shared fitted base's folder is read-only to tests
    tok = tiny_base.build_tokenizer()
    tiny_base.random_model(tok, smoke_cfg.model.build, seed=1).save_pretrained(untrained)
    tiny_base.save_tokenizer(tok, untrained)
    copied = {}
    for name, path in (("fitted", fitted_dir), ("untrained", untrained)):
        model, tk = load_model(cfg, str(path), torch.device("cpu"))
        prompts = render_prompts(tk, test, "bare")
        out = sampler.sample(
            model, prompts, 1, config.SamplingCfg(temperature=0, max_new_tokens=20), 0, stop_ids(model, tk), pad_id(tk)
        )
        texts = tk.batch_decode(out.tokens, skip_special_tokens=True)
        copied[name] = sum(
            t.startswith(f"<think>{p.numbers[0]} * {p.numbers[1]} = ") for p, t in zip(test, texts)
        ) / len(test)
    assert copied["fitted"] >= 0.75 and copied["untrained"] == 0.0


def test_gold_solutions_are_right_and_match_the_tiny_traces():
    for task in ("arith-3x2", "arith-2x1", "arith-3x3", "arith-1x1"):
        for p in countdown.generate(task, 20, 3):
            for style in ("instruct", "bare"):
                g = countdown.gold_solution(p, style)
                assert countdown.score(p, g) == {"strict": True, "loose": True, "format": True}, g
    # the CPU world's gold solution is the tiny base's own correct, tagged, decomposed trace
    b = config.TinyBaseCfg(p_decomposed=1.0, p_slip=0.0, p_tags=1.0)
    for p in countdown.generate("arith-2x1", 20, 1):
        assert countdown.gold_solution(p, "bare") == tiny_base.trace(p, random.Random(0), b)
    p = countdown.Problem("x", "arith-3x2", "413 * 41 - 882", 16051, (413, 41, 882), "")
    assert countdown.gold_solution(p) == (
        "<think>413 * 41 = 413 * 40 + 413 * 1 = 16520 + 413 = 16933. 16933 - 882 = 16051"
        "</think>\n<answer>16051</answer>"
    )


@pytest.mark.slow  # a base build stopped and resumed: left out of the fast loop
def test_a_stopped_base_build_resumes_to_the_same_weights_bit(smoke_cfg, tmp_path, monkeypatch):
    """A stopped base build resumes to the same weights bit for bit."""
    cfg = config._build(
        config.Config,
        {
            **config.to_dict(smoke_cfg),
            "model": {
                **config.to_dict(smoke_cfg)["model"],
                "build": {**config.to_dict(smoke_cfg.model.build), "steps": 30, "n_traces": 400},
            },
        },
    )
    monkeypatch.setattr(tiny_base, "SAVE_EVERY", 10)
    straight = tmp_path / "straight" / "base_model"
    tiny_base.train_base(cfg, straight, progress=False, stage_hash="h")
    real, calls = torch.optim.AdamW.step, []

    def stop_at_step_25(self, *a, **k):
        calls.append(1)
        if len(calls) == 25:
            raise KeyboardInterrupt  # Ctrl-C during step 25: the resume point holds step 20
        return real(self, *a, **k)

    out = tmp_path / "stopped" / "base_model"
    with monkeypatch.context() as m:
        m.setattr(torch.optim.AdamW, "step", stop_at_step_25)
        with pytest.raises(KeyboardInterrupt):
            tiny_base.train_base(cfg, out, progress=False, stage_hash="h")
    assert not out.exists() and (out.parent / ".base_model.partial" / "state.pt").exists()
    info = tiny_base.train_base(cfg, out, progress=False, stage_hash="h")
    assert info["resumed_from"] == 20
    assert (out / "model.safetensors").read_bytes() == (straight / "model.safetensors").read_bytes()
    assert not (out.parent / ".base_model.partial").exists()
    # a resume point of another build is not used
    with monkeypatch.context() as m:
        calls.clear()
        m.setattr(torch.optim.AdamW, "step", stop_at_step_25)
        with pytest.raises(KeyboardInterrupt):
            tiny_base.train_base(cfg, tmp_path / "other" / "base_model", progress=False, stage_hash="h")
    assert (
        tiny_base.train_base(cfg, tmp_path / "other" / "base_model", progress=False, stage_hash="another")[
            "resumed_from"
        ]
        == 0
    )


def _trace_before_knobs(p, rng, b):
    """tiny_base.trace as it was before p_borrow_slip and the drill traces: the reference the
    knobs at their defaults must reproduce draw for draw."""
    a, m, c = p.numbers
    if rng.random() < b.p_decomposed:
        parts = tiny_base._decompose(a)
        prods = [x * m if rng.random() >= b.p_slip else tiny_base._wrong(rng, x * m) for x in parts]
        product = sum(prods)
        if len(parts) > 1:
            work = (
                f"{a} * {m} = "
                + " + ".join(f"{x} * {m}" for x in parts)
                + " = "
                + " + ".join(map(str, prods))
                + f" = {product}"
            )
        else:
            work = f"{a} * {m} = {product}"
    else:
        product = a * m if rng.random() >= b.p_oneshot_wrong else tiny_base._wrong(rng, a * m)
        work = f"{a} * {m} = {product}"
    value = product - c
    body = f"<think>{work}. {product} - {c} = {value}</think>"
    ending = (
        f"<answer>{value}</answer>"
        if rng.random() < b.p_tags
        else rng.choice([f"The answer is {value}.", f"So it is {value}", f"= {value}"])
    )
    return body + ending


def test_the_new_corpus_knobs_at_their_defaults_leave_the_corpus():
    """The new corpus knobs at their defaults leave the corpus as before."""
    b = config.load("configs/tiny.yaml").model.build
    assert b.p_borrow_slip == [] and b.n_drill == 0
    train, _ = countdown.make_splits("arith-2x1", 600, 10, 0)
    new, old = random.Random(7), random.Random(7)
    assert [tiny_base.trace(p, new, b) for p in train] == [_trace_before_knobs(p, old, b) for p in train]


def test_a_forgotten_borrow_is_off_by_its_place_value_and_only():
    """A forgotten borrow is off by its place value and only where a borrow is needed."""
    b = config.TinyBaseCfg(p_decomposed=1.0, p_slip=0.0, p_tags=1.0, p_borrow_slip=[1.0, 0.0])
    train, _ = countdown.make_splits("arith-2x1", 400, 10, 0)
    rng = random.Random(3)
    seen = set()
    for p in train:
        a, m, c = p.numbers
        cols = countdown.borrow_columns(a * m, c)
        value = countdown.final_answer(tiny_base.trace(p, rng, b))
        if len(cols) == 1:
            assert abs(value - p.answer) == 10 ** (cols[0] + 1) and abs(value) > abs(
                p.answer
            )  # off by the place the borrow comes from
        else:
            assert value == p.answer  # no borrow, or two borrows at slip chance 0
        seen.add(len(cols))
    assert seen >= {0, 1, 2}


def test_drill_traces_are_decomposed_untagged_and_under_their():
    """Drill traces are decomposed untagged and under their own prompt."""
    b = config.TinyBaseCfg(n_traces=50, n_drill=200, n_pretrain=300, p_decomposed=0.0, p_tags=1.0)
    tok = tiny_base.build_tokenizer()
    seqs, masks = tiny_base.trace_batches(tok, b, "arith-2x1", 20, 10, 0)
    assert len(seqs) == 250
    drills = [tok.decode(s) for s in seqs[50:]]
    tasks = [tok.decode(s) for s in seqs[:50]]
    assert all(f"{tiny_base.BOS}{tiny_base.DRILL_PREFIX}" in t for t in drills) and not any(
        tiny_base.DRILL_PREFIX in t for t in tasks
    )
    assert not any("<answer>" in t for t in drills) and all("<answer>" in t for t in tasks)
    multi = [t for t in drills if " + " in t]  # decomposed wherever a has two non-zero digits
    problems = tiny_base.pretrain_problems("arith-2x1", 20, 10, 0, 300)
    assert len(multi) == sum(p.numbers[0] % 10 != 0 for p in [problems[i % 300] for i in range(50, 250)])


def test_product_errors_without_tens_never_cancel_a_forgotten():
    """Product errors without tens never cancel a forgotten borrow.

    With the default offsets a one-shot product 10 too small and a forgotten borrow (+10) give the
    right answer by accident; without multiples of 10 among the offsets that cannot happen."""
    train, _ = countdown.make_splits("arith-2x1", 3000, 10, 0)
    double = [p for p in train if len(countdown.borrow_columns(p.numbers[0] * p.numbers[1], p.numbers[2])) == 2]
    right = {}
    for offsets in ([1, 2, 5, 10, 20, 100], [1, 2, 5, 20, 50]):
        b = config.TinyBaseCfg(p_decomposed=0.0, p_oneshot_wrong=1.0, p_borrow_slip=[0.0, 1.0], wrong_offsets=offsets)
        rng = random.Random(2)
        right[tuple(offsets)] = sum(countdown.score_loose(tiny_base.trace(p, rng, b), p.answer) for p in double)
    assert right[(1, 2, 5, 10, 20, 100)] > 0 and right[(1, 2, 5, 20, 50)] == 0
