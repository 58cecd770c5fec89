"""``traj bench learning``: presets, the grid of runs (arms x tasks x paired seeds) and the
advantage-quality study run in worker processes, then the pre-registered statistics, the figures
and a report, all written under a fresh directory of the scratch area (never into the checkout).

Presets: ``default`` (the grid behind bench/LEARNING.md, <= 15 min on 2 cores), ``smoke`` (CI:
one seed, the advantage-quality study at small size and one short SAO run, <= 1 min) and
``calibrate`` (the one-off learning-rate calibration that fixed :data:`POLICY_LR`).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trajstore.wording import plural
from trajstore.trainer.apps.envs import FAMILIES
from trajstore.trainer.apps.learning_bench.harness import ARMS, DIS_BAND, LOG_RATIO_EDGES, BenchError, RunSpec, run_one
from trajstore.trainer.apps.learning_bench.oracle import QualityConfig
from trajstore.trainer.apps.learning_bench.stats import CLAIMS, Interval, auc, bootstrap_interval, paired, verdict
from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig

Preset = Literal["default", "smoke", "calibrate"]

POLICY_LR = 5e-4
"""The RL learning rate of every arm (critic: 5x). Calibrated once with ``traj bench learning
--preset calibrate`` (SAO, seed 0, 20 policy steps per candidate lr): the median per-step
KL(pi_before || pi_after) was 6.2e-4 nats per action token at 3e-4 and 9.8e-4 at 5e-4
(interpolated 5.04e-4 for 1e-3); the table is in bench/LEARNING.md."""
CALIBRATION_LRS = (1e-4, 2e-4, 3e-4, 5e-4, 1e-3)
CALIBRATION_TARGET_KL = 1e-3
"""nats per action token, exact over the vocabulary at the batch's action slots."""
SHIFT_STYLES = ("<", "=", ">")
"""Preferred style of each stage of the pref-shift task."""


def default_scratch() -> Path:
    """``<system temp dir>/trajstore-bench-learning``: where the benchmark writes unless told."""
    return Path(tempfile.gettempdir()) / "trajstore-bench-learning"


class SuiteConfig(BaseModel):
    """What ``traj bench learning`` runs (see the presets)."""

    model_config = ConfigDict(extra="forbid")

    preset: Preset = "default"
    scratch: str = Field(default_factory=lambda: str(default_scratch()),
                         description="directory for warm starts (cached per seed) and a fresh run directory")
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4])
    chain_arms: list[str] = Field(default_factory=lambda: list(ARMS))
    chain_steps: int = 25
    shift_arms: list[str] = Field(default_factory=lambda: ["sao", "running-mean-8", "running-mean-128"])
    shift_stage_steps: int = Field(12, description="policy steps per preference stage (3 stages)")
    batch_size: int = 32
    workers: int = Field(64, description="simulated rollout workers")
    critic_warmup: int = 10
    policy_lr: float = POLICY_LR
    logit_noise: float = Field(0.2, description="sd of the engine's logit noise (nats), on top of bf16 rounding")
    eval_every: int = Field(5, description="chain task: policy steps between evaluations")
    shift_eval_every: int = Field(4, description="pref-shift task: policy steps between evaluations (divides the "
                                                 "stage length, so every shift step is evaluated)")
    eval_per_family: int = 32
    kl_arms: list[str] = Field(default_factory=lambda: ["sao", "no-correction", "ppo-clip", "grpo-dis"],
                               description="arms whose exact per-step KL is measured (2 extra forwards per step)")
    quality: QualityConfig | None = Field(default_factory=lambda: QualityConfig(critic_iterations=(10, 30)))
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    processes: int = Field(2, ge=1, description="worker processes (one torch thread each)")
    calibrate_lrs: list[float] = Field(default_factory=list, description="calibrate preset: candidate policy lrs")

    @classmethod
    def preset_config(cls, name: Preset, **overrides: Any) -> SuiteConfig:
        """The named preset with `overrides` applied (unknown preset: ValueError)."""
        if name == "default":
            base: dict[str, Any] = {}
        elif name == "smoke":
            base = dict(seeds=[0], chain_arms=["sao"], chain_steps=6, shift_arms=[], batch_size=16, workers=32,
                        critic_warmup=3, eval_every=3, eval_per_family=8, processes=1,
                        quality=QualityConfig(critic_iterations=(40,), prompts=6, mc_rollouts=16,
                                              estimators=("sao", "running-mean-128")),
                        warm_start=WarmStartConfig(steps=200))
        elif name == "calibrate":
            base = dict(seeds=[0], chain_arms=["sao"], chain_steps=20, shift_arms=[], quality=None,
                        calibrate_lrs=list(CALIBRATION_LRS))
        else:
            raise ValueError(f"unknown preset {name!r}; expected default, smoke or calibrate")
        return cls(preset=name, **{**base, **overrides})

    def shifts(self) -> list[int]:
        """Policy steps at which the pref-shift preference changes."""
        return [self.shift_stage_steps * i for i in range(1, len(SHIFT_STYLES))]

    def specs(self, warm: dict[int, str]) -> list[RunSpec]:
        """Every RL run, in a stable order (`warm`: seed -> warm-start directory)."""
        common = dict(batch_size=self.batch_size, workers=self.workers, critic_warmup=self.critic_warmup,
                      logit_noise=self.logit_noise, eval_every=self.eval_every, eval_per_family=self.eval_per_family)
        out = []
        lrs = self.calibrate_lrs or [self.policy_lr]
        for lr in lrs:
            for arm in self.chain_arms:
                for s in self.seeds:
                    out.append(RunSpec(task="chain", arm=arm, seed=s, warm_start=warm[s], steps=self.chain_steps,
                                       policy_lr=lr, measure_kl=arm in self.kl_arms, **common))
        stages = [(i * self.shift_stage_steps, st) for i, st in enumerate(SHIFT_STYLES)]
        if self.shift_arms and self.shift_stage_steps % self.shift_eval_every:
            raise ValueError(f"shift_eval_every {self.shift_eval_every} must divide shift_stage_steps "
                             f"{self.shift_stage_steps}")
        common_shift = {**common, "eval_every": self.shift_eval_every}
        for arm in self.shift_arms:
            for s in self.seeds:
                out.append(RunSpec(task="pref-shift", arm=arm, seed=s, warm_start=warm[s], policy_lr=self.policy_lr,
                                   steps=self.shift_stage_steps * len(SHIFT_STYLES), stages=stages,
                                   measure_kl=arm in self.kl_arms, **common_shift))
        return out


# -- jobs (run in worker processes) --------------------------------------------------------------


def _job_warm(scratch: str, seed: int, cfg_json: str) -> tuple[int, str]:
    import torch

    torch.set_num_threads(1)
    from trajstore.trainer.apps.learning_bench.warmstart import ensure_warm_start

    cfg = WarmStartConfig(**json.loads(cfg_json))
    return seed, str(ensure_warm_start(scratch, seed, cfg))


def _job_run(spec_json: str, store: str, out: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    spec = RunSpec.model_validate_json(spec_json)
    res = run_one(spec, store)
    d = {"spec": json.loads(spec.model_dump_json()), "store": res.store, "history": res.history, "evals": res.evals,
         "log_ratio_hist": res.log_ratio_hist, "band": res.band, "staleness_tokens": res.staleness_tokens,
         "seconds": res.seconds}
    Path(out).write_text(json.dumps(d))
    return d


def _job_quality(warm: str, seed: int, cfg_json: str, out: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from trajstore.trainer.apps.learning_bench.oracle import advantage_quality

    d = json.loads(cfg_json)
    d["critic_iterations"] = tuple(d["critic_iterations"])
    t0 = time.monotonic()
    res = advantage_quality(warm, seed, QualityConfig(**d))
    res["seconds"] = time.monotonic() - t0
    Path(out).write_text(json.dumps(res))
    return res


def _pool(n: int):  # noqa: ANN202
    import multiprocessing as mp

    return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))


def run_suite(cfg: SuiteConfig, *, log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Run the preset: warm starts (cached), every run and the advantage-quality study, then the
    analysis. Everything goes to a fresh ``<scratch>/<preset>-<UTC time>/`` directory.

    Returns:
        The summary (also written as ``summary.json`` there): paths, timings, per-claim verdicts.
    """
    t0 = time.monotonic()
    scratch = Path(cfg.scratch).expanduser().resolve()
    out = scratch / f"{cfg.preset}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{os.getpid()}"
    (out / "results").mkdir(parents=True, exist_ok=False)
    (out / "stores").mkdir()
    (out / "config.json").write_text(cfg.model_dump_json(indent=2))
    log(f"traj bench learning --preset {cfg.preset}: writing to {out}")
    warm: dict[int, str] = {}
    ws_json = json.dumps(asdict(cfg.warm_start))
    t_warm = time.monotonic()
    if cfg.processes == 1:
        for s in cfg.seeds:
            warm[s] = _job_warm(str(scratch), s, ws_json)[1]
    else:
        with _pool(cfg.processes) as pool:
            for f in as_completed([pool.submit(_job_warm, str(scratch), s, ws_json) for s in cfg.seeds]):
                s, d = f.result()
                warm[s] = d
    log(f"warm starts ready for seeds {cfg.seeds} ({time.monotonic() - t_warm:.0f}s)")
    specs = cfg.specs(warm)
    jobs: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = []
    if cfg.quality is not None:
        from dataclasses import replace

        qjson = json.dumps(asdict(replace(cfg.quality, policy_lr=cfg.policy_lr)))
        for s in cfg.seeds:
            jobs.append((f"quality-s{s}", _job_quality, (warm[s], s, qjson, str(out / "results" / f"quality-s{s}.json"))))
    for sp in specs:
        name = f"{sp.run_id}-lr{sp.policy_lr:g}" if cfg.calibrate_lrs else sp.run_id
        jobs.append((name, _job_run, (sp.model_dump_json(), str(out / "stores" / name),
                                      str(out / "results" / f"{name}.json"))))
    done: dict[str, Any] = {}
    if cfg.processes == 1:
        for i, (name, fn, args) in enumerate(jobs):
            done[name] = fn(*args)
            log(f"[{i + 1}/{len(jobs)}] {name} ({time.monotonic() - t0:.0f}s)")
    else:
        with _pool(cfg.processes) as pool:
            futs = {pool.submit(fn, *args): name for name, fn, args in jobs}
            for i, f in enumerate(as_completed(futs)):
                done[futs[f]] = f.result()
                log(f"[{i + 1}/{len(jobs)}] {futs[f]} ({time.monotonic() - t0:.0f}s)")
    summary = analyse(cfg, done, out)
    summary["seconds"] = time.monotonic() - t0
    summary["out_dir"] = str(out)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "report.md").write_text(render_report(cfg, summary))
    return summary


def committed_files(directory: str | os.PathLike[str]) -> list[str]:
    """Files under `directory` that git tracks (paths relative to it); [] outside a git work tree
    or without git. The benchmark never writes over these (issue 16)."""
    import shutil
    import subprocess

    d = Path(directory)
    if not d.is_dir() or shutil.which("git") is None:
        return []
    proc = subprocess.run(["git", "-C", str(d), "ls-files", "-z", "--", "."], capture_output=True)
    if proc.returncode != 0:  # not a work tree
        return []
    return [n for n in proc.stdout.decode().split("\0") if n]


def reanalyse(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Redo the statistics, figures and report of a finished run directory from its saved
    results (no training); overwrites only that directory's summary, report and figures."""
    out = Path(out_dir)
    tracked = committed_files(out)
    if tracked:
        raise BenchError(f"--reanalyse {out}: refusing to overwrite {len(tracked)} file(s) committed to git there "
                         f"(e.g. {tracked[0]}); copy the run directory out of the checkout first")
    cfg = SuiteConfig.model_validate_json((out / "config.json").read_text())
    done = {p.stem: json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))}
    old = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    summary = analyse(cfg, done, out)
    summary["seconds"] = old.get("seconds", math.nan)
    summary["out_dir"] = str(out)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "report.md").write_text(render_report(cfg, summary))
    return summary


# -- analysis --------------------------------------------------------------------------------------


def _iv(iv: Interval) -> dict[str, Any]:
    return {"mean": iv.mean, "low": iv.low, "high": iv.high, "n": iv.n, "diffs": list(iv.diffs)}


def analyse(cfg: SuiteConfig, done: dict[str, Any], out: Path) -> dict[str, Any]:
    """Statistics, verdicts and figures from the finished jobs (see :mod:`.stats`, :mod:`.plots`)."""
    from trajstore.trainer.apps.learning_bench import plots

    # by name, not in the order the workers finished: a fresh run and --reanalyse of its directory
    # must give the same figures (the quality bars' bootstrap resampled seeds in completion order)
    done = dict(sorted(done.items()))
    n_seeds = len(cfg.seeds)
    of_seeds = plots.seeds_note(n_seeds)  # "mean over 5 seeds" / "1 seed"
    runs = [d for k, d in done.items() if not k.startswith("quality-")]
    summary: dict[str, Any] = {"figures": {}, "claims": [], "auc": {}, "quality": {}}
    if cfg.calibrate_lrs:
        return _calibration(cfg, runs, summary)
    by: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for d in runs:
        sp = d["spec"]
        by.setdefault((sp["task"], sp["arm"]), {})[sp["seed"]] = d
    # areas under the evaluation curves
    metric: dict[str, dict[str, dict[int, float]]] = {"auc": {}, "post-shift-auc": {}}
    for (task, arm), seeds in by.items():
        for s, d in seeds.items():
            if task == "chain":
                metric["auc"].setdefault(arm, {})[s] = auc(d["evals"])
            else:
                steps = cfg.shift_stage_steps * len(SHIFT_STYLES)
                vals = [auc(d["evals"], first=sh, last=min(sh + cfg.shift_stage_steps, steps)) for sh in cfg.shifts()]
                metric["post-shift-auc"].setdefault(arm, {})[s] = sum(vals) / len(vals)
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
            bars = {e: {k: bootstrap_interval([per[k][e][s] for s in sorted(per[k][e])]) for k in ("corr", "cos")}
                    for e in order}
            summary["figures"][f"quality-{n}"] = plots.quality_plot(
                bars, rel, out / f"advantage-quality-{n}.png",
                title=f"advantage quality vs the Monte-Carlo oracle A* (fixed warm-start policy, critics after {n} "
                      f"critic iterations; {plots.seeds_note(len(quality))}, {plots.ci_note(len(quality))})")
        metric["corr"] = summary["quality"][str(first[0]["critic_iterations"])]["values"]["corr"]
        metric["cos"] = summary["quality"][str(first[0]["critic_iterations"])]["values"]["cos"]
    # DIS masked fraction in the sao runs (testability of the DIS claims)
    sao_band = [d["band"] for (task, arm), seeds in by.items() if arm == "sao" and task == "chain"
                for d in seeds.values()]
    tot = sum(v[0] for b in sao_band for v in b.values())
    dis_masked = sum(v[1] + v[2] for b in sao_band for v in b.values()) / tot if tot else None
    summary["dis_masked_sao"] = dis_masked
    # claims
    forest: dict[str, list[dict[str, Any]]] = {}
    for c in CLAIMS:
        vals = metric.get(c.metric, {})
        if c.arm not in vals or c.ref not in vals:
            continue
        iv = paired(vals, c.arm, c.ref)
        v, why = verdict(c, iv, dis_masked=dis_masked)
        summary["claims"].append({"key": c.key, "paper": c.paper, "task": c.task, "metric": c.metric, "arm": c.arm,
                                  "ref": c.ref, "interval": _iv(iv), "verdict": v, "reason": why})
    # forest plots: every arm against sao (and grpo-no-dis against grpo-dis)
    for metric_name, unit, title in (
            ("auc", "paired difference in AUC of the evaluation reward (reward units), arm - reference",
             "chain task: area under the evaluation-reward curve, difference to sao"),
            ("post-shift-auc", "paired difference in post-shift AUC (reward units), arm - reference",
             "pref-shift task: evaluation reward after each preference shift, difference to sao")):
        vals = metric.get(metric_name, {})
        rows = []
        for arm in ARMS:
            if arm == "sao" or arm not in vals or "sao" not in vals:
                continue
            iv = paired(vals, arm, "sao")
            claim = next((c for c in CLAIMS if c.arm == arm and c.ref == "sao" and c.metric == metric_name), None)
            v = verdict(claim, iv, dis_masked=dis_masked)[0] if claim else "no paper claim"
            rows.append({"label": f"{arm} - sao", "mean": iv.mean, "low": iv.low, "high": iv.high, "verdict": v,
                         "unit": unit})
        if metric_name == "auc" and "grpo-no-dis" in vals and "grpo-dis" in vals:
            iv = paired(vals, "grpo-no-dis", "grpo-dis")
            claim = next(c for c in CLAIMS if c.key == "grpo-dis-vs-none")
            rows.append({"label": "grpo-no-dis - grpo-dis", "mean": iv.mean, "low": iv.low, "high": iv.high,
                         "verdict": verdict(claim, iv, dis_masked=dis_masked)[0], "unit": unit})
        if rows:
            forest[metric_name] = rows
            summary["figures"][f"forest-{metric_name}"] = plots.forest_plot(
                rows, out / f"forest-{metric_name}.png",
                title=f"{title} ({n_seeds} paired seed{'s' if n_seeds != 1 else ''}, {plots.ci_note(n_seeds)})")
    # curves and diagnostics
    evals = {task: {arm: [d["evals"] for d in seeds.values()] for (t, arm), seeds in by.items() if t == task}
             for task in ("chain", "pref-shift")}
    hist = {task: {arm: [d["history"] for d in seeds.values()] for (t, arm), seeds in by.items() if t == task}
            for task in ("chain", "pref-shift")}
    groups = {"critic vs baselines": ["sao", "sao-k1", "full-critic", "running-mean-8", "running-mean-128"],
              "off-policy correction": ["sao", "ppo-clip", "no-correction", "grpo-dis", "grpo-no-dis"],
              "GAE variants": ["sao", "gae-turn-last", "gae-turn-avg", "gae-no-skip"]}
    if evals["chain"]:
        summary["figures"]["curves-chain"] = plots.curves_plot(
            groups, evals["chain"], out / "curves-chain.png",
            title=f"chain task: evaluation reward ({3 * cfg.eval_per_family} fixed episodes, {of_seeds})")
        summary["figures"]["diagnostics-chain"] = plots.diagnostics_plot(
            hist["chain"], out / "diagnostics-chain.png", title=f"chain task: training diagnostics ({of_seeds})")
        lr_arms = [a for a in ("sao", "no-correction", "grpo-dis") if a in evals["chain"]]
        hists = {a: _merge_hist([d["log_ratio_hist"] for d in by[("chain", a)].values()]) for a in lr_arms}
        bands = {a: _merge_hist([d["band"] for d in by[("chain", a)].values()]) for a in lr_arms}
        summary["figures"]["log-ratio"] = plots.log_ratio_plot(
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
        summary["figures"]["staleness"] = plots.staleness_plot(
            stal, out / "staleness.png", seeds=n_seeds, title=staleness_title(list(stal)))
    if evals["pref-shift"]:
        summary["figures"]["curves-shift"] = plots.curves_plot(
            {"critic vs running means": list(evals["pref-shift"])}, evals["pref-shift"], out / "curves-shift.png",
            title=f"pref-shift task: evaluation reward under the preference in force ({of_seeds})",
            shifts=cfg.shifts())
        summary["figures"]["families-shift"] = plots.family_shift_plot(
            evals["pref-shift"], FAMILIES, cfg.shifts(), out / "families-shift.png",
            title=f"pref-shift task: evaluation reward per difficulty family around each shift ({of_seeds})")
    summary["runs"] = {f"{t}/{a}": {"seconds": [d["seconds"] for d in s.values()],
                                    "final_eval": statistics.mean(d["evals"][-1]["reward"] for d in s.values()),
                                    "initial_eval": statistics.mean(d["evals"][0]["reward"] for d in s.values()),
                                    "kl_step_median": _median_kl([d["history"] for d in s.values()]),
                                    "zero_grad": _mean_key([d["history"] for d in s.values()], "zero_grad"),
                                    "grad_norm_max": _max_key([d["history"] for d in s.values()], "grad_norm"),
                                    "collapsed": sum(_collapsed(d["evals"]) for d in s.values()),
                                    "seeds": len(s)}
                       for (t, a), s in sorted(by.items(), key=lambda kv: (kv[0][0] != "chain", list(ARMS).index(
                           kv[0][1])))}
    return summary


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


# -- report ----------------------------------------------------------------------------------------


def staleness_title(arms: list[str]) -> str:
    """Title of the staleness figure, naming only the kinds of arm it shows (the smoke preset's
    figure, with sao alone, was titled "single rollout vs GRPO groups of 4")."""
    grpo = any(a.startswith("grpo") for a in arms)
    single = any(not a.startswith("grpo") for a in arms)
    what = ("single rollout vs GRPO groups of 4" if grpo and single else "GRPO groups of 4" if grpo else
            "single rollout" + ("" if len(arms) > 1 else f", {arms[0]}"))
    return f"staleness of trained tokens: {what}"


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
