"""bench/gpu_check.py's two sampling phases: whether an evaluation's samples stay the same when
eval.max_rows splits it into smaller calls on this device (08), and what the top-p tail costs per
token through today's sort and through the cut (09)."""

import time
from dataclasses import replace

import torch
from gpu_context import Ctx, fresh_graphs, sync

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

import countdown
from method import cut_tail, evaluate
from method.decoding import filter_logits, keyed_draw
from orchestration import memory


def batch_invariance(ctx: Ctx) -> dict:
    """One evaluation (evaluate.sample_problems: its calls, keyed seeds, folding and decode) of the
    first few test problems at each eval.max_rows in sizes.invariance_rows, eval.draw: sample, and
    the responses compared. Each sample draws from its own stream, so they are equal unless the
    logits move with the rows in a call (a kernel may reduce in another order at another batch size)
    and a uniform lies that close to a boundary. That happens on the CPU too: with --dry's flat
    random model, 1 of 8 samples moves, the decode step's log-probs moving ~1e-6 with the batch."""
    cfg, k = ctx.cfg, ctx.sizes
    _, problems = countdown.make_splits(cfg.task.name, 0, k.invariance_problems, cfg.task.seed)
    s = replace(cfg.eval.sampling, max_new_tokens=k.tokens_short)
    n = k.invariance_samples
    out = {
        "problems": len(problems),
        "samples_each": n,
        "max_new_tokens": s.max_new_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "tail": s.tail,
        "draw": "sample",
        "note": "random weights: a flat distribution puts a boundary nearer every uniform than a trained model's does",
    }
    texts = {}
    for rows in k.invariance_rows:
        c = replace(cfg, eval=replace(cfg.eval, draw="sample", max_rows=rows))
        fresh_graphs()
        t0 = time.perf_counter()
        texts[rows], _ = evaluate.sample_problems(
            ctx.model, ctx.tok, c, problems, n, s, "gpu_check", len(problems), progress=False
        )
        calls = memory.sampling_calls(len(problems), n, len(problems), rows)
        out[f"max_rows_{rows}"] = {
            "rows_per_call": [len(ps) * len(js) for ps, js in calls],
            "seconds": round(time.perf_counter() - t0, 2),
        }
    a, b = (texts[r] for r in k.invariance_rows)
    differ = [(i, j) for i in range(len(problems)) for j in range(n) if a[i][j] != b[i][j]]
    out["samples"] = len(problems) * n
    out["differing_samples"] = len(differ)
    out["first_differing"] = {"problem": differ[0][0], "sample": differ[0][1]} if differ else None
    out["equal"] = not differ
    out["ok"] = out["equal"] or ctx.device.type != "cuda"  # --dry checks the code path; equality is judged on a GPU
    fresh_graphs()
    return out


def zipf_logits(rows: int, V: int, temperature: float, gen: torch.Generator) -> torch.Tensor:
    """(rows, V) bf16 logits whose tempered softmax is Zipf 1.5 over a random order of each row's
    vocabulary (x_v / T = -1.5 log rank_v): about 97% of the mass in the top 1,024 tokens, a peaked
    row as a trained model's mostly are; bf16 rounds the tail into ties."""
    base = -1.5 * temperature * torch.log(torch.arange(1, V + 1, dtype=torch.float32))  # (V,) by rank
    order = torch.rand(rows, V, generator=gen).argsort(-1)  # (rows, V): a random permutation per row
    return torch.empty(rows, V).scatter_(-1, order, base.expand(rows, V)).bfloat16()


def tail_timing(ctx: Ctx) -> dict:
    """The evaluation's top-p tail alone, per decoded token, on rows of the full vocabulary: today's
    sort (sampling.tail: sort, the keyed draw static_decode.fused_draw makes: decoding.filter_logits,
    softmax, decoding.keyed_draw) against the cut (sampling.tail: cut, method/cut_tail.py's cut_draw,
    its one host read included), the same uniforms for both; the milliseconds per token (the mean of
    sizes.tail_reps calls after a warm-up) and the draws that differ."""
    s, device, V = ctx.cfg.eval.sampling, ctx.device, ctx.model.config.vocab_size
    T, top_k, top_p = s.temperature, s.top_k, s.top_p
    reps = ctx.sizes.tail_reps
    g = torch.Generator().manual_seed(11)
    out = {
        "vocab": V,
        "temperature": T,
        "top_k": top_k,
        "top_p": top_p,
        "cut": cut_tail.CUT,
        "calls_timed": reps,
        "logits": "bf16, Zipf 1.5 after the temperature over a random order (gpu_sampling.zipf_logits)",
    }

    def sort(x, u):
        return keyed_draw(filter_logits(x.float() / T, top_k, top_p).softmax(-1), u)

    def cut(x, u):
        tok, exact = cut_tail.cut_draw(x.float() / T, top_k, top_p, u=u)
        return tok, int((~exact).sum())

    for rows in ctx.sizes.tail_rows:
        x = zipf_logits(rows, V, T, g).to(device)  # (rows, V)
        U = torch.rand(reps + 1, rows, dtype=torch.float64, generator=g).to(device)  # (reps + 1, rows): call 0 warms up
        res = {}
        for name, fn in (("sort", lambda u: (sort(x, u), 0)), ("cut", lambda u: cut(x, u))):
            fn(U[0])
            sync(device)
            t0 = time.perf_counter()
            drawn = [fn(U[i]) for i in range(1, reps + 1)]
            sync(device)
            res[name] = {
                "ms_per_token": round((time.perf_counter() - t0) / reps * 1000, 3),
                "tokens": torch.stack([d[0] for d in drawn]),
                "fallback_rows": sum(d[1] for d in drawn),
            }
        diff = res["sort"]["tokens"] != res["cut"]["tokens"]  # (reps, rows)
        sort_ms, cut_ms = res["sort"]["ms_per_token"], res["cut"]["ms_per_token"]
        mass = (
            (x.float() / T).softmax(-1).topk(min(cut_tail.CUT, V), dim=-1).values.sum(-1)
        )  # (rows,) the top CUT tokens' mass
        out[f"rows_{rows}"] = {
            "sort_ms_per_token": sort_ms,
            "cut_ms_per_token": cut_ms,
            "sort_over_cut": round(sort_ms / max(cut_ms, 1e-9), 2),
            "draws": reps * rows,
            "differing_draws": int(diff.sum()),
            "rows_with_differing_draws": int(diff.any(0).sum()),
            "cut_fallback_rows": res["cut"]["fallback_rows"],
            "top_cut_mass_mean": round(mass.mean().item(), 4),
        }
    return out


def main(argv=None) -> None:
    """The tail's timing alone, at phase 09's GPU sizes, on this machine's device (CUDA if there is one)."""
    import argparse
    import json
    from types import SimpleNamespace

    from gpu_context import Sizes

    from orchestration import config

    p = argparse.ArgumentParser(
        description="phase 09 alone: the top-p tail per token, sort against cut, at 128 and 256 rows"
    )
    p.add_argument("--reps", type=int, default=20, help="timed calls per path and row count (default 20)")
    a = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = config.load(str(ROOT / "configs" / "qwen05b.yaml"))
    ctx = SimpleNamespace(
        cfg=cfg,
        device=device,
        sizes=replace(Sizes(), tail_reps=a.reps),
        model=SimpleNamespace(config=SimpleNamespace(vocab_size=151936)),
    )
    print(json.dumps({"device": device.type, **tail_timing(ctx)}))


if __name__ == "__main__":
    main()
