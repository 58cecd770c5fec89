"""``traj demo``: parse sizes, run :func:`trajstore.trainer.apps.demo.run_demo`, render the audits it
returns (:func:`print_summary`)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import typer
from pydantic import ValidationError

from trajstore.audit.staleness import STALENESS_HISTOGRAM_NOTE
from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, new_console, print_command, render_tables
from trajstore.cli.errors import friendly_errors, invalid_options
from trajstore.cli.options import FormatOption
from trajstore.extras import INSTALL_TRAIN_EXTRA, require
from trajstore.store import open_store_for_writing
from trajstore.tables import TableData
from trajstore.trainer.apps import demo as demo_app

if TYPE_CHECKING:
    from rich.console import Console

    from trajstore.trainer.apps.demo import DemoResult

commands = TrajTyper()


@commands.command("demo")
@friendly_errors
def demo_cmd(
    store: str = typer.Argument(demo_app.DEFAULT_STORE, help="local store directory (reused; each demo is a run)"),
    model: str = typer.Option("smollm2-135m", "--model", help="policy: smollm2-135m, a HF directory or .gguf file"),
    steps: int = typer.Option(4, "--steps", min=1, help="policy updates the trainer makes"),
    episodes: int | None = typer.Option(None, "--episodes", min=1, help="episodes the agents play at most "
                                           "(default: until the trainer finishes)"),
    max_new_tokens: int = typer.Option(24, "--max-new-tokens", min=1, help="tokens per action at most"),
    batch_size: int = typer.Option(4, "--batch-size", min=1, help="trajectories per training step"),
    warmup_steps: int = typer.Option(1, "--critic-warmup-steps", min=0, help="critic-only steps first"),
    run_id: str | None = typer.Option(None, "--run", help="training run id (default demo-<UTC time>)"),
    seed: int = typer.Option(0, "--seed", help="seed of tasks and sampling"),
    time_limit: float | None = typer.Option(None, "--time-limit", min=1, metavar="SECONDS",
                                            help="stop after this many seconds (the trainer finishes its step in "
                                            "progress, at most 5 more minutes), print what was done and exit 1; "
                                            "default: no limit, run until the trainer has made its steps"),
    keep_weights: bool = typer.Option(False, "--keep-weights/--no-keep-weights",
                                      help="keep every published version and the "
                                      "checkpoint (about 0.5 GB per SmolLM2 version); default: only the last"),
    verbose: bool = typer.Option(False, "--verbose/--no-verbose", "-v", help="also show the trainer's poll lines "
                                 "(waiting for new trajectories)"),
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Run the asynchronous RL loop on real model output: agents play guess-the-number with
    SmolLM2-135M-Instruct through `traj proxy` (in front of `traj serve`), which records every call
    into a local store, while `traj train --follow` consumes it and publishes new policy versions
    that the server reloads; then print staleness, clip audits and reward per policy version."""
    require(("torch", "transformers", "safetensors"), what="traj demo", install=INSTALL_TRAIN_EXTRA)
    try:
        cfg = demo_app.DemoConfig(store=store, model=model, steps=steps, episodes=episodes, max_new_tokens=max_new_tokens,
                         batch_size=batch_size, critic_warmup_steps=warmup_steps, run_id=run_id, seed=seed,
                         keep_weights=keep_weights, time_limit_s=time_limit, verbose=verbose,
                         tokenizer=model if not model.startswith("tiny-") else "smollm2-135m")
    except ValidationError as e:
        raise invalid_options(e) from None
    open_store_for_writing(cfg.store, command="traj demo")  # a mistyped STORE: refused before a model loads
    console = new_console(stderr=fmt is not OutputFormat.table)  # progress; results go to stdout
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        # piped or logged without a width: do not squeeze the audit tables into rich's default 80
        # columns; a width the user set (COLUMNS=80) is kept, as every other command keeps it
        console.width = max(console.width, 120)
    result = demo_app.run_demo(cfg, console=console)
    if fmt is OutputFormat.json:
        typer.echo(json.dumps(demo_app.result_to_dict(result), indent=2))
    elif fmt is OutputFormat.csv:  # the result's tables, one CSV section each
        doc = demo_app.result_to_dict(result)
        render_tables([TableData(k, list(v[0]), [tuple(r.values()) for r in v]) for k, v in doc.items()
                       if isinstance(v, list) and v and isinstance(v[0], dict)], fmt)
    else:
        print_summary(result, console)
    if result.shortfall or result.stop is not None:  # the summary is printed, but the demo did not do what was asked
        raise typer.Exit(1)


def print_summary(result: DemoResult, console: Console) -> None:
    """Render the audits and where to look next (tables through :mod:`trajstore.cli.display`, as
    every command prints them)."""
    def table(title: str, rows: list[dict[str, Any]], cols: list[str], keys: list[str],
              note: str | None = None, empty_note: str | None = None) -> TableData:
        return TableData(title, cols, [tuple(r.get(c) for c in cols) for r in rows], keys=keys, shares=["solved"],
                         note=note, empty_note=empty_note)

    warmup_note = ("step -1: critic warm-up, the critic trained alone before the first policy step"
                   if any(r.get("step") == -1 for r in result.clip + result.explained_variance) else None)
    # the explained-variance rows are one per iteration the run recorded (a demo stopped early may have none)
    no_step = (f"the trainer recorded no step (critic warm-up or policy step) in run {result.run_id}"
               if not result.explained_variance else None)
    render_tables([
        table("reward per policy version", result.reward_by_version,
              ["policy_version", "trajectories", "mean_reward", "solved", "consumed"], ["policy_version"]),
        table("model calls per policy version, as recorded by traj proxy",
              [{"policy_version": v, "calls": n} for v, n in sorted(result.calls_by_version.items())],
              ["policy_version", "calls"], ["policy_version"]),
        table("staleness of trained data (trainer version - policy version, in versions)", result.staleness,
              ["consumed", "versioned_action_tokens", "token_p50", "token_mean", "token_max", "traj_max",
               "mixed_version_actions"], [], empty_note=no_step),
        table("staleness histogram", result.staleness_histogram, ["staleness", "trajectories", "action_tokens"],
              ["staleness"], note=STALENESS_HISTOGRAM_NOTE, empty_note=no_step),
        table("DIS clip audit per step: share of action tokens masked", result.clip,
              ["step", "trainer_version", "trajectories", "action_tokens", "masked_below", "masked_above",
               "ratio_mean"], ["step"], note=warmup_note, empty_note=no_step),
        table("critic explained variance per step: 1 - Var(R - V) / Var(R), > 0 is better than the mean return",
              result.explained_variance, ["step", "explained_variance"], ["step"], note=warmup_note,
              empty_note=no_step),
    ], "table", console=console)
    versions = result.policy_versions_seen
    max_stale = max((r.get("token_max") or 0 for r in result.staleness), default=0)
    plain = {"soft_wrap": True, "markup": False, "highlight": False}
    stored = sum(int(r.get("trajectories") or 0) for r in result.reward_by_version)
    split = (f" (stored as {stored} completed trajectories: an episode whose next prompt did not extend "
             "the tokens already sampled is split at that context break)") if stored > len(result.episodes) else ""
    console.print(f"{len(result.episodes)} episodes{split} from policy versions {versions}; the server loaded "
                  f"versions {result.versions_loaded}; max staleness {max_stale}; {result.seconds:.0f}s", **plain)
    if result.proxy_shutdown is not None:  # what the proxy said it stored at its stop, not what it should have
        console.print(result.proxy_shutdown.describe(episodes_cut=result.episodes_cut), **plain)
    if result.freed_bytes:
        console.print(f"removed {result.freed_bytes / 2**30:.1f} GiB of superseded policy versions and checkpoints "
                      "(keep them with --keep-weights)", **plain)
    steps = "This policy step shows" if result.steps_done == 1 else f"These {result.steps_done} policy steps show"
    console.print(f"{steps} the loop running (versions served and loaded, "
                  "staleness, ratios, DIS masking), not learning: so few steps barely move the reward, and with "
                  "fresh data the ratios sit near 1 and DIS masks little or nothing. Learning is measured by "
                  "`traj bench learning`.", **plain)
    console.print(f"store: {result.store} (run {result.run_id}); look closer with:", **plain)
    print_command(console, f"traj view {result.store} --run {result.run_id}")
    print_command(console, f"traj stats {result.store} --run {result.run_id}")
    print_command(console, f"traj sql {result.store} \"SELECT * FROM step_metrics WHERE run_id = '{result.run_id}' "
                           "ORDER BY step\"")
    if result.shortfall:  # last, where it cannot be missed (traj demo also exits with code 1)
        console.print(f"WARNING: {result.shortfall}", style="bold red", **plain)
    if result.stop is not None:  # why, and what to try (traj demo exits with code 1)
        console.print(f"stopped early: {result.stop.reason}", style="bold red", **plain)
        console.print(f"try: {result.stop.hint}", **plain)
