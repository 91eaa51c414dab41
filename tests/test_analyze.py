"""analyze_b.py and what it calls (run_files, secondary, report, figures): the verdicts end to end,
completeness of a run, figures and report, the secondary analyses of a study with controls, sets
and tokens, and the refusal of malformed inputs.

Everything runs on synthetic eval files written into tmp_path; no model is involved."""
import csv
import json
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from test_stats import TOKEN_PROBLEMS, ref_pass1

from analysis import assemble, figures, report, run_files, secondary, stats

pytestmark = pytest.mark.slow  # whole pipelines or real weights: left out of the fast loop

ROOT = Path(__file__).resolve().parents[1]
FAST = 200  # bootstrap resamples where the number does not matter (figures, malformed inputs)
B = 2000  # the registered number, where p-values are checked by hand: the smallest p is 1 / 2001


def eval_doc(counts_strict, counts_loose=None, n=8, ids=None, fmt=0.9, config=None, **fields):
    """An eval file with the fields analyze_b reads (the layout of evaluate.evaluate)."""
    counts_loose = counts_strict if counts_loose is None else counts_loose
    ids = list(range(len(counts_strict))) if ids is None else ids
    problems = [{"id": i, "question": f"q{i}", "answer": f"a{i}", "n": n, "correct_strict": int(cs),
                 "correct_loose": int(cl), "format_ok": n, "responses": [f"resp {i}.{j}" for j in range(n)]}
                for i, cs, cl in zip(ids, counts_strict, counts_loose)]
    return {"sampling": {"n": n}, "format_rate": fmt, "problems": problems, **fields,
            "provenance": {"config": config or {}, "stage_hash": "x", "plan_sha256": "y"}}


def make_config(conds, seeds, steps, k_max=8, resamples=B, legacy=False, **analyze):
    cfg = {"seed": 0, "eval": {"k_max": k_max},
           "analyze": {"resamples": resamples, "ci": 0.95, "beyond_resamples": 40, "ceiling_null": "selection", "coverage_sims": 200,
                       **analyze},
           "lr_sweep": {"steps": 6, "last": 2}}
    if legacy:  # a single-seed run before train.seeds (results/tiny's config)
        cfg["train"] = {"conditions": list(conds), "checkpoints": list(steps)}
    else:
        cfg["conditions"] = {c: {"problems": "all"} for c in conds}
        cfg["train"] = {"seeds": list(seeds), "checkpoints": list(steps)}
    return cfg


def write_run(run: Path, base, rl: dict, n=8, k_max=None, resamples=B, legacy=False, design=None, **analyze) -> Path:
    """base: counts, or (strict, loose) counts; rl: {(cond, step) or (cond, seed, step): counts or
    (strict, loose)}. The design (conditions in first-seen order, seeds, checkpoints) is read off
    rl's keys unless `design` = (conds, seeds, steps) is given; it is recorded in eval_base.json."""
    run.mkdir(parents=True, exist_ok=True)
    keys = {(k[0], 0, k[1]) if len(k) == 2 else k: v for k, v in rl.items()}
    conds, seeds, steps = design or (list(dict.fromkeys(c for c, _, _ in keys)), sorted({s for _, s, _ in keys}),
                                     sorted({st for _, _, st in keys}))
    if "primary_condition" not in analyze and "many" not in conds:
        analyze["primary_condition"] = conds[0]
    cfg = make_config(conds, seeds, steps, k_max=k_max or n, resamples=resamples, legacy=legacy, **analyze)

    def doc(c, **fields):
        strict, loose = c if isinstance(c, tuple) else (c, None)
        return eval_doc(strict, loose, n=n, config=cfg, **fields)

    (run / "eval_base.json").write_text(json.dumps(doc(base)))
    for (cond, seed, step), c in keys.items():
        name = f"eval_{cond}_{step:03d}.json" if legacy else f"eval_{cond}_s{seed}_{step:03d}.json"
        fields = {} if legacy else {"condition": cond, "train_seed": seed, "step": step}
        (run / name).write_text(json.dumps(doc(c, **fields)))
    return run


def entry(out, cond, step, scoring="loose"):
    [e] = [e for e in out["entries"] if (e["condition"], e["step"], e["scoring"]) == (cond, step, scoring)]
    return e


def write_train_log(path: Path, steps=6, cols=None, blank=()):
    cols = cols or ["step", "reward_mean", "zero_signal_frac", "format_rate", "len_mean", "len_max", "truncated_frac", "loss",
                    "grad_norm", "lr", "sec_sampling", "sec_fwd_bwd", "tokens", "peak_mem_mb"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for s in range(1, steps + 1):
            w.writerow([s if c == "step" else "" if c in blank and s % 2 else round(0.1 * s + i, 3) for i, c in enumerate(cols)])


# The end-to-end design: n = k_max = 8, 80 problems, one seed, conditions many, 16, 1 (in that
# order, which is not alphabetical), checkpoints 75 and 150. Per-problem pass@8 is 1 iff c > 0.
H = 40


BASE_MAIN = [2] * H + [0] * H  # pass@1 0.125, pass@8 0.5


DESIGN = {
    # pass@1 +0.25 on the same solved problems: pass@8 identical, every replicate's Delta pass@8 is 0.
    # RL is above up to k = 6; at k = 7 both curves are exactly 1 on the solved half.
    ("many", 75): [6] * H + [0] * H,
    # (primary on loose) pass@1 +0.125, half the solved problems lost: the ceiling falls by 0.25.
    ("many", 150): [8] * (H // 2) + [0] * (H // 2) + [0] * H,
    # +-1 on alternate problems: no change in pass@1 (exact 0), none in pass@8.
    ("16", 75): [3, 1] * (H // 2) + [0] * H,
    # RL solves every problem twice: pass@1 +0.125, pass@8 +0.5: the ceiling rises; above at every k.
    ("16", 150): [2] * (2 * H),
    # pass@1 falls (-0.0625), pass@8 unchanged: RL never above.
    ("1", 75): [1] * H + [0] * H,
    # identical to the base.
    ("1", 150): BASE_MAIN,
}


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("main") / "run", BASE_MAIN, DESIGN)
    return run, assemble.run_analysis(run, make_figures=False)


def test_crossed_with_one_seed_end_to_end_equals_the_paired(tmp_path):
    """Crossed with one seed end to end equals the paired bootstrap."""
    rng = np.random.default_rng(4)
    base, rl = rng.binomial(8, 0.3, 50), rng.binomial(8, 0.45, 50)
    out = assemble.run_analysis(write_run(tmp_path / "run", base, {("many", 10): rl}), make_figures=False)
    e = entry(out, "many", 10)
    idx = np.random.default_rng(0).integers(0, 50, size=(B, 50))  # the registered seed 0
    b, r = stats.per_problem(base, 8, 1), stats.per_problem(rl, 8, 1)  # the estimator itself is checked against fractions above
    old = r[idx].mean(axis=1) - b[idx].mean(axis=1)  # the first version's replicates
    assert e["pass1_ci"] == pytest.approx(list(np.quantile(old, [0.025, 0.975])), abs=1e-12)
    assert e["rises"]["p_boot"] == pytest.approx((1 + np.count_nonzero(old <= 1e-12)) / (B + 1))
    assert e["pass1_diff"] == pytest.approx(r.mean() - b.mean(), abs=1e-15)
    assert e["seeds"] == [0] and e["per_seed"][0]["pass1_diff"] == pytest.approx(e["pass1_diff"], abs=1e-15)


ENTRY_FIELDS = {"condition", "step", "scoring", "seeds", "k_max", "n", "n_base", "pass1_base", "pass1_rl", "pass1_diff", "pass1_ci",
                "passk_base", "passk_rl", "passk_diff", "passk_ci", "passk_ci90", "rises", "falls", "null", "vs_null", "label", "reason",
                "adjusted", "adjusted_mc_se", "near_level", "base_null", "v1", "crossover", "band", "per_seed", "primary", "family",
                "headroom", "ceiling_rises", "coverage_base", "coverage_rl", "only_rl", "only_base", "format_base", "format_rl"}


def test_end_to_end_layout_order_and_families(main_run):
    run, out = main_run
    assert json.loads((run / "verdicts.json").read_text())["entries"] == out["entries"]
    assert out["sizes"] == {"n": 8, "n_base": 8, "k_max": 8, "n_problems": 80}
    assert (out["bootstrap"]["resamples"], out["levels"]["ci"], out["bootstrap"]["seed"]) == (B, 0.95, 0)
    assert set(out["provenance"]["inputs"]) == {"eval_base.json"} | {f"eval_{c}_s0_{s:03d}.json" for c, s in DESIGN}
    # the config's condition order (many, 16, 1), never alphabetical; checkpoints ascending
    assert [(e["condition"], e["step"], e["scoring"]) for e in out["entries"]] == [
        (c, s, sc) for c in ("many", "16", "1") for s in (75, 150) for sc in ("strict", "loose")]
    for e in out["entries"]:
        assert ENTRY_FIELDS <= set(e), ENTRY_FIELDS - set(e)
        assert (e["seeds"] == [0] and e["base_null"]["margin"] == 0.10
                and e["label"] in ("selection", "beyond selection", "degradation", "undecided"))
        assert e["pass1_ci"][0] <= e["pass1_diff"] <= e["pass1_ci"][1] and e["passk_ci"][0] <= e["passk_diff"] <= e["passk_ci"][1]
        assert e["passk_ci"][0] <= e["passk_ci90"][0] <= e["passk_ci90"][1] <= e["passk_ci"][1]
        assert e["vs_null"]["ci"][0] <= e["vs_null"]["diff"] <= e["vs_null"]["ci"][1]
        for t, x in e["adjusted"].items():  # adjusted p-values are never below the raw ones
            raw = assemble.raw_p(e)[t]
            assert (x is None) == (raw is None) and (x is None or x >= raw - 1e-15)
    [prim] = [e for e in out["entries"] if e["primary"]]
    assert (prim["condition"], prim["step"], prim["scoring"], prim["family"]) == ("many", 150, "loose", "primary")
    assert prim["adjusted"] == assemble.raw_p(prim)
    fam = out["families"]
    assert set(fam) == {"secondary-loose", "secondary-strict"}
    for sc, f in fam.items():  # every asked test of every secondary entry of the scoring, no more
        es = [e for e in out["entries"] if e["family"] == sc]
        assert f["size"] == sum(x is not None for e in es for x in assemble.raw_p(e).values())
        p = [assemble.raw_p(e)[t] for e in es for t in assemble.TESTS if assemble.raw_p(e)[t] is not None]
        lv = [f["levels"][t] for e in es for t in assemble.TESTS if assemble.raw_p(e)[t] is not None]
        adj = [e["adjusted"][t] for e in es for t in assemble.TESTS if assemble.raw_p(e)[t] is not None]
        assert adj == pytest.approx(list(stats.holm(p, lv)), abs=1e-15)
    assert "many/150" not in fam["secondary-loose"]["entries"] and "many/150" in fam["secondary-strict"]["entries"]
    assert out["levels"] == {"ci": 0.95, "one_sided": 0.025, "tost": 0.05, "margin": 0.10, "selection_margin": 0.05,
                             "headroom_fraction": pytest.approx(1 / 3)}
    assert out["partial"] is False and out["missing"] == []


def test_end_to_end_holm_adjusted_p_values_by_hand(main_run):
    """The base-null reading (v3, PLAN.md change 29) on the loose family: 5 entries x 3 tests. Six
    p-values are the smallest possible, 1/2001 (every replicate on one side): the equivalence of
    many/75, 16/75, 1/75, 1/150 (Delta pass@8 is 0 in every replicate) and the rise of many/75 and
    16/150. On the scale p / level the four TOSTs (level 0.05) come first: 15, 14, 13, 12 times
    (1/2001)/0.05, running max 15 x -> 15/2001 on their own scale; then the two rises (level 0.025):
    11 x (1/2001)/0.025 -> 11/2001."""
    _, out = main_run
    for c, s in [("many", 75), ("16", 75), ("1", 75), ("1", 150)]:
        b = entry(out, c, s)["base_null"]
        assert b["p_equiv"] == pytest.approx(1 / 2001) and b["p_equiv_adj"] == pytest.approx(15 / 2001)
        assert b["ceiling_equivalent"] is True
    for c, s in [("many", 75), ("16", 150)]:
        b = entry(out, c, s)["base_null"]
        assert b["p_rises"] == pytest.approx(1 / 2001) and b["p_rises_adj"] == pytest.approx(11 / 2001)
        assert b["pass1_rises"] is True
    assert entry(out, "16", 150)["base_null"]["p_equiv"] == 1.0 and entry(out, "1", 75)["base_null"]["p_rises"] == 1.0
    assert out["earlier_families"]["v3-loose"] == 15


def test_end_to_end_verdict_branches(main_run):
    """Each label where its truth is plain, and the earlier versions beside it."""
    _, out = main_run
    e = entry(out, "many", 75)  # rises; the ceiling identical to the base's, far below the selection null's
    assert e["pass1_diff"] == pytest.approx(0.25) and e["passk_diff"] == 0 and e["passk_ci"] == [0.0, 0.0]
    assert e["null"]["passk"] > 0.8 and e["vs_null"]["diff"] < -0.3 and e["vs_null"]["ci"][1] < 0
    assert (e["label"], e["reason"]["code"]) == ("selection", "below-null")
    b = e["base_null"]
    assert (b["pass1_rises"], b["ceiling_equivalent"], b["ceiling_falls"], b["selection"]) == (True, True, False, True)
    assert (e["v1"]["third_clause"] is True
            and e["v1"]["third_clause_ci"] == pytest.approx([-e["pass1_ci"][1] / 3, -e["pass1_ci"][0] / 3], abs=1e-12))
    assert e["crossover"]["point"] == {"outcome": "crosses", "k": 7}
    assert e["crossover"]["cross_share"] == 1 and e["crossover"]["median"] == 7 and e["crossover"]["ci"] == [7, 7]
    assert (e["coverage_base"], e["coverage_rl"], e["only_rl"], e["only_base"]) == (40, 40, 0, 0)

    e = entry(out, "many", 150)  # the primary: rises, half the solved problems lost: selection
    assert e["pass1_diff"] == pytest.approx(0.125) and e["passk_diff"] == pytest.approx(-0.25)
    assert e["label"] == "selection" and e["vs_null"]["below"]["p"] < 0.025 and e["vs_null"]["above"]["p"] > 0.5
    assert (e["base_null"]["ceiling_falls"], e["base_null"]["selection"]) == (True, True)
    assert e["v1"]["ceiling_unchanged_v1"] is False and e["v1"]["ceiling_falls_v1"] is True and e["v1"]["third_clause"] is False
    assert out["primary"]["label"] == "selection"

    e = entry(out, "16", 75)  # no change in pass@1: undecided; never above
    assert e["pass1_diff"] == pytest.approx(0, abs=1e-15) and e["pass1_ci"][0] < 0 < e["pass1_ci"][1]
    assert (e["label"], e["reason"]["code"]) == ("undecided", "pass1-unchanged")
    assert (e["v1"]["third_clause"], e["v1"]["third_clause_ci"]) == (None, None)
    assert e["crossover"]["point"]["outcome"] == "never above"

    e = entry(out, "16", 150)  # every problem solved twice: the ceiling above what reweighting the base reaches
    assert e["passk_diff"] == pytest.approx(0.5) and e["passk_ci"][0] > 0 and e["ceiling_rises"]
    assert (e["label"], e["reason"]["code"]) == ("beyond selection", "above-null") and e["vs_null"]["diff"] > 0.1
    assert e["base_null"]["selection"] is False and e["crossover"]["point"] == {"outcome": "always above", "k": None}

    e = entry(out, "1", 75)  # pass@1 falls: degradation, whatever the ceiling does (here above the null's, reweighted away, w < 1)
    assert e["pass1_diff"] == pytest.approx(-0.0625) and e["pass1_ci"][1] < 0
    assert (e["label"], e["reason"]["code"]) == ("degradation", "pass1-falls") and e["null"]["w"] < 1 and e["vs_null"]["diff"] > 0
    assert e["v1"]["ceiling_unchanged_v1"] is True and e["crossover"]["never_share"] == 1

    e = entry(out, "1", 150)  # the base itself
    assert e["label"] == "undecided" and e["pass1_diff"] == 0 and e["vs_null"]["diff"] == pytest.approx(0, abs=1e-12)  # w = 1: the base


def test_end_to_end_h3_power_and_band(main_run):
    run, out = main_run
    h3 = {(h["condition"], h["scoring"]): h for h in out["h3"]}
    assert set(h3) == {(c, s) for c in ("many", "16", "1") for s in ("strict", "loose")}
    h = h3[("many", "loose")]  # Delta pass@8: 0 at step 75, -0.25 at 150: narrows
    assert (h["first_step"], h["last_step"], h["seeds"]) == (75, 150, [0])
    assert h["passk_diff_first"] == 0 and h["passk_diff_last"] == pytest.approx(-0.25) and h["diff"] == pytest.approx(-0.25)
    assert h["ci"][1] < 0 and h["narrows"] is True and h["p_narrows"] == pytest.approx(1 / 2001)
    h = h3[("16", "loose")]  # 0 -> +0.5: widens
    assert h["diff"] == pytest.approx(0.5) and h["narrows"] is False and h["p_narrows"] == 1.0
    pw = out["power"]
    assert (pw["n_problems"], pw["seeds"], pw["n_samples"], pw["n_base"], pw["power"]) == (80, 1, 8, 8, 0.8)
    t = scipy.stats.t  # one seed: SE^2 = var_n(Delta) / N on N - 1 df (power.variance_components)
    assert pw["df_pass1"] == 79 and pw["mde_pass1"] == pytest.approx((t.ppf(0.975, 79) + t.ppf(0.8, 79)) * pw["se_pass1"], rel=1e-9)
    assert 0 < pw["se_pass1"] < 0.1
    from analysis import power
    assert pw["tost_power_at_zero"] == pytest.approx(power.power_equivalence(0.0, pw["se_passk"], pw["df_passk"], 0.10, 0.05))
    band = entry(out, "many", 75)["band"]
    assert len(band["lo"]) == len(band["hi"]) == len(band["diff"]) == 8
    assert all(lo <= d <= hi for lo, d, hi in zip(band["lo"], band["diff"], band["hi"]))
    assert band["lo"][-1] == band["hi"][-1] == 0.0  # Delta pass@8 has no spread


def test_primary_answer_leads_the_report(main_run):
    """The calibration section comes first, then the primary answer with its label in its first sentence."""
    run, out = main_run
    lines = (run / "report.md").read_text().splitlines()
    assert lines[0] == "# Report: run"
    cal, prim = lines.index("## Calibration: arms whose truth is known"), lines.index("## The primary question")
    assert cal < prim and "No calibration arms" in lines[cal + 2]
    sentence = lines[prim + 2]
    assert sentence.startswith("Does RL on `many` select (loose scoring, step 150, 1 seed, 80 problems)? **Selection**: pass@1 rises")
    assert "+0.125 [" in sentence and "selection null" in sentence and "No calibration" in sentence


def test_primary_answer_beyond_selection_when_the_ceiling_rises(tmp_path):
    """Primary answer beyond selection when the ceiling rises past the null."""
    base = [0] * 20 + [4] * 20
    out = assemble.run_analysis(write_run(tmp_path / "run", base, {("many", 10): [2] * 20 + [4] * 20}, n=8, k_max=4), make_figures=False)
    e = entry(out, "many", 10)
    assert e["label"] == "beyond selection" and e["vs_null"]["diff"] > 0 and e["ceiling_rises"]
    assert e["base_null"]["selection"] is False  # the base-null reading: neither equivalent nor lower
    assert out["primary"]["label"] == "beyond selection"
    assert "**Beyond selection**" in (tmp_path / "run" / "report.md").read_text()


def test_primary_answer_undecided_when_pass1_does_not_rise(tmp_path):
    base = [2, 4] * 20
    out = assemble.run_analysis(write_run(tmp_path / "run", base, {("many", 10): [4, 2] * 20}), make_figures=False)
    e = entry(out, "many", 10)
    assert (e["label"], e["reason"]["code"]) == ("undecided", "pass1-unchanged")
    rep = (tmp_path / "run" / "report.md").read_text()
    assert "**Undecided**: pass@1 is shown neither to rise" in rep
    # the ceiling is the same, but the base solves every problem within k: the base-null test cannot fail
    assert e["headroom"] == pytest.approx(0.0, abs=1e-12) and e["base_null"]["testable"] is False
    assert e["base_null"]["ceiling_equivalent"] is None and e["base_null"]["p_equiv_v2_adj"] < 0.05


def test_the_base_null_cannot_be_decided_when_its_ceiling_test(tmp_path):
    """The base null cannot be decided when its ceiling test cannot fail.

    PLAN.md change 29's base-null reading: the base solves every problem at pass@4 but for 1/70
    (headroom 0.014 < 3 x the 0.10 margin), pass@1 rises and the ceiling does not fall: undecided
    (the second version said yes). With a margin of 0.004 the equivalence test is asked again and
    fails: RL gained the whole headroom, 1/70 > 0.004. Under analyze.ceiling_null: base (the report's
    reading) the report's first sentence gives that answer."""
    run = write_run(tmp_path / "run", [4] * 40, {("many", 10): [6] * 40}, n=8, k_max=4, ceiling_null="base")
    out = assemble.run_analysis(run, make_figures=False)
    b = entry(out, "many", 10)["base_null"]
    assert b["pass1_rises"] and not b["ceiling_falls"] and b["testable"] is False and b["p_equiv_adj"] is None
    assert b["selection"] is None and b["selection_v2"] is True and out["primary"]["answer_base_null"] is None
    assert "**Undecided (base null)**" in (run / "report.md").read_text()
    doc = json.loads((run / "verdicts.json").read_text())  # one label: the JSON and the headline say what the report says
    assert doc["primary"]["label"] == "undecided (base null)" == doc["primary"]["label_base_null"]
    assert doc["primary"]["label_selection_null"] == entry(out, "many", 10)["label"]
    assert "): undecided (base null)" in report.headline(doc).splitlines()[0]
    out = assemble.run_analysis(write_run(tmp_path / "run2", [4] * 40, {("many", 10): [6] * 40}, n=8, k_max=4,
                                           equivalence_margin=0.004), make_figures=False)
    b = entry(out, "many", 10)["base_null"]
    assert b["testable"] is True and b["ceiling_equivalent"] is False and b["selection"] is False


def test_v1_one_third_branch_and_the_inferential_clause(tmp_path):
    """k_max = 4 < n = 8. Every problem gains a lot at pass@1; half of them gain a little at pass@4
    (c = 4 -> 8: pass@4 1 - 1/70 -> 1). v1's ceiling is 'unchanged' by its one-third branch; the
    inferential clause agrees (T = |dk| - d1/3 is clearly negative); the ceiling also 'rises'."""
    base_s = [4, 5] * 20
    out = assemble.run_analysis(write_run(tmp_path / "run", (base_s, base_s), {("many", 10): ([8] * 40, base_s)}, n=8, k_max=4),
                                 make_figures=False)
    e = entry(out, "many", 10, "strict")
    assert e["pass1_diff"] == pytest.approx(0.5 * 4 / 8 + 0.5 * 3 / 8) and e["passk_diff"] == pytest.approx(0.5 / 70)
    assert e["passk_ci"][0] > 0 and e["v1"]["ceiling_unchanged_v1"] is True and e["ceiling_rises"] is True
    assert e["v1"]["third_clause"] is True and e["base_null"]["ceiling_equivalent"] is None and e["base_null"]["selection_v2"] is True
    e = entry(out, "many", 10, "loose")  # correct_loose: nothing changed
    assert e["pass1_diff"] == 0 and e["passk_diff"] == 0 and e["pass1_ci"] == [0.0, 0.0]
    assert e["label"] == "undecided" and e["v1"]["third_clause"] is None and e["crossover"]["point"]["outcome"] == "never above"


def test_multi_seed_against_a_reference_loop(tmp_path):
    """Three seeds: each seed's own Delta, their mean, and the crossed interval recomputed here from
    the documented draws (problems: default_rng(seed); seeds: default_rng([seed, 1]))."""
    base = np.array([2] * 10 + [0] * 10 + [5] * 10)
    seeds = {0: [4] * 10 + [0] * 10 + [5] * 10, 1: [6] * 10 + [1] * 10 + [5] * 10, 2: [2] * 10 + [0] * 10 + [3] * 10}
    run = write_run(tmp_path / "run", base, {("many", s, 20): c for s, c in seeds.items()}, resamples=500)
    out = assemble.run_analysis(run, make_figures=False)
    e = entry(out, "many", 20)
    own = {s: (np.array(c) - base).mean() / 8 for s, c in seeds.items()}
    assert [p["seed"] for p in e["per_seed"]] == [0, 1, 2] and e["seeds"] == [0, 1, 2]
    assert [p["pass1_diff"] for p in e["per_seed"]] == pytest.approx([own[0], own[1], own[2]], abs=1e-12)
    assert e["pass1_diff"] == pytest.approx(np.mean(list(own.values())), abs=1e-12)
    idx = np.random.default_rng(0).integers(0, 30, size=(500, 30))
    sidx = np.random.default_rng([0, 1]).integers(0, 3, size=(500, 3))
    pb = ref_pass1(base, 8)
    pr = [ref_pass1(seeds[s], 8) for s in (0, 1, 2)]
    reps = [np.mean([pr[j][idx[b]].mean() - pb[idx[b]].mean() for j in sidx[b]]) for b in range(500)]
    assert e["pass1_ci"] == pytest.approx(list(np.quantile(reps, [0.025, 0.975])), abs=1e-12)
    assert e["rises"]["p_boot"] == pytest.approx((1 + sum(r <= 1e-12 for r in reps)) / 501)  # ties within 1e-12 count as 0 (stats.TIE)
    # without the tie tolerance (v2) a replicate equal to 0 in exact arithmetic lands on either side of it by rounding
    assert e["base_null"]["p_rises_v2"] <= e["rises"]["p_boot"]
    assert abs(e["base_null"]["p_rises_v2"] - (1 + sum(r <= 0 for r in reps)) / 501) <= 2 / 501
    assert e["rises"]["p"] == max(e["rises"]["p_boot"], e["rises"]["p_t"])  # the larger of the bootstrap's and the t test's
    assert out["power"]["seeds"] == 3
    assert e["coverage_rl"] == pytest.approx((20 + 30 + 20) / 3)
    rep = (run / "report.md").read_text()
    assert "3 seeds, 30 problems" in rep
    assert "## Per-seed spread" in rep and rep.count("| many | 20 | loose |") == 3 + 2  # 3 per-seed rows, the earlier versions, coverage


def _three_seeds(tmp_path, drop=(), **kw):
    rl = {(c, s, st): [1 + s, 2, 3, 0] for c in ("many", "16-kl") for s in (0, 1) for st in (5, 10)}
    for k in drop:
        rl.pop(k)
    return write_run(tmp_path / "run", [1, 0, 3, 8], rl, design=(["many", "16-kl"], [0, 1], [5, 10]), resamples=100, **kw)


def test_complete_run_with_dashes_and_digits_in_names(tmp_path):
    out = assemble.run_analysis(_three_seeds(tmp_path), make_figures=False)
    assert [(e["condition"], e["step"]) for e in out["entries"]][::2] == [("many", 5), ("many", 10), ("16-kl", 5), ("16-kl", 10)]
    assert all(e["seeds"] == [0, 1] for e in out["entries"])


def test_missing_evaluation_is_refused_and_named(tmp_path):
    run = _three_seeds(tmp_path, drop=[("16-kl", 1, 10)])
    with pytest.raises(run_files.InputError) as ei:
        assemble.run_analysis(run, make_figures=False)
    msg = str(ei.value)
    assert "eval_16-kl_s1_010.json" in msg and "1 of 8" in msg and "--partial" in msg and "\n" not in msg
    assert not (run / "verdicts.json").exists() and not (run / "report.md").exists()


def test_partial_run_says_so_in_its_first_line(tmp_path):
    run = _three_seeds(tmp_path, drop=[("16-kl", 1, 10), ("many", 0, 5)])
    out = assemble.run_analysis(run, make_figures=False, partial=True)
    first = (run / "report.md").read_text().splitlines()[0]
    assert first.startswith("**PARTIAL REPORT: 2 of 8 expected evaluations are missing")
    assert "eval_many_s0_005.json" in first and "eval_16-kl_s1_010.json" in first
    assert out["partial"] is True and out["missing"] == ["eval_many_s0_005.json", "eval_16-kl_s1_010.json"]
    assert entry(out, "many", 5)["seeds"] == [1] and entry(out, "16-kl", 10)["seeds"] == [0]
    assert report.headline(out).startswith("PARTIAL: missing eval_many_s0_005.json")
    r = _cli("--run", str(run), "--no-figures")
    assert r.returncode == 1 and "eval_many_s0_005.json" in r.stderr
    r = _cli("--run", str(run), "--no-figures", "--partial")
    assert r.returncode == 0 and "PARTIAL" in r.stdout


@pytest.mark.parametrize("name,what", [
    ("eval_other_s0_005.json", "condition 'other'"),  # a condition the config does not register
    ("eval_many_s7_005.json", "seed 7"),
    ("eval_many_s0_020.json", "step 20"),
    ("eval_many_005.json", "without a training seed"),  # the old layout in a seeded design
])
def test_evaluation_outside_the_design_is_an_error(tmp_path, name, what):
    run = _three_seeds(tmp_path)
    (run / name).write_text((run / "eval_many_s0_005.json").read_text())
    with pytest.raises(run_files.InputError) as ei:
        assemble.run_analysis(run, make_figures=False, partial=True)
    assert name in str(ei.value) and what in str(ei.value)


def test_fields_must_agree_with_the_file_name(tmp_path):
    run = _three_seeds(tmp_path)
    _set(run / "eval_many_s1_010.json", "train_seed", 0)
    with pytest.raises(run_files.InputError, match=r"eval_many_s1_010.json: its train_seed field is 0 but its name says 1"):
        assemble.run_analysis(run, make_figures=False)


def test_design_comes_from_the_manifest_first(tmp_path):
    run = _three_seeds(tmp_path)
    cfg = json.loads((run / "eval_base.json").read_text())["provenance"]["config"]
    cfg["train"]["seeds"] = [0, 1, 2]
    (run / "manifest.json").write_text(json.dumps({"config": cfg}))
    with pytest.raises(run_files.InputError, match="4 of 12 expected evaluations are missing"):
        assemble.run_analysis(run, make_figures=False)
    cfg["conditions"] = {"16-kl": {}, "many": {}}  # the manifest's order is the report's
    cfg["train"]["seeds"] = [0, 1]
    (run / "manifest.json").write_text(json.dumps({"config": cfg}))
    out = assemble.run_analysis(run, make_figures=False)
    assert out["entries"][0]["condition"] == "16-kl" and out["design"]["source"] == "manifest.json"


def test_single_seed_layout_of_older_runs(tmp_path):
    """results/tiny: eval_<cond>_<step>.json and train.conditions as a list; read as seed 0."""
    run = write_run(tmp_path / "run", BASE_MAIN, {("many", 50): DESIGN[("many", 75)], ("16", 50): DESIGN[("16", 75)]}, legacy=True)
    write_train_log(run / "train_many" / "train_log.csv")
    out = assemble.run_analysis(run, make_figures=False)
    assert [e["condition"] for e in out["entries"]] == ["many", "many", "16", "16"]
    assert all(e["seeds"] == [0] for e in out["entries"]) and out["design"]["legacy"] is True
    rep = (run / "report.md").read_text()
    assert "train_16/train_log.csv is missing" in rep and "train_many/train_log.csv is missing" not in rep
    (run / "eval_16_050.json").unlink()
    with pytest.raises(run_files.InputError, match="eval_16_050.json"):
        assemble.run_analysis(run, make_figures=False)


def test_config_errors_name_the_key(tmp_path):
    run = _three_seeds(tmp_path)
    _set(run / "eval_base.json", "provenance", "config", "analyze", "primary_condition", "nope")
    with pytest.raises(run_files.InputError, match=r"eval_base.json: config analyze.primary_condition: must name a registered condition"):
        assemble.run_analysis(run, make_figures=False)
    _set(run / "eval_base.json", "provenance", "config", "analyze", "primary_condition", "many")
    _set(run / "eval_base.json", "provenance", "config", "analyze", "resamples", "many")  # config.load's own check, through the record
    with pytest.raises(run_files.InputError, match=r"eval_base.json: config analyze.resamples: expected an integer, got 'many'"):
        assemble.run_analysis(run, make_figures=False)


def test_outputs_are_readable_by_others(main_run):
    run, _ = main_run
    for name in ("verdicts.json", "report.md"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o644, name


def test_headline(main_run):
    _, out = main_run
    h = report.headline(json.loads(json.dumps(out)))  # from what verdicts.json holds
    lines = h.splitlines()
    assert lines[0] == "primary (many, loose, step 150): selection"
    rows = [line.split()[0] for line in lines[2:]]
    assert rows == ["many", "many", "16", "16", "1", "1"]
    assert "many *" in h and "beyond selection" in h and "degradation" in h and "undecided" in h
    assert "+0.250 [" in lines[2]


def test_figures_and_report(tmp_path, monkeypatch):
    import matplotlib.image as mpimg

    run = _three_seeds(tmp_path)
    for c in ("many", "16-kl"):
        for s in (0, 1):
            write_train_log(run / f"train_{c}_s{s}" / "train_log.csv", steps=12)
    write_train_log(run / "lr_sweep" / "lr_0.001" / "train_log.csv")
    write_train_log(run / "lr_sweep" / "lr_0.0001" / "train_log.csv", steps=3)
    seen = {}
    save = figures._save

    def spy(fig, path):
        seen[path.name] = [ax for ax in fig.axes if ax.axison]
        return save(fig, path)
    monkeypatch.setattr(figures, "_save", spy)
    assemble.run_analysis(run)
    names = ["passk_many.png", "passk_16-kl.png", "passk_beyond_n.png", "training.png", "lr_sweep.png"]
    assert sorted(seen) == sorted(names)
    for name in names:
        f = run / "figures" / name
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and mpimg.imread(f).shape[0] >= 100, name
        assert all(ax.get_ylabel() for ax in seen[name]), name  # a y label on every panel
        assert stat.S_IMODE(f.stat().st_mode) == 0o644
    assert len(seen["passk_many.png"]) == 4  # pass@k and Delta pass@k with its band, per scoring
    assert any(len(ax.collections) for ax in seen["passk_many.png"])  # the band
    for ax in seen["training.png"] + seen["lr_sweep.png"]:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks)  # integer steps
    for ax in seen["training.png"]:  # the checkpoints as vertical lines
        assert {5, 10} <= {line.get_xdata()[0] for line in ax.lines if len(set(line.get_xdata())) == 1}
    [sweep] = seen["lr_sweep.png"]
    [span] = sweep.patches
    assert (span.get_x(), span.get_x() + span.get_width()) == pytest.approx((4.5, 6.5))  # the last 2 of 6 steps
    assert not list((run / "figures").glob(".*tmp*"))
    rep = (run / "report.md").read_text()
    for name in names:
        assert f"figures/{name}" in rep
    assert "## H1 and H2 by condition (loose scoring)" in rep and "## The strict scoring" in rep and "## Power" in rep
    assert rep.index("| many | 5 | 0, 1 |") < rep.index("| 16-kl | 5 | 0, 1 |")
    assert "## The first test problem side by side: `q0` = a0" in rep and "**many seed 0 step 10**" in rep
    assert "PLAN.md has changed since the base was evaluated" in rep
    assert "## Earlier versions of the verdicts (for comparison)" in rep and "*v1*: the first version's" in rep
    assert "| eval_many_s0_005.json |" in rep


def test_report_names_a_rising_ceiling_and_keeps_tables_apart(main_run):
    run, _ = main_run
    rep = (run / "report.md").read_text()
    loose, strict = rep.split("## The strict scoring")
    loose = loose.split("## H1 and H2")[1]
    assert "| 16 | 150 | 0 |" in loose and "**beyond selection**" in loose
    assert "format rate base → RL" in strict and "format rate" not in loose.split("## H3")[0].split("\n\n")[1]
    assert "| many **(primary)** | 150 |" in loose
    assert "never above" in loose and "always above" in loose and "k = 7" in loose


def test_training_figure_tolerates_new_and_missing_columns(tmp_path):
    run = tmp_path / "run"
    assert figures.training_figure(run, [5]) is None  # no logs, no figure, nothing written
    assert not (run / "figures").exists()
    write_train_log(run / "train_many_s0" / "train_log.csv", cols=["step", "reward_mean"])  # the two required ones
    write_train_log(run / "train_many_s1" / "train_log.csv",
                    cols=["step", "reward_mean", "entropy_mean", "kl_mean", "a_new_column"], blank=("kl_mean",))
    (run / "train_16_s0").mkdir()
    (run / "train_16_s0" / "train_log.csv").write_text("step,note,reward_mean\n1,warm-up,0.1\n2,,0.2\n")  # a text column
    assert [r["reward_mean"] for r in run_files.read_csv(run / "train_16_s0" / "train_log.csv")] == [0.1, 0.2]
    p = figures.training_figure(run, [2, 4])
    assert p == run / "figures" / "training.png" and p.stat().st_size > 1000
    rows = run_files.read_csv(run / "train_many_s1" / "train_log.csv")
    assert np.isnan(rows[0]["kl_mean"]) and rows[1]["kl_mean"] == pytest.approx(0.2 + 3)  # empty cells read as NaN
    write_train_log(run / "train_16_s0" / "train_log.csv", cols=["step", "loss"])
    with pytest.raises(run_files.InputError, match="train_16_s0/train_log.csv"):
        figures.training_figure(run, [2, 4])


def test_no_training_logs_means_no_training_figures(tmp_path):
    run = write_run(tmp_path / "run", BASE_MAIN, {("many", 75): DESIGN[("many", 75)]}, resamples=FAST)
    assemble.run_analysis(run)
    assert sorted(p.name for p in (run / "figures").iterdir()) == ["passk_beyond_n.png", "passk_many.png"]


def test_report_warns_on_mismatched_provenance(tmp_path):
    run = write_run(tmp_path / "run", BASE_MAIN, {("many", 75): DESIGN[("many", 75)]}, resamples=FAST)
    f = run / "eval_many_s0_075.json"
    _set(f, "provenance", "stage_hash", "other")  # expected: the adapter differs
    assemble.run_analysis(run, make_figures=False)
    assert "other evaluation settings" not in (run / "report.md").read_text()
    _set(f, "provenance", "plan_sha256", "other")
    _set(f, "provenance", "config", "eval", {"k_max": 8, "sampling": {"temperature": 1.0}})
    assemble.run_analysis(run, make_figures=False)
    rep = (run / "report.md").read_text()
    assert "eval_many_s0_075.json was made under a different PLAN.md" in rep
    assert "eval_many_s0_075.json records other evaluation settings" in rep


def test_report_says_which_inputs_are_missing_or_from_another(tmp_path):
    """Report says which inputs are missing or from another config."""
    run = write_run(tmp_path / "run", BASE_MAIN, {("many", 75): DESIGN[("many", 75)]}, resamples=FAST)
    assemble.run_analysis(run, make_figures=False)
    rep = (run / "report.md").read_text()
    assert "selection.json is missing" in rep and "train_many_s0/train_log.csv is missing" in rep
    (run / "selection.json").write_text(json.dumps({"rule": "r", "informative": [], "sets": {}, "short": {}, "pass_rates": {},
                                                     "provenance": {"config_hash": "not-the-same"}}))
    assemble.run_analysis(run, make_figures=False)
    rep = (run / "report.md").read_text()
    assert "selection.json is missing" not in rep and "selection.json was made with another config (hash not-the-same)" in rep


def _good_run(tmp_path):
    return write_run(tmp_path / "run", [1, 0, 3, 8], {("many", 75): [2, 0, 4, 8], ("16", 75): [1, 1, 1, 1]}, resamples=FAST)


def _edit(path: Path, fn):
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))


def _set(path, *keys_value):
    *keys, value = keys_value

    def fn(d):
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    _edit(path, fn)


M, S16 = "eval_many_s0_075.json", "eval_16_s0_075.json"


BREAKAGES = {
    "missing_base": (lambda r: (r / "eval_base.json").unlink(), "eval_base.json"),
    "invalid_json": (lambda r: (r / M).write_text('{"sampling": {"n": 8}, "problems": ['), M),
    "count_above_n": (lambda r: _set(r / M, "problems", 2, "correct_strict", 9), M),
    "negative_count": (lambda r: _set(r / S16, "problems", 0, "correct_loose", -1), S16),
    "float_count": (lambda r: _set(r / "eval_base.json", "problems", 1, "correct_strict", 2.5), "eval_base.json"),
    "string_count": (lambda r: _set(r / "eval_base.json", "problems", 1, "correct_loose", "2"), "eval_base.json"),
    "problem_n_differs": (lambda r: _set(r / M, "problems", 0, "n", 4), M),
    "no_sampling": (lambda r: _edit(r / S16, lambda d: d.pop("sampling")), S16),
    "no_problems_field": (lambda r: _edit(r / "eval_base.json", lambda d: d.pop("problems")), "eval_base.json"),
    "empty_problems": (lambda r: _set(r / M, "problems", []), M),
    "mismatched_ids": (lambda r: _set(r / M, "problems", 3, "id", 99), M),
    "reordered_ids": (lambda r: _edit(r / S16, lambda d: d["problems"].reverse()), S16),
    "n_differs_from_base": (lambda r: _edit(r / S16, lambda d: (d["sampling"].update(n=16), [p.update(n=16) for p in d["problems"]])), S16),
    "no_format_rate": (lambda r: _edit(r / M, lambda d: d.pop("format_rate")), M),
    "no_problem_id": (lambda r: _edit(r / M, lambda d: d["problems"][0].pop("id")), M),
    "no_rl_files": (lambda r: [f.unlink() for f in r.glob("eval_*_*.json")], "run"),
    "no_config": (lambda r: _edit(r / "eval_base.json", lambda d: d["provenance"].pop("config")), "eval_base.json"),
}


@pytest.mark.parametrize("name", list(BREAKAGES))
def test_broken_inputs_raise_input_error_and_write_nothing(tmp_path, name):
    run = _good_run(tmp_path)
    assemble.run_analysis(run, make_figures=False)  # a previous, good analysis
    before = {f: (run / f).read_bytes() for f in ("verdicts.json", "report.md")}
    breaker, fname = BREAKAGES[name]
    breaker(run)
    with pytest.raises(run_files.InputError) as ei:
        assemble.run_analysis(run, partial=True)
    msg = str(ei.value)
    assert fname in msg and "\n" not in msg
    assert {f: (run / f).read_bytes() for f in before} == before
    assert not (run / "figures").exists()  # nothing was drawn either
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []  # no temp files left


def _cli(*args):
    return subprocess.run([sys.executable, "analyze_b.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["missing_base", "count_above_n"])
def test_cli_broken_inputs_exit_1_with_one_line(tmp_path, name):
    run = _good_run(tmp_path)
    assemble.run_analysis(run, make_figures=False)
    before = (run / "verdicts.json").read_bytes()
    breaker, fname = BREAKAGES[name]
    breaker(run)
    r = _cli("--run", str(run), "--no-figures")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("analyze_b.py: ") and fname in lines[0] and "Traceback" not in r.stderr
    assert (run / "verdicts.json").read_bytes() == before


def test_cli_missing_run_folder_exits_2(tmp_path):
    r = _cli("--run", str(tmp_path / "nope"))
    assert r.returncode == 2 and "no such folder" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_success_prints_the_headline(tmp_path):
    run = _good_run(tmp_path)
    r = _cli("--run", str(run), "--no-figures", "--resamples", "100", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("primary (many, loose, step 75): ") and "wrote" in r.stdout
    out = json.loads((run / "verdicts.json").read_text())
    assert out["bootstrap"]["resamples"] == 100 and out["bootstrap"]["seed"] == 3 and len(out["entries"]) == 4
    assert not (run / "figures").exists()


@pytest.mark.parametrize("row", ["7,0.5\n", "7,abc,0,0,0,0,0,0,0,0,0,0,0,0\n", "7,,0,0,0,0,0,0,0,0,0,0,0,0\n",
                                 "7,0.5,0,0,0,0,0,0,0,0,0,0,0,0,99\n"])
def test_malformed_training_log_is_an_input_error_and_writes(tmp_path, row):
    """Malformed training log is an input error and writes nothing."""
    run = write_run(tmp_path / "run", [1, 0, 3, 8], {("many", 75): [2, 0, 4, 8]}, resamples=100)
    assemble.run_analysis(run, make_figures=False)
    before = (run / "verdicts.json").read_bytes()
    write_train_log(run / "train_many_s0" / "train_log.csv")
    with open(run / "train_many_s0" / "train_log.csv", "a") as f:
        f.write(row)
    with pytest.raises(run_files.InputError, match="train_log.csv"):
        assemble.run_analysis(run)
    assert (run / "verdicts.json").read_bytes() == before
    assert not (run / "figures").exists()


def test_deterministic(tmp_path):
    run = write_run(tmp_path / "run", BASE_MAIN, DESIGN, resamples=FAST)
    a = assemble.run_analysis(run, make_figures=False)
    b = assemble.run_analysis(run, make_figures=False)
    assert a["entries"] == b["entries"] == json.loads((run / "verdicts.json").read_text())["entries"]
    c = assemble.run_analysis(run, make_figures=False, seed=1)  # the seed is what fixes the intervals
    assert [e["pass1_ci"] for e in c["entries"]] != [e["pass1_ci"] for e in a["entries"]]
    assert [e["pass1_diff"] for e in c["entries"]] == [e["pass1_diff"] for e in a["entries"]]


def test_find_twins_reads_the_settings_not_the_names():
    st = {c: {**run_files.DEFAULT_CONDITION, **v} for c, v in {
        "many": {}, "16": {"problems": "select-16"}, "1": {"problems": "select-1"}, "16-kl": {"problems": "select-16", "kl": 0.001},
        "format": {"reward": "format"}, "rft": {"method": "rft"}, "sft": {"method": "sft", "lr": 0.01},
        "anchored-1": {"problems": "select-1", "kl": 0.01, "entropy": 0.1}}.items()}
    assert secondary.find_twins(st, "kl", lambda s: s["kl"] > 0) == [("16-kl", "16")]  # anchored-1 has no twin (entropy differs)
    assert secondary.find_twins(st, "reward", lambda s: s["reward"] == "format") == [("format", "many")]
    assert secondary.find_twins(st, "method", lambda s: s["method"] != "grpo") == [("rft", "many"), ("sft", "many")]  # lr is ignored


STUDY_CONDITIONS = {"many": {"problems": "all"}, "16": {"problems": "select-16"}, "1": {"problems": "select-1"},
                    "16-kl": {"problems": "select-16", "kl": 0.001}, "format": {"problems": "all", "reward": "format"},
                    "rft": {"problems": "all", "method": "rft"}, "sft": {"problems": "all", "method": "sft"}}


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


DIV_BASE, DIV_RL = ({"distinct_answers": 4, "answer_entropy": 1.2, "token_entropy": 0.8},
                    {"distinct_answers": 2, "answer_entropy": 0.5, "token_entropy": 0.4})


def study_config(**extra):
    cfg = {"seed": 0, "task": {"name": "arith-2x1"}, "conditions": STUDY_CONDITIONS, "train": {"seeds": SEEDS, "checkpoints": STEPS},
           "eval": {"n": 8, "k_max": 8}, "analyze": {"resamples": B, "ci": 0.95, "extrapolate_to": 1024, "beyond_resamples": 40},
           "eval_sets": {"wide": {"task": None, "n_problems": len(WIDE_IDS), "n": WIDE_N, "k_max": WIDE_N, "models": "final-first-seed"},
                         "ood": {"task": "arith-3x3", "n_problems": len(OOD_IDS), "n": 8, "k_max": 8, "models": "final"}},
           "tokens": {"enabled": True}}
    cfg.update(extra)
    return cfg


def study_doc(counts, n, ids, cfg, eval_set, task, div, key=None):
    d = eval_doc(counts, n=n, ids=ids, config=cfg, eval_set=eval_set, task=task,
                 **({} if key is None else {"condition": key[0], "train_seed": key[1], "step": key[2]}))
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
    put(run / "evalsets/wide/eval_base.json", study_doc(WIDE_BASE, WIDE_N, WIDE_IDS, cfg, "wide", "arith-2x1", DIV_BASE))
    put(run / "evalsets/ood/eval_base.json", study_doc(OOD_BASE, 8, OOD_IDS, cfg, "ood", "arith-3x3", DIV_BASE))
    for c in STUDY_CONDITIONS:
        for s in SEEDS:
            for st in STEPS:
                key = (c, s, st)
                put(run / f"eval_{c}_s{s}_{st:03d}.json", study_doc(STUDY_TEST[c], 8, ids, cfg, "test", "arith-2x1", DIV_RL, key))
                tokens = {"condition": c, "train_seed": s, "step": st, "summary": stats.token_summary(TOKEN_PROBLEMS),
                          "problems": TOKEN_PROBLEMS,
                          "provenance": {"config": cfg}}
                put(run / f"tokens_{c}_s{s}_{st:03d}.json", tokens)
            put(run / f"evalsets/ood/eval_{c}_s{s}_010.json",
                study_doc(OOD_MANY if c == "many" else OOD_BASE, 8, OOD_IDS, cfg, "ood", "arith-3x3", DIV_RL, (c, s, 10)))
        put(run / f"evalsets/wide/eval_{c}_s0_010.json",
            study_doc(WIDE_MANY if c == "many" else WIDE_BASE, WIDE_N, WIDE_IDS, cfg, "wide", "arith-2x1", DIV_RL, (c, 0, 10)))
    return run


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    run = write_study(tmp_path_factory.mktemp("study") / "run")
    for c in ("many", "sft"):
        for s in SEEDS:
            write_train_log(run / f"train_{c}_s{s}" / "train_log.csv", steps=10,
                            cols=["step", "reward_mean", "entropy_mean", "kl_mean", "grad_norm", "grad_norm_clipped"])
            write_dev_log(run / f"train_{c}_s{s}" / "train_eval.csv", seed=s)
    return run, assemble.run_analysis(run, make_figures=False)  # the figures: test_study_figures


def write_dev_log(path: Path, seed=0, steps=(2, 4, 6, 8, 10)):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "n_problems", "n", "strict_pass1", "loose_pass1", "strict_passn", "loose_passn", "format_rate"])
        for st in steps:
            w.writerow([st, 16, 8, 0.1, 0.2 + 0.01 * st + 0.1 * seed, "nan", 0.5 + 0.01 * st, ""])


def test_study_controls_h4_h5_h6(study):
    run, out = study
    c = out["controls"]
    assert c["skipped"] == [] and c["step"] == 10 and c["scorings"] == {"H4": "loose", "H5": "strict", "H6": "loose"}
    [h4] = c["h4"]
    assert (h4["anchored"], h4["unanchored"], h4["kl"], h4["k_max"]) == ("16-kl", "16", 0.001, 8)
    e_kl, e_16 = entry(out, "16-kl", 10), entry(out, "16", 10)  # the registered entries' adjusted verdicts, side by side
    bk, b16 = e_kl["base_null"], e_16["base_null"]  # H4 is about the base: the base-null reading's tests
    assert h4["anchored_ceiling_equivalent"] is bk["ceiling_equivalent"] is True and h4["anchored_p_equiv_adj"] == bk["p_equiv_adj"]
    assert h4["unanchored_ceiling_falls"] is b16["ceiling_falls"] is True and h4["unanchored_p_falls_adj"] == b16["p_falls_adj"]
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
        assert h6[o]["diff"] == pytest.approx(list(many - stats.pass_at_k_curves(STUDY_TEST[o], 8, 8).mean(axis=0)), abs=1e-12)
        assert all(lo <= d <= hi for lo, d, hi in zip(h6[o]["lo"], h6[o]["diff"], h6[o]["hi"]))
    assert h6["rft"]["crossover"]["leader_at_k1"] == "rft" and h6["rft"]["crossover"]["point"] == {"outcome": "crosses", "k": 3}
    assert h6["sft"]["crossover"]["leader_at_k1"] == "many" and h6["sft"]["crossover"]["point"] == {"outcome": "crosses", "k": 4}
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
    assert [(f["condition"], f["seed"], f["scoring"]) for f in bz["fits"]][:4] == [("base", None, "strict"), ("base", None, "loose"),
                                                                                  ("many", 0, "strict"), ("many", 0, "loose")]
    assert len(bz["fits"]) == 2 * (1 + 7)  # the base and each condition's first seed at step 10
    f = bz["fits"][0]
    assert f["file"] == "evalsets/wide/eval_base.json" and f["measured_pass_at_n"] == 0.75
    assert f["model_pass_at_extrapolated"] >= f["model_pass_at_n"] and f["used"] == "beta-binomial"
    assert f["aic_prefers"] in ("beta-binomial", "zero-inflated beta-binomial")
    assert f["extrapolated_ci"][0] <= f["model_pass_at_extrapolated"] <= f["extrapolated_ci"][1]
    # the check: fitted to the test set's counts on the 16 wide problems (all 6 of 8 for many), predicting pass@32 on them
    chk = {(r["condition"], r["scoring"]): r for r in bz["check"]}
    r = chk[("many", "loose")]
    assert ((r["fit_file"], r["target_file"], r["n_problems"], r["fit_n"])
            == ("eval_many_s0_010.json", "evalsets/wide/eval_many_s0_010.json", 16, 8))
    assert r["measured"] == pytest.approx(14 / 16) and r["predicted"] == pytest.approx(1 - 0.25 ** 32, abs=1e-3)
    assert r["error"] == pytest.approx(r["predicted"] - r["measured"]) and r["naive"] == pytest.approx(1.0)
    assert chk[("base", "strict")]["predicted"] == pytest.approx(1 - 0.75 ** 32, abs=1e-3) and chk[("base", "strict")]["measured"] == 0.75
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
    assert d[("test", "base", None)]["distinct_answers"] == 4 and d[("test", "many", 10)]["answer_entropy"] == pytest.approx(0.5)
    assert d[("test", "sft", 5)]["seeds"] == [0, 1] and d[("ood", "many", 10)]["token_entropy"] == pytest.approx(0.4)
    assert ("wide", "many", 10) in d and ("ood", "many", 5) not in d  # ood evaluates the final checkpoint only
    assert len([m for m in out["diversity"]["models"] if m["set"] == "test"]) == 1 + 7 * 2 * 2
    o = out["ood"]["ood"]
    assert (o["task"], o["n"], o["k_max"], o["test_k_max"], o["n_problems"]) == ("arith-3x3", 8, 8, 8, 20)
    rows = {(r["condition"], r["scoring"]): r for r in o["rows"]}
    r = rows[("many", "loose")]
    assert r["seeds"] == [0, 1] and r["ood_pass1_diff"] == pytest.approx(0.0625) and r["ood_passk_diff"] == 0
    assert r["ood_pass1_ci"][0] > 0 and r["ood_passk_ci"] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert r["test_pass1_diff"] == entry(out, "many", 10)["pass1_diff"] and r["test_passk_ci"] == entry(out, "many", 10)["passk_ci"]
    assert rows[("base", "strict")]["ood_pass1"] == pytest.approx(1 / 16)
    t = out["tokens"]
    assert t["enabled"] and len(t["rows"]) == 7 * 2 * 2 and t["warnings"] == []
    assert t["rows"][0]["condition"] == "many" and t["rows"][0]["share_reranked"] == pytest.approx(0.05)
    assert t["rows"][0]["entropy_ratio"] == pytest.approx(10.0) and t["paper"]["entropy_ratio"] == [7.6, 12.6]
    assert out["eval_sets"]["wide"]["models"] == "final-first-seed" and len(out["eval_sets"]["ood"]["files"]) == 1 + 7 * 2
    assert "evalsets/wide/eval_many_s0_010.json" in out["provenance"]["inputs"] and "tokens_sft_s1_005.json" in out["provenance"]["inputs"]


def test_study_report_and_figures(study):
    run, out = study
    rep = (run / "report.md").read_text()
    for head in ("## Controls and baselines: H4–H6 (step 10)", "## Evaluation sets", "## pass@k beyond n = 32: model-based (beta-binomial)",
                 "## Boundary at n = 32", "## Diversity", "## In vs out of distribution: test vs ood", "## The token level"):
        assert head in rep, head
    assert rep.index("## H3") < rep.index("## The strict scoring") < rep.index("## Controls and baselines")
    assert "| 16-kl (0.001) |" in rep and "**yes**" in rep and "| format | +0.062" in rep and "0.25 [0.25, 0.25]" in rep
    assert "rft leads: k = 3" in rep and "many leads: k = 4" in rep
    assert "pass@1024 (model-based (beta-binomial))" in rep and "predicted pass@32 (model-based (beta-binomial))" in rep
    assert "| many s0 step 10 | loose | 12 / 14 | 4 | " in rep and "| 12, 13, 14, 15 | 2 | " in rep and "Δpass@32 (RL − base)" in rep
    assert "| *paper (another model and task)* |" in rep and "| many | 0 | 5 | 20 | 90.000% | 5.000% | 5.000% | 5.00 |" in rep
    assert "eval_base.json" in rep and "evalsets/wide/" in rep and "tokens_many_s0_005.json" in rep


def test_study_figures(study, tmp_path, monkeypatch):
    """The new figures, drawn from the study's analysis (the per-condition pass@k figures are
    test_figures_and_report's): each has a y label on every panel; the extrapolated part is dashed
    and labelled model-based in the legend."""
    run, _ = study
    res = assemble.analyze(run, resamples=FAST)
    seen = {}
    save = figures._save

    def spy(fig, path):
        seen[path.name] = [ax for ax in fig.axes if ax.axison]
        return save(fig, path)
    monkeypatch.setattr(figures, "_save", spy)
    out = tmp_path / "figures"
    out.mkdir()
    paths = [figures.beyond_figure(out, res), *figures.ood_figures(out, res), figures.diversity_figure(out, res),
             figures.controls_figure(out, res), figures.training_dev_figure(run, [5, 10])]
    assert [p.name for p in paths] == ["passk_beyond_n.png", "ood_ood.png", "diversity.png", "controls_h6.png", "training_dev.png"]
    for name, axes in seen.items():
        assert all(ax.get_ylabel() for ax in axes), name
    loose = seen["passk_beyond_n.png"][0]
    labels = loose.get_legend_handles_labels()[1]
    assert "model-based (beta-binomial)" in labels and "base" in labels and "many s0 step 10" in labels
    dashed = [ln for ln in loose.lines if ln.get_linestyle() == "--" and len(ln.get_xdata())]
    assert dashed and max(max(ln.get_xdata()) for ln in dashed) == 1024 and min(min(ln.get_xdata()) for ln in dashed) == WIDE_N
    assert len(seen["ood_ood.png"]) == 4 and len(seen["diversity.png"]) == 3 and len(seen["controls_h6.png"]) == 2


def test_study_report_numbers_recompute_from_the_files_they_name(study):
    """The report names its files; recompute three of its numbers from those files alone, with
    code written here: a boundary, a diversity mean and a model check's measured pass@n."""
    run, out = study
    load = lambda f: json.loads((run / f).read_text())
    row = next(r for r in out["boundary"]["rows"] if (r["condition"], r["scoring"]) == ("many", "strict"))
    base, rl = load(row["base_file"]), load(row["file"])
    assert row["only_rl_ids"] == [b["id"] for b, r in zip(base["problems"], rl["problems"])
                                  if b["correct_strict"] == 0 < r["correct_strict"]]
    m = next(r for r in out["diversity"]["models"] if (r["set"], r["condition"], r["seed"], r["step"]) == ("ood", "sft", 1, 10))
    assert m["distinct_answers"] == np.mean([p["distinct_answers"] for p in load(m["file"])["problems"]])
    chk = next(r for r in out["beyond_n"]["check"] if (r["condition"], r["scoring"]) == ("many", "loose"))
    assert chk["measured"] == np.mean([p["correct_loose"] > 0 for p in load(chk["target_file"])["problems"]])


def test_training_dev_figure_and_new_log_columns(tmp_path):
    run = tmp_path / "run"
    write_dev_log(run / "train_many_s0" / "train_eval.csv")
    write_dev_log(run / "train_many_s1" / "train_eval.csv", seed=1, steps=(2, 4, 6))
    (run / "train_sft_s0").mkdir()
    (run / "train_sft_s0" / "train_log.csv").write_text("step,reward_mean,entropy_mean,kl_mean,grad_norm_clipped\n"
                                                        "1,nan,0.5,nan,1.0\n2,nan,0.4,nan,0.9\n")
    assert figures.training_figure(run, [5]) == run / "figures" / "training.png"  # sft: no reward, drawn without error
    assert (run / "figures" / "training_dev.png").stat().st_size > 1000
    rows = run_files.read_csv(run / "train_many_s0" / "train_eval.csv", required=run_files.DEV_REQUIRED, drawn=run_files.DEV_COLUMNS)
    assert np.isnan(rows[0]["strict_passn"]) and np.isnan(rows[0]["format_rate"]) and rows[-1]["loose_pass1"] == pytest.approx(0.3)
    (run / "train_many_s1" / "train_eval.csv").write_text("step,loose_pass1\n2,abc\n")
    with pytest.raises(run_files.InputError, match="train_many_s1/train_eval.csv"):
        figures.training_dev_figure(run, [5])


def test_smoke_design_skips_the_controls_and_uses_the_test_set(tmp_path):
    """many, 4, 1 (configs/smoke.yaml): no pair for H4-H6; no sets: the test set is the largest n."""
    run = write_run(tmp_path / "run", BASE_MAIN, {("many", 6): DESIGN[("many", 75)], ("4", 6): DESIGN[("16", 75)], ("1", 6): BASE_MAIN},
                    resamples=FAST)
    out = assemble.run_analysis(run, make_figures=False)
    assert out["controls"]["h4"] == out["controls"]["h5"] == out["controls"]["h6"] == []
    assert [s["hypothesis"] for s in out["controls"]["skipped"]] == ["H4", "H5", "H6"]
    assert (out["beyond_n"]["set"] == "test" and out["beyond_n"]["check"] == []
            and "no evaluation set has more samples" in out["beyond_n"]["check_skipped"])
    assert out["boundary"]["set"] == "test" and out["ood"] == {} and out["diversity"]["conditions"] == []
    assert out["tokens"]["rows"] == [] and out["eval_sets"].keys() == {"test"}
    rep = (run / "report.md").read_text()
    assert "H4 not asked: no registered condition with a KL anchor" in rep and "## The token level" not in rep


def _study_copy(tmp_path, **cfg):
    return write_study(tmp_path / "run", study_config(**cfg))


@pytest.mark.parametrize("gone,tokens", [("evalsets/wide/eval_16_s0_010.json", True), ("evalsets/ood/eval_base.json", True),
                                         ("tokens_rft_s1_005.json", True), ("tokens_rft_s1_005.json", False)])
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


@pytest.mark.parametrize("where,edit,what", [
    ("evalsets/wide/eval_many_s0_010.json", lambda d: d.update(eval_set="ood"), "eval_set field is 'ood'"),
    ("eval_many_s0_010.json", lambda d: d.update(eval_set="wide"), "eval_set field is 'wide'"),
    ("evalsets/ood/eval_rft_s1_010.json", lambda d: d.update(task="arith-2x1"), "task 'arith-2x1'"),
    ("evalsets/wide/eval_base.json", lambda d: d["sampling"].update(n=16) or [p.update(n=16) for p in d["problems"]], "n=16"),
    ("evalsets/ood/eval_sft_s0_010.json", lambda d: d["problems"].reverse(), "problems differ"),
    ("eval_many_s0_010.json", lambda d: d["problems"][0].update(distinct_answers="3"), "distinct_answers"),
    ("tokens_many_s0_005.json", lambda d: d["problems"][0]["ranks"].pop(), "one length"),
    ("tokens_many_s0_005.json", lambda d: d.pop("summary"), "malformed token file"),
])
def test_study_malformed_set_and_token_files(tmp_path, where, edit, what):
    run = _study_copy(tmp_path, analyze={"resamples": 100})
    _edit(run / where, edit)
    with pytest.raises(run_files.InputError) as ei:
        assemble.run_analysis(run, make_figures=False, partial=True)
    assert where.split("/")[-1] in str(ei.value) and what in str(ei.value)


def test_study_stale_set_file_and_token_summary_mismatch(tmp_path):
    run = _study_copy(tmp_path, analyze={"resamples": 100})
    (run / "evalsets/wide/eval_many_s1_010.json").write_text((run / "evalsets/wide/eval_many_s0_010.json").read_text())
    with pytest.raises(run_files.InputError, match="eval_many_s1_010.json: many seed 1 step 10 is not among the models of eval_sets.wide"):
        assemble.run_analysis(run, make_figures=False)
    (run / "evalsets/wide/eval_many_s1_010.json").unlink()
    _set(run / "tokens_many_s0_005.json", "summary", "share_reranked", 0.5)
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
        kinds = [("split", k) for k in range(split)] + [("one-step", k) for k in range(onestep)] + [("none", k) for k in range(none)]
        resp = []
        for kind, k in kinds:
            ans = v if k < right else v + 1
            if kind == "split":
                t, u = a // 10 * 10, a % 10
                resp.append(f"<think>{a} * {b} = {t} * {b} + {u} * {b} = {t * b} + {u * b} = {a * b}. {a * b} - {c} = {ans}</think>"
                            f"<answer>{ans}</answer>")
            elif kind == "one-step":
                resp.append(f"<think>{a} * {b} = {a * b}. {a * b} - {c} = {ans}</think><answer>{ans}</answer>")
            else:
                resp.append(f"The answer is {ans}.")
        problems.append({"id": f"arith-2x1/test/{i}", "question": f"{a} * {b} - {c}", "answer": v, "n": n, "responses": resp,
                         "correct_strict": sum(countdown_score(r, v) for r in resp),
                         "correct_loose": sum(countdown_score(r, v) for r in resp),
                         "format_ok": n})
    return {"sampling": {"n": n}, "format_rate": 1.0, "task": "arith-2x1", "problems": problems, **fields,
            "provenance": {"config": {}, "stage_hash": "x", "plan_sha256": "y"}}


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


def test_a_key_added_since_at_its_old_value_is_not_another(tmp_path):
    """A key added since at its old value is not another config.

    An input made by a revision that knows a newer config key, at its 'as before' value, is made
    under the same config as one made before the key existed (provenance.same_config); any other
    difference is still named."""
    run = _good_run(tmp_path)
    for g in run.glob("eval_*.json"):  # every input records the select section; one of them also the newer key
        e = json.loads(g.read_text())
        e["provenance"]["config"]["select"] = {"samples": 16}
        g.write_text(json.dumps(e))
    f = next(run.glob("eval_many_*.json"))
    d = json.loads(f.read_text())
    d["provenance"]["config"]["select"]["scoring"] = "strict"
    f.write_text(json.dumps(d))
    assemble.run_analysis(run, make_figures=False)
    assert "made with another config" not in (run / "report.md").read_text()
    d["provenance"]["config"]["select"]["scoring"] = "loose"
    f.write_text(json.dumps(d))
    assemble.run_analysis(run, make_figures=False)
    assert f"{f.name} was made with another config" in (run / "report.md").read_text()


def test_out_analyses_a_copy_and_leaves_the_run_as_it_was(tmp_path):
    run = _good_run(tmp_path)
    (run / "train_many_s0" / "step_075").mkdir(parents=True)
    (run / "train_many_s0" / "step_075" / "adapter_model.safetensors").write_bytes(b"weights")  # not an input: not copied
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    new = tmp_path / "new"
    r = _cli("--run", str(run), "--out", str(new), "--no-figures")
    assert r.returncode == 0, r.stderr
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # nothing written into the run
    assert not list(new.rglob("*.safetensors")) and f"wrote {new / 'verdicts.json'}" in r.stdout
    copied = json.loads((new / "verdicts.json").read_text())
    in_place = assemble.run_analysis(run, make_figures=False)
    assert copied["entries"] == in_place["entries"] and copied["provenance"]["inputs"] == in_place["provenance"]["inputs"]
    for bad in (new, run / "inside"):  # not empty; inside the run
        r = _cli("--run", str(run), "--out", str(bad), "--no-figures")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    BREAKAGES["count_above_n"][0](run)
    r = _cli("--run", str(run), "--out", str(tmp_path / "other"), "--no-figures")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"{run / M}: problem" in r.stderr and "python pipeline.py --config" in r.stderr  # the run's file, the command
    assert not (tmp_path / "other").exists()  # the copy, holding no result, is gone


def test_a_first_analysis_moves_nothing_aside_and_a_second_moves(tmp_path):
    """A first analysis moves nothing aside and a second moves the first."""
    run = _good_run(tmp_path)
    (run / "figures").mkdir()
    (run / "figures" / "training.png").write_bytes(b"drawn while training ran")
    assemble.run_analysis(run, make_figures=False)
    assert not (run / "superseded").exists()
    assemble.run_analysis(run, make_figures=False)
    moved = sorted(p.name for p in next((run / "superseded").iterdir()).iterdir())
    assert moved == ["figures", "report.md", "verdicts.json"]


def test_the_learning_rate_section_shows_the_measure_the_rule():
    """The learning rate section shows the measure the rule chose by.

    Under rule dev the report shows the dev pass@1 the choice was made by (the chosen rate has the
    largest), with the training reward named as not the rule's; under rule reward, the reward."""
    from analysis import report_secondary

    dev = {"rule": "highest dev pass@1", "rule_name": "dev", "chosen": 0.001,
           "mean_reward_last": {"0.0003": 0.074, "0.001": 0.327, "0.003": 0.406},
           "dev_loose_pass1": {"0.0003": 0.371, "0.001": 0.529, "0.003": 0.492}}
    line = report_secondary.lr_measures(dev)
    assert "Dev loose pass@1 per rate (the rule's measure): 0.0003: 0.371, 0.001: 0.529, 0.003: 0.492" in line
    assert line.endswith("0.003: 0.406 (not the rule's)")
    reward = {**dev, "rule_name": "reward", "chosen": 0.003}
    del reward["dev_loose_pass1"]
    line = report_secondary.lr_measures(reward)
    assert "Mean training reward over the last steps per rate: 0.0003: 0.074" in line and "dev" not in line.lower()
