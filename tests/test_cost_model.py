"""runner/cost_model.py: the sampling tail's bytes enter every decoded token's bound, by settings (greedy,
plain, top-p sorted or cut, keyed or one generator); the KV reads by decode; the kernels' launch floor and the
training step's host time only beyond the device's work; the breakdown adds up to the bound; and the same model
gives the laptop's and an H200's hours."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from orchestration import config
from runner import cost_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def qwen():
    cfg = config.load(str(ROOT / "configs" / "qwen05b.yaml"))
    return cfg, cost_model.CostModel(cfg, cost_model.REGISTERED_SHAPES[cfg.model.path], "registered")


def test_the_tail_adds_its_bytes_to_every_decoded_token(qwen):
    cfg, cm = qwen
    s = replace(cfg.eval.sampling, tail="sort")  # the sorted top-p (the registered study's is the cut, change 79)
    rows, V = 256, cm.vocab
    per_token = cm.decode(rows, 2, s, keyed=True) - cm.decode(rows, 1, s, keyed=True)
    weights = max(cm.weight_bytes / cost_model.LAPTOP.bytes_per_s, 2 * cm.params * rows / cost_model.LAPTOP.flops)
    kv = cm.kv_bytes(rows, s, True) / cost_model.LAPTOP.bytes_per_s  # decode auto: the static decode
    assert per_token == pytest.approx(
        weights + kv + rows * V * cost_model.tail_bytes(s, True) / cost_model.LAPTOP.bytes_per_s
    )  # at 256 rows on the laptop the kernels' launch floor lies under the device's work
    assert per_token > 3 * weights  # at 256 rows the sorted top-p tail, not the weights, sets the time


def test_the_static_decode_reads_its_whole_cache_and_the_eager_one_the_filled_half(qwen):
    cfg, cm = qwen
    s = replace(cfg.eval.sampling, tail="sort")  # decode: auto: graphs
    sh = cost_model.REGISTERED_SHAPES[cfg.model.path]
    per_position = 2 * sh["num_hidden_layers"] * sh["num_key_value_heads"] * (896 // 14) * 2  # K and V, bf16
    assert cm.graph(s) and cm.kv_bytes(4, s, True) == 4 * per_position * (cost_model.PROMPT_TOKENS + 384)
    assert cm.kv_bytes(4, s, False) == 4 * per_position * (cost_model.PROMPT_TOKENS + 192)
    assert cm.graph(replace(s, tail="cut")) and not cm.graph(replace(s, decode="eager"))  # the cut's steps capture
    cut = replace(s, tail="cut")
    assert cm.decode_parts(4, 1, cut, True)["kv"] == cm.decode_parts(4, 1, s, True)["kv"]
    assert cm.decode_parts(4, 1, cut, True)["tail"] < cm.decode_parts(4, 1, s, True)["tail"]


def test_the_launch_floor_counts_only_beyond_the_devices_work(qwen):
    cfg, cm = qwen
    s, h200 = cfg.eval.sampling, cm.on(cost_model.H200)
    one = h200.decode_parts(1, 1, s, keyed=True)
    floor = h200.token_kernels(False) * cost_model.GRAPH_OP_S
    work = one["compute"] + one["kv"] + one["tail"] - 2 * h200.params * cost_model.PROMPT_TOKENS / h200.device.flops
    assert one["launch"] == pytest.approx(floor - work)  # one row on an H200: the floor, not the bytes
    eager = h200.decode_parts(1, 1, replace(s, decode="eager"), keyed=True)
    assert eager["launch"] > 3 * one["launch"]  # no graph: every kernel launched from the host
    assert cm.decode_parts(256, 1, s, keyed=True)["launch"] == 0.0  # the laptop at 256 rows: the bytes, not the floor
    assert h200.token_kernels(True) - h200.token_kernels(False) == pytest.approx(24 * 7 * cost_model.LORA_OPS)


def test_the_training_steps_host_time_shows_where_the_device_outruns_the_launches(qwen):
    _, cm = qwen
    assert cm.train_step_parts()["host"] == 0.0  # the laptop's FLOPs take longer than launching them
    host = cm.on(cost_model.H200).train_step_parts()["host"]
    assert host > 0 and host <= 64 * cost_model.STEP_KERNELS * cm.token_kernels(True) * cost_model.EAGER_OP_S


def test_the_breakdown_adds_up_to_the_bound(qwen):
    from runner import preview

    cfg, cm = qwen
    plan = preview.Plan(cfg, Path("/nonexistent/q"), "configs/qwen05b.yaml", [])
    jobs = plan.jobs(preview.JOB_STAGES)
    lines = cost_model.breakdown(cm, jobs)
    hours = sum(float(x.split(": ")[1].split(" h")[0]) for x in lines[1:-1])
    assert hours == pytest.approx(sum(cm.job(j) for j in jobs) / 3600, abs=0.05 * len(lines))
    assert lines[-1].strip().startswith("assumed: every response 384 tokens")


def test_the_tail_bytes_by_settings(qwen):
    cfg, _ = qwen
    e, t = cfg.eval.sampling, cfg.train.sampling
    tb, sort = cost_model.tail_bytes, replace(cfg.eval.sampling, tail="sort")
    assert tb(sort, True) == 265 and tb(sort, False) == 241  # sorted top-p, keyed (eval.draw: sample) or not
    assert tb(e, True) == 72 < tb(sort, True) / 3  # the registered evaluation: the cut top-p (change 79), keyed
    assert tb(t, False) == cost_model.LSE_BYTES + cost_model.RACE_BYTES  # rollouts: no filter, one generator
    assert tb(replace(e, temperature=0.0), True) == cost_model.LSE_BYTES


def test_an_h200_takes_a_fraction_of_the_laptops_hours(qwen):
    cfg, cm = qwen
    s = cfg.eval.sampling
    laptop, h200 = (c.sample_parts(32, 16, 8, s) for c in (cm, cm.on(cost_model.H200)))
    ratios = (
        cost_model.LAPTOP.bytes_per_s / cost_model.H200.bytes_per_s,
        cost_model.LAPTOP.flops / cost_model.H200.flops,
    )
    device = [sum(p[k] for k in ("compute", "kv", "tail")) for p in (laptop, h200)]
    assert min(ratios) * device[0] <= device[1] <= max(ratios) * device[0] * (1 + 1e-12)  # bandwidths' or FLOPs' ratio
    assert h200["launch"] > laptop["launch"]  # the launch floor does not scale: it is what an H200 waits on
    text = cm.describe(cm.both(lambda c: c.single("probe")))
    assert "on the laptop GPU" in text and "on an H200's class" in text and "(assumed, not measured)" in text


def test_gpu_check_sets_the_measured_seconds_per_kernel_beside_the_assumed():
    """bench/gpu_check.py's decode phase: a decoded token's seconds over its kernel launches, eager and in a graph,
    beside runner/cost_model.py's assumptions; None where launches are not counted (a CPU)."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_check

    out = {
        "eager": {"seconds": 2.0, "kernel_launches_per_token": 2000},
        "graph": {"seconds": 0.5, "kernel_launches_per_token": None},
    }
    got = gpu_check.kernel_seconds(out, 100)
    assert (
        got["measured_eager_s_at_most"] == pytest.approx(2.0 / 100 / 2000) and got["measured_graph_s_at_most"] is None
    )
    assert got["assumed_eager_s"] == cost_model.EAGER_OP_S and got["assumed_graph_s"] == cost_model.GRAPH_OP_S


def test_the_kernel_counts_are_what_the_code_dispatches():
    """runner/cost_model.py's kernel counts are bench/op_counts.py's: the non-view aten ops that a decoded token
    dispatches per layer, per LoRA target and besides the layers, and a training micro-batch's, counted here on
    1- and 2-layer Qwen2-shaped models in the study's dtype (a change to the sampler, the LoRA or the loss that
    adds kernels fails this until the cost model is counted again)."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import op_counts

    cfg = config.load(str(ROOT / "configs" / "qwen05b.yaml"))
    s = config.SamplingCfg(**{**vars(cfg.eval.sampling), "decode": "eager"})
    ops = {(L, lo): op_counts.decode_ops(op_counts.toy(L, lo, cfg), s, 2, (2, 4))[0] for L in (1, 2) for lo in (0, 1)}
    layer = ops[(2, 0)] - ops[(1, 0)]
    lora = (ops[(2, 1)] - ops[(1, 1)] - layer) / len(cfg.lora.targets)
    assert (layer, lora) == (cost_model.OPS_PER_LAYER, cost_model.LORA_OPS)
    assert ops[(1, 0)] - layer <= cost_model.TAIL_OPS  # the model takes the largest: the graph decode's
    step = {L: op_counts.micro_batch_ops(op_counts.toy(L, True, cfg), 2, 4)[0] for L in (1, 2)}
    at_24 = 24 * (step[2] - step[1]) + 2 * step[1] - step[2]
    token = 24 * (cost_model.OPS_PER_LAYER + len(cfg.lora.targets) * cost_model.LORA_OPS) + cost_model.TAIL_OPS
    assert at_24 / token == pytest.approx(cost_model.STEP_KERNELS, abs=0.05)


def test_a_training_step_reads_the_device_once_a_micro_batch_at_most():
    """objective.policy_gradient keeps its running sums on the device and reads them once a step; the one device read
    a micro-batch makes is transformers' (its attention-mask check in the forward). Counted (item, nonzero, equal on
    anything but the host-side advantages) in a step of 1 micro-batch and of 4."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import op_counts

    model = op_counts.toy(1, True, config.load(str(ROOT / "configs" / "qwen05b.yaml")))
    one, four = (op_counts.micro_batch_ops(model, 4, 4, micro_batch=m)[1] for m in (4, 1))
    per_micro_batch = (four - one) / 3
    assert per_micro_batch <= 1 and one - per_micro_batch <= 3  # the step's sums: loss, KL, policy gap


def test_a_call_runs_to_its_longest_row_by_the_probes_lengths(qwen, tmp_path):
    """With the probe's response lengths, a call at the evaluation sampler prices E max of its rows' lengths
    steps (the closed form on two lengths) with rows x mean / steps decoding in each; other samplers, and a
    run whose probe recorded no lengths, keep max_new_tokens."""
    cfg, _ = qwen
    shape, s = cost_model.REGISTERED_SHAPES[cfg.model.path], cfg.eval.sampling
    T = s.max_new_tokens
    cm = cost_model.CostModel(cfg, shape, "registered", lengths=[10, T])
    steps, alive = cm.call_steps(2, s)
    assert steps == pytest.approx(10 + (T - 10) * (1 - 0.5**2)) and alive == pytest.approx(2 * (10 + T) / 2 / steps)
    assert cost_model.CostModel(cfg, shape, "r", lengths=[10] * 5).call_steps(64, s) == (10, 64)
    assert cm.call_steps(2, cfg.train.sampling) == (cfg.train.sampling.max_new_tokens, 2)
    got, (steps8, alive8) = cm.sample_parts(4, 2, 4, s), cm.call_steps(8, s)  # one call of 8 rows
    assert got == cm.decode_parts(8, steps8, s, cm.keyed, False, alive8)
    plain = cost_model.CostModel(cfg, shape, "registered")
    assert sum(got.values()) < sum(plain.sample_parts(4, 2, 4, s).values())
    assert cm.on(cost_model.H200).lengths == cm.lengths
    probe = tmp_path / f"probe_{cfg.task.name}.json"
    assert cost_model.probe_lengths(cfg, tmp_path) is None  # no probe yet
    probe.write_text(json.dumps({"n": 2}))
    assert cost_model.probe_lengths(cfg, tmp_path) is None  # a probe from before the lengths were recorded
    probe.write_text(json.dumps({"response_tokens": [[3, 7], [T, 1]]}))
    assert cost_model.for_config(cfg, tmp_path).lengths == [3, 7, T, 1]


def test_checkpointing_trades_a_recompute_for_fewer_micro_batches(qwen):
    """train.gradient_checkpointing: 6 x params FLOPs a token instead of 4, and the micro-batch the memory then
    allows (16 at memory_gb 8, against 3): slower on the laptop, whose steps are FLOP-bound, and faster on an
    H200's class, whose steps wait on the micro-batches' launches."""
    cfg, cm = qwen
    ck = cost_model.CostModel(
        replace(cfg, train=replace(cfg.train, gradient_checkpointing=True)), cm.shape, "registered"
    )
    assert (cm.micro_batch, ck.micro_batch) == (3, 16)
    plain, rec = cm.train_step_parts(), ck.train_step_parts()
    assert rec["compute"] - plain["compute"] == pytest.approx(
        0.5
        * (
            plain["compute"]
            - cm.decode_parts(128, cfg.train.sampling.max_new_tokens, cfg.train.sampling, False, True)["compute"]
        )
    )
    assert sum(rec.values()) > sum(plain.values())
    fast = [sum(m.on(cost_model.H200).train_step_parts().values()) for m in (cm, ck)]
    assert fast[1] < fast[0]
