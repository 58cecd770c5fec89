"""``report.md`` of a ``traj bench learning`` run (what ran, the per-claim verdicts, the per-run
table and the figures), and the generated tables of bench/LEARNING.md: the same tables, written
between ``<!-- generated:NAME -->`` / ``<!-- /generated:NAME -->`` markers, so that
``--reanalyse`` of the committed result files reproduces them exactly (tested)."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any

from trajstore.trainer.apps.learning_bench.presets import CALIBRATION_TARGET_KL, SuiteConfig
from trajstore.trainer.apps.learning_bench.stats import format_p
from trajstore.wording import plural


def _ci(iv: dict[str, Any]) -> str:
    if iv["n"] < 2 or iv["low"] is None or math.isnan(iv["low"]):
        return f"{iv['mean']:+.3f} (CI n/a, {plural(iv['n'], 'seed')})"
    return f"{iv['mean']:+.3f} [{iv['low']:+.3f}, {iv['high']:+.3f}]"


def claims_table(summary: dict[str, Any]) -> str:
    """The claims, one row each: comparison, metric, mean paired difference with its 95 %
    t-interval, p, Holm-adjusted p, verdict (markdown)."""
    lines = ["| paper claim (SAO.md) | comparison | metric | difference [95 % CI] | p | p (Holm) | verdict |",
             "|---|---|---|---|---|---|---|"]
    for c in summary["claims"]:
        iv = c["interval"]
        p = iv.get("p", math.nan)
        ph = iv.get("p_holm", math.nan)
        lines.append(f"| {c['paper']} | {c['arm']} - {c['ref']} ({c['task']}) | {c['metric']} | {_ci(iv)} | "
                     f"{format_p(math.nan if p is None else p)} | {format_p(math.nan if ph is None else ph)} | "
                     f"**{c['verdict']}** |")
    return "\n".join(lines)


def runs_table(summary: dict[str, Any]) -> str:
    """Per task and arm, means over seeds: evaluation reward at step 0 and at the end, AUC (chain)
    or post-shift AUC, median per-step KL, zero-gradient fraction, largest gradient norm,
    collapsed seeds (markdown)."""
    lines = ["| task / arm | eval reward step 0 -> last | AUC (chain) / post-shift AUC | median KL per step "
             "(nats/token) | zero-gradient fraction | max grad norm | collapsed |", "|---|---|---|---|---|---|---|"]
    for k, r in summary["runs"].items():
        task, arm = k.split("/")
        m = summary["auc"]["auc" if task == "chain" else "post-shift-auc"].get(arm, {})
        a = statistics.mean(m.values()) if m else math.nan
        collapsed = f"{r['collapsed']}/{r['seeds']}" if task == "chain" else "n/a"
        kl = "-" if r["kl_step_median"] is None or math.isnan(r["kl_step_median"]) else f"{r['kl_step_median']:.2e}"
        lines.append(f"| {k} | {r['initial_eval']:.3f} -> {r['final_eval']:.3f} | {a:.3f} | {kl} | "
                     f"{r['zero_grad']:.3f} | {r['grad_norm_max']:.2f} | {collapsed} |")
    return "\n".join(lines)


def generated_tables(summary: dict[str, Any]) -> dict[str, str]:
    """The tables bench/LEARNING.md carries between generated markers, by name."""
    if "calibration" in summary:
        return {}
    return {"claims": claims_table(summary), "runs": runs_table(summary)}


def splice(markdown: str, tables: dict[str, str], *, prefix: str = "") -> str:
    """`markdown` with the text between each ``<!-- generated:{prefix}NAME -->`` and
    ``<!-- /generated:{prefix}NAME -->`` replaced by ``tables[NAME]``.

    Raises:
        ValueError: a table has no markers in `markdown`."""
    for name, table in tables.items():
        tag = f"{prefix}{name}"
        rx = re.compile(rf"(<!-- generated:{re.escape(tag)} -->\n).*?(\n<!-- /generated:{re.escape(tag)} -->)", re.S)
        if not rx.search(markdown):
            raise ValueError(f"no <!-- generated:{tag} --> ... <!-- /generated:{tag} --> markers")
        markdown = rx.sub(lambda m, t=table: m.group(1) + t + m.group(2), markdown)
    return markdown


def extract(markdown: str, name: str) -> str | None:
    """The text between the ``generated:NAME`` markers of `markdown` (None without them)."""
    m = re.search(rf"<!-- generated:{re.escape(name)} -->\n(.*?)\n<!-- /generated:{re.escape(name)} -->", markdown,
                  re.S)
    return m.group(1) if m else None


def render_report(cfg: SuiteConfig, summary: dict[str, Any]) -> str:
    """``report.md``: what ran, the per-claim verdicts, the figures (relative links)."""
    lines = [f"# traj bench learning --preset {cfg.preset}", "",
             f"{plural(len(cfg.seeds), 'seed')}, {summary.get('seconds', 0) / 60:.1f} min. "
             f"Output: `{summary.get('out_dir')}`.", ""]
    if summary.get("machine"):
        lines += [f"Machine: {summary['machine']}.", ""]
    if "calibration" in summary:
        lines += ["| policy lr | median per-step KL (nats/token) | eval reward start -> end |", "|---|---|---|"]
        for r in summary["calibration"]:
            lines.append(f"| {r['policy_lr']:g} | {r['kl_step_median']:.2e} | {r['initial_eval']:.3f} -> "
                         f"{r['final_eval']:.3f} |")
        lines += ["", f"Interpolated lr for {CALIBRATION_TARGET_KL:g} nats/token: {summary['calibrated_lr']:.3g}", ""]
        return "\n".join(lines)
    if summary["claims"]:
        lines += [claims_table(summary), "", "| claim | why |", "|---|---|"]
        lines += [f"| {c['arm']} - {c['ref']} ({c['metric']}) | {c['reason']} |" for c in summary["claims"]]
        lines.append("")
    lines += [runs_table(summary), ""]
    for name, path in summary["figures"].items():
        lines.append(f"![{name}]({Path(path).name})")
    return "\n".join(lines) + "\n"
