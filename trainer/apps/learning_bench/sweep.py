"""A staleness sweep of ``traj bench learning``: the same preset at several numbers of simulated
rollout workers (more workers in flight per trainer batch: older policy versions in each batch),
one complete run directory per worker count, and a table of what changes with staleness: the
staleness of the trained tokens, the share DIS masks, and the DIS claims' differences and
verdicts (bench/LEARNING.md, "Seeds and power")."""

from __future__ import annotations

import math
from typing import Any

from trajstore.tables import TableData
from trajstore.trainer.apps.learning_bench.stats import format_p

SWEEP_CLAIMS = ("dis-vs-none", "grpo-dis-vs-none")
"""The claims whose differences the sweep tracks (those about off-policy correction)."""


def sweep_rows(points: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (worker count, tracked claim present) from each run's summary: workers, the
    sao runs' mean and p95 staleness (policy versions over trained action tokens), the share of
    their action tokens DIS masked, the claim's mean difference, sign-flip p, Holm p and verdict."""
    rows = []
    for workers, s in points:
        stale = s.get("staleness", {}).get("sao")
        for c in s["claims"]:
            if c["key"] not in SWEEP_CLAIMS:
                continue
            t = c.get("test", {})
            rows.append({"workers": workers, "claim": c["key"], "comparison": f"{c['arm']} - {c['ref']}",
                         "staleness_mean": stale[0] if stale else math.nan,
                         "staleness_p95": stale[1] if stale else math.nan,
                         "dis_masked": s.get("dis_masked_sao"), "mean": c["interval"]["mean"],
                         "n": c["interval"]["n"], "p_signflip": t.get("p_signflip", math.nan),
                         "p_holm": t.get("p_holm", math.nan), "verdict": c["verdict"], "out_dir": s.get("out_dir")})
    return rows


def sweep_table(rows: list[dict[str, Any]]) -> TableData:
    """The sweep as one table (``traj bench learning`` prints it; the report renders it too)."""
    return TableData("staleness sweep (sao's trained tokens; the DIS claims in each run)",
                     ["workers", "staleness_mean", "staleness_p95", "dis_masked", "comparison", "seeds", "difference",
                      "p_signflip", "p_holm", "verdict"],
                     [(r["workers"], r["staleness_mean"], r["staleness_p95"], r["dis_masked"], r["comparison"], r["n"],
                       r["mean"], r["p_signflip"], r["p_holm"], r["verdict"]) for r in rows],
                     keys=["workers", "comparison"], wrap=["verdict"],
                     note="workers: simulated rollout workers (the trainer takes 32 trajectories a step); staleness "
                          "in policy versions; dis_masked: share of sao's action tokens outside the DIS band")


def sweep_markdown(rows: list[dict[str, Any]]) -> str:
    """The sweep table as markdown (``sweep.md`` of the sweep's directory)."""
    lines = ["| workers | sao staleness mean / p95 | DIS masked (sao) | comparison | seeds | difference | p (sign-flip) | "
             "p (Holm) | verdict | run directory |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        masked = "n/a" if r["dis_masked"] is None else f"{r['dis_masked']:.2%}"
        lines.append(f"| {r['workers']} | {r['staleness_mean']:.2f} / {r['staleness_p95']:.2f} | {masked} | "
                     f"{r['comparison']} | {r['n']} | {r['mean']:+.3f} | {format_p(r['p_signflip'])} | "
                     f"{format_p(r['p_holm'])} | {r['verdict']} | `{r['out_dir']}` |")
    return "\n".join(lines) + "\n"


__all__ = ["SWEEP_CLAIMS", "sweep_markdown", "sweep_rows", "sweep_table"]
