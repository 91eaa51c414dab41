"""Every stage hash this checkout computes, written to one JSON file: the check that a refactor of the
hashing changed no hash.

    python bench/stage_hashes.py /tmp/hashes_before.json     # at the old revision
    python bench/stage_hashes.py /tmp/hashes_after.json      # at the new one; the two files must be equal

For each config in configs/ under four override sets (as written; eval.draw sample; sample with lower
batching; batch with lower batching): every stage's hash, each evaluation set's inputs and the config's
identity (provenance.config_identity). For every JSON file in results/ that records a config: its
identity and its settings' digest per stage.
"""

import glob
import json
import sys

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

from orchestration import config, provenance, study

OVERRIDES = (
    [],
    ["eval.draw=sample"],
    ["eval.draw=sample", "eval.max_rows=64", "eval.problems_per_batch=2"],
    ["eval.draw=batch", "eval.problems_per_batch=2"],
)


def main(out: str) -> None:
    hashes = {}
    for f in sorted(glob.glob(str(ROOT / "configs" / "*.yaml"))):
        for sets in OVERRIDES:
            key = f"{f.rsplit('/', 1)[1]} {' '.join(sets)}"
            try:
                cfg = config.load(f, sets)
            except config.ConfigError as e:
                hashes[key] = str(e)
                continue
            for st in provenance.STAGE_KEYS:
                hashes[f"{key} {st}"] = provenance.stage_hash(cfg, st)
            for es in ["test", *cfg.eval_sets]:
                hashes[f"{key} eval inputs {es}"] = config.digest(study.eval_inputs(cfg, "adapter", es))
            hashes[f"{key} identity"] = provenance.config_identity(config.to_dict(cfg))
    for p in sorted(glob.glob(str(ROOT / "results" / "**" / "*.json"), recursive=True)):
        try:
            prov = json.load(open(p)).get("provenance")
        except (ValueError, AttributeError):
            continue
        if isinstance(prov, dict) and isinstance(prov.get("config"), dict):
            rel = p[len(str(ROOT)) + 1 :]
            hashes[f"{rel} identity"] = provenance.config_identity(prov["config"])
            for st in provenance.STAGE_KEYS:
                try:
                    hashes[f"{rel} {st}"] = config.digest(provenance.hashed_settings(prov["config"], st))
                except KeyError as e:  # a record older than a stage's keys
                    hashes[f"{rel} {st}"] = f"no {e}"
    with open(out, "w") as f:
        json.dump(hashes, f, indent=0, sort_keys=True)
    print(f"{len(hashes)} hashes -> {out}")


if __name__ == "__main__":
    main(sys.argv[1])
