"""``traj info``: what a store holds (:func:`trajstore.reader.summarize_store`), ``traj show``: one
trajectory by id (:func:`trajstore.view.show.show_trajectory`), and ``traj migrate``: rewrite a
store's old-schema shards as the current schema (see :mod:`trajstore.migrate`). Parse options,
call the library, render."""

from __future__ import annotations

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, new_console, render_record, render_tables, stderr_progress
from trajstore.cli.errors import friendly_errors
from trajstore.cli.options import (
    FormatOption,
    SkipUnreadableOption,
    StorageOptions,
    StoreArgument,
    parse_storage_options,
)
from trajstore.errors import StoreError
from trajstore.migrate import migrate_store
from trajstore.reader import summarize_store
from trajstore.store import open_existing_store
from trajstore.tables import TableData
from trajstore.view.show import show_trajectory

commands = TrajTyper()


@commands.command("info")
@friendly_errors
def info_cmd(store: StoreArgument, fmt: FormatOption = OutputFormat.table, skip_unreadable: SkipUnreadableOption = False,
             storage_option: StorageOptions = []) -> None:  # noqa: B006 - typer reads the default
    """Shards, trajectories, tokens and duplicates in a store. A shard that cannot be read stops it
    (exit status 1, each such shard named) unless --skip-unreadable (then named on stderr)."""
    s = summarize_store(open_existing_store(store, storage_options=parse_storage_options(storage_option, store)))
    if s.skipped and not skip_unreadable:
        damaged = "; ".join(m.removeprefix("skipping ") for m in s.skipped)
        raise StoreError(f"{len(s.skipped)} shard(s) cannot be read: {damaged} (--skip-unreadable counts the rest "
                         "without them)")
    for message in s.skipped:
        typer.echo(f"warning: {message}", err=True)
    render_record(f"store {s.store}", {
        "store": s.store, "shards": s.shards, "trajectories": s.trajectories, "tokens": s.tokens,
        "duplicates_dropped": s.duplicates_dropped, "skipped_shards": len(s.skipped),
        "schema_versions": {f"v{k}": n for k, n in sorted(s.schema_versions.items())},
    }, fmt)



@commands.command("show")
@friendly_errors
def show_cmd(
    store: StoreArgument,
    trajectory_id: str = typer.Argument(..., help="the trajectory's id"),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="decode with this tokenizer instead of the "
                                         "trajectory's own (alias, .gguf file or local Hugging Face folder)"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Print one trajectory: its columns (status, reward, policy versions, token counts), its flags
    and its transcript span by span (kind, role, policy version, decoded text)."""
    s = open_existing_store(store, storage_options=parse_storage_options(storage_option, store))
    t = show_trajectory(s, trajectory_id, tokenizer=tokenizer)
    spans = [{"span": sp.index, "kind": sp.kind, "role": sp.role, "start": sp.start, "end": sp.end,
              "policy_version": sp.fields.get("policy_version"), "fields": sp.fields, "text": sp.text}
             for sp in t.spans]
    if fmt is OutputFormat.json:
        render_record("traj show", {**t.row, "metadata": t.metadata, "flags": dict(t.flags),
                                    "tokenizer_note": t.tokenizer_note, "spans": spans}, fmt)
        return
    if fmt is OutputFormat.csv:  # the transcript, one span a row
        render_tables([TableData("spans", ["span", "kind", "role", "start", "end", "policy_version", "text"],
                                 [[sp[c] for c in ("span", "kind", "role", "start", "end", "policy_version", "text")]
                                  for sp in spans])], fmt)
        return
    render_record(f"trajectory {trajectory_id}", {k: v for k, v in t.row.items() if k != "metadata"}, fmt)
    console = new_console()
    for name, why in t.flags:
        console.print(f"flag {name}: {why}", markup=False, highlight=False)
    if t.tokenizer_note:
        console.print(f"note: {t.tokenizer_note}", markup=False, highlight=False)
    for sp in spans:
        extra = " ".join(f"{k}={v}" for k, v in sp["fields"].items())
        console.print(f"\n[{sp['span']}] {sp['kind']} {sp['role'] or ''} tokens {sp['start']}-{sp['end']} {extra}".rstrip(),
                      markup=False, highlight=False, style="bold")
        console.print(sp["text"], markup=False, highlight=False)


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
