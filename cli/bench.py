"""``traj bench learning`` and ``traj bench throughput``: the learning benchmark
(trajstore.trainer.apps.learning_bench) and the throughput benchmark (trajstore.trainer.apps.throughput)."""

from __future__ import annotations

import math
from typing import Any

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, new_console, print_command, render_record, render_tables
from trajstore.cli.errors import InvalidOptionError, friendly_errors
from trajstore.cli.options import FormatOption
from trajstore.tables import TableData

bench_app = TrajTyper(help="Benchmarks that exercise the whole pipeline.", no_args_is_help=True)
commands = TrajTyper()
commands.add_typer(bench_app, name="bench")


def _numbers(text: str, what: str, kind: type[int] | type[float] = int) -> list:
    """``--seeds 0,1,2``: the comma-separated numbers of option `what`, each of `kind`.

    Raises:
        InvalidOptionError: a value that is not one (naming the option).
    """
    try:
        return [kind(s) for s in text.split(",")]
    except ValueError:
        noun = "integers" if kind is int else "numbers"
        raise InvalidOptionError(f"invalid option --{what}: must be comma-separated {noun} (got {text!r})") from None


def _print_report_path(out: Any, summary: dict[str, Any]) -> None:
    """Where the run's report is, as a command-line path to copy."""
    out.print("report:", highlight=False)
    print_command(out, f"{summary['out_dir']}/report.md")


@bench_app.command("learning")
@friendly_errors
def learning_cmd(
    preset: str = typer.Option("default", help="default (the bench/LEARNING.md grid, sized for <= 20 min on 2 idle "
                                               "cores), smoke (CI: one short run of everything the default runs), "
                                               "calibrate (the one-off learning-rate calibration) or long (4 arms, "
                                               "400 policy steps)"),
    scratch: str | None = typer.Option(None, help="directory for cached warm starts and a fresh run directory "
                                                     "(default: <system temp>/trajstore-bench-learning)"),
    seeds: str | None = typer.Option(None, help="comma-separated seeds (default: the preset's)"),
    arms: str | None = typer.Option(None, help="comma-separated arms of the chain task (default: the preset's)"),
    processes: int | None = typer.Option(None, min=1, help="worker processes (default: the preset's)"),
    mismatch: str | None = typer.Option(None, help="the rollout engine's mismatch model: noise (bf16 + Gaussian logit "
                                                      "noise, the default) or engine (float8 LM head + heavy-tailed "
                                                      "logit noise, shaped like a real engine)"),
    reanalyse: str | None = typer.Option(None, help="a finished run directory (or a committed copy of its result "
                                                       "files, e.g. bench/learning_results/default): redo its "
                                                       "statistics, figures, report and bench/LEARNING.md's tables "
                                                       "from the per-run results (no training); a committed "
                                                       "directory is only read, the output goes under --scratch"),
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Train SAO and its ablations from a supervised warm start under simulated asynchrony, score
    their advantages against an oracle, and report the paper's claims with paired-seed intervals."""
    # here, not at import: the learning bench imports torch (seconds of every traj command's start-up)
    from trajstore.trainer.apps.learning_bench.arms import BenchError, get_arm
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
    from trajstore.trainer.apps.learning_bench.suite import reanalyse as redo
    from trajstore.trainer.apps.learning_bench.suite import run_suite

    if preset not in ("default", "smoke", "calibrate", "long"):
        raise InvalidOptionError(f"invalid option --preset: must be default, smoke, calibrate or long (got {preset!r})")
    if mismatch is not None and mismatch not in ("noise", "engine"):
        raise InvalidOptionError(f"invalid option --mismatch: must be noise or engine (got {mismatch!r})")
    over: dict = {}
    if scratch:
        over["scratch"] = scratch
    if seeds:
        over["seeds"] = _numbers(seeds, "seeds")
    if arms:
        try:
            over["chain_arms"] = [get_arm(a.strip()).name for a in arms.split(",")]
        except BenchError as e:
            raise InvalidOptionError(f"invalid option --arms: {e}") from None
    if processes:
        over["processes"] = processes
    if mismatch:
        over["mismatch"] = mismatch
    err = new_console(stderr=True)
    if reanalyse:
        summary = redo(reanalyse, scratch=scratch)
        cfg = SuiteConfig.model_validate_json(open(f"{reanalyse}/config.json").read())
    else:
        cfg = SuiteConfig.preset_config(preset, **over)  # type: ignore[arg-type]
        summary = run_suite(cfg, log=lambda m: err.print(m, highlight=False))
    if fmt is OutputFormat.json:
        render_record("traj bench learning", summary, fmt)
        return
    if "calibration" in summary:
        tables = [TableData("learning-rate calibration (SAO, seed 0)",
                            ["policy_lr", "kl_step_median", "initial_eval", "final_eval"],
                            [(r["policy_lr"], r["kl_step_median"], r["initial_eval"], r["final_eval"])
                             for r in summary["calibration"]], keys=["policy_lr"])]
    else:
        n_seeds = len(cfg.seeds)
        # one seed (smoke) has no interval: no CI columns of nan, and the title says why
        with_ci = n_seeds >= 2
        minutes = summary.get("seconds", math.nan) / 60
        cols = ["comparison", "metric", "difference", *(["ci_low", "ci_high", "p_holm"] if with_ci else []), "verdict"]
        tables = [TableData(f"paper claims ({f'{n_seeds} paired seeds' if with_ci else f'{n_seeds} seed, CI n/a'}"
                            + (f", {minutes:.1f} min)" if math.isfinite(minutes) else ")"), cols,
                            [(f"{c['arm']} - {c['ref']} ({c['task']})", c["metric"], c["interval"]["mean"],
                              *((c["interval"]["low"], c["interval"]["high"], c["interval"].get("p_holm", math.nan))
                                if with_ci else ()), c["verdict"])
                             for c in summary["claims"]],
                            keys=["comparison", "metric"], wrap=["verdict"])]
    out = new_console()
    render_tables(tables, fmt, console=out)
    if fmt is OutputFormat.table:
        if "calibration" in summary:
            out.print(f"lr for 1e-3 nats/token: {summary['calibrated_lr']:.3g}", highlight=False)
        _print_report_path(out, summary)


@bench_app.command("throughput")
@friendly_errors
def throughput_cmd(
    preset: str = typer.Option("default", help="default (3 sigmas x 3 seeds x 6 arms, the bench/RESULTS.md grid) "
                                               "or smoke (every arm once at sigma 1, 2 short steps)"),
    scratch: str | None = typer.Option(None, help="a fresh run directory is made under it (default: <system "
                                                     "temp>/trajstore-bench-throughput)"),
    sigmas: str | None = typer.Option(None, help="comma-separated log-sigmas of the tool-call latency "
                                                    "(default: the preset's)"),
    seeds: str | None = typer.Option(None, help="comma-separated seeds (default: the preset's)"),
    arms: str | None = typer.Option(None, help="comma-separated arms: sync, one-step, async-N (N = the proxy's "
                                                  "--max-staleness) (default: the preset's)"),
    steps: int | None = typer.Option(None, min=1, help="policy steps each arm runs to (default: the preset's)"),
    batch_size: int | None = typer.Option(None, min=1, help="trajectories per step (default: the preset's)"),
    workers: int | None = typer.Option(None, min=1, help="rollout slots, every arm (default: the preset's)"),
    reanalyse: str | None = typer.Option(None, help="a finished or stopped run directory: redo its report from the "
                                                       "saved results (nothing runs)"),
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Measure what asynchrony buys on the real topology (traj serve -> traj proxy -> store -> traj train
    --follow, a tiny random model, tool calls of lognormal latency): time to N policy steps, throughput,
    idle time and staleness of a synchronous barrier, one-step off-policy and --max-staleness arms on
    the same paired latency trace, beside a fork-join model's prediction."""
    # here, not at import: the throughput bench imports the HTTP stack (FastAPI, the proxy extra)
    from trajstore.trainer.apps.throughput.config import Arm, ThroughputConfig, ThroughputError
    from trajstore.trainer.apps.throughput.suite import reanalyse as redo
    from trajstore.trainer.apps.throughput.suite import run_suite

    if preset not in ("default", "smoke"):
        raise InvalidOptionError(f"invalid option --preset: must be default or smoke (got {preset!r})")
    over: dict = {}
    if scratch:
        over["scratch"] = scratch
    if sigmas:
        over["sigmas"] = _numbers(sigmas, "sigmas", float)
        if any(s <= 0 for s in over["sigmas"]):
            raise InvalidOptionError(f"invalid option --sigmas: must be positive (got {sigmas!r})")
    if seeds:
        over["seeds"] = _numbers(seeds, "seeds")
    if arms:
        try:
            over["arms"] = [Arm.parse(a).name for a in arms.split(",")]
        except ThroughputError as e:
            raise InvalidOptionError(f"invalid option --arms: {e}") from None
    over.update({k: v for k, v in (("steps", steps), ("batch_size", batch_size), ("workers", workers)) if v})
    err = new_console(stderr=True)
    if reanalyse:
        cfg, summary = redo(reanalyse)
    else:
        cfg = ThroughputConfig.preset_config(preset, **over)  # type: ignore[arg-type]
        summary = run_suite(cfg, log=lambda m: err.print(m, highlight=False, soft_wrap=True))
    tabs: list[TableData] = [TableData("throughput.claims", ["claim", "figures", "holds"],
                                       [(c["claim"], c["figures"], "yes" if c["holds"] else "no")
                                        for c in summary["claims"]], keys=["claim"], wrap=["claim", "figures"]),
                             *summary["tables"]]
    if fmt is OutputFormat.json:
        render_record("traj bench throughput", {k: v for k, v in summary.items() if k != "tables"} | {
            "tables": {t.name: [dict(zip(t.columns, r)) for r in t.rows] for t in summary["tables"]}}, fmt)
        return
    out = new_console()
    render_tables(tabs, fmt, console=out)
    if fmt is OutputFormat.table:
        for f in summary["failures"]:
            err.print(f"failed: {f['run']}: {f['error']}", highlight=False, soft_wrap=True)
        _print_report_path(out, summary)
