"""Opening a store's trajectory shards for reading: a store from a URI, an Arrow dataset or a
Parquet file over shards, the schema version in a file's own footer, and runs of consecutive
same-version shards (read run by run so arrival order survives mixed versions)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from trajstore.errors import CorruptShardError
from trajstore.schema import METADATA_SCHEMA_VERSION_KEY, READABLE_VERSIONS, SCHEMA_VERSION, trajectory_schema
from trajstore.store import CorruptShardWarning, ShardInfo, Store, open_store
from trajstore.store.compaction_records import ShardGone
from trajstore.store.encoding import VERIFY_PAGE_CHECKSUMS
from trajstore.store.fsutil import fresh_info
from trajstore.store.shards import check_schema_version

if TYPE_CHECKING:
    import pyarrow.dataset as pads

StoreLike = Store | str | os.PathLike[str]
"""What every reader accepts as its store: an open :class:`Store`, or a URI for :func:`open_store`."""


def as_store(uri: StoreLike, storage_options: dict[str, Any] | None) -> Store:
    """`uri` itself when it is a :class:`Store`, else the store it names (opened with `storage_options`)."""
    return uri if isinstance(uri, Store) else open_store(uri, storage_options=storage_options)


def arrow_dataset(store: Store, shards: Sequence[ShardInfo], version: int = SCHEMA_VERSION) -> pads.Dataset:
    """An Arrow dataset over same-version `shards`, read with the schema of `version`."""
    import pyarrow.dataset as pads  # here, not at import: it costs ~0.25 s (it imports pandas)

    fmt = pads.ParquetFileFormat(default_fragment_scan_options=pads.ParquetFragmentScanOptions(
        page_checksum_verification=VERIFY_PAGE_CHECKSUMS))
    return pads.dataset([s.path for s in shards], schema=trajectory_schema(version), format=fmt,
                        filesystem=store.arrow_filesystem())


def file_version(pf: pq.ParquetFile, shard: ShardInfo) -> int:
    """The schema version stamped in an opened shard's own footer (the listing's
    :attr:`ShardInfo.schema_version` when the footer has none). ``traj migrate`` can rewrite a v1
    shard as the current version under the same name between a listing and the read, so the file's own stamp,
    read with the file, decides how it is converted; the listing's could be stale.

    Raises:
        NewerSchemaError: the stamp is newer than this package reads (a newer trajstore
            rewrote the shard since the listing; never skipped as corrupt).
        pyarrow.ArrowInvalid: any other stamp this package does not read (readers then skip
            the shard with a warning, as for any shard that cannot be decoded).
    """
    raw = (pf.metadata.metadata or {}).get(METADATA_SCHEMA_VERSION_KEY)
    version = shard.schema_version if raw is None else int(raw)
    check_schema_version(shard.path, version)
    if version not in READABLE_VERSIONS:
        raise pa.ArrowInvalid(f"schema version {version} is not readable by this package "
                              f"({list(READABLE_VERSIONS)})")
    return version


def open_shard(store: Store, shard: ShardInfo) -> pq.ParquetFile:
    """`shard` opened as a Parquet file (memory-mapped on a local store)."""
    source = shard.path if store.is_local else store.fs.open(shard.path, "rb")
    return pq.ParquetFile(source, memory_map=store.is_local, page_checksum_verification=VERIFY_PAGE_CHECKSUMS)


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


MAX_RELISTS = 20
"""How many times a reader lists the store again when shards it listed were deleted meanwhile
(a compaction replaced them) before giving up."""


def gone(store: Store, shard: ShardInfo, e: BaseException) -> ShardGone | None:
    """A :class:`ShardGone` when reading `shard` failed (`e`) because the file no longer exists
    (a compaction replaced it and deleted it after the listing), else None."""
    if not isinstance(e, OSError):
        return None
    try:
        if store.is_local:
            exists = os.path.exists(shard.path)
        else:
            fresh_info(store.fs, shard.path)  # not the listing cache: another thread may have stored an old listing
            exists = True
    except FileNotFoundError:
        exists = False
    except Exception:  # cannot tell: report the original error
        return None
    return None if exists else ShardGone(f"{store.url_of(shard.path)} was deleted after it was listed (a compaction "
                                         "replaced it); list the store again")


def skip_or_raise(store: Store, shard: ShardInfo, e: BaseException, *, strict: bool, rest: bool = False,
                  stacklevel: int = 2) -> None:
    """What every reader does when reading `shard` failed with `e` (an ``OSError`` or a
    ``pyarrow.ArrowException``): the shard was deleted after the listing, or it cannot be decoded.
    Returns only when the shard is to be skipped, after a :class:`~trajstore.store.CorruptShardWarning`
    naming it (``skipping ...``, or ``skipping rest of ...`` with `rest`: rows of it were already read).

    Args:
        stacklevel: the caller's ``warnings.warn`` stack level (this frame is added).

    Raises:
        ShardGone: the file no longer exists (a compaction replaced it): list again.
        CorruptShardError: with `strict`, the shard cannot be decoded.
    """
    replaced = gone(store, shard, e)
    if replaced is not None:
        raise replaced from e
    err = CorruptShardError(store.url_of(shard.path), f"cannot decode: {str(e).splitlines()[0]}")
    if strict:
        raise err from e
    warnings.warn(CorruptShardWarning(f"skipping {'rest of ' if rest else ''}{err}", err.path),
                  stacklevel=stacklevel + 1)


def relisting(read, what: str):  # noqa: ANN001, ANN201 - a small retry combinator
    """Call ``read()`` until it completes without :class:`ShardGone` (at most :data:`MAX_RELISTS`
    times): a whole-store read restarts from a fresh listing when a compaction deleted a shard
    it had listed, so it sees every trajectory once.

    Raises:
        ShardGone: every attempt met a deleted shard.
    """
    for attempt in range(MAX_RELISTS):
        try:
            return read()
        except ShardGone:
            if attempt == MAX_RELISTS - 1:
                raise
    raise AssertionError(what)
