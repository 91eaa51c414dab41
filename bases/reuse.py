"""A base already built, reused (model.base_from, PLAN_CHANGES.md change 44): the `base` stage copies a committed
base into RUN/base_model instead of training it again, after two checks, each refused in one line: the
folder's build.json records this config's base stage hash (the same recipe, task and splits), and its
model.safetensors has the sha256 the config names. Every later stage checks the run's copy by the same
sha256 before it loads it (provenance.weights_problem)."""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestration import config, provenance


def copy_base(cfg: config.Config, out: Path, stage_hash: str) -> dict:
    """Copy cfg.model.base_from into `out` (whole, or not at all) and return its build.json, with
    `reused_from` and the checked sha256 added. ConfigError when either check fails."""
    src = Path(cfg.model.base_from)
    built = provenance.read_json(src / "build.json")
    if not isinstance(built, dict):
        raise config.ConfigError(
            f"model.base_from: {src / 'build.json'} is missing or unreadable (not a base the base stage built)"
        )
    if built.get("stage_hash") != stage_hash:
        raise config.ConfigError(
            f"model.base_from: {src} was built under base stage hash {built.get('stage_hash')}, this config's "
            f"base is {stage_hash} (model.build or the task's splits differ); rebuild it without model.base_from"
        )
    bad = provenance.weights_problem(src, cfg.model.base_sha256)
    if bad:
        raise config.ConfigError(f"model.base_from: {bad}")

    def fill(tmp: Path) -> None:
        for f in sorted(src.iterdir()):
            if f.is_file() and f.name != "build.json":
                shutil.copy2(f, tmp / f.name)
        if bad := provenance.weights_problem(tmp, cfg.model.base_sha256):  # the copy itself, before it is put in place
            raise OSError(f"copying {src}: {bad}")

    info = {**built, "reused_from": str(src), "sha256": cfg.model.base_sha256}
    provenance.write_folder(out, fill, info)
    return info
