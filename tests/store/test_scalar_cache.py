"""trajstore/store/scalar_cache.py and trajstore/reader/scalars.py: a read of scalar columns gives
what reading the shards gives (mixed schema versions, duplicates, compaction, rewrites in place),
fills the cache once, takes new shards from their files, merges past the file limit, and survives
a damaged cache file, a corrupt shard and a store it cannot write."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.process_caches import files_in, names_loaded_by_a_new_process, new_process
from tests.helpers.small_shards import (
    trajectory_table,
    write_one_row_shards_in_new_processes,
    write_one_row_shards_refusing_deletes,
    write_small_shards,
)
from tests.helpers.trajectories import tiny_model_trajectory
from trajstore import read_trajectories
from trajstore.convert import trajectories_to_table
from trajstore.errors import CorruptShardError, StoreError
from trajstore.maintenance.compact import compact_store
from trajstore.reader import scalars as scalar_reader
from trajstore.schema import SCALAR_COLUMNS
from trajstore.store import CorruptShardWarning, open_store, scalar_cache
from trajstore.store.layout import scalar_cache_dir

COLS = ["reward", "status", "num_tokens", "metadata", "schema_version"]


def _cache_files(root: Path) -> list[str]:
    return files_in(root, scalar_cache_dir(), ".scalars")


def _from_shards(root: Path, cols: list[str], **kw) -> pa.Table:  # noqa: ANN003
    """The same read with the cache turned off: every shard decoded."""
    mp = pytest.MonkeyPatch()
    mp.setattr("trajstore.reader.read.is_scalar_read", lambda c: False)
    try:
        return read_trajectories(root, columns=cols, **kw)
    finally:
        mp.undo()


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.schema.equals(b.schema)
    assert a.to_pylist() == b.to_pylist()


def test_a_scalar_read_fills_the_cache_then_reads_no_shard(tmp_path: Path, monkeypatch) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(12), per_shard=3)
    want = _from_shards(tmp_path, COLS)
    new_process()
    _same(read_trajectories(tmp_path, columns=COLS), want)
    assert len(_cache_files(tmp_path)) == 1
    new_process()
    monkeypatch.setattr(pq, "ParquetFile", _refusing_shards(pq.ParquetFile))
    _same(read_trajectories(tmp_path, columns=COLS), want)  # the 4 shards are not opened
    assert len(_cache_files(tmp_path)) == 1


def _refusing_shards(real):  # noqa: ANN001, ANN202
    def open_(source, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        if str(source).endswith(".parquet"):
            raise AssertionError(f"shard opened: {source}")
        return real(source, *a, **kw)
    return open_


def test_mixed_schema_versions_and_duplicates_read_as_from_the_shards(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    rng = np.random.default_rng(1)
    trajs = [tiny_model_trajectory(rng, trajectory_id=f"m{i % 5}", reward=float(i)) for i in range(9)]
    for i, t in enumerate(trajs):
        store.write_table(trajectories_to_table([t], version=(1, 2, 3)[i % 3]))
    for cols in (COLS, list(SCALAR_COLUMNS), ["trajectory_id"]):
        want = _from_shards(tmp_path, cols)
        new_process()
        got = read_trajectories(tmp_path, columns=cols)
        _same(got, want)
        assert got.num_rows == 5  # first copy of each id, as without the cache
        _same(read_trajectories(tmp_path, columns=cols, dedupe=False), _from_shards(tmp_path, cols, dedupe=False))


def test_new_shards_are_read_from_their_files_and_files_merge_past_the_limit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scalar_cache, "MAX_CACHE_FILES", 3)
    store = write_one_row_shards_in_new_processes(
        tmp_path, 6, lambda _: _same(read_trajectories(tmp_path, columns=COLS), _from_shards(tmp_path, COLS)))
    # 1, 2, 3 files, then a 4th would pass the limit: merged into one, then 2, 3
    assert len(_cache_files(tmp_path)) == 3
    assert names_loaded_by_a_new_process(store, scalar_cache.load) == sorted(s.name for s in store.list_shards())


def test_a_shard_rewritten_in_place_is_read_again(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(4, rewards=[0.0, 1.0, 2.0, 3.0]), per_shard=4)
    read_trajectories(tmp_path, columns=COLS)  # cached
    [old] = store.list_shards()
    # the same rows with other rewards: the same size is likely, and a rewrite must change it
    new_size = store.rewrite_shard(old.path, trajectory_table(4, rewards=[9.0, 8.0, 7.0, 6.0]))
    assert new_size != old.size_bytes
    new_process()
    assert read_trajectories(tmp_path, columns=["reward"]).column("reward").to_pylist() == [9.0, 8.0, 7.0, 6.0]


def test_a_rewrite_of_the_same_content_still_changes_the_size(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(3), per_shard=3)
    [old] = store.list_shards()
    table = read_trajectories(tmp_path)
    first = store.rewrite_shard(old.path, table)
    second = store.rewrite_shard(old.path, table)  # byte for byte the first rewrite, but for the pad
    assert first != old.size_bytes and second != first
    _same(read_trajectories(tmp_path), table)


def test_a_shard_never_returns_to_a_size_it_had(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(4), per_shard=4)
    [shard] = store.list_shards()
    sizes = [shard.size_bytes]
    # smaller and larger contents in turn: without padding the sizes would come back
    for n in (2, 4, 1, 4, 3):
        sizes.append(store.rewrite_shard(shard.path, trajectory_table(n)))
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    assert sizes[-1] == Path(shard.path).stat().st_size
    assert read_trajectories(tmp_path).num_rows == 3


def test_a_shard_rewritten_while_it_was_read_is_not_added(tmp_path: Path, monkeypatch) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(4, rewards=[0.0, 1.0, 2.0, 3.0]), per_shard=2)
    [first, _] = store.list_shards()
    real = scalar_reader._read_missing

    def read_then_rewrite(store, shards, *, strict):  # noqa: ANN001, ANN202 - a traj redact meanwhile
        out = real(store, shards, strict=strict)
        store.rewrite_shard(first.path, trajectory_table(2, rewards=[7.0, 8.0]))
        return out
    monkeypatch.setattr(scalar_reader, "_read_missing", read_then_rewrite)
    assert read_trajectories(tmp_path, columns=["reward"]).column("reward").to_pylist() == [0.0, 1.0, 2.0, 3.0]
    monkeypatch.undo()
    new_process()
    hits, _ = scalar_cache.load(store)
    assert first.name not in {n for n, _ in hits}  # only the untouched shard was added
    assert read_trajectories(tmp_path, columns=["reward"]).column("reward").to_pylist() == [7.0, 8.0, 2.0, 3.0]


def test_a_store_that_refuses_deletes_stops_growing_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scalar_cache, "MAX_CACHE_FILES", 2)
    monkeypatch.setattr(scalar_cache, "MAX_FILES_UNMERGED", 4)

    def read_twice_after(store, i):  # noqa: ANN001, ANN202
        for _ in range(2):
            _same(read_trajectories(store, columns=COLS), _from_shards(tmp_path, COLS))
    write_one_row_shards_refusing_deletes(tmp_path, monkeypatch, 12, read_twice_after)
    assert len(_cache_files(tmp_path)) == 4


def test_a_compacted_store_reads_the_same(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    t = trajectory_table(8)
    write_small_shards(store, pa.concat_tables([t, t.slice(2, 3)]))  # 3 later copies, dropped by compaction
    want = _from_shards(tmp_path, COLS)
    read_trajectories(tmp_path, columns=COLS)  # the sources cached
    compact_store(tmp_path, min_age_s=0, keep_replaced_s=0)
    new_process()
    _same(read_trajectories(tmp_path, columns=COLS), want)


def test_entries_of_shards_no_longer_listed_are_dropped_at_the_next_read(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(6))
    read_trajectories(tmp_path, columns=COLS)  # the 6 sources cached
    compact_store(tmp_path, min_age_s=0, keep_replaced_s=0)
    new_process()
    read_trajectories(tmp_path, columns=COLS)
    new_process()
    hits, files = scalar_cache.load(store)
    assert len(files) == 1 and sorted(n for n, _ in hits) == [s.name for s in store.list_shards()]


def test_a_reader_with_an_older_listing_does_not_merge_away_newer_entries(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(3))
    read_trajectories(tmp_path, columns=COLS)
    older = [(s.name, s.size_bytes) for s in store.list_shards()]  # a listing taken before the next shard
    write_small_shards(store, trajectory_table(1, prefix="n"))
    read_trajectories(tmp_path, columns=COLS)  # another reader adds the new shard
    hits, files = scalar_cache.load(store)
    assert len(files) == 2
    scalar_cache.update(store, [], older, hits, files)  # the older reader finishes: nothing to merge
    assert len(_cache_files(tmp_path)) == 2
    scalar_cache.update(store, [], older[1:], hits, files)  # the first shard gone (older than the listing)
    assert len(_cache_files(tmp_path)) == 1


def test_a_damaged_cache_file_is_ignored(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(5))
    want = _from_shards(tmp_path, COLS)
    read_trajectories(tmp_path, columns=COLS)
    [f] = _cache_files(tmp_path)
    (tmp_path / scalar_cache_dir() / f).write_bytes(b"not parquet")
    new_process()
    _same(read_trajectories(tmp_path, columns=COLS), want)


def test_an_entry_whose_rows_do_not_match_its_shard_is_not_used(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(3), per_shard=2)  # shards of 2 and 1 rows
    want = _from_shards(tmp_path, COLS)
    read_trajectories(tmp_path, columns=COLS)
    [f] = _cache_files(tmp_path)
    path = tmp_path / scalar_cache_dir() / f
    table = pq.read_table(path)
    (a, sa, ra), (b, sb, rb) = json.loads(table.schema.metadata[scalar_cache.COVER_KEY])
    forged = [[a, sa, rb], [b, sb, ra]]  # the rows still add up, but each shard's count is wrong
    pq.write_table(table.replace_schema_metadata({scalar_cache.COVER_KEY: json.dumps(forged).encode()}), path)
    new_process()
    _same(read_trajectories(tmp_path, columns=COLS), want)
    assert len(_cache_files(tmp_path)) == 2  # both shards read again, and added anew
    new_process()
    hits, _ = scalar_cache.load(store)
    assert sorted(r for _, _, r in hits.values()) == [1, 2] and hits[(a, sa)][2] == ra  # the newer file wins
    _same(read_trajectories(tmp_path, columns=COLS), want)


def test_a_cache_file_deleted_after_it_was_listed_reads_the_shards(tmp_path: Path, monkeypatch) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(5))
    want = _from_shards(tmp_path, COLS)
    read_trajectories(tmp_path, columns=COLS)
    real = scalar_cache.read_file

    def gone(store, path, columns):  # noqa: ANN001, ANN202 - another process merged it away
        os.unlink(path)
        return real(store, path, columns)
    monkeypatch.setattr(scalar_cache, "read_file", gone)
    _same(read_trajectories(tmp_path, columns=COLS), want)


def test_a_corrupt_shard_is_skipped_with_a_warning_or_raised_with_strict(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    names = write_small_shards(store, trajectory_table(4))
    path = tmp_path / "trajectories" / names[1]
    data = bytearray(path.read_bytes())
    data[4:200] = b"\x00" * 196  # data pages of the first columns; the footer still reads
    path.write_bytes(bytes(data))
    new_process()
    with pytest.raises(CorruptShardError, match=names[1]):
        read_trajectories(tmp_path, columns=COLS, strict=True)
    new_process()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = read_trajectories(tmp_path, columns=COLS)
    assert got.num_rows == 3 and any(isinstance(w.message, CorruptShardWarning) for w in caught)
    new_process()
    assert read_trajectories(tmp_path, columns=COLS).num_rows == 3  # not cached as empty


def test_a_cache_file_that_cannot_be_deleted_fails_the_clear_naming_it(tmp_path: Path, monkeypatch) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(2))
    read_trajectories(tmp_path, columns=COLS)
    [f] = _cache_files(tmp_path)

    def refuse(path):  # noqa: ANN001, ANN202
        raise PermissionError(13, "Access Denied")
    monkeypatch.setattr(store.fs, "rm_file", refuse)
    with pytest.raises(StoreError, match=f"could not delete scalar cache file .*{f}"):
        scalar_cache.clear(store)


def test_a_store_that_cannot_be_written_is_read_without_the_cache(tmp_path: Path, monkeypatch) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(3))
    want = _from_shards(tmp_path, COLS)

    def refuse(*a, **kw):  # noqa: ANN002, ANN003, ANN202 - read-only credentials, a full disk
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(store, "write_bytes", refuse)
    new_process()
    _same(read_trajectories(store, columns=COLS), want)
    assert _cache_files(tmp_path) == []


def test_only_scalar_reads_use_the_cache() -> None:
    assert scalar_reader.is_scalar_read(["reward", "trajectory_id"])
    assert not scalar_reader.is_scalar_read(["reward", "tokens"])
    assert not scalar_reader.is_scalar_read(None)


def test_the_cache_on_s3(s3_store_uri) -> None:
    uri, opts = s3_store_uri
    store = open_store(uri, storage_options=opts)
    write_small_shards(store, trajectory_table(6), per_shard=2)
    want = _from_shards(uri, COLS, storage_options=opts)
    for _ in range(2):  # fills the cache, then reads from it
        new_process()
        _same(read_trajectories(uri, columns=COLS, storage_options=opts), want)
    hits, files = scalar_cache.load(store)
    assert len(files) == 1 and len(hits) == 3
