"""Lazy reading: :func:`scan_trajectories`, a polars LazyFrame over every trajectory shard, with
shards of schema v1 to v3 converted to the current one column by column inside the query plan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trajstore.convert import upgrade_table
from trajstore.lineage import episode_id_column
from trajstore.reader.files import StoreLike, arrow_dataset, as_store, version_runs
from trajstore.schema import (
    ACTION_LOGPROBS_COLUMN,
    COLUMNS_NEW_IN_V4,
    LEGACY_LOGPROBS_COLUMN,
    SCHEMA_VERSION,
    TRAJECTORY_SCHEMA,
    trajectory_schema,
)
from trajstore.store import ShardInfo, Store
from trajstore.store.layout import TRAJECTORIES_DIR

if TYPE_CHECKING:
    import polars as pl  # polars loads on the first lazy scan, not with every reader (~0.2 s)


def _scan_v1_logprobs(batch: pl.Series) -> pl.Series:
    """polars UDF: a struct series (v1 ``logprobs``, ``spans``) -> v2 action-aligned ``logprobs``."""
    import polars as pl  # polars loads on the first lazy scan, not with every reader (~0.2 s)

    t = pa.table({"spans": batch.struct.field("spans").to_arrow(),
                  "logprobs": batch.struct.field("logprobs").to_arrow(),
                  "logprob_source": pa.nulls(len(batch), pa.string())})
    t = t.cast(pa.schema([pa.field("spans", trajectory_schema(1).field("spans").type),
                          pa.field("logprobs", trajectory_schema(1).field("logprobs").type),
                          pa.field("logprob_source", pa.string())]))
    return pl.Series(batch.name, upgrade_table(t, 1, columns=[ACTION_LOGPROBS_COLUMN]).column(ACTION_LOGPROBS_COLUMN))


def _scan_episode_ids(batch: pl.Series) -> pl.Series:
    """polars UDF: a struct series (``trajectory_id``, ``metadata``) of v1 / v2 rows -> v3 ``episode_id``."""
    import polars as pl  # polars loads on the first lazy scan, not with every reader (~0.2 s)

    return pl.Series(batch.name, episode_id_column(batch.struct.field("trajectory_id").to_arrow(),
                                                   batch.struct.field("metadata").to_arrow()))


def _scan_run(store: Store, version: int, shards: Sequence[ShardInfo]) -> pl.LazyFrame:
    """One run of same-version shards as a LazyFrame of every column of the current schema."""
    import polars as pl  # polars loads on the first lazy scan, not with every reader (~0.2 s)

    schema_v = trajectory_schema(version)
    target = pl.from_arrow(schema_v.empty_table()).schema
    if store.is_local:
        lf = pl.scan_parquet([s.path for s in shards], schema=target, missing_columns="insert")
    else:
        lf = pl.scan_pyarrow_dataset(arrow_dataset(store, shards, version))
    if version == SCHEMA_VERSION:
        return lf
    # current columns from v1 to v3 ones; polars only evaluates what a query selects.
    current = pl.from_arrow(TRAJECTORY_SCHEMA.empty_table()).schema
    if version == 1:
        lf = lf.with_columns(
            pl.struct(LEGACY_LOGPROBS_COLUMN, "spans").map_batches(
                _scan_v1_logprobs, return_dtype=current[ACTION_LOGPROBS_COLUMN]).alias(LEGACY_LOGPROBS_COLUMN),
            pl.struct("spans", "logprob_source").map_batches(_scan_v1_spans, return_dtype=current["spans"])
            .alias("spans"),
            pl.when(pl.col("logprob_source") == "none").then(pl.col("num_action_tokens")).otherwise(0)
            .cast(pl.Int64).alias("num_missing_logprobs"),
        )
    if version < 3:
        lf = lf.rename({LEGACY_LOGPROBS_COLUMN: ACTION_LOGPROBS_COLUMN}).with_columns(
            pl.struct("trajectory_id", "metadata").map_batches(_scan_episode_ids, return_dtype=pl.String)
            .alias("episode_id"),
            pl.lit(None, pl.String).alias("parent_trajectory_id"),
            pl.lit(None, pl.Int64).alias("fork_point"),
            pl.lit(None, pl.String).alias("link_kind"),
        )
    # v3 -> v4: the spans gain the fields new in v4 as nulls (the cast adds them), the rows the new columns.
    # strict=False: polars >= 2.2 casts structs by position when strict; non-strict matches fields by name
    # (the fields old and new share have the same types, so no value can fail the cast and become null).
    return lf.with_columns(pl.lit(SCHEMA_VERSION, pl.Int64).alias("schema_version"),
                           pl.col("spans").cast(current["spans"], strict=False),
                           *(pl.lit(None, current[c]).alias(c) for c in COLUMNS_NEW_IN_V4)).select(TRAJECTORY_SCHEMA.names)


def _scan_v1_spans(batch: pl.Series) -> pl.Series:
    """polars UDF: a struct series (v1 ``spans``, ``logprob_source``) -> v2 ``spans`` (missing
    log-prob counts follow v1's write-time rule: engine rows have every one, none rows none)."""
    import polars as pl  # polars loads on the first lazy scan, not with every reader (~0.2 s)

    t = pa.table({"spans": batch.struct.field("spans").to_arrow(),
                  "logprob_source": batch.struct.field("logprob_source").to_arrow()})
    t = t.cast(pa.schema([pa.field("spans", trajectory_schema(1).field("spans").type),
                          pa.field("logprob_source", pa.string())]))
    return pl.Series(batch.name, upgrade_table(t, 1, columns=["spans"]).column("spans"))


def scan_trajectories(uri: StoreLike, *, storage_options: dict[str, Any] | None = None,
                      strict: bool = False, dedupe: bool = True) -> pl.LazyFrame:
    """A polars LazyFrame over every trajectory in the store (the current schema's columns).

    Projection and predicates are pushed down to the Parquet scan, so selecting scalar
    columns never reads tokens. Shards of schema v1 to v3 are converted as they are read; a nullable
    column a shard lacks is null. With ``dedupe`` (default) duplicate ids keep the first copy.
    A shard of a newer schema version raises :class:`~trajstore.errors.NewerSchemaError`.
    Shards whose footer is unreadable (truncated, not Parquet, foreign schema) are
    skipped with a warning naming them, or raise with ``strict``; a shard whose footer reads
    but whose data pages are damaged can only be noticed when polars decodes it, at
    ``collect()`` (use :func:`read_trajectories` or :func:`iter_batches` to skip those).
    A LazyFrame planned before ``traj migrate`` rewrote one of its v1 / v2 shards raises polars'
    ``SchemaError`` at ``collect()``: scan again (the other readers convert each file by the
    version in its own footer and need nothing).
    """
    import polars as pl  # polars loads on the first lazy scan, not with every reader (~0.2 s)

    store = as_store(uri, storage_options)
    shards = store.list_shards(TRAJECTORIES_DIR, strict=strict)
    if not shards:
        return pl.from_arrow(TRAJECTORY_SCHEMA.empty_table()).lazy()
    parts = [_scan_run(store, v, run) for v, run in version_runs(shards)]
    lf = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical_relaxed")
    if dedupe:
        lf = lf.filter(pl.col("trajectory_id").is_first_distinct())
    return lf
