"""Pictures of audit reports (matplotlib, Agg backend; the ``plot`` extra): staleness histogram,
DIS mask rates per step, reward and length histograms. One section per plottable report.

Readable with many groups: up to :data:`MAX_OVERLAID` runs or sources share one axes (side-by-
side bars or lines, one qualitative colour each, legend outside the data); more get one small
panel each (facets), so no two groups share a colour. Versions, steps and counts have integer
ticks; bars sit centred on their tick; an empty report says so instead of drawing empty axes.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trajstore.audit.clip import ClipReport
from trajstore.audit.distributions import LengthReport, RewardReport
from trajstore.audit.report import Report
from trajstore.audit.staleness import StalenessReport
from trajstore.audit.views import AuditError
from trajstore.extras import INSTALL_PLOT_EXTRA, require

PLOTTABLE: tuple[type[Report], ...] = (StalenessReport, ClipReport, RewardReport, LengthReport)
PLOTTED_FLAGS = ("--staleness", "--clip", "--rewards", "--lengths")
"""The ``traj stats`` report flags whose reports :data:`PLOTTABLE` draws."""


class UnsupportedPlotFormat(AuditError):
    """``--plot`` names a file whose suffix matplotlib cannot write (bad usage, not a failure)."""


def plot_suffixes() -> list[str]:
    """File suffixes matplotlib can write (``.png``, ``.pdf``, ``.svg``, ...); needs matplotlib."""
    # matplotlib: the plot extra, loaded only when a figure is drawn
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(f".{ext}" for ext in FigureCanvasBase.get_supported_filetypes())
"""Report types that have a picture; the others are tables only."""

MAX_OVERLAID: int = 6
"""At most this many groups (runs, sources) share one axes; more are drawn as facets."""
FACET_COLUMNS: int = 4
"""Facets per row."""
DISCRETE_REWARD_BINS: int = 4
"""At most this many occupied reward bins (of REWARD_BINS) are drawn as labelled categories
rather than on a continuous axis (binary 0/1 rewards would be two slivers at its ends)."""
PALETTE: str = "tab10"
"""Matplotlib's qualitative colour map for overlaid groups (10 distinct colours > MAX_OVERLAID)."""

_Rows = list[dict[str, Any]]


def _rows(rel: Any) -> _Rows:
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def _by(rows: _Rows, key: str) -> dict[str, _Rows]:
    out: dict[str, _Rows] = defaultdict(list)
    for r in rows:
        out[str(r[key])].append(r)
    return dict(sorted(out.items()))


def _colour(i: int) -> Any:
    # matplotlib: the plot extra, loaded only when a figure is drawn
    import matplotlib

    return matplotlib.colormaps[PALETTE](i % 10)


def _integer_axis(axis: Any) -> None:
    # matplotlib: the plot extra, loaded only when a figure is drawn
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _legend_outside(ax: Any, title: str) -> None:
    ax.legend(title=title, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize="small",
              title_fontsize="small", frameon=False)


def _no_data(fig: Any, title: str, why: str) -> None:
    ax = fig.subplots()
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _panels(fig: Any, groups: Sequence[str], title: str, colours: Mapping[str, int],
            sharey: bool = False) -> list[tuple[str, Any, Any]]:
    """Axes for the groups: one shared axes (<= MAX_OVERLAID groups, one colour each: from
    `colours` (group -> palette index, the same in every section) when it has them all) or one
    axes per group (facets, one colour). Returns (group, axes, colour) per group."""
    fig.suptitle(title)
    if len(groups) <= MAX_OVERLAID:
        ax = fig.subplots()
        if all(g in colours for g in groups):
            return [(g, ax, _colour(colours[g])) for g in groups]
        return [(g, ax, _colour(i)) for i, g in enumerate(groups)]
    cols = min(FACET_COLUMNS, len(groups))
    rows = math.ceil(len(groups) / cols)
    axes = fig.subplots(rows, cols, sharex=True, sharey=sharey, squeeze=False)
    for k in range(len(groups), rows * cols):
        axes[k // cols][k % cols].set_visible(False)
        # the panel above the hole is the bottom one of its column: it carries the x labels
        axes[k // cols - 1][k % cols].tick_params(labelbottom=True)
    out = []
    for k, g in enumerate(groups):
        a = axes[k // cols][k % cols]
        a.set_title(g, fontsize="small")
        a.tick_params(labelsize="small")
        out.append((g, a, _colour(0)))
    return out


def _finish(panels: list[tuple[str, Any, Any]], xlabel: str, ylabel: str, legend: str) -> list[Any]:
    """Axis labels (on the one axes; for facets: x once below the grid, which shares x, and y on
    the first panel of every row, whose scale is its own) and the legend outside the data."""
    axes = list(dict.fromkeys(ax for _, ax, _ in panels))
    if len(axes) == 1:
        axes[0].set(xlabel=xlabel, ylabel=ylabel)
        if len(panels) > 1:
            _legend_outside(axes[0], legend)
    else:
        fig = axes[0].get_figure()
        fig.supxlabel(xlabel, fontsize="small")
        # one label for the whole grid sat beside the middle row only, and read as belonging to it
        for ax in axes[::FACET_COLUMNS]:
            ax.set_ylabel(ylabel, fontsize="small")
    for ax in axes:
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    return axes


def _bars(panels: list[tuple[str, Any, Any]], series: Mapping[str, Mapping[Any, float]], centres: Sequence[float],
          width: float, keys: Sequence[Any]) -> None:
    """Bars per group, one per key at `centres` (same order): side by side and centred on the
    key's position when groups share an axes, full width in facets."""
    shared = len({id(ax) for _, ax, _ in panels}) == 1 and len(panels) > 1
    w = 0.8 * width / len(panels) if shared else 0.8 * width
    for i, (g, ax, colour) in enumerate(panels):
        offset = (i - (len(panels) - 1) / 2) * w if shared else 0.0
        ax.bar([c + offset for c in centres], [series[g].get(k, 0) for k in keys], width=w, color=colour, label=g)


def _category_axis(axes: Sequence[Any], positions: Sequence[int], labels: Sequence[str] | None) -> None:
    """Ticks at every integer position (labelled) when there are few, else integer ticks."""
    for ax in axes:
        if len(positions) <= 25:
            ax.set_xticks(list(positions), list(labels) if labels else [str(p) for p in positions])
            if labels and len(positions) > 6:
                for t in ax.get_xticklabels():
                    t.set(rotation=45, ha="right", rotation_mode="anchor")
        else:
            _integer_axis(ax.xaxis)
        ax.set_xlim(min(positions) - 0.6, max(positions) + 0.6)


# -- one section per report --------------------------------------------------------------------


def _staleness(fig: Any, rep: StalenessReport, colours: Mapping[str, int]) -> None:
    title = "staleness of consumed action tokens"
    runs = _by(_rows(rep.histogram), "run_id")
    if not runs:
        if _rows(rep.by_run):
            return _no_data(fig, title, "the consumed trajectories' action tokens carry no policy version "
                                        "(text-only logs): staleness is undefined")
        return _no_data(fig, title, "no training run consumed the selected trajectories")
    values = [r["staleness"] for rows in runs.values() for r in rows]
    positions = list(range(min(values), max(values) + 1))
    series = {}
    for run, rows in runs.items():
        total = sum(r["action_tokens"] for r in rows) or 1
        series[run] = {r["staleness"]: r["action_tokens"] / total for r in rows}
    panels = _panels(fig, list(runs), title, colours, sharey=True)
    _bars(panels, series, positions, 1.0, positions)
    axes = _finish(panels, "staleness (trainer version - policy version)", "share of the run's action tokens", "run")
    _category_axis(axes, positions, None)
    for ax in axes:
        ax.set_ylim(0, 1.05 * max(max(v.values()) for v in series.values()))


def _clip(fig: Any, rep: ClipReport, colours: Mapping[str, int]) -> None:
    title = "DIS-masked share of action tokens per step"
    runs = _by(_rows(rep.by_step), "run_id")
    if not runs:
        return _no_data(fig, title, "no training run consumed the selected trajectories")
    panels = _panels(fig, list(runs), title, colours, sharey=True)
    top = 0.0
    for run, ax, colour in panels:
        rows = [r for r in runs[run] if r["masked_below"] is not None]
        steps = [r["step"] for r in rows]
        below = [r["masked_below"] for r in rows]
        above = [r["masked_above"] for r in rows]
        top = max([top, *below, *above])
        ax.plot(steps, below, color=colour, marker="o", markersize=3, label=f"{run}: below band (ratio <= 1 - eps_low)")
        ax.plot(steps, above, color=colour, marker="^", markersize=3, linestyle="--",
                label=f"{run}: above band (ratio >= 1 + eps_high)")
    axes = _finish(panels, "step", "share of action tokens masked", "run")
    # one key for the line styles (and, on shared axes, one entry per run's colour): never one
    # entry per run x band, and always beside the data
    from matplotlib.lines import Line2D

    # in the colour of the lines when they all have one (facets, a single run); neutral grey only
    # beside several run colours, where these entries name line styles, not runs
    one = {tuple(c) if not isinstance(c, str) else c for _, _, c in panels}
    style = {"color": panels[0][2] if len(one) == 1 else "0.3", "markersize": 3}
    handles = [Line2D([], [], marker="o", **style), Line2D([], [], marker="^", linestyle="--", **style)]
    labels = ["below band\n(ratio <= 1 - eps_low)", "above band\n(ratio >= 1 + eps_high)"]
    if len(axes) > 1:  # facets: beside the grid, never over a panel
        fig.legend(handles, labels, loc="outside right upper", fontsize="small", frameon=False)
    else:
        if len(panels) > 1:
            handles = [Line2D([], [], color=c) for _, _, c in panels] + handles
            labels = [f"run {g}" for g, _, _ in panels] + labels
        axes[0].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                       fontsize="small", frameon=False)
    top = 1.0 if top == 0 else min(1.05, top * 1.15)
    all_steps = [r["step"] for rows in runs.values() for r in rows if r["masked_below"] is not None]
    for ax in axes:
        _integer_axis(ax.xaxis)
        if all_steps:  # steps are whole numbers: a one-step run is one tick, not -0.04 .. 0.04
            lo, hi = min(all_steps), max(all_steps)
            pad = max(0.5, 0.03 * (hi - lo))
            ax.set_xlim(lo - pad, hi + pad)
            if hi - lo < 6:
                ax.set_xticks(range(lo, hi + 1))
        ax.set_ylim(-0.02 * top, top)  # a share of 0 stays visible above the axis
        if not any(line.get_ydata().any() for line in ax.get_lines()):
            ax.text(0.5, 0.5, "no action token\nwas masked", ha="center", va="center", transform=ax.transAxes,
                    color="0.4")


def _rewards(fig: Any, rep: RewardReport, colours: Mapping[str, int]) -> None:
    title = "rewards"
    sources = _by(_rows(rep.histogram), "source")
    if not sources:
        return _no_data(fig, title, "no selected trajectory has a reward")
    first = next(iter(sources.values()))[0]
    lo, hi = min(r["bin_lo"] for rows in sources.values() for r in rows), max(
        r["bin_hi"] for rows in sources.values() for r in rows)
    step = (first["bin_hi"] - first["bin_lo"]) or 1.0  # equal-width bins; one bin when all rewards are equal
    keys = sorted({r["bin"] for rows in sources.values() for r in rows})
    series = {s: {r["bin"]: r["trajectories"] for r in rows} for s, rows in sources.items()}
    panels = _panels(fig, list(sources), title, colours)
    if hi > lo and len(keys) <= DISCRETE_REWARD_BINS:
        # a few distinct rewards (0/1, a handful of scores) in equal-width bins would be slivers at
        # the ends of a long empty axis: one labelled category per occupied bin instead
        _bars(panels, series, list(range(len(keys))), 1.0, keys)
        axes = _finish(panels, "reward (occupied bins)", "trajectories (count)", "source")
        edges = {r["bin"]: (r["bin_lo"], r["bin_hi"]) for rows in sources.values() for r in rows}
        _category_axis(axes, list(range(len(keys))), [f"{edges[b][0]:.3g} to {edges[b][1]:.3g}" for b in keys])
    else:
        centres = [lo + (b + 0.5) * step if hi > lo else lo for b in keys]
        _bars(panels, series, centres, step, keys)
        axes = _finish(panels, "reward", "trajectories (count)", "source")
        for ax in axes:
            ax.set_xlim(lo - 0.02 * (hi - lo), hi + 0.02 * (hi - lo)) if hi > lo else ax.set_xlim(lo - 1, lo + 1)
    for ax in axes:
        _integer_axis(ax.yaxis)


def _lengths(fig: Any, rep: LengthReport, colours: Mapping[str, int]) -> None:
    title = "action tokens per trajectory"
    sources = _by(_rows(rep.histogram), "source")
    if not sources:
        return _no_data(fig, title, "no trajectories selected")

    def index(lo: int) -> int:  # power-of-two bins: 0, 1, 2-3, 4-7, ... -> 0, 1, 2, 3, ...
        return 0 if lo == 0 else lo.bit_length()

    found = [index(r["action_tokens_lo"]) for rows in sources.values() for r in rows]
    positions = list(range(min(found), max(found) + 1))
    labels = ["0" if k == 0 else "1" if k == 1 else f"{_compact(2 ** (k - 1))}-{_compact(2 ** k - 1)}"
              for k in positions]
    series = {s: {index(r["action_tokens_lo"]): r["trajectories"] for r in rows} for s, rows in sources.items()}
    panels = _panels(fig, list(sources), title, colours)
    _bars(panels, series, positions, 1.0, positions)
    axes = _finish(panels, "action tokens (power-of-two bins)", "trajectories (count)", "source")
    _category_axis(axes, positions, labels)
    for ax in axes:
        _integer_axis(ax.yaxis)


def _compact(n: int) -> str:
    """A token count for a tick label: 511, 1k, 16k, 1M (rounded; bins are powers of two)."""
    for div, unit in ((2**20, "M"), (2**10, "k")):
        if n >= div - 1 and n >= 1023:
            return f"{round(n / div)}{unit}"
    return str(n)


_DRAW: dict[type[Report], Callable[[Any, Any, Mapping[str, int]], None]] = {
    StalenessReport: _staleness, ClipReport: _clip, RewardReport: _rewards, LengthReport: _lengths}


def _groups(rep: Report) -> tuple[str, set[str]]:
    """("run_id" or "source", the runs or sources the report's picture shows)."""
    rel, key = {StalenessReport: ("histogram", "run_id"), ClipReport: ("by_step", "run_id"),
                RewardReport: ("histogram", "source"), LengthReport: ("histogram", "source")}[type(rep)]
    return key, {str(r[0]) for r in getattr(rep, rel).select(key).fetchall()}


def require_matplotlib() -> None:
    """Raise a one-line MissingExtraError naming the ``plot`` extra when matplotlib is missing."""
    require(("matplotlib",), what="--plot", install=INSTALL_PLOT_EXTRA)


def draw_reports(reports: Mapping[str, Report]) -> Any:
    """A matplotlib Figure with one section per plottable report (in the given order).

    Raises:
        MissingExtraError: matplotlib is missing (install the ``plot`` extra).
        AuditError: no report is plottable.
    """
    chosen = [rep for rep in reports.values() if isinstance(rep, PLOTTABLE)]
    if not chosen:
        raise AuditError("nothing to plot: --plot draws --staleness, --clip, --rewards and --lengths")
    require_matplotlib()
    # matplotlib: the plot extra, loaded only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    # matplotlib: the plot extra, loaded only when a figure is drawn
    from matplotlib.figure import Figure

    heights = []
    universe: dict[str, set[str]] = {}
    for rep in chosen:
        key, names = _groups(rep)
        universe.setdefault(key, set()).update(names)
        heights.append(1.2 if not names else 4.0 if len(names) <= MAX_OVERLAID else
                       0.8 + 2.0 * math.ceil(len(names) / FACET_COLUMNS))  # an empty report: one line
    colours: dict[str, int] = {}  # a run or source keeps its colour in every section
    for names in universe.values():
        if len(names) <= 10:  # the palette's distinct colours
            colours.update({n: i for i, n in enumerate(sorted(names))})
    fig = Figure(figsize=(11, sum(heights)), layout="constrained")  # no pyplot: nothing global to close
    subfigs = fig.subfigures(len(chosen), 1, height_ratios=heights, squeeze=False)[:, 0]
    for sf, rep in zip(subfigs, chosen):
        _DRAW[type(rep)](sf, rep, colours)
    return fig


def plot_reports(reports: Mapping[str, Report], path: str | os.PathLike[str]) -> list[str]:
    """Draw one section per plottable report (:func:`draw_reports`) into a PNG at `path`;
    return the drawn reports' names, ``"<name> (no data)"`` for a section that only says why it
    is empty (the CLI's "wrote p.png (staleness, clip, ...)" named empty panels as drawn).

    Raises:
        MissingExtraError: matplotlib is missing (install the ``plot`` extra).
        AuditError: no report is plottable.
    """
    fig = draw_reports(reports)
    try:
        fig.savefig(os.fspath(path), dpi=100)
    except OSError as e:
        raise AuditError(f"cannot write the plot {os.fspath(path)}: {e.strerror or e}") from None
    return [name if _groups(rep)[1] else f"{name} (no data)" for name, rep in reports.items()
            if isinstance(rep, PLOTTABLE)]


def plot_destination(path: str | os.PathLike[str]) -> str:
    """The file ``--plot PATH`` writes (a directory gets ``traj-stats.png`` inside it; a name
    without a suffix gets ``.png``), checked writable before any report is computed.

    Raises:
        UnsupportedPlotFormat: its suffix is not one matplotlib writes (:func:`plot_suffixes`).
        AuditError: the name is empty, or its folder is missing, is not a folder, or the file
            cannot be opened for writing (tried, then removed again if it did not exist).
    """
    p = os.fspath(path)
    if not p.strip():
        raise AuditError("cannot write the plot: the file name is empty")
    out = os.path.join(p, "traj-stats.png") if os.path.isdir(p) else (p if os.path.splitext(p)[1] else p + ".png")
    suffix = os.path.splitext(out)[1].lower()
    if suffix not in (supported := plot_suffixes()):
        raise UnsupportedPlotFormat(f"cannot draw a plot as {suffix!r} ({out}): use one of {', '.join(supported)}")
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        why = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise AuditError(f"cannot write the plot {out}: {folder} {why}")
    existed = os.path.exists(out)
    try:  # really open it (os.access says yes to root even on /proc): append, so nothing is changed yet
        with open(out, "ab"):
            pass
    except OSError as e:
        raise AuditError(f"cannot write the plot {out}: {e.strerror or e}") from None
    if not existed:
        os.remove(out)
    return out
