"""The analysis' view of a run folder: its design (from manifest.json's config, else from
eval_base.json's), and its evaluation, token-level and training-log files, each read and checked.

A missing or malformed input is an InputError whose message names the file and what is wrong;
analyze_b.py prints it on one line. No torch: this meets the pipeline only in JSON and CSV files.
"""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis import stats
from countdown import SCORINGS
from orchestration import config, records, study

DEFAULT_CONDITION = config.to_dict(config.ConditionCfg())  # a condition's recipe where it sets nothing


class InputError(Exception):
    """A missing or malformed input: the message names the file and what is wrong, and `path` is
    that file (or folder), so the command that makes it again is a lookup (analyze_b.remake_hint)."""

    def __init__(self, message: str, path: str | Path | None = None):
        super().__init__(message)
        self.path = Path(path) if path is not None else None


# What an analysis reads from a run folder is everything but these: weights, resume points, what was moved
# aside, the lock, and the analysis' own outputs (written anew).
NOT_INPUTS = (
    "*.safetensors",
    "*.bin",
    "*.pt",
    "last",
    "superseded",
    ".pipeline.lock",
    "verdicts.json",
    "report.md",
    "figures",
)


def copy_inputs(run: Path, out: Path) -> None:
    """Copy what the analysis reads from `run` into the new folder `out` (NOT_INPUTS left out): analyze_b.py's
    --out, and the bench tools that re-analyse a committed run in a copy."""
    top = shutil.ignore_patterns(*NOT_INPUTS)
    below = shutil.ignore_patterns(*NOT_INPUTS[:5])  # a train_*/figures/ or report.md below the top is an input's, kept

    def ignore(folder, names):
        return top(folder, names) if Path(folder) == run else below(folder, names)

    shutil.copytree(run, out, ignore=ignore, dirs_exist_ok=True)


@dataclass
class Design:
    """The evaluations a run is expected to hold, and the analysis settings: its recorded config read
    as today's typed Config (records.from_record, through which old runs are read)."""

    cfg: config.Config
    config: dict  # as recorded (the report compares it with the run's other records)
    source: str  # the file the config came from
    legacy: bool  # a single-seed run before train.seeds: eval_<cond>_<step>.json, read as seed 0

    @property
    def conditions(self) -> list[str]:  # in the config's order (PLAN.md's)
        return list(self.cfg.conditions)

    @property
    def seeds(self) -> list[int]:
        return list(self.cfg.train.seeds)

    @property
    def checkpoints(self) -> list[int]:
        return sorted(self.cfg.train.checkpoints)

    @property
    def seeds_by_condition(self) -> dict[str, list[int]]:  # conditions trained on other seeds than `seeds`
        return dict(self.cfg.train.seeds_by_condition)

    @property
    def settings(self) -> dict[str, dict]:  # condition -> its recipe
        return {c: config.to_dict(x) for c, x in self.cfg.conditions.items()}

    @property
    def eval_sets(self) -> dict[str, dict]:
        """Set name -> {task, n, k_max, n_problems, models, ood}: the registered sets besides `test`."""
        own = self.cfg.task.name
        return {
            name: {
                "task": es.task or own,
                "n": es.n,
                "k_max": es.k_max,
                "n_problems": es.n_problems,
                "models": es.models,
                "ood": (es.task or own) != own,
            }
            for name, es in self.cfg.eval_sets.items()
        }

    @property
    def tokens_enabled(self) -> bool:  # tokens.enabled: the token files are then expected
        return self.cfg.tokens.enabled

    @property
    def primary_condition(self) -> str:
        return self.cfg.analyze.primary_condition

    @property
    def primary_scoring(self) -> str:
        return self.cfg.analyze.primary_scoring

    def seeds_of(self, cond: str) -> list[int]:
        return (self.seeds_by_condition or {}).get(cond, self.seeds)

    def all_seeds(self) -> list[int]:
        return sorted({s for c in self.conditions for s in self.seeds_of(c)})

    def eval_name(self, cond: str, seed: int, step: int) -> str:
        return study.eval_name(cond, seed, step, self.legacy)

    def train_name(self, cond: str, seed: int) -> str:
        return study.train_name(cond, seed, self.legacy)

    def expected(self) -> list[tuple[str, int, int]]:
        return [(c, s, st) for c in self.conditions for s in self.seeds_of(c) for st in self.checkpoints]

    def set_expected(self, name: str) -> list[tuple[str, int, int]]:
        """The trained models a set evaluates besides the base: models all (every checkpoint), final
        (every seed at the last checkpoint) or final-first-seed (the first seed at the last one)."""
        models, last = self.eval_sets[name]["models"], self.checkpoints[-1]
        if models == "base":
            return []
        if models == "all":
            return self.expected()
        return [(c, s, last) for c in self.conditions for s in self.seeds_of(c)[: None if models == "final" else 1]]

    def set_name(self, name: str, key: tuple[str, int, int] | None) -> str:
        """A set's file, relative to the run: evalsets/<set>/eval_base.json or .../eval_<c>_s<s>_<step>.json."""
        return f"evalsets/{name}/" + ("eval_base.json" if key is None else self.eval_name(*key))

    def tokens_name(self, cond: str, seed: int, step: int) -> str:
        return study.tokens_name(cond, seed, step)

    def n_expected(self) -> int:
        """Every file the completeness check counts: the test set's RL evaluations, each set's base
        and models, and the token files when tokens.enabled."""
        return (
            len(self.expected())
            + sum(1 + len(self.set_expected(s)) for s in self.eval_sets)
            + (len(self.expected()) if self.tokens_enabled else 0)
        )


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: missing", path=path)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})", path=path)


def read_design(run: Path, base: dict | None = None) -> Design:
    """The design from RUN/manifest.json's config if it exists, else from eval_base.json's
    provenance, read by records.from_record (old layouts and keys added since included) and checked
    as config.load checks a config file."""
    src = run / "manifest.json"
    if src.exists():
        cfg = read_json(src).get("config")
    else:
        src = run / "eval_base.json"
        cfg = (base if base is not None else read_json(src)).get("provenance", {}).get("config")
    if not isinstance(cfg, dict):
        raise InputError(f"{src}: no config recorded, so the expected design is unknown", path=src)
    try:
        typed = records.from_record(cfg)
    except config.ConfigError as e:
        raise InputError(f"{src}: config {e}", path=src)
    if not typed.train.checkpoints:
        raise InputError(f"{src}: config train.checkpoints: must name at least one step", path=src)
    return Design(typed, cfg, src.name, "seeds" not in cfg.get("train", {}))


def load_eval(path: Path, eval_set: str = "test") -> dict:
    """One eval file, its counts and fields checked. Its "eval_set" field, where present (older
    test-set files have none), must name the set whose folder holds it. The per-problem diversity
    fields (distinct_answers, answer_entropy, token_entropy) are optional; where present they must
    be numbers (token_entropy may be null)."""
    d = read_json(path)
    if d.get("eval_set", "test") != eval_set:
        raise InputError(
            f"{path}: its eval_set field is {d.get('eval_set')!r} but it lies in the folder of set {eval_set!r}",
            path=path,
        )
    try:
        n = int(d["sampling"]["n"])
        probs = d["problems"]
        for p in probs:
            for s in SCORINGS:
                c = p[f"correct_{s}"]
                if not (isinstance(c, int) and 0 <= c <= p["n"] == n):
                    raise InputError(
                        f"{path}: problem {p.get('id')}: correct_{s}={c!r} is not a count in 0..n={n}", path=path
                    )
        if not probs:
            raise InputError(f"{path}: no problems", path=path)
        for p in probs:
            if p.get("id") is None:
                raise InputError(f"{path}: a problem has no id", path=path)
        if not isinstance(d["format_rate"], (int, float)):
            raise InputError(f"{path}: format_rate is not a number", path=path)
        for p in probs:
            for k, lo in (("distinct_answers", 1), ("answer_entropy", 0), ("token_entropy", 0)):
                x = p.get(k)
                if x is not None and not (
                    isinstance(x, (int, float)) and not isinstance(x, bool) and (np.isnan(x) or x >= lo)
                ):
                    raise InputError(f"{path}: problem {p.get('id')}: {k}={x!r} is not a number >= {lo}", path=path)
    except (KeyError, TypeError) as e:
        raise InputError(f"{path}: malformed eval file (missing or wrong field {e})", path=path)
    d["_file"] = path.name
    return d


def parse_eval_name(path: Path, design: Design) -> tuple[str, int, int] | None:
    """(condition, seed, step) from an eval file's name, or None for names that are not RL
    evaluations. In a single-seed (legacy) design eval_<cond>_<step>.json is seed 0; in a seeded
    design that name is a file from an earlier layout, an error."""
    m = study.EVAL_FILE.match(path.name)
    if m and (not design.legacy or m["cond"] in design.conditions):
        return m["cond"], int(m["seed"]), int(m["step"])
    m = study.EVAL_FILE_V1.match(path.name)
    if m:
        if not design.legacy:
            raise InputError(
                f"{path}: a file name without a training seed (an earlier layout); "
                f"this design expects eval_<condition>_s<seed>_<step>.json",
                path=path,
            )
        return m["cond"], 0, int(m["step"])
    return None


def find_evals(run: Path, design: Design | None = None, base: dict | None = None):
    """(base, rl, missing, design): rl maps (condition, seed, step) to a loaded eval file; missing
    names the expected files not found. A file the design does not expect is an error."""
    base = load_eval(run / "eval_base.json") if base is None else base
    design = read_design(run, base) if design is None else design
    rl, where = {}, {}
    for f in sorted(run.glob("eval_*.json")):
        key = parse_eval_name(f, design)
        if key is None:
            continue
        cond, seed, step = key
        if cond not in design.conditions or seed not in design.seeds_of(cond) or step not in design.checkpoints:
            raise InputError(
                f"{run / f.name}: condition {cond!r}, seed {seed}, step {step} is not in the design of "
                f"{design.source} (conditions {design.conditions}, seeds {design.seeds_of(cond)}, checkpoints "
                f"{design.checkpoints}): a stale file from another design?",
                path=run / f.name,
            )
        if key in where:
            raise InputError(
                f"{run / f.name}: a second eval file for {cond} seed {seed} step {step} (also {where[key]})",
                path=run / f.name,
            )
        where[key] = f.name
    if not where:
        raise InputError(f"{run}: no eval_<condition>_s<seed>_<step>.json files to compare with the base", path=run)
    if base.get("eval_set", "test") != "test":
        raise InputError(
            f"{run / 'eval_base.json'}: its eval_set field is {base['eval_set']!r}; the top-level files are the test set",
            path=run / "eval_base.json",
        )
    for key, name in where.items():
        d = load_eval(run / name)
        for field, want in zip(("condition", "train_seed", "step"), key):
            if field in d and d[field] != want:
                raise InputError(
                    f"{run / name}: its {field} field is {d[field]!r} but its name says {want!r}", path=run / name
                )
        rl[key] = d
    ids = [p["id"] for p in base["problems"]]
    for d in rl.values():
        if [p["id"] for p in d["problems"]] != ids:
            raise InputError(
                f"{run}/{d['_file']}: its test problems differ from eval_base.json's", path=run / d["_file"]
            )
        if d["sampling"]["n"] > base["sampling"]["n"]:
            raise InputError(
                f"{run}/{d['_file']}: n={d['sampling']['n']} but the base has only n={base['sampling']['n']}: "
                f"the base needs at least the trained models' samples (eval.n_base >= eval.n)",
                path=run / d["_file"],
            )
    missing = [design.eval_name(*key) for key in design.expected() if key not in rl]
    return base, rl, missing, design


def find_set(run: Path, design: Design, name: str) -> tuple[dict | None, dict, list[str]]:
    """(base or None, rl, missing) of the registered set `name` in RUN/evalsets/<name>/, checked
    like the test set: every file records this set and its task, n and number of problems are the
    config's, every RL file has the base's problems, and a file the set does not expect is an error."""
    spec, folder = design.eval_sets[name], run / "evalsets" / name
    expected = design.set_expected(name)
    missing, rl = [], {}

    def check(d: dict, f: Path):
        if d.get("eval_set") != name:
            raise InputError(f"{f}: its eval_set field is {d.get('eval_set')!r}, not {name!r}", path=f)
        if d.get("task", spec["task"]) != spec["task"]:
            raise InputError(f"{f}: task {d.get('task')!r}, but eval_sets.{name} evaluates {spec['task']!r}", path=f)
        if d["sampling"]["n"] != spec["n"] or len(d["problems"]) != spec["n_problems"]:
            raise InputError(
                f"{f}: {len(d['problems'])} problems x n={d['sampling']['n']}, but eval_sets.{name} registers "
                f"{spec['n_problems']} x {spec['n']}",
                path=f,
            )

    base = None
    if (folder / "eval_base.json").exists():
        base = load_eval(folder / "eval_base.json", name)
        check(base, folder / "eval_base.json")
    else:
        missing.append(design.set_name(name, None))
    for f in sorted(folder.glob("eval_*.json")) if folder.is_dir() else []:
        key = parse_eval_name(f, design)
        if key is None:
            continue
        if key not in expected:
            raise InputError(
                f"{f}: {key[0]} seed {key[1]} step {key[2]} is not among the models of eval_sets.{name} "
                f"(models: {spec['models']}): a stale file from another design?",
                path=f,
            )
        d = load_eval(f, name)
        check(d, f)
        for field, want in zip(("condition", "train_seed", "step"), key):
            if field in d and d[field] != want:
                raise InputError(f"{f}: its {field} field is {d[field]!r} but its name says {want!r}", path=f)
        if base is not None and [p["id"] for p in d["problems"]] != [p["id"] for p in base["problems"]]:
            raise InputError(f"{f}: its problems differ from {design.set_name(name, None)}'s", path=f)
        rl[key] = d
    missing += [design.set_name(name, key) for key in expected if key not in rl]
    return base, rl, missing


TOKEN_SUMMARY = (
    "positions",
    "unchanged",
    "reranked",
    "shifted",
    "share_unchanged",
    "share_reranked",
    "share_shifted",
    "mean_rank_changed",
    "base_entropy_changed",
    "base_entropy_unchanged",
    "entropy_ratio",
)


def find_tokens(run: Path, design: Design) -> tuple[dict, list[str], list[str]]:
    """(docs, missing, warnings): RUN/tokens_<cond>_s<seed>_<step>.json by (condition, seed, step).
    Each file's summary is recomputed from its per-problem detail (token_summary); the recomputed
    values are the ones reported, and a file whose own summary differs says so in a warning. Missing
    files count only when tokens.enabled (otherwise the report shows what exists)."""
    docs, warnings = {}, []
    for f in sorted(run.glob("tokens_*.json")):
        m = study.TOKENS_FILE.match(f.name)
        key = (m["cond"], int(m["seed"]), int(m["step"])) if m else None
        if key is None or key not in design.expected():
            raise InputError(
                f"{f}: not a checkpoint of the design (conditions {design.conditions}, seeds {design.all_seeds()}, "
                f"checkpoints {design.checkpoints})",
                path=f,
            )
        d = read_json(f)
        try:
            probs = d["problems"]
            for p in probs:
                L = len(p["classes"])
                if len(p["ranks"]) != L or len(p["base_entropy"]) != L or any(c not in (0, 1, 2) for c in p["classes"]):
                    raise InputError(
                        f"{f}: problem {p.get('id')}: classes (0, 1, 2), ranks and base_entropy must be lists of one length",
                        path=f,
                    )
            own = {k: d["summary"][k] for k in TOKEN_SUMMARY}
        except (KeyError, TypeError) as e:
            raise InputError(f"{f}: malformed token file (missing or wrong field {e})", path=f)
        for field, want in zip(("condition", "train_seed", "step"), key):
            if field in d and d[field] != want:
                raise InputError(f"{f}: its {field} field is {d[field]!r} but its name says {want!r}", path=f)
        d["_summary"] = stats.token_summary(probs)
        d["_file"] = f.name
        off = [k for k in TOKEN_SUMMARY if not _close(own[k], d["_summary"][k])]
        if off:
            warnings.append(
                f"{f.name}: its summary differs from its per-problem detail in {', '.join(off)}; the report recomputes them"
            )
        docs[key] = d
    missing = [design.tokens_name(*k) for k in design.expected() if k not in docs] if design.tokens_enabled else []
    return docs, missing, warnings


def _close(a, b) -> bool:
    """Equal within 1e-5 + 1e-4 relative (the per-position entropies are stored to 5 decimals);
    None and NaN are the same 'no value'."""
    na, nb = a is None or (isinstance(a, float) and np.isnan(a)), b is None or (isinstance(b, float) and np.isnan(b))
    if na or nb:
        return na and nb
    return abs(a - b) <= 1e-5 + 1e-4 * max(abs(a), abs(b))


DEV_COLUMNS = (
    "n_problems",
    "n",
    "strict_pass1",
    "loose_pass1",
    "strict_passn",
    "loose_passn",
    "format_rate",
    "locked",
    "locked_wrong",
)  # train_eval.csv (the last two since change 70: empty in older files)


DEV_REQUIRED = ("step",)


TRAIN_COLUMNS = (
    "reward_mean",
    "zero_signal_frac",
    "format_rate",
    "len_mean",
    "entropy_mean",
    "kl_mean",
)  # train_log.csv, drawn


def read_csv(path: Path, required: tuple = ("step", "reward_mean"), drawn: tuple = TRAIN_COLUMNS) -> list[dict]:
    """A training log (train_log.csv; with required=DEV_REQUIRED, drawn=DEV_COLUMNS the dev
    evaluation train_eval.csv) as a list of {column: float}. The required columns must be in every
    row and be numbers ("nan" is a number: an sft run has no reward); the columns drawn
    (TRAIN_COLUMNS, or `drawn`) must be numbers or empty (NaN); other columns may come and go and are
    kept only where they are numbers. A short or long row is an InputError naming the file."""
    if not path.exists():
        return []
    drawn = set(drawn)

    def cell(k, v):
        if not v.strip() and k not in required:
            return float("nan")
        try:
            return float(v)
        except ValueError:
            if k in drawn or k in required:
                raise ValueError(f"column {k}: {v!r} is not a number")
            return None  # an unknown text column: left out

    try:
        with open(path) as f:
            rows = []
            for r in csv.DictReader(f):
                if None in r or None in r.values():  # a long row gives a None key, a short one None values
                    raise ValueError(
                        f"row {len(rows) + 1} has {'more' if None in r else 'fewer'} cells than the header"
                    )
                rows.append({k: x for k, x in ((k, cell(k, v)) for k, v in r.items()) if x is not None})
    except (ValueError, csv.Error) as e:
        raise InputError(
            f"{path}: malformed {'training log' if 'reward_mean' in required else 'dev evaluation'} ({e})", path=path
        )
    if any(any(c not in r for c in required) for r in rows):
        raise InputError(
            f"{path}: malformed {'training log' if 'reward_mean' in required else 'dev evaluation'} "
            f"(no {' or '.join(required)} column)",
            path=path,
        )
    return rows
