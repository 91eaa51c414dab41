"""The pre-registered verdicts: paired bootstrap over test problems, coverage, crossover, figures.

Reads RUN/eval_*.json (and train_*/train_log.csv, lr_choice.json, selection.json, probe_*.json
where present); writes RUN/verdicts.json, RUN/report.md and RUN/figures/*.png.

    python analyze_b.py --run results/smoke

For each condition x checkpoint x scoring, against the base, with the SAME resampled problem
indices for both models (a paired bootstrap; PLAN.md "Verdicts"):
  pass@1 rises       <=> the 95% interval of (RL - base) pass@1 lies above 0
  ceiling unchanged  <=> the pass@k_max interval contains 0, or |diff pass@k_max| < |diff pass@1| / 3
  ceiling falls      <=> the pass@k_max interval lies below 0
This file imports no torch: it meets the rest of the pipeline only in JSON and CSV files.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
SCORINGS = ("strict", "loose")
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
EVAL_RE = re.compile(r"^eval_(?P<cond>.+)_(?P<step>\d+)\.json$")


class InputError(Exception):
    """A missing or malformed input: the message names the file and what is wrong."""


# ----------------------------------------------------------------------------- statistics


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., arXiv 2107.03374): 1 - C(n-c, k) / C(n, k), in the stable
    product form 1 - prod_{i=n-c+1}^{n} (1 - k / i). k > n is an error, never a silent skip.
    The whole study uses this one function (grpo.py imports it)."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def per_problem(counts, n: int, k: int) -> np.ndarray:
    return np.array([pass_at_k(n, int(c), k) for c in counts])


def resample_indices(n_problems: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n_problems) problem indices drawn with replacement from a seeded generator."""
    return np.random.default_rng(seed).integers(0, n_problems, size=(resamples, n_problems))


def paired_interval(rl: np.ndarray, base: np.ndarray, idx: np.ndarray, ci: float) -> tuple[float, tuple[float, float]]:
    """Mean difference rl - base and its percentile interval over the resampled indices."""
    diffs = rl[idx].mean(axis=1) - base[idx].mean(axis=1)  # (resamples,)
    alpha = (1 - ci) / 2
    lo, hi = np.quantile(diffs, [alpha, 1 - alpha])
    return float(rl.mean() - base.mean()), (float(lo), float(hi))


def verdict(d1: float, ci1, dk: float, cik) -> dict:
    """The registered criteria (PLAN.md), as booleans."""
    return {
        "pass1_rises": ci1[0] > 0,
        "ceiling_unchanged": (cik[0] <= 0 <= cik[1]) or abs(dk) < abs(d1) / 3,
        "ceiling_falls": cik[1] < 0,
    }


def crossover(rl_curve: list[float], base_curve: list[float]) -> dict | None:
    """Where the base catches up: the first k at which RL is no longer above the base, after
    being above at k = 1. Returns {"between": [k-1, k]} (1-based k), or None if RL starts above
    and stays above, or never is above."""
    above = [r > b for r, b in zip(rl_curve, base_curve)]
    if not above or not above[0]:
        return None
    for k in range(1, len(above)):
        if not above[k]:
            return {"between": [k, k + 1]}
    return None


# ----------------------------------------------------------------------------- inputs


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: missing")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})")


def load_eval(path: Path) -> dict:
    d = read_json(path)
    try:
        n = int(d["sampling"]["n"])
        probs = d["problems"]
        for p in probs:
            for s in SCORINGS:
                c = p[f"correct_{s}"]
                if not (isinstance(c, int) and 0 <= c <= p["n"] == n):
                    raise InputError(f"{path}: problem {p.get('id')}: correct_{s}={c!r} is not a count in 0..n={n}")
        if not probs:
            raise InputError(f"{path}: no problems")
        for p in probs:
            if p.get("id") is None:
                raise InputError(f"{path}: a problem has no id")
        if not isinstance(d["format_rate"], (int, float)):
            raise InputError(f"{path}: format_rate is not a number")
    except (KeyError, TypeError) as e:
        raise InputError(f"{path}: malformed eval file (missing or wrong field {e})")
    d["_file"] = path.name
    return d


def find_evals(run: Path) -> tuple[dict, dict[tuple[str, int], dict]]:
    base = load_eval(run / "eval_base.json")
    rl = {}
    for f in sorted(run.glob("eval_*.json")):
        m = EVAL_RE.match(f.name)
        if m:
            key = (m["cond"], int(m["step"]))
            if key in rl:
                raise InputError(f"{f}: a second eval file for {key[0]} step {key[1]} (also {rl[key]['_file']})")
            rl[key] = load_eval(f)
    if not rl:
        raise InputError(f"{run}: no eval_<condition>_<step>.json files to compare with the base")
    ids = [p["id"] for p in base["problems"]]
    for key, d in rl.items():
        if [p["id"] for p in d["problems"]] != ids:
            raise InputError(f"{run}/{d['_file']}: its test problems differ from eval_base.json's")
        if d["sampling"]["n"] != base["sampling"]["n"]:
            raise InputError(f"{run}/{d['_file']}: n={d['sampling']['n']} but the base has n={base['sampling']['n']}")
    return base, rl


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


# ----------------------------------------------------------------------------- analysis


def analyze(run: Path, resamples: int | None = None, ci: float | None = None, seed: int | None = None) -> dict:
    base, rl = find_evals(run)
    cfg = base.get("provenance", {}).get("config", {})
    resamples = resamples or cfg.get("analyze", {}).get("resamples", 2000)
    ci = ci or cfg.get("analyze", {}).get("ci", 0.95)
    seed = cfg.get("seed", 0) if seed is None else seed
    n = base["sampling"]["n"]
    k_max = cfg.get("eval", {}).get("k_max", n)
    idx = resample_indices(len(base["problems"]), resamples, seed)
    entries = []
    for (cond, step), d in sorted(rl.items(), key=lambda kv: (kv[0][0] != "many", kv[0][0], kv[0][1])):
        for s in SCORINGS:
            cb = [p[f"correct_{s}"] for p in base["problems"]]
            cr = [p[f"correct_{s}"] for p in d["problems"]]
            d1, ci1 = paired_interval(per_problem(cr, n, 1), per_problem(cb, n, 1), idx, ci)
            dk, cik = paired_interval(per_problem(cr, n, k_max), per_problem(cb, n, k_max), idx, ci)
            rl_curve = [float(per_problem(cr, n, k).mean()) for k in range(1, k_max + 1)]
            base_curve = [float(per_problem(cb, n, k).mean()) for k in range(1, k_max + 1)]
            entries.append({
                "condition": cond, "step": step, "scoring": s, "k_max": k_max,
                "pass1_base": base_curve[0], "pass1_rl": rl_curve[0], "pass1_diff": d1, "pass1_ci": list(ci1),
                "passk_base": base_curve[-1], "passk_rl": rl_curve[-1], "passk_diff": dk, "passk_ci": list(cik),
                **verdict(d1, ci1, dk, cik),
                "coverage_base": sum(c > 0 for c in cb), "coverage_rl": sum(c > 0 for c in cr),
                "only_rl": sum(r > 0 and b == 0 for r, b in zip(cr, cb)), "only_base": sum(b > 0 and r == 0 for r, b in zip(cr, cb)),
                "crossover": crossover(rl_curve, base_curve),
                "format_base": base["format_rate"], "format_rl": d["format_rate"],
            })
    return {"entries": entries, "resamples": resamples, "ci": ci, "seed": seed, "n": n, "k_max": k_max,
            "n_problems": len(base["problems"]), "base": base, "rl": rl, "idx": idx}


def curve_band(counts, n: int, k_max: int, idx: np.ndarray, ci: float):
    """Mean pass@k for k = 1..k_max and its bootstrap percentile band: three (k_max,) arrays."""
    per = np.stack([per_problem(counts, n, k) for k in range(1, k_max + 1)], axis=1)  # (N, k_max)
    boot = per[idx].mean(axis=1)  # (resamples, k_max)
    alpha = (1 - ci) / 2
    return per.mean(axis=0), np.quantile(boot, alpha, axis=0), np.quantile(boot, 1 - alpha, axis=0)


# ----------------------------------------------------------------------------- figures


def figures(run: Path, res: dict) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = run / "figures"
    out.mkdir(exist_ok=True)
    written = []
    n, k_max, idx, ci = res["n"], res["k_max"], res["idx"], res["ci"]
    ks = np.arange(1, k_max + 1)
    conds = sorted({c for c, _ in res["rl"]}, key=lambda c: (c != "many", c))
    for cond in conds:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, s in zip(axes, SCORINGS):
            steps = sorted(st for cc, st in res["rl"] if cc == cond)
            models = [("base", res["base"], "black")] + [
                (f"{cond} step {st}", res["rl"][(cond, st)], COLORS[i % len(COLORS)]) for i, st in enumerate(steps)]
            for label, d, color in models:
                m, lo, hi = curve_band([p[f"correct_{s}"] for p in d["problems"]], n, k_max, idx, ci)
                ax.plot(ks, m, color=color, label=label, marker="o", ms=3)
                ax.fill_between(ks, lo, hi, color=color, alpha=0.15, lw=0)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("k (samples)")
            ax.set_title(f"{s} scoring")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel(f"pass@k ({int(ci * 100)}% bootstrap band)")
        axes[0].legend(fontsize=8)
        fig.suptitle(f"pass@k: condition {cond} vs base ({res['n_problems']} test problems, n={n})")
        fig.tight_layout()
        written.append(_save(fig, out / f"passk_{cond}.png"))
        plt.close(fig)
    logs = {c: _read_csv(run / f"train_{c}" / "train_log.csv") for c in conds}
    logs = {c: r for c, r in logs.items() if r}
    if logs:
        fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
        for ax, (col, title) in zip(axes.flat, [("reward_mean", "reward (strict)"), ("zero_signal_frac", "groups with no signal"),
                                                  ("format_rate", "format rate"), ("len_mean", "mean response length (tokens)")]):
            for c, rows in logs.items():
                ax.plot([r["step"] for r in rows], [r[col] for r in rows], label=c)
            ax.set_title(title)
            ax.grid(alpha=0.3)
        axes[0, 0].legend(title="condition")
        for ax in axes[1]:
            ax.set_xlabel("step")
        fig.tight_layout()
        written.append(_save(fig, out / "training.png"))
        plt.close(fig)
    sweep = sorted((run / "lr_sweep").glob("lr_*/train_log.csv")) if (run / "lr_sweep").exists() else []
    if sweep:
        fig, ax = plt.subplots(figsize=(6, 4))
        for f in sweep:
            rows = _read_csv(f)
            ax.plot([r["step"] for r in rows], [r["reward_mean"] for r in rows], label=f.parent.name.replace("lr_", "lr "))
        ax.set_xlabel("step")
        ax.set_ylabel("reward (strict)")
        ax.set_title("learning-rate sweep (many condition)")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        written.append(_save(fig, out / "lr_sweep.png"))
        plt.close(fig)
    return written


def _save(fig, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)
    return path


def _read_csv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    try:
        with open(path) as f:
            rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    except (ValueError, TypeError, AttributeError, csv.Error) as e:  # a short row gives None, a long one a list
        raise InputError(f"{path}: malformed training log ({e})")
    if any("step" not in r or "reward_mean" not in r for r in rows):
        raise InputError(f"{path}: malformed training log (no step or reward_mean column)")
    return rows


# ----------------------------------------------------------------------------- report


def _f(x: float) -> str:
    return f"{x:.3f}"


def report(run: Path, res: dict, figs: list[Path]) -> str:
    base, rl, n, k = res["base"], res["rl"], res["n"], res["k_max"]
    prov = base.get("provenance", {})
    L = [f"# Report: {run.name}", "",
         f"Written by `analyze_b.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
         f"{res['n_problems']} test problems, n = {n} samples each; paired bootstrap over problems, "
         f"{res['resamples']} resamples (seed {res['seed']}), {int(res['ci'] * 100)}% percentile intervals.", ""]
    plan_now = file_sha256(ROOT / "PLAN.md")
    warnings = []

    def settings(d: dict) -> dict:  # what must match between the models compared (the adapter may not)
        c = d.get("provenance", {}).get("config", {})
        return {k: c.get(k) for k in ("seed", "model", "task", "eval")}

    for (c, s), d in rl.items():
        p = d.get("provenance", {})
        if p.get("plan_sha256") != prov.get("plan_sha256"):
            warnings.append(f"{d['_file']} was made under a different PLAN.md than eval_base.json")
        if settings(d) != settings(base):
            warnings.append(f"{d['_file']} records other evaluation settings (seed, model, task or eval) than eval_base.json")
    if prov.get("plan_sha256") and plan_now and prov["plan_sha256"] != plan_now:
        warnings.append("PLAN.md has changed since the base was evaluated")
    cfg = prov.get("config", {})
    expected = ["selection.json"] + (["lr_choice.json"] if cfg.get("train", {}).get("lr") is None else [])
    expected += [f"probe_{t}.json" for t in cfg.get("probe", {}).get("tasks", [])]
    expected += sorted({f"train_{c}/train_log.csv" for c, _ in rl})
    for name in expected:
        if not (run / name).exists():
            warnings.append(f"{name} is missing: what it would show is left out of this report")
        elif name.endswith(".json"):
            h = read_json(run / name).get("provenance", {}).get("config_hash")
            if h != prov.get("config_hash"):
                warnings.append(f"{name} was made with another config (hash {h}) than eval_base.json ({prov.get('config_hash')})")
    for d in rl.values():
        if d.get("provenance", {}).get("config_hash") != prov.get("config_hash"):
            warnings.append(f"{d['_file']} was made with another config (hash {d.get('provenance', {}).get('config_hash')}) "
                            f"than eval_base.json ({prov.get('config_hash')})")
    if warnings:
        L += ["## Warnings", ""] + [f"- {w}" for w in warnings] + [""]
    L += ["## Verdicts (PLAN.md, criteria 1-3)", "",
          f"| condition | step | scoring | pass@1 base → RL | Δ pass@1 [95% CI] | pass@{k} base → RL | Δ pass@{k} [95% CI] | pass@1 rises | ceiling unchanged | ceiling falls | base caught up |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in res["entries"]:
        cross = f"k {e['crossover']['between'][0]}→{e['crossover']['between'][1]}" if e["crossover"] else "—"
        L.append(f"| {e['condition']} | {e['step']} | {e['scoring']} | {_f(e['pass1_base'])} → {_f(e['pass1_rl'])} | "
                 f"{e['pass1_diff']:+.3f} [{e['pass1_ci'][0]:+.3f}, {e['pass1_ci'][1]:+.3f}] | {_f(e['passk_base'])} → {_f(e['passk_rl'])} | "
                 f"{e['passk_diff']:+.3f} [{e['passk_ci'][0]:+.3f}, {e['passk_ci'][1]:+.3f}] | {'yes' if e['pass1_rises'] else 'no'} | "
                 f"{'yes' if e['ceiling_unchanged'] else 'no'} | {'yes' if e['ceiling_falls'] else 'no'} | {cross} |")
    L += ["", "Criteria as registered: *pass@1 rises* ⇔ the interval's lower bound > 0; *ceiling unchanged* ⇔ the "
          f"pass@{k} interval contains 0, or |Δ pass@{k}| < |Δ pass@1| / 3; *ceiling falls* ⇔ the pass@{k} interval's upper bound < 0. "
          "The selection question leans on the loose scoring.", "",
          "## Coverage (problems with at least one correct answer)", "",
          "| condition | step | scoring | base | RL | only RL | only base | format base → RL |", "|---|---|---|---|---|---|---|---|"]
    for e in res["entries"]:
        L.append(f"| {e['condition']} | {e['step']} | {e['scoring']} | {e['coverage_base']} | {e['coverage_rl']} | {e['only_rl']} | "
                 f"{e['only_base']} | {_f(e['format_base'])} → {_f(e['format_rl'])} |")
    sel, lrc = run / "selection.json", run / "lr_choice.json"
    if lrc.exists():
        d = read_json(lrc)
        L += ["", "## Learning rate", "", f"Rule: {d['rule']}. Mean reward: "
              + ", ".join(f"{k}: {v:.3f}" for k, v in d["mean_reward_last"].items()) + f". Chosen: **{d['chosen']:g}**."]
    if sel.exists():
        d = read_json(sel)
        L += ["", "## Problem selection", "", f"Rule: {d['rule']}. {len(d['informative'])} of {len(d['pass_rates'])} problems informative. "
              + "; ".join(f"set {z}: {', '.join(ids)}" + (" (fewer than asked)" if d["short"][z] else "") for z, ids in d["sets"].items())]
    probes = sorted(run.glob("probe_*.json"))
    if probes:
        L += ["", "## Base-rate probes (the checks behind PLAN.md's change log)", "",
              "| task | samples | strict pass@1 | loose pass@1 | strict pass@n | loose pass@n | format |", "|---|---|---|---|---|---|---|"]
        for f in probes:
            d = read_json(f)
            kk = str(d["n"])
            L.append(f"| {d['task']} | {d['n_problems']} × {d['n']} | {_f(d['pass_at_k']['strict']['1'])} | {_f(d['pass_at_k']['loose']['1'])} | "
                     f"{_f(d['pass_at_k']['strict'][kk])} | {_f(d['pass_at_k']['loose'][kk])} | {_f(d['format_rate'])} |")
    first = base["problems"][0]
    if "responses" in first:
        L += ["", f"## The first test problem side by side: `{first['question']}` = {first['answer']}", ""]
        finals = {}
        for (c, s), d in rl.items():
            if s >= finals.get(c, (0, None))[0]:
                finals[c] = (s, d)
        for label, d in [("base", base)] + [(f"{c} step {s}", d) for c, (s, d) in sorted(finals.items())]:
            p = d["problems"][0]
            L.append(f"**{label}** — strict {p['correct_strict']}/{p['n']}, loose {p['correct_loose']}/{p['n']}")
            L += ["```"] + [r.replace("```", "'''")[:300] for r in p.get("responses", [])[:3]] + ["```", ""]
    if figs:
        L += ["## Figures", ""] + [f"![{f.stem}](figures/{f.name})" for f in figs]
    L += ["", "## Provenance of the inputs", "", "| file | sha256 | stage hash | PLAN.md sha256 | revision | made |", "|---|---|---|---|---|---|"]
    for f in sorted(run.glob("eval_*.json")) + probes + [p for p in (sel, lrc) if p.exists()]:
        p = read_json(f).get("provenance", {})
        L.append(f"| {f.name} | {file_sha256(f)[:12]} | {p.get('stage_hash')} | {(p.get('plan_sha256') or '')[:12]} | {p.get('revision')} | {p.get('time')} |")
    return "\n".join(L) + "\n"


def check_extras(run: Path) -> None:
    """Read (and so validate) the training logs and the JSON files the figures and report use."""
    for f in list(run.glob("train_*/train_log.csv")) + list(run.glob("lr_sweep/lr_*/train_log.csv")):
        _read_csv(f)
    for f in [run / "lr_choice.json", run / "selection.json"] + sorted(run.glob("probe_*.json")):
        if f.exists():
            d = read_json(f)
            need = {"lr_choice.json": ("rule", "mean_reward_last", "chosen"), "selection.json": ("rule", "informative", "sets", "short", "pass_rates")}.get(
                f.name, ("task", "n", "n_problems", "pass_at_k", "format_rate"))
            missing = [k for k in need if k not in d]
            if missing:
                raise InputError(f"{f}: malformed (missing {', '.join(missing)})")


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def run_analysis(run: Path, resamples: int | None = None, seed: int | None = None, make_figures: bool = True) -> dict:
    """Everything is computed before anything is written: an input error leaves no partial output."""
    res = analyze(run, resamples=resamples, seed=seed)
    check_extras(run)  # read every other input now: a bad one must stop us before anything is written
    text_inputs = {f.name: file_sha256(f) for f in sorted(run.glob("eval_*.json"))}
    figs = figures(run, res) if make_figures else []
    rep = report(run, res, figs)
    out = {"entries": res["entries"], "resamples": res["resamples"], "ci": res["ci"], "seed": res["seed"], "n": res["n"],
           "k_max": res["k_max"], "n_problems": res["n_problems"],
           "provenance": {"inputs": text_inputs, "plan_sha256": file_sha256(ROOT / "PLAN.md"),
                          "config_hash": res["base"].get("provenance", {}).get("config_hash"),
                          "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
    _atomic_write(run / "report.md", rep)
    _atomic_write(run / "verdicts.json", json.dumps(out, indent=1) + "\n")  # last: the pipeline's "done" marker
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Bootstrap verdicts, coverage, crossover, figures and a report for one run.")
    p.add_argument("--run", required=True, help="the run folder holding eval_*.json")
    p.add_argument("--resamples", type=int, default=None, help="bootstrap resamples (default: the run's config, analyze.resamples)")
    p.add_argument("--seed", type=int, default=None, help="bootstrap seed (default: the run's config seed)")
    p.add_argument("--no-figures", action="store_true")
    a = p.parse_args(argv)
    run = Path(a.run)
    if not run.is_dir():
        print(f"analyze_b.py: --run {run}: no such folder", file=sys.stderr)
        return 2
    try:
        out = run_analysis(run, a.resamples, a.seed, not a.no_figures)
    except InputError as e:
        print(f"analyze_b.py: {e}", file=sys.stderr)
        return 1
    for e in out["entries"]:
        print(f"{e['condition']:>5} step {e['step']:>3} {e['scoring']:>6}: Δpass@1 {e['pass1_diff']:+.3f} "
              f"[{e['pass1_ci'][0]:+.3f}, {e['pass1_ci'][1]:+.3f}]  Δpass@{e['k_max']} {e['passk_diff']:+.3f} "
              f"[{e['passk_ci'][0]:+.3f}, {e['passk_ci'][1]:+.3f}]  rises={e['pass1_rises']} unchanged={e['ceiling_unchanged']}")
    print(f"wrote {run / 'verdicts.json'} and {run / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
