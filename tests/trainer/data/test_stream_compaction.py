"""trainer/data/stream.py with ``traj compact``: a cursor taken before a compaction stays valid after
it (a resumed run reads exactly the rest, its dedupe memory rebuilt through the compaction's
record), a stream that is reading while shards are replaced and deleted neither repeats nor
skips, and a cursor naming a shard in progress continues inside the output."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.small_shards import trajectory_table, write_small_shards
from tests.helpers.trajectories import VOCAB
from trajstore import open_store
from trajstore.maintenance.compact import compact_store
from trajstore.trainer.config import DataConfig
from trajstore.trainer.data import DataCursor, TrajectoryStream

NOW = dict(min_age_s=0, keep_replaced_s=0)


def _stream(root: Path, cursor: DataCursor | None = None, **cfg) -> TrajectoryStream:
    return TrajectoryStream(open_store(root), DataConfig(**cfg), tokenizer="tiny-llama", vocab_size=VOCAB,
                            cursor=cursor)


def _ids(batches) -> list[str]:
    return [s.trajectory_id for b in batches for s in b.samples]


def _drain(s: TrajectoryStream) -> list[str]:
    out = []
    while (b := s.next_batch()) is not None:
        out.extend(x.trajectory_id for x in b.samples)
    return out


@pytest.mark.parametrize("per_shard,stop_after", [(1, 5), (3, 7), (3, 9)])
def test_cursor_from_before_a_compaction_resumes_exactly(tmp_path: Path, per_shard: int, stop_after: int) -> None:
    """stop_after 7 with 3 per shard: the cursor is inside a shard (row 1 of the third)."""
    table = trajectory_table(24)
    ids = table.column("trajectory_id").to_pylist()
    write_small_shards(open_store(tmp_path), table, per_shard=per_shard)
    s = _stream(tmp_path, batch_size=stop_after)
    first = _ids([s.next_batch()])
    assert first == ids[:stop_after]
    saved = DataCursor.from_json(s.cursor.to_json())  # what a checkpoint holds
    compact_store(str(tmp_path), **NOW)
    assert len(open_store(tmp_path).list_shards()) == 1
    rest = _drain(_stream(tmp_path, saved, batch_size=4))
    assert rest == ids[stop_after:]


def test_resumed_stream_still_drops_copies_of_what_it_read_before(tmp_path: Path) -> None:
    table = trajectory_table(10)
    store = open_store(tmp_path)
    write_small_shards(store, table)
    s = _stream(tmp_path, batch_size=6)
    assert _ids([s.next_batch()]) == table.column("trajectory_id").to_pylist()[:6]
    saved = DataCursor.from_json(s.cursor.to_json())
    compact_store(store, **NOW)
    store.write_table(table.slice(2, 1))  # a later copy of an id read before the compaction
    rest = _drain(_stream(tmp_path, saved, batch_size=10))
    assert rest == table.column("trajectory_id").to_pylist()[6:]


def test_stream_reading_while_its_shards_are_replaced_and_deleted(tmp_path: Path) -> None:
    table = trajectory_table(30)
    ids = table.column("trajectory_id").to_pylist()
    store = open_store(tmp_path)
    write_small_shards(store, table, per_shard=2)
    s = _stream(tmp_path, batch_size=5)
    got = _ids([s.next_batch()])  # mid-shard: 5 of 2-row shards
    compact_store(store, target_mb=0.05, **NOW)  # several outputs; the shard in progress is gone
    got += _ids([s.next_batch()])
    compact_store(store, **NOW)  # the outputs merged again (nested records)
    got += _drain(s)
    assert got == ids


def test_a_fully_read_output_is_remembered_by_its_own_name(tmp_path: Path) -> None:
    table = trajectory_table(6)
    store = open_store(tmp_path)
    write_small_shards(store, table)
    s = _stream(tmp_path, batch_size=6)
    assert len(s.next_batch().samples) == 6
    compact_store(store, **NOW)
    assert s.next_batch() is None
    [out] = store.list_shards()
    assert out.name in s.cursor.done_shards
