"""trajstore/reader/id_lookup.py: one merged id index per process, kept current as shards come
and go, so a warm fetch by id neither lists the store nor decodes a shard's id index."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.small_shards import trajectory_table, write_small_shards
from trajstore.maintenance.compact import compact_store
from trajstore.reader import id_lookup, read_trajectories_by_id
from trajstore.store import Store, open_store


def _count_listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = Store.list_shards

    def counting(self: Store, *a: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(Store, "list_shards", counting)
    return calls


def test_warm_fetch_lists_nothing_and_decodes_no_id_index(tmp_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_store)
    write_small_shards(store, trajectory_table(40), per_shard=4)
    store.list_shards()  # the first listing creates the shard index's folder (the folder changes once)
    assert read_trajectories_by_id(tmp_store, ["t00003"]).column("trajectory_id").to_pylist() == ["t00003"]
    listings = _count_listings(monkeypatch)
    decodes: list[int] = []
    real_decode = id_lookup.decode_id_index
    monkeypatch.setattr(id_lookup, "decode_id_index", lambda v: decodes.append(1) or real_decode(v))
    got = read_trajectories_by_id(tmp_store, ["t00039", "t00000", "t00021"])
    assert got.column("trajectory_id").to_pylist() == ["t00000", "t00021", "t00039"]  # arrival order
    assert listings == [] and decodes == []


def test_shards_written_after_the_lookup_are_found(tmp_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_store)
    write_small_shards(store, trajectory_table(8), per_shard=4)
    assert read_trajectories_by_id(tmp_store, ["t00001"]).num_rows == 1
    write_small_shards(store, trajectory_table(4, prefix="n"), per_shard=4)  # local: the folder changed
    assert read_trajectories_by_id(tmp_store, ["n00002"]).column("trajectory_id").to_pylist() == ["n00002"]
    # an object store has no folder time: the miss rebuilds the lookup once
    monkeypatch.setattr(id_lookup, "folder_token", lambda store: None)
    assert read_trajectories_by_id(tmp_store, ["t00001"]).num_rows == 1
    write_small_shards(store, trajectory_table(4, prefix="m"), per_shard=4)
    assert read_trajectories_by_id(tmp_store, ["m00003", "t00001"]).column("trajectory_id").to_pylist() == [
        "t00001", "m00003"]
    listings = _count_listings(monkeypatch)
    assert read_trajectories_by_id(tmp_store, ["nope"]).num_rows == 0
    assert len(listings) == 1  # an absent id costs one listing, not one per shard


def test_a_compaction_that_deletes_the_shards_the_lookup_holds(tmp_store: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_store)
    table = trajectory_table(24)
    write_small_shards(store, table, per_shard=2)
    before = read_trajectories_by_id(tmp_store, ["t00005", "t00017"])
    monkeypatch.setattr(id_lookup, "folder_token", lambda store: None)  # the lookup cannot see the change
    r = compact_store(store, min_age_s=0, keep_replaced_s=0)
    assert r.replaced_deleted  # the shards the lookup points at are gone
    after = read_trajectories_by_id(tmp_store, ["t00005", "t00017"])
    assert after.to_pylist() == before.to_pylist()


def test_a_process_keeps_the_lookups_of_a_bounded_number_of_stores(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(id_lookup, "MAX_STORES", 2)
    monkeypatch.setattr(id_lookup, "_LOOKUPS", {})
    for name in ("a", "b", "c"):
        write_small_shards(open_store(str(tmp_path / name)), trajectory_table(2), per_shard=2)
        assert read_trajectories_by_id(str(tmp_path / name), ["t00001"]).num_rows == 1
    assert [k[0].rsplit("/", 2)[-2] for k in id_lookup._LOOKUPS] == ["b", "c"]
