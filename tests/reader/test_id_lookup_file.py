"""trajstore/store/id_lookup_file.py through the reader: the merged id lookup kept in the store
lets a new process find any trajectory without decoding every shard's id index, stays right as
shards are appended, compacted, deleted and rewritten, and a damaged or stale file costs a
rebuild, never a wrong trajectory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.helpers.process_caches import files_in, new_process
from tests.helpers.small_shards import trajectory_table, write_small_shards
from trajstore.maintenance.compact import compact_store
from trajstore.reader import id_lookup, read_trajectories_by_id
from trajstore.store import id_lookup_file, open_store
from trajstore.store.layout import classify, id_lookup_dir


def _files(root: str) -> list[str]:
    return files_in(Path(root), id_lookup_dir(), ".ids")


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    decodes: list[int] = []
    real = id_lookup.decode_id_index
    monkeypatch.setattr(id_lookup, "decode_id_index", lambda v: decodes.append(1) or real(v))
    return decodes


def _ids(root: str, ids: list[str]) -> list[str]:
    return read_trajectories_by_id(root, ids).column("trajectory_id").to_pylist()


def _every_id_found(root: str, ids: list[str]) -> None:
    """Each id fetched on its own in a new process comes back as itself, with its own row."""
    for tid in ids:
        new_process()
        got = read_trajectories_by_id(root, [tid])
        assert got.column("trajectory_id").to_pylist() == [tid]


def test_a_new_process_reads_the_stored_lookup_instead_of_every_id_index(tmp_store: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_store)
    write_small_shards(store, trajectory_table(24), per_shard=4)
    new_process()
    assert _ids(tmp_store, ["t00005"]) == ["t00005"]
    [name] = _files(tmp_store)
    assert classify(f"{id_lookup_dir()}/{name}") == "trajectories/_index/ids/<id lookup file>.ids"
    new_process()
    decodes = _count_decodes(monkeypatch)
    assert _ids(tmp_store, ["t00023", "t00000"]) == ["t00000", "t00023"]
    assert decodes == [] and _files(tmp_store) == [name]  # read, not rebuilt nor rewritten


def test_appended_shards_are_merged_in_and_the_file_replaced(tmp_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_store)
    write_small_shards(store, trajectory_table(12), per_shard=4)
    new_process()
    assert _ids(tmp_store, ["t00001"]) == ["t00001"]
    [old] = _files(tmp_store)
    write_small_shards(store, trajectory_table(8, prefix="n"), per_shard=4)
    new_process()
    decodes = _count_decodes(monkeypatch)
    assert _ids(tmp_store, ["n00006", "t00011"]) == ["t00011", "n00006"]
    assert len(decodes) == 2  # only the two new shards' id indexes
    [new] = _files(tmp_store)
    assert new != old
    _every_id_found(tmp_store, [f"t{i:05d}" for i in range(12)] + [f"n{i:05d}" for i in range(8)])


def test_compaction_deletion_and_rewrites_leave_no_stale_entry(tmp_store: str) -> None:
    store = open_store(tmp_store)
    table = trajectory_table(24)
    write_small_shards(store, table, per_shard=2)
    new_process()
    assert _ids(tmp_store, ["t00003"]) == ["t00003"]
    # a compaction replaces every shard the file covers
    assert compact_store(store, min_age_s=0, keep_replaced_s=0).replaced_deleted
    _every_id_found(tmp_store, [f"t{i:05d}" for i in range(24)])
    # a shard rewritten in place without one row (what gc keeping part of a shard, and redaction, do)
    [shard] = store.list_shards()
    kept = read_trajectories_by_id(tmp_store, [f"t{i:05d}" for i in range(24) if i != 7])
    store.rewrite_shard(shard.path, kept)
    new_process()
    assert _ids(tmp_store, ["t00007"]) == []
    _every_id_found(tmp_store, ["t00000", "t00008", "t00023"])
    # a shard deleted (gc)
    write_small_shards(store, trajectory_table(4, prefix="d"), per_shard=4)
    new_process()
    assert _ids(tmp_store, ["d00001"]) == ["d00001"]
    store.fs.rm_file(store.list_shards()[0].path)  # the compacted one: every t row gone
    new_process()
    assert _ids(tmp_store, ["t00001", "d00002"]) == ["d00002"]
    _every_id_found(tmp_store, ["d00000", "d00003"])
    lookup = id_lookup_file.load(store)[0]
    assert lookup is not None and [c[0] for c in lookup.cover] == [s.name for s in store.list_shards()]


def _rewrite_file(root: str, change) -> None:  # noqa: ANN001 - a function of the StoredLookup
    store = open_store(root)
    stored, files = id_lookup_file.load(store)
    assert stored is not None
    [path] = [p for p, _ in files]
    # copies: the loaded arrays map the very file rewritten below
    changed = change(id_lookup_file.StoredLookup(stored.cover, stored.hashes.copy(), stored.shard_of.copy(),
                                                 stored.row_of.copy()))
    meta = {id_lookup_file.COVER_KEY: json.dumps([list(c) for c in changed.cover]).encode()}
    batch = pa.record_batch([pa.array(changed.hashes, pa.uint64()), pa.array(changed.shard_of, pa.int32()),
                             pa.array(changed.row_of, pa.uint32())], schema=id_lookup_file.LOOKUP_SCHEMA.with_metadata(meta))
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as w:
        w.write_batch(batch)


def _swap_rows(s: id_lookup_file.StoredLookup) -> id_lookup_file.StoredLookup:
    rows = s.row_of.copy()
    first = np.flatnonzero(s.shard_of == 0)
    rows[first] = rows[first][::-1]  # every entry of the first shard points at another row
    return id_lookup_file.StoredLookup(s.cover, s.hashes, s.shard_of, rows)


def _unsorted(s: id_lookup_file.StoredLookup) -> id_lookup_file.StoredLookup:
    return id_lookup_file.StoredLookup(s.cover, s.hashes[::-1].copy(), s.shard_of[::-1].copy(), s.row_of[::-1].copy())


@pytest.mark.parametrize("damage", [_swap_rows, _unsorted], ids=["rows swapped", "not sorted"])
def test_a_damaged_lookup_file_never_returns_a_wrong_trajectory(tmp_store: str, damage) -> None:  # noqa: ANN001
    store = open_store(tmp_store)
    write_small_shards(store, trajectory_table(16), per_shard=4)
    new_process()
    assert _ids(tmp_store, ["t00002"]) == ["t00002"]
    _rewrite_file(tmp_store, damage)
    _every_id_found(tmp_store, [f"t{i:05d}" for i in range(16)])
    new_process()
    assert id_lookup_file.check(id_lookup_file.load(store)[0]) is None  # rebuilt: a sound file again


def test_an_unreadable_lookup_file_is_rebuilt(tmp_store: str) -> None:
    store = open_store(tmp_store)
    write_small_shards(store, trajectory_table(8), per_shard=4)
    new_process()
    assert _ids(tmp_store, ["t00002"]) == ["t00002"]
    [name] = _files(tmp_store)
    (Path(tmp_store) / id_lookup_dir() / name).write_bytes(b"not arrow")
    _every_id_found(tmp_store, ["t00000", "t00007"])
    assert name not in _files(tmp_store) and len(_files(tmp_store)) == 1
