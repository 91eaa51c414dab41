"""Say whether two run folders computed the same things: the check a refactor's commit quotes.

    python bench/same_run.py /tmp/smoke_before /tmp/smoke_after

Every file both folders hold is compared after the parts that measure the machine or name the
folder are set aside: the run folder's own path (written into adapter configs and evaluations),
JSON keys that time or describe a process (`seconds`, `time`, `resumed_from_calls`, `provenance`, ...; the stage hash
inside `provenance` is kept and compared), training-log columns `sec_*` and `peak_*`, and in
report.md its title, time stamp and the inputs table's bytes hashes, revisions and times. Weights
(.safetensors, .pt) are compared byte for byte. Prints one line per file that differs, then a
count; exit status 0 when everything compared is equal, 1 when something differs or one folder
holds a file the other does not.
"""

import argparse
import csv
import io
import json
import re
import sys
from pathlib import Path

UNTIMED = ("sec_", "peak_")  # training-log columns that measure the machine
# the last two: free memory, and how many sampling calls an earlier part of an evaluation made (it resumed)
TIMING_KEYS = {
    "seconds",
    "time",
    "wall_s",
    "started",
    "finished",
    "first_call_seconds",
    "micro_batch_why",
    "resumed_from_calls",
}
SKIP = {"manifest.json"}  # the pipeline's own log of when and how long: it differs by construction


def untimed(x, run: str):
    """x without timing keys, with the run folder's path replaced by RUN; a provenance block keeps
    only its stage hash (its config record and revision name the process, not the computation)."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if k in TIMING_KEYS or k.endswith("_seconds"):
                continue
            out[k] = (
                {"stage_hash": v.get("stage_hash")} if k == "provenance" and isinstance(v, dict) else untimed(v, run)
            )
        return out
    if isinstance(x, list):
        return [untimed(v, run) for v in x]
    if isinstance(x, str):
        return x.replace(run, "RUN")
    return x


def csv_rows(text: str) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith(UNTIMED)} for row in csv.DictReader(io.StringIO(text))]


PROVENANCE_ROW = re.compile(
    r"^\| (\S+) \| [0-9a-f]{12} \| ([0-9a-f]+) \|"
)  # report.md's inputs table: file, sha256, stage hash, ...


def report_lines(text: str) -> list[str]:
    """report.md without its title (the folder's name), its time stamp, and in the inputs table each
    file's bytes hash, revision and time (the file's stage hash stays)."""
    out = []
    for ln in text.splitlines():
        if ln.startswith(("# Report: ", "Written by `analyze_b.py` on ")):
            continue
        m = PROVENANCE_ROW.match(ln)
        out.append(f"| {m[1]} | {m[2]} |" if m else ln)
    return out


def same(a: Path, b: Path, rel: str) -> bool:
    A, B = (a / rel).read_bytes(), (b / rel).read_bytes()
    if A == B:
        return True
    if rel.endswith((".safetensors", ".pt", ".png")):
        return False
    ta, tb = A.decode().replace(str(a), "RUN"), B.decode().replace(str(b), "RUN")
    if rel.endswith(".json"):
        return untimed(json.loads(ta), "RUN") == untimed(json.loads(tb), "RUN")
    if rel.endswith(".csv"):
        return csv_rows(ta) == csv_rows(tb)
    if rel.endswith(".md"):
        return report_lines(ta) == report_lines(tb)
    return ta == tb


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    args = p.parse_args(argv)
    a, b = args.a.resolve(), args.b.resolve()
    files = {
        x: {f.relative_to(x).as_posix() for f in x.rglob("*") if f.is_file() and "superseded" not in f.parts}
        for x in (a, b)
    }
    lone = sorted(files[a] ^ files[b])
    for f in lone:
        print(f"only in {a if f in files[a] else b}: {f}")
    both = sorted((files[a] & files[b]) - SKIP)
    differ = [f for f in both if not same(a, b, f)]
    for f in differ:
        print(f"differs: {f}")
    print(
        f"{len(both) - len(differ)} of {len(both)} files compared equal ({len(differ)} differ, {len(lone)} in one folder only; "
        f"skipped {', '.join(sorted(SKIP))})"
    )
    return 1 if differ or lone else 0


if __name__ == "__main__":
    sys.exit(main())
