"""``traj gc``: retention by rule (see :mod:`trajstore.maintenance.gc`). Parses options, calls the
library, renders what is (or would be) deleted."""

from __future__ import annotations

import re

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, render_tables
from trajstore.cli.errors import InvalidOptionError, friendly_errors
from trajstore.cli.options import FormatOption, StorageOptions, StoreArgument, parse_storage_options
from trajstore.maintenance.gc import GcRules, gc_store
from trajstore.schema import STATUSES
from trajstore.store import open_existing_store
from trajstore.tables import TableData

commands = TrajTyper()

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, option: str) -> float:
    """``90``, ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` -> seconds.

    Raises:
        InvalidOptionError: anything else (naming `option`).
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not m:
        raise InvalidOptionError(f"invalid option {option}: {text!r} is not a duration (e.g. 90s, 30m, 12h, 7d)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def _names(values: list[str]) -> tuple[str, ...]:
    return tuple(n.strip() for v in values for n in v.split(",") if n.strip())


def parse_statuses(values: list[str]) -> tuple[str, ...] | None:
    """``--status`` values (repeated or comma-separated) -> statuses, None when none given.

    Raises:
        InvalidOptionError: a value that is not one of the schema's statuses (named, with the allowed ones).
    """
    names = _names(values)
    bad = [n for n in names if n not in STATUSES]
    if bad:
        raise InvalidOptionError(f"invalid option --status: {', '.join(map(repr, bad))} is not a trajectory status; "
                                 f"choose from {', '.join(STATUSES)}")
    return names or None


@commands.command("gc")
@friendly_errors
def gc_cmd(
    store: StoreArgument,
    keep_versions: int | None = typer.Option(None, "--keep-versions", min=2, help="per run, keep the newest N "
                                             "published policy versions (and LATEST, the one before it, and any a "
                                             "checkpoint was taken at)"),
    keep_checkpoints: int | None = typer.Option(None, "--keep-checkpoints", min=1, help="per run, keep the newest N "
                                                "checkpoints (and the one LATEST names)"),
    consumed_by: list[str] = typer.Option([], "--consumed-by", metavar="RUN[,RUN]",  # noqa: B006
                                          help="delete trajectories every one of these runs trained on"),
    older_than: str | None = typer.Option(None, "--older-than", metavar="DURATION",
                                          help="with --consumed-by: only trajectories created before now - DURATION "
                                          "(90s, 30m, 12h, 7d)"),
    status: list[str] = typer.Option([], "--status", metavar="STATUS[,STATUS]",  # noqa: B006
                                     help="with --consumed-by: only trajectories of these statuses"),
    ignore_run: list[str] = typer.Option([], "--ignore-run", metavar="RUN[,RUN]",  # noqa: B006
                                         help="runs without a checkpoint that will never resume (they otherwise "
                                         "keep every trajectory)"),
    keep_replaced: float = typer.Option(600.0, "--keep-replaced", min=0.0, metavar="SECONDS",
                                        help="delete shards traj compact replaced once this old"),
    delete: bool = typer.Option(False, "--delete/--dry-run", help="delete (default: a dry run listing what would "
                                "go and the bytes)"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Delete what the retention rules allow: old policy versions, old checkpoints, trajectories
    consumed by the named runs. A dry run unless --delete; never what a running or resumable run
    still needs."""
    statuses = parse_statuses(status)
    if (older_than is not None or statuses) and not consumed_by:
        raise InvalidOptionError("invalid option --older-than / --status: trajectories are deleted only once "
                                 "consumed: name the runs with --consumed-by")
    rules = GcRules(keep_versions=keep_versions, keep_checkpoints=keep_checkpoints, consumed_by=_names(consumed_by),
                    older_than_s=None if older_than is None else parse_duration(older_than, "--older-than"),
                    statuses=statuses, ignore_runs=_names(ignore_run), keep_replaced_s=keep_replaced)
    s = open_existing_store(store, storage_options=parse_storage_options(storage_option, store))
    r = gc_store(s, rules, dry_run=not delete)
    items = TableData("gc.would_delete" if r.dry_run else "gc.deleted", ["kind", "what", "bytes"],
                      [(i["kind"], i["what"], i["bytes"]) for i in r.items],
                      empty_note="nothing to delete under these rules")
    kept = TableData("gc.kept", ["why"], [(k,) for k in r.kept], wrap=("why",))
    summary = TableData("gc.summary", ["store", "dry_run", "items", "bytes"],
                        [(r.store, r.dry_run, len(r.items), r.bytes)])
    render_tables([items, kept, summary] if r.kept else [items, summary], fmt)
    if r.dry_run and r.items and fmt is OutputFormat.table:
        typer.echo("(a dry run: nothing was deleted; add --delete to delete)", err=True)
