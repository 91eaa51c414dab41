"""Run the whole study in PLAN.md's registered order, skipping what is already done.

    python pipeline.py --config configs/smoke.yaml              # every stage, into results/smoke
    python pipeline.py --config configs/tiny.yaml --dry-run     # the plan: what is done, what is left
    python pipeline.py --config configs/tiny.yaml --stage eval  # one stage by hand (skipped if done)
    python pipeline.py --config configs/tiny.yaml --stage train --condition 16 --force   # redo it

Stages (PLAN.md, "Order of stages"):
  base      (only when model.build is set) train the CPU world's tiny base -> base_model/
  probe     base-rate checks                               -> probe_<task>.json
  select    pass rates of the first train problems; the 16 and 1 sets -> selection.json
  lr-sweep  short runs of the many condition per candidate -> lr_sweep/, lr_choice.json
  train     many, 16, 1; adapters at the checkpoints      -> train_<cond>/
  eval      base and every checkpoint                      -> eval_base.json, eval_<cond>_<step>.json
  analyze   bootstrap verdicts, coverage, figures, report  -> verdicts.json, report.md, figures/

A stage is done when its outputs exist and record the hash of the config keys and input files
it depends on; then it is skipped (with --stage too; --force deletes its outputs and redoes it).
Every output is written atomically, and training resumes from its last checkpoint, so a run
killed at any point and started again ends with the same adapters, counts and verdicts as one
that never stopped (time stamps and timings aside). RUN/manifest.json records the config, PLAN.md's sha256, the
code revision, package versions, and each stage's status and wall time.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import config as C

ROOT = Path(__file__).resolve().parent
STAGES = ["base", "probe", "select", "lr-sweep", "train", "eval", "analyze"]


def log(msg: str) -> None:
    print(f"[pipeline {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _hash_of(path: Path) -> str | None:
    try:
        return json.loads(path.read_text())["provenance"]["stage_hash"]
    except (FileNotFoundError, KeyError, json.JSONDecodeError, TypeError):
        return None


class Plan:
    """What each stage would produce for this config and run folder, and whether it is done."""

    def __init__(self, cfg: C.Config, run: Path):
        import grpo  # torch is imported only once the config has been validated

        self.cfg, self.run, self.g = cfg, run, grpo

    def steps_of(self) -> list[int]:
        return sorted(set(self.cfg.train.checkpoints))

    def lr(self) -> float | None:
        try:
            return self.g.read_lr(self.cfg, self.run)
        except FileNotFoundError:
            return None

    def train_hash(self, cond: str) -> str | None:
        lr = self.lr()
        try:
            _, inputs = self.g.condition_pool(self.cfg, cond, self.run)
        except (FileNotFoundError, ValueError):
            return None
        return None if lr is None else self.g.stage_hash(self.cfg, "train", {**inputs, "lr": lr})

    def evals(self) -> list[tuple[str, str | None]]:
        """(eval file name, adapter folder or None) for the base and every checkpoint."""
        out = [("eval_base.json", None)]
        for cond in self.cfg.train.conditions:
            for st in self.steps_of():
                adapter = self.run / f"train_{cond}" / f"step_{st:03d}"
                out.append((f"eval_{cond}_{st:03d}.json", str(adapter)))
        return out

    def eval_hash(self, adapter: str | None) -> str | None:
        if adapter is None:
            return self.g.stage_hash(self.cfg, "eval", {"adapter_sha256": None})
        sha = self.g.file_sha256(Path(adapter) / "adapter_model.safetensors")
        return None if sha is None else self.g.stage_hash(self.cfg, "eval", {"adapter_sha256": sha})

    def done(self, stage: str, condition: str | None = None) -> bool:
        cfg, run, g = self.cfg, self.run, self.g
        if stage == "base":
            if cfg.model.build is None:
                return True
            info = run / "base_model" / "tiny_base.json"
            return info.exists() and json.loads(info.read_text()).get("stage_hash") == g.stage_hash(cfg, "base")
        if stage == "probe":
            return all(_hash_of(run / f"probe_{t}.json") == g.stage_hash(cfg, "probe") for t in cfg.probe.tasks)
        if stage == "select":
            return _hash_of(run / "selection.json") == g.stage_hash(cfg, "select")
        if stage == "lr-sweep":
            return cfg.train.lr is not None or _hash_of(run / "lr_choice.json") == g.stage_hash(cfg, "lr-sweep")
        if stage == "train":
            conds = [condition] if condition else cfg.train.conditions
            for c in conds:
                h = self.train_hash(c)
                if h is None or _hash_of(run / f"train_{c}" / "done.json") != h:
                    return False
            return True
        if stage == "eval":
            hashes = [(name, self.eval_hash(a)) for name, a in self.evals()]  # hashes each adapter file once
            return all(h is not None and _hash_of(run / name) == h for name, h in hashes)
        if stage == "analyze":
            v = run / "verdicts.json"
            if not (v.exists() and (run / "report.md").exists()):
                return False
            d = json.loads(v.read_text())
            now = {f.name: g.file_sha256(f) for f in sorted(run.glob("eval_*.json"))}
            same_settings = d.get("resamples") == cfg.analyze.resamples and d.get("ci") == cfg.analyze.ci
            return d["provenance"]["inputs"] == now and bool(now) and same_settings
        raise ValueError(stage)


def clear(stage: str, run: Path, cfg: C.Config, condition: str | None) -> None:
    """--force: remove a stage's outputs so that it runs from scratch."""
    paths = {
        "base": [run / "base_model"],
        "probe": [run / f"probe_{t}.json" for t in cfg.probe.tasks],
        "select": [run / "selection.json"],
        "lr-sweep": [run / "lr_sweep", run / "lr_choice.json"],
        "train": [run / f"train_{c}" for c in ([condition] if condition else cfg.train.conditions)],
        "eval": list(run.glob("eval_*.json")),
        "analyze": [run / "verdicts.json", run / "report.md", run / "figures"],
    }[stage]
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def run_stage(stage: str, plan: Plan, condition: str | None, progress: bool) -> None:
    cfg, run, g = plan.cfg, plan.run, plan.g
    if stage == "base":
        import tiny_base

        info = tiny_base.train_base(cfg, run / "base_model", progress, stage_hash=g.stage_hash(cfg, "base"))
        log(f"base: {info['params']:,} parameters, loss {info['loss_first']:.2f} -> {info['loss_last_50']:.2f}")
        return
    base = g.model_path(cfg, run)
    if stage == "probe":
        g.probe(cfg, base, run, progress)
    elif stage == "select":
        r = g.select(cfg, base, run, progress)
        log(f"select: {len(r['informative'])} of {cfg.select.n_problems} problems informative")
    elif stage == "lr-sweep":
        if cfg.train.lr is not None:
            log(f"lr-sweep: not needed, train.lr = {cfg.train.lr:g} is set in the config")
            return
        r = g.lr_sweep(cfg, base, run, progress)
        log(f"lr-sweep: mean reward {r['mean_reward_last']} -> lr {r['chosen']:g}")
    elif stage == "train":
        lr = g.read_lr(cfg, run)
        for cond in [condition] if condition else cfg.train.conditions:
            if not plan.done("train", cond):
                pool, inputs = g.condition_pool(cfg, cond, run)
                out = run / f"train_{cond}"
                if (out / "last").exists():
                    log(f"train {cond}: resuming from {out / 'last'}")
                g.train(cfg, cond, pool, lr, out, base, inputs={**inputs, "lr": lr}, progress=progress)
                rows = g.read_log(out / "train_log.csv")
                log(f"train {cond}: {len(rows)} steps, reward {rows[0]['reward_mean']:.2f} -> {rows[-1]['reward_mean']:.2f}")
    elif stage == "eval":
        for name, adapter in plan.evals():
            if _hash_of(run / name) != plan.eval_hash(adapter):
                if adapter is not None and not Path(adapter).exists():
                    raise FileNotFoundError(f"{adapter} is missing: run the train stage first")
                r = g.evaluate(cfg, base, adapter, run / name, progress)
                log(f"eval {name}: strict pass@1 {r['pass_at_k']['strict']['1']:.3f}, loose pass@1 {r['pass_at_k']['loose']['1']:.3f}, "
                    f"loose pass@{cfg.eval.k_max} {r['pass_at_k']['loose'][str(cfg.eval.k_max)]:.3f}, format {r['format_rate']:.3f} ({r['seconds']:.0f} s)")
    elif stage == "analyze":
        import analyze_b

        out = analyze_b.run_analysis(run)
        for e in out["entries"]:
            log(f"analyze: {e['condition']} step {e['step']} {e['scoring']}: pass@1 rises={e['pass1_rises']}, "
                f"ceiling unchanged={e['ceiling_unchanged']}, ceiling falls={e['ceiling_falls']}")


def write_manifest(run: Path, cfg: C.Config, g, stages: dict) -> None:
    g.atomic_write_json(run / "manifest.json", {
        "config": C.to_dict(cfg), "config_hash": C.digest(C.to_dict(cfg)),
        "plan_sha256": g.file_sha256(ROOT / "PLAN.md"), "revision": g.code_revision(), "versions": g.versions(),
        "stage_order": STAGES, "stages": stages,
    })


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run the study's stages in PLAN.md's order.")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/smoke.yaml")
    p.add_argument("--out", default=None, help="run folder (default: results/<config name>)")
    p.add_argument("--stage", choices=STAGES, default=None, help="run only this stage (its inputs must exist)")
    p.add_argument("--condition", default=None, help="with --stage train: only this condition (many, 16, 1)")
    p.add_argument("--force", action="store_true", help="with --stage: delete the stage's outputs and run it again")
    p.add_argument("--dry-run", action="store_true", help="print the plan (done / to do) and exit")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. train.steps=10")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    a = p.parse_args(argv)
    try:
        cfg = C.load(a.config, a.set)
        if a.force and not a.stage:
            raise C.ConfigError("--force needs --stage (which stage to redo); delete the run folder to redo everything")
        if a.condition and a.stage != "train":
            raise C.ConfigError("--condition goes with --stage train")
        if a.condition and a.condition not in cfg.train.conditions:
            raise C.ConfigError(f"--condition {a.condition!r}: not in train.conditions {cfg.train.conditions}")
    except C.ConfigError as e:
        print(f"pipeline.py: {e}", file=sys.stderr)
        return 2
    run = Path(a.out) if a.out else ROOT / "results" / Path(a.config).stem
    import grpo

    grpo.setup_torch(cfg)
    plan = Plan(cfg, run)
    todo = [a.stage] if a.stage else [s for s in STAGES if not (s == "base" and cfg.model.build is None)]
    if a.dry_run:
        print(f"run folder: {run}")
        for s in STAGES:
            if s == "base" and cfg.model.build is None:
                continue
            state = "done" if run.exists() and plan.done(s) else "to do"
            print(f"  {s:<9} {state}")
        return 0
    run.mkdir(parents=True, exist_ok=True)
    manifest = run / "manifest.json"
    stages = json.loads(manifest.read_text()).get("stages", {}) if manifest.exists() else {}
    t_all = time.perf_counter()
    for s in todo:
        if a.force:
            clear(s, run, cfg, a.condition)
        if plan.done(s, a.condition) and not a.force:
            log(f"{s}: done, skipped")
            stages[s] = {**stages.get(s, {}), "status": "done"}
            continue
        log(f"{s}: running")
        stages[s] = {"status": "running", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_manifest(run, cfg, grpo, stages)
        t0 = time.perf_counter()
        try:
            run_stage(s, plan, a.condition, not a.quiet)
        except (FileNotFoundError, ValueError, RuntimeError, C.ConfigError) as e:
            stages[s] = {"status": "failed", "error": str(e), "seconds": round(time.perf_counter() - t0, 1)}
            write_manifest(run, cfg, grpo, stages)
            print(f"pipeline.py: stage {s} failed: {e}", file=sys.stderr)
            return 1
        stages[s] = {"status": "done", "seconds": round(time.perf_counter() - t0, 1), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_manifest(run, cfg, grpo, stages)
        log(f"{s}: done in {stages[s]['seconds']:.1f} s")
    log(f"all done in {time.perf_counter() - t_all:.1f} s; see {run / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
