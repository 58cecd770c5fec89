"""Streaming for the trainer: :func:`iter_batches` yields one Parquet row group at a time as a
:class:`TrajectoryBatch` of flat numpy arrays (tokens, log-probs, spans), so memory is bounded
by a few row groups (the one handed out and
:data:`~trajstore.reader.row_groups.READAHEAD_ROW_GROUPS` being decoded), not the store."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trajstore.convert import ranges_positions
from trajstore.reader.dedupe import first_copy_mask
from trajstore.reader.files import StoreLike, as_store, skip_or_raise
from trajstore.reader.planned import iter_planned_tables
from trajstore.reader.row_groups import iter_shard_tables
from trajstore.schema import ACTION_LOGPROBS_COLUMN, SPAN_KIND_CODES
from trajstore.store import ShardInfo, Store


@dataclass
class TrajectoryBatch:
    """One Parquet row group's trajectories as flat numpy arrays (no per-token Python objects).

    ``n`` trajectories, ``N`` tokens in all, ``A`` action tokens in all, ``S`` spans in all.
    Token positions inside a trajectory are relative to its first token.

    Attributes:
        shard: path of the shard the rows come from; row_group: its index there.
        table: the rows as Arrow (the current schema, all columns read), for scalar fields.
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
    """Flat arrays for a table of the current schema holding (at least) ``trajectory_id``, ``tokens``,
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
        skip_or_raise(store, shard, e, strict=strict, rest=True, stacklevel=2)


def iter_batches(uri: StoreLike, *, columns: Sequence[str] | None = None,
                 storage_options: dict[str, Any] | None = None, strict: bool = False,
                 dedupe: bool = True) -> Iterator[TrajectoryBatch]:
    """Stream the store as :class:`TrajectoryBatch` es, one Parquet row group at a time, in
    arrival order. Peak memory is bounded by a few row groups (``ROW_GROUP_TARGET_MB`` each: the
    one handed out and :data:`~trajstore.reader.row_groups.READAHEAD_ROW_GROUPS` decoded ahead), not the store. With ``dedupe`` the ids seen so far are remembered (a set of strings) to drop
    later copies.

    A compaction running meanwhile changes nothing: the stream remembers which shards it read
    and, when a shard it listed was replaced and deleted, reads from the compaction's output only
    the rows it had not read yet (:func:`~trajstore.reader.planned.iter_planned_tables`)."""
    store = as_store(uri, storage_options)
    cols = None if columns is None else list(dict.fromkeys(
        ["trajectory_id", "tokens", ACTION_LOGPROBS_COLUMN, "spans", "reward", *columns]))
    for shard, rg, table in iter_planned_tables(store, columns=cols, strict=strict, dedupe=dedupe):
        yield batch_from_table(table, shard=shard.path, row_group=rg)
