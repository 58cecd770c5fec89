"""Page checksums: every page trajstore writes carries its CRC-32 and the readers verify it, so a
flipped bit in a token page is a corrupt shard named in an error, not other token ids read back
silently (without the check most such flips decode without any error)."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.small_shards import trajectory_table, write_small_shards
from trajstore import iter_batches, read_trajectories, read_trajectories_by_id
from trajstore.errors import CorruptShardError
from trajstore.store import CorruptShardWarning, open_store

FLIPS = 12


def _token_pages(path: Path) -> tuple[int, int]:
    """(first byte, bytes) of the first row group's ``tokens`` column chunk."""
    rg = pq.ParquetFile(path).metadata.row_group(0)
    [col] = [rg.column(j) for j in range(rg.num_columns) if rg.column(j).path_in_schema == "tokens.list.element"]
    return col.data_page_offset, col.total_compressed_size


def _flipped(path: Path, seed: int) -> bytes:
    """The file with one bit flipped inside its token pages (past the page header)."""
    data = bytearray(path.read_bytes())
    start, size = _token_pages(path)
    rng = random.Random(seed)
    data[start + rng.randrange(64, size)] ^= 1 << rng.randrange(8)
    return bytes(data)


@pytest.fixture
def store_with_one_shard(tmp_path: Path) -> tuple[Path, Path, bytes]:
    store = open_store(tmp_path)
    [name] = write_small_shards(store, trajectory_table(6), per_shard=6)
    path = tmp_path / "trajectories" / name
    return tmp_path, path, path.read_bytes()


def test_every_flipped_bit_in_a_token_page_is_a_corrupt_shard_error(store_with_one_shard) -> None:
    root, path, good = store_with_one_shard
    want = read_trajectories(root, columns=["tokens"]).column("tokens")
    silent = 0
    for seed in range(FLIPS):
        bad = _flipped(path, seed)
        path.write_bytes(bad)
        try:  # what a reader without the check gets
            silent += not pq.ParquetFile(path).read(columns=["tokens"]).column("tokens").equals(want)
        except OSError:
            pass
        with pytest.raises(CorruptShardError, match=path.name):
            read_trajectories(root, strict=True)
        with pytest.raises(CorruptShardError, match=path.name):
            list(iter_batches(root, strict=True))
        with pytest.raises(CorruptShardError, match=path.name):
            read_trajectories_by_id(root, ["t00003"], strict=True)
    assert silent > 0  # the check is what catches these: unchecked, some decode to other token ids
    path.write_bytes(good)
    assert read_trajectories(root, columns=["tokens"]).column("tokens").equals(want)


def test_a_corrupt_page_is_skipped_with_a_warning_by_default(store_with_one_shard) -> None:
    root, path, _ = store_with_one_shard
    open_store(root).write_table(trajectory_table(2, prefix="ok"))
    path.write_bytes(_flipped(path, 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = read_trajectories(root)
    assert got.column("trajectory_id").to_pylist() == ["ok00000", "ok00001"]
    assert any(isinstance(w.message, CorruptShardWarning) and path.name in str(w.message) for w in caught)


def test_files_without_checksums_still_read(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    table = trajectory_table(4)
    store.write_table(table)
    [shard] = store.list_shards()
    pq.write_table(pq.read_table(shard.path), shard.path, compression="zstd")  # another writer: no CRCs
    fresh = open_store(tmp_path)
    assert read_trajectories(fresh, strict=True).column("trajectory_id").to_pylist() \
        == table.column("trajectory_id").to_pylist()
