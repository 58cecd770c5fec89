"""``traj bench throughput`` as one command: every arm at every sigma and seed, one after another
on shared ``traj serve`` and trainer processes, each arm in its own store; the results (one JSON
line per run, as they come), ``results.json`` and ``report.md`` in a fresh folder under the
scratch directory."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trajstore.lifeline import signals_stop
from trajstore.trainer.apps.demo.children import cpu_count
from trajstore.trainer.apps.throughput.config import ThroughputConfig, ThroughputError
from trajstore.trainer.apps.throughput.report import claims, render_report, tables
from trajstore.trainer.apps.throughput.result import ArmResult
from trajstore.trainer.apps.throughput.run import arm_run_id, run_arm
from trajstore.trainer.apps.throughput.topology import Services

SUITE_CONFIG = "suite.json"
"""The suite's :class:`ThroughputConfig`, in its folder."""
RESULTS_LINES = "results.jsonl"
"""One :class:`ArmResult` per line, written as each arm ends (a stopped suite keeps what it ran)."""


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def arm_order(arms: list[str], seed: int) -> list[str]:
    """The arms of one (sigma, seed), rotated by the seed: the machine's load drifts, and no arm
    always runs first or last."""
    k = seed % len(arms)
    return arms[k:] + arms[:k]


def run_suite(cfg: ThroughputConfig, *, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the grid and write its report; return the summary (``out_dir``, ``seconds``, ``claims``,
    ``tables`` as TableData, ``failures``, the load averages). An arm that fails is recorded in
    ``failures`` and the suite goes on.

    Raises:
        ThroughputError: no arm ran at all.
    """

    t0 = time.monotonic()
    out_dir = Path(cfg.scratch) / datetime.now(timezone.utc).strftime("run-%Y%m%dT%H%M%SZ")
    out_dir.mkdir(parents=True, exist_ok=False)
    (out_dir / SUITE_CONFIG).write_text(cfg.model_dump_json(indent=2))
    load_start = _load()
    log(f"traj bench throughput: {len(cfg.sigmas)} sigmas x {len(cfg.seeds)} seeds x {len(cfg.arms)} arms into "
        f"{out_dir} ({cpu_count()} CPUs, load average {load_start})")
    services = Services(cfg, out_dir)
    results: list[ArmResult] = []
    failures: list[dict[str, str]] = []
    # SIGTERM too unwinds through the finally that stops serve and the trainer (trajstore.lifeline.Stopped)
    with signals_stop():
        try:
            started = services.ensure()
            log(f"traj serve and the trainer are up ({started:.0f} s)")
            for sigma in cfg.sigmas:
                for seed in cfg.seeds:
                    for name in arm_order(cfg.arms, seed):
                        arm = next(a for a in cfg.arm_specs if a.name == name)
                        try:
                            r = run_arm(cfg, arm, sigma, seed, services, log=log)
                        except ThroughputError as e:
                            failures.append({"run": arm_run_id(arm, sigma, seed), "error": str(e)})
                            log(f"[red]{arm_run_id(arm, sigma, seed)} failed[/]: {e}")
                            continue
                        results.append(r)
                        with open(out_dir / RESULTS_LINES, "a") as fh:
                            fh.write(r.model_dump_json() + "\n")
                        log(f"{r.run_id}: {cfg.steps} steps in {r.wall_s:.1f} s, staleness mean {r.staleness.token_mean} "
                            f"max {r.staleness.token_max}, audit = trainer: {r.check.equal} (load {_load()})")
        finally:
            services.close()
    if not results:
        raise ThroughputError("no arm ran: " + "; ".join(f"{f['run']}: {f['error']}" for f in failures[:3]))
    return write_report(cfg, results, failures, out_dir=out_dir, seconds=time.monotonic() - t0,
                        load_start=load_start, cpus=cpu_count())


def write_report(cfg: ThroughputConfig, results: list[ArmResult], failures: list[dict[str, str]], *, out_dir: Path,
                 seconds: float, load_start: str, cpus: int) -> dict[str, Any]:
    """``results.json`` and ``report.md`` in `out_dir`; the summary."""
    tabs = tables(cfg, results)
    summary: dict[str, Any] = {
        "out_dir": str(out_dir), "seconds": seconds, "cpus": cpus, "load_start": load_start, "load_end": _load(),
        "claims": claims(cfg, results), "failures": failures}
    (out_dir / "results.json").write_text(json.dumps(
        {**summary, "results": [r.model_dump() for r in results]}, indent=1, default=str))
    (out_dir / "report.md").write_text(render_report(cfg, summary, tabs))
    return {**summary, "tables": tabs}


def reanalyse(out_dir: str | Path) -> tuple[ThroughputConfig, dict[str, Any]]:
    """Redo a finished (or stopped) suite's report from its saved results, without running anything."""
    d = Path(out_dir)
    cfg = ThroughputConfig.model_validate_json((d / SUITE_CONFIG).read_text())
    lines = (d / RESULTS_LINES).read_text().splitlines() if (d / RESULTS_LINES).exists() else []
    results = [ArmResult.model_validate_json(line) for line in lines if line.strip()]
    if not results:
        raise ThroughputError(f"{d / RESULTS_LINES} holds no result")
    prev = json.loads((d / "results.json").read_text()) if (d / "results.json").exists() else {}
    return cfg, write_report(cfg, results, prev.get("failures", []), out_dir=d, seconds=prev.get("seconds", 0.0),
                             load_start=prev.get("load_start", "?"), cpus=prev.get("cpus", 0))
