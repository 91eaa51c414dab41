"""Support from the base's own probabilities (method/base_support.py, PLAN_CHANGES.md change 57): the rule is the
sampler's own filter, a token outside a hand-built nucleus reads outside, the base's own draws at that
sampler never do, and an untruncated sampler puts nothing outside."""

import pytest
import torch

from helpers import CPU, cfg_for, model_with_lora, prompts_for
from method import base_support, decoding, sampler
from method.model import load_model, lora_disabled, pad_id, stop_ids
from orchestration import config


def _logits(seed: int, b: int, V: int, ties: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, V, generator=g) * 2
    if ties:
        x = (x * 2).round() / 2  # many equal logits
    return x


@pytest.mark.parametrize("top_k,top_p", [(0, 0.95), (0, 0.5), (5, 1.0), (7, 0.8), (0, 1.0)])
@pytest.mark.parametrize("ties", [False, True])
def test_the_rule_is_the_samplers_filter(top_k, top_p, ties):
    b, V, T = 64, 40, 0.6
    logits = _logits(top_k * 10 + int(top_p * 100) + ties, b, V, ties)  # (b, V)
    for target in range(V):
        t = torch.full((b, 1), target)
        dropped, excess = base_support.token_excess(logits[:, None, :], t, T, top_k, top_p)
        want = decoding.filter_logits(logits / T, top_k, top_p)[:, target].isinf()  # (b,)
        assert torch.equal(dropped[:, 0], want)
        if top_k == 0 and top_p == 1.0:
            assert (excess == float("-inf")).all()  # nothing truncates: nothing outside
        if not ties:  # without ties the excess says the same thing: >= 0 exactly when dropped
            assert torch.equal(excess[:, 0] >= 0, want)
        else:  # a tie ranked before the target by the sort can only add mass: the excess never reads outside alone
            assert not ((excess[:, 0] >= 0) & ~want).any()


def test_the_token_that_crosses_top_p_is_kept():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()[None, None, :]  # (1, 1, 4) at T 1
    for target, outside in [(0, False), (1, False), (2, True), (3, True)]:
        dropped, excess = base_support.token_excess(logits, torch.tensor([[target]]), 1.0, 0, 0.8)
        assert bool(dropped) is outside  # 0.5 + 0.3 reaches 0.8: the third token is the first dropped
    _, excess = base_support.token_excess(logits, torch.tensor([[1]]), 1.0, 0, 0.8)
    assert excess.item() == pytest.approx(0.5 - 0.8)
    _, excess = base_support.token_excess(logits, torch.tensor([[2]]), 1.0, 0, 0.8)
    assert excess.item() == pytest.approx(
        0.8 - 0.8, abs=1e-7
    )  # exactly at the edge: outside by the rule, not beyond rounding


@pytest.fixture(scope="module")
def base(fitted_dir, smoke_cfg):
    model, tok = load_model(cfg_for(smoke_cfg), str(fitted_dir), CPU)
    return model, tok


def _draw(model, tok, prompts, n, T, top_p, seed=0):
    s = config.SamplingCfg(temperature=T, top_p=top_p, top_k=0, max_new_tokens=24)
    seeds = [seed * 1000 + i for i in range(len(prompts) * n)]
    out = sampler.sample(model, prompts, n, s, seeds, stop_ids(model, tok), pad_id(tok))
    return [p for p in prompts for _ in range(n)], out.tokens


def test_the_bases_own_draws_never_read_outside(base):
    model, tok = base
    _, prompts = prompts_for(tok, 4)
    for T, top_p in [(0.6, 0.95), (1.0, 0.5)]:
        ps, rs = _draw(model, tok, prompts, 16, T, top_p)
        m = base_support.measure(model, ps, rs, T, 0, top_p, pad_id(tok))
        assert not any(x["outside"] for x in m)
        assert max(x["excess"] for x in m) < -1e-4  # every token inside by more than rounding


def test_a_token_outside_the_bases_nucleus_reads_outside(base):
    model, tok = base
    _, prompts = prompts_for(tok, 1)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompts[0]])).logits[0, -1]  # (V,) the first response token
    worst = int(logits.argmin())  # far outside any nucleus at top-p 0.9
    best = int(logits.argmax())
    m = base_support.measure(model, prompts * 3, [[best], [worst], [best, worst]], 0.6, 0, 0.9, pad_id(tok))
    assert [x["outside"] for x in m] == [False, True, True]
    assert m[1]["excess"] > 0.05 and m[0]["excess"] < 0
    logp = logits.log_softmax(-1)
    assert m[1]["logp_t1"] == pytest.approx(float(logp[worst]), abs=1e-5)  # the T 1 log-probability, untruncated


def test_an_untruncated_sampler_puts_nothing_outside(base):
    model, tok = base
    _, prompts = prompts_for(tok, 2)
    ps, rs = _draw(model, tok, prompts, 4, 1.0, 1.0)
    m = base_support.measure(model, ps, rs, 1.0, 0, 1.0, pad_id(tok))
    assert all(x["outside"] is False and x["excess"] is None for x in m)


def test_lora_off_is_the_base_and_a_tilted_model_can_leave_its_nucleus(fitted_dir, smoke_cfg, base):
    cfg, tilted, tok, _ = model_with_lora(fitted_dir, smoke_cfg, scale=2.0)  # a large random update
    _, prompts = prompts_for(tok, 4)
    ps, rs = _draw(tilted, tok, prompts, 16, 0.6, 0.9, seed=3)
    with lora_disabled(tilted):
        m = base_support.measure(tilted, ps, rs, 0.6, 0, 0.9, pad_id(tok))
    plain = base_support.measure(base[0], ps, rs, 0.6, 0, 0.9, pad_id(tok))
    assert [x["outside"] for x in m] == [x["outside"] for x in plain]  # LoRA off is the base itself
    assert any(x["outside"] for x in m)  # a model moved far from the base draws tokens the base's nucleus drops


def test_an_evaluation_records_the_support_of_each_correct_response(fitted_dir, smoke_cfg, tmp_path):
    import countdown
    from method import evaluate

    cfg = cfg_for(smoke_cfg, **{"eval.base_support": True, "eval.n": 8, "eval.k_max": 8, "eval.n_base": 8})
    plain = evaluate.evaluate(
        cfg_for(smoke_cfg, **{"eval.n": 8, "eval.k_max": 8, "eval.n_base": 8}),
        str(fitted_dir),
        None,
        tmp_path / "p.json",
        progress=False,
    )
    doc = evaluate.evaluate(cfg, str(fitted_dir), None, tmp_path / "t.json", progress=False)
    assert sum(r["correct_loose"] for r in doc["problems"]) > 0  # the fitted base answers some right
    problems = {p.id: p for p in evaluate.eval_set_settings(cfg, "test")[0]}
    for row, same in zip(doc["problems"], plain["problems"]):
        assert row["responses"] == same["responses"]  # the measure draws nothing
        b = row["base_support"]
        loose = [j for j, r in enumerate(row["responses"]) if countdown.score(problems[row["id"]], r)["loose"]]
        assert b["index"] == loose and len(b["strict"]) == len(loose) == row["correct_loose"]
        assert sum(b["strict"]) == row["correct_strict"]
        assert not any(b["outside"])  # the base's own correct responses, at its own sampler


def test_the_posthoc_tool_takes_text_only_where_it_fixes_the_ids(base):
    """bench/support_posthoc.py re-encodes stored text: allowed for the character vocabulary (one
    segmentation but for the added tokens, named), refused for a BPE vocabulary (Qwen's: a text has many)."""
    import importlib.util
    import pathlib

    from bases import qwen_shape

    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "support_posthoc.py"
    spec = importlib.util.spec_from_file_location("support_posthoc", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    model, tok = base
    why, whole = tool.segmentation(tok)
    assert why is None and "<answer>" in whole
    ids = tool.drawn_ids(tok, "<answer>12</answer>", 1, 96)
    assert (
        ids == tok.encode("<answer>12</answer>", add_special_tokens=False) + [1] and len(ids) == 5
    )  # <answer> taken whole
    assert tool.drawn_ids(tok, "12", 1, 2) == tok.encode(
        "12", add_special_tokens=False
    )  # cut at max_new_tokens: no stop token
    assert "decodes to" in tool.segmentation(qwen_shape.load_tokenizer())[0]


def test_a_reference_sampler_reads_a_t1_draw_as_that_sampler_would(base):
    """measure's `reference`: the excess of T 1 draws at the evaluation sampler, from the same forward, equals a
    measure made at that sampler; at the drawing sampler itself it repeats `outside`."""
    model, tok = base
    _, prompts = prompts_for(tok, 4)
    ps, rs = _draw(model, tok, prompts, 16, 1.0, 1.0, seed=5)
    m = base_support.measure(model, ps, rs, 1.0, 0, 1.0, pad_id(tok), reference=(0.6, 0, 0.95))
    there = base_support.measure(model, ps, rs, 0.6, 0, 0.95, pad_id(tok))
    assert [x["outside_ref"] for x in m] == [x["outside"] for x in there]
    assert [x["excess_ref"] for x in m] == [x["excess"] for x in there]
    assert any(x["outside_ref"] for x in m)  # T 1 draws leave the T 0.6 nucleus now and then
    same = base_support.measure(model, ps, rs, 0.6, 0, 0.95, pad_id(tok), reference=(0.6, 0, 0.95))
    assert [x["outside_ref"] for x in same] == [x["outside"] for x in same]


def test_within_correct_records_the_models_own_log_probability(fitted_dir, smoke_cfg):
    """eval.within_correct: each correct response's length, its outside flag at the evaluation sampler and its
    T 1 log-probability under the trained model (LoRA on), equal to the sum of the sampler's own token
    log-probabilities of that draw; the base log-probability is LoRA off's."""
    from method import evaluate

    cfg, tilted, tok, _ = model_with_lora(fitted_dir, smoke_cfg, scale=0.05)
    cfg = cfg_for(cfg, **{"eval.base_support": True, "eval.within_correct": True})
    problems = evaluate.eval_set_settings(cfg, "test")[0][:6]
    prompts = evaluate.render_prompts(tok, problems, cfg.task.prompt_style, cfg.task.system_prompt)
    s = config.SamplingCfg(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=24)
    out = sampler.sample(tilted, prompts, 16, s, 7, stop_ids(tilted, tok), pad_id(tok), entropy=True)  # logprobs kept
    tokens = [out.tokens[i * 16 : (i + 1) * 16] for i in range(len(prompts))]
    rows = [{} for _ in problems]
    evaluate.add_base_support(tilted, tok, cfg, problems, tokens, rows, s, trained=True)
    picked = [(i, j) for i, r in enumerate(rows) for j in r["base_support"]["index"]]
    assert picked  # the near-base model answers some right
    for i, j in picked:
        b = rows[i]["base_support"]
        k = b["index"].index(j)
        assert b["length"][k] == len(tokens[i][j])
        own = sum(out.logprobs[i * 16 + j])  # the sampler's own, one per drawn token
        assert b["logp_self"][k] == pytest.approx(own, abs=1e-3)
        assert b["logp_self"][k] != b["logp_t1"][k]  # LoRA on against LoRA off
        assert b["outside"][k] is False and b["excess"][k] is None  # nothing truncates at T 1
        assert isinstance(b["outside_eval"][k], bool) and b["excess_eval"][k] is not None


def test_logp_all_records_every_response_of_the_base_at_t1(fitted_dir, smoke_cfg):
    """eval.logp_all: every response's T 1 log-probability under the base, in sample order, equal to the
    sampler's own summed token log-probabilities and, for a correct response, to its base_support logp_t1;
    only where the sampler draws from the base's own distribution."""
    from method import evaluate

    cfg, tilted, tok, _ = model_with_lora(fitted_dir, smoke_cfg, scale=0.0)  # LoRA at 0: the base itself
    cfg = cfg_for(cfg, **{"eval.base_support": True, "eval.logp_all": True})
    problems = evaluate.eval_set_settings(cfg, "test")[0][:4]
    prompts = evaluate.render_prompts(tok, problems, cfg.task.prompt_style, cfg.task.system_prompt)
    s = config.SamplingCfg(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=24)
    out = sampler.sample(tilted, prompts, 8, s, 3, stop_ids(tilted, tok), pad_id(tok), entropy=True)
    tokens = [out.tokens[i * 8 : (i + 1) * 8] for i in range(len(prompts))]
    rows = [{} for _ in problems]
    evaluate.add_base_support(tilted, tok, cfg, problems, tokens, rows, s)
    evaluate.add_logp_all(tilted, tok, cfg, problems, tokens, rows)
    for i, r in enumerate(rows):
        assert len(r["logp_t1_all"]) == 8
        for j in range(8):
            assert r["logp_t1_all"][j] == pytest.approx(sum(out.logprobs[i * 8 + j]), abs=1e-3)
        for k, j in enumerate(r["base_support"]["index"]):
            assert r["logp_t1_all"][j] == pytest.approx(r["base_support"]["logp_t1"][k], abs=1e-9)
    assert evaluate.base_distribution(s) and not evaluate.base_distribution(config.SamplingCfg(1.0, 0.95, 0, 24))


def _every_position(model, ps, rs, sampler_, reference, pad):
    """The measure as it was before it kept only a response's own positions: every padded position through the
    rule and the log-softmax, masked afterwards (what the faster measure must equal, bit for bit)."""
    from method.model import last_positions, pack

    ids, attn, pos, cmask = pack(ps, rs, pad)
    Lc = cmask.shape[1]
    logits = (
        model(
            input_ids=ids,
            attention_mask=attn,
            position_ids=pos,
            use_cache=False,
            logits_to_keep=last_positions(ids.shape[1], Lc + 1, CPU),
        )
        .logits[:, :-1]
        .float()
    )
    targets, valid = ids[:, -Lc:], cmask.bool()
    logp = logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1).double()
    out = [(logp * valid).sum(-1).tolist()]
    for s in (sampler_, reference):
        dropped, excess = base_support.token_excess(logits, targets, *s)
        out += [(dropped & valid).any(-1).tolist(), excess.masked_fill(~valid, float("-inf")).max(-1).values.tolist()]
    return out


def test_only_a_responses_own_positions_are_measured_and_nothing_changes(base):
    """The base's own draws (inside) and random ids of 1 to 24 tokens (mostly outside) in one chunk: the measure
    equals, exactly, the same rule applied at every padded position and masked after, at the sampler and at a
    reference with top-k."""
    model, tok = base
    _, prompts = prompts_for(tok, 4)
    here, there = (0.6, 0, 0.95), (1.0, 5, 0.9)
    ps, rs = _draw(model, tok, prompts, 2, here[0], here[2])
    g = torch.Generator().manual_seed(5)
    V = model.get_output_embeddings().weight.shape[0]
    rs += [torch.randint(0, V, (int(n),), generator=g).tolist() for n in torch.randint(1, 25, (8,), generator=g)]
    ps += ps
    m = base_support.measure(model, ps, rs, *here, pad_id(tok), reference=there)
    logp, out, exc, out_ref, exc_ref = _every_position(model, ps, rs, here, there, pad_id(tok))
    assert [x["logp_t1"] for x in m] == logp
    assert [x["outside"] for x in m] == out and [x["excess"] for x in m] == exc
    assert [x["outside_ref"] for x in m] == out_ref and [x["excess_ref"] for x in m] == exc_ref
    assert not any(out[:8]) and all(out[8:]) and 0 < sum(out_ref)  # both readings occur
