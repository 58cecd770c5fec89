"""``traj migrate``: rewrite a store's shards of an older schema version as the current one
(v1 to v3 -> v4), one shard at a time, each atomically and under its own name.

Interrupting it (even SIGKILL) loses nothing: a shard is either still the old file or already
the new one, and a rerun skips shards that are current. Readers convert old shards on read in
any case (:mod:`trajstore.reader`), so migrating only saves that conversion and the old layout's
decoding cost.

Readers running meanwhile keep working: the Arrow readers, ``iter_batches``, the trainer's
stream and fetch-by-id convert each file by the schema version in its own footer, not the one
they listed, and the DuckDB views recognise a rewritten row by its log-prob count. Only a polars
LazyFrame planned before the rewrite fails at ``collect()`` (scan again).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trajstore.reader import read_shard
from trajstore.schema import SCHEMA_VERSION, TRAJECTORY_SCHEMA
from trajstore.store import ShardInfo, Store, open_store
from trajstore.store.layout import TRAJECTORIES_DIR
from trajstore.store.lock import maintenance_lock


@dataclass
class MigrationResult:
    """What :func:`migrate_store` did.

    Attributes:
        store: the store's URI.
        migrated: URLs of the shards rewritten, in arrival order.
        already_current: shards that were of the current version already (skipped).
        rows: trajectory rows rewritten.
        bytes_before, bytes_after: total size of the rewritten shards before and after (bytes).
        dry_run: True when nothing was written (``migrated`` lists what would be).
    """

    store: str
    migrated: list[str] = field(default_factory=list)
    already_current: int = 0
    rows: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    dry_run: bool = False


def migrate_store(uri: str | os.PathLike[str] | Store, *, storage_options: dict[str, Any] | None = None,
                  dry_run: bool = False, on_shard: Callable[[ShardInfo, int, int], None] | None = None,
                  wait_s: float | None = None) -> MigrationResult:
    """Rewrite every trajectory shard of an older schema version as the current schema (v4).

    Each shard is read whole, converted (:func:`trajstore.convert.upgrade_table`: rows and
    their order unchanged, so duplicates and training cursors resolve as before) and written
    back under the same name with :meth:`Store.rewrite_shard`. Unreadable shards are skipped
    with the usual warning and left as they are. Holds the store's maintenance lock
    (:func:`~trajstore.store.lock.maintenance_lock`) from the listing to the last rewrite, waiting
    for a running ``traj compact`` / ``traj gc`` first (a dry run takes none and writes nothing).

    Args:
        uri: the store (local path or fsspec URL) or an open :class:`Store`.
        dry_run: only report which shards would be rewritten.
        on_shard: called after each shard with (shard, index, number of shards to migrate).
        wait_s: give up when another maintenance command holds the lock this long (None: wait).

    Raises:
        StoreError: a shard could not be written back (it is untouched; rerun to continue), or
            the lock was not acquired within `wait_s`.
    """
    store = uri if isinstance(uri, Store) else open_store(uri, storage_options=storage_options)
    result = MigrationResult(store.uri, dry_run=dry_run)
    with maintenance_lock(store, wait_s=wait_s, dry_run=dry_run):
        if not dry_run:
            store.remove_stale_rewrites()
        shards = store.list_shards(TRAJECTORIES_DIR)  # listed under the lock: what a compaction left
        old = [s for s in shards if s.schema_version < SCHEMA_VERSION]
        result.already_current = len(shards) - len(old)
        for i, shard in enumerate(old):
            if not dry_run:
                table = read_shard(store, shard).replace_schema_metadata(TRAJECTORY_SCHEMA.metadata)
                result.bytes_after += store.rewrite_shard(shard.path, table)
            result.migrated.append(store.url_of(shard.path))
            result.rows += shard.num_rows
            result.bytes_before += shard.size_bytes
            if on_shard is not None:
                on_shard(shard, i, len(old))
    return result
