"""Two runs of the same preset side by side (e.g. the same commit on two machines, where float
results differ from the first step): per claim, each run's mean difference, direction,
Holm-adjusted sign-flip p and verdict, whether the directions and the significant results
agree, and the correlation of the two runs' per-seed differences; and the counts behind any
sentence about how far the runs agree (bench/LEARNING.md, "Time on idle cores")."""

from __future__ import annotations

import math
import statistics
from typing import Any

from trajstore.trainer.apps.learning_bench.stats import ALPHA, format_p

TRAINING_METRICS = ("auc", "post-shift-auc")
"""Metrics of the training runs (their per-seed values differ between machines from the first step)."""
QUALITY_METRICS = ("corr", "cos")
"""Metrics of the advantage-quality study (on the warm-start policy, no RL)."""


def _direction(mean: float) -> str:
    return "+" if mean > 0 else "-" if mean < 0 else "0"


def _significant(c: dict[str, Any]) -> bool:
    p = c.get("test", {}).get("p_holm", math.nan)
    return p is not None and not math.isnan(p) and p < ALPHA


def _pearson(x: list[float], y: list[float]) -> float:
    """Pearson's r of the two runs' per-seed differences (NaN with < 3 pairs or no spread)."""
    if len(x) < 3:
        return math.nan
    try:
        return statistics.correlation(x, y)
    except statistics.StatisticsError:
        return math.nan


def compare_runs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The claims of two run summaries (``summary.json`` of ``traj bench learning``), matched by
    claim key and metric.

    Returns:
        ``rows``: per claim in `a`'s order, ``key``, ``metric``, ``comparison``, ``mean`` /
        ``direction`` / ``p_holm`` / ``verdict`` per run (``a``, ``b``), ``same_label``,
        ``same_direction``, ``significant`` (``both`` in the same direction, ``opposite`` ways,
        ``a only``, ``b only`` or ``neither``), ``r`` (per-seed correlation of the paired
        differences, seeds both ran); and ``counts``: claims compared, same label, same
        direction, significant in both the same way, in one run only, in opposite directions, and
        the range of ``r`` over the training-run metrics and over the advantage-quality ones.
    """
    by_b = {(c["key"], c["metric"]): c for c in b["claims"]}
    rows = []
    for ca in a["claims"]:
        cb = by_b.get((ca["key"], ca["metric"]))
        if cb is None:
            continue
        ma, mb = ca["interval"]["mean"], cb["interval"]["mean"]
        sa, sb = _significant(ca), _significant(cb)
        da, db = _direction(ma), _direction(mb)
        sig = ("both" if da == db else "opposite") if sa and sb else "a only" if sa else "b only" if sb else "neither"
        n = min(len(ca["interval"]["diffs"]), len(cb["interval"]["diffs"]))
        rows.append({"key": ca["key"], "metric": ca["metric"], "comparison": f"{ca['arm']} - {ca['ref']} ({ca['task']})",
                     "a": {"mean": ma, "direction": da, "p_holm": ca.get("test", {}).get("p_holm", math.nan),
                           "verdict": ca["verdict"]},
                     "b": {"mean": mb, "direction": db, "p_holm": cb.get("test", {}).get("p_holm", math.nan),
                           "verdict": cb["verdict"]},
                     "same_label": ca["verdict"] == cb["verdict"], "same_direction": da == db, "significant": sig,
                     "r": _pearson(ca["interval"]["diffs"][:n], cb["interval"]["diffs"][:n])})
    def r_range(metrics: tuple[str, ...]) -> tuple[float, float]:
        rs = [r["r"] for r in rows if r["metric"] in metrics and not math.isnan(r["r"])]
        return (min(rs), max(rs)) if rs else (math.nan, math.nan)

    counts = {"claims": len(rows), "same_label": sum(r["same_label"] for r in rows),
              "same_direction": sum(r["same_direction"] for r in rows),
              "significant_both": sum(r["significant"] == "both" for r in rows),
              "significant_a_only": sum(r["significant"] == "a only" for r in rows),
              "significant_b_only": sum(r["significant"] == "b only" for r in rows),
              "significant_opposite": sum(r["significant"] == "opposite" for r in rows),
              "significant_a": sum(r["significant"] in ("both", "opposite", "a only") for r in rows),
              "significant_b": sum(r["significant"] in ("both", "opposite", "b only") for r in rows),
              "r_training": r_range(TRAINING_METRICS), "r_quality": r_range(QUALITY_METRICS)}
    return {"rows": rows, "counts": counts}


def comparison_table(cmp: dict[str, Any], *, a: str, b: str) -> str:
    """The comparison as markdown: one row per claim, then a sentence with the counts, every
    number computed from the two runs' committed result files."""
    lines = [f"| comparison | metric | {a}: difference, Holm p (sign-flip), verdict | {b}: difference, Holm p "
             "(sign-flip), verdict | same direction | significant (Holm < 0.05) | per-seed r |",
             "|---|---|---|---|---|---|---|"]
    for r in cmp["rows"]:
        cells = [f"{x['mean']:+.3f}, {format_p(math.nan if x['p_holm'] is None else x['p_holm'])}, {x['verdict']}"
                 for x in (r["a"], r["b"])]
        rr = "n/a" if math.isnan(r["r"]) else f"{r['r']:+.2f}"
        lines.append(f"| {r['comparison']} | {r['metric']} | {cells[0]} | {cells[1]} | "
                     f"{'yes' if r['same_direction'] else '**no**'} | {r['significant']} | {rr} |")
    c = cmp["counts"]
    lines += ["", f"{c['claims']} claims in both runs: the same verdict label on {c['same_label']}, the same direction "
              f"of the mean difference on {c['same_direction']}; significant after Holm in {a} {c['significant_a']}, "
              f"in {b} {c['significant_b']}; in both the same way {c['significant_both']}, in opposite ways "
              f"{c['significant_opposite']}, in {a} only {c['significant_a_only']}, in {b} only "
              f"{c['significant_b_only']}. Per-seed differences of the two runs correlate with r "
              f"{c['r_training'][0]:+.2f} to {c['r_training'][1]:+.2f} on the training runs' metrics (auc, "
              f"post-shift-auc) and {c['r_quality'][0]:+.2f} to {c['r_quality'][1]:+.2f} on the advantage-quality "
              "study's (corr, cos)."]
    return "\n".join(lines)


__all__ = ["compare_runs", "comparison_table"]
