"""trajstore/store/index.py: footer facts kept in the store so a new process lists without reading
footers; new shards appended, files merged past the limit, stale and damaged entries ignored, a
read-only store still listed, newer schema versions still refused."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.process_caches import files_in, names_loaded_by_a_new_process, new_process
from tests.helpers.small_shards import (
    trajectory_table,
    write_one_row_shards_in_new_processes,
    write_one_row_shards_refusing_deletes,
    write_small_shards,
)
from trajstore.errors import NewerSchemaError
from trajstore.schema import METADATA_SCHEMA_VERSION_KEY, SCHEMA_VERSION
from trajstore.store import Store, open_store, shards
from trajstore.store import index as shard_index
from trajstore.store.layout import shard_index_dir


def _index_files(root: Path) -> list[str]:
    return files_in(root, shard_index_dir(), ".arrow")


def test_a_new_process_lists_from_the_index_without_reading_footers(tmp_path: Path, monkeypatch) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(6), per_shard=2)
    new_process()
    first = store.list_shards()  # reads the footers, writes the index
    assert len(_index_files(tmp_path)) == 1
    new_process()
    monkeypatch.setattr(pq, "read_metadata", lambda *a, **kw: (_ for _ in ()).throw(AssertionError("footer read")))
    assert store.list_shards() == first  # rows, row groups, version, columns and id index from the index


def test_new_shards_are_appended_and_files_merged_past_the_limit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(shard_index, "MAX_INDEX_FILES", 3)
    store = write_one_row_shards_in_new_processes(tmp_path, 5, Store.list_shards)
    # 1, 2, 3 files, then a 4th would pass the limit: merged into one, then one more
    assert len(_index_files(tmp_path)) == 2
    assert names_loaded_by_a_new_process(store, shard_index.load) == sorted(s.name for s in store.list_shards())


def test_a_rewritten_shard_is_read_again_not_taken_from_its_old_entry(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(4), per_shard=4)
    new_process()
    [old] = store.list_shards()
    store.rewrite_shard(old.path, trajectory_table(2))  # same name, other rows: other size
    new_process()
    [new] = store.list_shards()
    assert new.num_rows == 2 and old.num_rows == 4


def test_a_damaged_index_file_is_ignored(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(3))
    new_process()
    want = store.list_shards()
    [f] = _index_files(tmp_path)
    (tmp_path / shard_index_dir() / f).write_bytes(b"not arrow")
    new_process()
    assert store.list_shards() == want


def test_a_store_that_cannot_be_written_is_listed_without_an_index(tmp_path: Path, monkeypatch) -> None:
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(3))

    def refuse(*a, **kw):  # noqa: ANN002, ANN003, ANN202 - read-only credentials, a full disk
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(store, "write_bytes", refuse)
    new_process()
    assert len(store.list_shards()) == 3 and _index_files(tmp_path) == []


def test_an_index_entry_of_a_newer_schema_version_is_still_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    t = trajectory_table(1)
    store.write_table(t.replace_schema_metadata({**t.schema.metadata,
                                                 METADATA_SCHEMA_VERSION_KEY: str(SCHEMA_VERSION + 1).encode()}))
    new_process()
    with pytest.raises(NewerSchemaError):
        store.list_shards()
    # an index written by a newer trajstore that knows the version does not make this one read it
    [info] = [shards.ShardInfo(p, 1, n, 1, SCHEMA_VERSION + 1) for p, n in store.shard_paths()]
    shard_index.update(store, [info], [info], [])
    new_process()
    with pytest.raises(NewerSchemaError):
        store.list_shards()


def test_a_store_that_refuses_deletes_stops_growing_the_index(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(shard_index, "MAX_INDEX_FILES", 2)
    monkeypatch.setattr(shard_index, "MAX_FILES_UNMERGED", 4)

    def listed_after(store, i):  # noqa: ANN001, ANN202
        new_process()
        assert len(store.list_shards()) == i + 1
    write_one_row_shards_refusing_deletes(tmp_path, monkeypatch, 10, listed_after)
    assert len(_index_files(tmp_path)) == 4
