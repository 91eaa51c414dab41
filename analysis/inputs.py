"""What report.md shows of a run besides its statistics, read from the run folder once by the
analysis and kept in verdicts.json (`warnings`, `inputs`, `provenance.files`), so that the report prints the document
and opens no file: inputs made under other settings or missing, the learning rate, the selection,
the base-rate probes, the first test problem side by side, and each input file's provenance.
"""

from __future__ import annotations

from pathlib import Path

from analysis.run_files import read_json
from analysis.strategies import classify_strategy
from countdown import ARITH_DIGITS, Problem
from orchestration import study
from orchestration.provenance import file_sha256, plan_hashes, same_config, without_batching

SHOWN_RESPONSES = 3  # responses per model in the side-by-side view


def compared_settings(d: dict) -> dict:
    """What must match between an evaluation file and the base's (the adapter may not): the seed,
    model, task and eval settings, but the base's own sample count and, under eval.draw: sample, the
    batching settings, which change no sample (PLAN_CHANGES.md change 52)."""
    c = d.get("provenance", {}).get("config", {})
    c = without_batching(c) if isinstance(c.get("eval"), dict) else c
    return {
        "seed": c.get("seed"),
        "model": c.get("model"),
        "task": c.get("task"),
        "eval": {k: v for k, v in (c.get("eval") or {}).items() if k != "n_base"},
    }


def warnings(run: Path, res: dict) -> list[str]:
    """Inputs made under another PLAN.md or PLAN_CHANGES.md (the latter only where both files record
    it: older files do not), other evaluation settings or another config, and optional inputs that are
    missing (res: assemble.analyze's result)."""
    ri, design = res["inputs"], res["design"]
    base, rl = ri.base, ri.trained
    prov = base.get("provenance", {})
    now = plan_hashes()
    out = []

    for d in rl.values():
        p = d.get("provenance", {})
        if p.get("plan_sha256") != prov.get("plan_sha256"):
            out.append(f"{d['_file']} was made under a different PLAN.md than eval_base.json")
        if p.get("changes_sha256") and prov.get("changes_sha256") and p["changes_sha256"] != prov["changes_sha256"]:
            out.append(f"{d['_file']} was made under a different PLAN_CHANGES.md than eval_base.json")
        if compared_settings(d) != compared_settings(base):
            out.append(
                f"{d['_file']} records other evaluation settings (seed, model, task or eval) than eval_base.json"
            )
        if not same_config(p, prov):
            out.append(
                f"{d['_file']} was made with another config (hash {p.get('config_hash')}) "
                f"than eval_base.json ({prov.get('config_hash')})"
            )
    for key, name in (("plan_sha256", "PLAN.md"), ("changes_sha256", "PLAN_CHANGES.md")):
        if prov.get(key) and now[key] and prov[key] != now[key]:
            out.append(f"{name} has changed since the base was evaluated")
    cfg = design.cfg
    expected = ["selection.json"] + (["lr_choice.json"] if study.sweep_runs(cfg) else [])
    expected += [f"probe_{t}.json" for t in cfg.probe.tasks]
    trained = [(c, s) for c in design.conditions for s in design.seeds_of(c) if any(key[:2] == (c, s) for key in rl)]
    expected += [f"{design.train_name(c, s)}/train_log.csv" for c, s in trained]
    if cfg.train.dev_every > 0:
        expected += [f"{design.train_name(c, s)}/train_eval.csv" for c, s in trained]
    for es in ri.sets.values():
        b, docs, prefix = es.base, es.trained, es.prefix
        for d in ([b] if b is not None else []) + list(docs.values()):
            if not same_config(d.get("provenance"), prov):
                out.append(
                    f"{prefix}{d['_file']} was made with another config (hash {d.get('provenance', {}).get('config_hash')}) "
                    f"than eval_base.json ({prov.get('config_hash')})"
                )
    if (run / "evalsets").is_dir():
        out += [
            f"evalsets/{f.name}/ is not a registered evaluation set (config eval_sets): left out"
            for f in sorted((run / "evalsets").iterdir())
            if f.is_dir() and f.name not in design.eval_sets
        ]
    out += res["tokens"]["warnings"]
    if not design.tokens_enabled and res["tokens"]["rows"]:
        out.append(
            "token files are present but config tokens.enabled is off: they are reported as found, not checked for completeness"
        )
    for name in expected:
        if not (run / name).exists():
            out.append(f"{name} is missing: what it would show is left out of this report")
        elif name.endswith(".json") and not same_config(rec := read_json(run / name).get("provenance", {}), prov):
            out.append(
                f"{name} was made with another config (hash {rec.get('config_hash')}) "
                f"than eval_base.json ({prov.get('config_hash')})"
            )
    return out


def learning_rate(run: Path) -> dict | None:
    """lr_choice.json's rule, the measures it chose by, and the chosen rate."""
    if not (run / "lr_choice.json").exists():
        return None
    d = read_json(run / "lr_choice.json")
    return {
        "rule": d["rule"],
        "rule_name": d.get("rule_name"),
        "mean_reward_last": d["mean_reward_last"],
        "dev_loose_pass1": d.get("dev_loose_pass1"),
        "chosen": d["chosen"],
    }


def selection(run: Path) -> dict | None:
    """selection.json's rule, how many problems were informative, and the sets."""
    if not (run / "selection.json").exists():
        return None
    d = read_json(run / "selection.json")
    return {
        "rule": d["rule"],
        "informative": len(d["informative"]),
        "problems": len(d["pass_rates"]),
        "sets": d["sets"],
        "short": d["short"],
    }


def probes(run: Path) -> list[dict]:
    """Each probe_<task>.json's pass@1 and pass@n under both scorings and its format rate."""
    out = []
    for f in sorted(run.glob("probe_*.json")):
        d = read_json(f)
        n = str(d["n"])
        out.append(
            {
                "task": d["task"],
                "n_problems": d["n_problems"],
                "n": d["n"],
                "format_rate": d["format_rate"],
                **{
                    f"{sc}_pass{k}": d["pass_at_k"][sc][key]
                    for sc in ("strict", "loose")
                    for k, key in (("1", "1"), ("n", n))
                },
            }
        )
    return out


def first_problem(res: dict) -> dict | None:
    """The first test problem's first responses from the base and from each condition's last checkpoint
    (its lowest seed), each with its strategy where the task has one (analysis/strategies.classify_strategy)."""
    base, rl, design = res["inputs"].base, res["inputs"].trained, res["design"]
    first = base["problems"][0]
    if "responses" not in first:
        return None
    shown = [("base", base)]
    for c in design.conditions:
        keys = sorted((st, s) for cc, s, st in rl if cc == c)
        if keys:
            st = keys[-1][0]
            seed = min(s for stt, s in keys if stt == st)
            shown.append((f"{c} seed {seed} step {st}", rl[(c, seed, st)]))
    problem = Problem.from_row(first, base.get("task"))
    labelled = base.get("task") in ARITH_DIGITS and bool(problem.numbers)
    models = []
    for label, d in shown:
        p = d["problems"][0]
        models.append(
            {
                "label": label,
                "correct_strict": p["correct_strict"],
                "correct_loose": p["correct_loose"],
                "n": p["n"],
                "responses": [
                    {"text": r, "strategy": classify_strategy(problem, r)["product"] if labelled else None}
                    for r in p.get("responses", [])[:SHOWN_RESPONSES]
                ],
            }
        )
    return {"question": first["question"], "answer": first["answer"], "labelled": labelled, "models": models}


def files(run: Path) -> list[dict]:
    """Every input file's bytes hash and what its provenance says made it."""
    found = (
        sorted(run.glob("eval_*.json"))
        + sorted(run.glob("evalsets/*/eval_*.json"))
        + sorted(run.glob("tokens_*.json"))
        + sorted(run.glob("probe_*.json"))
        + [p for p in (run / "selection.json", run / "lr_choice.json") if p.exists()]
    )
    out = []
    for f in found:
        p = read_json(f).get("provenance", {})
        out.append(
            {
                "file": f.relative_to(run).as_posix(),
                "sha256": file_sha256(f),
                "stage_hash": p.get("stage_hash"),
                "plan_sha256": p.get("plan_sha256"),
                "changes_sha256": p.get("changes_sha256"),
                "revision": p.get("revision"),
                "made": p.get("time"),
            }
        )
    return out


def collect(run: Path, res: dict) -> dict:
    """verdicts.json's `inputs`: what the report shows of the run's inputs (their files' hashes and
    makers go in its `provenance`, with the other records of how the document was made)."""
    return {
        "n_expected": res["design"].n_expected(),
        "learning_rate": learning_rate(run),
        "selection": selection(run),
        "probes": probes(run),
        "first_problem": first_problem(res),
    }
