"""Reading a store: lazy (polars), eager (Arrow) and streaming flat batches for the trainer.

Every reader returns the current schema (v4, :mod:`trajstore.schema`): shards of an older schema version are
converted on read (:func:`trajstore.convert.upgrade_table`), so a store holding v1, v2 and
v3 shards reads as one; a nullable column a shard lacks comes back as nulls. A shard of a newer
schema version than this package reads raises :class:`~trajstore.errors.NewerSchemaError` from
every reader (upgrade trajstore). Other shards whose footer or data cannot be read are skipped
with a :class:`~trajstore.store.CorruptShardWarning` naming them (``strict=True`` raises). Duplicate
``trajectory_id`` s resolve deterministically: the first copy in arrival order (shard name,
then row) wins; :func:`count_duplicates` says how many copies were dropped.

This package re-exports the public names of its modules: ``read`` (eager ``read_*``),
``shard_tables`` (``read_shard``), ``scan`` (lazy ``scan_*``), ``batches`` (``iter_batches``),
``row_groups`` (``iter_shard_tables``), ``by_id``, ``summary`` and ``files``.
"""

from trajstore.reader.batches import TrajectoryBatch, batch_from_table, iter_batches, iter_shard_batches
from trajstore.reader.by_id import read_trajectories_by_id
from trajstore.reader.files import StoreLike, file_version, version_runs
from trajstore.reader.read import count_duplicates, read_trajectories
from trajstore.reader.row_groups import iter_shard_tables
from trajstore.reader.scan import scan_trajectories
from trajstore.reader.shard_tables import read_shard
from trajstore.reader.summary import StoreSummary, summarize_store

__all__ = [
    "StoreLike", "StoreSummary", "TrajectoryBatch", "batch_from_table", "count_duplicates", "file_version",
    "iter_batches", "iter_shard_batches", "iter_shard_tables", "read_shard", "read_trajectories",
    "read_trajectories_by_id", "scan_trajectories", "summarize_store", "version_runs",
]
