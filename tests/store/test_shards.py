"""trajstore.store.shards: a shard stamped with a schema version newer than this package reads is
a compatibility error (:class:`NewerSchemaError`) naming the file, both versions and the upgrade,
from every reader; never a "corrupt" shard skipped with a warning (its rows would go missing).

A truncated or garbage ``.parquet`` in the store is skipped by every reader with a warning
that names it (``strict=True`` raises :class:`CorruptShardError`); every other trajectory is
still read. Symlinked shards are read; a dangling one is warned about."""

# issue 22: newer-schema shard reported corrupt and skipped

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.helpers.small_shards import trajectory_table, write_small_shards
from trajstore import CorruptShardError, StoreWriter, audit, open_store
from trajstore.cli.main import app
from trajstore.convert import trajectories_to_table
from trajstore.errors import NewerSchemaError
from trajstore.maintenance.compact import compact_store
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
from trajstore.store import CorruptShardWarning, Store
from trajstore.store import shards as shards_mod

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


# issue 11: a hole found attacking the store and the SDK (failed before its fix)
def test_symlinked_shards_are_read_and_dangling_ones_warned(tmp_store: str, tmp_path: Any,
                                                            make_trajectory: Any) -> None:
    rng = np.random.default_rng(2)
    elsewhere = open_store(str(tmp_path / "elsewhere"))
    real = elsewhere.write_table(trajectories_to_table([make_trajectory(rng, trajectory_id="linked")]))
    store = open_store(tmp_store)
    store.write_table(trajectories_to_table([make_trajectory(rng, trajectory_id="plain")]))
    traj_dir = store.path("trajectories")
    os.symlink(real, os.path.join(traj_dir, "99999999999999999998-link.parquet"))
    os.symlink(str(tmp_path / "gone.parquet"), os.path.join(traj_dir, "99999999999999999999-dangling.parquet"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids = read_trajectories(tmp_store).column("trajectory_id").to_pylist()
    assert ids == ["plain", "linked"]
    msgs = [str(w.message) for w in caught if issubclass(w.category, CorruptShardWarning)]
    assert len(msgs) == 1 and "dangling.parquet" in msgs[0] and "broken symlink" in msgs[0]
    with pytest.raises(Exception, match="broken symlink"):
        store.list_shards(strict=True)


# -- corrupt shards: skipped with a warning naming them ----------------------------------------

GOOD = 30


def _read_ids(reader: str, uri: str, opts: dict[str, Any] | None, strict: bool) -> list[str]:
    if reader == "read_trajectories":
        return read_trajectories(uri, storage_options=opts, strict=strict).column("trajectory_id").to_pylist()
    if reader == "scan_trajectories":
        return scan_trajectories(uri, storage_options=opts, strict=strict).select("trajectory_id").collect()[
            "trajectory_id"].to_list()
    if reader == "iter_batches":
        return [t for b in iter_batches(uri, storage_options=opts, strict=strict) for t in b.trajectory_ids]
    if reader == "list_shards":
        store = open_store(uri, storage_options=opts)
        return [t for s in store.list_shards(strict=strict)
                for t in pq.read_table(store.fs.open(s.path, "rb"), columns=["trajectory_id"])
                .column("trajectory_id").to_pylist()]
    raise AssertionError(reader)


def _fill(uri: str, opts: dict[str, Any] | None, make_trajectory: Callable[..., Any]) -> tuple[Store, list[str]]:
    rng = np.random.default_rng(7)
    trajs = [make_trajectory(rng, trajectory_id=f"good-{i:02d}") for i in range(GOOD)]
    with StoreWriter(uri, storage_options=opts, flush_rows=10, flush_seconds=None) as w:
        w.write_many(trajs)
    return open_store(uri, storage_options=opts), [t.trajectory_id for t in trajs]


def _plant_bad_files(store: Store) -> list[str]:
    """A truncated copy of a real shard, a garbage file and a Parquet file from someone else (no
    trajstore version). Returns their file names. (A shard of a newer schema version is not
    corrupt: every reader raises for it, the tests above.)"""
    good_path = store.shard_paths()[1][0]
    data = store.fs.cat_file(good_path)
    bad = {
        "00000000000000000001-truncated.parquet": data[: len(data) // 2],
        "00000000000000000002-garbage.parquet": b"this is not parquet at all " * 100,
        "99999999999999999998-empty.parquet": b"",
    }
    for name, payload in bad.items():
        store.fs.pipe_file(store.path("trajectories", name), payload)
    foreign = pa.table({"trajectory_id": ["foreign-1"], "x": [1]})
    sink = pa.BufferOutputStream()
    pq.write_table(foreign, sink)
    store.fs.pipe_file(store.path("trajectories", "00000000000000000003-foreign.parquet"), sink.getvalue().to_pybytes())
    return [*bad, "00000000000000000003-foreign.parquet"]


SKIPPING_READERS = ["read_trajectories", "scan_trajectories", "iter_batches", "list_shards"]


def _stamped_variants(good: pa.Table) -> dict[str, tuple[pa.Table, str]]:
    """Shards that carry trajstore's schema-version stamp (kept by pyarrow when a shard is
    read, edited and written back) but whose columns do not fit schema v1."""
    renamed = good.set_column(0, "trajectory_id", pa.array([f"x{i}" for i in range(good.num_rows)]))
    return {
        "extra column": (renamed.append_column("extra", pa.array(range(good.num_rows))), "unexpected column 'extra'"),
        "wrong type": (renamed.set_column(renamed.schema.get_field_index("reward"), "reward",
                                          pa.array(["x"] * good.num_rows)), "column 'reward' has type string"),
        "missing required": (renamed.select(["trajectory_id"]), "required column 'schema_version' is missing"),
    }


@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_bad_shards_skipped_with_warning_naming_them(backend: str, tmp_store: str, make_trajectory: Any,
                                                     request: pytest.FixtureRequest) -> None:
    uri, opts = request.getfixturevalue("s3_store_uri") if backend == "s3" else (tmp_store, None)
    store, good_ids = _fill(uri, opts, make_trajectory)
    bad_names = _plant_bad_files(store)
    for reader in SKIPPING_READERS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ids = _read_ids(reader, uri, opts, strict=False)
        assert sorted(ids) == sorted(good_ids), reader
        messages = [str(w.message) for w in caught if issubclass(w.category, CorruptShardWarning)]
        for name in bad_names:
            assert sum(name in m for m in messages) == 1, (reader, name, messages)
        assert len(messages) == len(bad_names), (reader, messages)
        with pytest.raises(CorruptShardError) as ei:
            _read_ids(reader, uri, opts, strict=True)
        # Shards are listed in name order, so the first bad one met is the truncated copy.
        assert ei.value.path.endswith(bad_names[0]), reader
        assert bad_names[0] in str(ei.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptShardWarning)
        assert count_duplicates(uri, storage_options=opts) == 0


def test_corrupt_data_page_with_intact_footer(tmp_store: str, make_trajectory: Any) -> None:
    """A shard whose footer reads but whose column data is damaged: the eager and streaming
    readers skip it with a warning, strict raises, every trajectory in other shards is read.
    The lazy reader cannot know before decoding; it must fail loudly, never return bad rows."""
    store, good_ids = _fill(tmp_store, None, make_trajectory)
    victim = store.shard_paths()[0][0]
    md = pq.read_metadata(victim)
    raw = bytearray(open(victim, "rb").read())
    # Overwrite the middle of the tokens column chunk with garbage, leaving the footer alone.
    paths = [md.row_group(0).column(i).path_in_schema for i in range(md.num_columns)]
    tokens_idx = next(i for i, p in enumerate(paths) if p.startswith("tokens."))
    chunk = md.row_group(0).column(tokens_idx)
    start = chunk.data_page_offset
    raw[start: start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    bad = store.path("trajectories", "00000000000000000001-damaged.parquet")
    with open(bad, "wb") as fh:
        fh.write(bytes(raw))
    lost = set(pq.read_table(victim, columns=["trajectory_id"]).column("trajectory_id").to_pylist())
    assert len(lost) == 10
    with pytest.raises(Exception, match="(?i)parquet|thrift|decode"):
        scan_trajectories(tmp_store).select("trajectory_id", "tokens").collect()
    for reader in ("read_trajectories", "iter_batches"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ids = _read_ids(reader, tmp_store, None, strict=False)
        assert sorted(ids) == sorted(good_ids), reader  # the damaged copy's rows also exist intact
        messages = [str(w.message) for w in caught if issubclass(w.category, CorruptShardWarning)]
        assert any("00000000000000000001-damaged.parquet" in m for m in messages), (reader, messages)
        with pytest.raises(CorruptShardError, match="damaged"):
            _read_ids(reader, tmp_store, None, strict=True)


@pytest.mark.parametrize("variant", ["extra column", "wrong type", "missing required"])
@pytest.mark.parametrize("reader", ["read_trajectories", "scan_trajectories", "iter_batches", "list_shards"])
def test_stamped_shard_with_foreign_columns_is_skipped(tmp_store: str, make_trajectory: Callable[..., Any],
                                                       variant: str, reader: str) -> None:
    # Used to break scan (SchemaError), iter_batches (KeyError/ValueError) and, through
    # union_by_name, retype columns of every DuckDB query over the store.
    with StoreWriter(tmp_store, flush_seconds=None) as w:
        w.write_many(make_trajectory(np.random.default_rng(i), trajectory_id=f"g{i}") for i in range(3))
    store = open_store(tmp_store)
    good = pq.read_table(store.list_shards()[0].path)
    table, reason = _stamped_variants(good)[variant]
    bad = store.path("trajectories", f"zzzz-{variant.replace(' ', '-')}.parquet")
    pq.write_table(table, bad)
    with pytest.warns(CorruptShardWarning, match=reason):
        ids = _read_ids(reader, tmp_store, None, strict=False)
    assert sorted(ids) == ["g0", "g1", "g2"]
    with pytest.raises(CorruptShardError, match=reason):
        _read_ids(reader, tmp_store, None, strict=True)


def test_shard_missing_a_nullable_column_is_read(tmp_store: str, make_trajectory: Callable[..., Any]) -> None:
    # An older schema version may lack a nullable column added later: still readable.
    with StoreWriter(tmp_store, flush_seconds=None) as w:
        w.write(make_trajectory(np.random.default_rng(0), trajectory_id="g0"))
    store = open_store(tmp_store)
    good = pq.read_table(store.list_shards()[0].path)
    pq.write_table(good.drop_columns(["metadata"]).set_column(0, "trajectory_id", pa.array(["old"])),
                   store.path("trajectories", "zzzz-old.parquet"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(read_trajectories(tmp_store).column("trajectory_id").to_pylist()) == ["g0", "old"]


def test_a_compaction_between_reading_the_folder_and_its_stats_is_listed_again(tmp_path: Path, monkeypatch) -> None:
    """A listing that read the folder before a compaction's output appeared and stat'ed the
    sources after they were deleted (``--keep-replaced 0``) held neither; it lists again."""
    store = open_store(tmp_path)
    write_small_shards(store, trajectory_table(8), per_shard=2)
    want = read_trajectories(tmp_path, columns=["trajectory_id"]).column("trajectory_id").to_pylist()
    real = os.scandir
    raced = []

    @contextlib.contextmanager
    def racing_scandir(path):  # noqa: ANN001, ANN202
        with real(path) as it:
            entries = list(it)  # the folder is read ...
        if str(path).endswith("trajectories") and not raced:
            raced.append(path)
            compact_store(tmp_path, min_age_s=0, keep_replaced_s=0)  # ... then the compaction commits and deletes
        yield iter(entries)
    monkeypatch.setattr(shards_mod.os, "scandir", racing_scandir)
    got = read_trajectories(tmp_path, columns=["trajectory_id"]).column("trajectory_id").to_pylist()
    assert raced and got == want
