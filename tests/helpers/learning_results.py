"""Synthetic per-run result files of ``traj bench learning`` (the dicts ``suite._job_run`` writes),
for analysis tests that need many seeds without training: evaluation curves with a chosen
effect per arm, and histories / histograms with every key the analysis and figures read."""

from __future__ import annotations

import random
from typing import Any

FAMILIES = ("easy", "medium", "hard")


def fake_run(task: str, arm: str, seed: int, *, steps: int, eval_every: int, gain: float, noise: float = 0.01,
             warmup: int = 3, stages: list[tuple[int, str]] | None = None, recover: float = 0.0) -> dict[str, Any]:
    """A run whose evaluation reward rises linearly by `gain` over `steps` (plus seed noise of sd
    `noise`); on pref-shift it drops by 0.2 at each stage start and then rises by `recover` over
    the stage. Per-seed randomness is shared by every arm of a seed (paired seeds)."""
    rng = random.Random(f"{task}-{seed}")
    arm_rng = random.Random(f"{task}-{arm}-{seed}")
    base = 0.5 + rng.gauss(0, 0.03)
    evals = []
    firsts = [s for s, _ in stages or []]
    for step in range(0, steps + 1, eval_every):
        r = base + gain * step / steps + arm_rng.gauss(0, noise)
        preferred = None
        if stages:
            k = max(i for i, s in enumerate(firsts) if s <= step)
            since = step - firsts[k]
            stage_len = (firsts[k + 1] if k + 1 < len(firsts) else steps) - firsts[k]
            r = base - (0.2 if k else 0.0) + recover * since / stage_len + arm_rng.gauss(0, noise)
            preferred = stages[k][1]
        evals.append({"step": step, "reward": r, "by_family": {f: r for f in FAMILIES}, "preferred": preferred})
    history = []
    for i in range(warmup + steps):
        step = i - warmup if i >= warmup else -1
        history.append({"iteration": i, "step": step, "trainer_version": max(step, 0), "time_s": float(i),
                        "reward": base, **{f"reward_{f}": base for f in FAMILIES},
                        "zero_grad": 0.03, "grad_norm": 1.0 + arm_rng.random(), "entropy": 1.0, "kl_rollout": 1e-3,
                        "ratio_mean": 1.0, "explained_variance": 0.3, "value_loss": 0.05, "staleness_mean": 1.5,
                        "staleness_p95": 4.0, "staleness_max": 6.0, "kl_step": 1e-3})
    hist = {str(s): [0] * 40 + [10 * (s + 1), 20, 10 * (s + 1)] + [0] * 39 for s in range(3)}
    return {"spec": {"task": task, "arm": arm, "seed": seed, "steps": steps}, "store": f"mem://{task}-{arm}-{seed}",
            "history": history, "evals": evals, "log_ratio_hist": hist,
            "band": {str(s): [100, 2 + s, 1] for s in range(3)}, "staleness_tokens": {str(s): 100 for s in range(3)},
            "seconds": 10.0}
