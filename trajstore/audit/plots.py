"""Pictures of audit reports (matplotlib, Agg backend; the ``plot`` extra): staleness and
length histograms, reward histogram, DIS mask-rate curves. One panel per plottable report."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from trajstore.audit.reports import ClipReport, LengthReport, Report, RewardReport, StalenessReport
from trajstore.audit.views import AuditError

PLOTTABLE: tuple[type[Report], ...] = (StalenessReport, ClipReport, RewardReport, LengthReport)
"""Report types that have a picture; the others are tables only."""


def _rows(rel: Any) -> list[dict[str, Any]]:
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def _by(rows: list[dict[str, Any]], key: str) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[r[key]].append(r)
    return out


def _staleness(ax: Any, rep: StalenessReport) -> None:
    runs = _by(_rows(rep.histogram), "run_id")
    width = 0.8 / max(1, len(runs))
    for i, (run, rows) in enumerate(sorted(runs.items())):
        total = sum(r["action_tokens"] for r in rows) or 1
        ax.bar([r["staleness"] + i * width for r in rows], [r["action_tokens"] / total for r in rows],
               width=width, label=str(run))
    ax.set(title="staleness of consumed action tokens", xlabel="trainer version - policy version",
           ylabel="share of action tokens")
    if runs:
        ax.legend(title="run")


def _clip(ax: Any, rep: ClipReport) -> None:
    runs = _by(_rows(rep.by_step), "run_id")
    for run, rows in sorted(runs.items()):
        steps = [r["step"] for r in rows]
        ax.plot(steps, [r["masked_below"] for r in rows], label=f"{run}: below band")
        ax.plot(steps, [r["masked_above"] for r in rows], linestyle="--", label=f"{run}: above band")
    ax.set(title="DIS-masked share of action tokens", xlabel="step", ylabel="fraction masked")
    if runs:
        ax.legend()


def _rewards(ax: Any, rep: RewardReport) -> None:
    for source, rows in sorted(_by(_rows(rep.histogram), "source").items()):
        widths = [max(r["bin_hi"] - r["bin_lo"], 1e-9) for r in rows]
        ax.bar([r["bin_lo"] for r in rows], [r["trajectories"] for r in rows], width=widths, align="edge",
               alpha=0.6, label=str(source))
    ax.set(title="rewards", xlabel="reward", ylabel="trajectories")
    ax.legend(title="source")


def _lengths(ax: Any, rep: LengthReport) -> None:
    sources = _by(_rows(rep.histogram), "source")
    width = 0.8 / max(1, len(sources))
    labels: dict[int, str] = {}
    for i, (source, rows) in enumerate(sorted(sources.items())):
        xs = []
        for r in rows:
            x = 0 if r["action_tokens_lo"] == 0 else r["action_tokens_lo"].bit_length()
            labels[x] = f"{r['action_tokens_lo']}-{r['action_tokens_hi']}"
            xs.append(x + i * width)
        ax.bar(xs, [r["trajectories"] for r in rows], width=width, label=str(source))
    ax.set_xticks(sorted(labels), [labels[k] for k in sorted(labels)], rotation=45, ha="right")
    ax.set(title="action tokens per trajectory", xlabel="action tokens", ylabel="trajectories")
    ax.legend(title="source")


_DRAW = {StalenessReport: _staleness, ClipReport: _clip, RewardReport: _rewards, LengthReport: _lengths}


def plot_reports(reports: Mapping[str, Report], path: str | os.PathLike[str]) -> list[str]:
    """Draw one panel per plottable report into a PNG at `path`; return the panels' names.

    Raises:
        AuditError: matplotlib is missing (install the ``plot`` extra) or no report is plottable.
    """
    chosen = [(name, rep) for name, rep in reports.items() if isinstance(rep, PLOTTABLE)]
    if not chosen:
        raise AuditError("nothing to plot: --plot draws --staleness, --clip, --rewards and --lengths")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise AuditError("--plot needs matplotlib: pip install 'trajstore[plot]'") from e
    fig, axes = plt.subplots(len(chosen), 1, figsize=(8, 4 * len(chosen)), squeeze=False)
    try:
        for ax, (_, rep) in zip(axes[:, 0], chosen):
            _DRAW[type(rep)](ax, rep)
        fig.tight_layout()
        fig.savefig(os.fspath(path), dpi=100)
    finally:
        plt.close(fig)
    return [name for name, _ in chosen]
