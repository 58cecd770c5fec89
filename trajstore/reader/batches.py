"""Streaming for the trainer: :func:`iter_batches` yields one Parquet row group at a time as a
:class:`TrajectoryBatch` of flat numpy arrays (tokens, log-probs, spans), so memory is bounded
by a few row groups (the one handed out and :data:`READAHEAD_ROW_GROUPS` being decoded), not the
store."""

from __future__ import annotations

import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajstore.convert import ranges_positions, read_columns, upgrade_table
from trajstore.errors import CorruptShardError
from trajstore.reader.dedupe import first_copy_mask
from trajstore.reader.files import StoreLike, as_store, file_version, gone
from trajstore.schema import ACTION_LOGPROBS_COLUMN, SPAN_KIND_CODES, TRAJECTORY_SCHEMA
from trajstore.store import CorruptShardWarning, ShardInfo, Store
from trajstore.store.encoding import VERIFY_PAGE_CHECKSUMS

READAHEAD_ROW_GROUPS = 2
"""Row groups of a local shard decoded ahead, in worker threads, while the caller handles the
current one: a row group's decode is one thread per column and the token column dominates, so
this is what lets a stream use more than one core. Memory holds up to this many row groups more
(each about ``ROW_GROUP_TARGET_MB`` uncompressed). 0 decodes in order in the calling thread."""


@dataclass
class TrajectoryBatch:
    """One Parquet row group's trajectories as flat numpy arrays (no per-token Python objects).

    ``n`` trajectories, ``N`` tokens in all, ``A`` action tokens in all, ``S`` spans in all.
    Token positions inside a trajectory are relative to its first token.

    Attributes:
        shard: path of the shard the rows come from; row_group: its index there.
        table: the rows as Arrow (schema v3, all columns read), for scalar fields.
        trajectory_ids: ids, shape (n,), object.
        token_offsets: int64 (n+1,); trajectory i is ``tokens[token_offsets[i]:token_offsets[i+1]]``.
        tokens: int32 (N,). Zero-copy view of the Arrow buffer.
        logprob_offsets: int64 (n+1,); trajectory i's action log-probs are
            ``logprobs[logprob_offsets[i]:logprob_offsets[i+1]]``.
        logprobs: float32 (A,), nats: the rollout log-prob of each action token, in token order
            (aligned with ``tokens[action_positions()]``). Zero-copy view of the Arrow buffer
            (for shards of schema v3); NaN where the engine gave none.
        logprob_valid: bool (A,); True where the rollout log-prob is known (not NaN).
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
    logprob_offsets: np.ndarray
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

    def _span_base(self) -> np.ndarray:
        return np.repeat(self.token_offsets[:-1], np.diff(self.span_offsets))

    def action_mask(self) -> np.ndarray:
        """bool (N,): 1 = token is a model action (computed from the spans, vectorised)."""
        mask = np.zeros(len(self.tokens), dtype=np.int8)
        is_act = self.span_kind == SPAN_KIND_CODES["action"]
        base = self._span_base()
        np.add.at(mask, (base + self.span_start)[is_act], 1)
        ends = (base + self.span_end)[is_act]
        np.add.at(mask, ends[ends < len(mask)], -1)
        return np.cumsum(mask, dtype=np.int32) > 0

    def action_positions(self) -> np.ndarray:
        """int64 (A,): flat index into ``tokens`` of each action token, in order, so that
        ``logprobs[j]`` is the log-prob of ``tokens[action_positions()[j]]``."""
        is_act = self.span_kind == SPAN_KIND_CODES["action"]
        starts = (self._span_base() + self.span_start)[is_act]
        return ranges_positions(starts, (self.span_end - self.span_start)[is_act])

    def logprobs_full(self) -> np.ndarray:
        """float32 (N,), nats: the full-length view aligned with ``tokens``: the action
        tokens' log-probs in place, NaN at prompt / observation tokens and where unknown (a copy)."""
        out = np.full(len(self.tokens), np.nan, dtype=np.float32)
        out[self.action_positions()] = self.logprobs
        return out


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
    """Flat arrays for a schema-v3 table holding (at least) ``trajectory_id``, ``tokens``,
    ``action_logprobs`` (:data:`~trajstore.schema.ACTION_LOGPROBS_COLUMN`) and ``spans``."""
    tok_off, tok_vals = _list_flat(table.column("tokens"))
    lp_off, lp_vals = _list_flat(table.column(ACTION_LOGPROBS_COLUMN))
    tokens = tok_vals.to_numpy(zero_copy_only=True) if tok_vals.null_count == 0 else tok_vals.to_numpy(zero_copy_only=False)
    logprobs = lp_vals.to_numpy(zero_copy_only=lp_vals.null_count == 0)
    if lp_vals.null_count:  # never written by trajstore; tolerate a foreign writer's nulls as unknown
        logprobs = logprobs.astype(np.float32)
    logprob_valid = ~np.isnan(logprobs)
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
        token_offsets=tok_off, tokens=tokens, logprob_offsets=lp_off, logprobs=logprobs,
        logprob_valid=logprob_valid, span_offsets=sp_off, span_kind=kind_codes,
        span_start=sp_vals.field("start").to_numpy(zero_copy_only=False).astype(np.int64, copy=False),
        span_end=sp_vals.field("end").to_numpy(zero_copy_only=False).astype(np.int64, copy=False),
        span_policy_version=pv,
        reward=np.asarray(reward, dtype=np.float64),
    )


def iter_shard_tables(store: Store, shard: ShardInfo, *, columns: Sequence[str] | None = None
                      ) -> Iterator[tuple[int, pa.Table]]:
    """``(row_group, table)`` for each row group of one shard, as schema v3 (`columns` or all;
    v1 converted, missing nullable columns filled with nulls).

    Raises:
        OSError, pyarrow.ArrowException: a row group cannot be decoded.
    """
    # locally one memory map of the file as it was opened (a migrate may replace it under the
    # same name meanwhile) that every decoding thread reads; elsewhere one fsspec file, in order
    fh = store.fs.open(shard.path, "rb") if not store.is_local else pa.memory_map(shard.path)
    try:
        pf = pq.ParquetFile(fh, page_checksum_verification=VERIFY_PAGE_CHECKSUMS)
        present = set(pf.schema_arrow.names)
        version = file_version(pf, shard)  # not the listing's: a migrate may have rewritten the shard since
        want = list(columns) if columns is not None else TRAJECTORY_SCHEMA.names
        read = read_columns(want, version)
        read = [c for c in read if c in present]
        if store.is_local and READAHEAD_ROW_GROUPS and pf.num_row_groups > 1:
            yield from _decode_ahead(fh, pf.num_row_groups, lambda f, rg: upgrade_table(
                f.read_row_group(rg, columns=read), version, columns=want))
            return
        for rg in range(pf.num_row_groups):
            yield rg, upgrade_table(pf.read_row_group(rg, columns=read), version, columns=want)
    finally:
        fh.close()


def _decode_ahead(source: pa.MemoryMappedFile, n: int, decode: Callable[[pq.ParquetFile, int], pa.Table]
                  ) -> Iterator[tuple[int, pa.Table]]:
    """``(row_group, decode(file, row_group))`` for row groups 0..n-1 in order, while up to
    :data:`READAHEAD_ROW_GROUPS` following ones are decoded in worker threads (each with its own
    ``ParquetFile`` over the shared memory map; pyarrow releases the GIL while decoding). An
    exception surfaces at its row group's turn; closing the iterator early waits for the decodes
    in flight and starts no more."""
    local = threading.local()

    def task(rg: int) -> pa.Table:
        f = getattr(local, "file", None)
        if f is None:
            f = local.file = pq.ParquetFile(source, page_checksum_verification=VERIFY_PAGE_CHECKSUMS)
        return decode(f, rg)

    with ThreadPoolExecutor(READAHEAD_ROW_GROUPS, thread_name_prefix="trajstore-decode") as ex:
        pending: deque[tuple[int, Future[pa.Table]]] = deque()
        try:
            for rg in range(min(n, READAHEAD_ROW_GROUPS + 1)):
                pending.append((rg, ex.submit(task, rg)))
            following = len(pending)
            while pending:
                rg, fut = pending.popleft()
                yield rg, fut.result()
                if following < n:  # the caller is done with rg: one more may be decoded
                    pending.append((following, ex.submit(task, following)))
                    following += 1
        finally:
            for _, fut in pending:
                fut.cancel()


def iter_shard_batches(store: Store, shard: ShardInfo, *, columns: Sequence[str] | None = None,
                       skip_ids: set[str] | None = None, strict: bool = False) -> Iterator[TrajectoryBatch]:
    """Batches of one shard, one per row group, dropping ids in `skip_ids` (which it extends).

    Raises:
        CorruptShardError: a row group cannot be decoded (with ``strict``); otherwise the rest
            of the shard is skipped with a warning.
        ShardGone: the file was deleted since it was listed (a compaction replaced it).
    """
    cols = None if columns is None else list(dict.fromkeys(
        ["trajectory_id", "tokens", ACTION_LOGPROBS_COLUMN, "spans", "reward", *columns]))
    try:
        for rg, table in iter_shard_tables(store, shard, columns=cols):
            if skip_ids is not None:
                keep = first_copy_mask(table.column("trajectory_id"), skip_ids)
                if keep is not None:
                    table = table.filter(pa.array(keep))
                skip_ids.update(table.column("trajectory_id").to_pylist())
            if table.num_rows:
                yield batch_from_table(table, shard=shard.path, row_group=rg)
    except (OSError, pa.ArrowException) as e:
        replaced = gone(store, shard, e)
        if replaced is not None:
            raise replaced from e
        err = CorruptShardError(store.url_of(shard.path), f"cannot decode: {str(e).splitlines()[0]}")
        if strict:
            raise err from e
        warnings.warn(CorruptShardWarning(f"skipping rest of {err}", err.path), stacklevel=2)


def iter_batches(uri: StoreLike, *, columns: Sequence[str] | None = None,
                 storage_options: dict[str, Any] | None = None, strict: bool = False,
                 dedupe: bool = True) -> Iterator[TrajectoryBatch]:
    """Stream the store as :class:`TrajectoryBatch` es, one Parquet row group at a time, in
    arrival order. Peak memory is bounded by a few row groups (``ROW_GROUP_TARGET_MB`` each: the
    one handed out and :data:`READAHEAD_ROW_GROUPS` decoded ahead), not the store. With ``dedupe`` the ids seen so far are remembered (a set of strings) to drop
    later copies.

    A compaction running meanwhile changes nothing: the stream remembers which shards it read
    and, when a shard it listed was replaced and deleted, reads from the compaction's output only
    the rows it had not read yet (:func:`~trajstore.reader.planned.iter_planned_tables`)."""
    from trajstore.reader.planned import iter_planned_tables

    store = as_store(uri, storage_options)
    cols = None if columns is None else list(dict.fromkeys(
        ["trajectory_id", "tokens", ACTION_LOGPROBS_COLUMN, "spans", "reward", *columns]))
    for shard, rg, table in iter_planned_tables(store, columns=cols, strict=strict, dedupe=dedupe):
        yield batch_from_table(table, shard=shard.path, row_group=rg)
