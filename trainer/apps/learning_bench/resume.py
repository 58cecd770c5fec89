"""``traj bench learning --resume RUN_DIR``: continue a stopped run in its own directory, with its
own ``config.json``. Every job whose result file is there and parses is kept (result files appear
atomically, :func:`~.suite.write_result`; a run's kept result must also be of the run the config
plans, warm-start paths aside); the others run, then the analysis and report as for a run that
was never stopped. Each session is recorded in ``machine.json`` under ``resumed`` (UTC time,
commit, results kept and run), which the report's provenance line repeats."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trajstore.trainer.apps.learning_bench.arms import BenchError
from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
from trajstore.trainer.apps.learning_bench.provenance import machine_info
from trajstore.trainer.apps.learning_bench.run_files import committed_files, read_config, read_json, read_result
from trajstore.trainer.apps.learning_bench.suite import RUN_CONFIG, execute, plan_jobs, planned_names

MACHINE_LOCAL = ("scratch", "processes")
"""Settings a resumed session may change: where warm starts are cached and how many worker
processes run (neither changes a result)."""
WARM_PATHS = ("warm_start", "critic_warm_start")
"""Fields of a run's spec that name a directory of this machine, not what the run does."""


def stored_config(run_dir: Path) -> SuiteConfig:
    """The run directory's ``config.json``.

    Raises:
        BenchError: no ``config.json`` and ``results/`` there, or a staleness sweep's parent
            directory (each ``workers-<n>/`` below it resumes on its own).
    """
    if not (run_dir / RUN_CONFIG).is_file() or not (run_dir / "results").is_dir():
        raise BenchError(f"--resume {run_dir}: not a run directory (no config.json and results/ there)")
    cfg = read_config(run_dir / RUN_CONFIG)
    if cfg.sweep_workers:
        raise BenchError(f"--resume {run_dir}: a staleness sweep; resume each of its workers-<n>/ directories")
    return cfg


def check_options(cfg: SuiteConfig, preset: str | None, options: dict[str, Any]) -> None:
    """Refuse a preset or option given with ``--resume`` that disagrees with the stored config
    (settings of :data:`MACHINE_LOCAL` may change).

    Raises:
        BenchError: naming the first differing setting, its stored and its given value.
    """
    if preset is not None and preset != cfg.preset:
        raise BenchError(f"--resume: the run was started with --preset {cfg.preset}, not {preset} (config.json)")
    for key, value in options.items():
        if key not in MACHINE_LOCAL and getattr(cfg, key) != value:
            raise BenchError(f"--resume: the run's {key} is {getattr(cfg, key)!r} in config.json, not {value!r}; "
                             "resume without it (every setting comes from config.json)")


def kept_results(cfg: SuiteConfig, run_dir: Path, log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """The results of `run_dir` that a resume keeps: job name -> result, for every job `cfg`
    plans whose ``results/<name>.json`` (or ``.json.gz``) reads as a result
    (:func:`~.run_files.read_result`: complete, with a result's fields); one that does not is
    logged and run again.

    Raises:
        BenchError: a kept run's spec differs from the one `cfg` plans (naming the run and field).
    """
    placeholder = {s: "(not built)" for s in cfg.all_seeds()}
    kept = {}
    for name, _fn, args in plan_jobs(cfg, run_dir, {"policy": placeholder, "moe": placeholder}):
        path = next((p for p in (run_dir / "results" / f"{name}.json", run_dir / "results" / f"{name}.json.gz")
                     if p.is_file()), None)
        if path is None:
            continue
        try:
            result = read_result(path)
        except BenchError as e:
            log(f"not a complete result: {e}; running {name} again")
            continue
        if "spec" in result:
            planned = json.loads(args[0])
            diff = [k for k in planned if k not in WARM_PATHS and result["spec"].get(k) != planned[k]]
            if diff:
                raise BenchError(f"--resume {run_dir}: {path.name} is a run with {diff[0]}={result['spec'].get(diff[0])!r}, "
                                 f"but config.json plans {diff[0]}={planned[diff[0]]!r}")
        kept[name] = result
    return kept


def plan(run_dir: str | os.PathLike[str], preset: str | None = None,
         options: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """What a resume of `run_dir` would do: ``kept`` and ``to_run`` job names, in plan order
    (`preset`, `options`: as given on the command line, :func:`check_options`)."""
    d = Path(run_dir)
    cfg = stored_config(d)
    check_options(cfg, preset, options or {})
    kept = kept_results(cfg, d)
    names = planned_names(cfg, d)
    return {"kept": [n for n in names if n in kept], "to_run": [n for n in names if n not in kept]}


def resume_suite(run_dir: str | os.PathLike[str], *, preset: str | None = None, options: dict[str, Any] | None = None,
                 scratch: str | None = None, processes: int | None = None,
                 log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Continue the stopped run in `run_dir` (module docstring); `scratch` and `processes`
    override the stored ones for this session (warm starts are looked up or trained there);
    `preset` and `options` (command-line settings) must agree with the stored config
    (:func:`check_options`).

    Returns:
        The summary, as :func:`~.suite.run_suite`'s.

    Raises:
        BenchError: see :func:`stored_config`, :func:`check_options` and :func:`kept_results`;
            `run_dir` holds files committed to git (a committed result is only read).
        Stopped: SIGTERM/SIGINT again (resume again).
    """
    t0 = time.monotonic()
    d = Path(run_dir).resolve()
    cfg = stored_config(d)
    if committed_files(d):
        raise BenchError(f"--resume {run_dir}: holds files committed to git, which the benchmark never writes over; "
                         "copy the directory elsewhere and resume the copy")
    check_options(cfg, preset, options or {})
    run_cfg = cfg.model_copy(update={"scratch": scratch}) if scratch else cfg
    kept = kept_results(cfg, d, log)
    info = read_json(d / "machine.json") if (d / "machine.json").is_file() else machine_info()
    now = machine_info()
    session = {"utc": now["started_utc"], "commit": now["commit"], "kept": len(kept), "cpu": now["cpu"]}
    info["resumed"] = [*info.get("resumed", []), session]
    (d / "machine.json").write_text(json.dumps(info, indent=2))  # recorded before any job runs
    (d / "stores").mkdir(exist_ok=True)
    log(f"traj bench learning --resume {d}: {len(kept)} results kept")
    return execute(run_cfg, d, info, kept, log=log, t0=t0, processes=processes)
