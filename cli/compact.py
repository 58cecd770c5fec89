"""``traj compact``: merge a store's small trajectory shards (see :mod:`trajstore.maintenance.compact`).
Parses options, calls the library, renders."""

from __future__ import annotations

import typer

from trajstore.cli.app import TrajTyper
from trajstore.cli.display import OutputFormat, render_record, stderr_progress
from trajstore.cli.errors import friendly_errors
from trajstore.cli.options import FormatOption, StorageOptions, StoreArgument, parse_storage_options
from trajstore.maintenance.compact import CompactionResult, compact_store
from trajstore.store import open_existing_store
from trajstore.wording import plural

commands = TrajTyper()


@commands.command("compact")
@friendly_errors
def compact_cmd(
    store: StoreArgument,
    target_mb: float = typer.Option(64.0, "--target-mb", min=0.001, help="size of a merged shard on disk (MiB); "
                                    "shards of half that or more are left alone"),
    min_age: float = typer.Option(60.0, "--min-age", min=0.0, metavar="SECONDS",
                                  help="leave shards younger than this (writers may still be adding around them)"),
    keep_replaced: float = typer.Option(600.0, "--keep-replaced", min=0.0, metavar="SECONDS",
                                        help="delete merged shards once their compaction is this old (readers that "
                                        "listed them just before may still read them); 0: at once. Older ones left "
                                        "by earlier runs are deleted first"),
    dry_run: bool = typer.Option(False, "--dry-run/--no-dry-run", help="only show what would be merged"),
    fmt: FormatOption = OutputFormat.table,
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Merge runs of small trajectory shards into shards of about --target-mb, dropping later copies
    of a trajectory id. Readers, `traj train --follow` and writers keep working meanwhile; safe to
    interrupt (even kill) and rerun."""
    s = open_existing_store(store, storage_options=parse_storage_options(storage_option, store))
    with stderr_progress("compacting", disable=dry_run) as advance:
        r = compact_store(s, target_mb=target_mb, min_age_s=min_age, keep_replaced_s=keep_replaced, dry_run=dry_run,
                          on_group=lambda group, i, n: advance(i, n, f"merged {group['sources']} shards"))
    render_record("traj compact", {
        "store": r.store, "dry_run": r.dry_run,
        ("outputs_planned" if r.dry_run else "outputs_written"): len(r.groups),
        ("shards_to_merge" if r.dry_run else "shards_merged"): r.shards_merged,
        "rows": sum(g["rows"] for g in r.groups),
        "duplicates_dropped": None if r.dry_run else sum(g["dropped"] for g in r.groups),
        "bytes_before": sum(g["bytes_before"] for g in r.groups),
        "bytes_after": None if r.dry_run else sum(g["bytes_after"] for g in r.groups),
        ("replaced_to_delete" if r.dry_run else "replaced_deleted"): r.replaced_deleted,
        "bytes_freed": r.bytes_freed, "replaced_kept_for_readers": r.replaced_kept,
        "leftovers_removed": r.orphans_removed,
        "shards_left_young": r.left_young, "shards_left_big": r.left_big, "shards_left_alone": r.left_alone,
    }, fmt)
    if fmt is OutputFormat.table and (why := left_out_note(r, target_mb=target_mb, min_age=min_age)):
        typer.echo(why, err=True)


def left_out_note(r: CompactionResult, *, target_mb: float, min_age: float) -> str | None:
    """One line saying how many shards this run leaves as they are, why, and which option
    changes that (None when it leaves none)."""
    why = []
    if r.left_young:
        why.append(f"{plural(r.left_young, 'shard')} younger than --min-age {min_age:g} s (writers may still be "
                   "adding around them; a smaller --min-age, e.g. 0, takes them)")
    if r.left_big:
        why.append(f"{plural(r.left_big, 'shard')} of {target_mb / 2:g} MiB or more, already about --target-mb "
                   f"{target_mb:g} (a larger --target-mb merges them)")
    if r.left_alone:
        why.append(f"{plural(r.left_alone, 'small shard')} with no small neighbour to merge with (between shards "
                   "left out, or one over the target; a later run takes them with new neighbours)")
    return f"left as they are: {'; '.join(why)}" if why else None
