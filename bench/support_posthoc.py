"""Re-analyse a committed run of the CPU world under PLAN_CHANGES.md change 57, post hoc, into a new folder,
leaving the run as it is: its inputs are copied (analysis/run_files.copy_inputs), every correct response of every
evaluation file is teacher-forced through the base as eval.base_support does (method/base_support.py),
the recorded config gains eval.base_support and a descriptive analyze.base_support (primary: false), and
analyze_b.py runs on the copy. Nothing is sampled; no trained model is loaded.

    python bench/support_posthoc.py --run results/tiny_v5 --base results/tiny_v4/base_model --out results/tiny_v5_base_support
    python bench/support_posthoc.py --run results/tiny_v6 --base results/tiny_v4/base_model --out /tmp/v6wc \
        --within-correct matched pool-train     # section 7e's records on the T 1 sets, the adapters committed

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

import countdown  # noqa: E402
from analysis.run_files import copy_inputs  # noqa: E402
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


def measure_file(f: Path, model, tok, cfg, whole: list[str], trained: bool = False) -> int:
    """Add base_support to every row of one evaluation file through evaluate.add_base_support, as
    eval.base_support writes it (with eval.within_correct's records where cfg sets it; `trained`: the model
    holds the file's adapter), from the re-encoded responses. Returns the correct responses measured."""
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
    add_base_support(model, tok, cfg, problems, tokens, doc["problems"], sampling, trained=trained)
    measure = "eval.base_support (PLAN.md change 57)" + (" and eval.within_correct (7e)" if trained else "")
    doc["provenance"]["post_hoc"] = {
        "measure": measure + ", re-encoded from the stored text",
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
    p.add_argument(
        "--within-correct",
        nargs=2,
        metavar=("MATCHED", "POOL"),
        default=None,
        help="instead: the records of PLAN.md section 7e on these two evaluation sets only (the trained models' and "
        "the base's at T 1; each trained file with its committed adapter), and a post hoc analyze.within_correct",
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
    copy_inputs(run, out)
    if a.within_correct:
        return within_correct(a, cfg, manifest, base, out, model, tok, whole)
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


def within_correct(a, cfg, manifest: dict, base: Path, out: Path, model, tok, whole: list[str]) -> int:
    """Section 7e's records on the two sets' files (LoRA on for a trained file's own log-probabilities: its
    adapter, checked by the sha256 the file records), the recorded config gaining eval.within_correct and a
    post hoc analyze.within_correct, then analyze_b.py on the copy."""
    from method.model import load_policy

    matched, pool = a.within_correct
    cfg.eval.within_correct = True
    for f in sorted((out / "evalsets" / matched).glob("eval_*.json")) + [out / "evalsets" / pool / "eval_base.json"]:
        doc = json.loads(f.read_text())
        adapter = None if doc.get("adapter_sha256") is None else ROOT / doc["model"]
        if adapter is not None and file_sha256(adapter / "adapter_model.safetensors") != doc["adapter_sha256"]:
            print(f"support_posthoc.py: {adapter}: not the adapter {f.name} records", file=sys.stderr)
            return 2
        policy = model if adapter is None else load_policy(cfg, str(base), adapter, model.device)[0]
        n = measure_file(f, policy, tok, cfg, whole, trained=adapter is not None)
        print(f"{f.relative_to(out)}: {n} correct responses measured", flush=True)
    rec = config.to_dict(cfg)
    rec["analyze"]["within_correct"] = {"matched": matched, "pool": pool, "post_hoc": True}
    manifest["config"] = rec
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return subprocess.run([sys.executable, str(ROOT / "analyze_b.py"), "--run", str(out)]).returncode


if __name__ == "__main__":
    sys.exit(main())
