"""trajstore/store/encoding.py: how a shard is written: the schema-version stamp, the
compression, row groups sized with the metadata they hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tests.helpers.trajectories import fat_trajectory
from trajstore import StoreWriter, open_store
from trajstore.convert import trajectories_to_table
from trajstore.schema import SCHEMA_VERSION


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
def test_row_groups_count_metadata(tmp_store: str) -> None:
    # 12 rows of ~2 MiB metadata with a 4 MiB row-group target: at most 2 rows per row group
    # (2 x 2 MiB reaches the target), so at least 12 / 2 = 6 row groups instead of one.
    trajs = [fat_trajectory(i, 2 * 2**20) for i in range(12)]
    path = open_store(tmp_store).write_table(trajectories_to_table(trajs), row_group_target_mb=4)
    md = pq.read_metadata(path)
    assert md.num_row_groups >= 6
    assert max(md.row_group(i).num_rows for i in range(md.num_row_groups)) <= 2


def test_schema_version_stamped_in_every_shard(tmp_store: str, make_trajectory: Any) -> None:
    rng = np.random.default_rng(5)
    with StoreWriter(tmp_store, flush_rows=3, flush_seconds=None) as w:
        for i in range(7):
            w.write(make_trajectory(rng, trajectory_id=f"t{i}"))
    paths = [p for p, _ in open_store(tmp_store).shard_paths()]
    assert len(paths) == 3
    for p in paths:
        md = pq.read_metadata(p).metadata
        assert md[b"trajstore.schema_version"] == str(SCHEMA_VERSION).encode()
        assert set(pq.read_table(p, columns=["schema_version"]).column(0).to_pylist()) == {SCHEMA_VERSION}  # every row
        assert pq.read_metadata(p).row_group(0).column(0).compression == "ZSTD"


def _chunks(path: str, column: str) -> list[Any]:
    md = pq.read_metadata(path)
    idx = next(i for i in range(md.num_columns) if md.row_group(0).column(i).path_in_schema == column)
    return [md.row_group(rg).column(idx) for rg in range(md.num_row_groups)]


def _encodings(path: str, column: str) -> set[str]:
    return {e for c in _chunks(path, column) for e in c.encodings}


# token encoding: token ids byte-stream-split only where the user opts in (older engines cannot decode it)
def test_token_encoding_plain_by_default_byte_stream_split_on_request(tmp_path, make_trajectory: Any,
                                                                       monkeypatch: Any) -> None:
    import trajstore

    rng = np.random.default_rng(7)
    trajs = [make_trajectory(rng, trajectory_id=f"t{i}") for i in range(5)]
    table = trajectories_to_table(trajs)
    plain = open_store(str(tmp_path / "plain")).write_table(table)
    monkeypatch.setenv("TRAJSTORE_TOKEN_ENCODING", "byte_stream_split")
    split = open_store(str(tmp_path / "split")).write_table(table)
    assert "BYTE_STREAM_SPLIT" not in _encodings(plain, "tokens.list.element")
    assert "BYTE_STREAM_SPLIT" in _encodings(split, "tokens.list.element")
    for p in (plain, split):  # log-probs are split either way
        assert "BYTE_STREAM_SPLIT" in _encodings(p, "action_logprobs.list.element")
        # the footer keeps the token ids' min/max, which the trainer checks against its vocabulary
        stats = _chunks(p, "tokens.list.element")[0].statistics
        assert stats.has_min_max and stats.max == max(max(t.tokens) for t in trajs)
    # the same trajectories come back from both
    a = trajstore.read_trajectories(str(tmp_path / "plain"))
    b = trajstore.read_trajectories(str(tmp_path / "split"))
    assert a.column("tokens").to_pylist() == b.column("tokens").to_pylist() == table.column("tokens").to_pylist()


def test_a_bad_token_encoding_is_refused_naming_the_variable(tmp_path, make_trajectory: Any, monkeypatch: Any) -> None:
    import pytest

    from trajstore.errors import StoreError

    monkeypatch.setenv("TRAJSTORE_TOKEN_ENCODING", "bss")
    table = trajectories_to_table([make_trajectory(np.random.default_rng(1), trajectory_id="t0")])
    with pytest.raises(StoreError, match=r"TRAJSTORE_TOKEN_ENCODING='bss': expected one of plain, byte_stream_split"):
        open_store(str(tmp_path / "s")).write_table(table)
    assert not list((tmp_path / "s").rglob("*.parquet"))  # nothing half-written is left visible


def test_a_bad_token_encoding_is_refused_before_writing_or_compacting_begins(tmp_path, make_trajectory: Any,
                                                                             monkeypatch: Any) -> None:
    """The SDK writer refuses it when created (not in a background flush), and a compaction before
    it merges or records anything (no intent record left behind)."""
    import pytest

    from trajstore.errors import StoreError
    from trajstore.maintenance.compact import compact_store

    rng = np.random.default_rng(3)
    store = open_store(str(tmp_path / "s"))
    for i in range(3):  # three small shards: something to compact
        store.write_table(trajectories_to_table([make_trajectory(rng, trajectory_id=f"t{i}")]))
    before = sorted(p.name for p in (tmp_path / "s").rglob("*") if p.is_file())
    monkeypatch.setenv("TRAJSTORE_TOKEN_ENCODING", "nope")
    with pytest.raises(StoreError, match="TRAJSTORE_TOKEN_ENCODING='nope'"):
        StoreWriter(str(tmp_path / "s"))
    with pytest.raises(StoreError, match="TRAJSTORE_TOKEN_ENCODING='nope'"):
        compact_store(str(tmp_path / "s"))
    assert sorted(p.name for p in (tmp_path / "s").rglob("*") if p.is_file()) == before
