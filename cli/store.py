"""``traj migrate``: rewrite a store's old-schema shards as the current schema (see
:mod:`trajstore.migrate`). Parses options, calls the library, renders."""

from __future__ import annotations

import json

import typer

from trajstore.cli.main import app, friendly_errors


@app.command("migrate")
@friendly_errors
def migrate_cmd(
    store: str = typer.Argument(..., help="store URI (local path or s3://bucket/prefix)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="only list the shards that would be rewritten"),
    storage_option: list[str] = typer.Option([], "--storage-option", help="fsspec option key=value (repeatable)"),
) -> None:
    """Rewrite shards of an older schema version (v1) as schema v2, one shard at a time, each
    atomically under its own name. Safe to interrupt and rerun."""
    from rich.progress import Progress

    from trajstore.cli.audit import parse_storage_options
    from trajstore.cli.main import open_existing_store
    from trajstore.migrate import migrate_store

    s = open_existing_store(store, parse_storage_options(storage_option))
    with Progress(transient=True, disable=dry_run) as progress:
        task = progress.add_task("migrating shards", total=None)

        def step(shard, i, n):  # noqa: ANN001
            progress.update(task, total=n, completed=i + 1, description=f"migrated {shard.name}")

        result = migrate_store(s, dry_run=dry_run, on_shard=step)
    typer.echo(json.dumps({
        "store": result.store, "dry_run": result.dry_run, "shards_migrated": len(result.migrated),
        "shards_already_current": result.already_current, "rows": result.rows,
        "bytes_before": result.bytes_before, "bytes_after": result.bytes_after,
        "shards": result.migrated,
    }, indent=2))
