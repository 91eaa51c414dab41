"""What each stage of a run folder produces for a config, and whether it is done: the Plan (every
output's provenance file and the hash it should record; missing, damaged, done, out of date or made
under other settings), the train/eval/token jobs still to do, and the checks before a stage runs
(refuse foreign outputs, move aside stale and damaged ones). No torch; pipeline.py runs the stages.
"""
from __future__ import annotations

from pathlib import Path

import config
import provenance
import study
from jobs import Aside, Job, Refused

STAGES = ["base", "probe", "select", "lr-sweep", "train", "eval", "tokens", "analyze"]
JOB_STAGES = ("train", "eval", "tokens")


class Plan:
    """What each stage produces for this config and run folder, and whether it is done, out of
    date (made from other inputs: redo it) or foreign (made under other settings: refuse)."""

    def __init__(self, cfg: config.Config, run: Path, config_path: str, sets: list[str]):
        self.cfg, self.run = cfg, run
        self.config_path, self.sets = config_path, sets
        self._sha: dict[tuple, str | None] = {}  # adapter sha256 by (path, mtime, size): each adapter read once

    def adapter_sha256(self, adapter: Path) -> str | None:
        f = adapter / "adapter_model.safetensors"
        try:
            st = f.stat()
        except OSError:
            return None
        key = (str(f), st.st_mtime_ns, st.st_size)
        if key not in self._sha:
            self._sha[key] = provenance.file_sha256(f)
        return self._sha[key]

    # ------------------------------------------------------------------ the design

    def steps_of(self) -> list[int]:
        return sorted(set(self.cfg.train.checkpoints))

    def train_units(self, condition: str | None = None) -> list[tuple[str, int]]:
        return [(c, s) for c in self.cfg.conditions if condition in (None, c) for s in config.seeds_of(self.cfg, c)]

    def adapters(self, models: str = "all") -> list[Path]:
        """Adapter folders: every checkpoint (all), the last checkpoint of every seed (final), or
        of the first seed only (final-first-seed)."""
        if models == "base":
            return []
        steps = self.steps_of() if models == "all" else self.steps_of()[-1:]
        return [study.adapter_dir(self.run, c, s, st) for c in self.cfg.conditions
                for s in config.seeds_of(self.cfg, c)[:None if models != "final-first-seed" else 1] for st in steps]

    def evals(self) -> list[tuple[str, Path, Path | None]]:
        """(evaluation set, eval file, adapter folder or None) for the base and every model each set evaluates."""
        out = []
        sets = [("test", "all")] + [(name, es.models) for name, es in self.cfg.eval_sets.items()]
        for name, models in sets:
            folder = study.eval_dir(self.run, name)
            out.append((name, folder / "eval_base.json", None))
            out += [(name, folder / study.eval_name(a), a) for a in self.adapters(models)]
        return out

    def tokens(self) -> list[tuple[Path, Path]]:
        """(tokens file, adapter folder) for every trained checkpoint, when tokens.enabled."""
        if not self.cfg.tokens.enabled:
            return []
        return [(self.run / study.tokens_name(a), a) for a in self.adapters("all")]

    # ------------------------------------------------------------------ hashes

    def train_hash(self, cond: str, seed: int) -> str | None:
        try:
            _, _, inputs = study.train_inputs(self.cfg, cond, seed, self.run)
        except (FileNotFoundError, ValueError):
            return None
        return provenance.stage_hash(self.cfg, "train", inputs)

    def eval_hash(self, adapter: Path | None, eval_set: str = "test", stage: str = "eval") -> str | None:
        sha = None if adapter is None else self.adapter_sha256(adapter)
        if adapter is not None and sha is None:
            return None
        extra = study.eval_inputs(self.cfg, sha, eval_set) if stage == "eval" else {"adapter_sha256": sha}
        return provenance.stage_hash(self.cfg, stage, extra)

    def outputs(self, stage: str) -> list[tuple[Path, Path, str | None]]:
        """(output to move aside, the file recording its provenance, the hash it should record)."""
        run, cfg = self.run, self.cfg
        if stage == "base":
            if not study.builds_base(cfg):
                return []
            h = provenance.stage_hash(cfg, "base")
            return [(run / "base_model", run / "base_model" / "build.json", h)]
        if stage == "probe":
            h = provenance.stage_hash(cfg, "probe")
            return [(run / f"probe_{t}.json",) * 2 + (h,) for t in cfg.probe.tasks]
        if stage == "select":
            return [(run / "selection.json",) * 2 + (provenance.stage_hash(cfg, "select", {"sizes": study.selection_sizes(cfg)}),)]
        if stage == "lr-sweep":
            if cfg.train.lr is not None:
                return []
            inputs = {"problems": "all", "seed": cfg.train.seeds[0]}
            return [(run / "lr_choice.json",) * 2 + (provenance.stage_hash(cfg, "lr-sweep", inputs),)]
        if stage == "train":
            out = []
            for c, s in self.train_units():
                d = study.train_dir(run, c, s)
                marker = d / "done.json" if (d / "done.json").exists() else d / "last" / "state.json"
                out.append((d, marker, self.train_hash(c, s)))
            return out
        if stage == "eval":
            return [(f, f, self.eval_hash(a, es)) for es, f, a in self.evals()]
        if stage == "tokens":
            return [(f, f, self.eval_hash(a, stage="tokens")) for f, a in self.tokens()]
        return []

    def state(self, stage: str, marker: Path, want: str | None) -> str:
        """missing | damaged (a file cut short or unreadable: redo it) | done | stale (same settings,
        other inputs) | foreign (other settings)."""
        if not marker.exists():
            return "missing"
        if self.damage(stage, marker):
            return "damaged"
        rec = provenance.read_json(marker)
        got = (rec or {}).get("stage_hash") if stage == "base" else provenance.recorded_hash(marker)
        if want is not None and got == want:
            return "done"
        if stage == "base":
            return "foreign"  # its inputs are the config alone
        prov = (rec or {}).get("provenance")
        if not prov or not isinstance(prov.get("config"), dict):
            return "foreign"
        try:
            same = provenance.hashed_settings(prov["config"], stage) == provenance.hashed_settings(config.to_dict(self.cfg), stage)
        except (KeyError, TypeError):
            same = False
        return "stale" if same else "foreign"

    def damage(self, stage: str, marker: Path) -> str | None:
        """What is wrong with an output that exists, or None: its record is not valid JSON, or (base,
        train) a weights file is cut short or missing: the base's, a checkpoint's, the resume point's."""
        bad = provenance.json_problem(marker)
        if bad:
            return f"{marker}: {bad}"
        if stage == "base":
            return provenance.model_folder_problem(marker.parent)  # RUN/base_model/build.json
        if stage == "train" and marker.name == "done.json":  # every checkpoint the run itself was asked for
            steps = ((provenance.read_json(marker).get("provenance") or {}).get("config") or {}).get("train", {}).get("checkpoints", [])
            return next((bad for st in steps if (bad := provenance.adapter_problem(marker.parent / f"step_{st:03d}"))), None)
        if stage == "train":  # the resume point RUN/train_*/last/state.json: its adapter and optimizer state
            bad = provenance.torch_file_problem(marker.parent / "optimizer.pt")
            return provenance.adapter_problem(marker.parent) or (bad and f"{marker.parent / 'optimizer.pt'}: {bad}")
        return None

    def why(self, stage: str, marker: Path) -> str:
        rec = provenance.read_json(marker)
        if stage == "base":
            return "another model build (model.build / model.qwen_shape / task)"
        return provenance.differing_setting((rec or {}).get("provenance"), self.cfg, stage)

    # ------------------------------------------------------------------ done

    def analyze_done(self) -> bool:
        """verdicts.json and report.md exist, were made from what the evaluation and token files now
        compute (their content hashes: timings and time stamps do not count) and under this config's
        analyze settings."""
        v = provenance.read_json(self.run / "verdicts.json")
        if not v or not (self.run / "report.md").exists():
            return False
        run = self.run
        files = sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")) + sorted(run.glob("tokens_*.json"))
        now = {f.relative_to(run).as_posix(): provenance.content_sha256(f) for f in files}  # what analyze_b records
        made = v.get("provenance", {})
        return bool(now) and made.get("inputs") == now and made.get("analyze") == config.to_dict(self.cfg.analyze)

    def done(self, stage: str, condition: str | None = None) -> bool:
        if stage == "analyze":
            return self.analyze_done()
        if stage == "train" and condition:
            return all(self.state("train", study.train_dir(self.run, c, s) / "done.json", self.train_hash(c, s)) == "done"
                       for c, s in self.train_units(condition))
        if stage == "train":
            return all(self.state(stage, d / "done.json", h) == "done" for d, _, h in self.outputs(stage))
        return all(self.state(stage, m, h) == "done" for _, m, h in self.outputs(stage))

    # ------------------------------------------------------------------ jobs

    def base_argv(self, cmd: str) -> list[str]:
        argv = [cmd, "--config", self.config_path, "--run", str(self.run)]
        for s in self.sets:
            argv += ["--set", s]
        return argv

    def jobs(self, stages: list[str], condition: str | None = None) -> list[Job]:
        """The train and eval jobs not yet done, in the registered order."""
        out: list[Job] = []
        if "train" in stages:
            for c, s in self.train_units(condition):
                if self.state("train", study.train_dir(self.run, c, s) / "done.json", self.train_hash(c, s)) != "done":
                    out.append(Job("train", f"train {c} s{s}", self.base_argv("train") + ["--condition", c, "--seed", str(s)],
                                   steps=self.cfg.train.steps))
        pending = {j.name for j in out}

        def needs(adapter: Path) -> tuple[str, list[str]]:
            identity = study.adapter_identity(adapter)
            train_name = f"train {identity['condition']} s{identity['train_seed']}"
            return f"{identity['condition']} s{identity['train_seed']} step {identity['step']}", [train_name] if train_name in pending else []

        if "eval" in stages:
            for es, f, adapter in self.evals():
                if self.state("eval", f, self.eval_hash(adapter, es)) == "done":
                    continue
                label, opt = ("eval", []) if es == "test" else (f"eval-{es}", ["--eval-set", es])
                size = (self.cfg.task.n_test * self.cfg.eval.n if es == "test"
                        else self.cfg.eval_sets[es].n_problems * self.cfg.eval_sets[es].n)
                if adapter is None:
                    out.append(Job("eval", f"{label} base", self.base_argv("eval") + opt, samples=size))
                    continue
                what, need = needs(adapter)
                out.append(Job("eval", f"{label} {what}", self.base_argv("eval") + opt + ["--adapter", str(adapter)], needs=need,
                               samples=size))
        if "tokens" in stages:
            for f, adapter in self.tokens():
                if self.state("tokens", f, self.eval_hash(adapter, stage="tokens")) != "done":
                    what, need = needs(adapter)
                    out.append(Job("tokens", f"tokens {what}", self.base_argv("tokens") + ["--adapter", str(adapter)], needs=need,
                                   samples=3 * self.cfg.tokens.n_problems))  # one greedy answer, two forwards
        return out


# ============================================================================= the run folder


def check_stage(plan: Plan, stage: str, force: bool, aside: Aside) -> None:
    """Before a stage runs: refuse outputs made under other settings (unless force); move aside
    outputs made from other inputs, and (train, eval) folders and files the design no longer has."""
    for path, marker, want in plan.outputs(stage):
        st = plan.state(stage, marker, want)
        if st == "damaged":
            aside.move(path, f"damaged, so it is redone: {plan.damage(stage, marker)}")
            continue
        if st == "foreign" and not force:
            raise Refused(f"{marker}: made under {plan.why(stage, marker)}; refusing to overwrite it "
                          f"(use --force to replace it and what depends on it, or --out another folder)")
        if st in ("foreign", "stale") and stage != "base":
            aside.move(path, "made under other settings (--force)" if st == "foreign" else "made from other inputs")
        elif st == "foreign" and stage == "base":
            aside.move(path, "another model build (--force)")
    run = plan.run
    if stage == "train":
        expected = {study.train_dir(run, c, s).name for c, s in plan.train_units()}
        for d in sorted(run.glob("train_*")):
            if d.is_dir() and d.name not in expected:
                aside.move(d, "not in this config's conditions x their seeds")
    if stage in ("eval", "analyze"):
        expected = {f for _, f, _ in plan.evals()}
        for f in sorted(run.glob("eval_*.json")) + sorted(run.glob("evalsets/*/eval_*.json")):
            if f not in expected:
                aside.move(f, "not an evaluation this config expects (another design or old file names)")
    if stage in ("tokens", "analyze"):
        expected = {f for f, _ in plan.tokens()}
        for f in sorted(run.glob("tokens_*.json")):
            if f not in expected:
                aside.move(f, "not a token-level comparison this config expects")
    if stage == "lr-sweep" and plan.cfg.train.lr is None and (run / "lr_sweep").exists() and plan.state(
            stage, run / "lr_choice.json", plan.outputs(stage)[0][2]) != "done":
        for d in sorted((run / "lr_sweep").glob("lr_*")):
            m = d / "done.json" if (d / "done.json").exists() else d / "last" / "state.json"
            if m.exists() and plan.state("lr-sweep", m, plan.outputs(stage)[0][2]) == "foreign":
                if not force:
                    raise Refused(f"{m}: made under {plan.why('lr-sweep', m)}; refusing to overwrite it (use --force, or --out another folder)")
                aside.move(d, "made under other settings (--force)")


def registered_stages(cfg: config.Config) -> list[str]:
    """PLAN.md's order of stages, less those this config has none of (its own base; the token level)."""
    return [s for s in STAGES if not (s == "base" and not study.builds_base(cfg)) and not (s == "tokens" and not cfg.tokens.enabled)]
