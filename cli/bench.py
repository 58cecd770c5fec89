"""``traj bench learning``: the learning benchmark (trajstore.trainer.learning_bench.suite)."""

from __future__ import annotations

import json
import time
from typing import Optional

import typer

from trajstore.cli.main import FormatOption, TrajTyper, app, friendly_errors
from trajstore.display import OutputFormat

bench_app = TrajTyper(help="Benchmarks that exercise the whole pipeline.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("learning")
@friendly_errors
def learning_cmd(
    preset: str = typer.Option("full", help="'full' (the LEARNING.md table, about 13-15 min on 2 cores) or 'smoke'"),
    store_root: str = typer.Option("bench-learning-store", help="directory; one store per run under it"),
    out_dir: str = typer.Option("bench/learning_plots", help="plots and table.md go here"),
    tasks: Optional[str] = typer.Option(None, help="comma-separated tasks (guess, sequence); default: the preset's"),
    arms: Optional[str] = typer.Option(None, help="comma-separated arm names; default: the preset's"),
    seeds: Optional[str] = typer.Option(None, help="comma-separated seeds; default: the preset's"),
    workers: Optional[int] = typer.Option(None, min=1, help="runs in parallel (one torch thread each)"),
    conditions: Optional[str] = typer.Option(None, help="comma-separated K:lr pairs, e.g. '0:1e-3,4:3e-3'; "
                                                        "default: the preset's"),
    reuse: bool = typer.Option(False, help="keep runs already finished under --store-root (resume a grid)"),
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Train every arm on every task at each staleness / learning rate and seed through the real
    pipeline; print the results table and save plots."""
    from dataclasses import asdict

    from rich.console import Console

    from trajstore.trainer.learning_bench.harness import get_arm
    from trajstore.trainer.learning_bench.suite import (
        SuiteConfig,
        run_suite,
        save_plots,
        save_results,
        table_rows,
    )

    if preset not in ("full", "smoke"):
        raise ValueError(f"--preset must be 'full' or 'smoke', got {preset!r}")
    over: dict = {"store_root": store_root, "out_dir": out_dir}
    if tasks:
        over["tasks"] = [t.strip() for t in tasks.split(",")]
    if arms:
        over["arms"] = [get_arm(a.strip()).name for a in arms.split(",")]
    if seeds:
        try:
            over["seeds"] = [int(s) for s in seeds.split(",")]
        except ValueError:
            raise ValueError(f"--seeds must be comma-separated integers, got {seeds!r}") from None
    if conditions:
        try:
            over["conditions"] = [(int(c.split(":")[0]), float(c.split(":")[1])) for c in conditions.split(",")]
        except (ValueError, IndexError):
            raise ValueError(f"--conditions must be comma-separated K:lr pairs, got {conditions!r}") from None
    if workers:
        over["workers"] = workers
    over["reuse"] = reuse
    cfg = SuiteConfig.preset(preset, **over)  # type: ignore[arg-type]
    err = Console(stderr=True)
    n = len(cfg.specs())
    err.print(f"traj bench learning: {n} runs, {cfg.workers} worker(s), stores under {cfg.store_root}")
    t0 = time.monotonic()

    def on_done(s, i, total):  # noqa: ANN001
        err.print(f"[{i}/{total}] {s.run_id}: untrained {s.initial_reward:.3f} -> final {s.final_reward:.3f} "
                  f"({s.seconds:.0f}s)", highlight=False)

    results, summaries = run_suite(cfg, on_done=on_done)
    seconds = time.monotonic() - t0
    plots = save_plots(results, cfg.out_dir)
    res_path, table_path = save_results(cfg, results, summaries, seconds)
    rows = table_rows(summaries)
    if fmt is OutputFormat.json:
        typer.echo(json.dumps({"summaries": [asdict(s) for s in summaries], "plots": plots, "results": res_path,
                               "table": table_path, "seconds": seconds}, default=str))
        return
    if fmt is OutputFormat.csv:
        from trajstore.display import TableData, render_tables

        dicts = [asdict(s) for s in summaries]
        render_tables([TableData("summaries", list(dicts[0]) if dicts else [], [tuple(d.values()) for d in dicts])],
                      fmt)
        return
    from trajstore.display import TableData, render_tables

    out = Console()
    render_tables([TableData(f"learning benchmark ({n} runs, {seconds / 60:.1f} min)", list(rows[0]) if rows else [],
                             [tuple(r.values()) for r in rows], keys=["task", "K", "lr", "arm"])], fmt, console=out)
    out.print(f"plots: {', '.join(plots)}\nresults: {res_path}\ntable: {table_path}", highlight=False)
