"""``traj migrate``: rewrite a store's old-schema shards as the current schema (see
:mod:`trajstore.migrate`). Parses options, calls the library, renders."""

from __future__ import annotations

import typer

from trajstore.cli.display import OutputFormat
from trajstore.cli.main import FormatOption, StorageOptions, StoreArgument, app, friendly_errors


@app.command("migrate")
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
    from rich.console import Console
    from rich.progress import Progress

    from trajstore.cli.display import render_record
    from trajstore.cli.main import open_existing_store, parse_storage_options
    from trajstore.migrate import migrate_store

    s = open_existing_store(store, parse_storage_options(storage_option, store))
    with Progress(console=Console(stderr=True), transient=True, disable=dry_run) as progress:
        task = progress.add_task("migrating shards", total=None)

        def step(shard, i, n):  # noqa: ANN001
            progress.update(task, total=n, completed=i + 1, description=f"migrated {shard.name}")

        result = migrate_store(s, dry_run=dry_run, on_shard=step)
    render_record("traj migrate", {
        # a dry run migrates nothing: it said "shards_migrated 3"
        "store": result.store, "dry_run": result.dry_run,
        ("shards_to_migrate" if result.dry_run else "shards_migrated"): len(result.migrated),
        "shards_already_current": result.already_current, "rows": result.rows,
        "bytes_before": result.bytes_before, "bytes_after": result.bytes_after,
        "shards": result.migrated,
    }, fmt)
