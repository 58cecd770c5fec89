"""``traj train``: its options are the fields of :class:`~trajstore.trainer.config.TrainConfig`
(generated, :mod:`trajstore.cli.config_options`); run the streaming SAO trainer and print a summary
(``--format json|csv`` for programs)."""

from __future__ import annotations

from typing import Any

import typer
from pydantic import ValidationError

from trajstore.cli.app import TrajTyper
from trajstore.cli.config_options import config_data, config_options, with_config_options
from trajstore.cli.display import OutputFormat, new_console, print_command, render_record
from trajstore.cli.errors import friendly_errors, invalid_options
from trajstore.cli.options import FormatOption, StorageOptions, StoreArgument, parse_storage_options
from trajstore.extras import INSTALL_TRAIN_EXTRA, require
from trajstore.store import open_existing_store
from trajstore.store.layout import policy_run_dir, run_consumed_dir, run_steps_dir
from trajstore.trainer.config import TrainConfig
from trajstore.wording import plural

commands = TrajTyper()

TRAIN_FLAGS = {"model.name": "--model", "data.idle_timeout_s": "--idle-timeout",
               "data.poll_interval_s": "--poll-interval"}
"""Config fields whose flag is not derived from their name
(:func:`~trajstore.cli.config_options.flag_of`): the flags the README and users' scripts use."""

TRAIN_OPTIONS = config_options(TrainConfig, flags=TRAIN_FLAGS, skip=("store", "storage_options"))
"""One ``traj train`` option per field of :class:`TrainConfig`, except the store (the STORE
argument) and its fsspec options (``--storage-option``, repeatable)."""


@commands.command("train")
@friendly_errors
@with_config_options(TRAIN_OPTIONS, after="store")
def train_cmd(
    store: StoreArgument,
    resume: bool = typer.Option(False, "--resume/--no-resume",
                                help="continue the run from its latest checkpoint; a run with no checkpoint and no "
                                     "records starts fresh with a warning (so a supervisor may always pass it)"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
    **options: Any,
) -> None:
    """Train a policy with SAO on the trajectories of STORE, as they arrive."""
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
