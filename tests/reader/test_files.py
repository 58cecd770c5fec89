"""trajstore/reader/files.py: opening shards, and telling a shard a compaction deleted after it was
listed from one that cannot be read."""

from __future__ import annotations

import pytest

from tests.helpers.small_shards import trajectory_table, write_small_shards
from tests.helpers.stores import listing_returns_after_invalidation
from trajstore.reader.files import gone
from trajstore.store import TRAJECTORIES_DIR, CorruptShardWarning, open_store


@pytest.mark.s3
def test_a_deleted_shard_is_gone_even_while_an_old_listing_still_shows_it(s3_store_uri, monkeypatch) -> None:
    # a reader that met a shard a compaction deleted must list again; an old listing another thread
    # stored in the shared s3fs cache made the deleted shard look present, and the read failed
    uri, opts = s3_store_uri
    store = open_store(uri, storage_options=opts)
    write_small_shards(store, trajectory_table(2))
    first, second = store.list_shards()
    listing_returns_after_invalidation(store, monkeypatch, TRAJECTORIES_DIR)  # shows both shards
    store.fs.rm_file(first.path)
    assert gone(store, first, FileNotFoundError(first.path)) is not None
    assert gone(store, second, OSError("a read that failed")) is None  # still there: not a deletion
    assert gone(store, second, ValueError("not a filesystem error")) is None


def test_a_skipped_shard_warning_names_the_shard(tmp_path) -> None:
    # callers that count what was skipped (traj export --skip-unreadable) read the shard from the
    # warning, not from its text
    import warnings

    import pyarrow as pa

    from tests.helpers.trajectories import hand_built_pair
    from trajstore import read_trajectories, write_trajectories

    write_trajectories(str(tmp_path), hand_built_pair())
    bad = tmp_path / "trajectories" / "zz-bad.parquet"
    bad.write_bytes(b"not parquet")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorruptShardWarning)
        assert isinstance(read_trajectories(str(tmp_path)), pa.Table)
    shards = [w.message.shard for w in caught if issubclass(w.category, CorruptShardWarning)]
    assert shards and all(s is not None and s.endswith("zz-bad.parquet") for s in shards)
