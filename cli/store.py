"""``traj info``: what a store holds (:func:`trajstore.reader.summarize_store`), and ``traj migrate``:
rewrite a store's old-schema shards as the current schema (see :mod:`trajstore.migrate`). Parse
options, call the library, render."""

from __future__ import annotations

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, render_record, stderr_progress
from trajstore.cli.errors import friendly_errors
from trajstore.cli.options import FormatOption, StorageOptions, StoreArgument, parse_storage_options
from trajstore.migrate import migrate_store
from trajstore.reader import summarize_store
from trajstore.store import open_existing_store

commands = TrajTyper()


@commands.command("info")
@friendly_errors
def info_cmd(store: StoreArgument, fmt: FormatOption = OutputFormat.table,
             storage_option: StorageOptions = []) -> None:  # noqa: B006 - typer reads the default
    """Shards, trajectories, tokens and duplicates in a store (unreadable shards named once on stderr)."""
    s = summarize_store(open_existing_store(store, storage_options=parse_storage_options(storage_option, store)))
    for message in s.skipped:
        typer.echo(f"warning: {message}", err=True)
    render_record(f"store {s.store}", {
        "store": s.store, "shards": s.shards, "trajectories": s.trajectories, "tokens": s.tokens,
        "duplicates_dropped": s.duplicates_dropped, "skipped_shards": len(s.skipped),
        "schema_versions": {f"v{k}": n for k, n in sorted(s.schema_versions.items())},
    }, fmt)



@commands.command("migrate")
@friendly_errors
def migrate_cmd(
    store: StoreArgument,
    dry_run: bool = typer.Option(False, "--dry-run/--no-dry-run", help="only list the shards that would be "
                                 "rewritten"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Rewrite shards of an older schema version (v1, v2) as schema v3, one shard at a time, each
    atomically under its own name. Safe to interrupt and rerun."""
    s = open_existing_store(store, storage_options=parse_storage_options(storage_option, store))
    with stderr_progress("migrating shards", disable=dry_run) as advance:
        result = migrate_store(s, dry_run=dry_run, on_shard=lambda shard, i, n: advance(i, n, f"migrated {shard.name}"))
    render_record("traj migrate", {
        # a dry run migrates nothing: it said "shards_migrated 3"
        "store": result.store, "dry_run": result.dry_run,
        ("shards_to_migrate" if result.dry_run else "shards_migrated"): len(result.migrated),
        "shards_already_current": result.already_current, "rows": result.rows,
        "bytes_before": result.bytes_before, "bytes_after": result.bytes_after,
        "shards": result.migrated,
    }, fmt)
