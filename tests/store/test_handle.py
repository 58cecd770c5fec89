"""trajstore/store/handle.py: a Store whose listing fails says where, in one line."""

from __future__ import annotations

import pytest


def test_listing_failure_is_a_store_error_naming_the_location(monkeypatch) -> None:
    # e.g. an unreachable S3 endpoint or bad storage options: not a raw botocore/TypeError traceback.
    from trajstore.errors import StoreError
    from trajstore.store import open_store

    s = open_store("memory://unreachable")  # a filesystem listed through fsspec (local folders use os.scandir)

    def boom(*a, **k):
        raise ConnectionError("endpoint unreachable")

    monkeypatch.setattr(s.fs, "ls", boom)
    with pytest.raises(StoreError, match=r"cannot list .*trajectories: ConnectionError: endpoint unreachable"):
        s.list_shards()
    with pytest.raises(StoreError, match="cannot list"):
        list(s.iter_dirs("runs"))
