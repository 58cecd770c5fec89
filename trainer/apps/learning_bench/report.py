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

from trajstore.tables import TableData
from trajstore.trainer.apps.learning_bench.claims import CLAIMS
from trajstore.trainer.apps.learning_bench.compare import comparison_table
from trajstore.trainer.apps.learning_bench.presets import CALIBRATION_TARGET_KL, SuiteConfig
from trajstore.trainer.apps.learning_bench.stats import format_p
from trajstore.trainer.apps.learning_bench.sweep import sweep_table
from trajstore.trainer.apps.learning_bench.tasks import CHAIN_TASKS
from trajstore.wording import plural


def _ci(iv: dict[str, Any]) -> str:
    if iv["n"] < 2 or iv["low"] is None or math.isnan(iv["low"]):
        return f"{iv['mean']:+.3f} (CI n/a, {plural(iv['n'], 'seed')})"
    return f"{iv['mean']:+.3f} [{iv['low']:+.3f}, {iv['high']:+.3f}]"


def _num(x: float | None, fmt: str = ".3f") -> str:
    """A number for a table cell: ``n/a`` for None / NaN, ``out of reach`` for inf."""
    if x is None or math.isnan(x):
        return "n/a"
    return "out of reach" if math.isinf(x) else f"{x:{fmt}}"


def _p(x: float | None) -> str:
    return format_p(math.nan if x is None else x)


def claims_table(summary: dict[str, Any]) -> str:
    """The claims, one row each (markdown): comparison, metric, mean paired difference with its 95 %
    t-interval and t-test p (descriptive); the sign-flip test's p and Holm-adjusted p (family A,
    which decides); the minimum detectable effect at Holm's level for the row; the paper's effect
    on the metric (signed in the paper's direction) and the Holm-adjusted p of the test against it
    (family B); the verdict (rules v3, :mod:`.verdicts`)."""
    lines = ["| paper claim (docs/sao.md) | comparison | metric | difference [95 % t-CI] | p (t) | p (sign-flip) | "
             "p (sign-flip, Holm) | MDE (80 %) | paper's effect | p vs paper's effect (Holm) | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in summary["claims"]:
        iv = c["interval"]
        t = c.get("test", {})
        eff = t.get("effect")
        want = -1 if c.get("direction", "ref-better") == "ref-better" else 1
        lines.append(f"| {c['paper']} | {c['arm']} - {c['ref']} ({c['task']}) | {c['metric']} | {_ci(iv)} | "
                     f"{_p(iv.get('p'))} | {_p(t.get('p_signflip'))} | {_p(t.get('p_holm'))} | {_num(t.get('mde'))} | "
                     f"{'none' if eff is None else f'{want * eff:+.4f}'} | {_p(t.get('p_effect_holm'))} | "
                     f"**{c['verdict']}** |")
    return "\n".join([*lines, "", verdict_counts(summary)])


def verdict_counts(summary: dict[str, Any]) -> str:
    """``Verdicts: 0 reproduced, 8 not reproduced (4 significantly opposite, 4 with the paper's
    effect ruled out), 11 inconclusive, 3 not testable, 0 undetermined.``"""
    cs = summary["claims"]
    opposite = sum(c["verdict"] == "not reproduced" and c["reason"].startswith("opposite") for c in cs)
    not_rep = sum(c["verdict"] == "not reproduced" for c in cs)
    return (f"Verdicts: {sum(c['verdict'] == 'reproduced' for c in cs)} reproduced, {not_rep} not reproduced "
            f"({opposite} significantly opposite, {not_rep - opposite} with the paper's effect ruled out), "
            f"{sum(c['verdict'] == 'inconclusive' for c in cs)} inconclusive, "
            f"{sum(c['verdict'].startswith('not testable') for c in cs)} not testable, "
            f"{sum(c['verdict'] == 'undetermined' for c in cs)} undetermined.")


def runs_table(summary: dict[str, Any]) -> str:
    """Per task and arm, means over seeds: evaluation reward at step 0 and at the end, AUC (chain)
    or post-shift AUC, median per-step KL, zero-gradient fraction, largest gradient norm,
    collapsed seeds (markdown)."""
    lines = ["| task / arm | eval reward step 0 -> last | AUC (chain) / post-shift AUC | median KL per step "
             "(nats/token) | zero-gradient fraction | max grad norm | collapsed |", "|---|---|---|---|---|---|---|"]
    for k, r in summary["runs"].items():
        task, arm = k.split("/")
        m = summary["auc"]["auc" if task in CHAIN_TASKS else "post-shift-auc"].get(arm, {})
        a = statistics.mean(m.values()) if m else math.nan
        collapsed = f"{r['collapsed']}/{r['seeds']}" if task in CHAIN_TASKS else "n/a"
        kl = "-" if r["kl_step_median"] is None or math.isnan(r["kl_step_median"]) else f"{r['kl_step_median']:.2e}"
        lines.append(f"| {k} | {r['initial_eval']:.3f} -> {r['final_eval']:.3f} | {a:.3f} | {kl} | "
                     f"{r['zero_grad']:.3f} | {r['grad_norm_max']:.2f} | {collapsed} |")
    return "\n".join(lines)


def summary_tables(cfg: SuiteConfig, summary: dict[str, Any]) -> list[TableData]:
    """What ``traj bench learning`` prints: the calibration table, or the claims with their
    difference, t-interval, Holm-adjusted sign-flip p, minimum detectable effect and verdict (one
    seed has no interval: no interval columns of NaN, and the title says why)."""
    if "sweep" in summary:
        return [sweep_table(summary["sweep"])]
    if "calibration" in summary:
        return [TableData("learning-rate calibration (SAO, seed 0)",
                          ["policy_lr", "kl_step_median", "initial_eval", "final_eval"],
                          [(r["policy_lr"], r["kl_step_median"], r["initial_eval"], r["final_eval"])
                           for r in summary["calibration"]], keys=["policy_lr"])]
    n_seeds = len(cfg.all_seeds())
    with_ci = n_seeds >= 2
    minutes = summary.get("seconds", math.nan) / 60
    cols = ["comparison", "metric", "difference", *(["ci_low", "ci_high", "p_holm", "mde"] if with_ci else []),
            "verdict"]
    rows = []
    for c in summary["claims"]:
        iv, t = c["interval"], c.get("test", {})
        more = (iv["low"], iv["high"], t.get("p_holm", math.nan), t.get("mde", math.nan)) if with_ci else ()
        rows.append((f"{c['arm']} - {c['ref']} ({c['task']})", c["metric"], iv["mean"], *more, c["verdict"]))
    title = (f"paper claims ({f'{n_seeds} paired seeds' if with_ci else f'{n_seeds} seed, CI n/a'}"
             + (f", {minutes:.1f} min)" if math.isfinite(minutes) else ")"))
    return [TableData(title, cols, rows, keys=["comparison", "metric"], wrap=["verdict"],
                      note="p_holm: the sign-flip test's, Holm-adjusted (decides); mde: minimum detectable effect "
                           "at that row's Holm level, 80 % power" if with_ci else None)]


def effects_table(summary: dict[str, Any]) -> str:
    """How each claim of the run maps to an effect the paper reports (markdown): the paper's numbers,
    its final gap in reward units and the effect tested on the claim's metric
    (:meth:`~.claims.Claim.metric_effect`)."""
    by = {c.key: c for c in CLAIMS}
    lines = ["| claim | metric | the paper's figure | final gap (reward units) | effect tested on the metric |",
             "|---|---|---|---|---|"]
    for c in summary["claims"]:
        claim = by[c["key"]]
        e = claim.metric_effect()
        fig = claim.effect.source if claim.effect else "none"
        gap = f"{claim.effect.gap:.3f}" if claim.effect else "-"
        tested = (f"{-e if claim.direction == 'ref-better' else e:+.4f}" if e is not None else
                  "none (no figure)" if claim.effect is None else "none (another metric)")
        lines.append(f"| {c['key']} | {c['metric']} | {fig} | {gap} | {tested} |")
    return "\n".join(lines)


def seeds_table(summary: dict[str, Any]) -> str:
    """The DIS and critic claims' power (markdown): paired seeds run, sd of the paired differences,
    the paper's effect on the AUC, the minimum detectable effect at this run's Holm level, and the
    seeds 80 % power needs at the paper's effect (Holm's first level of this run's family and of
    the power preset's: one column when the two families are the same size) and at the observed
    mean difference."""
    rows = summary.get("seeds", [])
    if not rows:
        return ""
    m, k = rows[0]["family"], rows[0]["power_family"]
    # A run whose family is as large as the power preset's (the power and held-out presets) has
    # one level for both: one column, not two identical ones.
    paper = ([f"seeds for the paper's effect, level 0.05/{m}", f"seeds for the paper's effect, level 0.05/{k}"]
             if m != k else [f"seeds for the paper's effect, level 0.05/{k}"])
    head = ["comparison", "seeds run", "sd of the paired differences", "paper's effect (AUC)",
            "MDE at this run's level", *paper, f"seeds for the observed mean, level 0.05/{k}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        need = [("more than 2000" if x is None else str(x)) for x in
                ((r["paper_run_family"], r["paper_power_family"]) if m != k else (r["paper_power_family"],))
                + (r["observed_power_family"],)]
        lines.append(f"| {r['comparison']} | {r['n']} | {r['sd']:.4f} | {r['effect']:.4f} | {_num(r['mde'])} | "
                     f"{' | '.join(need)} |")
    return "\n".join(lines)


def generated_tables(summary: dict[str, Any]) -> dict[str, str]:
    """The tables bench/LEARNING.md carries between generated markers, by name."""
    if "calibration" in summary:
        return {}
    out = {"claims": claims_table(summary), "runs": runs_table(summary), "effects": effects_table(summary)}
    if summary.get("seeds"):
        out["seeds"] = seeds_table(summary)
    if "comparison" in summary:
        cmp = summary["comparison"]
        out["compare"] = comparison_table(cmp, a=cmp["a"], b=cmp["b"])
    return out


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
             f"{plural(len(cfg.all_seeds()), 'seed')}, {summary.get('seconds', 0) / 60:.1f} min. "
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
    if "comparison" in summary:
        cmp = summary["comparison"]
        lines += [f"## Beside {cmp['b']}", "", comparison_table(cmp, a=cmp["a"], b=cmp["b"]), ""]
    for name, path in summary["figures"].items():
        lines.append(f"![{name}]({Path(path).name})")
    return "\n".join(lines) + "\n"
