"""Fake run folders for the analysis tests (test_analyze*.py): eval files, the config recorded in
them, training logs, and edits of a JSON file in place. No model, no torch."""

import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAST = 200  # bootstrap resamples where the number does not matter (figures, malformed inputs)
B = 2000  # the registered number, where p-values are checked by hand: the smallest p is 1 / 2001


def eval_doc(counts_strict, counts_loose=None, n=8, ids=None, fmt=0.9, config=None, **fields):
    """An eval file with the fields analyze_b reads (the layout of evaluate.evaluate)."""
    counts_loose = counts_strict if counts_loose is None else counts_loose
    ids = list(range(len(counts_strict))) if ids is None else ids
    problems = [
        {
            "id": i,
            "question": f"q{i}",
            "answer": f"a{i}",
            "n": n,
            "correct_strict": int(cs),
            "correct_loose": int(cl),
            "format_ok": n,
            "responses": [f"resp {i}.{j}" for j in range(n)],
        }
        for i, cs, cl in zip(ids, counts_strict, counts_loose)
    ]
    return {
        "sampling": {"n": n},
        "format_rate": fmt,
        "problems": problems,
        **fields,
        "provenance": {"config": config or {}, "stage_hash": "x", "plan_sha256": "y"},
    }


def make_config(conds, seeds, steps, k_max=8, resamples=B, legacy=False, **analyze):
    cfg = {
        "seed": 0,
        "eval": {"k_max": k_max},
        "analyze": {
            "resamples": resamples,
            "ci": 0.95,
            "beyond_resamples": 40,
            "ceiling_null": "selection",
            "coverage_sims": 200,
            **analyze,
        },
        "lr_sweep": {"steps": 6, "last": 2},
    }
    if legacy:  # a single-seed run before train.seeds (results/tiny's config)
        cfg["train"] = {"conditions": list(conds), "checkpoints": list(steps)}
    else:
        cfg["conditions"] = {c: {"problems": "all"} for c in conds}
        cfg["train"] = {"seeds": list(seeds), "checkpoints": list(steps)}
    return cfg


def write_run(run: Path, base, rl: dict, n=8, k_max=None, resamples=B, legacy=False, design=None, **analyze) -> Path:
    """base: counts, or (strict, loose) counts; rl: {(cond, step) or (cond, seed, step): counts or
    (strict, loose)}. The design (conditions in first-seen order, seeds, checkpoints) is read off
    rl's keys unless `design` = (conds, seeds, steps) is given; it is recorded in eval_base.json."""
    run.mkdir(parents=True, exist_ok=True)
    keys = {(k[0], 0, k[1]) if len(k) == 2 else k: v for k, v in rl.items()}
    conds, seeds, steps = design or (
        list(dict.fromkeys(c for c, _, _ in keys)),
        sorted({s for _, s, _ in keys}),
        sorted({st for _, _, st in keys}),
    )
    if "primary_condition" not in analyze and "many" not in conds:
        analyze["primary_condition"] = conds[0]
    cfg = make_config(conds, seeds, steps, k_max=k_max or n, resamples=resamples, legacy=legacy, **analyze)

    def doc(c, **fields):
        strict, loose = c if isinstance(c, tuple) else (c, None)
        return eval_doc(strict, loose, n=n, config=cfg, **fields)

    (run / "eval_base.json").write_text(json.dumps(doc(base)))
    for (cond, seed, step), c in keys.items():
        name = f"eval_{cond}_{step:03d}.json" if legacy else f"eval_{cond}_s{seed}_{step:03d}.json"
        fields = {} if legacy else {"condition": cond, "train_seed": seed, "step": step}
        (run / name).write_text(json.dumps(doc(c, **fields)))
    return run


def entry(out, cond, step, scoring="loose"):
    [e] = [e for e in out["entries"] if (e["condition"], e["step"], e["scoring"]) == (cond, step, scoring)]
    return e


def _cell(c: str, s: int, i: int, blank) -> int | str | float:
    """Column c (the i-th) of step s's row: the step itself; blank on odd steps for a column in blank."""
    if c == "step":
        return s
    if c in blank and s % 2:
        return ""
    return round(0.1 * s + i, 3)


def write_train_log(path: Path, steps=6, cols=None, blank=()):
    cols = cols or [
        "step",
        "reward_mean",
        "zero_signal_frac",
        "format_rate",
        "len_mean",
        "len_max",
        "truncated_frac",
        "loss",
        "grad_norm",
        "lr",
        "sec_sampling",
        "sec_fwd_bwd",
        "tokens",
        "peak_mem_mb",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for s in range(1, steps + 1):
            w.writerow([_cell(c, s, i, blank) for i, c in enumerate(cols)])


def edit_json(path: Path, fn):
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))


def set_json(path, *keys_value):
    *keys, value = keys_value

    def fn(d):
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    edit_json(path, fn)


def analyze_cli(*args) -> subprocess.CompletedProcess:
    """analyze_b.py run as a user runs it, from the repository root."""
    return subprocess.run(
        [sys.executable, "analyze_b.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def axes_drawn(monkeypatch) -> dict:
    """figures._save watched: figure file name -> the axes shown in it, filled in as each is saved."""
    from analysis import figures

    seen, save = {}, figures._save

    def spy(fig, path):
        seen[path.name] = [ax for ax in fig.axes if ax.axison]
        return save(fig, path)

    monkeypatch.setattr(figures, "_save", spy)
    return seen
