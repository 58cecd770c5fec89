"""Where a ``traj bench learning`` run's numbers come from: the machine (CPU, cores, load before
and after), the software (Python, torch, transformers) and the commit of the code, written next
to the per-run result files as ``machine.json`` so that a committed copy says which machine
made it. Load averages say whether the machine was shared: timings from a loaded machine are
not idle timings."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import torch
import transformers


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str | None:
    """The checkout's commit (with ``-dirty`` when it has uncommitted changes), or None."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """The machine and software of this process: ``cpu``, ``logical_cpus``, ``affinity_cpus``
    (the CPUs this process may use), ``load_start`` (1/5/15-min load averages), ``python``,
    ``torch``, ``transformers``, ``platform``, ``commit`` and ``started_utc``."""

    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count()
    return {"cpu": _cpu_model(), "logical_cpus": os.cpu_count(), "affinity_cpus": affinity, "load_start": _load(),
            "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "platform": platform.platform(), "commit": _commit(),
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def finish(info: dict[str, Any], seconds: float) -> dict[str, Any]:
    """`info` with ``load_end``, ``wall_seconds`` and ``finished_utc`` added."""
    return {**info, "load_end": _load(), "wall_seconds": round(seconds, 1),
            "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def was_loaded(info: dict[str, Any]) -> bool:
    """Whether the 1-min load average at the start or the end of the run exceeded the CPUs the
    run could use: other work shared the cores, so its wall and CPU times are not idle ones."""
    cpus = info.get("affinity_cpus") or info.get("logical_cpus") or 1
    return any(load and load[0] > cpus for load in (info.get("load_start"), info.get("load_end")))


def describe(info: dict[str, Any]) -> str:
    """One line: ``Intel Xeon ..., 2 CPUs usable, load 5.1 -> 7.9 (1-min), torch 2.13.0, commit abc1234``,
    then ``; resumed <UTC> at commit <c> (<n> results kept)`` for each ``--resume`` session."""
    load = ""
    if info.get("load_start") and info.get("load_end"):
        load = f", load {info['load_start'][0]:g} -> {info['load_end'][0]:g} (1-min average)"
    cpu = ""
    if info.get("cpu_seconds_jobs") and info.get("processes"):
        cpu = (f"; jobs' CPU time {info['cpu_seconds_jobs'] / 60:.1f} min, i.e. about "
               f"{info['cpu_seconds_jobs'] / 60 / info['processes']:.1f} min of wall time on {info['processes']} idle "
               "cores")
        if was_loaded(info):  # CPU time measured under contention (shared caches, SMT) exceeds the idle one
            cpu += " (an estimate, not an idle measurement: CPU time on a loaded machine runs higher)"
    resumed = "".join(f"; resumed {r.get('utc')} at commit {r.get('commit')} ({r.get('kept')} results kept)"
                      for r in info.get("resumed", []))
    return (f"{info.get('cpu', '?')}, {info.get('affinity_cpus', '?')} CPUs usable{load}, Python {info.get('python')}, "
            f"torch {info.get('torch')}, transformers {info.get('transformers')}, commit {info.get('commit')}{cpu}"
            f"{resumed}")
