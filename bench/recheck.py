"""Rerun a sample of a committed run's jobs on this machine and say what matched.

    python bench/recheck.py --run results/tiny_v3 --config configs/tiny.yaml --out /tmp/recheck
    python bench/recheck.py --run results/tiny_v3 --config configs/tiny.yaml --out /tmp/recheck \\
        --train many:0 --train 16:2 --jobs 2

It copies the run folder to --out, removes there the sampled training runs (default: two drawn
with --seed from the run's condition x seed pairs), every evaluation and token-level file of
their checkpoints, the base's test evaluation and the analysis, and runs `pipeline.py` on the
copy: everything else (the base model, probe, selection, learning rate, the other runs) is
reused, so only those jobs and the analysis run again. Then it compares, rerun against
committed: each checkpoint's adapter bytes, each training log's numbers (timings aside),
each evaluation's counts and responses, each token-level file, and every verdict of
verdicts.json. It writes OUT/recheck.json and prints one line per file. Exit status: 0 when
every compared file matched, 1 when one differs, 2 when it refuses (another config, or this
checkout would redo more than the sample), 3 when the rerun itself failed.

The same machine should match everywhere, bit for bit. Another CPU may not: float rounding
differs between instruction sets, and once one sampled token differs a run's path departs from
the committed one. Run it at the run's own revision (manifest.json's `revision`; the script
says when this checkout differs), or the differences may be the code's.
"""

import argparse
import csv
import platform
import random
import shutil
import subprocess
import sys
from pathlib import Path

from common import ROOT

from orchestration import config, provenance, study
from runner.stages import JOB_STAGES, Plan

UNTIMED = ("sec_", "peak_")  # training-log columns that measure the machine (seconds, peak memory), not the run


def config_difference(made: dict, cfg: config.Config) -> str | None:
    """The first setting in which `cfg` would compute otherwise than the config a run was made with
    (its manifest's), or None: every stage's hashed settings (so a key added since, at its "as
    before" value, does not count), the conditions, the seeds and the analysis settings the run had."""
    now = config.to_dict(cfg)
    for stage in provenance.STAGE_KEYS:
        try:
            if provenance.hashed_settings(made, stage) != provenance.hashed_settings(now, stage):
                return f"a setting of stage {stage}"
        except (KeyError, TypeError):
            return f"a setting of stage {stage}"
    for key in ("seeds", "seeds_by_condition"):
        if (made.get("train") or {}).get(key, {} if key == "seeds_by_condition" else None) != now["train"].get(key):
            return f"train.{key}"
    if made.get("conditions") != now["conditions"]:
        return "conditions"
    old = made.get("analyze") or {}
    return next((f"analyze.{k}" for k in old if old[k] != now["analyze"].get(k)), None)


def parse_pairs(items: list[str], cfg: config.Config) -> list[tuple[str, int]]:
    out = []
    for item in items:
        cond, _, seed = item.rpartition(":")
        if cond not in cfg.conditions or not seed.isdigit() or int(seed) not in config.seeds_of(cfg, cond):
            first = next(iter(cfg.conditions))
            raise config.ConfigError(
                f"--train {item!r}: not a condition:seed of this run (conditions "
                f"{', '.join(cfg.conditions)}; e.g. {first}:{config.seeds_of(cfg, first)[0]})"
            )
        out.append((cond, int(seed)))
    return out


def removed_files(plan: Plan, pairs: list[tuple[str, int]], base_eval: bool) -> list[Path]:
    """What the recheck takes out of the copy: the training runs, their evaluations and token
    files, the base's test evaluation, the analysis."""
    run = plan.run
    dirs = [study.train_dir(run, c, s) for c, s in pairs]
    out = list(dirs)
    for es, f, adapter in plan.evals():
        if (adapter is not None and adapter.parent in dirs) or (adapter is None and es == "test" and base_eval):
            out.append(f)
    out += [f for f, adapter in plan.tokens() if adapter.parent in dirs]
    return out + [run / "verdicts.json", run / "report.md", run / "figures"]


# ----------------------------------------------------------------------------- comparisons


def compare_adapter(a: Path, b: Path) -> dict:
    ha, hb = provenance.file_sha256(a), provenance.file_sha256(b)
    return {"file": str(a), "equal": ha is not None and ha == hb, "what": "adapter bytes"}


def compare_log(a: Path, b: Path) -> dict:
    """Training-log rows, numbers only (timings and memory aside): equal, or the first step where
    a logged number differs."""

    def rows(p):
        with open(p, newline="") as f:
            return list(csv.DictReader(f))

    ra, rb = rows(a), rows(b)
    ca = [c for c in (ra[0] if ra else {}) if not c.startswith(UNTIMED)]
    cb = [c for c in (rb[0] if rb else {}) if not c.startswith(UNTIMED)]
    if ca != cb:
        return {
            "file": str(a),
            "equal": False,
            "what": "training log",
            "why": f"other columns: {sorted(set(ca) ^ set(cb))}",
        }
    cols = ca
    differ = [x.get("step") for x, y in zip(ra, rb) if any(x[c] != y[c] for c in cols)]
    columns = [c for c in cols if any(x[c] != y[c] for x, y in zip(ra, rb))]
    equal = len(ra) == len(rb) and not differ
    return {
        "file": str(a),
        "equal": equal,
        "what": "training log",
        "rows": len(ra),
        "rows_differing": len(differ),
        "first_step_differing": differ[0] if differ else None,
        "columns_differing": columns,
    }


def compare_eval(a: Path, b: Path) -> dict:
    """An evaluation: what it computed (provenance.content_sha256), and if that differs, how many
    problems' counts and how many responses differ."""
    if provenance.content_sha256(a) == provenance.content_sha256(b):
        return {"file": str(a), "equal": True, "what": "evaluation"}
    da, db = provenance.read_json(a), provenance.read_json(b)
    pa, pb = da.get("problems", []), db.get("problems", [])
    out = {"file": str(a), "equal": False, "what": "evaluation"}
    if not pa or not pb:
        return out | {"why": "what it computed differs"}
    if len(pa) != len(pb):
        return out | {"why": f"{len(pa)} problems committed, {len(pb)} rerun"}
    if "correct_loose" not in pa[0]:  # a token-level file: its per-problem detail
        return out | {"why": f"{sum(x != y for x, y in zip(pa, pb))} of {len(pa)} problems' detail differs"}
    for s in ("loose", "strict"):
        ca, cb = [p.get(f"correct_{s}") for p in pa], [p.get(f"correct_{s}") for p in pb]
        out[f"problems_differing_{s}"] = sum(x != y for x, y in zip(ca, cb))
        out[f"correct_{s}"] = [sum(ca), sum(cb)]
    ra = [r for p in pa for r in p.get("responses", [])]
    rb = [r for p in pb for r in p.get("responses", [])]
    out["responses_differing"] = sum(x != y for x, y in zip(ra, rb)) + abs(len(ra) - len(rb))
    out["responses"] = len(ra)
    return out


def flatten(obj, prefix: str = "") -> dict:
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in flatten(val, f"{prefix}{key}.").items()}
    if isinstance(obj, list):
        return {k: v for i, val in enumerate(obj) for k, v in flatten(val, f"{prefix}{i}.").items()}
    return {prefix[:-1]: obj}


def compare_verdicts(a: Path, b: Path) -> dict:
    """Every leaf of verdicts.json but its provenance: the primary answer, the verdict words
    (strings and booleans) and the numbers (largest absolute difference)."""
    va, vb = provenance.read_json(a), provenance.read_json(b)
    fa = flatten({x: y for x, y in va.items() if x != "provenance"})
    fb = flatten({x: y for x, y in vb.items() if x != "provenance"})
    words = [k for k in fa if isinstance(fa[k], (str, bool)) or fa[k] is None]
    nums = [k for k in fa if isinstance(fa[k], (int, float)) and not isinstance(fa[k], bool)]
    words_diff = [k for k in words if fb.get(k, "<missing>") != fa[k]]
    nums_diff = [k for k in nums if fb.get(k) != fa[k]]
    gaps = [
        abs(fa[k] - fb[k])
        for k in nums_diff
        if isinstance(fb.get(k), (int, float)) and fa[k] == fa[k] and fb[k] == fb[k]
    ]
    return {
        "file": str(a),
        "what": "verdicts",
        "equal": not words_diff and not nums_diff and set(fa) == set(fb),
        "primary_answer": [va.get("primary", {}).get("answer"), vb.get("primary", {}).get("answer")],
        "words": len(words),
        "words_differing": len(words_diff),
        "first_words_differing": words_diff[:5],
        "numbers": len(nums),
        "numbers_differing": len(nums_diff),
        "largest_number_difference": max(gaps) if gaps else 0.0,
        "keys_only_in_one": sorted(set(fa) ^ set(fb))[:5],
    }


def compare_all(committed: Path, rerun: Path, removed: list[Path]) -> list[dict]:
    out = []
    for path in removed:
        rel = path.relative_to(rerun)
        src = committed / rel
        if not src.exists():
            continue
        if path.is_dir() and path.name.startswith("train_"):
            for ad in sorted(src.glob("step_*/adapter_model.safetensors")):
                out.append(compare_adapter(ad, rerun / ad.relative_to(committed)))
            for log in ("train_log.csv", "train_eval.csv"):  # the training log; the held-out dev checks
                if (src / log).exists():
                    out.append(compare_log(src / log, path / log))
        elif path.name.startswith(("eval_", "tokens_")):
            out.append(
                compare_eval(src, path) | {"what": "token-level" if path.name.startswith("tokens_") else "evaluation"}
            )
        elif path.name == "verdicts.json":
            out.append(compare_verdicts(src, path))
    for r in out:
        r["file"] = str(Path(r["file"]).relative_to(committed))
    return out


def line(r: dict) -> str:
    if r["equal"]:
        return f"  equal    {r['what']:<12} {r['file']}"
    if r["what"] == "verdicts":
        detail = (
            f"primary answer {r['primary_answer'][0]} -> {r['primary_answer'][1]}; {r['words_differing']} of {r['words']} "
            f"verdict words and {r['numbers_differing']} of {r['numbers']} numbers differ (largest by "
            f"{r['largest_number_difference']:.3g})"
        )
    elif r["what"] == "training log" and "why" in r:
        detail = r["why"]
    elif r["what"] == "training log":
        detail = (
            f"{r['rows_differing']} of {r['rows']} steps differ, from step {r['first_step_differing']} "
            f"({', '.join(r['columns_differing'][:6])})"
        )
    elif "responses" in r:
        detail = (
            f"{r['responses_differing']} of {r['responses']} responses differ; loose counts differ on "
            f"{r['problems_differing_loose']} problems (correct {r['correct_loose'][0]} -> {r['correct_loose'][1]})"
        )
    else:
        detail = r.get("why", "bytes differ")
    return f"  DIFFERS  {r['what']:<12} {r['file']}: {detail}"


def machine() -> str:
    """This machine's CPU, in words (its model name and vector extensions that change float results)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = next(
        (l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), platform.machine()
    )
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    ext = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name} ({', '.join(ext) or 'no AVX2'})"


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="the committed run folder, e.g. results/tiny_v3")
    p.add_argument("--config", required=True, help="the config it was made with, e.g. configs/tiny.yaml")
    p.add_argument("--out", required=True, help="a new folder for the copy and the rerun")
    p.add_argument(
        "--train", action="append", default=[], metavar="COND:SEED", help="a training run to redo (repeatable)"
    )
    p.add_argument("--sample", type=int, default=2, help="without --train: how many training runs to draw (default 2)")
    p.add_argument("--seed", type=int, default=0, help="the seed of that draw (default 0)")
    p.add_argument("--keep-base-eval", action="store_true", help="do not redo the base's test evaluation")
    p.add_argument("--jobs", type=int, default=1, help="passed to pipeline.py")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as given to the run's pipeline.py")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    run, out = Path(a.run).resolve(), Path(a.out).resolve()
    a.config = str(Path(a.config).resolve())  # pipeline.py runs from the repository root
    try:
        man = provenance.read_json(run / "manifest.json")
        if not man:
            raise config.ConfigError(
                f"{run / 'manifest.json'}: missing or unreadable; --run takes a folder pipeline.py made"
            )
        cfg = config.load(a.config, a.set)
        differs = config_difference(man.get("config") or {}, cfg)
        if differs:
            raise config.ConfigError(
                f"{a.config}: not the config {run} was made with ({differs} differs from its manifest's "
                f"config, hash {man.get('config_hash')}); give that config and its --set options"
            )
        if out.exists() and any(out.iterdir()):
            raise config.ConfigError(f"--out {out}: exists and is not empty; give a new folder")
        pairs = parse_pairs(a.train, cfg) if a.train else None
    except config.ConfigError as e:
        print(f"recheck.py: {e}", file=sys.stderr)
        return 2
    if pairs is None:
        units = Plan(cfg, run, a.config, a.set).train_units()
        pairs = sorted(random.Random(a.seed).sample(units, min(a.sample, len(units))))
    here = provenance.code_revision()
    if here != man.get("revision"):
        print(
            f"recheck.py: {run} was made at revision {man.get('revision')}, this checkout is {here}: a difference may "
            f"be the code's, not the machine's (git checkout {str(man.get('revision')).split('+')[0]} for a machine-only check)"
        )

    shutil.copytree(run, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("superseded", ".pipeline.lock"))
    plan = Plan(cfg, out, a.config, a.set)
    removed = removed_files(plan, pairs, not a.keep_base_eval)
    for path in removed:
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    expected = {study.train_dir(out, c, s) for c, s in pairs}
    left = plan.jobs(list(JOB_STAGES))
    extra = [
        j.name
        for j in left
        if not (j.stage == "train" and any(j.name == f"train {c} s{s}" for c, s in pairs))
        and not any(str(d) + "/" in " ".join(j.argv) for d in expected)
        and not (j.name == "eval base" and not a.keep_base_eval)
    ]
    singles = [s for s in ("base", "probe", "select", "lr-sweep") if not plan.done(s)]
    if extra or singles:
        shutil.rmtree(out)  # the copy this command made (--out was new or empty)
        what = (singles or extra)[0]
        print(
            f"recheck.py: {run}: '{what}' would be redone too ({len(extra) + len(singles)} outputs out of date under this "
            f"checkout); check out the run's revision {man.get('revision')} and try again",
            file=sys.stderr,
        )
        return 2
    print(
        f"recheck.py: rerunning {', '.join(f'{c} s{s}' for c, s in pairs)} "
        f"({len(left)} jobs{'' if a.keep_base_eval else ', the base evaluation among them'}) and the analysis in {out}",
        flush=True,
    )
    cmd = [
        sys.executable,
        str(ROOT / "pipeline.py"),
        "--config",
        a.config,
        "--run",
        str(out),
        "--jobs",
        str(a.jobs),
        "--quiet",
    ]
    cmd += sum((["--set", s] for s in a.set), [])
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    if rc != 0:
        print(
            f"recheck.py: the rerun failed (pipeline.py exited {rc}); nothing compared. {out} holds it: run the same "
            f"pipeline.py command on it to finish, or delete it",
            file=sys.stderr,
        )
        return 3
    return compare_and_record(run, out, removed, pairs, man.get("revision"), here)


def compare_and_record(run: Path, out: Path, removed: list[Path], pairs, revision_committed, here) -> int:
    """Compare the rerun's files with the committed ones, write OUT/recheck.json, print a line per file;
    0 when every file compared is equal, else 1."""
    results = compare_all(run, out, removed)
    record = {
        "committed": str(run),
        "rerun": str(out),
        "train": [f"{c}:{s}" for c, s in pairs],
        "revision_committed": revision_committed,
        "revision_here": here,
        "machine_here": machine(),
        "equal": sum(r["equal"] for r in results),
        "compared": len(results),
        "files": results,
    }
    provenance.atomic_write_json(out / "recheck.json", record)
    print(
        f"recheck.py: {record['equal']} of {record['compared']} files equal to {run}'s (details in {out / 'recheck.json'})"
    )
    for r in results:
        print(line(r))
    return 0 if results and record["equal"] == record["compared"] else 1


if __name__ == "__main__":
    sys.exit(main())
