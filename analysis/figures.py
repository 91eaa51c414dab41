"""The report's figures (RUN/figures/*.png), drawn from the analysis' result and the training logs;
each function draws one figure and returns None (writing nothing) when its inputs are absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from analysis.document import DIVERSITY, MODEL_BASED, model_label
from analysis.run_files import DEV_COLUMNS, DEV_REQUIRED, TRAIN_COLUMNS, Design, InputError, read_csv, read_design
from countdown import SCORINGS
from orchestration import study

COLORS = [
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_ticks(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _k_axis(ax, k_max: int) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    ax.set_xscale("log", base=2)
    ticks = [2**i for i in range(int(np.log2(k_max)) + 1)] + ([k_max] if k_max & (k_max - 1) else [])
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("k (samples)")


def training_files(run: Path, name: str) -> list[tuple[str, int | None, Path]]:
    """[(condition, seed or None, path)] for every RUN/train_*/<name>, in the design's condition
    order where the design can be read, then by name; seeds ascending."""
    try:
        order = read_design(run).conditions
    except InputError:
        order = []
    found = []
    for f in run.glob(f"train_*/{name}"):
        m = study.TRAIN_DIR.match(f.parent.name)
        found.append((m["cond"], int(m["seed"]) if m["seed"] else None, f))
    found.sort(key=lambda t: (order.index(t[0]) if t[0] in order else len(order), t[0], t[1] or 0))
    return found


def training_logs(run: Path) -> list[tuple[str, int | None, list[dict]]]:
    """[(condition, seed or None, rows)] for every RUN/train_*/train_log.csv (training_files' order)."""
    return [(c, s, read_csv(f)) for c, s, f in training_files(run, "train_log.csv")]


TRAIN_PANELS = list(
    zip(
        TRAIN_COLUMNS,
        (
            "mean reward (strict)",
            "groups with no signal (share)",
            "format rate",
            "mean response length (tokens)",
            "mean token entropy (nats)",
            "mean k3 KL to the base",
        ),
    )
)


def training_figure(run: Path, checkpoints: list[int], dev: bool = True, out: Path | None = None) -> Path | None:
    """RUN/figures/training.png from RUN/train_*/train_log.csv: one line per condition x seed,
    coloured by condition, the checkpoints as vertical lines. Only step and reward_mean are
    required; each optional column (TRAIN_PANELS) gets a panel when some log has a number in it. Returns None
    (and writes nothing) when there is no log. Safe to call while training or evaluation runs.
    With dev (the pipeline's call) it also draws training_dev.png where train_eval.csv files exist.
    out: the folder to write to (default RUN/figures)."""
    if dev:
        training_dev_figure(run, checkpoints, out)
    logs = [(c, s, rows) for c, s, rows in training_logs(Path(run)) if rows]
    if not logs:
        return None
    plt = _plt()
    panels = [
        (col, t)
        for col, t in TRAIN_PANELS  # a column no log has a number in (kl_mean when not logged) gets no panel
        if any(np.isfinite(r.get(col, np.nan)) for _, _, rows in logs for r in rows)
    ]
    ncol = 2 if len(panels) > 1 else 1
    nrow = -(-len(panels) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.2 * nrow), squeeze=False)
    conds = list(dict.fromkeys(c for c, _, _ in logs))
    for ax, (col, title) in zip(axes.flat, panels):
        labelled = set()
        for c, s, rows in logs:
            if col not in rows[0]:
                continue
            color = COLORS[conds.index(c) % len(COLORS)]
            ax.plot(
                [r["step"] for r in rows],
                [r[col] for r in rows],
                color=color,
                lw=1,
                alpha=0.8,
                label=None if c in labelled else c,
            )
            labelled.add(c)
        if col == "zero_signal_frac":  # training.no_signal_warning's threshold
            ax.axhline(study.NO_SIGNAL_WARN, color="black", ls=":", lw=0.8)
            ax.set_ylim(-0.02, 1.02)
        _step_axes(ax, title, checkpoints)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    axes[0, 0].legend(title="condition", fontsize=8)
    seeds = sorted({s for _, s, _ in logs if s is not None})
    fig.suptitle(
        "training"
        + (f" ({len(seeds)} seeds per condition, one line each)" if seeds else "")
        + (f"; dashed: checkpoints {', '.join(map(str, checkpoints))}" if checkpoints else ""),
        fontsize=10,
    )
    fig.tight_layout()
    out = Path(out or Path(run) / "figures")
    out.mkdir(parents=True, exist_ok=True)
    path = _save(fig, out / "training.png")
    plt.close(fig)
    return path


def training_dev_figure(run: Path, checkpoints: list[int], out: Path | None = None) -> Path | None:
    """RUN/figures/training_dev.png from RUN/train_*/train_eval.csv (the held-out dev problems every
    train.dev_every steps): loose pass@1 and loose pass@n over steps, per condition a thick line for
    the mean over seeds (at the steps every seed has) and a thin line per seed. None when no file."""
    run = Path(run)
    logs = [
        (c, s or 0, rows)
        for c, s, f in training_files(run, "train_eval.csv")
        if (rows := read_csv(f, required=DEV_REQUIRED, drawn=DEV_COLUMNS))
    ]
    if not logs:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    conds = list(dict.fromkeys(c for c, _, _ in logs))
    ns = sorted({int(r["n"]) for _, _, rows in logs for r in rows if np.isfinite(r.get("n", np.nan))})
    for ax, (col, title) in zip(axes, (("loose_pass1", "loose pass@1 (dev)"), ("loose_passn", "loose pass@n (dev)"))):
        for c in conds:
            color = COLORS[conds.index(c) % len(COLORS)]
            runs = [{r["step"]: r.get(col, np.nan) for r in rows} for cc, _, rows in logs if cc == c]
            for r in runs:
                ax.plot(list(r), list(r.values()), color=color, lw=0.7, alpha=0.35)
            common = sorted(set.intersection(*(set(r) for r in runs)))
            ax.plot(
                common,
                [np.mean([r[s] for r in runs]) for s in common],
                color=color,
                lw=2,
                label=f"{c} (mean of {len(runs)} seed{'s' if len(runs) > 1 else ''})",
            )
        _step_axes(ax, title, checkpoints)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"held-out dev problems during training (train_eval.csv; n = {', '.join(map(str, ns)) or '?'} samples each; "
        "thin: one seed)",
        fontsize=10,
    )
    fig.tight_layout()
    out = Path(out or Path(run) / "figures")
    out.mkdir(parents=True, exist_ok=True)
    path = _save(fig, out / "training_dev.png")
    plt.close(fig)
    return path


def beyond_figure(out: Path, res: dict) -> Path | None:
    """pass@k on a log-k axis to analyze.extrapolate_to: measured (solid) to the largest n, the
    beta-binomial beyond it (dashed, labelled model-based), for the base and each condition's last
    checkpoint (its first seed in the large set)."""
    bz = res["beyond"]
    if not bz["fits"]:
        return None
    plt = _plt()
    n, ext = bz["n"], bz["extrapolate_to"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    shown = [None] + list(
        dict.fromkeys((f["condition"], f["seed"], f["step"]) for f in bz["fits"] if f["condition"] != "base")
    )
    firsts = {}
    for key in shown[1:]:
        firsts.setdefault(key[0], key)
    keys = [None] + list(firsts.values())
    for ax, sc in zip(axes, SCORINGS):
        for i, key in enumerate(keys):
            cv = bz["_curves"][(key, sc)]
            color = "black" if key is None else COLORS[(i - 1) % len(COLORS)]
            ax.plot(
                np.arange(1, len(cv["measured"]) + 1), cv["measured"], color=color, lw=1.5, label=model_label(key)
            )  # its own n
            if ext > n:
                ax.plot(cv["ks_model"], cv["model"], color=color, lw=1.5, ls="--")
                if cv.get("band") is not None:
                    ax.fill_between(cv["ks_model"], *cv["band"], color=color, alpha=0.12, lw=0)
        if ext > n:
            ax.plot([], [], color="grey", ls="--", label=MODEL_BASED)
            ax.axvline(n, color="grey", ls=":", lw=0.8)
        _k_axis(ax, max(ext, n))
        ax.set_ylabel(f"pass@k ({sc})")
        ax.set_title(f"{sc} scoring")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    src = "test set" if bz["set"] == "test" else f"set {bz['set']}"
    fig.suptitle(f"pass@k measured to n = {n} ({src}, solid) and {MODEL_BASED} to k = {ext} (dashed)", fontsize=10)
    fig.tight_layout()
    path = _save(fig, out / "passk_beyond_n.png")
    plt.close(fig)
    return path


def ood_figures(out: Path, res: dict) -> list[Path]:
    """Per out-of-distribution set: pass@k on the test set (left) and on the set (right), per scoring,
    the base and each condition's last checkpoint (mean over seeds)."""
    plt = _plt()
    paths = []
    for name, o in res["ood"].items():
        fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
        conds = [c for c in res["design"].conditions if ("loose", c) in o["_figure"]]
        for i, sc in enumerate(SCORINGS):
            for j, (where, K) in enumerate((("test", o["test_k_max"]), (name, o["k_max"]))):
                ax = axes[i, j]
                for c in ["base"] + conds:
                    if (sc, c) not in o["_figure"]:
                        continue
                    y = o["_figure"][(sc, c)][j]
                    ax.plot(
                        np.arange(1, K + 1),
                        y,
                        color="black" if c == "base" else COLORS[conds.index(c) % len(COLORS)],
                        marker="o",
                        ms=2,
                        label=c,
                    )
                _k_axis(ax, K)
                ax.set_ylabel(f"pass@k ({sc})")
                ax.set_title(f"{where} ({o['task'] if j else 'in distribution'}), {sc}")
                ax.grid(alpha=0.3)
        axes[0, 0].legend(fontsize=7)
        fig.suptitle(
            f"in vs out of distribution: test vs {name}; step {res['design'].checkpoints[-1]}, mean over seeds",
            fontsize=10,
        )
        fig.tight_layout()
        paths.append(_save(fig, out / f"ood_{name}.png"))
        plt.close(fig)
    return paths


def diversity_figure(out: Path, res: dict) -> Path | None:
    """Test set, last checkpoint: per condition the mean over seeds of each diversity field (bars),
    each seed a dot, the base a horizontal line."""
    dv, last = res["diversity"], res["design"].checkpoints[-1]
    rows = [r for r in dv["conditions"] if r["set"] == "test" and r["step"] == last]
    base = next((r for r in dv["conditions"] if r["set"] == "test" and r["condition"] == "base"), None)
    if not rows or base is None:
        return None
    plt = _plt()
    fields = [(k, t) for k, t in DIVERSITY if base[k] is not None]
    fig, axes = plt.subplots(1, len(fields), figsize=(4.2 * len(fields), 4), squeeze=False)
    for ax, (k, title) in zip(axes[0], fields):
        x = np.arange(len(rows))
        ax.bar(
            x,
            [np.nan if r[k] is None else r[k] for r in rows],
            color=[COLORS[i % len(COLORS)] for i in range(len(rows))],
            alpha=0.6,
        )
        for i, r in enumerate(rows):
            ys = [
                m[k]
                for m in dv["models"]
                if m["set"] == "test" and (m["condition"], m["step"]) == (r["condition"], last) and m[k] is not None
            ]
            ax.plot([i] * len(ys), ys, "k.", ms=5)
        ax.axhline(base[k], color="black", ls="--", lw=1, label="base")
        ax.set_xticks(x, [r["condition"] for r in rows], rotation=30)
        ax.set_ylabel(title)
        ax.grid(alpha=0.3, axis="y")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(
        f"diversity per problem, test set, step {last} (bars: mean over seeds; dots: seeds; dashed: base)", fontsize=10
    )
    fig.tight_layout()
    path = _save(fig, out / "diversity.png")
    plt.close(fig)
    return path


def strategies_figure(out: Path, res: dict) -> Path | None:
    """figures/strategies.png, the last checkpoint: per strategy, its share of the responses (left)
    and the accuracy within it (right), the base beside each condition (pooled over seeds)."""
    sg, last = res["strategies"], res["design"].checkpoints[-1]
    rows = [r for r in sg["conditions"] if r["step"] == last]
    if sg["skipped"] or not rows:
        return None
    plt = _plt()
    base = sg["models"][0]
    models = [("base", base)] + [(r["condition"], r) for r in rows]
    S = sg["strategies"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.8 / len(models)
    for j, (name, m) in enumerate(models):
        x = np.arange(len(S)) + (j - (len(models) - 1) / 2) * width
        color = "black" if name == "base" else COLORS[(j - 1) % len(COLORS)]
        axes[0].bar(x, [m["share"][s] for s in S], width, color=color, label=name, alpha=0.8)
        axes[1].bar(
            x, [np.nan if m["accuracy"][s] is None else m["accuracy"][s] for s in S], width, color=color, alpha=0.8
        )
    for ax, title in zip(axes, ("share of the responses", "accuracy within the strategy (loose)")):
        ax.set_xticks(np.arange(len(S)), S)
        ax.set_ylabel(title)
        ax.grid(alpha=0.3, axis="y")
    axes[0].axhline(sg["floor"], color="grey", ls=":", lw=0.8)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"how the product is computed, test set, step {last} (trained: pooled over seeds; dotted: the floor "
        f"{sg['floor']:g} of the registered reading)",
        fontsize=10,
    )
    fig.tight_layout()
    path = _save(fig, out / "strategies.png")
    plt.close(fig)
    return path


def controls_figure(out: Path, res: dict) -> Path | None:
    """H6: the contrast curves pass@k(GRPO) - pass@k(other) with their simultaneous bands."""
    h6 = res["controls"]["h6"]
    if not h6:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(h6), figsize=(5.5 * len(h6), 4), squeeze=False)
    for ax, h in zip(axes[0], h6):
        ks = np.arange(1, h["k_max"] + 1)
        ax.plot(ks, h["diff"], color="tab:blue", marker="o", ms=3, label=f"{h['rl']} − {h['other']}")
        ax.fill_between(
            ks, h["lo"], h["hi"], color="tab:blue", alpha=0.15, lw=0, label=f"{h['level']:.0%} simultaneous band"
        )
        ax.axhline(0, color="black", lw=0.8)
        _k_axis(ax, h["k_max"])
        ax.set_ylabel(f"Δ pass@k ({h['scoring']}), GRPO − {h['method'].upper()}")
        ax.set_title(f"H6: {h['rl']} vs {h['other']}, step {h['step']}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = _save(fig, out / "controls_h6.png")
    plt.close(fig)
    return path


def figures(run: Path, res: dict, out: Path | None = None) -> list[Path]:
    """Every figure of the report, in its order, into `out` (default RUN/figures); each drawing
    function returns None (or []) when its inputs are absent."""
    out = Path(out or run / "figures")
    out.mkdir(parents=True, exist_ok=True)
    written = passk_figures(out, res)
    for f in (
        beyond_figure(out, res),
        *ood_figures(out, res),
        diversity_figure(out, res),
        strategies_figure(out, res),
        controls_figure(out, res),
        training_figure(run, res["design"].checkpoints, dev=False, out=out),
        training_dev_figure(run, res["design"].checkpoints, out),
        lr_sweep_figure(run, out, res["design"]),
    ):
        if f:
            written.append(f)
    return written


def passk_figures(out: Path, res: dict) -> list[Path]:
    """figures/passk_<condition>.png: per scoring, pass@k of the base and each checkpoint (mean over
    seeds), and Delta pass@k with its simultaneous band."""
    plt = _plt()
    written = []
    design, k_max, n = res["design"], res["k_max"], res["n"]
    ks = np.arange(1, k_max + 1)
    for cond in design.conditions:
        steps = [st for st in design.checkpoints if (cond, st) in res["curves"]["loose"]]
        if not steps:
            continue
        fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
        for j, sc in enumerate(SCORINGS):
            top, bot = axes[0, j], axes[1, j]
            top.plot(ks, res["curves"][sc]["base"].mean(axis=0), color="black", marker="o", ms=3, label="base")
            for i, st in enumerate(steps):
                seeds, pr = res["curves"][sc][(cond, st)]
                color = COLORS[i % len(COLORS)]
                top.plot(
                    ks,
                    pr.mean(axis=1).mean(axis=0),
                    color=color,
                    marker="o",
                    ms=3,
                    label=f"{cond} step {st} (mean of {len(seeds)} seed{'s' if len(seeds) > 1 else ''})",
                )
                e = next(e for e in res["entries"] if (e["condition"], e["step"], e["scoring"]) == (cond, st, sc))
                b = e["band"]
                bot.plot(ks, b["diff"], color=color, marker="o", ms=3, label=f"step {st}")
                bot.fill_between(ks, b["lo"], b["hi"], color=color, alpha=0.15, lw=0)
            bot.axhline(0, color="black", lw=0.8)
            for m in (-res["margin"], res["margin"]):
                bot.axhline(m, color="grey", ls=":", lw=0.8)
            top.set_title(f"{sc} scoring")
            top.set_ylabel("pass@k")
            bot.set_ylabel(f"Δ pass@k (RL − base), {int(res['ci'] * 100)}% simultaneous band")
            for ax in (top, bot):
                _k_axis(ax, k_max)
                ax.grid(alpha=0.3)
            top.legend(fontsize=7)
            bot.legend(fontsize=7, title=f"dotted: ±{res['margin']:g} margin", title_fontsize=7)
        fig.suptitle(f"pass@k: condition {cond} vs base ({res['n_problems']} test problems, n = {n})")
        fig.tight_layout()
        written.append(_save(fig, out / f"passk_{cond}.png"))
        plt.close(fig)
    return written


def lr_sweep_figure(run: Path, out: Path, design: Design) -> Path | None:
    """figures/lr_sweep.png: the sweep's mean reward per step and rate, the scoring window shaded."""
    sweep = sorted((run / "lr_sweep").glob("lr_*/train_log.csv")) if (run / "lr_sweep").exists() else []
    if sweep:
        plt = _plt()
        lrs = design.cfg.lr_sweep
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for f in sweep:
            rows = read_csv(f)
            ax.plot(
                [r["step"] for r in rows], [r["reward_mean"] for r in rows], label=f.parent.name.replace("lr_", "lr ")
            )
        ax.axvspan(
            lrs.steps - lrs.last + 0.5,
            lrs.steps + 0.5,
            color="grey",
            alpha=0.15,
            label=f"scoring window (last {lrs.last} of {lrs.steps} steps)",
        )
        ax.set_xlabel("training step")
        ax.set_ylabel("mean reward (strict)")
        _integer_ticks(ax)
        ax.set_title("learning-rate sweep (PLAN.md section 5)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = _save(fig, out / "lr_sweep.png")
        plt.close(fig)
        return path
    return None


def _step_axes(ax, title: str, checkpoints: list[int]) -> None:
    """A panel over training steps: the checkpoints as dashed lines, integer step ticks, a grid."""
    for st in checkpoints:
        ax.axvline(st, color="grey", ls="--", lw=0.8)
    ax.set_ylabel(title)
    ax.set_xlabel("training step")
    _integer_ticks(ax)
    ax.grid(alpha=0.3)


def _save(fig, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path
