"""Reading a store: lazy (polars), eager (Arrow) and streaming flat batches for the trainer.

Only shards whose footer reads and whose schema version we understand are read; others are
skipped with a :class:`~trajstore.store.CorruptShardWarning` naming them (``strict=True``
raises). Duplicate ``trajectory_id`` s resolve deterministically: the first copy in arrival
order (shard name, then row) wins; :func:`count_duplicates` says how many copies were dropped.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from trajstore.errors import CorruptShardError
from trajstore.schema import SPAN_KIND_CODES, TRAJECTORY_SCHEMA
from trajstore.store import TRAJECTORIES_DIR, CorruptShardWarning, ShardInfo, Store, open_store

StoreLike = Store | str | os.PathLike[str]


def _store(uri: StoreLike, storage_options: dict[str, Any] | None) -> Store:
    return uri if isinstance(uri, Store) else open_store(uri, storage_options=storage_options)


def _dataset(store: Store, shards: Sequence[ShardInfo]) -> pads.Dataset:
    return pads.dataset([s.path for s in shards], schema=TRAJECTORY_SCHEMA, format="parquet",
                        filesystem=store.arrow_filesystem())


def scan_trajectories(uri: StoreLike, *, storage_options: dict[str, Any] | None = None,
                      strict: bool = False, dedupe: bool = True) -> pl.LazyFrame:
    """A polars LazyFrame over every trajectory in the store (schema v1 columns).

    Projection and predicates are pushed down to the Parquet scan, so selecting scalar
    columns never reads tokens. With ``dedupe`` (default) duplicate ids keep the first copy.
    Shards whose footer is unreadable (truncated, not Parquet, foreign or newer schema) are
    skipped with a warning naming them, or raise with ``strict``; a shard whose footer reads
    but whose data pages are damaged can only be noticed when polars decodes it, at
    ``collect()`` (use :func:`read_trajectories` or :func:`iter_batches` to skip those).
    """
    store = _store(uri, storage_options)
    shards = store.list_shards(TRAJECTORIES_DIR, strict=strict)
    if not shards:
        return pl.from_arrow(TRAJECTORY_SCHEMA.empty_table()).lazy()
    if store.is_local:
        lf = pl.scan_parquet([s.path for s in shards])
    else:
        lf = pl.scan_pyarrow_dataset(_dataset(store, shards))
    if dedupe:
        lf = lf.filter(pl.col("trajectory_id").is_first_distinct())
    return lf


def _first_copy_mask(ids: pa.Array | pa.ChunkedArray, seen: set[str] | None = None) -> np.ndarray | None:
    """Boolean keep-mask for first occurrences (None when every id is new and distinct)."""
    s = pl.Series(values=ids) if not isinstance(ids, pl.Series) else ids
    keep = s.is_first_distinct().to_numpy()
    if seen:
        keep &= ~s.is_in(list(seen)).to_numpy()
    return None if keep.all() else keep


def read_trajectories(uri: StoreLike, *, columns: Sequence[str] | None = None,
                      storage_options: dict[str, Any] | None = None, strict: bool = False,
                      dedupe: bool = True) -> pa.Table:
    """Every trajectory in the store as one Arrow table (rows in arrival order).

    Args:
        columns: subset of schema columns to read (``trajectory_id`` is always included).

    A shard whose footer cannot be read, or whose data pages cannot be decoded, is skipped
    with a :class:`~trajstore.store.CorruptShardWarning` naming it.

    Raises:
        CorruptShardError: with ``strict=True``, on the first unreadable shard.
    """
    store = _store(uri, storage_options)
    shards = store.list_shards(TRAJECTORIES_DIR, strict=strict)
    cols = None if columns is None else list(dict.fromkeys(["trajectory_id", *columns]))
    if not shards:
        t = TRAJECTORY_SCHEMA.empty_table()
        return t.select(cols) if cols else t
    try:
        table = _dataset(store, shards).to_table(columns=cols)
    except (OSError, pa.ArrowException):
        # A footer that reads but damaged data pages: find the culprit(s) shard by shard.
        table = _read_shards_one_by_one(store, shards, cols, strict=strict)
    if dedupe and table.num_rows:
        keep = _first_copy_mask(table.column("trajectory_id"))
        if keep is not None:
            table = table.filter(pa.array(keep))
    return table


def _read_shards_one_by_one(store: Store, shards: Sequence[ShardInfo], cols: list[str] | None, *,
                            strict: bool) -> pa.Table:
    """Read shards separately, skipping (with a warning naming it) any whose data cannot be decoded.

    Raises:
        CorruptShardError: with ``strict``, on the first shard that cannot be decoded.
    """
    fs = store.arrow_filesystem()
    parts = []
    for s in shards:
        try:
            parts.append(pq.read_table(s.path, columns=cols, schema=TRAJECTORY_SCHEMA, filesystem=fs))
        except (OSError, pa.ArrowException) as e:
            err = CorruptShardError(store.url_of(s.path), f"cannot decode: {str(e).splitlines()[0]}")
            if strict:
                raise err from e
            warnings.warn(f"skipping {err}", CorruptShardWarning, stacklevel=3)
    if not parts:
        t = TRAJECTORY_SCHEMA.empty_table()
        return t.select(cols) if cols else t
    return pa.concat_tables(parts)


def count_duplicates(uri: StoreLike, *, storage_options: dict[str, Any] | None = None) -> int:
    """Rows whose ``trajectory_id`` already appeared earlier in arrival order (dropped by readers)."""
    t = read_trajectories(uri, columns=["trajectory_id"], storage_options=storage_options, dedupe=False)
    return t.num_rows - pc.count_distinct(t.column("trajectory_id")).as_py()


@dataclass
class TrajectoryBatch:
    """One Parquet row group's trajectories as flat numpy arrays (no per-token Python objects).

    ``n`` trajectories, ``N`` tokens in all, ``S`` spans in all. Token positions inside a
    trajectory are relative to its first token.

    Attributes:
        shard: path of the shard the rows come from; row_group: its index there.
        table: the rows as Arrow (all columns read), for scalar fields.
        trajectory_ids: ids, shape (n,), object.
        token_offsets: int64 (n+1,); trajectory i is ``tokens[token_offsets[i]:token_offsets[i+1]]``.
        tokens: int32 (N,). Zero-copy view of the Arrow buffer.
        logprobs: float32 (N,), nats. Zero-copy view of the Arrow buffer; undefined where
            ``logprob_valid`` is False (null in the store).
        logprob_valid: bool (N,); True where the rollout log-prob is known.
        span_offsets: int64 (n+1,); trajectory i's spans are ``span_*[span_offsets[i]:span_offsets[i+1]]``.
        span_kind: int8 (S,); 0 prompt, 1 action, 2 observation (``schema.SPAN_KIND_CODES``).
        span_start, span_end: int64 (S,); token range of each span, end exclusive.
        span_policy_version: int64 (S,); -1 where null (non-action spans).
        reward: float64 (n,); NaN where null.
    """

    shard: str
    row_group: int
    table: pa.Table
    trajectory_ids: np.ndarray
    token_offsets: np.ndarray
    tokens: np.ndarray
    logprobs: np.ndarray
    logprob_valid: np.ndarray
    span_offsets: np.ndarray
    span_kind: np.ndarray
    span_start: np.ndarray
    span_end: np.ndarray
    span_policy_version: np.ndarray
    reward: np.ndarray

    def __len__(self) -> int:
        return len(self.trajectory_ids)

    def action_mask(self) -> np.ndarray:
        """bool (N,): 1 = token is a model action (computed from the spans, vectorised)."""
        mask = np.zeros(len(self.tokens), dtype=np.int8)
        is_act = self.span_kind == SPAN_KIND_CODES["action"]
        base = np.repeat(self.token_offsets[:-1], np.diff(self.span_offsets))
        np.add.at(mask, (base + self.span_start)[is_act], 1)
        ends = (base + self.span_end)[is_act]
        np.add.at(mask, ends[ends < len(mask)], -1)
        return np.cumsum(mask, dtype=np.int32) > 0


def _list_flat(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array]:
    if isinstance(col, pa.ChunkedArray):  # combine_chunks copies even a single chunk
        arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    else:
        arr = col
    offsets = arr.offsets.to_numpy()
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    if offsets[0] != 0:
        offsets = offsets - offsets[0]
    return offsets.astype(np.int64, copy=False), values


def batch_from_table(table: pa.Table, *, shard: str = "", row_group: int = -1) -> TrajectoryBatch:
    """Flat arrays for a table holding (at least) the ``tokens``, ``logprobs`` and ``spans`` columns."""
    tok_off, tok_vals = _list_flat(table.column("tokens"))
    _, lp_vals = _list_flat(table.column("logprobs"))
    tokens = tok_vals.to_numpy(zero_copy_only=True) if tok_vals.null_count == 0 else tok_vals.to_numpy(zero_copy_only=False)
    lp_data = pa.Array.from_buffers(pa.float32(), len(lp_vals), [None, lp_vals.buffers()[1]], offset=lp_vals.offset)
    logprobs = lp_data.to_numpy(zero_copy_only=True)
    logprob_valid = lp_vals.is_valid().to_numpy(zero_copy_only=False)
    sp_off, sp_vals = _list_flat(table.column("spans"))
    kinds = sp_vals.field("kind")
    kind_codes = np.full(len(sp_vals), -1, dtype=np.int8)
    for name, code in SPAN_KIND_CODES.items():
        kind_codes[pc.equal(kinds, name).to_numpy(zero_copy_only=False)] = code
    pv = sp_vals.field("policy_version").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    reward = (table.column("reward").to_numpy() if "reward" in table.column_names
              else np.full(table.num_rows, np.nan))
    return TrajectoryBatch(
        shard=shard, row_group=row_group, table=table,
        trajectory_ids=table.column("trajectory_id").to_numpy(),
        token_offsets=tok_off, tokens=tokens, logprobs=logprobs, logprob_valid=logprob_valid,
        span_offsets=sp_off, span_kind=kind_codes,
        span_start=sp_vals.field("start").to_numpy(zero_copy_only=False).astype(np.int64, copy=False),
        span_end=sp_vals.field("end").to_numpy(zero_copy_only=False).astype(np.int64, copy=False),
        span_policy_version=pv,
        reward=np.asarray(reward, dtype=np.float64),
    )


def iter_shard_batches(store: Store, shard: ShardInfo, *, columns: Sequence[str] | None = None,
                       skip_ids: set[str] | None = None, strict: bool = False) -> Iterator[TrajectoryBatch]:
    """Batches of one shard, one per row group, dropping ids in `skip_ids` (which it extends).

    Raises:
        CorruptShardError: a row group cannot be decoded (with ``strict``); otherwise the rest
            of the shard is skipped with a warning.
    """
    cols = None if columns is None else list(dict.fromkeys(
        ["trajectory_id", "tokens", "logprobs", "spans", "reward", *columns]))
    try:
        fh = store.fs.open(shard.path, "rb") if not store.is_local else None
        pf = pq.ParquetFile(fh if fh is not None else shard.path, memory_map=store.is_local)
        for rg in range(pf.num_row_groups):
            table = pf.read_row_group(rg, columns=cols)
            if skip_ids is not None:
                keep = _first_copy_mask(table.column("trajectory_id"), skip_ids)
                if keep is not None:
                    table = table.filter(pa.array(keep))
                skip_ids.update(table.column("trajectory_id").to_pylist())
            if table.num_rows:
                yield batch_from_table(table, shard=shard.path, row_group=rg)
    except (OSError, pa.ArrowException) as e:
        err = CorruptShardError(store.url_of(shard.path), f"cannot decode: {str(e).splitlines()[0]}")
        if strict:
            raise err from e
        warnings.warn(f"skipping rest of {err}", CorruptShardWarning, stacklevel=2)


def iter_batches(uri: StoreLike, *, columns: Sequence[str] | None = None,
                 storage_options: dict[str, Any] | None = None, strict: bool = False,
                 dedupe: bool = True) -> Iterator[TrajectoryBatch]:
    """Stream the store as :class:`TrajectoryBatch` es, one Parquet row group at a time, in
    arrival order. Peak memory is bounded by a row group (``ROW_GROUP_TARGET_MB``), not the
    store. With ``dedupe`` the ids seen so far are remembered (a set of strings) to drop
    later copies."""
    store = _store(uri, storage_options)
    seen: set[str] | None = set() if dedupe else None
    for shard in store.list_shards(TRAJECTORIES_DIR, strict=strict):
        yield from iter_shard_batches(store, shard, columns=columns, skip_ids=seen, strict=strict)
