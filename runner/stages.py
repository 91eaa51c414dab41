"""What each stage of a run folder produces for a config, and whether it is done: the Plan (every
output's provenance file and the hash it should record; missing, damaged, done, out of date or made
under other settings), and the train/eval/token jobs still to do; runner/stage_checks.py holds the
checks before a stage runs. No torch; pipeline.py runs the stages.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from orchestration import cli, config, provenance, study
from runner.jobs import Job

STAGES = ["base", "probe", "select", "lr-sweep", "train", "eval", "tokens", "analyze"]
JOB_STAGES = ("train", "eval", "tokens")


class Plan:
    """What each stage produces for this config and run folder, and whether it is done, out of
    date (made from other inputs: redo it) or foreign (made under other settings: refuse)."""

    def __init__(self, cfg: config.Config, run: Path, config_path: str, sets: list[str]):
        self.cfg, self.run = cfg, run
        self.config_path, self.sets = config_path, sets
        self._sha: dict[tuple, str | None] = {}  # adapter sha256 by (path, mtime, size): each adapter read once
        self._kept: dict[tuple, bool] = {}  # weights_not_kept by (condition, seed)
        self._cost = None

    def cost_model(self):
        """cost_model.CostModel for a GPU config whose model's shape is known (the config and a local
        config.json, or the registered shape: no weights needed); None on a CPU config."""
        if self._cost is None:
            from runner import cost_model

            self._cost = (cost_model.for_config(self.cfg, self.run),)
        return self._cost[0]

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
        return [
            study.adapter_dir(self.run, c, s, st)
            for c in self.cfg.conditions
            for s in config.seeds_of(self.cfg, c)[: None if models != "final-first-seed" else 1]
            for st in steps
        ]

    def evals(self) -> list[tuple[str, Path, Path | None]]:
        """(evaluation set, eval file, adapter folder or None) for the base and every model each set evaluates."""
        out = []
        sets = [("test", "all")] + [(name, es.models) for name, es in self.cfg.eval_sets.items()]
        for name, models in sets:
            folder = study.eval_dir(self.run, name)
            out.append((name, folder / "eval_base.json", None))
            out += [(name, folder / study.adapter_eval_name(a), a) for a in self.adapters(models)]
        return out

    def tokens(self) -> list[tuple[Path, Path]]:
        """(tokens file, adapter folder) for every trained checkpoint, when tokens.enabled."""
        if not self.cfg.tokens.enabled:
            return []
        return [(self.run / study.adapter_tokens_name(a), a) for a in self.adapters("all")]

    # ------------------------------------------------------------------ hashes

    def train_hash(self, cond: str, seed: int) -> str | None:
        """None when an input is missing, unreadable or made under other settings (never read then)."""
        if self.foreign_input("train"):
            return None
        try:
            _, _, inputs = study.train_inputs(self.cfg, cond, seed, self.run)
        except (FileNotFoundError, ValueError):
            return None
        return provenance.stage_hash(self.cfg, "train", inputs)

    def foreign_input(self, stage: str) -> Path | None:
        """The first file an earlier stage made that `stage`'s hash reads (train: selection.json, and
        lr_choice.json under the LR sweep) and that is unreadable or made under other settings: a hash
        computed from it would be meaningless (its problem ids need not even be this task's)."""
        if stage != "train":
            return None
        reads = [("select", self.run / "selection.json")] if study.selection_sizes(self.cfg) else []
        reads += [("lr-sweep", self.run / "lr_choice.json")] if study.sweep_runs(self.cfg) else []
        return next(
            (f for s, f in reads if f.exists() and (provenance.json_problem(f) or self.other_settings(s, f))), None
        )

    def eval_hash(
        self, adapter: Path | None, eval_set: str = "test", stage: str = "eval", recorded: Path | None = None
    ) -> str | None:
        """The hash an evaluation (or token comparison) of `adapter` should record. An adapter whose weights
        were not kept (weights_not_kept: a committed run) counts by the sha256 its `recorded` output names:
        the chain is recorded, and a hash of what is not there cannot be computed."""
        sha = None if adapter is None else self.adapter_sha256(adapter)
        if adapter is not None and sha is None and recorded is not None and self.weights_not_kept(adapter):
            rec = provenance.read_json(recorded) or {}
            sha = ((rec.get("provenance") or {}).get("inputs") or {}).get("adapter_sha256")
        if adapter is not None and sha is None:
            return None
        extra = study.eval_inputs(self.cfg, sha, eval_set) if stage == "eval" else {"adapter_sha256": sha}
        return provenance.stage_hash(self.cfg, stage, extra)

    def weights_not_kept(self, adapter: Path) -> bool:
        """The adapter's training run is finished, under this config, and whole but for absent weights files
        (state "weightless": results/ keeps few weights)."""
        identity = study.adapter_identity(adapter)
        if identity["condition"] is None or (adapter / "adapter_model.safetensors").exists():
            return False
        key = (identity["condition"], identity["train_seed"])
        if key not in self._kept:
            d = study.train_dir(self.run, *key)
            self._kept[key] = self.state("train", d / "done.json", self.train_hash(*key)) == "weightless"
        return self._kept[key]

    def weights_needed(self) -> set[Path]:
        """Training runs without their weights (weights_not_kept) that an evaluation or token comparison
        still to do reads: these are trained again; the others stay done."""
        reads = [("eval", f, a, es) for es, f, a in self.evals()] + [("tokens", f, a, "test") for f, a in self.tokens()]
        return {
            a.parent
            for st, f, a, es in reads
            if a is not None
            and self.weights_not_kept(a)
            and self.state(st, f, self.eval_hash(a, es, st, recorded=f)) != "done"
        }

    def base_needed(self) -> bool:
        """Does a stage still to do load the base (a probe, the selection, the LR sweep, a job)?"""
        early = [s for s in ("probe", "select", "lr-sweep") if s in registered_stages(self.cfg)]
        return any(not self.done(s) for s in early) or bool(
            self.jobs([s for s in JOB_STAGES if s in registered_stages(self.cfg)])
        )

    def base_remade(self) -> bool:
        """Is the base here without its weights (a committed run, a fresh clone) while a stage still to do
        loads it? Then the next run of the base stage builds it again."""
        weightless = [self.state("base", m, h) for _, m, h in self.outputs("base")] == ["weightless"]
        return weightless and self.base_needed()

    def outputs(self, stage: str, hashes: bool = True) -> list[tuple[Path, Path, str | None]]:
        """(output to move aside, the file recording its provenance, the hash it should record; None
        without `hashes`: then nothing but the config is read)."""
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
            return [
                (run / "selection.json",) * 2
                + (provenance.stage_hash(cfg, "select", {"sizes": study.selection_sizes(cfg)}),)
            ]
        if stage == "lr-sweep":
            if not study.sweep_runs(cfg):
                return []
            inputs = {"problems": "all", "seed": cfg.train.seeds[0]}
            return [(run / "lr_choice.json",) * 2 + (provenance.stage_hash(cfg, "lr-sweep", inputs),)]
        if stage == "train":
            out = []
            for c, s in self.train_units():
                d = study.train_dir(run, c, s)
                marker = d / "done.json" if (d / "done.json").exists() else d / "last" / "state.json"
                out.append((d, marker, self.train_hash(c, s) if hashes else None))
            return out
        if stage == "eval":
            return [(f, f, self.eval_hash(a, es, recorded=f) if hashes else None) for es, f, a in self.evals()]
        if stage == "tokens":
            return [(f, f, self.eval_hash(a, stage="tokens", recorded=f) if hashes else None) for f, a in self.tokens()]
        return []

    def state(self, stage: str, marker: Path, want: str | None) -> str:
        """missing | damaged (a file cut short or unreadable: redo it) | done | weightless (train: done, its
        weights not kept) | stale (same settings, other inputs) | foreign (other settings). Settings before
        weights: an output made under other settings is foreign whether or not its weights are there."""
        if not marker.exists():
            return "missing"
        if provenance.json_problem(marker):
            return "damaged"
        got = provenance.read_json(marker).get("stage_hash") if stage == "base" else provenance.recorded_hash(marker)
        if want is None or got != want:
            if self.other_settings(stage, marker):
                return "foreign"
        faults = self.faults(stage, marker)
        if (
            faults
            and stage in ("base", "train")
            and want is not None
            and got == want
            and all(f.endswith(WEIGHTS_ABSENT) for f in faults)
        ):
            return (
                "weightless"  # made, its weights not kept (a committed run): done unless a stage still to do reads them
            )
        if faults:
            return "damaged"
        return "done" if want is not None and got == want else "stale"

    def other_settings(self, stage: str, marker: Path) -> list[str]:
        """The settings (provenance.fix_order: model, task, the rest) on which an existing output records
        other settings than this config's, as `key=value there, value here`; [] when they agree. Reads
        the record alone (no hash of an input): the check before anything is written."""
        rec = provenance.read_json(marker) or {}
        if stage != "base":
            return provenance.differing_settings(rec.get("provenance"), self.cfg, stage)
        got = rec.get("stage_hash")
        if got == provenance.stage_hash(self.cfg, "base"):
            return []
        manifest = provenance.read_json(self.run / "manifest.json") or {}
        for made in [manifest, *(manifest.get("earlier") or [])]:  # build.json records its hash; a manifest, the config
            try:
                ok = config.digest({**provenance.hashed_settings(made["config"], "base"), "extra": None}) == got
            except (KeyError, TypeError):
                continue
            if ok and (keys := provenance.differing_settings(made, self.cfg, "base")):
                return keys
        return ["another model build (model.build / model.qwen_shape / model.gguf / the task's splits)"]

    def damage(self, stage: str, marker: Path) -> str | None:
        """What is wrong with an output that exists, or None (the first of self.faults)."""
        return next(iter(self.faults(stage, marker)), None)

    def faults(self, stage: str, marker: Path) -> list[str]:
        """Everything wrong with an output that exists: its record is not valid JSON, or (base, train) a
        weights file is cut short or missing: the base's, each checkpoint's, the resume point's."""
        bad = provenance.json_problem(marker)
        if bad:
            return [f"{marker}: {bad}"]
        if stage == "base":
            return [x for x in [provenance.model_folder_problem(marker.parent)] if x]  # RUN/base_model/build.json
        if (
            stage in ("train", "lr-sweep") and marker.name == "done.json"
        ):  # its log; every checkpoint the run was asked for
            done = provenance.read_json(marker)
            bad = log_problem(marker.parent / "train_log.csv", done.get("steps"))
            if bad or stage == "lr-sweep":
                return [bad] if bad else []
            steps = ((done.get("provenance") or {}).get("config") or {}).get("train", {}).get("checkpoints", [])
            return [bad for st in steps if (bad := provenance.adapter_problem(marker.parent / f"step_{st:03d}"))]
        if (
            stage in ("train", "lr-sweep") and marker.name == "state.json"
        ):  # a resume point RUN/[lr_sweep/]*/last/: adapter, optimizer
            bad = provenance.torch_file_problem(marker.parent / "optimizer.pt")
            return [
                x
                for x in (provenance.adapter_problem(marker.parent), bad and f"{marker.parent / 'optimizer.pt'}: {bad}")
                if x
            ]
        return []

    def sweep_damage(self) -> list[tuple[Path, str]]:
        """The LR sweep's candidate runs (RUN/lr_sweep/[<condition>/]lr_<rate>/) that are damaged: a
        done.json or log cut short, or a resume point whose adapter or optimizer state is; with why."""
        folder = self.run / "lr_sweep"
        out = []
        for d in sorted(folder.glob("lr_*")) + sorted(folder.glob("*/lr_*")) if folder.is_dir() else []:
            marker = d / "done.json" if (d / "done.json").exists() else d / "last" / "state.json"
            if d.is_dir() and marker.exists() and (bad := self.damage("lr-sweep", marker)):
                out.append((d, bad))
        return out

    def why(self, stage: str, marker: Path) -> str:
        rec = provenance.read_json(marker)
        return next(iter(self.other_settings(stage, marker)), None) or provenance.differing_setting(
            (rec or {}).get("provenance"), self.cfg, stage
        )

    # ------------------------------------------------------------------ done

    def analyze_done(self) -> bool:
        """verdicts.json and report.md exist, were made from what the evaluation and token files now
        compute (their content hashes: timings and time stamps do not count) and under this config's
        analyze settings (keys added since at their "as before" value do not count)."""
        v = provenance.read_json(self.run / "verdicts.json")
        if not v or not (self.run / "report.md").exists():
            return False
        made = v.get("provenance", {})
        if provenance.analyze_identity(made.get("analyze")) != provenance.analyze_identity(
            config.to_dict(self.cfg.analyze)
        ):
            return False  # decided before hashing the inputs (hundreds of MB in the larger studies)
        run = self.run
        files = (
            sorted(run.glob("eval_*.json"))
            + sorted(run.glob("evalsets/*/eval_*.json"))
            + sorted(run.glob("tokens_*.json"))
        )
        names = {f.relative_to(run).as_posix() for f in files}
        if not files or set(made.get("inputs") or {}) != names:
            return False
        now = {
            f.relative_to(run).as_posix(): provenance.content_sha256(f) for f in files
        }  # what analysis.assemble records
        return made.get("inputs") == now

    def done(self, stage: str, condition: str | None = None) -> bool:
        if stage == "analyze":
            return self.analyze_done()
        if stage == "train" and condition:
            return all(
                self.state("train", study.train_dir(self.run, c, s) / "done.json", self.train_hash(c, s)) == "done"
                for c, s in self.train_units(condition)
            )
        if stage == "train":
            return all(self.state(stage, d / "done.json", h) == "done" for d, _, h in self.outputs(stage))
        ok = (
            ("done", "weightless") if stage == "base" else ("done",)
        )  # a base whose weights were not kept: done unless read
        return all(self.state(stage, m, h) in ok for _, m, h in self.outputs(stage))

    # ------------------------------------------------------------------ jobs

    def command(self, stage: str | None = None, force: bool = False) -> str:
        """The pipeline command on this run folder and config: the whole study, or one stage."""
        return cli.pipeline_command(self.config_path, self.run, self.sets, stage, force)

    def remake(self, path: Path) -> str:
        """The command that makes `path` again, when it is damaged: an evaluation or token file's own
        grpo.py job (it moves the old file aside), a training run's file the train stage's after the
        run is moved aside, another stage's output that stage with --force; else the whole pipeline."""
        path = Path(path)
        for j in self.jobs(["eval", "tokens"], done_too=True):
            if Path(j.output) == path:
                return j.command()
        rel = path.relative_to(self.run).parts if path.is_relative_to(self.run) else ()
        if rel and rel[0].startswith("train_"):
            aside = shlex.quote(str(self.run / "superseded" / "by-hand"))
            return f"mkdir -p {aside} && mv {shlex.quote(str(self.run / rel[0]))} {aside}/ && {self.command()}"
        for stage in ("probe", "select", "lr-sweep"):
            if any(path in (p, m) for p, m, _ in self.outputs(stage)) or (
                stage == "lr-sweep" and rel[:1] == ("lr_sweep",)
            ):
                return self.command(stage, force=True)
        return self.command()

    def base_argv(self, cmd: str) -> list[str]:
        argv = [cmd, "--config", self.config_path, "--run", str(self.run)]
        for s in self.sets:
            argv += ["--set", s]
        return argv

    def jobs(self, stages: list[str], condition: str | None = None, done_too: bool = False) -> list[Job]:
        """The train and eval jobs not yet done (done_too: every job of the design), in the registered order."""
        out: list[Job] = []
        needed = self.weights_needed() if "train" in stages and not done_too else set()
        if "train" in stages:
            for c, s in self.train_units(condition):
                st = self.state("train", study.train_dir(self.run, c, s) / "done.json", self.train_hash(c, s))
                if (
                    done_too
                    or st not in ("done", "weightless")
                    or (st == "weightless" and study.train_dir(self.run, c, s) in needed)
                ):
                    out.append(
                        Job(
                            "train",
                            f"train {c} s{s}",
                            self.base_argv("train") + ["--condition", c, "--seed", str(s)],
                            steps=self.cfg.train.steps,
                            output=str(study.train_dir(self.run, c, s)),
                        )
                    )
        pending = {j.name for j in out}

        def needs(adapter: Path) -> tuple[str, list[str]]:
            identity = study.adapter_identity(adapter)
            train_name = f"train {identity['condition']} s{identity['train_seed']}"
            return (
                f"{identity['condition']} s{identity['train_seed']} step {identity['step']}",
                [train_name] if train_name in pending else [],
            )

        if "eval" in stages:
            for es, f, adapter in self.evals():
                if not done_too and self.state("eval", f, self.eval_hash(adapter, es, recorded=f)) == "done":
                    continue
                label, opt = ("eval", []) if es == "test" else (f"eval-{es}", ["--eval-set", es])
                size = (
                    self.cfg.task.n_test
                    * ((self.cfg.eval.n_base or self.cfg.eval.n) if adapter is None else self.cfg.eval.n)
                    if es == "test"
                    else self.cfg.eval_sets[es].n_problems * self.cfg.eval_sets[es].n
                )  # the base's test evaluation draws eval.n_base per problem (method/evaluate.py)
                if adapter is None:
                    out.append(Job("eval", f"{label} base", self.base_argv("eval") + opt, samples=size, output=str(f)))
                    continue
                what, need = needs(adapter)
                out.append(
                    Job(
                        "eval",
                        f"{label} {what}",
                        self.base_argv("eval") + opt + ["--adapter", str(adapter)],
                        needs=need,
                        samples=size,
                        output=str(f),
                    )
                )
        if "tokens" in stages:
            for f, adapter in self.tokens():
                if done_too or self.state("tokens", f, self.eval_hash(adapter, stage="tokens", recorded=f)) != "done":
                    what, need = needs(adapter)
                    out.append(
                        Job(
                            "tokens",
                            f"tokens {what}",
                            self.base_argv("tokens") + ["--adapter", str(adapter)],
                            needs=need,
                            samples=3 * self.cfg.tokens.n_problems,
                            output=str(f),
                        )
                    )  # one greedy answer, two forwards
        return out


# ============================================================================= the run folder


def kept_weights_note(plan: Plan, stage: str, weightless: int) -> str | None:
    """--dry-run's note on a base or training runs done but whose weights are not here (a committed run:
    results/ keeps few weights) and that no stage still to do reads: what is missing, what remaking it costs
    (as measured when it was made). None when they are read (then they are remade)."""
    if stage == "base" and not plan.base_needed():
        took = (provenance.read_json(plan.run / "base_model" / "build.json") or {}).get("seconds")
        again = "copies them again from model.base_from" if plan.cfg.model.base_from else "builds them again"
        return f"done; its weights are not committed: the base stage {again} when a stage reads them" + (
            f" ({took:.0f} s when built)" if isinstance(took, (int, float)) and not plan.cfg.model.base_from else ""
        )
    if stage != "train" or plan.weights_needed():
        return None
    jobs = (provenance.read_json(plan.run / "manifest.json") or {}).get("jobs") or {}
    took = sum(
        (jobs.get(f"train {c} s{s}") or {}).get("seconds") or 0
        for c, s in plan.train_units()
        if plan.weights_not_kept(study.adapter_dir(plan.run, c, s, plan.steps_of()[-1]))
    )
    return (
        f"done; the weights of {weightless} training run(s) are not committed: remaking them is {weightless} training "
        f"job(s)"
        + (f", {took / 3600:.1f} h of jobs as measured when made" if took else "")
        + ", run only when an evaluation still to do reads them"
    )


# the faults of a checkpoint, or a base, whose weights were not kept
WEIGHTS_ABSENT = ("adapter_model.safetensors: missing", "missing (the folder holds no weights)")


def log_problem(path: Path, steps) -> str | None:
    """None when a finished run's train_log.csv holds a whole row for each of its `steps` steps,
    else what is wrong: missing, cut short, a row with empty fields."""
    if not path.exists():
        return f"{path}: missing"
    try:
        rows = provenance.read_csv_rows(path)
    except (OSError, UnicodeDecodeError) as e:
        return f"{path}: unreadable ({e})"
    if isinstance(steps, int) and len(rows) < steps:
        return f"{path}: {len(rows)} rows for {steps} steps (cut short?)"
    if rows and any(v in (None, "") for v in rows[-1].values()):
        return f"{path}: its last row is incomplete (cut short?)"
    return None


def registered_stages(cfg: config.Config) -> list[str]:
    """PLAN.md's order of stages, less those this config has none of (its own base; the token level)."""
    return [
        s
        for s in STAGES
        if not (s == "base" and not study.builds_base(cfg)) and not (s == "tokens" and not cfg.tokens.enabled)
    ]
