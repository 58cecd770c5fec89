"""Refusing token ids outside the model's vocabulary before a run writes anything: from each
shard's Parquet statistics of ``tokens`` (footer only), reading the column only when they lack."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajstore.reader import read_shard
from trajstore.store import ShardInfo, Store
from trajstore.trainer.data.census import StoreCensus
from trajstore.trainer.data.columns import read_scalar_columns
from trajstore.trainer.data.errors import TrainDataError


def _file_of(store: Store, shard: ShardInfo) -> pq.ParquetFile:
    fh = store.fs.open(shard.path, "rb") if not store.is_local else shard.path
    return pq.ParquetFile(fh)


def _read_column(store: Store, shard: ShardInfo, column: str) -> pa.ChunkedArray:
    return read_shard(store, shard, columns=[column]).column(column)


def shard_max_token_id(store: Store, shard: ShardInfo) -> int | None:
    """The largest token id of a shard from its Parquet column statistics (footer only), or
    None when a row group has no statistics for ``tokens`` (then the column must be read)."""
    md = _file_of(store, shard).metadata
    top: int | None = None
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        if group.num_rows == 0:
            continue
        stats = None
        for j in range(group.num_columns):
            col = group.column(j)
            if col.path_in_schema in ("tokens.list.element", "tokens.list.item"):
                stats = col.statistics
                break
        if stats is None or not stats.has_min_max:
            return None
        top = int(stats.max) if top is None else max(top, int(stats.max))
    return top


def check_vocabulary(store: Store, census: StoreCensus, vocab_size: int) -> None:
    """Refuse a token id at or above `vocab_size` in any row `census` found trainable (see
    :meth:`TrajectoryStream.check_vocabulary`). Sets ``census.max_token_id``.

    Raises:
        TrainDataError: naming the trajectory, shard, row and the id.
    """
    for shard, rows in census.candidates:
        _check_shard(store, shard, rows, census, vocab_size)


def _check_shard(store: Store, shard: ShardInfo, rows: list[int], census: StoreCensus, vocab_size: int) -> None:
    """Refuse a token id >= the vocabulary in any of `rows` of `shard` (row indices)."""
    top = shard_max_token_id(store, shard)
    if top is None or top >= vocab_size:  # no statistics, or a bad id somewhere: read the ids
        tokens = _read_column(store, shard, "tokens")
        for row_i in rows:
            ids = tokens[row_i].values
            if len(ids) and (m := pc.max(ids).as_py()) >= vocab_size:
                tid = read_scalar_columns(store, shard).column("trajectory_id")[row_i].as_py()
                raise TrainDataError(f"trajectory {tid!r} (shard {shard.name}, row {row_i}): field tokens: "
                                     f"id {m} is outside the model's vocabulary of {vocab_size}")
        top = pc.max(pc.list_flatten(tokens)).as_py() if len(tokens) else None
    if top is not None:
        census.max_token_id = max(census.max_token_id if census.max_token_id is not None else -1, int(top))
