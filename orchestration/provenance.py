"""Plumbing shared by every stage: atomic files, hashes, and the record of how an output was made.

Every output of the study says what made it: the resolved config, the hash of the settings its
stage depends on (`stage_hash`), PLAN.md's sha256, the code revision and package versions. A
stage is done when its outputs record the stage hash the current config gives; an output that
records another hash was made under other settings, and `differing_setting` names the first
setting that differs so the refusal can say so in one line.
"""

from __future__ import annotations

import copy
import csv
import functools
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from orchestration import config
from orchestration.origin import code_revision, machine, versions  # noqa: F401  (what made it: read as provenance.X)
from orchestration.records import (
    ADDED_OFF,
)  # keys added since, at the value that means "as before": left out of the hashes

ROOT = Path(__file__).resolve().parents[1]
FILE_MODE = 0o644  # outputs are read by others (mkstemp alone would leave 0600)


# ----------------------------------------------------------------------------- atomic files


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def write_csv_rows(path: Path, rows: list[dict], fields: list[str]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def read_csv_rows(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def atomic_replace_dir(tmp_dir: Path, final: Path) -> None:
    """Swap a fully written folder into place (old one removed only after the new one is whole)."""
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp_dir, final)
    if old.exists():
        shutil.rmtree(old)


def write_folder(out: Path, fill, record: dict) -> None:
    """Write a model folder whole: fill(tmp) writes its files into a temporary sibling, then `record`
    goes into tmp/build.json (the base stage's done marker), every file is made readable by all,
    and the folder is swapped into place (atomic_replace_dir)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    fill(tmp)
    (tmp / "build.json").write_text(json.dumps(record, indent=1) + "\n")
    readable_by_all(tmp)
    atomic_replace_dir(tmp, out)


def file_sha256(path: str | Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def plan_hashes() -> dict:
    """The registration an output was made under: PLAN.md's sha256 (the rules in force) and
    PLAN_CHANGES.md's (the dated change log), so the chain of registrations stays checkable. Neither
    enters a stage hash: a new entry in the log changes no computation."""
    return {"plan_sha256": file_sha256(ROOT / "PLAN.md"), "changes_sha256": file_sha256(ROOT / "PLAN_CHANGES.md")}


_REMEMBERED: dict = {}


def remembered(fn):
    """fn(path, *args) kept while the file is unchanged (the same inode, size, modification and change times),
    since one command's checks read the same records many times. Only for functions that return a string or
    None: nothing a caller could change."""

    @functools.wraps(fn)
    def wrapper(path, *args):
        try:
            st = os.stat(path)
        except OSError:
            return fn(path, *args)
        key = (fn.__name__, os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, args)
        if key not in _REMEMBERED:
            if len(_REMEMBERED) > 100_000:
                _REMEMBERED.clear()
            _REMEMBERED[key] = fn(path, *args)
        return _REMEMBERED[key]

    return wrapper


def read_json(path: str | Path) -> dict | None:
    """A JSON file's content, or None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None


@remembered
def recorded_hash(path: str | Path) -> str | None:
    d = read_json(path)
    try:
        return d["provenance"]["stage_hash"]
    except (KeyError, TypeError):
        return None


def readable_by_all(folder: str | Path) -> None:
    """Every file below `folder` FILE_MODE (0644): safetensors writes its files 0600."""
    for f in Path(folder).rglob("*"):
        if f.is_file():
            os.chmod(f, FILE_MODE)


def stamp() -> str:
    """A time stamp for a folder name (superseded/<stamp>/): 20261201T235959Z, UTC."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def now() -> str:
    """A time stamp for a record: 2026-12-01T23:59:59Z, UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def move_aside(run: Path, path: Path, when: str | None = None) -> Path | None:
    """Move `path` (inside the run folder `run`) to RUN/superseded/<when>/<its path in the run>,
    never deleting it; `when` defaults to now (UTC, to the second). Returns where it went, or None
    when there was nothing to move."""
    path, run = Path(path), Path(run)
    if not path.exists():
        return None
    dest = run / "superseded" / (when or stamp()) / path.relative_to(run)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, dest)
    return dest


def put_back(moved: list[tuple[Path, Path]], folder: Path) -> None:
    """Undo the move_aside of a command that failed: each (old place, where it went) not written
    again goes back, and `folder` (its superseded/<time>/) is removed once empty, superseded/ too."""
    for old, dest in moved:
        if not old.exists() and dest.exists():
            old.parent.mkdir(parents=True, exist_ok=True)
            os.replace(dest, old)
            print(f"put back {old} (this command failed before writing it again)", flush=True)
    for d in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [
        folder,
        folder.parent,
    ]:
        try:
            d.rmdir()
        except OSError:
            pass  # not empty (or not there)


# ----------------------------------------------------------------------------- damaged files


def safetensors_problem(path: str | Path) -> str | None:
    """None when `path` is a whole safetensors file, else what is wrong with it in a few words. A
    safetensors file is an 8-byte little-endian header length, a JSON header whose data_offsets
    say where each tensor lies, then the data: a file cut short or padded does not add up."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"{size} bytes, shorter than its header"
            n = int.from_bytes(head, "little")
            if n > size - 8:
                return f"its header claims {n:,} bytes but only {size - 8:,} follow (cut short?)"
            meta = json.loads(f.read(n))
        end = max((v["data_offsets"][1] for k, v in meta.items() if k != "__metadata__"), default=0)
    except FileNotFoundError:
        return "missing"
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, IndexError):
        return "its header is not a safetensors header"
    if 8 + n + end != size:
        return f"{size:,} bytes where its header describes {8 + n + end:,} (cut short?)"
    return None


@remembered
def json_problem(path: str | Path, keys: tuple = ()) -> str | None:
    """None when `path` holds a JSON object with every key in `keys`, else what is wrong."""
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return "missing"
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return f"not valid JSON ({getattr(e, 'msg', e)})"
    if not isinstance(d, dict):
        return "not a JSON object"
    missing = [k for k in keys if k not in d]
    return f"no {', '.join(missing)}" if missing else None


def adapter_problem(folder: str | Path) -> str | None:
    """None when an adapter folder is whole (adapter_config.json with r, lora_alpha and
    target_modules, and a whole adapter_model.safetensors), else which file is wrong and how."""
    folder = Path(folder)
    bad = json_problem(folder / "adapter_config.json", ("r", "lora_alpha", "target_modules"))
    if bad:
        return f"{folder / 'adapter_config.json'}: {bad}"
    bad = safetensors_problem(folder / "adapter_model.safetensors")
    return f"{folder / 'adapter_model.safetensors'}: {bad}" if bad else None


def torch_file_problem(path: str | Path) -> str | None:
    """None when a torch.save file (a zip archive) is whole, else what is wrong: checked without
    torch, by the archive's central directory and its members' CRCs."""
    import zipfile

    path = Path(path)
    if not path.exists():
        return "missing"
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        return f"not a whole torch.save archive ({e}; cut short?)"
    return f"its member {bad} is damaged" if bad else None


def model_folder_problem(folder: str | Path) -> str | None:
    """None when a Hugging Face model folder looks whole (config.json; its weights: at least one
    *.safetensors or pytorch_model*.bin file, every shard a model.safetensors.index.json names, and
    each *.safetensors file whole), else which file is wrong and how. A folder without weights is
    not a model: a committed run may leave them out (results/smollm2/base_model), and its base stage
    then builds them again."""
    folder = Path(folder)
    bad = json_problem(folder / "config.json")
    if bad:
        return f"{folder / 'config.json'}: {bad}"
    shards = sorted(folder.glob("*.safetensors"))
    if not shards and not list(folder.glob("pytorch_model*.bin")):
        return f"{folder / 'model.safetensors'}: missing (the folder holds no weights)"
    index = folder / "model.safetensors.index.json"
    if index.exists():
        d = read_json(index)
        if not isinstance(d, dict) or not isinstance(d.get("weight_map"), dict):
            return f"{index}: {json_problem(index, ('weight_map',)) or 'its weight_map is not an object'}"
        for name in sorted(set(d["weight_map"].values())):
            if not (folder / name).exists():
                return f"{folder / name}: missing (named by {index.name})"
    for f in shards:
        bad = safetensors_problem(f)
        if bad:
            return f"{f}: {bad}"
    return None


def weights_problem(folder: str | Path, sha256: str | None) -> str | None:
    """None when `folder`'s model.safetensors has this sha256 (or none is required), else what is wrong."""
    if sha256 is None:
        return None
    got = file_sha256(Path(folder) / "model.safetensors")
    if got is None:
        return f"{Path(folder) / 'model.safetensors'}: missing"
    if got != sha256:
        return (
            f"{Path(folder) / 'model.safetensors'}: sha256 {got[:16]}…, model.base_sha256 says {sha256[:16]}… "
            "(other weights than the registered base)"
        )
    return None


def content_sha256(path: str | Path) -> str | None:
    """sha256 of what a JSON output computed: the file without its timings ("seconds", and
    "resumed_from_calls": how many sampling calls an earlier part of an evaluation made), without
    the path it was made from ("model": the adapter's sha256 and identity stay) and without its
    provenance, except the stage hash (the settings and inputs it was made from). Two runs that
    computed the same thing agree, whenever, wherever, in how many parts and at whatever revision they ran."""
    try:
        d = json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(d, dict):
        d = {k: v for k, v in d.items() if k not in ("seconds", "resumed_from_calls", "model", "provenance")} | {
            "stage_hash": (d.get("provenance") or {}).get("stage_hash")
        }
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


# Which config keys each stage's results depend on. A stage is done when its outputs record
# the same hash of these keys. threads and device are how, not what, so they are left out;
# train.seeds (and seeds_by_condition) and the condition registry enter train's hash one entry at a time (the `extra`
# argument), so adding a seed or a condition changes no other run's hash.
STAGE_KEYS = {
    "base": ["task.name", "task.seed", "task.n_train", "task.n_test", "model.build", "model.qwen_shape", "model.gguf"],
    "probe": ["task.seed", "task.prompt_style", "task.system_prompt", "model", "probe", "eval", "determinism"],
    "select": ["task", "model", "select", "train.sampling", "eval.problems_per_batch", "eval.draw", "determinism"],
    "lr-sweep": ["task", "model", "lora", "train", "lr_sweep", "micro_batch", "memory_gb", "eval.draw", "determinism"],
    "train": ["task", "model", "lora", "train", "micro_batch", "memory_gb", "eval.draw", "determinism"],
    "eval": ["task", "model", "eval", "lora.fold_for_sampling", "lora.tf32", "determinism"],
    "tokens": ["task", "model", "tokens", "eval.sampling", "eval.problems_per_batch", "determinism"],
}
# Under eval.draw: sample (PLAN_CHANGES.md change 52) these only split the sampling into calls: no sample
# depends on them, so they are left out of the sampling stages' hashes (a run may lower them to fit
# memory). The token stage's greedy decode and teacher-forced reads keep problems_per_batch in theirs.
BATCHING_KEYS = ("eval.problems_per_batch", "eval.max_rows")
_NOT_IN_HASH = {  # logp_gap_limit only stops a run: a run that finishes under it is the run without it
    "lr-sweep": (
        "seeds",
        "seeds_by_condition",
        "lr",
        "checkpoints",
        "steps",
        "log_kl_every",
        "dev_every",
        "logp_gap_limit",
        "logp_gap_max_limit",
    ),
    "train": ("seeds", "seeds_by_condition", "logp_gap_limit", "logp_gap_max_limit"),
}


def _pick(d: dict, key: str):
    node = d
    for part in key.split("."):
        node = node[part]
    return node


def hashed_settings(cfg_dict: dict, stage: str) -> dict:
    """The settings a stage's results depend on, by dotted key."""
    src = cfg_dict if stage == "tokens" else without_batching(cfg_dict)  # tokens decodes greedily, batched its own way
    dropped = () if src is cfg_dict else BATCHING_KEYS
    picked = {key: _pick(src, key) for key in STAGE_KEYS[stage] if key not in dropped and _present(src, key)}
    if isinstance(picked.get("model"), dict) and "slow_bf16" in picked["model"]:  # permission, not a setting
        picked["model"] = {k: v for k, v in picked["model"].items() if k != "slow_bf16"}
    if stage in _NOT_IN_HASH:
        picked["train"] = {k: v for k, v in picked["train"].items() if k not in _NOT_IN_HASH[stage]}
    for key, off in ADDED_OFF.items():
        _drop_if(picked, key, off)
    return picked


def without_batching(cfg_dict: dict) -> dict:
    """A recorded config under eval.draw: sample without the settings that only split the sampling
    into calls (BATCHING_KEYS and each eval set's problems_per_batch), which change no sample (PLAN.md
    change 52); under draw: batch, where they decide the samples, the config as it is. The one place
    that rule is written: the stage hashes, config_identity, study.eval_inputs and the analysis'
    comparison of settings read it."""
    if _pick_or(cfg_dict, "eval.draw", "batch") != "sample":
        return cfg_dict
    d = {**cfg_dict, "eval": {k: v for k, v in cfg_dict["eval"].items() if "eval." + k not in BATCHING_KEYS}}
    if isinstance(d.get("eval_sets"), dict):
        d["eval_sets"] = {
            k: {kk: v for kk, v in es.items() if kk != "problems_per_batch"} if isinstance(es, dict) else es
            for k, es in d["eval_sets"].items()
        }
    return d


def _pick_or(d: dict, key: str, default):
    try:
        return _pick(d, key)
    except KeyError:
        return default


def _drop_if(picked: dict, key: str, off) -> None:
    """Remove the dotted `key` from `picked` (whose keys are dotted stage keys) where it holds `off`."""
    if key in picked:
        if picked[key] == off:
            del picked[key]
        return
    for top in (
        picked
    ):  # the stage key that holds it: "train" for train.sampling.decode, "eval.sampling" for eval.sampling.decode
        if key.startswith(top + ".") and isinstance(picked[top], dict):
            *path, name = key[len(top) + 1 :].split(".")
            node = picked[top]
            for part in path:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict) and name in node and node[name] == off:  # copied only where it changes
                node = picked[top] = copy.deepcopy(picked[top])
                for part in path:
                    node = node[part]
                del node[name]
            return


def _present(d: dict, key: str) -> bool:
    """False only for a key of ADDED_OFF that an older config lacks."""
    try:
        _pick(d, key)
        return True
    except KeyError:
        if key in ADDED_OFF:
            return False
        raise


def config_identity(cfg_dict: dict | None) -> str | None:
    """The digest of a recorded config (a provenance's "config") without the keys added since at
    their "as before" value (ADDED_OFF), so a file made before a key existed and one made after it,
    at the same settings, agree; under eval.draw: sample without the batching settings (BATCHING_KEYS
    and each eval set's problems_per_batch), which change no sample. None when nothing is recorded."""
    if not isinstance(cfg_dict, dict):
        return None
    d = dict(cfg_dict)  # _drop_if copies each section it changes
    for key, off in ADDED_OFF.items():
        _drop_if(d, key, off)
    if isinstance(d.get("eval_sets"), dict):
        d["eval_sets"] = {k: eval_set_as_before(es) for k, es in d["eval_sets"].items()}
    if isinstance(d.get("conditions"), dict):
        d["conditions"] = {k: condition_as_before(c) for k, c in d["conditions"].items()}
    return config.digest(without_batching(d))


def condition_as_before(c):
    """A recorded condition without its unlikeliness at 0 (every condition before the key existed)."""
    if isinstance(c, dict) and c.get("unlikeliness", 0.0) == 0.0:
        return {k: v for k, v in c.items() if k != "unlikeliness"}
    return c


def eval_set_as_before(es):
    """A recorded eval set without its sampling's tail at "sort" (what every set's sampling was
    before the key existed: ADDED_OFF's eval.sampling.tail, per set)."""
    s = es.get("sampling") if isinstance(es, dict) else None
    if isinstance(s, dict) and s.get("tail", "sort") == "sort":
        return {**es, "sampling": {k: v for k, v in s.items() if k != "tail"}}
    return es


def analyze_identity(analyze: dict | None) -> dict:
    """An analysis' recorded `analyze` settings without the keys added since at their "as before"
    value (ADDED_OFF), so a run analysed before a key existed is not out of date for it."""
    d = {"analyze": dict(analyze or {})}
    for key, off in ADDED_OFF.items():
        if key.startswith("analyze."):
            _drop_if(d, key, off)
    return d["analyze"]


def same_config(a: dict | None, b: dict | None) -> bool:
    """Two provenance records were made under the same config: by config_identity where both record
    their config, else by their recorded config_hash."""
    a, b = a or {}, b or {}
    ia, ib = config_identity(a.get("config")), config_identity(b.get("config"))
    return ia == ib if ia is not None and ib is not None else a.get("config_hash") == b.get("config_hash")


def stage_hash(cfg: config.Config, stage: str, extra=None) -> str:
    return config.digest({**hashed_settings(config.to_dict(cfg), stage), "extra": extra})


def differing_setting(recorded: dict | None, cfg: config.Config, stage: str) -> str:
    """The first setting (dotted key=value) on which a recorded provenance differs from `cfg`,
    for the one-line refusal; 'its inputs' when the settings agree and an input file differs."""
    return next(iter(differing_settings(recorded, cfg, stage)), None) or (
        f"the inputs it was made from ({json.dumps((recorded or {}).get('inputs'))[:100]})"
    )


def fix_order(key: str) -> tuple[int, str]:
    """The order in which a user fixes differing settings: the model, then the task, then the rest (by name)."""
    top = key.split(".")[0].split("=")[0]
    return ({"model": 0, "task": 1}.get(top, 2), key)


def differing_settings(recorded: dict | None, cfg: config.Config, stage: str) -> list[str]:
    """Every setting (dotted key=value there, value here) a stage's results depend on on which a
    recorded provenance differs from `cfg`, in fix_order; [] when they agree; one entry saying so
    when the record holds no config, or one this code cannot read."""
    if not recorded or not isinstance(recorded.get("config"), dict):
        return ["no readable provenance"]
    now = hashed_settings(config.to_dict(cfg), stage)
    try:
        then = hashed_settings(recorded["config"], stage)
    except (KeyError, TypeError):
        return ["a config from another version of the code"]
    return [
        f"{k}={_short(a)} there, {_short(b)} here"
        for k, a, b in sorted(_diffs(then, now), key=lambda d: fix_order(d[0]))
    ]


def _diffs(then: dict, now: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, value there, value here) where two settings trees differ: the deepest keys where both
    sides hold a section, the whole section where one side holds none (model.build=null there)."""
    out = []
    for k in set(then) | set(now):
        key = f"{prefix}.{k}" if prefix else k
        off = ADDED_OFF.get(key)  # a key left out of the hash at its "as before" value
        a, b = then.get(k, off), now.get(k, off)
        if isinstance(a, dict) and isinstance(b, dict) and a and b:
            out += _diffs(a, b, key)
        elif a != b:
            out.append((key, a, b))
    return out


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def record(cfg: config.Config, stage: str, extra=None, device: str | None = None) -> dict:
    """What an output records about how it was made (its "provenance" field): the stage, its hash, the
    config and its hash, the inputs, PLAN.md's and PLAN_CHANGES.md's sha256, the code revision, package
    versions, the machine, device, time."""
    return {
        "stage": stage,
        "stage_hash": stage_hash(cfg, stage, extra),
        "config_hash": config.digest(config.to_dict(cfg)),
        "config": config.to_dict(cfg),
        "inputs": extra,
        **plan_hashes(),
        "revision": code_revision(),
        "versions": versions(),
        "machine": machine(),
        "device": device,
        "time": now(),
    }
