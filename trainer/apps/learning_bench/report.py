"""``report.md`` of a ``traj bench learning`` run: what ran, the per-claim verdicts, the per-run
table and the figures."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from trajstore.trainer.apps.learning_bench.presets import CALIBRATION_TARGET_KL, SuiteConfig
from trajstore.wording import plural


def render_report(cfg: SuiteConfig, summary: dict[str, Any]) -> str:
    """``report.md``: what ran, the per-claim verdicts, the figures (relative links)."""
    lines = [f"# traj bench learning --preset {cfg.preset}", "",
             f"{plural(len(cfg.seeds), 'seed')}, {summary.get('seconds', 0) / 60:.1f} min. "
             f"Output: `{summary.get('out_dir')}`.", ""]
    if "calibration" in summary:
        lines += ["| policy lr | median per-step KL (nats/token) | eval reward start -> end |", "|---|---|---|"]
        for r in summary["calibration"]:
            lines.append(f"| {r['policy_lr']:g} | {r['kl_step_median']:.2e} | {r['initial_eval']:.3f} -> "
                         f"{r['final_eval']:.3f} |")
        lines += ["", f"Interpolated lr for {CALIBRATION_TARGET_KL:g} nats/token: {summary['calibrated_lr']:.3g}", ""]
        return "\n".join(lines)
    if summary["claims"]:
        lines += ["| claim | comparison | metric | verdict | why |", "|---|---|---|---|---|"]
        for c in summary["claims"]:
            lines.append(f"| {c['paper']} | {c['arm']} - {c['ref']} ({c['task']}) | {c['metric']} | **{c['verdict']}** "
                         f"| {c['reason']} |")
        lines.append("")
    lines += ["| task/arm | eval reward start -> end | AUC (chain) / post-shift AUC (mean over seeds) | "
              "median KL/step (nats/token) | zero-grad frac | "
              "max grad norm | collapsed seeds |", "|---|---|---|---|---|---|---|"]
    for k, r in summary["runs"].items():
        task, arm = k.split("/")
        m = summary["auc"]["auc" if task == "chain" else "post-shift-auc"].get(arm, {})
        a = statistics.mean(m.values()) if m else math.nan
        collapsed = f"{r['collapsed']}/{r['seeds']}" if task == "chain" else "n/a (shifts drop the reward)"
        lines.append(f"| {k} | {r['initial_eval']:.3f} -> {r['final_eval']:.3f} | {a:.3f} | {r['kl_step_median']:.2e} "
                     f"| {r['zero_grad']:.4f} | {r['grad_norm_max']:.2f} | {collapsed} |")
    lines.append("")
    for name, path in summary["figures"].items():
        lines.append(f"![{name}]({Path(path).name})")
    return "\n".join(lines) + "\n"
