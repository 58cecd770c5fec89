"""Shards read whole into one Arrow table of the current schema: :func:`read_shard` (one shard),
:func:`read_run` (consecutive shards of one schema version) and :func:`read_shards_one_by_one`
(each shard apart, an undecodable one skipped with a warning or raised with ``strict``). The
eager readers (:mod:`trajstore.reader.read`), the scalar cache's reads
(:mod:`trajstore.reader.scalars`) and the store summary build on them."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from trajstore.convert import conform_table, read_columns, upgrade_table
from trajstore.reader.files import arrow_dataset, file_version, open_shard, skip_or_raise
from trajstore.schema import SCHEMA_VERSION, TRAJECTORY_SCHEMA
from trajstore.store import ShardInfo, Store


def read_run(store: Store, version: int, shards: Sequence[ShardInfo], cols: list[str] | None) -> pa.Table:
    """Same-version shards as one table of the current schema (`cols` or every column).

    Shards listed as an older version are read file by file, each converted by the version in
    its own footer (:func:`file_version`): ``traj migrate`` may have rewritten one as the current version since
    the listing. A current-version shard is never rewritten, so those runs are one dataset scan.
    """
    if version == SCHEMA_VERSION:
        return conform_table(arrow_dataset(store, shards, version).to_table(columns=cols), cols)
    parts = []
    for shard in shards:
        pf = open_shard(store, shard)
        try:
            v = file_version(pf, shard)
            read = read_columns(cols, v)
            present = set(pf.schema_arrow.names)
            read = [c for c in (read if read is not None else pf.schema_arrow.names) if c in present]
            parts.append(upgrade_table(pf.read(columns=read), v, columns=cols))
        finally:
            pf.close()
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def read_shard(store: Store, shard: ShardInfo, *, columns: Sequence[str] | None = None) -> pa.Table:
    """One shard as a table of the current schema (`columns` or all; rows in file order, duplicates kept;
    v1 converted, missing nullable columns filled with nulls).

    Raises:
        OSError, pyarrow.ArrowException: the shard cannot be decoded.
    """
    return read_run(store, shard.schema_version, [shard], None if columns is None else list(columns))


def read_shards_one_by_one(store: Store, shards: Sequence[ShardInfo], cols: list[str] | None, *,
                            strict: bool) -> pa.Table:
    """Read shards separately, skipping (with a warning naming it) any whose data cannot be decoded.

    Raises:
        CorruptShardError: with ``strict``, on the first shard that cannot be decoded.
    """
    parts = []
    for s in shards:
        try:
            parts.append(read_run(store, s.schema_version, [s], cols))
        except (OSError, pa.ArrowException) as e:
            skip_or_raise(store, s, e, strict=strict, stacklevel=3)
    if not parts:
        t = TRAJECTORY_SCHEMA.empty_table()
        return t.select(cols) if cols else t
    return pa.concat_tables(parts)
