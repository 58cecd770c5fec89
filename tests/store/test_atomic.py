"""trajstore/store/atomic.py: a writer killed with SIGKILL in the middle of a flush leaves nothing partial visible, and
every trajectory whose flush returned before the kill is readable."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.pause_kill import kill_at_pause
from trajstore import open_store, read_trajectories

CHILD = Path(__file__).with_name("_crash_writer.py")
TOKENS = 20_000
STOPS = {"local": ("mid-write", "before-rename", "after-rename"), "s3": ("before-put", "after-put")}
"""Where in a flush the child is killed (see _crash_writer.py), one round each, on each backend."""


def _kill_in_flush(uri: str, prefix: str, opts: dict[str, Any] | None, stop_at: str, k: int) -> tuple[set[str], str]:
    """Run the child until it pauses at `stop_at` in its k-th flush, SIGKILL it there.

    Returns (ids whose flush returned before the kill, the id of the flush it was killed in).
    """
    cmd = [sys.executable, str(CHILD), uri, str(TOKENS), prefix, stop_at, str(k)] + ([json.dumps(opts)] if opts else [])
    flushed: set[str] = set()

    def on_line(word: str, rest: list[str]) -> None:
        if word == "flushed":
            flushed.add(rest[0])

    paused = kill_at_pause(cmd, on_line)
    assert paused[0] == stop_at, paused
    return flushed, paused[1]


@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_sigkill_mid_flush(backend: str, tmp_store: str, request: pytest.FixtureRequest) -> None:
    if backend == "s3":
        uri, opts = request.getfixturevalue("s3_store_uri")
    else:
        uri, opts = tmp_store, None
    all_flushed: set[str] = set()
    committed: set[str] = set()  # killed after their shard was in place: visible, and whole
    temp_files = 0  # killed while writing a temp file: it stays in _tmp/ (an hour, for a writer to remove)
    for round_, stop_at in enumerate(STOPS[backend]):
        flushed, killed_in = _kill_in_flush(uri, f"r{round_}", opts, stop_at, k=2 + round_)
        assert len(flushed) == 1 + round_ and killed_in not in flushed
        all_flushed |= flushed
        if stop_at.startswith("after-"):
            committed.add(killed_in)
        store = open_store(uri, storage_options=opts)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a partial shard would be skipped with a warning
            shards = store.list_shards(strict=True)
            table = read_trajectories(uri, storage_options=opts, strict=True, columns=["num_tokens"])
        ids = set(table.column("trajectory_id").to_pylist())
        # every flush that returned is readable; the one killed is there whole once its shard was
        # in place (renamed, or PUT), and absent before
        assert ids == all_flushed | committed, (stop_at, sorted(ids ^ (all_flushed | committed)))
        assert table.num_rows == len(ids)
        assert set(table.column("num_tokens").to_pylist()) == {TOKENS + 100}
        assert sum(s.num_rows for s in shards) == len(ids)
        if store.is_local:  # leftovers of the killed write, if any, sit only in _tmp/
            temp_files += stop_at in ("mid-write", "before-rename")
            left = os.listdir(Path(store.path("_tmp")))
            assert len(left) == temp_files and all(n.endswith(".tmp") for n in left), left
