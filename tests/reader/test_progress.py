"""trajstore/reader/progress.py: a reader's progress, named in shards a compaction replaced, turned
into the rows of the compaction's output still to read (expected rows by hand)."""

from __future__ import annotations

import numpy as np

from trajstore.reader.progress import Progress, mentions, plan
from trajstore.store import ShardInfo
from trajstore.store.compaction_records import CompactionSource


def _out(rows: int, *parts: CompactionSource, name: str = "M.parquet") -> ShardInfo:
    return ShardInfo(f"/s/trajectories/{name}", rows, 1, 1, 2, parts=parts)


def _units(shard: ShardInfo, progress: Progress) -> list[tuple[str, list[int], list[int]]]:
    units, _ = plan(shard, progress)
    return [(u.name, u.rows.tolist(), u.phys.tolist()) for u in units]


# M holds a (3 rows, row 1 dropped as a later copy) then b (2 rows): a0 a2 b0 b1 at rows 0..3
M = _out(4, CompactionSource("a", 3, (1,)), CompactionSource("b", 2))


def test_a_plain_shard_is_one_unit_from_the_cursor() -> None:
    s = _out(3, name="p.parquet")
    assert _units(s, Progress()) == [("p.parquet", [0, 1, 2], [0, 1, 2])]
    assert _units(s, Progress([], "p.parquet", 2)) == [("p.parquet", [2], [2])]
    units, read = plan(s, Progress(["p.parquet"]))
    assert units == [] and read.tolist() == [0, 1, 2]


def test_an_output_nobody_started_is_read_under_its_own_name() -> None:
    assert _units(M, Progress(["x"])) == [("M.parquet", [0, 1, 2, 3], [0, 1, 2, 3])]


def test_an_output_whose_first_source_was_read_continues_with_the_second() -> None:
    units, read = plan(M, Progress(["a"]))
    assert [(u.name, u.rows.tolist(), u.phys.tolist()) for u in units] == [("b", [0, 1], [2, 3])]
    assert read.tolist() == [0, 1]


def test_a_source_in_progress_continues_in_its_own_numbering() -> None:
    # a's rows 0 and 1 read (1 was the dropped copy); a2 (output row 1) is next
    units, read = plan(M, Progress([], "a", 2))
    assert [(u.name, u.rows.tolist(), u.phys.tolist()) for u in units] == [("a", [2], [1]), ("b", [0, 1], [2, 3])]
    assert read.tolist() == [0]
    assert mentions(M, "a") and mentions(M, "M.parquet") and not mentions(M, "c")


def test_nested_outputs_map_through_both_records() -> None:
    # M2 holds M (4 rows, M's row 0 dropped) then c (1 row): a2 b0 b1 c0 at rows 0..3
    m2 = _out(4, CompactionSource("M.parquet", 4, (0,), M.parts), CompactionSource("c", 1), name="M2.parquet")
    units, read = plan(m2, Progress(["a"], "b", 1))
    assert [(u.name, u.rows.tolist(), u.phys.tolist()) for u in units] == [("b", [1], [2]), ("c", [0], [3])]
    assert read.tolist() == [0, 1]
    units, read = plan(m2, Progress(["M.parquet"]))
    assert [(u.name, u.rows.tolist()) for u in units] == [("c", [0])] and read.tolist() == [0, 1, 2]


def test_everything_read_gives_no_rows() -> None:
    units, read = plan(M, Progress(["a", "b"]))
    assert units == [] and np.array_equal(read, [0, 1, 2, 3])
