"""Decoding one shard row group by row group (:func:`iter_shard_tables`), local shards with
:data:`READAHEAD_ROW_GROUPS` decoded ahead in worker threads: what every streaming reader
(:func:`~trajstore.reader.batches.iter_batches`, :func:`~trajstore.reader.planned.iter_planned_tables`)
reads through."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from trajstore.convert import read_columns, upgrade_table
from trajstore.reader.files import file_version
from trajstore.schema import TRAJECTORY_SCHEMA
from trajstore.store import ShardInfo, Store
from trajstore.store.encoding import VERIFY_PAGE_CHECKSUMS

READAHEAD_ROW_GROUPS = 2
"""Row groups of a local shard decoded ahead, in worker threads, while the caller handles the
current one: a row group's decode is one thread per column and the token column dominates, so
this is what lets a stream use more than one core. Memory holds up to this many row groups more
(each about ``ROW_GROUP_TARGET_MB`` uncompressed). 0 decodes in order in the calling thread."""


def iter_shard_tables(store: Store, shard: ShardInfo, *, columns: Sequence[str] | None = None
                      ) -> Iterator[tuple[int, pa.Table]]:
    """``(row_group, table)`` for each row group of one shard, as the current schema (`columns` or all;
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
