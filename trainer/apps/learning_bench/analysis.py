"""The analysis of a finished ``traj bench learning`` run: areas under the evaluation curves,
advantage quality, the pre-registered claims' verdicts, the figures and the per-run table."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from trajstore.trainer.apps.envs import FAMILIES
from trajstore.trainer.apps.learning_bench import plots
from trajstore.trainer.apps.learning_bench.arms import ARMS, DIS_BAND
from trajstore.trainer.apps.learning_bench.claims import CLAIMS
from trajstore.trainer.apps.learning_bench.power import seeds_needed
from trajstore.trainer.apps.learning_bench.presets import (
    CALIBRATION_TARGET_KL,
    POWER_SEEDS,
    SHIFT_STYLES,
    SuiteConfig,
    power_family,
)
from trajstore.trainer.apps.learning_bench.stats import ALPHA, Interval, auc, paired, t_interval
from trajstore.trainer.apps.learning_bench.tasks import CHAIN_TASKS
from trajstore.trainer.apps.learning_bench.trainer_side import LOG_RATIO_EDGES
from trajstore.trainer.apps.learning_bench.verdicts import Decision, decide, discriminates


def _iv(iv: Interval) -> dict[str, Any]:
    return {"mean": iv.mean, "low": iv.low, "high": iv.high, "n": iv.n, "diffs": list(iv.diffs), "p": iv.p}


def _test(d: Decision) -> dict[str, Any]:
    """The numbers of a claim's test (:class:`~.verdicts.Decision`, NaN where a rule stopped first)."""
    return {"p_signflip": d.p_signflip, "p_holm": d.p_holm, "level": d.level, "sd": d.sd, "mde": d.mde,
            "effect": d.effect, "p_effect": d.p_effect, "p_effect_holm": d.p_effect_holm}


class _NoFigures:
    """:mod:`.plots` with every ``*_plot`` a no-op returning None (``analyse(figures=False)``)."""

    def __getattr__(self, name: str) -> Any:
        return (lambda *_a, **_k: None) if name.endswith("_plot") else getattr(plots, name)


def analyse(cfg: SuiteConfig, done: dict[str, Any], out: Path, *, figures: bool = True) -> dict[str, Any]:
    """Statistics, verdicts and (unless `figures` is False) figures from the finished jobs (see
    :mod:`.stats`, :mod:`.plots`)."""

    figs: Any = plots if figures else _NoFigures()

    # by name, not in the order the workers finished: a fresh run and --reanalyse of its directory
    # must give the same figures (the quality bars' intervals once depended on completion order)
    done = dict(sorted(done.items()))
    n_seeds = len(cfg.all_seeds())
    of_seeds = figs.seeds_note(n_seeds)  # "mean over 5 seeds" / "1 seed"
    runs = [d for k, d in done.items() if not k.startswith("quality-")]
    summary: dict[str, Any] = {"figures": {}, "claims": [], "auc": {}, "quality": {}}
    if cfg.calibrate_lrs:
        return _calibration(cfg, runs, summary)
    by: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for d in runs:
        sp = d["spec"]
        # the chain arms' task, mod 10 or mod 100 (cfg.chain_task), is "chain" from here on
        kind = "chain" if sp["task"] in CHAIN_TASKS else sp["task"]
        by.setdefault((kind, sp["arm"]), {})[sp["seed"]] = d
    # areas under the evaluation curves
    metric: dict[str, dict[str, dict[int, float]]] = {"auc": {}, "post-shift-auc": {}}
    # each metric's signal per arm and seed: the change the metric is about (stats.discriminates)
    signal: dict[str, dict[str, dict[int, float]]] = {"auc": {}, "post-shift-auc": {}}
    for (task, arm), seeds in by.items():
        for s, d in seeds.items():
            if task == "chain":
                metric["auc"].setdefault(arm, {})[s] = auc(d["evals"])
                signal["auc"].setdefault(arm, {})[s] = d["evals"][-1]["reward"] - d["evals"][0]["reward"]
            else:
                steps = cfg.shift_stage_steps * len(SHIFT_STYLES)
                stages = [_stage_evals(d["evals"], sh, cfg.shift_stage_steps, steps) for sh in cfg.shifts()]
                vals = [auc(st) for st in stages]
                metric["post-shift-auc"].setdefault(arm, {})[s] = sum(vals) / len(vals)
                rec = [st[-1]["reward"] - st[0]["reward"] if len(st) >= 2 else math.nan for st in stages]
                signal["post-shift-auc"].setdefault(arm, {})[s] = sum(rec) / len(rec)
    summary["auc"] = {m: {a: v for a, v in vals.items()} for m, vals in metric.items()}
    # advantage quality
    quality = [d for k, d in done.items() if k.startswith("quality-")]
    if quality:
        first = quality[0]["checkpoints"]
        for ci, cp in enumerate(first):
            n = cp["critic_iterations"]
            per: dict[str, dict[str, dict[int, float]]] = {"corr": {}, "cos": {}}
            for q in quality:
                for est, v in q["checkpoints"][ci]["estimators"].items():
                    for k in ("corr", "cos"):
                        per[k].setdefault(est, {})[q["seed"]] = v[k]
            rel = statistics.mean(q["checkpoints"][ci]["reliability"] for q in quality)
            ev = statistics.mean(q["checkpoints"][ci]["explained_variance"] for q in quality)
            summary["quality"][str(n)] = {"reliability": rel, "explained_variance": ev,
                                          "values": per, "tokens": quality[0]["tokens"]}
            order = [a for a in ARMS if a in per["corr"]]
            bars = {e: {k: t_interval([per[k][e][s] for s in sorted(per[k][e])]) for k in ("corr", "cos")}
                    for e in order}
            summary["figures"][f"quality-{n}"] = figs.quality_plot(
                bars, rel, out / f"advantage-quality-{n}.png",
                title=f"advantage quality vs the Monte-Carlo oracle A* (fixed warm-start policy, critics after {n} "
                      f"critic iterations; {figs.seeds_note(len(quality))}, {figs.ci_note(len(quality))})")
        metric["corr"] = summary["quality"][str(first[0]["critic_iterations"])]["values"]["corr"]
        metric["cos"] = summary["quality"][str(first[0]["critic_iterations"])]["values"]["cos"]
        signal["corr"], signal["cos"] = metric["corr"], metric["cos"]
    # DIS masked fraction in the sao runs (testability of the DIS claims)
    sao_band = [d["band"] for (task, arm), seeds in by.items() if arm == "sao" and task == "chain"
                for d in seeds.values()]
    tot = sum(v[0] for b in sao_band for v in b.values())
    dis_masked = sum(v[1] + v[2] for b in sao_band for v in b.values()) / tot if tot else None
    summary["dis_masked_sao"] = dis_masked
    # claims: the verdict rules (verdicts.decide)
    items = []
    for c in CLAIMS:
        vals = metric.get(c.metric, {})
        if c.arm not in vals or c.ref not in vals:
            continue
        sig = signal.get(c.metric, {})
        sig_iv = {a: t_interval([sig.get(a, {})[k] for k in sorted(sig.get(a, {}))]) for a in (c.arm, c.ref)}
        items.append((c, paired(vals, c.arm, c.ref), discriminates(sig_iv[c.arm], sig_iv[c.ref]), sig_iv))
    decided = decide([(c, iv, t) for c, iv, t, _ in items], dis_masked=dis_masked)
    for (c, _, t, sig_iv), d in zip(items, decided):
        summary["claims"].append({"key": c.key, "paper": c.paper,
                                  "task": cfg.chain_task if c.task == "chain" else c.task, "metric": c.metric, "arm": c.arm,
                                  "ref": c.ref, "direction": c.direction, "interval": _iv(d.interval), "test": _test(d), "verdict": d.verdict,
                                  "reason": d.reason, "testable": t, "effect_source": c.effect.source if c.effect
                                  else None, "signal": {a: _iv(x) for a, x in sig_iv.items()}})
    summary["seeds"] = _seeds_needed(summary["claims"])
    by_claim = {(d["arm"], d["ref"], d["metric"]): d for d in summary["claims"]}
    # forest plots: every arm against sao (and grpo-no-dis against grpo-dis), 95 % t-intervals;
    # the verdict shown is the claim's (with Holm) where the comparison is a claim
    for metric_name, unit, title in (
            ("auc", "paired difference in AUC of the evaluation reward (reward units), arm - reference",
             "chain task: area under the evaluation-reward curve, difference to sao"),
            ("post-shift-auc", "paired difference in post-shift AUC (reward units), arm - reference",
             "pref-shift task: evaluation reward after each preference shift, difference to sao")):
        vals = metric.get(metric_name, {})
        rows = []
        pairs = [(arm, ARMS[arm].reference) for arm in ARMS if arm != "sao"] + [("grpo-no-dis", "grpo-dis")]
        for arm, ref in pairs:
            if arm not in vals or ref not in vals:
                continue
            iv = paired(vals, arm, ref)
            claim = by_claim.get((arm, ref, metric_name))
            rows.append({"label": f"{arm} - {ref}", "mean": iv.mean, "low": iv.low, "high": iv.high,
                         "verdict": claim["verdict"] if claim else "no paper claim", "unit": unit})
        if rows:
            summary["figures"][f"forest-{metric_name}"] = figs.forest_plot(
                rows, out / f"forest-{metric_name}.png",
                title=f"{title} ({n_seeds} paired seed{'s' if n_seeds != 1 else ''}, {figs.ci_note(n_seeds)})")
    # curves and diagnostics
    evals = {task: {arm: [d["evals"] for d in seeds.values()] for (t, arm), seeds in by.items() if t == task}
             for task in ("chain", "pref-shift")}
    hist = {task: {arm: [d["history"] for d in seeds.values()] for (t, arm), seeds in by.items() if t == task}
            for task in ("chain", "pref-shift")}
    groups = {"critic vs baselines": ["sao", "sao-k1", "full-critic", "running-mean-8", "running-mean-128",
                                      "running-mean-family", "moe-critic", "moe-full-critic"],
              "off-policy correction": ["sao", "ppo-clip", "no-correction", "no-correction-small-step", "grpo-dis",
                                        "grpo-no-dis"],
              "GAE variants": ["sao", "gae-turn-last", "gae-turn-avg", "gae-turn-last-h", "gae-turn-avg-h",
                               "gae-no-skip"]}
    if evals["chain"]:
        summary["figures"]["curves-chain"] = figs.curves_plot(
            groups, evals["chain"], out / "curves-chain.png",
            title=f"chain task: evaluation reward ({3 * cfg.eval_per_family} fixed episodes, {of_seeds})")
        summary["figures"]["diagnostics-chain"] = figs.diagnostics_plot(
            hist["chain"], out / "diagnostics-chain.png", title=f"chain task: training diagnostics ({of_seeds})")
        lr_arms = [a for a in ("sao", "no-correction", "grpo-dis") if a in evals["chain"]]
        hists = {a: _merge_hist([d["log_ratio_hist"] for d in by[("chain", a)].values()]) for a in lr_arms}
        bands = {a: _merge_hist([d["band"] for d in by[("chain", a)].values()]) for a in lr_arms}
        summary["figures"]["log-ratio"] = figs.log_ratio_plot(
            hists, bands, LOG_RATIO_EDGES, out / "log-ratio-by-staleness.png", eps=DIS_BAND,
            title=f"log-ratio at the policy update by staleness (engine: bf16, logit noise sd {cfg.logit_noise:g})")
        stal = {}
        for arm in ARMS:
            if arm in hist["chain"]:
                rs = [[r for r in h if r["step"] >= 0] for h in hist["chain"][arm]]
                means = [statistics.mean(r["staleness_mean"] for r in h) for h in rs]
                p95s = [statistics.mean(r["staleness_p95"] for r in h) for h in rs]
                stal[arm] = (statistics.mean(means), statistics.mean(p95s), min(p95s), max(p95s))
        summary["staleness"] = stal
        summary["figures"]["staleness"] = figs.staleness_plot(
            stal, out / "staleness.png", seeds=n_seeds, title=staleness_title(list(stal)))
    if evals["pref-shift"]:
        summary["figures"]["curves-shift"] = figs.curves_plot(
            {"critic vs running means": list(evals["pref-shift"])}, evals["pref-shift"], out / "curves-shift.png",
            title=f"pref-shift task: evaluation reward under the preference in force ({of_seeds})",
            shifts=cfg.shifts())
        summary["figures"]["families-shift"] = figs.family_shift_plot(
            evals["pref-shift"], FAMILIES, cfg.shifts(), out / "families-shift.png",
            title=f"pref-shift task: evaluation reward per difficulty family around each shift ({of_seeds})")
    summary["runs"] = {f"{cfg.chain_task if t == 'chain' else t}/{a}": {"seconds": [d["seconds"] for d in s.values()],
                                    "final_eval": statistics.mean(d["evals"][-1]["reward"] for d in s.values()),
                                    "initial_eval": statistics.mean(d["evals"][0]["reward"] for d in s.values()),
                                    "kl_step_median": _median_kl([d["history"] for d in s.values()]),
                                    "zero_grad": _mean_key([d["history"] for d in s.values()], "zero_grad"),
                                    "grad_norm_max": _max_key([d["history"] for d in s.values()], "grad_norm"),
                                    "collapsed": sum(_collapsed(d["evals"]) for d in s.values()),
                                    "seeds": len(s)}
                       for (t, a), s in sorted(by.items(), key=lambda kv: (kv[0][0] != "chain", list(ARMS).index(
                           kv[0][1])))}
    summary["figures"] = {k: v for k, v in summary["figures"].items() if v}
    return summary


def _seeds_needed(claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For the power preset's claims (:data:`~.presets.POWER_SEEDS`) that reached a test: the paired
    seeds for 80 % power at the paper's effect (at Holm's first level of this run's family, and
    of the power preset's) and at the observed mean difference, from the observed paired sd."""
    family = sum(not math.isnan(c["test"]["p_signflip"]) for c in claims)
    k = power_family()
    out = []
    for c in claims:
        t = c["test"]
        if c["key"] not in POWER_SEEDS or math.isnan(t["p_signflip"]) or t["effect"] is None:
            continue
        sd, mean = t["sd"], abs(c["interval"]["mean"])
        out.append({"key": c["key"], "comparison": f"{c['arm']} - {c['ref']} ({c['task']})", "n": c["interval"]["n"],
                    "sd": sd, "effect": t["effect"], "mde": t["mde"], "family": family, "power_family": k,
                    "paper_run_family": seeds_needed(t["effect"], sd, ALPHA / family),
                    "paper_power_family": seeds_needed(t["effect"], sd, ALPHA / k),
                    "observed_power_family": seeds_needed(mean, sd, ALPHA / k)})
    return out


def _stage_evals(evals: list[dict[str, Any]], shift: int, stage: int, steps: int) -> list[dict[str, Any]]:
    """The evaluations of the stage that starts at policy step `shift`, in step order: from the
    shift up to the step before the next shift (the last stage: up to the last step), all under
    that stage's preference (never the evaluation at the next shift, which is scored under the
    next stage's preference)."""
    end = shift + stage if shift + stage < steps else steps + 1
    return sorted((e for e in evals if shift <= e["step"] < end), key=lambda e: e["step"])


COLLAPSE_DROP = 0.1
"""A run *collapsed* if its evaluation reward ever fell more than this below its warm start's
(reward units; fixed before running)."""


def _collapsed(evals: list[dict[str, Any]]) -> bool:
    return any(e["reward"] < evals[0]["reward"] - COLLAPSE_DROP for e in evals[1:])


def _merge_hist(parts: list[dict[Any, list[int]]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for p in parts:
        for k, v in p.items():
            acc = out.setdefault(int(k), [0] * len(v))
            for i, x in enumerate(v):
                acc[i] += x
    return out


def _median_kl(histories: list[list[dict[str, Any]]]) -> float:
    xs = [r["kl_step"] for h in histories for r in h if r.get("kl_step") is not None and not math.isnan(r["kl_step"])]
    return statistics.median(xs) if xs else math.nan


def _mean_key(histories: list[list[dict[str, Any]]], key: str) -> float:
    xs = [r[key] for h in histories for r in h if r["step"] >= 0 and not math.isnan(r.get(key, math.nan))]
    return statistics.mean(xs) if xs else math.nan


def _max_key(histories: list[list[dict[str, Any]]], key: str) -> float:
    xs = [r[key] for h in histories for r in h if r["step"] >= 0 and not math.isnan(r.get(key, math.nan))]
    return max(xs) if xs else math.nan


def _calibration(cfg: SuiteConfig, runs: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """Median per-step KL for each candidate lr and the log-log interpolated lr for the target."""
    rows = []
    for d in sorted(runs, key=lambda d: d["spec"]["policy_lr"]):
        rows.append({"policy_lr": d["spec"]["policy_lr"], "kl_step_median": _median_kl([d["history"]]),
                     "final_eval": d["evals"][-1]["reward"], "initial_eval": d["evals"][0]["reward"]})
    summary["calibration"] = rows
    pick = math.nan
    for a, b in zip(rows, rows[1:]):
        if a["kl_step_median"] <= CALIBRATION_TARGET_KL <= b["kl_step_median"]:
            la, lb = math.log(a["policy_lr"]), math.log(b["policy_lr"])
            ka, kb = math.log(a["kl_step_median"]), math.log(b["kl_step_median"])
            pick = math.exp(la + (math.log(CALIBRATION_TARGET_KL) - ka) * (lb - la) / (kb - ka))
    summary["calibrated_lr"] = pick
    return summary


def staleness_title(arms: list[str]) -> str:
    """Title of the staleness figure, naming only the kinds of arm it shows (the smoke preset's
    figure, with sao alone, was titled "single rollout vs GRPO groups of 4")."""
    grpo = any(a.startswith("grpo") for a in arms)
    single = any(not a.startswith("grpo") for a in arms)
    what = ("single rollout vs GRPO groups of 4" if grpo and single else "GRPO groups of 4" if grpo else
            "single rollout" + ("" if len(arms) > 1 else f", {arms[0]}"))
    return f"staleness of trained tokens: {what}"
