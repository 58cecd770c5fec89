"""``traj bench learning``: run a preset's warm starts, grid of runs and advantage-quality study in
worker processes, then its analysis and report, all under a fresh directory of the scratch area
(never into the checkout); or redo the analysis of a finished run directory (``--reanalyse``)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trajstore.trainer.apps.learning_bench.analysis import analyse
from trajstore.trainer.apps.learning_bench.arms import BenchError
from trajstore.trainer.apps.learning_bench.harness import run_one
from trajstore.trainer.apps.learning_bench.oracle import QualityConfig
from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
from trajstore.trainer.apps.learning_bench.report import render_report
from trajstore.trainer.apps.learning_bench.spec import RunSpec
from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig

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
    from dataclasses import replace

    t_warm = time.monotonic()
    kinds = {"policy": cfg.warm_start}
    if cfg.needs_moe():  # the MoE critic arms' backbone, fitted to the same demonstrations
        kinds["moe"] = replace(cfg.warm_start, model="tiny-qwen3-moe")
    todo = [(kind, s, json.dumps(asdict(ws))) for kind, ws in kinds.items() for s in cfg.seeds]
    warm: dict[str, dict[int, str]] = {kind: {} for kind in kinds}
    if cfg.processes == 1:
        for kind, s, ws_json in todo:
            warm[kind][s] = _job_warm(str(scratch), s, ws_json)[1]
    else:
        with _pool(cfg.processes) as pool:
            futs = {pool.submit(_job_warm, str(scratch), s, ws_json): kind for kind, s, ws_json in todo}
            for f in as_completed(futs):
                s, d = f.result()
                warm[futs[f]][s] = d
    log(f"warm starts ready for seeds {cfg.seeds} ({', '.join(kinds)}; {time.monotonic() - t_warm:.0f}s)")
    specs = cfg.specs(warm["policy"], warm.get("moe"))
    jobs: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = []
    if cfg.quality is not None:
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
