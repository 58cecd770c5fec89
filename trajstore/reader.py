"""Reading a store: lazy (polars), eager (Arrow) and streaming flat batches for the trainer.

Every reader returns schema v2 (:mod:`trajstore.schema`): shards of an older schema version are
converted on read (:func:`trajstore.convert.upgrade_table`), so a store holding v1 and v2
shards reads as one; a nullable column a shard lacks comes back as nulls. Only shards whose
footer reads and whose schema version we understand are read; others are skipped with a :class:`~trajstore.store.CorruptShardWarning` naming them (``strict=True``
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

from trajstore.convert import conform_table, ranges_positions, upgrade_table, v1_read_columns
from trajstore.errors import CorruptShardError
from trajstore.schema import (
    METADATA_SCHEMA_VERSION_KEY,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    SPAN_KIND_CODES,
    TRAJECTORY_SCHEMA,
    trajectory_schema,
)
from trajstore.store import (
    TRAJECTORIES_DIR,
    CorruptShardWarning,
    ShardInfo,
    Store,
    decode_id_index,
    id_hashes,
    open_store,
)

StoreLike = Store | str | os.PathLike[str]


def _store(uri: StoreLike, storage_options: dict[str, Any] | None) -> Store:
    return uri if isinstance(uri, Store) else open_store(uri, storage_options=storage_options)


def _dataset(store: Store, shards: Sequence[ShardInfo], version: int = SCHEMA_VERSION) -> pads.Dataset:
    return pads.dataset([s.path for s in shards], schema=trajectory_schema(version), format="parquet",
                        filesystem=store.arrow_filesystem())


def file_version(pf: pq.ParquetFile, shard: ShardInfo) -> int:
    """The schema version stamped in an opened shard's own footer (the listing's
    :attr:`ShardInfo.schema_version` when the footer has none). ``traj migrate`` can rewrite a v1
    shard as v2 under the same name between a listing and the read, so the file's own stamp,
    read with the file, decides how it is converted; the listing's could be stale.

    Raises:
        pyarrow.ArrowInvalid: the stamp is not a schema version this package reads (readers
            then skip the shard with a warning, as for any shard that cannot be decoded).
    """
    raw = (pf.metadata.metadata or {}).get(METADATA_SCHEMA_VERSION_KEY)
    version = shard.schema_version if raw is None else int(raw)
    if version not in READABLE_VERSIONS:
        raise pa.ArrowInvalid(f"schema version {version} is not readable by this package "
                              f"({list(READABLE_VERSIONS)})")
    return version


def _open(store: Store, shard: ShardInfo) -> pq.ParquetFile:
    return (pq.ParquetFile(shard.path, memory_map=True) if store.is_local
            else pq.ParquetFile(store.fs.open(shard.path, "rb")))


def version_runs(shards: Sequence[ShardInfo]) -> list[tuple[int, list[ShardInfo]]]:
    """Consecutive shards of one schema version, in arrival order: ``[(version, shards), ...]``.
    Reading run after run keeps arrival order (which decides duplicates) across versions."""
    runs: list[tuple[int, list[ShardInfo]]] = []
    for s in shards:
        if runs and runs[-1][0] == s.schema_version:
            runs[-1][1].append(s)
        else:
            runs.append((s.schema_version, [s]))
    return runs


def _scan_v1_logprobs(batch: pl.Series) -> pl.Series:
    """polars UDF: a struct series (v1 ``logprobs``, ``spans``) -> v2 action-aligned ``logprobs``."""
    t = pa.table({"spans": batch.struct.field("spans").to_arrow(),
                  "logprobs": batch.struct.field("logprobs").to_arrow(),
                  "logprob_source": pa.nulls(len(batch), pa.string())})
    t = t.cast(pa.schema([pa.field("spans", trajectory_schema(1).field("spans").type),
                          pa.field("logprobs", trajectory_schema(1).field("logprobs").type),
                          pa.field("logprob_source", pa.string())]))
    return pl.Series(batch.name, upgrade_table(t, 1, columns=["logprobs"]).column("logprobs"))


def _scan_run(store: Store, version: int, shards: Sequence[ShardInfo]) -> pl.LazyFrame:
    """One run of same-version shards as a LazyFrame of every schema-v2 column."""
    schema_v = trajectory_schema(version)
    target = pl.from_arrow(schema_v.empty_table()).schema
    if store.is_local:
        lf = pl.scan_parquet([s.path for s in shards], schema=target, missing_columns="insert")
    else:
        lf = pl.scan_pyarrow_dataset(_dataset(store, shards, version))
    if version == 1:
        # v2 columns from v1 ones; polars only evaluates what a query selects.
        sp_type = pl.from_arrow(TRAJECTORY_SCHEMA.empty_table().select(["spans", "logprobs"])).schema
        lf = lf.with_columns(
            pl.struct("logprobs", "spans").map_batches(_scan_v1_logprobs, return_dtype=sp_type["logprobs"])
            .alias("logprobs"),
            pl.struct("spans", "logprob_source").map_batches(_scan_v1_spans, return_dtype=sp_type["spans"])
            .alias("spans"),
            pl.when(pl.col("logprob_source") == "none").then(pl.col("num_action_tokens")).otherwise(0)
            .cast(pl.Int64).alias("num_missing_logprobs"),
        ).select(TRAJECTORY_SCHEMA.names)
    return lf


def _scan_v1_spans(batch: pl.Series) -> pl.Series:
    """polars UDF: a struct series (v1 ``spans``, ``logprob_source``) -> v2 ``spans`` (missing
    log-prob counts follow v1's write-time rule: engine rows have every one, none rows none)."""
    t = pa.table({"spans": batch.struct.field("spans").to_arrow(),
                  "logprob_source": batch.struct.field("logprob_source").to_arrow()})
    t = t.cast(pa.schema([pa.field("spans", trajectory_schema(1).field("spans").type),
                          pa.field("logprob_source", pa.string())]))
    return pl.Series(batch.name, upgrade_table(t, 1, columns=["spans"]).column("spans"))


def scan_trajectories(uri: StoreLike, *, storage_options: dict[str, Any] | None = None,
                      strict: bool = False, dedupe: bool = True) -> pl.LazyFrame:
    """A polars LazyFrame over every trajectory in the store (schema v2 columns).

    Projection and predicates are pushed down to the Parquet scan, so selecting scalar
    columns never reads tokens. Shards of schema v1 are converted as they are read; a nullable
    column a shard lacks is null. With ``dedupe`` (default) duplicate ids keep the first copy.
    Shards whose footer is unreadable (truncated, not Parquet, foreign or newer schema) are
    skipped with a warning naming them, or raise with ``strict``; a shard whose footer reads
    but whose data pages are damaged can only be noticed when polars decodes it, at
    ``collect()`` (use :func:`read_trajectories` or :func:`iter_batches` to skip those).
    A LazyFrame planned before ``traj migrate`` rewrote one of its v1 shards raises polars'
    ``SchemaError`` at ``collect()``: scan again (the other readers convert each file by the
    version in its own footer and need nothing).
    """
    store = _store(uri, storage_options)
    shards = store.list_shards(TRAJECTORIES_DIR, strict=strict)
    if not shards:
        return pl.from_arrow(TRAJECTORY_SCHEMA.empty_table()).lazy()
    parts = [_scan_run(store, v, run) for v, run in version_runs(shards)]
    lf = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical_relaxed")
    if dedupe:
        lf = lf.filter(pl.col("trajectory_id").is_first_distinct())
    return lf


def _first_copy_mask(ids: pa.Array | pa.ChunkedArray, seen: set[str] | None = None) -> np.ndarray | None:
    """Boolean keep-mask for first occurrences, also dropping ids in `seen` (None when every id
    is new and distinct). O(len(ids)) whatever the size of `seen`."""
    if pc.count_distinct(ids).as_py() == len(ids) and (
            not seen or not any(t in seen for t in ids.to_pylist())):
        return None  # the usual case, found without building a mask
    keep = np.ones(len(ids), dtype=bool)
    local: set[str] = set()
    for i, t in enumerate(ids.to_pylist()):
        if (seen is not None and t in seen) or t in local:
            keep[i] = False
        else:
            local.add(t)
    return keep


def _read_run(store: Store, version: int, shards: Sequence[ShardInfo], cols: list[str] | None) -> pa.Table:
    """Same-version shards as one schema-v2 table (`cols` or every column).

    Shards listed as an older version are read file by file, each converted by the version in
    its own footer (:func:`file_version`): ``traj migrate`` may have rewritten one as v2 since
    the listing. A current-version shard is never rewritten, so those runs are one dataset scan.
    """
    if version == SCHEMA_VERSION:
        return conform_table(_dataset(store, shards, version).to_table(columns=cols), cols)
    parts = []
    for shard in shards:
        pf = _open(store, shard)
        try:
            v = file_version(pf, shard)
            read = cols if v == SCHEMA_VERSION else v1_read_columns(cols)
            present = set(pf.schema_arrow.names)
            read = [c for c in (read if read is not None else pf.schema_arrow.names) if c in present]
            parts.append(upgrade_table(pf.read(columns=read), v, columns=cols))
        finally:
            pf.close()
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def read_shard(store: Store, shard: ShardInfo, *, columns: Sequence[str] | None = None) -> pa.Table:
    """One shard as a schema-v2 table (`columns` or all; rows in file order, duplicates kept;
    v1 converted, missing nullable columns filled with nulls).

    Raises:
        OSError, pyarrow.ArrowException: the shard cannot be decoded.
    """
    return _read_run(store, shard.schema_version, [shard], None if columns is None else list(columns))


def read_trajectories(uri: StoreLike, *, columns: Sequence[str] | None = None,
                      storage_options: dict[str, Any] | None = None, strict: bool = False,
                      dedupe: bool = True) -> pa.Table:
    """Every trajectory in the store as one Arrow table of schema v2 (rows in arrival order).

    Args:
        columns: subset of schema columns to read (``trajectory_id`` is always included).

    A shard whose footer cannot be read, or whose data pages cannot be decoded, is skipped
    with a :class:`~trajstore.store.CorruptShardWarning` naming it. Schema-v1 shards are
    converted (see :func:`trajstore.convert.upgrade_table`).

    Raises:
        CorruptShardError: with ``strict=True``, on the first unreadable shard.
        ValueError: a name in `columns` is not a schema column.
    """
    store = _store(uri, storage_options)
    shards = store.list_shards(TRAJECTORIES_DIR, strict=strict)
    cols = None if columns is None else list(dict.fromkeys(["trajectory_id", *columns]))
    if cols is not None:
        unknown = [c for c in cols if c not in TRAJECTORY_SCHEMA.names]
        if unknown:
            raise ValueError(f"unknown column(s) {unknown}; the trajectory schema has {TRAJECTORY_SCHEMA.names}")
    if not shards:
        t = TRAJECTORY_SCHEMA.empty_table()
        return t.select(cols) if cols else t
    try:
        parts = [_read_run(store, v, run, cols) for v, run in version_runs(shards)]
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
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
    parts = []
    for s in shards:
        try:
            parts.append(_read_run(store, s.schema_version, [s], cols))
        except (OSError, pa.ArrowException) as e:
            err = CorruptShardError(store.url_of(s.path), f"cannot decode: {str(e).splitlines()[0]}")
            if strict:
                raise err from e
            warnings.warn(f"skipping {err}", CorruptShardWarning, stacklevel=3)
    if not parts:
        t = TRAJECTORY_SCHEMA.empty_table()
        return t.select(cols) if cols else t
    return pa.concat_tables(parts)


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
    store = _store(uri, storage_options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorruptShardWarning)
        shards = store.list_shards(TRAJECTORIES_DIR)
        if shards:
            cols = ["trajectory_id", "num_tokens"]
            try:
                parts = [_read_run(store, v, run, cols) for v, run in version_runs(shards)]
                table = pa.concat_tables(parts)
            except (OSError, pa.ArrowException):
                table = _read_shards_one_by_one(store, shards, cols, strict=False)
        else:
            table = TRAJECTORY_SCHEMA.empty_table().select(["trajectory_id", "num_tokens"])
    skipped = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, CorruptShardWarning)))
    for w in caught:  # anything else is not ours to swallow
        if not issubclass(w.category, CorruptShardWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    keep = _first_copy_mask(table.column("trajectory_id")) if table.num_rows else None
    if keep is not None:
        table = table.filter(pa.array(keep))
    versions: dict[int, int] = {}
    for sh in shards:
        versions[sh.schema_version] = versions.get(sh.schema_version, 0) + 1
    return StoreSummary(store.uri, len(shards), table.num_rows, int(pc.sum(table.column("num_tokens")).as_py() or 0),
                        0 if keep is None else int((~keep).sum()), versions, skipped)


def read_trajectories_by_id(uri: StoreLike, ids: Sequence[str], *, columns: Sequence[str] | None = None,
                            storage_options: dict[str, Any] | None = None, strict: bool = False) -> pa.Table:
    """The trajectories with the given ids (first stored copy of each), in arrival order; ids
    not in the store are absent from the result.

    Each shard's footer (read when the store is listed) holds an id index, sorted 64-bit id
    hashes with their rows (:data:`trajstore.store.METADATA_ID_INDEX_KEY`): shards without a
    wanted id are never opened, and only the row groups holding a wanted row are decoded (a
    shard without the index, e.g. one written before it existed, has its ``trajectory_id``
    column read instead). The cost grows with the number of ids asked for and the row-group
    size (``ROW_GROUP_TARGET_MB``), not with the store.

    Args:
        ids: trajectory ids to fetch.
        columns: subset of schema columns (``trajectory_id`` is always included).

    Raises:
        CorruptShardError: with ``strict=True``, on the first unreadable shard.
        ValueError: a name in `columns` is not a schema column.
    """
    store = _store(uri, storage_options)
    cols = list(dict.fromkeys(["trajectory_id", *(columns if columns is not None else TRAJECTORY_SCHEMA.names)]))
    unknown = [c for c in cols if c not in TRAJECTORY_SCHEMA.names]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; the trajectory schema has {TRAJECTORY_SCHEMA.names}")
    wanted = dict.fromkeys(ids)
    hashes = dict(zip(id_hashes(list(wanted)).tolist(), wanted)) if wanted else {}
    parts: list[pa.Table] = []
    for shard in store.list_shards(TRAJECTORIES_DIR, strict=strict):
        if not wanted:
            break
        try:
            if shard.id_index is not None:
                h, rows = decode_id_index(shard.id_index)
                live = np.fromiter((k for k, v in hashes.items() if v in wanted), dtype=np.uint64)
                pos = np.searchsorted(h, live)
                pos = pos[pos < len(h)]
                pos = pos[np.isin(h[pos], live)]
                if not len(pos):
                    continue  # no wanted id here: the shard is not opened
                # every row with a matching hash (an id stored twice in a shard appears twice)
                lo, hi = np.searchsorted(h, h[pos], "left"), np.searchsorted(h, h[pos], "right")
                candidates = np.unique(np.concatenate([rows[a:b] for a, b in zip(lo, hi)]).astype(np.int64))
            else:
                candidates = None
            got = _rows_of(store, shard, candidates, wanted, cols)
        except (OSError, pa.ArrowException) as e:
            err = CorruptShardError(store.url_of(shard.path), f"cannot decode: {str(e).splitlines()[0]}")
            if strict:
                raise err from e
            warnings.warn(f"skipping {err}", CorruptShardWarning, stacklevel=2)
            continue
        if got is not None:
            parts.append(got)
            for t in got.column("trajectory_id").to_pylist():
                wanted.pop(t, None)
    if not parts:
        return TRAJECTORY_SCHEMA.empty_table().select(cols)
    return pa.concat_tables(parts)


def _rows_of(store: Store, shard: ShardInfo, candidates: np.ndarray | None, wanted: dict[str, None],
             cols: list[str]) -> pa.Table | None:
    """The first row of each wanted id in one shard (`candidates`: rows that may hold one, from
    the id index; None = find them from the shard's ``trajectory_id`` column)."""
    pf = _open(store, shard)
    version = file_version(pf, shard)  # the listing's version and row groups may predate a migrate
    if candidates is None:
        shard_ids = pf.read(columns=["trajectory_id"]).column("trajectory_id")
        hit = pc.is_in(shard_ids, value_set=pa.array(list(wanted), pa.string())).to_numpy(zero_copy_only=False)
        candidates = np.flatnonzero(hit)
        if not len(candidates):
            return None
    bounds = np.cumsum([0, *(pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups))])
    read = cols if version == SCHEMA_VERSION else v1_read_columns(cols)
    read = [c for c in read if c in set(pf.schema_arrow.names)]
    out = []
    for rg in np.unique(np.searchsorted(bounds, candidates, side="right") - 1).tolist():
        local = candidates[(candidates >= bounds[rg]) & (candidates < bounds[rg + 1])] - bounds[rg]
        out.append(pf.read_row_group(rg, columns=read).take(pa.array(local)))
    table = upgrade_table(pa.concat_tables(out), version, columns=cols)
    # exact ids (a hash can collide), first copy inside the shard
    tids = table.column("trajectory_id").to_pylist()
    seen: set[str] = set()
    keep = [i for i, t in enumerate(tids) if t in wanted and not (t in seen or seen.add(t))]
    return table.take(pa.array(keep, pa.int64())) if keep else None


def count_duplicates(uri: StoreLike, *, storage_options: dict[str, Any] | None = None) -> int:
    """Rows whose ``trajectory_id`` already appeared earlier in arrival order (dropped by readers)."""
    t = read_trajectories(uri, columns=["trajectory_id"], storage_options=storage_options, dedupe=False)
    return t.num_rows - pc.count_distinct(t.column("trajectory_id")).as_py()


@dataclass
class TrajectoryBatch:
    """One Parquet row group's trajectories as flat numpy arrays (no per-token Python objects).

    ``n`` trajectories, ``N`` tokens in all, ``A`` action tokens in all, ``S`` spans in all.
    Token positions inside a trajectory are relative to its first token.

    Attributes:
        shard: path of the shard the rows come from; row_group: its index there.
        table: the rows as Arrow (schema v2, all columns read), for scalar fields.
        trajectory_ids: ids, shape (n,), object.
        token_offsets: int64 (n+1,); trajectory i is ``tokens[token_offsets[i]:token_offsets[i+1]]``.
        tokens: int32 (N,). Zero-copy view of the Arrow buffer.
        logprob_offsets: int64 (n+1,); trajectory i's action log-probs are
            ``logprobs[logprob_offsets[i]:logprob_offsets[i+1]]``.
        logprobs: float32 (A,), nats: the rollout log-prob of each action token, in token order
            (aligned with ``tokens[action_positions()]``). Zero-copy view of the Arrow buffer
            (for shards of schema v2); NaN where the engine gave none.
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
    """Flat arrays for a schema-v2 table holding (at least) ``trajectory_id``, ``tokens``,
    ``logprobs`` and ``spans``."""
    tok_off, tok_vals = _list_flat(table.column("tokens"))
    lp_off, lp_vals = _list_flat(table.column("logprobs"))
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
    """``(row_group, table)`` for each row group of one shard, as schema v2 (`columns` or all;
    v1 converted, missing nullable columns filled with nulls).

    Raises:
        OSError, pyarrow.ArrowException: a row group cannot be decoded.
    """
    fh = store.fs.open(shard.path, "rb") if not store.is_local else None
    try:
        pf = pq.ParquetFile(fh if fh is not None else shard.path, memory_map=store.is_local)
        present = set(pf.schema_arrow.names)
        version = file_version(pf, shard)  # not the listing's: a migrate may have rewritten the shard since
        want = list(columns) if columns is not None else TRAJECTORY_SCHEMA.names
        read = want if version == SCHEMA_VERSION else v1_read_columns(want)
        read = [c for c in read if c in present]
        for rg in range(pf.num_row_groups):
            yield rg, upgrade_table(pf.read_row_group(rg, columns=read), version, columns=want)
    finally:
        if fh is not None:
            fh.close()


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
        for rg, table in iter_shard_tables(store, shard, columns=cols):
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
