"""One arm at one sigma and seed, start to end: its own store, its processes
(:class:`~trajstore.trainer.apps.throughput.topology.Topology`), its rollouts
(:func:`~trajstore.trainer.apps.throughput.arms.run_rollouts`), then what it measured
(:mod:`~trajstore.trainer.apps.throughput.measure`) as an :class:`ArmResult`."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from trajstore import audit
from trajstore.store import open_store
from trajstore.store.layout import policy_run_dir
from trajstore.trainer.apps.demo.children import cpu_count
from trajstore.trainer.apps.demo.prune import prune_weights
from trajstore.trainer.apps.throughput.arms import Rollouts, run_rollouts
from trajstore.trainer.apps.throughput.config import Arm, ThroughputConfig, ThroughputError
from trajstore.trainer.apps.throughput.forkjoin import StepInputs, predicted_step_s
from trajstore.trainer.apps.throughput.measure import (
    StepTime,
    cpu_snapshot,
    dis_masked,
    rollout_busy,
    staleness_check,
    step_times,
    trainer_idle,
)
from trajstore.trainer.apps.throughput.result import ArmResult, Phases
from trajstore.trainer.apps.throughput.topology import ArmTopology, Services
from trajstore.trainer.apps.throughput.trace import LatencyTrace


def arm_run_id(arm: Arm, sigma: float, seed: int) -> str:
    """The training run id (and store folder) of an arm: ``<arm>-sigma<sigma>-seed<seed>``."""
    return f"{arm.name}-sigma{sigma:g}-seed{seed}"


def run_arm(cfg: ThroughputConfig, arm: Arm, sigma: float, seed: int, services: Services, *,
            log: Callable[[str], None] = lambda _: None) -> ArmResult:
    """Run one arm in a fresh store under the suite's folder (``services.root``) and measure it; the
    store keeps its trajectories and records (``traj stats`` works on it), its weights are deleted.

    Raises:
        ThroughputError: a process failed, the run timed out, or the trainer made fewer steps.
    """

    run_id = arm_run_id(arm, sigma, seed)
    store = services.root / run_id
    if store.exists():
        raise ThroughputError(f"{store} exists: each arm runs in a fresh store")
    trace = LatencyTrace(seed, cfg.trace_episodes(), cfg.env(sigma))
    services.ensure()
    topo = ArmTopology(services, arm, seed, store, run_id)
    failed = True
    try:
        startup = topo.start()
        log(f"{run_id}: ready in {startup:.1f} s; playing")
        pids = topo.pids()
        cpu0, w0 = cpu_snapshot(pids), time.time()
        rollouts = asyncio.run(asyncio.wait_for(
            run_rollouts(arm, cfg, trace, services.chat, proxy_url=topo.proxy_url, run_id=run_id, alive=topo.alive),
            cfg.arm_timeout_s))
        cpu1, w1 = cpu_snapshot(pids), time.time()
        failed = False
    except TimeoutError:
        raise ThroughputError(f"{run_id} did not finish in {cfg.arm_timeout_s:g} s (--arm-timeout)") from None
    finally:
        status = topo.stop(failed=failed)
    if not status or not status.get("ok"):
        raise ThroughputError(f"{run_id}: the trainer did not finish its run ({status}; log: {services.trainer_log})")
    conn = audit.connect(str(store))
    steps = step_times(conn, run_id)
    if len(steps) < cfg.steps:
        raise ThroughputError(f"{run_id}: the trainer recorded {len(steps)} of {cfg.steps} policy steps")
    summary, check = staleness_check(conn, run_id)
    masked = dis_masked(conn, run_id)
    conn.close()
    prune_weights(open_store(str(store)), run_id)
    prune_all_versions(store, run_id)
    cpu = {k: (cpu1[k] - cpu0[k]) / cfg.steps for k in pids if cpu0[k] is not None and cpu1[k] is not None}
    return measure_arm(cfg, arm, sigma, seed, trace, rollouts, steps[: cfg.steps], run_id=run_id, store=str(store),
                       startup_s=startup, staleness=summary, check=check, dis_masked=masked, cpu_s_per_step=cpu,
                       cpu_share=sum(cpu.values()) * cfg.steps / ((w1 - w0) * cpu_count()))


def prune_all_versions(store: Path, run_id: str) -> None:
    """Delete the run's last published version too: nothing will load it."""

    shutil.rmtree(store / policy_run_dir(run_id), ignore_errors=True)


def measure_arm(cfg: ThroughputConfig, arm: Arm, sigma: float, seed: int, trace: LatencyTrace, rollouts: Rollouts,
                steps: list[StepTime], **kw: object) -> ArmResult:
    """The :class:`ArmResult` of a finished run from its rollouts and its N step records (the
    keyword arguments are ArmResult fields read from the store)."""
    lo, hi = rollouts.t0, steps[-1].end
    window = hi - lo
    waited = trainer_idle(steps, lo, hi)
    eps = rollouts.episodes
    done = [e for e in eps if e.done]
    calls = [c for e in eps for c in e.call_s]
    train_s = (window - waited) / len(steps)
    call_s = statistics.fmean(calls) if calls else 0.0
    inputs = StepInputs(cfg.env(sigma), cfg.batch_size, arm.slots(cfg), call_s, train_s)
    return ArmResult(
        arm=arm.name, sigma=sigma, seed=seed, wall_s=window, steps=len(steps),
        trajectories=sum(s.trajectories for s in steps), action_tokens=sum(s.action_tokens for s in steps),
        trajectories_per_s=sum(s.trajectories for s in steps) / window,
        action_tokens_per_s=sum(s.action_tokens for s in steps) / window,
        episodes_started=len(eps), episodes_completed=len(done),
        trainer_idle=waited / window, rollout_idle=1.0 - rollout_busy(eps, lo, hi) / (cfg.workers * window),
        call_s=call_s, hold_s=statistics.fmean(e.held_s for e in eps) if eps else 0.0,
        episode_s=statistics.fmean(e.end - e.start - e.held_s for e in done) if done else 0.0,
        train_s=train_s, train_compute_s=statistics.fmean(s.step_s - s.wait_s for s in steps),
        predicted_step_s=predicted_step_s(arm.kind, inputs, arm.max_staleness),
        phases=phases(cfg, arm, trace, rollouts, steps) if arm.kind != "async" else None,
        load_average=list(os.getloadavg()), **kw)  # type: ignore[arg-type]


def phases(cfg: ThroughputConfig, arm: Arm, trace: LatencyTrace, r: Rollouts, steps: list[StepTime]) -> Phases:
    """Where the time of a batch-barrier arm goes (see :class:`Phases`)."""
    b = cfg.batch_size
    n = min(len(r.batch_ends), len(steps))
    gaps = [r.batch_starts[k + 1] - r.batch_ends[k] for k in range(n - 1)]
    return Phases(
        rollout_s=statistics.fmean(r.batch_ends[k] - r.batch_starts[k] for k in range(n)),
        env_max_s=statistics.fmean(float(trace.env_seconds(range(k * b, (k + 1) * b)).max()) for k in range(n)),
        pickup_s=statistics.fmean(steps[k].got_batch - r.batch_ends[k] for k in range(n)),
        train_s=statistics.fmean(s.step_s - s.wait_s for s in steps[:n]),
        publish_load_s=statistics.fmean(r.batch_starts[k + 1] - steps[k].end for k in range(n - 1))
        if arm.kind == "sync" and n > 1 else None,
        barrier_s=statistics.fmean(gaps) if gaps else None)
