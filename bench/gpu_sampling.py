"""bench/gpu_check.py's sampling phases: whether an evaluation's samples stay the same when
eval.max_rows splits it into smaller calls on this device (08)."""
import time
from dataclasses import replace

from gpu_context import Ctx, fresh_graphs

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

import countdown
from method import evaluate
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
    out = {"problems": len(problems), "samples_each": n, "max_new_tokens": s.max_new_tokens, "temperature": s.temperature,
           "top_p": s.top_p, "tail": s.tail, "draw": "sample",
           "note": "random weights: a flat distribution puts a boundary nearer every uniform than a trained model's does"}
    texts = {}
    for rows in k.invariance_rows:
        c = replace(cfg, eval=replace(cfg.eval, draw="sample", max_rows=rows))
        fresh_graphs()
        t0 = time.perf_counter()
        texts[rows], _ = evaluate.sample_problems(ctx.model, ctx.tok, c, problems, n, s, "gpu_check", len(problems), progress=False)
        calls = memory.sampling_calls(len(problems), n, len(problems), rows)
        out[f"max_rows_{rows}"] = {"rows_per_call": [len(ps) * len(js) for ps, js in calls], "seconds": round(time.perf_counter() - t0, 2)}
    a, b = (texts[r] for r in k.invariance_rows)
    differ = [(i, j) for i in range(len(problems)) for j in range(n) if a[i][j] != b[i][j]]
    out["samples"] = len(problems) * n
    out["differing_samples"] = len(differ)
    out["first_differing"] = {"problem": differ[0][0], "sample": differ[0][1]} if differ else None
    out["equal"] = not differ
    out["ok"] = out["equal"] or ctx.device.type != "cuda"  # --dry checks the code path; equality is judged on a GPU
    fresh_graphs()
    return out
