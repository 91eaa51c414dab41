"""The secondary analyses of a study with controls, evaluation sets and tokens (analysis/secondary.py,
report_secondary.py, figures.py): the controls H4-H6 found by their settings, beyond n, diversity,
out of distribution, the token level, strategies, the learning-rate section; missing and malformed
set and token files.

Everything runs on synthetic eval files written into tmp_path; no model is involved."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from analysis_runs import FAST, B, axes_drawn, edit_json, entry, eval_doc, make_config, set_json, write_train_log
from test_stats import TOKEN_PROBLEMS

from analysis import assemble, figures, run_files, secondary, stats

pytestmark = pytest.mark.slow  # whole pipelines or real weights: left out of the fast loop


def test_find_twins_reads_the_settings_not_the_names():
    st = {
        c: {**run_files.DEFAULT_CONDITION, **v}
        for c, v in {
            "many": {},
            "16": {"problems": "select-16"},
            "1": {"problems": "select-1"},
            "16-kl": {"problems": "select-16", "kl": 0.001},
            "format": {"reward": "format"},
            "rft": {"method": "rft"},
            "sft": {"method": "sft", "lr": 0.01},
            "anchored-1": {"problems": "select-1", "kl": 0.01, "entropy": 0.1},
        }.items()
    }
    assert secondary.find_twins(st, "kl", lambda s: s["kl"] > 0) == [
        ("16-kl", "16")
    ]  # anchored-1 has no twin (entropy differs)
    assert secondary.find_twins(st, "reward", lambda s: s["reward"] == "format") == [("format", "many")]
    assert secondary.find_twins(st, "method", lambda s: s["method"] != "grpo") == [
        ("rft", "many"),
        ("sft", "many"),
    ]  # lr is ignored


STUDY_CONDITIONS = {
    "many": {"problems": "all"},
    "16": {"problems": "select-16"},
    "1": {"problems": "select-1"},
    "16-kl": {"problems": "select-16", "kl": 0.001},
    "format": {"problems": "all", "reward": "format"},
    "rft": {"problems": "all", "method": "rft"},
    "sft": {"problems": "all", "method": "sft"},
}


SEEDS, STEPS, NT = [0, 1], [5, 10], 40  # the test set: 40 problems x n = 8


STUDY_BASE = [2] * 20 + [0] * 20  # pass@1 0.125, pass@8 0.5


STUDY_TEST = {  # the same counts at both checkpoints and for both seeds, strict = loose
    "many": [6] * 20 + [0] * 20,  # pass@1 +0.25, pass@8 unchanged: equivalent
    "16": [8] * 10 + [0] * 30,  # pass@1 +0.125, pass@8 -0.25: the ceiling falls
    "1": STUDY_BASE,
    "16-kl": [4] * 20 + [0] * 20,  # pass@8 unchanged: equivalent -> H4 holds; contrast +0.25
    "format": [3] * 20 + [0] * 20,  # pass@1 +0.0625 = a quarter of many's, in every replicate
    "rft": [8] * 20 + [0] * 20,  # above many at k = 1 (1.0 vs 0.75 on the solved half), equal from k = 3
    "sft": [1] * 40,  # pass@k = k/8 on every problem: below many at k = 1..3, equal at 4, above after
}


WIDE_N, WIDE_IDS = 32, list(range(16))  # the wide set: the first 16 test problems x 32 samples


WIDE_BASE = [8] * 12 + [0] * 4  # ids 12..15 never solved by the base


WIDE_MANY = [20] * 10 + [0] * 2 + [5] * 4  # only RL: 12..15; only base: 10, 11


OOD_IDS = list(range(100, 120))


OOD_BASE, OOD_MANY = [1] * 10 + [0] * 10, [2] * 10 + [0] * 10  # pass@1 +0.0625, pass@8 unchanged


DIV_BASE, DIV_RL = (
    {"distinct_answers": 4, "answer_entropy": 1.2, "token_entropy": 0.8},
    {"distinct_answers": 2, "answer_entropy": 0.5, "token_entropy": 0.4},
)


def study_config(**extra):
    cfg = {
        "seed": 0,
        "task": {"name": "arith-2x1"},
        "conditions": STUDY_CONDITIONS,
        "train": {"seeds": SEEDS, "checkpoints": STEPS},
        "eval": {"n": 8, "k_max": 8},
        "analyze": {"resamples": B, "ci": 0.95, "extrapolate_to": 1024, "beyond_resamples": 40},
        "eval_sets": {
            "wide": {
                "task": None,
                "n_problems": len(WIDE_IDS),
                "n": WIDE_N,
                "k_max": WIDE_N,
                "models": "final-first-seed",
            },
            "ood": {"task": "arith-3x3", "n_problems": len(OOD_IDS), "n": 8, "k_max": 8, "models": "final"},
        },
        "tokens": {"enabled": True},
    }
    cfg.update(extra)
    return cfg


def study_doc(counts, n, ids, cfg, eval_set, task, div, key=None):
    d = eval_doc(
        counts,
        n=n,
        ids=ids,
        config=cfg,
        eval_set=eval_set,
        task=task,
        **({} if key is None else {"condition": key[0], "train_seed": key[1], "step": key[2]}),
    )
    for p in d["problems"]:
        p.update(div)
        p.pop("responses")
    return d


def write_study(run: Path, cfg=None) -> Path:
    cfg = cfg or study_config()
    run.mkdir(parents=True)

    def put(path, doc):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))

    ids = list(range(NT))
    put(run / "eval_base.json", study_doc(STUDY_BASE, 8, ids, cfg, "test", "arith-2x1", DIV_BASE))
    put(
        run / "evalsets/wide/eval_base.json", study_doc(WIDE_BASE, WIDE_N, WIDE_IDS, cfg, "wide", "arith-2x1", DIV_BASE)
    )
    put(run / "evalsets/ood/eval_base.json", study_doc(OOD_BASE, 8, OOD_IDS, cfg, "ood", "arith-3x3", DIV_BASE))
    for c in STUDY_CONDITIONS:
        for s in SEEDS:
            for st in STEPS:
                key = (c, s, st)
                put(
                    run / f"eval_{c}_s{s}_{st:03d}.json",
                    study_doc(STUDY_TEST[c], 8, ids, cfg, "test", "arith-2x1", DIV_RL, key),
                )
                tokens = {
                    "condition": c,
                    "train_seed": s,
                    "step": st,
                    "summary": stats.token_summary(TOKEN_PROBLEMS),
                    "problems": TOKEN_PROBLEMS,
                    "provenance": {"config": cfg},
                }
                put(run / f"tokens_{c}_s{s}_{st:03d}.json", tokens)
            put(
                run / f"evalsets/ood/eval_{c}_s{s}_010.json",
                study_doc(
                    OOD_MANY if c == "many" else OOD_BASE, 8, OOD_IDS, cfg, "ood", "arith-3x3", DIV_RL, (c, s, 10)
                ),
            )
        put(
            run / f"evalsets/wide/eval_{c}_s0_010.json",
            study_doc(
                WIDE_MANY if c == "many" else WIDE_BASE, WIDE_N, WIDE_IDS, cfg, "wide", "arith-2x1", DIV_RL, (c, 0, 10)
            ),
        )
    return run


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    run = write_study(tmp_path_factory.mktemp("study") / "run")
    for c in ("many", "sft"):
        for s in SEEDS:
            write_train_log(
                run / f"train_{c}_s{s}" / "train_log.csv",
                steps=10,
                cols=["step", "reward_mean", "entropy_mean", "kl_mean", "grad_norm", "grad_norm_clipped"],
            )
            write_dev_log(run / f"train_{c}_s{s}" / "train_eval.csv", seed=s)
    return run, assemble.run_analysis(run, make_figures=False)  # the figures: test_study_figures


def write_dev_log(path: Path, seed=0, steps=(2, 4, 6, 8, 10)):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["step", "n_problems", "n", "strict_pass1", "loose_pass1", "strict_passn", "loose_passn", "format_rate"]
        )
        for st in steps:
            w.writerow([st, 16, 8, 0.1, 0.2 + 0.01 * st + 0.1 * seed, "nan", 0.5 + 0.01 * st, ""])


def test_study_controls_h4_h5_h6(study):
    run, out = study
    c = out["controls"]
    assert c["skipped"] == [] and c["step"] == 10 and c["scorings"] == {"H4": "loose", "H5": "strict", "H6": "loose"}
    [h4] = c["h4"]
    assert (h4["anchored"], h4["unanchored"], h4["kl"], h4["k_max"]) == ("16-kl", "16", 0.001, 8)
    e_kl, e_16 = (
        entry(out, "16-kl", 10),
        entry(out, "16", 10),
    )  # the registered entries' adjusted verdicts, side by side
    bk, b16 = e_kl["base_null"], e_16["base_null"]  # H4 is about the base: the base-null reading's tests
    assert (
        h4["anchored_ceiling_equivalent"] is bk["ceiling_equivalent"] is True
        and h4["anchored_p_equiv_adj"] == bk["p_equiv_adj"]
    )
    assert (
        h4["unanchored_ceiling_falls"] is b16["ceiling_falls"] is True
        and h4["unanchored_p_falls_adj"] == b16["p_falls_adj"]
    )
    assert h4["holds"] is True
    assert h4["contrast"] == pytest.approx(0.0 - (-0.25)) and h4["contrast_ci"][0] > 0
    [h5] = c["h5"]
    assert (h5["condition"], h5["reference"], h5["scoring"]) == ("format", "many", "strict")
    assert h5["gain"] == pytest.approx(0.0625) and h5["reference_gain"] == pytest.approx(0.25)
    # proportional on every problem
    assert h5["estimable"] and h5["share"] == pytest.approx(0.25) and h5["ci"] == pytest.approx([0.25, 0.25])
    # stream 1: the entry's replicates
    assert h5["reference_gain_ci"] == pytest.approx(entry(out, "many", 10, "strict")["pass1_ci"], abs=1e-12)
    h6 = {h["other"]: h for h in c["h6"]}
    assert set(h6) == {"rft", "sft"} and all(h["rl"] == "many" and h["scoring"] == "loose" for h in h6.values())
    many = stats.pass_at_k_curves(STUDY_TEST["many"], 8, 8).mean(axis=0)
    for o in ("rft", "sft"):
        assert h6[o]["diff"] == pytest.approx(
            list(many - stats.pass_at_k_curves(STUDY_TEST[o], 8, 8).mean(axis=0)), abs=1e-12
        )
        assert all(lo <= d <= hi for lo, d, hi in zip(h6[o]["lo"], h6[o]["diff"], h6[o]["hi"]))
    assert h6["rft"]["crossover"]["leader_at_k1"] == "rft" and h6["rft"]["crossover"]["point"] == {
        "outcome": "crosses",
        "k": 3,
    }
    assert h6["sft"]["crossover"]["leader_at_k1"] == "many" and h6["sft"]["crossover"]["point"] == {
        "outcome": "crosses",
        "k": 4,
    }
    assert h6["sft"]["diff_passk"] == pytest.approx(0.5 - 1.0)
    v = json.loads((run / "verdicts.json").read_text())
    assert v["controls"]["h4"] == json.loads(json.dumps(c["h4"]))
    fam = out["families"]["secondary-loose"]
    # every condition in the families
    assert len(fam["entries"]) == 7 * 2 - 1 and "16-kl/10" in fam["entries"] and "sft/5" in fam["entries"]


def test_study_beyond_n_check_and_boundary(study):
    _, out = study
    bz = out["beyond_n"]
    assert (bz["set"], bz["n"], bz["extrapolate_to"], bz["model_used"]) == ("wide", WIDE_N, 1024, "beta-binomial")
    assert [(f["condition"], f["seed"], f["scoring"]) for f in bz["fits"]][:4] == [
        ("base", None, "strict"),
        ("base", None, "loose"),
        ("many", 0, "strict"),
        ("many", 0, "loose"),
    ]
    assert len(bz["fits"]) == 2 * (1 + 7)  # the base and each condition's first seed at step 10
    f = bz["fits"][0]
    assert f["file"] == "evalsets/wide/eval_base.json" and f["measured_pass_at_n"] == 0.75
    assert f["model_pass_at_extrapolated"] >= f["model_pass_at_n"] and f["used"] == "beta-binomial"
    assert f["aic_prefers"] in ("beta-binomial", "zero-inflated beta-binomial")
    assert f["extrapolated_ci"][0] <= f["model_pass_at_extrapolated"] <= f["extrapolated_ci"][1]
    # the check: fitted to the test set's counts on the 16 wide problems (all 6 of 8 for many), predicting pass@32 on them
    chk = {(r["condition"], r["scoring"]): r for r in bz["check"]}
    r = chk[("many", "loose")]
    assert (r["fit_file"], r["target_file"], r["n_problems"], r["fit_n"]) == (
        "eval_many_s0_010.json",
        "evalsets/wide/eval_many_s0_010.json",
        16,
        8,
    )
    assert r["measured"] == pytest.approx(14 / 16) and r["predicted"] == pytest.approx(1 - 0.25**32, abs=1e-3)
    assert r["error"] == pytest.approx(r["predicted"] - r["measured"]) and r["naive"] == pytest.approx(1.0)
    assert (
        chk[("base", "strict")]["predicted"] == pytest.approx(1 - 0.75**32, abs=1e-3)
        and chk[("base", "strict")]["measured"] == 0.75
    )
    # the contrast check: the same fits' Delta pass@32, and the measured Delta on the wide set
    con = {(r["condition"], r["scoring"]): r for r in bz["contrasts"]}
    c = con[("many", "loose")]
    assert c["predicted_delta"] == pytest.approx(r["predicted"] - chk[("base", "loose")]["predicted"], abs=1e-12)
    assert c["measured_delta"] == pytest.approx(r["measured"] - chk[("base", "loose")]["measured"], abs=1e-12)
    assert c["covered"] == (c["error_ci"][0] <= 0 <= c["error_ci"][1])
    assert len(con) == 2 * 7 and bz["contrast_coverage"]["of"] == 14
    cov = bz["contrast_coverage"]  # the paired bootstrap's interval widths and the mean error, reported
    assert cov["median_width"] == pytest.approx(np.median([x["error_ci"][1] - x["error_ci"][0] for x in con.values()]))
    assert cov["mean_error"] == pytest.approx(np.mean([x["error"] for x in con.values()]))
    b = {(r["condition"], r["scoring"]): r for r in out["boundary"]["rows"]}
    assert out["boundary"]["set"] == "wide" and len(b) == 2 * 7
    assert (b[("many", "loose")]["only_rl_ids"], b[("many", "loose")]["only_base_ids"]) == ([12, 13, 14, 15], [10, 11])
    assert b[("sft", "strict")]["only_rl"] == b[("sft", "strict")]["only_base"] == 0
    nl = b[("many", "loose")]["null"]  # chance, from the test set's fresh base samples of the 16 wide problems
    assert nl["fresh_n"] == 8 and nl["expected"] >= 0 and nl["only_rl"]["observed"] == 4 and 0 < nl["only_rl"]["p"] <= 1


def test_study_diversity_ood_and_tokens(study):
    _, out = study
    d = {(r["set"], r["condition"], r["step"]): r for r in out["diversity"]["conditions"]}
    assert d[("test", "base", None)]["distinct_answers"] == 4 and d[("test", "many", 10)][
        "answer_entropy"
    ] == pytest.approx(0.5)
    assert d[("test", "sft", 5)]["seeds"] == [0, 1] and d[("ood", "many", 10)]["token_entropy"] == pytest.approx(0.4)
    assert ("wide", "many", 10) in d and ("ood", "many", 5) not in d  # ood evaluates the final checkpoint only
    assert len([m for m in out["diversity"]["models"] if m["set"] == "test"]) == 1 + 7 * 2 * 2
    o = out["ood"]["ood"]
    assert (o["task"], o["n"], o["k_max"], o["test_k_max"], o["n_problems"]) == ("arith-3x3", 8, 8, 8, 20)
    rows = {(r["condition"], r["scoring"]): r for r in o["rows"]}
    r = rows[("many", "loose")]
    assert r["seeds"] == [0, 1] and r["ood_pass1_diff"] == pytest.approx(0.0625) and r["ood_passk_diff"] == 0
    assert r["ood_pass1_ci"][0] > 0 and r["ood_passk_ci"] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert (
        r["test_pass1_diff"] == entry(out, "many", 10)["pass1_diff"]
        and r["test_passk_ci"] == entry(out, "many", 10)["passk_ci"]
    )
    assert rows[("base", "strict")]["ood_pass1"] == pytest.approx(1 / 16)
    t = out["tokens"]
    assert t["enabled"] and len(t["rows"]) == 7 * 2 * 2 and t["warnings"] == []
    assert t["rows"][0]["condition"] == "many" and t["rows"][0]["share_reranked"] == pytest.approx(0.05)
    assert t["rows"][0]["entropy_ratio"] == pytest.approx(10.0) and t["paper"]["entropy_ratio"] == [7.6, 12.6]
    assert (
        out["eval_sets"]["wide"]["models"] == "final-first-seed" and len(out["eval_sets"]["ood"]["files"]) == 1 + 7 * 2
    )
    assert (
        "evalsets/wide/eval_many_s0_010.json" in out["provenance"]["inputs"]
        and "tokens_sft_s1_005.json" in out["provenance"]["inputs"]
    )


def test_study_report_and_figures(study):
    run, out = study
    rep = (run / "report.md").read_text()
    for head in (
        "## Controls and baselines: H4–H6 (step 10)",
        "## Evaluation sets",
        "## pass@k beyond n = 32: model-based (beta-binomial)",
        "## Boundary at n = 32",
        "## Diversity",
        "## In vs out of distribution: test vs ood",
        "## The token level",
    ):
        assert head in rep, head
    assert rep.index("## H3") < rep.index("## The strict scoring") < rep.index("## Controls and baselines")
    assert "| 16-kl (0.001) |" in rep and "**yes**" in rep and "| format | +0.062" in rep and "0.25 [0.25, 0.25]" in rep
    assert "rft leads: k = 3" in rep and "many leads: k = 4" in rep
    assert "pass@1024 (model-based (beta-binomial))" in rep and "predicted pass@32 (model-based (beta-binomial))" in rep
    assert (
        "| many s0 step 10 | loose | 12 / 14 | 4 | " in rep
        and "| 12, 13, 14, 15 | 2 | " in rep
        and "Δpass@32 (RL − base)" in rep
    )
    assert (
        "| *paper (another model and task)* |" in rep
        and "| many | 0 | 5 | 20 | 90.000% | 5.000% | 5.000% | 5.00 |" in rep
    )
    assert "eval_base.json" in rep and "evalsets/wide/" in rep and "tokens_many_s0_005.json" in rep


def test_study_figures(study, tmp_path, monkeypatch):
    """The new figures, drawn from the study's analysis (the per-condition pass@k figures are
    test_figures_and_report's): each has a y label on every panel; the extrapolated part is dashed
    and labelled model-based in the legend."""
    run, _ = study
    res = assemble.analyze(run, resamples=FAST)
    seen = axes_drawn(monkeypatch)
    out = tmp_path / "figures"
    out.mkdir()
    paths = [
        figures.beyond_figure(out, res),
        *figures.ood_figures(out, res),
        figures.diversity_figure(out, res),
        figures.controls_figure(out, res),
        figures.training_dev_figure(run, [5, 10]),
    ]
    assert [p.name for p in paths] == [
        "passk_beyond_n.png",
        "ood_ood.png",
        "diversity.png",
        "controls_h6.png",
        "training_dev.png",
    ]
    for name, axes in seen.items():
        assert all(ax.get_ylabel() for ax in axes), name
    loose = seen["passk_beyond_n.png"][0]
    labels = loose.get_legend_handles_labels()[1]
    assert "model-based (beta-binomial)" in labels and "base" in labels and "many s0 step 10" in labels
    dashed = [ln for ln in loose.lines if ln.get_linestyle() == "--" and len(ln.get_xdata())]
    assert (
        dashed
        and max(max(ln.get_xdata()) for ln in dashed) == 1024
        and min(min(ln.get_xdata()) for ln in dashed) == WIDE_N
    )
    assert len(seen["ood_ood.png"]) == 4 and len(seen["diversity.png"]) == 3 and len(seen["controls_h6.png"]) == 2


def test_study_report_numbers_recompute_from_the_files_they_name(study):
    """The report names its files; recompute three of its numbers from those files alone, with
    code written here: a boundary, a diversity mean and a model check's measured pass@n."""
    run, out = study
    load = lambda f: json.loads((run / f).read_text())
    row = next(r for r in out["boundary"]["rows"] if (r["condition"], r["scoring"]) == ("many", "strict"))
    base, rl = load(row["base_file"]), load(row["file"])
    assert row["only_rl_ids"] == [
        b["id"] for b, r in zip(base["problems"], rl["problems"]) if b["correct_strict"] == 0 < r["correct_strict"]
    ]
    m = next(
        r
        for r in out["diversity"]["models"]
        if (r["set"], r["condition"], r["seed"], r["step"]) == ("ood", "sft", 1, 10)
    )
    assert m["distinct_answers"] == np.mean([p["distinct_answers"] for p in load(m["file"])["problems"]])
    chk = next(r for r in out["beyond_n"]["check"] if (r["condition"], r["scoring"]) == ("many", "loose"))
    assert chk["measured"] == np.mean([p["correct_loose"] > 0 for p in load(chk["target_file"])["problems"]])


def test_training_dev_figure_and_new_log_columns(tmp_path):
    run = tmp_path / "run"
    write_dev_log(run / "train_many_s0" / "train_eval.csv")
    write_dev_log(run / "train_many_s1" / "train_eval.csv", seed=1, steps=(2, 4, 6))
    (run / "train_sft_s0").mkdir()
    (run / "train_sft_s0" / "train_log.csv").write_text(
        "step,reward_mean,entropy_mean,kl_mean,grad_norm_clipped\n1,nan,0.5,nan,1.0\n2,nan,0.4,nan,0.9\n"
    )
    assert figures.training_figure(run, [5]) == run / "figures" / "training.png"  # sft: no reward, drawn without error
    assert (run / "figures" / "training_dev.png").stat().st_size > 1000
    rows = run_files.read_csv(
        run / "train_many_s0" / "train_eval.csv", required=run_files.DEV_REQUIRED, drawn=run_files.DEV_COLUMNS
    )
    assert (
        np.isnan(rows[0]["strict_passn"])
        and np.isnan(rows[0]["format_rate"])
        and rows[-1]["loose_pass1"] == pytest.approx(0.3)
    )
    (run / "train_many_s1" / "train_eval.csv").write_text("step,loose_pass1\n2,abc\n")
    with pytest.raises(run_files.InputError, match="train_many_s1/train_eval.csv"):
        figures.training_dev_figure(run, [5])


def _study_copy(tmp_path, **cfg):
    return write_study(tmp_path / "run", study_config(**cfg))


@pytest.mark.parametrize(
    "gone,tokens",
    [
        ("evalsets/wide/eval_16_s0_010.json", True),
        ("evalsets/ood/eval_base.json", True),
        ("tokens_rft_s1_005.json", True),
        ("tokens_rft_s1_005.json", False),
    ],
)
def test_study_missing_set_and_token_files_are_named_and_refused(tmp_path, gone, tokens):
    run = _study_copy(tmp_path, tokens={"enabled": tokens}, analyze={"resamples": 100})
    (run / gone).unlink()
    if not tokens:  # token files are then reported as found, never required
        out = assemble.run_analysis(run, make_figures=False)
        assert out["missing"] == [] and len(out["tokens"]["rows"]) == 27
        assert "tokens.enabled is off" in (run / "report.md").read_text()
        return
    total = 28 + (1 + 7) + (1 + 14) + 28
    with pytest.raises(run_files.InputError, match=rf"1 of {total} expected evaluations are missing \({gone}\)"):
        assemble.run_analysis(run, make_figures=False)
    out = assemble.run_analysis(run, make_figures=False, partial=True)
    assert out["missing"] == [gone] and (run / "report.md").read_text().startswith(f"**PARTIAL REPORT: 1 of {total}")


@pytest.mark.parametrize(
    "where,edit,what",
    [
        ("evalsets/wide/eval_many_s0_010.json", lambda d: d.update(eval_set="ood"), "eval_set field is 'ood'"),
        ("eval_many_s0_010.json", lambda d: d.update(eval_set="wide"), "eval_set field is 'wide'"),
        ("evalsets/ood/eval_rft_s1_010.json", lambda d: d.update(task="arith-2x1"), "task 'arith-2x1'"),
        (
            "evalsets/wide/eval_base.json",
            lambda d: d["sampling"].update(n=16) or [p.update(n=16) for p in d["problems"]],
            "n=16",
        ),
        ("evalsets/ood/eval_sft_s0_010.json", lambda d: d["problems"].reverse(), "problems differ"),
        ("eval_many_s0_010.json", lambda d: d["problems"][0].update(distinct_answers="3"), "distinct_answers"),
        ("tokens_many_s0_005.json", lambda d: d["problems"][0]["ranks"].pop(), "one length"),
        ("tokens_many_s0_005.json", lambda d: d.pop("summary"), "malformed token file"),
    ],
)
def test_study_malformed_set_and_token_files(tmp_path, where, edit, what):
    run = _study_copy(tmp_path, analyze={"resamples": 100})
    edit_json(run / where, edit)
    with pytest.raises(run_files.InputError) as ei:
        assemble.run_analysis(run, make_figures=False, partial=True)
    assert where.split("/")[-1] in str(ei.value) and what in str(ei.value)


def test_study_stale_set_file_and_token_summary_mismatch(tmp_path):
    run = _study_copy(tmp_path, analyze={"resamples": 100})
    (run / "evalsets/wide/eval_many_s1_010.json").write_text((run / "evalsets/wide/eval_many_s0_010.json").read_text())
    with pytest.raises(
        run_files.InputError,
        match="eval_many_s1_010.json: many seed 1 step 10 is not among the models of eval_sets.wide",
    ):
        assemble.run_analysis(run, make_figures=False)
    (run / "evalsets/wide/eval_many_s1_010.json").unlink()
    set_json(run / "tokens_many_s0_005.json", "summary", "share_reranked", 0.5)
    (run / "evalsets" / "old").mkdir()
    assemble.run_analysis(run, make_figures=False)
    rep = (run / "report.md").read_text()
    assert "tokens_many_s0_005.json: its summary differs from its per-problem detail in share_reranked" in rep
    assert "evalsets/old/ is not a registered evaluation set" in rep


# ----------------------------------------------------------------------------- strategies


def strategy_doc(split, onestep, none, right, n=8, **fields):
    """An arith-2x1 eval file of 4 problems whose n responses per problem are `split` decomposed
    traces, `onestep` one-shot ones and `none` bare answers; the first `right` of each kind are right."""
    problems = []
    for i, (a, b, c) in enumerate([(57, 5, 42), (38, 6, 11), (91, 3, 20), (64, 7, 55)]):
        v = a * b - c
        kinds = (
            [("split", k) for k in range(split)]
            + [("one-step", k) for k in range(onestep)]
            + [("none", k) for k in range(none)]
        )
        resp = []
        for kind, k in kinds:
            ans = v if k < right else v + 1
            if kind == "split":
                t, u = a // 10 * 10, a % 10
                resp.append(
                    f"<think>{a} * {b} = {t} * {b} + {u} * {b} = {t * b} + {u * b} = {a * b}. {a * b} - {c} = {ans}</think>"
                    f"<answer>{ans}</answer>"
                )
            elif kind == "one-step":
                resp.append(f"<think>{a} * {b} = {a * b}. {a * b} - {c} = {ans}</think><answer>{ans}</answer>")
            else:
                resp.append(f"The answer is {ans}.")
        problems.append(
            {
                "id": f"arith-2x1/test/{i}",
                "question": f"{a} * {b} - {c}",
                "answer": v,
                "n": n,
                "responses": resp,
                "correct_strict": sum(countdown_score(r, v) for r in resp),
                "correct_loose": sum(countdown_score(r, v) for r in resp),
                "format_ok": n,
            }
        )
    return {
        "sampling": {"n": n},
        "format_rate": 1.0,
        "task": "arith-2x1",
        "problems": problems,
        **fields,
        "provenance": {"config": {}, "stage_hash": "x", "plan_sha256": "y"},
    }


def countdown_score(r, v):
    import countdown

    return int(countdown.score_loose(r, v))


def test_strategies_are_counted_per_model_and_read_as_registered(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cfg = make_config(["many", "16"], [0, 1], [4, 8], k_max=8, resamples=FAST)
    cfg["task"] = {"name": "arith-2x1"}
    base = strategy_doc(4, 4, 0, right=2, config=cfg)  # half split, half one-step; half of each right
    base["provenance"]["config"] = cfg
    (run / "eval_base.json").write_text(json.dumps(base))
    for seed in (0, 1):
        for step in (4, 8):
            many = strategy_doc(7, 1, 0, right=6 if step == 8 else 4)  # toward splitting, which gets more right
            sixteen = strategy_doc(2, 2, 4, right=1)  # a strategy the base never used: bare answers
            for cond, d in (("many", many), ("16", sixteen)):
                d.update(condition=cond, train_seed=seed, step=step)
                d["provenance"]["config"] = cfg
                (run / f"eval_{cond}_s{seed}_{step:03d}.json").write_text(json.dumps(d))
    out = assemble.run_analysis(run, make_figures=True)
    sg = out["strategies"]
    assert sg["models"][0]["share"] == {"split": 0.5, "one-step": 0.5, "no-product": 0.0}
    assert sg["models"][0]["accuracy"] == {"split": 0.5, "one-step": 0.5, "no-product": None}
    row = next(r for r in sg["conditions"] if (r["condition"], r["step"]) == ("many", 8))
    assert row["share"]["split"] == pytest.approx(7 / 8) and row["delta"]["split"] == pytest.approx(7 / 8 - 0.5)
    assert row["delta_ci"]["split"] == pytest.approx([0.375, 0.375])  # every problem and seed alike: no spread
    assert row["accuracy"]["split"] == pytest.approx(6 / 7) and row["correct_share"]["split"] == pytest.approx(6 / 7)
    reading = {r["condition"]: r for r in sg["reading"]}
    assert reading["many"]["new"] == [] and reading["many"]["selection_at_strategy_level"] is True
    assert reading["16"]["new"] == ["no-product"] and reading["16"]["selection_at_strategy_level"] is False
    text = (run / "report.md").read_text()
    assert "## Strategies" in text and "| 16 | 8 | no-product |" in text
    assert "[split] <think>57 * 5" in text  # the side-by-side names each response's strategy
    assert (run / "figures" / "strategies.png").exists()


def test_the_learning_rate_section_shows_the_measure_the_rule():
    """The learning rate section shows the measure the rule chose by.

    Under rule dev the report shows the dev pass@1 the choice was made by (the chosen rate has the
    largest), with the training reward named as not the rule's; under rule reward, the reward."""
    from analysis import report_secondary

    dev = {
        "rule": "highest dev pass@1",
        "rule_name": "dev",
        "chosen": 0.001,
        "mean_reward_last": {"0.0003": 0.074, "0.001": 0.327, "0.003": 0.406},
        "dev_loose_pass1": {"0.0003": 0.371, "0.001": 0.529, "0.003": 0.492},
    }
    line = report_secondary.lr_measures(dev)
    assert "Dev loose pass@1 per rate (the rule's measure): 0.0003: 0.371, 0.001: 0.529, 0.003: 0.492" in line
    assert line.endswith("0.003: 0.406 (not the rule's)")
    reward = {**dev, "rule_name": "reward", "chosen": 0.003}
    del reward["dev_loose_pass1"]
    line = report_secondary.lr_measures(reward)
    assert "Mean training reward over the last steps per rate: 0.0003: 0.074" in line and "dev" not in line.lower()
