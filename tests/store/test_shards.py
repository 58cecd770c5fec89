"""trajstore.store.shards: a shard stamped with a schema version newer than this package reads is
a compatibility error (:class:`NewerSchemaError`) naming the file, both versions and the upgrade,
from every reader; never a "corrupt" shard skipped with a warning (its rows would go missing)."""

# issue 22: newer-schema shard reported corrupt and skipped

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from trajstore import StoreWriter, audit, open_store
from trajstore.cli.main import app
from trajstore.errors import NewerSchemaError
from trajstore.migrate import migrate_store
from trajstore.reader import (
    count_duplicates,
    iter_batches,
    iter_shard_batches,
    read_trajectories,
    read_trajectories_by_id,
    scan_trajectories,
    summarize_store,
)
from trajstore.schema import METADATA_SCHEMA_VERSION_KEY, SCHEMA_VERSION
from trajstore.store import CorruptShardWarning

NEWER = SCHEMA_VERSION + 1


def _restamp(path: str, version: int) -> None:
    """Rewrite the shard at `path` with `version` as the schema version in its footer (data unchanged)."""
    table = pq.read_table(path)
    meta = {**(table.schema.metadata or {}), METADATA_SCHEMA_VERSION_KEY: str(version).encode()}
    pq.write_table(table.replace_schema_metadata(meta), path)


def _two_shards(uri: str, make_trajectory: Callable[..., Any]) -> list[str]:
    """A store of two one-row shards (ids t0, t1), written by the real writer; their paths."""
    rng = np.random.default_rng(22)
    with StoreWriter(uri, flush_rows=1, flush_seconds=None) as w:
        w.write_many([make_trajectory(rng, trajectory_id=f"t{i}") for i in range(2)])
    paths = [p for p, _ in open_store(uri).shard_paths()]
    assert len(paths) == 2
    return paths


@pytest.fixture
def newer_store(tmp_store: str, make_trajectory: Callable[..., Any]) -> tuple[str, str]:
    """(store, path of its second shard, restamped as schema version SCHEMA_VERSION + 1)."""
    newer = _two_shards(tmp_store, make_trajectory)[1]
    _restamp(newer, NEWER)
    assert pq.read_metadata(newer).metadata[METADATA_SCHEMA_VERSION_KEY] == str(NEWER).encode()
    return tmp_store, newer


def _says_what_and_what_to_do(e: NewerSchemaError, newer: str) -> None:
    text = str(e)
    assert newer in text  # the file, as a path the user can look at
    assert f"schema version {NEWER}" in text and f"up to {SCHEMA_VERSION}" in text  # both versions
    assert "pip install -U trajstore" in text  # what to do
    assert "corrupt" not in text.lower()
    assert (e.path, e.schema_version, e.supported_version) == (newer, NEWER, SCHEMA_VERSION)


READERS: dict[str, Callable[[str], object]] = {
    "read_trajectories": lambda uri: read_trajectories(uri),
    "read_trajectories strict": lambda uri: read_trajectories(uri, strict=True),
    "read_trajectories_by_id": lambda uri: read_trajectories_by_id(uri, ["t0", "t1"]),
    "scan_trajectories": lambda uri: scan_trajectories(uri).collect(),
    "iter_batches": lambda uri: list(iter_batches(uri)),
    "count_duplicates": lambda uri: count_duplicates(uri),
    "list_shards": lambda uri: open_store(uri).list_shards(),
    "summarize_store (traj info)": lambda uri: summarize_store(uri),
    "audit views (traj stats, traj sql)": lambda uri: audit.connect(uri),
    "migrate_store": lambda uri: migrate_store(uri, dry_run=True),
}


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_raises_naming_file_versions_and_upgrade(newer_store: tuple[str, str], reader: str) -> None:
    uri, newer = newer_store
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptShardWarning)  # never a "skipping corrupt shard" warning
        with pytest.raises(NewerSchemaError) as ei:
            READERS[reader](uri)
    _says_what_and_what_to_do(ei.value, newer)


def test_read_trajectories_before_the_restamp_reads_both_rows(tmp_store: str, make_trajectory: Any) -> None:
    # The store the fault needs is otherwise readable: without the restamp both rows come back,
    # so the error above is about the newer shard alone (the report read 1 of 2 rows).
    _two_shards(tmp_store, make_trajectory)
    assert sorted(read_trajectories(tmp_store).column("trajectory_id").to_pylist()) == ["t0", "t1"]


def test_shard_restamped_after_listing_raises_when_read(tmp_store: str, make_trajectory: Any) -> None:
    # A reader that listed the shard as current and opens it after a newer trajstore rewrote it
    # (the file's own footer decides how it is read) must not skip the rest of it as corrupt.
    _two_shards(tmp_store, make_trajectory)
    store = open_store(tmp_store)
    shard = store.list_shards()[1]
    _restamp(shard.path, NEWER)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptShardWarning)
        with pytest.raises(NewerSchemaError) as ei:
            list(iter_shard_batches(store, shard))
    _says_what_and_what_to_do(ei.value, shard.path)


def test_traj_info_prints_one_line_and_exits_1(newer_store: tuple[str, str]) -> None:
    uri, newer = newer_store
    res = CliRunner().invoke(app, ["info", uri])
    assert res.exit_code == 1, res.output  # an error (README "Exit status"), not "1 trajectory" and 0
    assert res.stdout == "", res.output  # no summary of the part it could read
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: shard ") and newer in lines[0], lines[0]
    assert f"schema version {NEWER}" in lines[0] and "pip install -U trajstore" in lines[0], lines[0]
    assert "corrupt" not in lines[0].lower() and "warning" not in res.stderr, res.stderr
