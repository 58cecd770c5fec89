"""`traj ingest` of trajectory Parquet written elsewhere (``trajstore-parquet``): recognised by
footer stamp or columns, checked with ``traj validate``'s rules, good rows stored exactly as
given, each bad row refused naming file, row and field; a newer schema version refused as one."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from tests.helpers.paths import REPO_ROOT
from trajstore import TrajectoryBuilder
from trajstore.cli.main import app
from trajstore.convert import trajectories_to_table
from trajstore.ingest import ingest_paths
from trajstore.ingest.discover import InputUnit
from trajstore.ingest.dispatch import parse_unit
from trajstore.ingest.records import StoredRow
from trajstore.reader import read_trajectories
from trajstore.schema import METADATA_SCHEMA_VERSION_KEY, SCHEMA_VERSION, trajectory_schema

ROOT = REPO_ROOT
EXAMPLE = ROOT / "examples" / "write_plain_pyarrow.py"
from tests.helpers.plain_shards import V2, row, write  # noqa: E402


def _example_shard(tmp_path: Path) -> Path:
    """The example's own shard (plain pyarrow, no trajstore import), written by running it."""
    out = tmp_path / "in" / "plain.parquet"
    out.parent.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    p = subprocess.run([sys.executable, str(EXAMPLE), "--out", str(out)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def _gap_rows() -> list[dict]:
    """Rows a, b, c; b's prompt ends at 2, so token 2 belongs to no span (validate: spans[1].start)."""
    rows = [row("a"), copy.deepcopy(row("b")), row("c")]
    rows[1]["spans"][0]["end"] = 2
    return rows


def test_example_shard_ingests_bit_identical(tmp_path: Path) -> None:
    shard = _example_shard(tmp_path)
    store = tmp_path / "store"
    report = ingest_paths([str(shard.parent)], str(store))
    assert (report.trajectories_written, report.refused, dict(report.by_format)) == (2, 0, {"trajstore-parquet": 2})
    given = pq.read_table(shard)
    stored = read_trajectories(str(store)).sort_by("trajectory_id")
    assert stored.column("trajectory_id").to_pylist() == ["plain-0", "plain-1"]
    for name in ("tokens", "spans", "source", "prompt_id", "reward", "reward_raw", "created_at", "status",
                 "min_policy_version", "max_policy_version", "num_missing_logprobs"):
        assert stored.column(name).to_pylist() == given.column(name).to_pylist(), name
    # log-probs bit for bit (float32 bits, not values within a tolerance)
    got = np.concatenate(stored.column("action_logprobs").to_pylist()).astype(np.float32).view(np.uint32)
    want = np.concatenate(given.column("action_logprobs").to_pylist()).astype(np.float32).view(np.uint32)
    assert np.array_equal(got, want)
    # metadata: the same JSON object, written in the store's canonical text (sorted keys)
    assert [json.loads(m) for m in stored.column("metadata").to_pylist()] == \
        [json.loads(m) for m in given.column("metadata").to_pylist()]
    # the example's two action spans: policy versions 0 and 1
    assert [[s["policy_version"] for s in sp if s["kind"] == "action"] for sp in stored.column("spans").to_pylist()] \
        == [[0, 1], [0, 1]]


def test_reingest_stores_nothing_new(tmp_path: Path) -> None:
    shard = write(tmp_path / "ok.parquet", [row("a"), row("b")])
    store = str(tmp_path / "store")
    assert ingest_paths([shard], store).trajectories_written == 2
    again = ingest_paths([shard], store)
    assert (again.trajectories_written, again.skipped["already_in_store"]) == (0, 2)
    assert read_trajectories(store).num_rows == 2


def test_broken_row_is_refused_alone_naming_row_and_field(tmp_path: Path) -> None:
    shard = write(tmp_path / "bad.parquet", _gap_rows())  # 2 rows per row group: b is row group 0, row 1 (line 2)
    store = str(tmp_path / "store")
    report = ingest_paths([shard], store)
    assert (report.trajectories_written, report.refused) == (2, 1)
    assert sorted(read_trajectories(store).column("trajectory_id").to_pylist()) == ["a", "c"]
    [p] = report.problems
    assert (p.origin.path, p.origin.line, p.kind) == (shard, 2, "invalid")
    assert p.reason.startswith("row group 0, trajectory 'b': field spans[1].start ") and "gap" in p.reason


def test_newer_schema_version_is_refused_as_such(tmp_path: Path) -> None:
    schema = V2.with_metadata({**V2.metadata, METADATA_SCHEMA_VERSION_KEY: str(SCHEMA_VERSION + 1).encode()})
    shard = write(tmp_path / "newer.parquet", [row("a")], schema=schema)
    report = ingest_paths([shard], str(tmp_path / "store"))
    assert report.trajectories_written == 0
    [p] = report.problems
    assert p.kind == "unsupported" and shard in p.reason
    assert f"schema version {SCHEMA_VERSION + 1}" in p.reason and f"up to {SCHEMA_VERSION}" in p.reason
    assert "pip install -U trajstore" in p.reason


def test_wrong_column_type_refuses_the_file_in_one_line(tmp_path: Path) -> None:
    i = V2.get_field_index("tokens")
    schema = V2.set(i, pa.field("tokens", pa.large_list(pa.int64()), nullable=False))
    shard = write(tmp_path / "typed.parquet", [row("a"), row("b")], schema=schema)
    report = ingest_paths([shard], str(tmp_path / "store"))
    assert report.trajectories_written == 0
    [p] = report.problems
    assert p.origin.line is None and p.reason.startswith("columns do not fit the trajectory schema v2")
    assert "tokens has type large_list<element: int64>, expected large_list<item: int32" in p.reason


def test_unstamped_file_is_recognised_by_its_columns(tmp_path: Path) -> None:
    """A writer that dropped the schema's metadata: still read as trajstore rows (never as another
    harness's), as the one version its columns fit."""
    shard = write(tmp_path / "bare.parquet", [row("a")], schema=V2.remove_metadata())
    [item] = list(parse_unit(InputUnit(shard)))
    assert isinstance(item, StoredRow) and item.trajectory.trajectory_id == "a"


def test_v1_shard_is_migrated_as_traj_migrate_does(tmp_path: Path) -> None:
    b = TrajectoryBuilder(trajectory_id="old", tokenizer="t", model="m")
    b.add_prompt([1, 2, 3], role="user")
    b.add_action([4, 5], np.array([-0.5, -0.25], np.float32), policy_version=7)
    b.add_observation([6])
    b.add_action([7], np.array([-1.0], np.float32), policy_version=8)
    b.set_reward(1.0)
    v1 = trajectories_to_table([b.finish()], version=1)
    assert v1.schema.equals(trajectory_schema(1), check_metadata=False)
    shard = tmp_path / "v1.parquet"
    pq.write_table(v1, shard)
    store = str(tmp_path / "store")
    assert ingest_paths([str(shard)], store).trajectories_written == 1
    t = read_trajectories(store)
    assert t.column("tokens").to_pylist() == [[1, 2, 3, 4, 5, 6, 7]]
    assert t.column("action_logprobs").to_pylist() == [[-0.5, -0.25, -1.0]]  # v3: action tokens only
    assert [s["policy_version"] for s in t.column("spans").to_pylist()[0] if s["kind"] == "action"] == [7, 8]


def test_cli_summary_lists_the_refused_row(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    shard = write(folder / "bad.parquet", _gap_rows())
    result = CliRunner().invoke(app, ["ingest", str(tmp_path / "store"), str(folder)])
    assert result.exit_code == 1, result.output
    assert "refused: invalid" in result.stdout
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("refused")]
    assert lines == [lines[0]] and lines[0].startswith(f"refused {shard}:2: invalid: row group 0, trajectory 'b': "
                                                       "field spans[1].start")
    assert read_trajectories(str(tmp_path / "store")).num_rows == 2
