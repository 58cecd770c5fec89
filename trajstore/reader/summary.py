"""What ``traj info`` shows: :func:`summarize_store` counts a store's shards, trajectories, tokens
and duplicates from ids and token counts only, collecting unreadable shards instead of warning."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trajstore.reader.dedupe import first_copy_mask
from trajstore.reader.files import StoreLike, as_store, version_runs
from trajstore.reader.read import read_progressively
from trajstore.reader.shard_tables import read_run, read_shards_one_by_one
from trajstore.schema import TRAJECTORY_SCHEMA
from trajstore.store import CorruptShardWarning, Store
from trajstore.store.compaction_records import ShardGone
from trajstore.store.layout import TRAJECTORIES_DIR


@dataclass
class StoreSummary:
    """What :func:`summarize_store` found.

    Attributes:
        store: the store's URI. shards: readable trajectory shards.
        trajectories: distinct trajectories (duplicates dropped). tokens: their tokens.
        duplicates_dropped: rows whose id appeared earlier in arrival order.
        schema_versions: shards per schema version.
        skipped: one message per shard that could not be read (each named once).
    """

    store: str
    shards: int
    trajectories: int
    tokens: int
    duplicates_dropped: int
    schema_versions: dict[int, int]
    skipped: list[str]


def summarize_store(uri: StoreLike, *, storage_options: dict[str, Any] | None = None) -> StoreSummary:
    """Shard, trajectory and token counts of a store, reading ids and token counts only.

    Unreadable shards are not warned about (each would be named by every listing) but
    collected in :attr:`StoreSummary.skipped`, one message per shard.
    """
    store = as_store(uri, storage_options)
    try:
        return _summarize(store, progressive=False)
    except ShardGone:  # a compaction deleted a listed shard meanwhile: read on from where the read was
        return _summarize(store, progressive=True)


def _summarize(store: Store, *, progressive: bool) -> StoreSummary:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorruptShardWarning)
        shards = store.list_shards(TRAJECTORIES_DIR)
        if shards:
            cols = ["trajectory_id", "num_tokens"]
            if progressive:
                table = read_progressively(store, cols, strict=False, dedupe=False)
                shards = store.list_shards(TRAJECTORIES_DIR)
            else:
                try:
                    parts = [read_run(store, v, run, cols) for v, run in version_runs(shards)]
                    table = pa.concat_tables(parts)
                except (OSError, pa.ArrowException):
                    table = read_shards_one_by_one(store, shards, cols, strict=False)
        else:
            table = TRAJECTORY_SCHEMA.empty_table().select(["trajectory_id", "num_tokens"])
    skipped = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, CorruptShardWarning)))
    for w in caught:  # anything else is not ours to swallow
        if not issubclass(w.category, CorruptShardWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    keep = first_copy_mask(table.column("trajectory_id")) if table.num_rows else None
    if keep is not None:
        table = table.filter(pa.array(keep))
    versions: dict[int, int] = {}
    for sh in shards:
        versions[sh.schema_version] = versions.get(sh.schema_version, 0) + 1
    return StoreSummary(store.uri, len(shards), table.num_rows, int(pc.sum(table.column("num_tokens")).as_py() or 0),
                        0 if keep is None else int((~keep).sum()), versions, skipped)
