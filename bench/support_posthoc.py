"""Re-analyse a committed run of the CPU world under PLAN_CHANGES.md change 57, post hoc, into a new folder,
leaving the run as it is: its inputs are copied (analyze_b.copy_inputs), every correct response of every
evaluation file is teacher-forced through the base as eval.base_support does (method/base_support.py),
the recorded config gains eval.base_support and a descriptive analyze.base_support (primary: false), and
analyze_b.py runs on the copy. Nothing is sampled; no trained model is loaded.

    python bench/support_posthoc.py --run results/tiny_v5 --base results/tiny_v4/base_model --out results/tiny_v5_base_support

The runs made before change 57 kept each response's text, not the token ids the sampler drew. The
measure needs the ids, so this refuses a tokenizer on which the text does not nearly determine them:
every token of the base vocabulary must decode to one character, no two to the same one; each response
must decode back to its text; and the sampler must have one stop token, appended where the response
ended before max_new_tokens (the text drops it). The added tokens (`<think>`, `<answer>`, ...) are
taken whole, as the tokenizer does: a response drawn character by character through one of them is
measured on the other segmentation (recorded as a caveat in every file; the registered measure of
change 57 reads the drawn ids and has no such caveat).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import analyze_b  # noqa: E402
import countdown  # noqa: E402
from orchestration import config  # noqa: E402
from orchestration.provenance import atomic_write_json, code_revision, file_sha256  # noqa: E402

POSTHOC_ANALYSIS = {"primary": False, "tolerance": 0.0001, "kept_margin": 0.005, "matched": None}


def segmentation(tok) -> tuple[str | None, list[str]]:
    """(why the text does not fix the ids, or None; the added tokens taken whole). Every token of the base
    vocabulary must be one distinct character; an added token (e.g. `<answer>`) is matched whole by the
    tokenizer, so a response the sampler drew character by character through its text is measured on the
    tokenizer's segmentation instead: the caveat every post-hoc file records."""
    added = {i: t for t, i in tok.get_added_vocab().items()}
    seen = {}
    for i in range(len(tok)):
        if i in added:
            continue
        s = tok.decode([i])
        if len(s) != 1 or s in seen:
            return f"token {i} decodes to {s!r}" + (f", as token {seen[s]} does" if s in seen else ""), []
        seen[s] = i
    return None, sorted(t for i, t in added.items() if i not in tok.all_special_ids)


def drawn_ids(tok, text: str, stop: int, max_new: int) -> list[int]:
    ids = tok.encode(text, add_special_tokens=False)
    if tok.decode(ids) != text:
        raise ValueError(f"the response {text[:40]!r}... does not decode back to its text")
    return ids + [stop] if len(ids) < max_new else ids


def measure_file(f: Path, model, tok, cfg, whole: list[str]) -> int:
    """Add base_support to every row of one evaluation file through evaluate.add_base_support, as
    eval.base_support writes it, from the re-encoded responses. Returns the correct responses measured."""
    from method.evaluate import add_base_support

    doc = json.loads(f.read_text())
    s = doc["sampling"]
    if len(s["stop_ids"]) != 1:
        raise ValueError(f"{f}: {len(s['stop_ids'])} stop tokens: which one ended a response is not recorded")
    problems = [countdown.Problem.from_row(p, doc.get("task")) for p in doc["problems"]]
    tokens = [
        [drawn_ids(tok, r, s["stop_ids"][0], s["max_new_tokens"]) for r in row["responses"]] for row in doc["problems"]
    ]
    sampling = config.SamplingCfg(
        temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"], max_new_tokens=s["max_new_tokens"]
    )
    add_base_support(model, tok, cfg, problems, tokens, doc["problems"], sampling)
    doc["provenance"]["post_hoc"] = {
        "measure": "eval.base_support (PLAN.md change 57), re-encoded from the stored text",
        "added_tokens_taken_whole": whole,
        "tool": "bench/support_posthoc.py",
        "revision": code_revision(),
    }
    atomic_write_json(f, doc)
    return sum(len(row["base_support"]["index"]) for row in doc["problems"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description="Re-analyse a committed run under PLAN_CHANGES.md change 57 (post hoc), into a new folder."
    )
    p.add_argument("--run", required=True)
    p.add_argument("--base", required=True, help="the run's base model folder, with its weights")
    p.add_argument("--out", required=True, help="a new (or empty) folder")
    p.add_argument(
        "--conditions",
        nargs="*",
        default=None,
        help="measure only these conditions' files (and every base file); the others read 'not measured'",
    )
    a = p.parse_args(argv)
    run, out, base = Path(a.run), Path(a.out), Path(a.base)
    if out.exists() and any(out.iterdir()):
        print(f"support_posthoc.py: --out {out}: exists and is not empty; give a new folder", file=sys.stderr)
        return 2
    import torch

    from method.model import load_model
    from orchestration import records

    manifest = json.loads((run / "manifest.json").read_text())
    want = manifest["config"]["model"].get("base_sha256")
    if want and file_sha256(base / "model.safetensors") != want:
        print(
            f"support_posthoc.py: --base {base}: its weights' sha256 is not the run's model.base_sha256 {want[:8]}...",
            file=sys.stderr,
        )
        return 2
    cfg = records.from_record(manifest["config"])
    torch.set_num_threads(cfg.threads)
    model, tok = load_model(cfg, str(base), torch.device("cpu"))
    why, whole = segmentation(tok)
    if why is not None:
        print(
            f"support_posthoc.py: {base}: the stored text does not determine the drawn token ids ({why})",
            file=sys.stderr,
        )
        return 2
    analyze_b.copy_inputs(run, out)
    for f in sorted(out.glob("eval_*.json")) + sorted(out.glob("evalsets/*/eval_*.json")):
        if (
            a.conditions is not None
            and f.name != "eval_base.json"
            and not any(f.name.startswith(f"eval_{c}_s") for c in a.conditions)
        ):
            continue
        print(f"{f.relative_to(out)}: {measure_file(f, model, tok, cfg, whole)} correct responses measured", flush=True)
    rec = config.to_dict(cfg)
    rec["eval"]["base_support"], rec["analyze"]["base_support"] = True, dict(POSTHOC_ANALYSIS)
    manifest["config"] = rec
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return subprocess.run([sys.executable, str(ROOT / "analyze_b.py"), "--run", str(out)]).returncode


if __name__ == "__main__":
    sys.exit(main())
