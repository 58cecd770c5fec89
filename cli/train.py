"""``traj train``: its options are the fields of :class:`~trajstore.trainer.config.TrainConfig`
(generated, :mod:`trajstore.cli.config_options`); run the streaming SAO trainer and print a summary
(``--format json|csv`` for programs). ``--replay-step N --run RUN`` instead executes step N of
a past or running run again (:func:`trajstore.trainer.loop.replay.replay_step`) and prints its
recorded and recomputed metrics side by side."""

from __future__ import annotations

from typing import Any

import typer
from pydantic import ValidationError

from trajstore.cli.app import TrajTyper
from trajstore.cli.config_options import config_data, config_options, require_options, with_config_options
from trajstore.cli.display import OutputFormat, new_console, print_command, render_record, render_tables
from trajstore.cli.errors import friendly_errors, invalid_options
from trajstore.cli.options import FormatOption, StorageOptions, StoreArgument, parse_storage_options
from trajstore.extras import INSTALL_TRAIN_EXTRA, require
from trajstore.store import open_existing_store
from trajstore.store.layout import policy_run_dir, run_consumed_dir, run_steps_dir
from trajstore.tables import TableData
from trajstore.trainer.config import TrainConfig
from trajstore.wording import plural

commands = TrajTyper()

TRAIN_FLAGS = {"model.name": "--model", "data.idle_timeout_s": "--idle-timeout",
               "data.poll_interval_s": "--poll-interval", "run.run_id": "--run"}
"""Config fields whose flag is not derived from their name
(:func:`~trajstore.cli.config_options.flag_of`): the flags the README and users' scripts use."""

TRAIN_OPTIONS = config_options(TrainConfig, flags=TRAIN_FLAGS, skip=("store", "storage_options"))
"""One ``traj train`` option per field of :class:`TrainConfig`, except the store (the STORE
argument) and its fsspec options (``--storage-option``, repeatable)."""


REQUIRED_TO_TRAIN = ("name", "run_id")
"""Fields required to train (``--model``, ``--run``) that a replay does without (declared optional)."""


@commands.command("train")
@friendly_errors
@with_config_options(TRAIN_OPTIONS, after="store", optional=REQUIRED_TO_TRAIN)
def train_cmd(
    ctx: typer.Context,
    store: StoreArgument,
    resume: bool = typer.Option(False, "--resume/--no-resume",
                                help="continue the run from its latest checkpoint; a run with no checkpoint and no "
                                     "records starts fresh with a warning (so a supervisor may always pass it)"),
    replay_step: int | None = typer.Option(None, "--replay-step", help="train nothing: execute step N of run --run "
                                           "again from the checkpoint before it and print the recorded and "
                                           "recomputed losses, gradient norms and ratio statistics (on --device, "
                                           "CPU for auto); writes nothing"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
    **options: Any,
) -> None:
    """Train a policy with SAO on the trajectories of STORE, as they arrive."""
    if replay_step is not None:
        _replay(store, replay_step, options["run_id"], device=options["device"], fmt=fmt,
                storage_options=parse_storage_options(storage_option, store))
        return
    require_options(ctx, options, REQUIRED_TO_TRAIN)
    try:
        data = config_data(TRAIN_OPTIONS, options)
        data["run"]["progress"] = data["run"]["progress"] and fmt is OutputFormat.table  # never under JSON / CSV
        cfg = TrainConfig(store=store, storage_options=parse_storage_options(storage_option, store), **data)
    except ValidationError as e:
        raise invalid_options(e, {o.name: o.on_flag for o in TRAIN_OPTIONS}) from None
    require(("torch", "transformers", "safetensors"), what="traj train", install=INSTALL_TRAIN_EXTRA)
    from trajstore.trainer.loop.stop import TrainingInterrupted  # here, once the extra is there: torch
    from trajstore.trainer.loop.train import train

    # Without --follow a missing store trains nothing: a mistyped path is an error. With it the
    # store may not exist yet, but a folder that is not a store is refused either way.
    open_existing_store(store, storage_options=cfg.storage_options, missing_ok=cfg.data.follow)
    try:
        summary = train(cfg, resume=resume)
    except TrainingInterrupted as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(143) from None
    if not summary.is_main:  # torchrun: rank 0 reports the run
        return
    run_id = cfg.run.run_id
    last = summary.history[-1] if summary.history else {}
    out = {"store": store, "run_id": run_id, "iterations": summary.iterations, "steps": summary.steps,
           "policy_version": summary.version, "last_metrics": last}
    out["warnings"] = summary.warnings
    for w in summary.warnings:
        typer.echo(f"warning: {w}", err=True)
    if fmt is not OutputFormat.table:
        render_record("traj train", out, fmt)
        return
    console = new_console()
    console.print(f"run {run_id}: {plural(summary.iterations, 'iteration')}, {plural(summary.steps, 'policy step')}, "
                  f"policy v{summary.version} published under {store}/{policy_run_dir(run_id)}/", highlight=False,
                  soft_wrap=True)  # never cut a path in two: the terminal wraps it, or a log keeps it whole
    console.print(f"records: {run_steps_dir(run_id)} and {run_consumed_dir(run_id)}; per step:", highlight=False,
                  soft_wrap=True)
    print_command(console, f"traj sql {store} \"SELECT * FROM step_metrics WHERE run_id = '{run_id}' ORDER BY step\"")


def _replay(store: str, step: int, run: str | None, *, device: str, fmt: OutputFormat,
            storage_options: dict[str, Any]) -> None:
    if run is None:
        raise typer.BadParameter("--replay-step N needs --run RUN (the run whose step it replays)",
                                 param_hint="--run")
    require(("torch", "transformers", "safetensors"), what="traj train --replay-step", install=INSTALL_TRAIN_EXTRA)
    from trajstore.trainer.loop.replay import replay_step  # here, once the extra is there: torch

    got = replay_step(store, run, step, device="cpu" if device == "auto" else device, storage_options=storage_options)
    rows = [[name, rec, new, new - rec, got.relative_difference(name)] for name, (rec, new) in got.metrics.items()]
    if fmt is OutputFormat.json:
        render_record("traj train --replay-step", {
            "run_id": got.run_id, "step": got.step, "iteration": got.iteration,
            "checkpoint_iteration": got.checkpoint_iteration, "iterations_before": got.iterations_before,
            "trajectories": got.trajectories,
            "metrics": {n: {"recorded": r, "recomputed": c, "relative_difference": d} for n, r, c, _, d in rows}}, fmt)
        return
    if fmt is OutputFormat.table:
        typer.echo(f"run {run} step {step} (iteration {got.iteration}) replayed from checkpoint "
                   f"it{got.checkpoint_iteration:08d} ({got.iterations_before} iterations executed again before it) "
                   f"on {len(got.trajectories)} trajectories", err=True)
    render_tables([TableData("replay", ["metric", "recorded", "recomputed", "difference", "relative_difference"],
                             rows, keys=["metric"])], fmt)
