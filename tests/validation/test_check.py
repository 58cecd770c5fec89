"""`trajstore.validation.validate_files` on shards written with plain pyarrow (the schema read
from schemas/trajectory.v2.arrow, as a writer in another language would): one shard per broken
invariant, each problem named by row group, row and field; a conformant shard passes."""

from __future__ import annotations

import copy
from pathlib import Path

import pyarrow as pa
import pytest

from tests.helpers.plain_shards import V2, row, write  # noqa: E402
from trajstore.validation import validate_files


def problems(*paths: str) -> list[tuple]:
    r = validate_files(list(paths))
    return [(Path(p.file).name, p.row_group, p.row, p.field, p.rule) for p in r.problems]


def test_conformant_shard_passes(tmp_path: Path) -> None:
    r = validate_files([write(tmp_path / "ok.parquet", [row(f"t{i}") for i in range(5)])])
    assert r.ok, r.problems
    assert (r.files[0].rows, r.files[0].rows_checked, r.files[0].row_groups, r.files[0].schema_version) == (5, 5, 3, 2)


def broken(mutate) -> list[dict]:  # noqa: ANN001
    """Five valid rows; row 3 (row group 1 with 2 rows per group) mutated."""
    rows = [row(f"t{i}") for i in range(5)]
    rows[3] = copy.deepcopy(rows[3])
    mutate(rows[3])
    return rows


def _gap(r: dict) -> None:  # prompt ends at 2: tokens [2, 3) belong to no span
    r["spans"][0]["end"] = 2


def _short(r: dict) -> None:
    r["logprobs"] = r["logprobs"][:-1]


def _min_version(r: dict) -> None:
    r["min_policy_version"] = 2


def _status(r: dict) -> None:
    r["status"] = "done"


def _count(r: dict) -> None:
    r["num_action_tokens"] = 4


def _logprob_start(r: dict) -> None:
    r["spans"][3]["logprob_start"] = 1


@pytest.mark.parametrize("mutate, field, rule", [
    (_gap, "spans[1].start", "row"),
    (_short, "logprobs", "row"),
    (_min_version, "min_policy_version", "derived"),
    (_status, "status", "row"),
    (_count, "num_action_tokens", "derived"),
    (_logprob_start, "spans[3].logprob_start", "derived"),
])
def test_each_broken_invariant_is_named_by_row_and_field(tmp_path: Path, mutate, field: str, rule: str) -> None:  # noqa: ANN001
    found = problems(write(tmp_path / "bad.parquet", broken(mutate)))
    assert ("bad.parquet", 1, 3, field, rule) in found, found
    assert {p[2] for p in found} == {3}  # no other row is blamed


def test_gap_message_says_gap(tmp_path: Path) -> None:
    r = validate_files([write(tmp_path / "bad.parquet", broken(_gap))])
    msg = next(p.message for p in r.problems if p.field == "spans[1].start")
    assert "gap" in msg and r.problems[0].trajectory_id == "t3"


def test_short_logprobs_says_the_lengths(tmp_path: Path) -> None:
    r = validate_files([write(tmp_path / "bad.parquet", broken(_short))])
    msg = next(p.message for p in r.problems if p.field == "logprobs")
    assert "4 log-probs" in msg and "5 tokens" in msg


def test_duplicate_ids_within_and_across_files(tmp_path: Path) -> None:
    a = write(tmp_path / "a.parquet", [row("x"), row("y"), row("x")])
    b = write(tmp_path / "b.parquet", [row("z"), row("y")])
    found = validate_files([a, b]).problems
    dup = sorted((Path(p.file).name, p.row_group, p.row, p.trajectory_id) for p in found if p.rule == "duplicate")
    # a: x at rows 0 and 2 (row groups 0 and 1); b: y at row 1 again (first in a row 1)
    assert dup == [("a.parquet", 1, 2, "x"), ("b.parquet", 0, 1, "y")]
    assert all(p.field == "trajectory_id" for p in found)
    assert "a.parquet row group 0 row 1" in next(p.message for p in found if p.trajectory_id == "y")


def test_wrong_type_is_a_column_problem(tmp_path: Path) -> None:
    i = V2.get_field_index("tokens")
    schema = V2.set(i, pa.field("tokens", pa.large_list(pa.int64()), nullable=False))
    r = validate_files([write(tmp_path / "typed.parquet", [row("t0")], schema=schema)])
    assert [(p.field, p.rule, p.row) for p in r.problems] == [("tokens", "column", None)]
    assert "int64" in r.problems[0].message and r.files[0].rows_checked == 0


def test_missing_version_and_not_parquet(tmp_path: Path) -> None:
    bare = write(tmp_path / "bare.parquet", [row("t0")], schema=V2.remove_metadata())
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    found = problems(bare, str(junk))
    assert found == [("bare.parquet", None, None, "<footer>", "version"), ("junk.parquet", None, None, "<file>", "read")]


def test_folder_and_store_are_walked(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    write(tmp_path / "d" / "sub" / "one.parquet", [row("a")])
    (tmp_path / "s" / "trajectories").mkdir(parents=True)
    write(tmp_path / "s" / "trajectories" / "two.parquet", [row("b")])
    r = validate_files([str(tmp_path / "d"), str(tmp_path / "s")])
    assert r.ok and [Path(f.file).name for f in r.files] == ["one.parquet", "two.parquet"]


def test_sdk_written_store_passes(tmp_path: Path) -> None:
    from trajstore import StoreWriter, TrajectoryBuilder

    with StoreWriter(str(tmp_path / "store")) as w:
        for i in range(3):
            b = TrajectoryBuilder(trajectory_id=f"s{i}", tokenizer="t")
            b.add_prompt([1, 2])
            b.add_action([3, 4], [-0.1, None] if i == 1 else [-0.1, -0.2], policy_version=i)
            b.add_observation([5])
            w.write(b.finish())
    r = validate_files([str(tmp_path / "store")])
    assert r.ok, r.problems
    assert r.rows == 3
