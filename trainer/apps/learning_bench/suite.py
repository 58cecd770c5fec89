"""``traj bench learning``: run a preset's warm starts, grid of runs and advantage-quality study in
worker processes, then its analysis and report, all under a fresh directory of the scratch area
(never into the checkout); or redo the analysis of a finished run directory from its per-run
result files (``--reanalyse``; a directory committed to git, such as bench/learning_results/,
is read and never written: the new report goes to a fresh directory of the scratch area), or
continue a stopped run in its own directory (``--resume``: :mod:`.resume`).

Each per-run result file appears atomically (written under a temporary name, then renamed), so a
run killed mid-write leaves no half-written result that a resume would trust. The workers exit
with a stopped or killed parent (:mod:`trajstore.trainer.apps.worker_pool`)."""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from trajstore.lifeline import Stopped
from trajstore.trainer.apps.learning_bench.analysis import analyse
from trajstore.trainer.apps.learning_bench.arms import BenchError
from trajstore.trainer.apps.learning_bench.compare import compare_runs
from trajstore.trainer.apps.learning_bench.harness import run_one
from trajstore.trainer.apps.learning_bench.oracle import QualityConfig, advantage_quality
from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
from trajstore.trainer.apps.learning_bench.provenance import describe, finish, machine_info
from trajstore.trainer.apps.learning_bench.report import generated_tables, render_report
from trajstore.trainer.apps.learning_bench.run_files import committed_files, load_results, read_config, read_json
from trajstore.trainer.apps.learning_bench.spec import RunSpec
from trajstore.trainer.apps.learning_bench.sweep import sweep_markdown, sweep_rows
from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig, ensure_warm_start
from trajstore.trainer.apps.scratch import bench_scratch
from trajstore.trainer.apps.worker_pool import run_jobs

RUN_CONFIG = "config.json"
"""A run directory's settings (:class:`SuiteConfig` as JSON), written before any job runs."""

# -- jobs (run in worker processes) --------------------------------------------------------------


# every job reports its CPU time (one torch thread each): on a shared machine wall times say
# little, and the sum of CPU times / worker processes estimates the wall time on idle cores


def _job_warm(scratch: str, seed: int, cfg_json: str) -> tuple[int, str, float]:
    torch.set_num_threads(1)

    c0 = time.process_time()
    cfg = WarmStartConfig(**json.loads(cfg_json))
    return seed, str(ensure_warm_start(scratch, seed, cfg)), time.process_time() - c0


def _job_run(spec_json: str, store: str, out: str) -> dict[str, Any]:
    torch.set_num_threads(1)
    spec = RunSpec.model_validate_json(spec_json)
    c0 = time.process_time()
    res = run_one(spec, store)
    d = {"spec": json.loads(spec.model_dump_json()), "store": res.store, "history": res.history, "evals": res.evals,
         "log_ratio_hist": res.log_ratio_hist, "band": res.band, "staleness_tokens": res.staleness_tokens,
         "seconds": res.seconds, "cpu_seconds": time.process_time() - c0}
    write_result(Path(out), d)
    return d


def _job_quality(warm: str, seed: int, cfg_json: str, out: str) -> dict[str, Any]:
    torch.set_num_threads(1)

    d = json.loads(cfg_json)
    d["critic_iterations"] = tuple(d["critic_iterations"])
    t0, c0 = time.monotonic(), time.process_time()
    res = advantage_quality(warm, seed, QualityConfig(**d))
    res["seconds"] = time.monotonic() - t0
    res["cpu_seconds"] = time.process_time() - c0
    write_result(Path(out), res)
    return res


def write_result(path: Path, result: dict[str, Any]) -> None:
    """`result` as JSON at `path`, atomically: written to a temporary file of the same directory
    (a name :func:`load_results` skips), flushed to disk, then renamed over `path`."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(json.dumps(result))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _fresh(scratch: Path, stem: str) -> Path:
    return scratch / f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{os.getpid()}"


def run_suite(cfg: SuiteConfig, *, log: Callable[[str], None] = lambda _m: None,
              out: Path | None = None) -> dict[str, Any]:
    """Run the preset: warm starts (cached), every run and the advantage-quality study, then the
    analysis. Everything goes to a fresh ``<scratch>/<preset>-<UTC time>-<pid>/`` directory (or
    `out`, which must not exist). With ``cfg.sweep_workers``: the staleness sweep instead
    (:func:`run_sweep`).

    Returns:
        The summary (also written as ``summary.json`` there): paths, timings, per-claim verdicts.
    """
    if cfg.sweep_workers:
        return run_sweep(cfg, log=log)
    t0 = time.monotonic()
    scratch = Path(cfg.scratch).expanduser().resolve()
    out = out or _fresh(scratch, cfg.preset)
    (out / "results").mkdir(parents=True, exist_ok=False)
    (out / "stores").mkdir()
    (out / RUN_CONFIG).write_text(cfg.model_dump_json(indent=2))
    info = machine_info()
    (out / "machine.json").write_text(json.dumps(info, indent=2))
    log(f"traj bench learning --preset {cfg.preset}: writing to {out}")
    return execute(cfg, out, info, {}, log=log, t0=t0)


Job = tuple[str, Callable[..., Any], tuple[Any, ...]]


def plan_jobs(cfg: SuiteConfig, out: Path, warm: dict[str, dict[int, str]]) -> list[Job]:
    """``(result name, job function, arguments)`` of every job of `cfg` (the advantage-quality
    study, then every run, in :meth:`SuiteConfig.specs` order) writing into run directory `out`
    (`warm`: kind -> seed -> warm-start directory, :func:`warm_starts`)."""
    jobs: list[Job] = []
    if cfg.quality is not None:
        qjson = json.dumps(asdict(replace(cfg.quality, policy_lr=cfg.policy_lr)))
        for s in cfg.seeds:
            jobs.append((f"quality-s{s}", _job_quality,
                         (warm["policy"][s], s, qjson, str(out / "results" / f"quality-s{s}.json"))))
    for sp in cfg.specs(warm["policy"], warm.get("moe")):
        name = f"{sp.run_id}-lr{sp.policy_lr:g}" if cfg.calibrate_lrs else sp.run_id
        jobs.append((name, _job_run, (sp.model_dump_json(), str(out / "stores" / name),
                                      str(out / "results" / f"{name}.json"))))
    return jobs


def warm_starts(cfg: SuiteConfig, processes: int, log: Callable[[str], None]) -> tuple[dict[str, dict[int, str]], float]:
    """The warm starts `cfg` needs (kind -> seed -> directory; cached under ``cfg.scratch``,
    trained there when missing) and the CPU seconds spent training them."""
    t_warm = time.monotonic()
    scratch = Path(cfg.scratch).expanduser().resolve()
    kinds = {"policy": cfg.warm_start}
    if cfg.needs_moe():  # the MoE critic arms' backbone, fitted to the same demonstrations
        kinds["moe"] = replace(cfg.warm_start, model="tiny-qwen3-moe")
    todo = [(kind, s, json.dumps(asdict(ws))) for kind, ws in kinds.items() for s in cfg.all_seeds()]
    warm: dict[str, dict[int, str]] = {kind: {} for kind in kinds}
    cpu = [0.0]

    def got(kind: str, r: tuple[int, str, float]) -> None:
        warm[kind][r[0]] = r[1]
        cpu[0] += r[2]

    # the job names are the kinds: several jobs share one, and each result names its seed
    run_jobs([(kind, _job_warm, (str(scratch), s, ws_json)) for kind, s, ws_json in todo], processes, got)
    log(f"warm starts ready for seeds {cfg.all_seeds()} ({', '.join(kinds)}; {time.monotonic() - t_warm:.0f}s)")
    return warm, cpu[0]


def execute(cfg: SuiteConfig, out: Path, info: dict[str, Any], kept: dict[str, Any], *,
            log: Callable[[str], None], t0: float, processes: int | None = None) -> dict[str, Any]:
    """Run every job of `cfg` whose result is not in `kept` (name -> result, from an earlier
    session of the run directory `out`), then the analysis and report (:func:`_write`), with
    `processes` workers (default ``cfg.processes``).

    Raises:
        Stopped: SIGTERM/SIGINT (the workers are gone; the finished results stay in `out`).
    """
    processes = processes or cfg.processes
    done: dict[str, Any] = dict(kept)
    try:
        warm, warm_cpu = warm_starts(cfg, processes, log)
        jobs = [j for j in plan_jobs(cfg, out, warm) if j[0] not in kept]
        for name, _fn, _args in jobs:  # a stopped session's store of a run without a result: start it afresh
            if (out / "stores" / name).exists():
                shutil.rmtree(out / "stores" / name)
        total = len(kept) + len(jobs)
        if kept:
            log(f"{len(kept)} results kept, {len(jobs)} jobs to run")

        def finished(name: str, result: Any) -> None:
            done[name] = result
            log(f"[{len(done)}/{total}] {name} ({time.monotonic() - t0:.0f}s)")

        run_jobs(jobs, processes, finished)
    except Stopped as e:
        raise Stopped(e.signum, f"{e.message or e}; {len(done)} results in {out} (continue with: "
                                f"traj bench learning --resume {out})") from None
    summary = analyse(cfg, done, out)
    summary["seconds"] = time.monotonic() - t0
    cpu = warm_cpu + sum(d.get("cpu_seconds", 0.0) for d in done.values())
    info = finish(info, summary["seconds"])
    info["cpu_seconds_jobs"] = round(cpu, 1)  # warm starts (trained here, not cached), runs, quality study
    info["warm_start_cpu_seconds"] = round(warm_cpu, 1)
    info["processes"] = processes
    (out / "machine.json").write_text(json.dumps(info, indent=2))
    return _write(cfg, summary, out, info)


def run_sweep(cfg: SuiteConfig, *, log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """The staleness sweep: the preset once per worker count of ``cfg.sweep_workers``, each a
    complete run directory ``workers-<n>/`` (warm starts shared through the scratch area's cache)
    under a fresh ``<scratch>/sweep-<preset>-<UTC time>-<pid>/``, then ``sweep.md`` there
    (:mod:`.sweep`).

    Returns:
        ``out_dir``, ``report`` (sweep.md), ``sweep`` (:func:`~.sweep.sweep_rows`), ``seconds``,
        ``claims`` (empty: each point has its own), also written as ``summary.json``.
    """
    t0 = time.monotonic()
    parent = _fresh(Path(cfg.scratch).expanduser().resolve(), f"sweep-{cfg.preset}")
    parent.mkdir(parents=True)
    (parent / "config.json").write_text(cfg.model_dump_json(indent=2))
    points = []
    for w in cfg.sweep_workers:
        log(f"staleness sweep: {w} simulated rollout workers")
        sub = cfg.model_copy(update={"workers": w, "sweep_workers": []})
        points.append((w, run_suite(sub, log=log, out=parent / f"workers-{w}")))
    rows = sweep_rows(points)
    (parent / "sweep.md").write_text(sweep_markdown(rows))
    summary = {"out_dir": str(parent), "report": str(parent / "sweep.md"), "sweep": rows, "claims": [],
               "seconds": time.monotonic() - t0}
    (parent / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def _write(cfg: SuiteConfig, summary: dict[str, Any], out: Path, info: dict[str, Any] | None) -> dict[str, Any]:
    """summary.json, report.md and tables.md (bench/LEARNING.md's generated tables, with their
    markers) of a run, in `out`."""
    summary["out_dir"] = str(out)
    summary["report"] = str(out / "report.md")
    if info:
        summary["machine"] = describe(info)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "report.md").write_text(render_report(cfg, summary))
    (out / "tables.md").write_text("".join(f"<!-- generated:{name} -->\n{table}\n<!-- /generated:{name} -->\n\n"
                                           for name, table in generated_tables(summary).items()))
    return summary


def _label(run_dir: Path) -> str:
    """``<directory name> (<cpu>)``, the cpu from its ``machine.json`` when there is one."""
    m = run_dir / "machine.json"
    cpu = read_json(m).get("cpu") if m.is_file() else None
    return f"{run_dir.resolve().name} ({cpu})" if cpu else run_dir.resolve().name


def planned_names(cfg: SuiteConfig, run_dir: Path) -> list[str]:
    """The result names `cfg` plans (the quality study, then every run), in plan order."""
    placeholder = {s: "" for s in cfg.all_seeds()}
    return [j[0] for j in plan_jobs(cfg, run_dir, {"policy": placeholder, "moe": placeholder})]


def read_run(src: Path, option: str = "--reanalyse") -> tuple[SuiteConfig, dict[str, Any]]:
    """A finished run directory's config and results, checked against each other: every result
    its config plans is there and nothing else (`option`: how the messages name the directory).

    Raises:
        BenchError: not a run directory, a staleness sweep's parent, an unreadable file (named),
            results missing (a stopped run: resume it) or of runs the config does not plan.
    """
    if not (src / RUN_CONFIG).is_file() or not (src / "results").is_dir():
        raise BenchError(f"{option} {src}: not a run directory (no config.json and results/ there)")
    cfg = read_config(src / RUN_CONFIG)
    if cfg.sweep_workers:
        raise BenchError(f"{option} {src}: a staleness sweep; give one of its workers-<n>/ directories")
    done = load_results(src)
    if not done:
        raise BenchError(f"{option} {src}: no result files in {src / 'results'}")
    names = planned_names(cfg, src)
    missing = [n for n in names if n not in done]
    if missing:
        raise BenchError(f"{option} {src}: {len(missing)} of the {len(names)} results its config.json plans are "
                         f"missing ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); a stopped run "
                         f"finishes with --resume {src}")
    extra = sorted(set(done) - set(names))
    if extra:
        raise BenchError(f"{option} {src}: {len(extra)} result files are of runs its config.json does not plan "
                         f"({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''}): another run's files?")
    return cfg, done


def reanalyse(run_dir: str | os.PathLike[str], *, scratch: str | os.PathLike[str] | None = None,
              figures: bool = True, compare: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Redo the statistics, figures, report and generated tables of a finished run directory
    from its per-run result files (no training). Written into that directory, unless it holds
    files committed to git (bench/learning_results/...): then into a fresh
    ``<scratch>/reanalyse-<name>-<time>-<pid>/`` and the committed files are only read. With
    `compare`, a second run directory of the same preset (another machine): its claims are
    decided the same way and set beside these (:mod:`.compare`; ``summary["comparison"]`` and the
    ``compare`` table of tables.md).

    A staleness sweep's directory (its ``config.json`` has ``sweep_workers``) is reanalysed point
    by point (:func:`reanalyse_sweep`; no `compare`).

    Raises:
        BenchError: see :func:`read_run` (for `run_dir` and `compare`); `compare` is `run_dir`
            itself or a run of another preset or task set, or is given with a sweep.
    """
    src = Path(run_dir)
    if (src / RUN_CONFIG).is_file() and read_config(src / RUN_CONFIG).sweep_workers:
        if compare is not None:
            raise BenchError(f"--compare: not with a staleness sweep ({src}); compare two of its workers-<n>/ "
                             "directories, or one with another run's")
        return reanalyse_sweep(src, scratch=scratch, figures=figures)
    cfg, done = read_run(src)
    info = read_json(src / "machine.json") if (src / "machine.json").is_file() else None
    old = read_json(src / "summary.json") if (src / "summary.json").is_file() else {}
    other = Path(compare) if compare is not None else None
    if other is not None:  # every file of both runs read and checked before anything is written
        if other.resolve() == src.resolve():
            raise BenchError(f"--compare {other}: the run given to --reanalyse itself; compare it with another run")
        cfg_b, done_b = read_run(other, "--compare")
        if (cfg_b.preset, cfg_b.chain_task) != (cfg.preset, cfg.chain_task):
            raise BenchError(f"--compare {other}: a run of preset {cfg_b.preset} on task {cfg_b.chain_task}, not of "
                             f"{cfg.preset} on {cfg.chain_task} as {src}: its claims are not the same claims")
    out = src
    if committed_files(src):
        base = Path(scratch).expanduser().resolve() if scratch else bench_scratch("learning")
        if base.is_relative_to(src.resolve()):
            raise BenchError(f"--scratch {scratch}: inside the committed run directory {src}, which is only read; "
                             "give a directory outside it")
        out = _fresh(base, f"reanalyse-{src.resolve().name}")
        out.mkdir(parents=True)
    summary = analyse(cfg, done, out, figures=figures)
    summary["seconds"] = (info or {}).get("wall_seconds", old.get("seconds", math.nan))
    if other is not None:
        summary_b = analyse(cfg_b, done_b, out, figures=False)
        summary["comparison"] = {"a": _label(src), "b": _label(other), **compare_runs(summary, summary_b)}
    return _write(cfg, summary, out, info)


def reanalyse_sweep(sweep_dir: str | os.PathLike[str], *, scratch: str | os.PathLike[str] | None = None,
                    figures: bool = True) -> dict[str, Any]:
    """Redo a staleness sweep's table from its points' result files: :func:`reanalyse` of each
    ``workers-<n>/`` directory its ``config.json`` names (each checked as a run directory), then
    ``sweep.md`` and ``tables.md`` (the generated ``sweep`` table, each point's directory as given
    here, e.g. ``bench/learning_results/staleness/workers-32``) in the sweep's directory, or under
    `scratch` when it holds committed files, as :func:`reanalyse`.

    Returns:
        ``out_dir``, ``report`` (sweep.md), ``sweep`` (:func:`~.sweep.sweep_rows`), ``claims`` (empty).

    Raises:
        BenchError: a point's directory is missing or not a finished run (:func:`read_run`).
    """
    src = Path(sweep_dir)
    cfg = read_config(src / RUN_CONFIG)
    for w in cfg.sweep_workers:  # every point checked before anything is written
        read_run(src / f"workers-{w}")
    out = src
    if committed_files(src):
        base = Path(scratch).expanduser().resolve() if scratch else bench_scratch("learning")
        out = _fresh(base, f"reanalyse-{src.resolve().name}")
    points = []
    for w in cfg.sweep_workers:
        summary = reanalyse(src / f"workers-{w}", scratch=out, figures=figures)
        points.append((w, {**summary, "out_dir": str(src / f"workers-{w}")}))
    rows = sweep_rows(points)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.md").write_text(sweep_markdown(rows))
    (out / "tables.md").write_text(f"<!-- generated:sweep -->\n{sweep_markdown(rows).rstrip()}\n<!-- /generated:sweep -->\n\n")
    return {"out_dir": str(out), "report": str(out / "sweep.md"), "sweep": rows, "claims": []}
