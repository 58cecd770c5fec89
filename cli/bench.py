"""``traj bench learning``: the learning benchmark (trajstore.trainer.learning_bench.suite)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from trajstore.cli.main import app, friendly_errors

bench_app = typer.Typer(help="Benchmarks that exercise the whole pipeline.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def _ints(text: str, what: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise ValueError(f"--{what} must be comma-separated integers, got {text!r}") from None


@bench_app.command("learning")
@friendly_errors
def learning_cmd(
    preset: str = typer.Option("default", help="default (the bench/LEARNING.md grid, <= 15 min on 2 cores), "
                                               "smoke (<= 1 min) or calibrate (the one-off learning-rate "
                                               "calibration)"),
    scratch: Optional[str] = typer.Option(None, help="directory for cached warm starts and a fresh run directory "
                                                     "(default: <system temp>/trajstore-bench-learning)"),
    seeds: Optional[str] = typer.Option(None, help="comma-separated seeds (default: the preset's)"),
    arms: Optional[str] = typer.Option(None, help="comma-separated arms of the chain task (default: all)"),
    processes: Optional[int] = typer.Option(None, min=1, help="worker processes (default: the preset's)"),
    reanalyse: Optional[str] = typer.Option(None, help="a finished run directory: redo its statistics, figures and "
                                                       "report from the saved results (no training)"),
    fmt: str = typer.Option("table", "--format", help="table or json (the summary)"),
) -> None:
    """Train SAO and its ablations from a supervised warm start under simulated asynchrony, score
    their advantages against an oracle, and report the paper's claims with paired-seed intervals."""
    from rich.console import Console
    from rich.table import Table

    from trajstore.trainer.learning_bench.harness import get_arm
    from trajstore.trainer.learning_bench.suite import SuiteConfig, reanalyse as redo, run_suite

    if preset not in ("default", "smoke", "calibrate"):
        raise ValueError(f"--preset must be default, smoke or calibrate, got {preset!r}")
    if fmt not in ("table", "json"):
        raise ValueError(f"--format must be 'table' or 'json', got {fmt!r}")
    over: dict = {}
    if scratch:
        over["scratch"] = scratch
    if seeds:
        over["seeds"] = _ints(seeds, "seeds")
    if arms:
        over["chain_arms"] = [get_arm(a.strip()).name for a in arms.split(",")]
    if processes:
        over["processes"] = processes
    err = Console(stderr=True)
    if reanalyse:
        summary = redo(reanalyse)
        cfg = SuiteConfig.model_validate_json(open(f"{reanalyse}/config.json").read())
    else:
        cfg = SuiteConfig.preset_config(preset, **over)  # type: ignore[arg-type]
        summary = run_suite(cfg, log=lambda m: err.print(m, highlight=False))
    if fmt == "json":
        typer.echo(json.dumps(summary, default=str))
        return
    out = Console(width=160)
    if "calibration" in summary:
        t = Table(title="learning-rate calibration (SAO, seed 0)", title_justify="left")
        for c in ("policy lr", "median KL / step (nats/token)", "eval start", "eval end"):
            t.add_column(c, justify="right")
        for r in summary["calibration"]:
            t.add_row(f"{r['policy_lr']:g}", f"{r['kl_step_median']:.2e}", f"{r['initial_eval']:.3f}",
                      f"{r['final_eval']:.3f}")
        out.print(t)
        out.print(f"lr for 1e-3 nats/token: {summary['calibrated_lr']:.3g}")
    else:
        t = Table(title=f"paper claims ({len(cfg.seeds)} paired seeds, {summary['seconds'] / 60:.1f} min)",
                  title_justify="left")
        for c in ("comparison", "metric", "difference [95% CI]", "verdict"):
            t.add_column(c)
        for c in summary["claims"]:
            iv = c["interval"]
            t.add_row(f"{c['arm']} - {c['ref']} ({c['task']})", c["metric"],
                      f"{iv['mean']:+.3f} [{iv['low']:+.3f}, {iv['high']:+.3f}]", c["verdict"])
        out.print(t)
    out.print("report:", highlight=False)
    typer.echo(f"{summary['out_dir']}/report.md")
