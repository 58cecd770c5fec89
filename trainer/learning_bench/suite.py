"""The benchmark's grid (arms x tasks x staleness/learning-rate conditions x seeds), run in
worker processes, summarised per run (final reward, steps to a threshold, recovery after the
reward shift, max masked fraction) and rendered as a table and plots. Presets: ``full`` (the
table in bench/LEARNING.md, about 13-15 min on 2 cores) and ``smoke`` (one SAO run, seconds).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trajstore.trainer.learning_bench.harness import ARMS, RunResult, RunSpec
from trajstore.trainer.envs import TaskName, TaskPhase

Preset = Literal["full", "smoke"]

GUESS_PHASE = TaskPhase(target_low=0, target_high=7, max_turns=7)
"""Guess the number before the shift: targets uniform in [0, 7], 7 guesses over [0, 15]."""
GUESS_SHIFTED = TaskPhase(target_low=8, target_high=15, max_turns=7)
"""After the shift the targets move to [8, 15]: a policy tuned to the first range loses
reward until it relearns (the paper's staged reward-preference shift, in miniature)."""
SEQUENCE_PHASE = TaskPhase(length=4, step_sizes=(1, 2))
"""Sequence completion: 4 terms to produce, common difference 1 or 2, modulus 10."""

THRESHOLD = {"guess": 0.7, "sequence": 0.4}
"""Reward the smoothed batch reward must reach for "steps to threshold" (per task)."""
SMOOTH = 10
"""Iterations in the moving average used for thresholds and recovery."""
RECOVERY_FRACTION = 0.9
"""Recovered = the smoothed reward is back to this fraction of its level just before the shift."""
RESULT_FILE = "bench-result.json"
"""A finished run's spec, history and evaluation rewards, at the root of its store."""


class SuiteConfig(BaseModel):
    """What ``traj bench learning`` runs."""

    model_config = ConfigDict(extra="forbid")

    store_root: str = Field("bench-learning-store", description="directory; one local store per run under it")
    out_dir: str = Field("bench/learning_plots", description="plots, results.json and table.md go here")
    tasks: list[TaskName] = Field(default_factory=lambda: ["sequence", "guess"], description="tasks")
    arms: list[str] = Field(default_factory=lambda: list(ARMS), description="arm names")
    conditions: list[tuple[int, float]] = Field(
        default_factory=lambda: [(0, 1e-3), (4, 1e-3), (4, 3e-3)],
        description="(staleness K in versions, policy = critic learning rate) pairs")
    seeds: list[int] = Field(default_factory=lambda: [0], description="seeds")
    steps: dict[str, int] = Field(default_factory=lambda: {"sequence": 150, "guess": 200},
                                  description="policy steps per task")
    shift_step: int | None = Field(100, description="guess: policy step of the reward shift (None = no shift)")
    batch_size: int = Field(32, ge=1, description="episodes per step")
    workers: int = Field(2, ge=1, description="runs in parallel (one torch thread each)")
    reuse: bool = Field(False, description="keep a run whose store already holds its finished result "
                                           "(RESULT_FILE) instead of rerunning it (an interrupted grid resumes)")

    @classmethod
    def preset(cls, name: Preset, **overrides: Any) -> SuiteConfig:
        """The ``full`` grid or the ``smoke`` run (SAO, sequence task, K = 0, seed 0, 120 steps)."""
        if name == "full":
            return cls(**overrides)
        if name == "smoke":
            base = dict(tasks=["sequence"], arms=["sao"], conditions=[(0, 1e-3)], seeds=[0],
                        steps={"sequence": 120, "guess": 120}, shift_step=None, workers=1)
            return cls(**{**base, **overrides})
        raise ValueError(f"unknown preset {name!r}; expected 'full' or 'smoke'")

    def specs(self) -> list[RunSpec]:
        """Every run of the grid, in a stable order."""
        out = []
        for task in self.tasks:
            for k, lr in self.conditions:
                for arm in self.arms:
                    for seed in self.seeds:
                        extra: dict[str, Any] = {"phase": SEQUENCE_PHASE} if task == "sequence" else {
                            "phase": GUESS_PHASE, "shift_step": self.shift_step,
                            "shifted": GUESS_SHIFTED if self.shift_step else None}
                        out.append(RunSpec(task=task, arm=arm, staleness=k, policy_lr=lr, critic_lr=lr, seed=seed,
                                           steps=self.steps[task], batch_size=self.batch_size, **extra))
        return out


@dataclass
class RunSummary:
    """The table's numbers for one run.

    Attributes:
        run_id, task, arm, staleness (versions), lr, seed: the run.
        initial_reward: evaluation reward of version 0 (untrained), final phase.
        final_reward: evaluation reward of the final version, same episodes and sampler seed.
        last_reward: mean batch reward over the last SMOOTH iterations (as sampled, lagged).
        steps_to_threshold: first policy step whose SMOOTH-iteration moving average reaches
            THRESHOLD[task]; None = never.
        recovery_steps: policy steps after the shift until the moving average (post-shift
            iterations only) is back to RECOVERY_FRACTION of its pre-shift level; None = never
            or no shift.
        max_masked: largest per-step fraction of action tokens DIS-masked (PPO: clipped branch
            active), over the run.
        explained_variance: mean critic explained variance over the last 20 iterations (NaN
            for arms without a critic).
        seconds: wall time (s).
    """

    run_id: str
    task: str
    arm: str
    staleness: int
    lr: float
    seed: int
    initial_reward: float
    final_reward: float
    last_reward: float
    steps_to_threshold: int | None
    recovery_steps: int | None
    max_masked: float
    explained_variance: float
    seconds: float


def _moving(xs: Sequence[float], w: int) -> list[float]:
    return [sum(xs[max(0, i - w + 1):i + 1]) / len(xs[max(0, i - w + 1):i + 1]) for i in range(len(xs))]


def summarise(res: RunResult) -> RunSummary:
    """Reduce a run's history to the table's numbers (see :class:`RunSummary`)."""
    spec, h = res.spec, [r for r in res.history if r["step"] >= 0]
    rewards = [r["reward"] for r in h]
    steps = [int(r["step"]) for r in h]
    pre = [(s, r) for s, r, row in zip(steps, rewards, h) if row["phase"] == 0]
    smooth_pre = _moving([r for _, r in pre], SMOOTH)
    thr = THRESHOLD[spec.task]
    to_thr = next((s for (s, _), m in zip(pre, smooth_pre) if m >= thr), None)
    recovery = None
    if spec.shift_step is not None and spec.shifted is not None:
        before = [r for _, r in pre][-SMOOTH:]
        level = sum(before) / max(len(before), 1)
        post = [(s, r) for s, r, row in zip(steps, rewards, h) if row["phase"] == 1]
        smooth_post = _moving([r for _, r in post], SMOOTH)
        for i, ((s, _), m) in enumerate(zip(post, smooth_post)):
            if i + 1 >= SMOOTH and m >= RECOVERY_FRACTION * level:
                recovery = s - spec.shift_step
                break
    masked = [r["masked"] for r in h if not math.isnan(r["masked"])]
    ev = [r["explained_variance"] for r in res.history[-20:] if not math.isnan(r["explained_variance"])]
    return RunSummary(spec.run_id, spec.task, spec.arm, spec.staleness, spec.policy_lr, spec.seed,
                      res.initial_reward, res.final_reward, sum(rewards[-SMOOTH:]) / max(len(rewards[-SMOOTH:]), 1),
                      to_thr, recovery, max(masked, default=math.nan),
                      sum(ev) / len(ev) if ev else math.nan, res.seconds)


def _run_in_child(spec_json: str, store_uri: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from trajstore.trainer.learning_bench.harness import run_one

    res = run_one(RunSpec.model_validate_json(spec_json), store_uri)
    out = {"spec": json.loads(res.spec.model_dump_json()), "store": res.store, "history": res.history,
           "initial_reward": res.initial_reward, "final_reward": res.final_reward, "seconds": res.seconds}
    (Path(store_uri) / RESULT_FILE).write_text(json.dumps(out))
    return out


def _result_of(d: dict[str, Any]) -> RunResult:
    return RunResult(RunSpec.model_validate(d["spec"]), d["store"], d["history"], d["initial_reward"],
                     d["final_reward"], d["seconds"])


def run_suite(cfg: SuiteConfig, *, on_done: Callable[[RunSummary, int, int], None] | None = None,
              ) -> tuple[list[RunResult], list[RunSummary]]:
    """Run every spec of `cfg` (``cfg.workers`` child processes, one torch thread each; 1 = in
    this process). Each run gets a fresh store ``<store_root>/<run_id>`` (an old one is removed).

    Returns:
        (results, summaries) in the order of :meth:`SuiteConfig.specs`.
    """
    import shutil

    specs = cfg.specs()
    root = Path(cfg.store_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, RunResult] = {}
    summaries: dict[str, RunSummary] = {}
    todo = []
    for s in specs:
        kept = root / s.run_id / RESULT_FILE
        if cfg.reuse and kept.is_file():
            old = json.loads(kept.read_text())
            if RunSpec.model_validate(old["spec"]) == s:
                results[s.run_id] = _result_of(old)
                summaries[s.run_id] = summarise(results[s.run_id])
                continue
        shutil.rmtree(root / s.run_id, ignore_errors=True)
        todo.append(s)

    def done(res: RunResult) -> None:
        results[res.spec.run_id] = res
        summaries[res.spec.run_id] = summarise(res)
        if on_done is not None:
            on_done(summaries[res.spec.run_id], len(results), len(specs))

    if cfg.workers == 1:
        for s in todo:
            done(_result_of(_run_in_child(s.model_dump_json(), str(root / s.run_id))))
    else:
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=cfg.workers, mp_context=mp.get_context("spawn")) as pool:
            futs = [pool.submit(_run_in_child, s.model_dump_json(), str(root / s.run_id)) for s in todo]
            for f in as_completed(futs):
                done(_result_of(f.result()))
    return [results[s.run_id] for s in specs], [summaries[s.run_id] for s in specs]


# -- rendering -------------------------------------------------------------------------------


def _fmt(x: Any, nd: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.{nd}f}"
    return str(x)


def table_rows(summaries: Sequence[RunSummary]) -> list[dict[str, str]]:
    """One row per (task, K, lr, arm), seeds aggregated: rewards as mean over seeds, steps and
    recovery listed per seed (``-`` = never), max masked as the max over seeds."""
    groups: dict[tuple[str, int, float, str], list[RunSummary]] = {}
    for s in summaries:
        groups.setdefault((s.task, s.staleness, s.lr, s.arm), []).append(s)
    rows = []
    for (task, k, lr, arm), ss in groups.items():
        def mean(xs: list[float]) -> float:
            xs = [x for x in xs if not math.isnan(x)]
            return sum(xs) / len(xs) if xs else math.nan

        rows.append({
            "task": task, "K": str(k), "lr": f"{lr:g}", "arm": arm, "seeds": ",".join(str(s.seed) for s in ss),
            "untrained": _fmt(mean([s.initial_reward for s in ss])),
            "final": _fmt(mean([s.final_reward for s in ss])),
            "final per seed": "/".join(_fmt(s.final_reward, 2) for s in ss),
            "last batches": _fmt(mean([s.last_reward for s in ss])),
            "steps to thr": "/".join(_fmt(s.steps_to_threshold) for s in ss),
            "recovery": "/".join(_fmt(s.recovery_steps) for s in ss) if task == "guess" else "n/a",
            "max masked": _fmt(max((s.max_masked for s in ss if not math.isnan(s.max_masked)), default=math.nan)),
            "EV": _fmt(mean([s.explained_variance for s in ss]), 2),
        })
    return rows


def markdown_table(rows: Sequence[dict[str, str]]) -> str:
    """The rows as a GitHub markdown table."""
    if not rows:
        return "(no runs)\n"
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    out += ["| " + " | ".join(r[c] for c in cols) + " |" for r in rows]
    return "\n".join(out) + "\n"


def save_plots(results: Sequence[RunResult], out_dir: str | os.PathLike[str]) -> list[str]:
    """One PNG per (task, K, lr): reward vs step, masked fraction vs step and critic explained
    variance vs step, one line per arm (mean over seeds, 10-iteration moving average). Returns
    the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, int, float], dict[str, list[RunResult]]] = {}
    for r in results:
        groups.setdefault((r.spec.task, r.spec.staleness, r.spec.policy_lr), {}).setdefault(r.spec.arm, []).append(r)
    paths = []
    for (task, k, lr), arms in groups.items():
        fig, axes = plt.subplots(1, 3, figsize=(15, 4), dpi=70)
        for arm, rs in arms.items():
            for ax, key in zip(axes, ("reward", "masked", "explained_variance")):
                series = []
                for r in rs:
                    h = [row for row in r.history if row["step"] >= 0]
                    series.append([row[key] for row in h])
                n = min(len(s) for s in series)
                avg = [sum(s[i] for s in series) / len(series) for i in range(n)]
                if all(math.isnan(x) for x in avg):
                    continue
                ax.plot(range(n), _moving([0.0 if math.isnan(x) else x for x in avg], SMOOTH), label=arm, lw=1.2)
        for ax, title in zip(axes, ("batch reward (as sampled)", "masked fraction of action tokens",
                                    "critic explained variance")):
            ax.set_title(title)
            ax.set_xlabel("policy step")
        axes[2].set_ylim(-1, 1)
        shift = next((r.spec.shift_step for rs in arms.values() for r in rs if r.spec.shifted is not None), None)
        if shift:
            for ax in axes:
                ax.axvline(shift, color="grey", ls="--", lw=0.8)
        axes[0].legend(fontsize=7)
        fig.suptitle(f"{task}: staleness K={k}, lr={lr:g} (mean over seeds, {SMOOTH}-step moving average)")
        fig.tight_layout()
        p = out / f"{task}-k{k}-lr{lr:g}.png"
        fig.savefig(p)
        plt.close(fig)
        paths.append(str(p))
    return paths


def save_results(cfg: SuiteConfig, results: Sequence[RunResult], summaries: Sequence[RunSummary],
                 seconds: float) -> tuple[str, str]:
    """Write ``results.json`` (config, summaries, every run's history; ~MBs, so next to the
    stores in ``cfg.store_root``) and ``table.md`` (into ``cfg.out_dir``); return both paths."""
    import platform

    import torch
    import transformers

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"seconds": seconds, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "cpus": os.cpu_count(),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    data = {"config": json.loads(cfg.model_dump_json()), "meta": meta,
            "summaries": [asdict(s) for s in summaries],
            "histories": {r.spec.run_id: r.history for r in results}}
    rp = Path(cfg.store_root) / "results.json"
    rp.write_text(json.dumps(data, default=lambda x: None))
    tp = out / "table.md"
    tp.write_text(markdown_table(table_rows(summaries)))
    return str(rp), str(tp)
