"""trajstore/validation/lineage.py: ``traj validate`` checks each child against the rows it read:
its parent must be among them and its fork point within the parent (files of schema v3, written
through the SDK's table builder; rows and expected problems by hand)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajstore.builder import TrajectoryBuilder
from trajstore.convert import trajectories_to_table
from trajstore.models import Trajectory
from trajstore.schema import SCHEMA_VERSION
from trajstore.validation import validate_files


def _traj(tid: str, n_prompt: int, parent: str | None = None, fork: int | None = None) -> Trajectory:
    """`n_prompt` prompt tokens then a 2-token action: n_prompt + 2 tokens."""
    b = TrajectoryBuilder(trajectory_id=tid, tokenizer="t")
    b.add_prompt(list(range(1, n_prompt + 1)), role="user")
    b.add_action([7, 8], [-0.5, -0.25], policy_version=0)
    t = b.finish()
    if parent is not None:
        t = t.model_copy(update={"parent_trajectory_id": parent, "fork_point": fork, "link_kind": "fork"})
    return t


def _write(path: Path, trajs: list[Trajectory]) -> str:
    pq.write_table(trajectories_to_table(trajs), path)
    return str(path)


def test_children_are_checked_against_every_file_read(tmp_path: Path) -> None:
    # root: 3 + 2 = 5 tokens. ok-kid shares 3 of them; far-kid claims 6 (> 5); lost-kid's parent is in no file.
    a = _write(tmp_path / "a.parquet", [_traj("ok-kid", 4, "root", 3), _traj("far-kid", 5, "root", 6)])
    b = _write(tmp_path / "b.parquet", [_traj("root", 3), _traj("lost-kid", 1, "nowhere", 1)])
    report = validate_files([a, b])
    got = sorted((p.trajectory_id, p.field, p.rule, p.message, p.row) for p in report.problems)
    assert got == [
        ("far-kid", "fork_point", "lineage", "6 is past the end of parent 'root' (5 tokens)", 1),
        ("lost-kid", "parent_trajectory_id", "lineage", "'nowhere' is not among the rows read", 1)]
    assert validate_files([a, b, _write(tmp_path / "c.parquet", [_traj("nowhere", 1)])]).problems[0].trajectory_id \
        == "far-kid"


def test_row_rules_of_lineage_and_schema_version_in_a_file(tmp_path: Path) -> None:
    table = trajectories_to_table([_traj("root", 3), _traj("kid", 3, "root", 2)])
    i = table.schema.get_field_index("link_kind")
    table = table.set_column(i, table.schema.field(i), pc.if_else(pc.equal(table.column("trajectory_id"), "kid"),
                                                                 "sibling", table.column("link_kind")))
    j = table.schema.get_field_index("schema_version")
    table = table.set_column(j, table.schema.field(j), pc.multiply(table.column("schema_version"), 0))
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    got = sorted((p.trajectory_id, p.field, p.message) for p in validate_files([str(path)]).problems)
    assert got == [
        ("kid", "link_kind", "'sibling' is not one of ['subagent', 'context_rewrite', 'fork', 'continuation']"),
        ("kid", "schema_version", f"is 0, but the file's footer says {SCHEMA_VERSION}"),
        ("root", "schema_version", f"is 0, but the file's footer says {SCHEMA_VERSION}")]


def test_a_fork_point_is_checked_against_the_parents_tokens(tmp_path: Path) -> None:
    # A redaction that replaced a secret in a shared prefix by a marker of another length left
    # fork_point 98 on a child sharing 87 tokens with its parent: only its length was checked
    root = _traj("root", 6)  # 1..6, 7, 8
    kid = _traj("kid", 6, "root", 6)
    wrong = kid.model_copy(update={"trajectory_id": "wrong-kid", "tokens": [1, 2, 99, 4, 5, 6, 7, 8]})
    later = _write(tmp_path / "b.parquet", [root])  # the parent in a later file than its children
    got = [(p.trajectory_id, p.field, p.rule) for p in
           validate_files([_write(tmp_path / "a.parquet", [kid, wrong]), later]).problems]
    assert got == [("wrong-kid", "fork_point", "lineage")]
