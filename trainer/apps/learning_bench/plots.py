"""The benchmark's figures (matplotlib, Agg). Every arm keeps one colour in every figure
(:data:`ARM_COLORS`); legends sit in their own panel or outside the axes; axes say their units.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ARM_COLORS = {
    "sao": "#000000", "sao-k1": "#1f77b4", "full-critic": "#17becf", "running-mean-8": "#d62728",
    "running-mean-128": "#ff9896", "ppo-clip": "#9467bd", "no-correction": "#8c564b", "grpo-dis": "#2ca02c",
    "grpo-no-dis": "#98df8a", "gae-turn-last": "#ff7f0e", "gae-turn-avg": "#7f7f7f", "gae-no-skip": "#e377c2",
    "running-mean-family": "#b5651d", "no-correction-small-step": "#c49c94", "gae-turn-last-h": "#ffbb78",
    "gae-turn-avg-h": "#c7c7c7", "moe-critic": "#393b79", "moe-full-critic": "#6b6ecf",
}
"""One fixed colour per arm (estimators of the advantage-quality study use their arm's colour).
``gae-turn-avg`` is grey, not olive: olive sat between the two GRPO greens in the diagnostics, and
any yellow sat too close to ``gae-turn-last``'s orange."""
ARM_DASHED = frozenset({"running-mean-128", "grpo-no-dis", "no-correction-small-step", "gae-turn-last-h",
                        "gae-turn-avg-h", "moe-full-critic"})
"""Arms drawn dashed in line plots: the lighter member of a pair of similar hues (running-mean-8 /
-128, grpo-dis / grpo-no-dis), so the pair stays apart where the lines cross."""


def arm_style(arm: str) -> dict[str, Any]:
    """Colour and line style of `arm` in line plots (legends use the same, so they match)."""
    return {"color": ARM_COLORS.get(arm, "grey"), "ls": "--" if arm in ARM_DASHED else "-"}


def ci_note(seeds: int) -> str:
    """What the whiskers / bars of a figure over `seeds` paired seeds mean (one seed has no
    interval, so none is drawn or promised)."""
    return "95% t-interval" if seeds >= 2 else "no interval"


def seeds_note(seeds: int) -> str:
    return f"mean over {seeds} seeds" if seeds != 1 else "1 seed"


VERDICT_COLORS = {"reproduced": "#2ca02c", "not reproduced": "#d62728", "not testable at this scale": "#7f7f7f",
                  "not testable (no arm discriminates)": "#c7c7c7", "no paper claim": "#1f77b4",
                  "undetermined": "#bcbd22"}


def _plt():  # noqa: ANN202
    import matplotlib

    matplotlib.use("Agg")
    # matplotlib: the plot extra, loaded only when a figure is drawn
    import matplotlib.pyplot as plt

    return plt


def _mean_curve(runs: Sequence[dict[str, Any]], key: str, x_key: str = "step") -> tuple[list[float], list[float]]:
    """Mean over runs of `key` at each x present in every run (NaNs skipped)."""
    by_x: dict[float, list[float]] = {}
    for r in runs:
        for row in r:
            v = row.get(key, math.nan)
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                by_x.setdefault(row[x_key], []).append(float(v))
    xs = sorted(x for x, v in by_x.items() if len(v) == len(runs))
    return xs, [sum(by_x[x]) / len(by_x[x]) for x in xs]


def _smooth(ys: list[float], w: int) -> list[float]:
    return [sum(ys[max(0, i - w + 1):i + 1]) / len(ys[max(0, i - w + 1):i + 1]) for i in range(len(ys))]


def _arm_order(arms: Sequence[str]) -> list[str]:
    """`arms` in the fixed order of :data:`ARM_COLORS` (unknown names last), so that legends do not
    follow the order in which runs happened to finish."""
    known = list(ARM_COLORS)
    return sorted(arms, key=lambda a: (known.index(a) if a in known else len(known), a))


def _legend_panel(ax, arms: Sequence[str], extra: Sequence[tuple[str, dict[str, Any]]] = ()) -> None:  # noqa: ANN001
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], lw=2, label=a, **arm_style(a)) for a in _arm_order(arms)]
    handles += [Line2D([], [], label=label, **style) for label, style in extra]
    ax.legend(handles=handles, loc="center left", frameon=False, fontsize=9)
    ax.axis("off")


def forest_plot(rows: Sequence[dict[str, Any]], path: str | Path, *, title: str) -> str:
    """Paired differences to ``sao`` with their 95 % t-intervals, one row per comparison.

    Args:
        rows: dicts with ``label``, ``mean``, ``low``, ``high``, ``verdict``, ``unit`` (x-axis label).
        path: PNG to write.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.6), dpi=110)
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        c = VERDICT_COLORS.get(r["verdict"], "grey")
        if not math.isnan(r["low"]):
            ax.plot([r["low"], r["high"]], [y, y], color=c, lw=2.5)
        ax.plot([r["mean"]], [y], "o", color=c, ms=6)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["label"] for r in reversed(rows)], fontsize=9)
    ax.set_xlabel(rows[0]["unit"] if rows else "")
    ax.set_title(title, fontsize=10)
    # matplotlib: the plot extra, loaded only when a figure is drawn
    from matplotlib.lines import Line2D

    shown = [v for v in VERDICT_COLORS if any(r["verdict"] == v for r in rows)]  # no key for what is not drawn
    shown += sorted({r["verdict"] for r in rows} - set(VERDICT_COLORS))
    ax.legend(handles=[Line2D([], [], color=VERDICT_COLORS.get(v, "grey"), lw=2.5, marker="o", label=v)
                       for v in shown], loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8,
              title="verdict")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def quality_plot(per_estimator: dict[str, dict[str, Any]], reliability: float, path: str | Path, *,
                 title: str) -> str:
    """Advantage quality per estimator: Pearson correlation with A* and gradient cosine with the
    oracle gradient, mean over seeds with 95 % t-intervals (of the mean), one bar per
    estimator in its arm's colour; the dashed line is the MC oracle's noise ceiling
    ``sqrt(reliability)`` for the correlation."""
    plt = _plt()
    names = list(per_estimator)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), dpi=110)
    for ax, key, label in ((axes[0], "corr", "Pearson correlation of A with A*\n(per action token, dimensionless)"),
                           (axes[1], "cos", "cosine(policy gradient with A,\npolicy gradient with A*), dimensionless")):
        for i, n in enumerate(names):
            iv = per_estimator[n][key]
            ax.bar(i, iv.mean, color=ARM_COLORS.get(n, "grey"), width=0.7)
            if not math.isnan(iv.low):
                ax.errorbar(i, iv.mean, yerr=[[iv.mean - iv.low], [iv.high - iv.mean]], color="black", capsize=3, lw=1)
        if key == "corr" and not math.isnan(reliability):
            ax.axhline(math.sqrt(max(reliability, 0.0)), color="grey", ls="--", lw=1,
                       label=f"oracle noise ceiling sqrt(reliability) = {math.sqrt(max(reliability, 0.0)):.2f}")
            ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.32), frameon=False, fontsize=8)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        ax.axhline(0, color="black", lw=0.6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def curves_plot(groups: dict[str, Sequence[str]], runs: dict[str, list[list[dict[str, Any]]]], path: str | Path, *,
                title: str, key: str = "reward", ylabel: str = "evaluation reward\n(mean over fixed episodes, 0-1)",
                shifts: Sequence[int] = ()) -> str:
    """Evaluation reward vs policy step, mean over seeds, one panel per group of arms (every
    panel repeats ``sao`` for reference; a group with no other arm run is left out), panels on
    one y scale, the legend in a panel of its own."""
    plt = _plt()
    # a panel that would only repeat the reference arm (smoke: sao alone) is left out
    drawn = {g: [a for a in arms if a in runs] for g, arms in groups.items()}
    kept = {g: arms for g, arms in drawn.items() if any(a != "sao" for a in arms)}
    if not kept:
        kept = {"all arms run": _arm_order(list(runs))}
    n = len(kept)
    fig, axes = plt.subplots(1, n + 1, figsize=(4.2 * n + 2.4, 3.8), dpi=110,
                             gridspec_kw={"width_ratios": [1] * n + [0.55]})
    arms_seen: list[str] = []
    for ax, (gname, arms) in zip(axes, kept.items()):
        if ax is not axes[0]:
            ax.sharey(axes[0])  # one scale, so the panels compare at a glance
        for arm in arms:
            xs, ys = _mean_curve(runs[arm], key)
            ax.plot(xs, ys, lw=1.8 if arm == "sao" else 1.3, **arm_style(arm))
            if arm not in arms_seen:
                arms_seen.append(arm)
        for s in shifts:
            ax.axvline(s, color="grey", ls="--", lw=0.8)
        ax.set_title(gname, fontsize=9)
        ax.set_xlabel("policy step")
        ax.set_ylabel(ylabel, fontsize=8)  # on every panel: each reads on its own
        ax.grid(alpha=0.3)
    _legend_panel(axes[-1], arms_seen, [("preference shift", {"color": "grey", "ls": "--"})] if shifts else ())
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def diagnostics_plot(histories: dict[str, list[list[dict[str, Any]]]], path: str | Path, *, title: str,
                     smooth: int = 5) -> str:
    """Per arm (mean over seeds, moving average of `smooth` iterations): policy gradient norm
    before clipping, entropy, fraction of action tokens with zero gradient (DIS-masked or
    PPO-clipped), critic explained variance. Arms without a value enter only the panels they
    have data for; their colour stays theirs; the legend is a panel of its own."""
    plt = _plt()
    panels = (("grad_norm", "gradient norm", "policy-loss gradient L2 norm, all\nparameters, before clipping at 1.0"),
              ("entropy", "entropy", "policy entropy\n(nats per action token)"),
              ("zero_grad", "tokens without gradient", "fraction of action tokens with zero\n"
                                                       "gradient (DIS-masked / clipped; 0-1)"),
              ("explained_variance", "critic fit", "critic explained variance of its\n"
                                                   "targets (1 = perfect, 0 = the mean)"))
    # a 2 x 2 grid with the legend beside it: in one row of four the 2000 x 400 figure shrank to
    # unreadable panels in a report or viewer
    fig, named = plt.subplot_mosaic([["0", "1", "legend"], ["2", "3", "legend"]], figsize=(12, 7.2), dpi=100,
                                    gridspec_kw={"width_ratios": [1, 1, 0.42]})
    axes = [named[str(i)] for i in range(len(panels))] + [named["legend"]]
    for ax, (key, name, label) in zip(axes, panels):
        for arm in _arm_order(list(histories)):
            runs = histories[arm]
            pol = [[r for r in h if r["step"] >= 0] for h in runs]
            xs, ys = _mean_curve(pol, key)
            if xs:
                ax.plot(xs, _smooth(ys, smooth), lw=1.2, **arm_style(arm))
        ax.set_title(name, fontsize=9)
        ax.set_ylabel(label, fontsize=8)
        ax.set_xlabel("policy step")
        ax.grid(alpha=0.3)
    axes[3].set_ylim(-1, 1)
    _legend_panel(axes[-1], list(histories))
    fig.suptitle(f"{title}; moving average of {smooth} iterations", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def log_ratio_plot(hists: dict[str, dict[int, list[int]]], bands: dict[str, dict[int, list[int]]],
                   edges: Sequence[float], path: str | Path, *, title: str, eps: tuple[float, float]) -> str:
    """Left: histograms (fraction of tokens per bin, log scale) of ``log pi_theta - log pi_rollout``
    by staleness level for each arm given (pooled over seeds), the DIS band edges dashed. Right:
    fraction of action tokens outside the DIS band per staleness level."""
    plt = _plt()
    # matplotlib: the plot extra, loaded only when a figure is drawn
    import matplotlib as mpl

    arms = list(hists)
    fig, axes = plt.subplots(1, len(arms) + 1, figsize=(5.2 * (len(arms) + 1), 3.9), dpi=100, layout="constrained")
    levels = sorted({lvl for h in hists.values() for lvl in h})
    cmap = mpl.colormaps["viridis"]
    centres = [edges[0] - 0.025] + [(a + b) / 2 for a, b in zip(edges, edges[1:])] + [edges[-1] + 0.025]
    for ax, arm in zip(axes, arms):
        for lvl in levels:
            h = hists[arm].get(lvl)
            if not h or not sum(h):
                continue
            tot = sum(h)
            ax.plot(centres, [c / tot for c in h], color=cmap(lvl / max(max(levels), 1)), lw=1.1)
        for x in (math.log(1 - eps[0]), math.log(1 + eps[1])):
            ax.axvline(x, color="grey", ls="--", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlim(edges[0] - 0.05, edges[-1] + 0.05)
        ax.set_xlabel("log pi_theta - log pi_rollout (nats; end bins = beyond +-2)")
        width = edges[1] - edges[0] if len(edges) > 1 else math.nan
        ax.set_ylabel(f"fraction of the level's action tokens\nper {width:g}-nat bin")
        ax.set_title(f"{arm}", fontsize=9)
    # one colour key for every histogram panel, beside them (a legend per panel sat on the curves)
    names = [f"{lvl}{'+' if lvl == max(levels) and lvl >= 8 else ''}" for lvl in levels]
    if levels:
        norm = mpl.colors.Normalize(vmin=-0.5 / max(max(levels), 1), vmax=1 + 0.5 / max(max(levels), 1))
        bar = fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=list(axes[:-1]), pad=0.01, fraction=0.02,
                           ticks=[lvl / max(max(levels), 1) for lvl in levels])
        bar.ax.set_yticklabels(names, fontsize=7)
        bar.set_label("staleness (policy versions)", fontsize=8)
    ax = axes[-1]
    for arm in arms:
        b = bands[arm]
        lv = sorted(b)
        ax.plot(lv, [(b[v][1] + b[v][2]) / max(b[v][0], 1) for v in lv], marker="o", label=arm, **arm_style(arm))
    ax.set_xlabel("staleness (policy versions)")
    ax.set_ylabel(f"fraction of action tokens outside\nthe DIS band ({1 - eps[0]:g}, {1 + eps[1]:g}) of the ratio")
    if levels and len(levels) <= 12:  # every level labelled, the last one "8+" when it pools the rest
        ax.set_xticks(levels, names)
    else:
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))
    ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    fig.suptitle(f"{title}; dashed: DIS band edges log {1 - eps[0]:g}, log {1 + eps[1]:g}", fontsize=10)
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def staleness_plot(stats: dict[str, tuple[float, float, float, float]], path: str | Path, *, title: str,
                   seeds: int = 2) -> str:
    """Mean and p95 staleness of trained action tokens per arm (mean over `seeds` seeds; whiskers =
    min / max over seeds of the p95, none for one seed). The key shows the two bar kinds in
    outline (each arm's bars carry its own colour, named under them)."""
    plt = _plt()
    # matplotlib: the plot extra, loaded only when a figure is drawn
    from matplotlib.patches import Patch

    arms = list(stats)
    # wide enough for the title and the key beside one or two arms (smoke) as for twelve
    fig, ax = plt.subplots(figsize=(max(1.0 * len(arms) + 3, 8.0), 4.4), dpi=110, layout="constrained")
    for i, a in enumerate(arms):
        mean, p95, lo, hi = stats[a]
        ax.bar(i - 0.18, mean, width=0.36, color=ARM_COLORS.get(a, "grey"))
        ax.bar(i + 0.18, p95, width=0.36, color=ARM_COLORS.get(a, "grey"), alpha=0.45, hatch="//")
        if seeds >= 2:
            ax.errorbar(i + 0.18, p95, yerr=[[p95 - lo], [hi - p95]], color="black", capsize=3, lw=1)
    ax.set_xticks(range(len(arms)))
    ax.set_xticklabels(arms, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.8, max(len(arms) - 0.2, 1.2))
    ax.set_ylabel("staleness of trained action tokens\n(policy versions behind the trainer)")
    p95_label = "p95 (whiskers: min / max over seeds)" if seeds >= 2 else "p95 (1 seed: no whiskers)"
    ax.legend(handles=[Patch(facecolor="white", edgecolor="black", label="mean: solid bar in the arm's colour"),
                       Patch(facecolor="white", edgecolor="black", hatch="//", label=f"{p95_label}:\n"
                             "hatched, lighter bar")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
    fig.suptitle(f"{title} ({seeds_note(seeds)})", fontsize=10)
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def family_shift_plot(runs: dict[str, list[list[dict[str, Any]]]], families: Sequence[str], shifts: Sequence[int],
                      path: str | Path, *, title: str) -> str:
    """Evaluation reward per difficulty family vs policy step around the reward shifts, one panel
    per family, one line per arm (mean over seeds)."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(families) + 1, figsize=(4.2 * len(families) + 2.2, 3.6), dpi=110,
                             gridspec_kw={"width_ratios": [1] * len(families) + [0.5]})
    for ax, fam in zip(axes, families):
        for arm in _arm_order(list(runs)):
            rs = runs[arm]
            flat = [[{"step": e["step"], "r": e["by_family"].get(fam, math.nan)} for e in r] for r in rs]
            xs, ys = _mean_curve(flat, "r")
            ax.plot(xs, ys, lw=1.4, **arm_style(arm))
        for s in shifts:
            ax.axvline(s, color="grey", ls="--", lw=0.8)
        ax.set_title(f"{fam} family", fontsize=9)
        ax.set_xlabel("policy step")
        ax.set_ylim(0, 1)
        ax.set_ylabel("evaluation reward (0-1)")  # every panel: the same scale, labelled where it is read
        ax.grid(alpha=0.3)
    _legend_panel(axes[-1], list(runs), [("preference shift", {"color": "grey", "ls": "--"})])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)
