"""PLAN.md (sections 1-11; its change log is PLAN_CHANGES.md) states the code's defaults: each sentence
that states a setting's value is found by a small regex anchored on its words, and its numbers are
held against the dataclass defaults of orchestration/config.py (and analysis_settings.py through it),
or against the config file the sentence names. A stated value that drifts from the code fails here;
so does a sentence reworded out of the regex's reach (update the pattern with the sentence)."""

import re
from pathlib import Path

import pytest

from orchestration import config
from orchestration.analysis_settings import BaseSupportCfg, CollapseCfg, WithinCorrectCfg

ROOT = Path(__file__).resolve().parents[1]
BODY = (ROOT / "PLAN.md").read_text()
CHANGES = (ROOT / "PLAN_CHANGES.md").read_text()
D = config.Config()
TINY_SKILL = config.load(str(ROOT / "configs/tiny_skill.yaml"))


def number(s: str):
    """A number as PLAN.md writes it: 10,000; 0.05; 1e-5; '⅓'; 'off' (top-k off is 0)."""
    if s == "⅓":
        return 1 / 3
    if s == "off":
        return 0
    v = float(s.replace(",", ""))
    return int(v) if v.is_integer() and "e" not in s and "." not in s else v


def numbers(s: str) -> list:
    return [number(x) for x in re.split(r",\s*", s.strip())]


# (what, the sentence's pattern with the stated values as groups, the code's values in that order)
STATED = [
    (
        "bootstrap resamples (section 7)",
        r"each of `analyze\.resamples` replicates\s+\(([\d,]+) by default\)",
        lambda: [D.analyze.resamples],
    ),
    (
        "the primary question (section 1)",
        r"\*\*The primary question\*\* \(section 7\): the `(\w+)` condition, (\w+) scoring, last",
        lambda: [D.analyze.primary_condition, D.analyze.primary_scoring],
    ),
    (
        "task and train split (section 2)",
        r"c 3-digit \(`([\w-]+)`\).*?split in a fixed order: test, train \(([\d,]+)\)",
        lambda: [D.task.name, D.task.n_train],
    ),
    (
        "model revision (section 3)",
        r"^- ([\w.-]+), revision `([0-9a-f]{40})`",
        lambda: [D.model.path.split("/")[-1], D.model.revision],
    ),
    ("LoRA (section 3)", r"LoRA written by hand: rank (\d+), alpha (\d+)", lambda: [D.lora.r, D.lora.alpha]),
    (
        "rollouts (section 3)",
        r"each step (\d+) problems × (\d+) answers at temperature ([\d.]+), top-p ([\d.]+),\s+top-k (off), no repetition penalty, "
        r"at most (\d+) new tokens",
        lambda: [
            D.train.problems_per_step,
            D.train.group_size,
            D.train.sampling.temperature,
            D.train.sampling.top_p,
            D.train.sampling.top_k,
            D.train.sampling.max_new_tokens,
        ],
    ),
    (
        "loss constant (section 3)",
        r"response tokens ÷ \((\d+) × (\d+) × (\d+)\)",
        lambda: [D.train.problems_per_step, D.train.group_size, D.train.sampling.max_new_tokens],
    ),
    (
        "optimiser (section 3)",
        r"AdamW betas \(([\d.]+), ([\d.]+)\), (no) weight decay",
        lambda: [*D.train.betas, "no" if D.train.weight_decay == 0 else D.train.weight_decay],
    ),
    (
        "steps and checkpoints (section 3)",
        r"clipping, (\d+) steps, adapters saved at (\d+) and (\d+)",
        lambda: [D.train.steps, *D.train.checkpoints],
    ),
    (
        "training seeds (section 3)",
        r"`train\.seeds` = ([\d, ]+), or its\s+own list.*?\(`many`: (\d+) seeds for Qwen",
        lambda: [D.train.seeds, len(D.train.seeds_by_condition["many"])],
    ),
    ("16-kl's beta (section 4)", r"β = ([\d.]+), k3 = exp", lambda: [config.default_conditions()["16-kl"].kl]),
    (
        "selection rule (section 4)",
        r"The base answers each of the first (\d+) train problems (\d+) times at temperature\s+([\d.]+)\..*?chooses the rate: (\w+) unless",
        lambda: [D.select.n_problems, D.select.samples, D.select.temperature, D.select.scoring],
    ),
    (
        "learning-rate sweep (section 5)",
        r"(\d+) steps of `many` on the first seed for each of ([\de\-, ]+); the rate.*?`dev` problems \((\d+) × (\d+) samples"
        r".*?at most ([\d.]+) of those problems locked on a wrong\s+answer \(`lr_sweep\.max_lock_in`.*?\(`lr_sweep\.rule: ([\w-]+)`",
        lambda: [
            D.lr_sweep.steps,
            D.lr_sweep.candidates,
            D.train.dev_problems,
            D.train.dev_samples,
            D.lr_sweep.max_lock_in,
            D.lr_sweep.rule,
        ],
    ),
    (
        "test evaluation (section 6)",
        r"\(condition × seed × checkpoint\) (\d+) samples,\s+the base \*\*(\d+)\*\* \(`eval\.n_base`\), at temperature ([\d.]+), "
        r"top-p ([\d.]+), top-k (off), at most (\d+) new\s+tokens",
        lambda: [
            D.eval.n,
            D.eval.n_base,
            D.eval.sampling.temperature,
            D.eval.sampling.top_p,
            D.eval.sampling.top_k,
            D.eval.sampling.max_new_tokens,
        ],
    ),
    (
        "wide and ood sets (section 6)",
        r"\*\*`wide`\*\*: the first (\d+) test problems × (\d+) samples.*?\(`([\w-]+)` for\s+Qwen\), (\d+) × (\d+)",
        lambda: [
            D.eval_sets["wide"].n_problems,
            D.eval_sets["wide"].n,
            D.eval_sets["ood"].task,
            D.eval_sets["ood"].n_problems,
            D.eval_sets["ood"].n,
        ],
    ),
    (
        "dev checks (section 6)",
        r"Held-out `dev` checks every (\d+) steps \((\d+) × (\d+)\)",
        lambda: [D.train.dev_every, D.train.dev_problems, D.train.dev_samples],
    ),
    (
        "selection null's margin (section 7)",
        r"D, margin ±([\d.]+) \| TOST, p < [\d.]+; asked only where ([\d.]+) ≤ (⅓) ×",
        lambda: [D.analyze.selection_margin, D.analyze.selection_margin, D.analyze.margin_headroom_fraction],
    ),
    (
        "base-null margin (section 7)",
        r"equivalent to the base's within ±([\d.]+) \(asked only where ([\d.]+) ≤ (⅓) × the base's",
        lambda: [D.analyze.equivalence_margin, D.analyze.equivalence_margin, D.analyze.margin_headroom_fraction],
    ),
    (
        "calibration re-splits (section 7)",
        r"Each of `resplits` \((\d+)\) re-splits",
        lambda: [D.analyze.calibration.resplits],
    ),
    (
        "calibration arms (section 7)",
        r"\| selection w = ([\d.]+), ([\d.]+) \|.*?\| teaching ε = ([\d.]+), ([\d.]+) \|"
        r".*?\| selection w = ([\d.]+) \+ teaching ε = ([\d.]+) \|",
        lambda: [
            *D.analyze.calibration.selection_w,
            *D.analyze.calibration.teaching_eps,
            D.analyze.calibration.mixed[0].w,
            D.analyze.calibration.mixed[0].eps,
        ],
    ),
    (
        "power and coverage (section 7)",
        r"detects with (\d+)% power.*?in ([\d,]+) count-level simulations",
        lambda: [round(D.analyze.power * 100), D.analyze.coverage_sims],
    ),
    (
        "Qwen column of the CPU worlds' table (section 9)",
        r"\| LoRA \| r (\d+), α (\d+) \|.*?\| steps, checkpoints \| (\d+); (\d+), (\d+) \|"
        r".*?\| LR candidates, sweep \| ([\de\-, ]+); (\d+) steps"
        r".*?\| max new tokens \| (\d+) \|",
        lambda: [
            D.lora.r,
            D.lora.alpha,
            D.train.steps,
            *D.train.checkpoints,
            D.lr_sweep.candidates,
            D.lr_sweep.steps,
            D.train.sampling.max_new_tokens,
        ],
    ),
    (
        "the world with a skill to select's design (section 9, configs/tiny_skill.yaml)",
        r"taught arm.*?the base sampled (\d+) times\s+per problem.*?`wide` (\d+) × (\d+), `ood` \(`([\w-]+)`\) (\d+) × (\d+).*?"
        r"([\d,]+) bootstrap replicates, calibration (\d+) re-splits of ([\d,]+)",
        lambda: [
            TINY_SKILL.eval.n_base,
            TINY_SKILL.eval_sets["wide"].n_problems,
            TINY_SKILL.eval_sets["wide"].n,
            TINY_SKILL.eval_sets["ood"].task,
            TINY_SKILL.eval_sets["ood"].n_problems,
            TINY_SKILL.eval_sets["ood"].n,
            TINY_SKILL.analyze.resamples,
            TINY_SKILL.analyze.calibration.resplits,
            TINY_SKILL.analyze.calibration.resamples,
        ],
    ),
    (
        "the outside rule (section 7e)",
        r"excess ≥ τ = ([\de.-]+) \(`analyze\.base_support\.tolerance`",
        lambda: [BaseSupportCfg().tolerance],
    ),
    ("kept (section 7e)", r"mean r <\s+([\d.]+) \(`kept_margin`\)", lambda: [BaseSupportCfg().kept_margin]),
    (
        "the answer at T 1 (section 7e)",
        r"α < 1 − ([\d.]+) \(`exponent_margin`\).*?D within ±([\d.]+) \(`gap_margin`\)",
        lambda: [WithinCorrectCfg().exponent_margin, WithinCorrectCfg().gap_margin],
    ),
    (
        "permutation draws (section 7e)",
        r"`analyze\.within_correct\.permutations`\s+([\d,]+) draws",
        lambda: [WithinCorrectCfg().permutations],
    ),
    (
        "collapse (section 7e)",
        r"`analyze\.collapse`: `late_from` ([\d.]+), `share` ([\d.]+)",
        lambda: [CollapseCfg().late_from, CollapseCfg().share],
    ),
]


def parse(group: str):
    """One stated value: a list ("0, 1, 2"; "1e-5, 5e-5, 2e-4"), a number, or a word."""
    if re.fullmatch(r"[\d.,e\- ]+", group) and "," in group and not re.fullmatch(r"\d{1,3}(,\d{3})+", group):
        return numbers(group)
    try:
        return number(group)
    except ValueError:
        return group


@pytest.mark.parametrize("what,pattern,code", STATED, ids=[s[0] for s in STATED])
def test_the_plan_body_states_the_code_defaults(what, pattern, code):
    m = re.search(pattern, BODY, re.S | re.M)
    assert m, f"PLAN.md's body no longer states {what} in the words this test reads: {pattern}"
    assert [parse(g) for g in m.groups()] == code(), what


def drifted(what: str, pattern: str, code) -> list[int]:
    """The groups of `pattern`'s match whose every change the test would catch: a different value
    spliced in must either leave the sentence unread or read other than the code's."""
    m = re.search(pattern, BODY, re.S | re.M)
    caught = []
    for i in range(1, len(m.groups()) + 1):
        other = "x" + m[i] if not re.match(r"[\d.]", m[i]) else "7" + m[i]
        body = BODY[: m.start(i)] + other + BODY[m.end(i) :]
        again = re.search(pattern, body, re.S | re.M)
        if again is None or [parse(g) for g in again.groups()] != code():
            caught.append(i)
    return caught


@pytest.mark.parametrize("what,pattern,code", STATED, ids=[s[0] for s in STATED])
def test_a_drifted_statement_fails(what, pattern, code):
    """The check is not vacuous: every stated value, changed, fails it."""
    assert drifted(what, pattern, code) == list(range(1, re.compile(pattern).groups + 1))


def test_the_stale_resamples_statement_fails():
    """PLAN.md once said "2,000 by default" where the code says 10,000: that sentence is caught."""
    for stale in ("(10,000 registered; 2,000 by default)", "(2,000 by default)"):
        m = re.search(STATED[0][1], BODY.replace("(10,000 by default)", stale), re.S)
        assert m is None or [parse(g) for g in m.groups()] != STATED[0][2]()


def test_the_rules_and_the_change_log_are_two_files():
    """PLAN.md holds the rules (sections 1-11) and no change log; PLAN_CHANGES.md holds the entries,
    numbered 1, 2, ... in order, each dated, and every change PLAN.md cites by number is among them."""
    assert "## Change log" not in BODY and "## 11. " in BODY
    entries = re.findall(r"^(\d+)\. \*\*(\d{4}-\d\d-\d\d)", CHANGES, re.M)
    assert [int(n) for n, _ in entries] == list(range(1, len(entries) + 1)) and len(entries) >= 61
    cited = set()
    for a, b in re.findall(r"\bchanges? (\d+)(?:[–-](\d+))?", BODY):
        cited |= set(range(int(a), int(b or a) + 1))
    assert cited and max(cited) <= len(entries)


def test_the_change_index_has_one_row_per_entry_and_each_rule_a_home_in_plan():
    """PLAN_CHANGES.md's index (issue 68): a row per entry, in order; a rule names the PLAN.md section that states
    it (the section exists), and a rule from change 57 on is cited by number in PLAN.md; a superseded rule names a
    later change."""
    entries = [int(n) for n in re.findall(r"^(\d+)\. \*\*", CHANGES, flags=re.M)]
    rows = re.findall(r"^\| (\d+) \| (\d{4}-\d\d-\d\d) \| ([^|]+) \| ([^|]+) \| [^|]* \|$", CHANGES, flags=re.M)
    assert [int(r[0]) for r in rows] == entries == list(range(1, len(entries) + 1))
    heads = set(re.findall(r"^## (\d+[a-z]?)\.", BODY, flags=re.M))
    cited = {int(x) for m in re.finditer(r"[Cc]hanges? ([0-9][0-9,–\- and]*)", BODY) for x in expand(m.group(1))}
    for n, _, kind, where in rows:
        kind, where = kind.strip(), where.strip()
        assert kind in ("rule", "rule, superseded", "run note", "correction", "clarification", "wording"), (n, kind)
        if kind == "rule":
            assert where.startswith("§") and where[1:] in heads, (n, where)
            assert int(n) < 57 or int(n) in cited, f"change {n} is a rule PLAN.md does not cite"
        if kind == "rule, superseded":
            assert int(where.removeprefix("by ")) > int(n), (n, where)


def expand(text: str) -> list[int]:
    """'57, 59, 65' and '60–64' as numbers."""
    out = []
    for a, b in re.findall(r"(\d+)[–-](\d+)", text):
        out += range(int(a), int(b) + 1)
    return out + [int(x) for x in re.findall(r"\d+", text)]
