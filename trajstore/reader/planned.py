"""Reading the whole store in arrival order while compactions replace and delete its shards:
:func:`iter_planned_tables` remembers which rows it read (:class:`~trajstore.reader.progress.Progress`)
and, when a shard it listed is gone, lists again and reads only the rows the compaction's output
holds that it had not read, so a long read always advances and never repeats or skips a row."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from trajstore.reader.dedupe import first_copy_mask
from trajstore.reader.files import MAX_RELISTS, skip_or_raise
from trajstore.reader.progress import Progress, Unit, plan
from trajstore.reader.row_groups import iter_shard_tables
from trajstore.store import ShardInfo, Store
from trajstore.store.compaction_records import ShardGone
from trajstore.store.layout import TRAJECTORIES_DIR


def iter_planned_tables(store: Store, *, columns: Sequence[str] | None, strict: bool, dedupe: bool
                        ) -> Iterator[tuple[ShardInfo, int, pa.Table]]:
    """``(shard, row group, table)`` of every stored row in arrival order (`columns` or all, schema
    of this package), one row group at a time; with `dedupe` later copies of an id are dropped.

    A shard deleted after the listing (a compaction replaced it) makes it list again and go on
    from where it was; it gives up after :data:`~trajstore.reader.files.MAX_RELISTS` such
    listings in a row without a row read.

    Raises:
        ShardGone: shards kept disappearing (see above).
        CorruptShardError: with `strict`, a shard that cannot be read.
    """
    seen: set[str] | None = set() if dedupe else None
    progress = Progress()
    misses = 0
    while True:
        try:
            for shard in store.list_shards(TRAJECTORIES_DIR, strict=strict):
                units, _ = plan(shard, progress)
                for rg, table in _read_units(store, shard, units, progress, columns=columns, seen=seen,
                                             strict=strict):
                    misses = 0
                    yield shard, rg, table
            return
        except ShardGone:
            misses += 1
            if misses >= MAX_RELISTS:
                raise


def _read_units(store: Store, shard: ShardInfo, units: list[Unit], progress: Progress, *,
                columns: Sequence[str] | None, seen: set[str] | None, strict: bool
                ) -> Iterator[tuple[int, pa.Table]]:
    """The planned rows of one shard, row group by row group, advancing `progress` after each."""
    if not any(len(u.phys) for u in units):
        progress.done.extend(u.name for u in units)
        return
    phys = np.concatenate([u.phys for u in units])
    whole = len(phys) == shard.num_rows
    ends = np.cumsum([len(u.phys) for u in units])  # units' last positions in `phys`, exclusive
    base, marked = 0, 0  # units[:marked] are in progress.done
    try:
        for rg, table in iter_shard_tables(store, shard, columns=columns):
            n = table.num_rows
            lo, hi = np.searchsorted(phys, [base, base + n])
            if not whole:
                table = table.take(pa.array(phys[lo:hi] - base))
            if seen is not None:
                keep = first_copy_mask(table.column("trajectory_id"), seen)
                if keep is not None:
                    table = table.filter(pa.array(keep))
                seen.update(table.column("trajectory_id").to_pylist())
            base += n
            if table.num_rows:
                yield rg, table
            # every planned row below `hi` has been read: units before k are finished
            k = int(np.searchsorted(ends, hi, side="right"))
            progress.done.extend(u.name for u in units[marked:k])
            marked = max(marked, k)
            start = int(ends[k - 1]) if k else 0
            if k < len(units) and hi > start:
                progress.shard, progress.next_row = units[k].name, int(units[k].rows[hi - start - 1]) + 1
            else:
                progress.shard, progress.next_row = None, 0
    except (OSError, pa.ArrowException) as e:
        skip_or_raise(store, shard, e, strict=strict, rest=True, stacklevel=3)
    progress.done.extend(u.name for u in units[marked:])
    progress.shard, progress.next_row = None, 0
