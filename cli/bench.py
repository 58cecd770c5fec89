"""``traj bench learning`` and ``traj bench throughput``: the learning benchmark
(trajstore.trainer.apps.learning_bench) and the throughput benchmark (trajstore.trainer.apps.throughput)."""

from __future__ import annotations

from pathlib import Path
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


def _numbers(text: str, what: str, kind: type[int] | type[float] = int, *, minimum: int | None = None,
             maximum: int | None = None, unique: bool = False) -> list:
    """``--seeds 0,1,2``: the comma-separated numbers of option `what`, each of `kind`, within
    [`minimum`, `maximum`] where given, each once when `unique`.

    Raises:
        InvalidOptionError: a value that is not one, out of range or repeated (naming the option).
    """
    try:
        values = [kind(s) for s in text.split(",")]
    except ValueError:
        noun = "integers" if kind is int else "numbers"
        raise InvalidOptionError(f"invalid option --{what}: must be comma-separated {noun} (got {text!r})") from None
    for v in values:
        if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            bounds = (f"from {minimum} to {maximum}" if minimum is not None and maximum is not None
                      else f"at least {minimum}" if minimum is not None else f"at most {maximum}")
            raise InvalidOptionError(f"invalid option --{what}: each value must be {bounds} (got {v})")
    if unique and len(set(values)) < len(values):
        twice = next(v for v in values if values.count(v) > 1)
        raise InvalidOptionError(f"invalid option --{what}: {twice} is given twice")
    return values


def _print_report_path(out: Any, summary: dict[str, Any]) -> None:
    """Where the run's report is, as a command-line path to copy."""
    out.print("report:", highlight=False)
    print_command(out, summary.get("report", f"{summary['out_dir']}/report.md"))


MAX_SEEDS = 10_000
"""The most paired seeds a claim may ask for (``--claim-seeds``); the power preset's largest is 64."""
MAX_SEED = 2**31 - 1
"""The largest seed (``--seeds``): torch and numpy take any seed up to it."""


def _claim_seeds(text: str) -> dict[str, int]:
    """``KEY=N,...`` -> {claim key: seeds}, every key one of the benchmark's claims, once.

    Raises:
        InvalidOptionError: a part that is not ``KEY=N`` with a known claim and 1 <= N <=
            :data:`MAX_SEEDS`, or a key given twice.
    """
    # here, not at import: the learning bench's package imports torch
    from trajstore.trainer.apps.learning_bench.claims import CLAIMS

    known = {c.key for c in CLAIMS}
    out: dict[str, int] = {}
    for part in text.split(","):
        key, _, n = part.strip().partition("=")
        n = n.strip()
        if key not in known or not (n.isascii() and n.isdigit()) or not 1 <= int(n) <= MAX_SEEDS:
            raise InvalidOptionError(f"invalid option --claim-seeds: {part.strip()!r} is not KEY=N with KEY a claim "
                                     f"({', '.join(sorted(known))}) and N from 1 to {MAX_SEEDS}")
        if key in out:
            raise InvalidOptionError(f"invalid option --claim-seeds: {key} is given twice")
        out[key] = int(n)
    return out


TRAINING_OPTIONS = ("preset", "seeds", "arms", "processes", "workers", "sweep_workers", "claim_seeds", "mismatch")
"""Options that say what to train: with ``--reanalyse`` the run's own config.json says that."""


@bench_app.command("learning")
@friendly_errors
def learning_cmd(
    preset: str | None = typer.Option(None, help="default (the preset when none is given; the bench/LEARNING.md grid: "
                                               "16 min on 2 idle Intel Xeon cores before the replay arm; with it 45 "
                                               "min on 2 busy AMD EPYC cores, 55 CPU-min), smoke (CI: one short run of everything the default runs), "
                                               "calibrate (the one-off learning-rate calibration), long (4 arms, "
                                               "400 policy steps, 10 seeds), power (the DIS and critic claims with "
                                               "the seeds 80 % power needs), held-out (the power preset's arms on "
                                               "chain100, evaluated on held-out instances) or staleness (the DIS "
                                               "claims' arms at 32, 64, 128 and 256 simulated rollout workers)"),
    scratch: str | None = typer.Option(None, help="directory for cached warm starts and a fresh run directory "
                                                     "(default: <system temp>/trajstore-bench-learning)"),
    seeds: str | None = typer.Option(None, help="comma-separated seeds (default: the preset's)"),
    arms: str | None = typer.Option(None, help="comma-separated arms of the chain task (default: the preset's)"),
    processes: int | None = typer.Option(None, min=1, help="worker processes (default: the preset's)"),
    workers: int | None = typer.Option(None, min=1, help="simulated rollout workers in flight (more: staler "
                                                         "batches; default: the preset's, 64)"),
    sweep_workers: str | None = typer.Option(None, help="comma-separated worker counts: a staleness sweep, one run "
                                                           "of the preset per count (default: the preset's)"),
    claim_seeds: str | None = typer.Option(None, help="paired seeds per claim, KEY=N,... (e.g. dis-vs-none=64): an "
                                                         "arm runs every seed any of its claims asks for"),
    mismatch: str | None = typer.Option(None, help="the rollout engine's mismatch model: noise (bf16 + Gaussian logit "
                                                      "noise, the default) or engine (float8 LM head + heavy-tailed "
                                                      "logit noise, shaped like a real engine)"),
    reanalyse: str | None = typer.Option(None, help="a finished run directory (or a committed copy of its result "
                                                       "files, e.g. bench/learning_results/default; or a staleness "
                                                       "sweep's, e.g. bench/learning_results/staleness): redo its "
                                                       "statistics, figures, report and bench/LEARNING.md's tables "
                                                       "from the per-run results (no training); a committed "
                                                       "directory is only read, the output goes under --scratch"),
    compare: str | None = typer.Option(None, help="with --reanalyse: a second run directory of the same preset "
                                                     "(e.g. another machine's, bench/learning_results/default-idle); "
                                                     "each claim's direction, Holm p and verdict in both runs, side "
                                                     "by side, in the report and tables.md"),
    resume: str | None = typer.Option(None, help="a stopped run directory: continue it there with its own "
                                                    "config.json (every result file there is kept, the rest runs, "
                                                    "then the report); --scratch and --processes may change, any "
                                                    "other option must agree with config.json"),
    dry_run: bool = typer.Option(False, "--dry-run/--no-dry-run", help="with --resume: list the results it keeps and the jobs "
                                                          "it would run, and run nothing"),
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Train SAO and its ablations from a supervised warm start under simulated asynchrony, score
    their advantages against an oracle, and report the paper's claims with paired-seed intervals."""
    # here, not at import: the learning bench imports torch (seconds of every traj command's start-up)
    from trajstore.trainer.apps.learning_bench.arms import BenchError, get_arm
    from trajstore.trainer.apps.learning_bench.presets import PRESETS, SuiteConfig
    from trajstore.trainer.apps.learning_bench.report import summary_tables
    from trajstore.trainer.apps.learning_bench.resume import plan, resume_suite, stored_config
    from trajstore.trainer.apps.learning_bench.run_files import read_config
    from trajstore.trainer.apps.learning_bench.suite import RUN_CONFIG, run_suite
    from trajstore.trainer.apps.learning_bench.suite import reanalyse as redo

    if preset is not None and preset not in PRESETS:
        raise InvalidOptionError(f"invalid option --preset: must be {', '.join(PRESETS)} (got {preset!r})")
    if mismatch is not None and mismatch not in ("noise", "engine"):
        raise InvalidOptionError(f"invalid option --mismatch: must be noise or engine (got {mismatch!r})")
    given = {"reanalyse": reanalyse, "compare": compare, "resume": resume, "scratch": scratch, "seeds": seeds,
             "arms": arms, "sweep-workers": sweep_workers, "claim-seeds": claim_seeds}
    for name, value in given.items():
        if value is not None and not value.strip():
            raise InvalidOptionError(f"invalid option --{name}: empty (leave the option out for its default)")
    for name, value in (("reanalyse", reanalyse), ("compare", compare), ("resume", resume)):
        if value is not None and not Path(value).expanduser().is_dir():
            raise InvalidOptionError(f"invalid option --{name}: no such directory: {value}")
    if reanalyse is not None:
        values = {"preset": preset, "seeds": seeds, "arms": arms, "processes": processes, "workers": workers,
                  "sweep_workers": sweep_workers, "claim_seeds": claim_seeds, "mismatch": mismatch}
        for name in TRAINING_OPTIONS:
            if values[name] is not None:
                raise InvalidOptionError(f"invalid option --{name.replace('_', '-')}: not with --reanalyse (the run's "
                                         "config.json says what it ran)")
    over: dict = {}
    if scratch is not None:
        over["scratch"] = scratch
    if seeds is not None:
        over["seeds"] = _numbers(seeds, "seeds", minimum=0, maximum=MAX_SEED, unique=True)
    if arms is not None:
        try:
            over["chain_arms"] = [get_arm(a.strip()).name for a in arms.split(",")]
        except BenchError as e:
            raise InvalidOptionError(f"invalid option --arms: {e}") from None
        twice = [a for a in over["chain_arms"] if over["chain_arms"].count(a) > 1]
        if twice:
            raise InvalidOptionError(f"invalid option --arms: {twice[0]} is given twice")
    if processes:
        over["processes"] = processes
    if mismatch:
        over["mismatch"] = mismatch
    if workers:
        over["workers"] = workers
    if sweep_workers is not None:
        over["sweep_workers"] = _numbers(sweep_workers, "sweep-workers", minimum=1, unique=True)
    if claim_seeds is not None:
        over["claim_seeds"] = _claim_seeds(claim_seeds)
    if compare is not None and reanalyse is None:
        raise InvalidOptionError("invalid option --compare: it needs --reanalyse DIR (the run to compare it with)")
    if resume is not None and reanalyse is not None:
        raise InvalidOptionError("invalid option --resume: not with --reanalyse (a resumed run is analysed when it ends)")
    if dry_run and resume is None:
        raise InvalidOptionError("invalid option --dry-run: it needs --resume DIR")
    err = new_console(stderr=True)
    say = lambda m: err.print(m, highlight=False)  # noqa: E731
    if reanalyse is not None:
        summary = redo(reanalyse, scratch=scratch, compare=compare)
        cfg = read_config(Path(reanalyse) / RUN_CONFIG)
    elif resume is not None:
        if dry_run:
            render_record("traj bench learning --resume --dry-run", plan(resume, preset, over), fmt)
            return
        summary = resume_suite(resume, preset=preset, options=over, scratch=scratch, processes=processes,
                               log=say)
        cfg = stored_config(Path(resume))
    else:
        cfg = SuiteConfig.preset_config(preset or "default", **over)  # type: ignore[arg-type]
        summary = run_suite(cfg, log=say)
    if fmt is OutputFormat.json:
        render_record("traj bench learning", summary, fmt)
        return
    tables = summary_tables(cfg, summary)
    out = new_console()
    render_tables(tables, fmt, console=out)
    if fmt is OutputFormat.table:
        if "calibration" in summary:
            out.print(f"lr for 1e-3 nats/token: {summary['calibrated_lr']:.3g}", highlight=False)
        _print_report_path(out, summary)


@bench_app.command("throughput")
@friendly_errors
def throughput_cmd(
    preset: str = typer.Option("default", help="default (3 sigmas x 3 seeds x 7 arms, the bench/RESULTS.md grid) "
                                               "or smoke (every arm once at sigma 1, 2 short steps)"),
    scratch: str | None = typer.Option(None, help="a fresh run directory is made under it (default: <system "
                                                     "temp>/trajstore-bench-throughput)"),
    sigmas: str | None = typer.Option(None, help="comma-separated log-sigmas of the tool-call latency "
                                                    "(default: the preset's)"),
    seeds: str | None = typer.Option(None, help="comma-separated seeds (default: the preset's)"),
    arms: str | None = typer.Option(None, help="comma-separated arms: sync, one-step, async-N (N = the proxy's "
                                                  "--max-staleness), async-N-cC (C episodes in flight at most) "
                                                  "(default: the preset's)"),
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
    for name, value in (("reanalyse", reanalyse), ("scratch", scratch), ("sigmas", sigmas), ("seeds", seeds),
                        ("arms", arms)):
        if value is not None and not value.strip():
            raise InvalidOptionError(f"invalid option --{name}: empty (leave the option out for its default)")
    if reanalyse is not None and not Path(reanalyse).expanduser().is_dir():
        raise InvalidOptionError(f"invalid option --reanalyse: no such directory: {reanalyse}")
    over: dict = {}
    if scratch is not None:
        over["scratch"] = scratch
    if sigmas is not None:
        over["sigmas"] = _numbers(sigmas, "sigmas", float, unique=True)
        if any(s <= 0 for s in over["sigmas"]):
            raise InvalidOptionError(f"invalid option --sigmas: must be positive (got {sigmas!r})")
    if seeds is not None:
        over["seeds"] = _numbers(seeds, "seeds", minimum=0, maximum=MAX_SEED, unique=True)
    if arms is not None:
        try:
            over["arms"] = [Arm.parse(a).name for a in arms.split(",")]
        except ThroughputError as e:
            raise InvalidOptionError(f"invalid option --arms: {e}") from None
    over.update({k: v for k, v in (("steps", steps), ("batch_size", batch_size), ("workers", workers)) if v})
    err = new_console(stderr=True)
    if reanalyse is not None:
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
