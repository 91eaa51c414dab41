"""Each evaluation sample from its own stream (PLAN_CHANGES.md change 52): the inverse-CDF draw against the
closed form and scipy's chi-square, streams that read nothing of their batch, one evaluation at
several batchings giving the same samples and hash, the per-batch draw of the earlier runs kept
exactly, and the registered Qwen design's largest sampling call within an 8 GB GPU by the estimate."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from scipy import stats

import countdown
from helpers import CPU, cfg_for
from method import decoding, evaluate, sampler, static_decode
from method.model import load_model, pad_id, render_prompts, stop_ids
from orchestration import config, memory, provenance, study

ROOT = Path(__file__).resolve().parents[1]


def test_keyed_draw_takes_each_token_with_its_probability():
    probs = torch.tensor([0.1, 0.0, 0.45, 0.05, 0.0, 0.4, 0.0])  # zeros inside and at the end
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    tok = decoding.keyed_draw(probs.repeat(len(u), 1), u)
    counts = torch.bincount(tok, minlength=len(probs))
    assert counts[probs == 0].sum() == 0  # a token of probability 0 is never drawn
    kept = probs > 0
    assert stats.chisquare(counts[kept].numpy(), probs[kept].double().numpy() * len(u)).pvalue > 1e-3


def test_keyed_draw_at_the_ends_of_the_unit_interval():
    probs = torch.tensor([[0.0, 0.3, 0.7, 0.0, 0.0]] * 3)
    u = torch.tensor(
        [0.0, 0.3 - 1e-9, 1.0 - 2**-53], dtype=torch.float64
    )  # 1 - 2^-53: u * total can round to the total
    assert decoding.keyed_draw(probs, u).tolist() == [1, 1, 2]  # never a zero-probability token past the last one
    unnormalised = probs * 5  # the draw normalises by the row's total
    assert decoding.keyed_draw(unnormalised, u).tolist() == [1, 1, 2]


def test_a_stream_is_its_seeds_generator_whatever_else_is_drawn():
    seeds = [study.seed_for(0, "eval", "p1", j) for j in range(3)]
    both = decoding.stream_uniforms(seeds, 7, CPU)
    alone = decoding.stream_uniforms(seeds[1:2], 7, CPU)
    assert torch.equal(both[1], alone[0])
    assert torch.equal(both[2], torch.rand(7, generator=torch.Generator().manual_seed(seeds[2]), dtype=torch.float64))


def test_sampling_calls_cover_every_sample_once_within_the_cap():
    for n_problems, n, per, cap in [(5, 4, 2, None), (3, 256, 4, 100), (5, 32, 4, 64), (7, 8, 3, 8), (2, 5, 1, 1)]:
        calls = memory.sampling_calls(n_problems, n, per, cap)
        pairs = [(i, j) for ps, js in calls for i in ps for j in js]
        assert sorted(pairs) == [(i, j) for i in range(n_problems) for j in range(n)]  # each sample once
        assert max(len(ps) * len(js) for ps, js in calls) <= (cap or per * n)
        assert all(len(ps) <= per for ps, _ in calls)


@pytest.fixture(scope="module")
def fitted(fitted_dir, smoke_cfg):
    model, tok = load_model(cfg_for(smoke_cfg), str(fitted_dir), CPU)
    problems = countdown.make_splits("arith-1x1", 10, 5, 0)[1]
    return model, tok, problems, render_prompts(tok, problems, "bare")


def test_a_keyed_sample_does_not_depend_on_what_shares_its_call(fitted):
    model, tok, problems, prompts = fitted
    s = config.SamplingCfg(temperature=0.6, top_p=0.95, max_new_tokens=30)
    n, stops, pad = 4, stop_ids(model, tok), pad_id(tok)
    seeds = [study.seed_for(0, "t", p.id, j) for p in problems for j in range(n)]
    together = sampler.sample_eager(model, prompts, n, s, seeds, stops, pad)
    apart = [
        sampler.sample_eager(model, [prompts[i]], 1, s, [seeds[i * n + j]], stops, pad).tokens[0]
        for i in range(len(prompts))
        for j in range(n)
    ]
    assert apart == together.tokens
    assert len({tuple(t) for t in together.tokens}) > len(problems)  # the streams differ within a problem
    # the static decode makes the same keyed draws (its logits agree with the eager ones here)
    static = static_decode.sample_static(model, prompts, n, s, seeds, stops, pad)
    assert static.tokens == together.tokens
    with pytest.raises(ValueError, match="one per sample"):
        sampler.sample(model, prompts, n, s, seeds[:-1], stops, pad)


def _old_sample_problems(model, tok, cfg, problems, n, s, tag, per_batch):
    """The evaluation's sampling loop before change 52, as it was written: one generator per call of
    per_batch problems, seeded by (task.seed, tag, the call's first problem id)."""
    stops, pad = stop_ids(model, tok), pad_id(tok)
    prompts = render_prompts(tok, problems, cfg.task.prompt_style, cfg.task.system_prompt)
    texts, entropies = [], []
    for b in range(0, len(problems), per_batch):
        samples = sampler.sample(
            model,
            prompts[b : b + per_batch],
            n,
            s,
            study.seed_for(cfg.task.seed, tag, problems[b].id),
            stops,
            pad,
            entropy=True,
        )
        decoded = tok.batch_decode(samples.tokens, skip_special_tokens=True)
        texts += [decoded[i : i + n] for i in range(0, len(decoded), n)]
        for i in range(0, len(decoded), n):
            lens = [len(t) for t in samples.tokens[i : i + n]]
            entropies.append(sum(e * k for e, k in zip(samples.entropy[i : i + n], lens)) / max(sum(lens), 1))
    return texts, entropies


def test_draw_batch_samples_exactly_as_the_runs_before_change_52(fitted, smoke_cfg):
    model, tok, problems, _ = fitted
    cfg = cfg_for(smoke_cfg, **{"eval.draw": "batch"})
    s = cfg.eval.sampling
    for per in (2, 5):
        assert evaluate.sample_problems(
            model, tok, cfg, problems, 3, s, "t", per, progress=False
        ) == _old_sample_problems(model, tok, cfg, problems, 3, s, "t", per)
    assert (
        evaluate.sample_problems(model, tok, cfg, problems, 3, s, "t", 2, progress=False)[0]
        != evaluate.sample_problems(model, tok, cfg, problems, 3, s, "t", 5, progress=False)[0]
    )  # the batching decides


def test_one_evaluation_at_four_batchings_gives_the_same_samples(fitted_dir, smoke_cfg, tmp_path):
    """One evaluation at four batchings gives the same samples and hash.

    eval.draw: sample: problems_per_batch 16, 5 and 1, and max_rows 3 (a problem's 16 base samples
    in six calls), write the same responses and counts and the same stage hash; the token entropies
    agree to float32 rounding (the padded and unpadded attention paths differ in the last bits)."""
    docs = []
    for per, cap in [(16, None), (5, None), (1, None), (16, 3)]:
        cfg = cfg_for(smoke_cfg, **{"eval.draw": "sample", "eval.problems_per_batch": per, "eval.max_rows": cap})
        out = tmp_path / f"eval_{per}_{cap}.json"
        evaluate.evaluate(cfg, str(fitted_dir), None, out, progress=False)
        docs.append(json.loads(out.read_text()))
    first = docs[0]
    assert first["sampling"]["draw"] == "sample" and "problems_per_batch" not in first["sampling"]
    for d in docs[1:]:
        assert d["provenance"]["stage_hash"] == first["provenance"]["stage_hash"]
        for a, b in zip(first["problems"], d["problems"]):
            assert a["responses"] == b["responses"]
            assert {k: v for k, v in a.items() if k != "token_entropy"} == {
                k: v for k, v in b.items() if k != "token_entropy"
            }
            assert a["token_entropy"] == pytest.approx(b["token_entropy"], abs=1e-6)
        assert d["pass_at_k"] == first["pass_at_k"]
    assert len({r for p in first["problems"] for r in p["responses"]}) > 1  # really sampled


def test_the_batching_enters_the_hash_under_draw_batch_only(smoke_cfg):
    h = {}
    for draw in ("batch", "sample"):
        for per in (4, 2):
            cfg = cfg_for(smoke_cfg, **{"eval.draw": draw, "eval.problems_per_batch": per})
            h[draw, per] = {st: provenance.stage_hash(cfg, st) for st in ("eval", "probe", "select", "train", "tokens")}
    assert all(h["batch", 4][st] != h["batch", 2][st] for st in ("eval", "probe", "select", "tokens"))
    assert all(h["sample", 4][st] == h["sample", 2][st] for st in ("eval", "probe", "select"))
    assert h["sample", 4]["tokens"] != h["sample", 2]["tokens"]  # the token stage batches its greedy decode its own way
    assert all(
        h["sample", 4][st] != h["batch", 4][st] for st in ("eval", "probe", "select", "train")
    )  # the dev checks too
    # a config recorded before the key existed hashes as draw: batch
    d = config.to_dict(cfg_for(smoke_cfg, **{"eval.draw": "batch"}))
    del d["eval"]["draw"], d["eval"]["max_rows"]
    now = config.to_dict(cfg_for(smoke_cfg, **{"eval.draw": "batch"}))
    assert provenance.hashed_settings(d, "eval") == provenance.hashed_settings(now, "eval")


@pytest.mark.parametrize(
    "sets, key",
    [
        (["eval.draw=keyed"], "eval.draw"),
        (["eval.max_rows=0"], "eval.max_rows"),
        (["eval.draw=batch", "eval.max_rows=64"], "eval.max_rows"),
    ],
)
def test_bad_draw_settings_end_in_one_line_naming_the_key(sets, key):
    with pytest.raises(config.ConfigError, match=key.replace(".", r"\.")):
        config.load(str(ROOT / "configs" / "smoke.yaml"), sets)


def test_out_of_memory_advice_names_max_rows_and_says_nothing(smoke_cfg):
    """Out of memory advice names max rows and says nothing changes."""
    cfg = cfg_for(smoke_cfg, **{"eval.draw": "sample", "eval.n_base": None})
    line = study.memory_advice(cfg, "eval")
    rows = cfg.eval.problems_per_batch * cfg.eval.n
    assert f"--set eval.max_rows={rows // 2}" in line and "changes no sample" in line and "refused" not in line
    old = study.memory_advice(cfg_for(smoke_cfg, **{"eval.draw": "batch"}), "eval")
    assert "eval.problems_per_batch" in old and "refused" in old


QWEN = SimpleNamespace(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
)  # Qwen2.5-0.5B-Instruct's config.json


def test_the_registered_qwen_designs_sampling_calls_fit_an_8_gb():
    """The registered qwen designs sampling calls fit an 8 gb gpu by the estimate.

    Every sampling stage of configs/qwen05b.yaml (the base's test evaluation at n_base, the eval
    sets, the dev checks, the probe, the selection): its largest call's static decoder (with CUDA graphs:
    a step's temporaries twice) plus the bf16 weights within 85% of 8 GiB, as the training step's micro-batch is sized. Before change 52 the
    base's one 1,024-row call alone was 10.6 GiB."""
    cfg = config.load(str(ROOT / "configs" / "qwen05b.yaml"))
    e, prompt = cfg.eval, 80
    weights = memory.estimate_memory(QWEN, cfg.lora.r, len(cfg.lora.targets), prompt, 1, 1, 1)["params"] * 2
    calls = {
        "eval base": (e.n_base, e.problems_per_batch, e.sampling),
        "dev": (cfg.train.dev_samples, e.problems_per_batch, e.sampling),
        "select": (cfg.select.samples, e.problems_per_batch, cfg.train.sampling),
        "probe": (max(cfg.probe.samples, cfg.probe.arith_samples), e.problems_per_batch, e.sampling),
        **{f"eval {k}": (s.n, s.problems_per_batch, s.sampling or e.sampling) for k, s in cfg.eval_sets.items()},
    }
    for name, (n, per, s) in calls.items():
        rows = memory.largest_call(cfg, n, per)
        est = memory.decoder_bytes(
            QWEN, rows, prompt + s.max_new_tokens, top_p=s.top_p < 1 or s.top_k > 0, keyed=True, graphs=True
        )
        assert weights + est <= 0.85 * 8 * 2**30, (name, rows, est / 2**30)
    old = memory.decoder_bytes(QWEN, e.problems_per_batch * e.n_base, prompt + e.sampling.max_new_tokens, top_p=True)
    assert weights + old > 8 * 2**30  # the uncapped call could not run


def test_lowered_batching_is_the_same_config_under_keyed_draws():
    """Files made before and after lowering eval.max_rows or a problems_per_batch (the out-of-memory
    advice) compare as made under the same config and evaluation settings under draw: sample (the
    analysis warns of neither), and as other settings under draw: batch, where the samples differ."""
    from analysis import inputs

    def prov(path, sets):
        return {"provenance": {"config": config.to_dict(config.load(str(ROOT / "configs" / path), sets))}}

    for path, draw_sets, same in [("qwen05b.yaml", [], True), ("tiny_v5.yaml", [], False)]:
        a = prov(path, draw_sets)
        b = prov(
            path,
            [*draw_sets, "eval.problems_per_batch=2", "eval_sets.wide.problems_per_batch=2"]
            + (["eval.max_rows=128"] if same else []),
        )
        assert provenance.same_config(a["provenance"], b["provenance"]) is same
        assert (inputs.compared_settings(a) == inputs.compared_settings(b)) is same
