"""`traj schema --diff A B`: the v1 -> v2 changes (known from schema.py's history: v2 added
num_missing_logprobs and three span fields, made logprobs action-only and never null), the
reverse as removals, nothing between a version and itself, an unknown version as bad usage."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from trajstore.cli.main import app


def diff(a: str, b: str) -> tuple[int, list[tuple[str, str]]]:
    r = CliRunner().invoke(app, ["schema", "--diff", a, b, "--format", "json"])
    rows = json.loads(r.stdout)[f"schema.diff_v{a}_v{b}"] if r.exit_code == 0 else []
    return r.exit_code, [(c["change"], c["field"]) for c in rows]


def test_v1_to_v2() -> None:
    code, changes = diff("1", "2")
    assert code == 0
    assert set(changes) == {("added", "num_missing_logprobs"), ("retyped", "logprobs"), ("meaning", "logprobs"),
                            ("meaning", "spans[].policy_version"), ("added", "spans[].logprob_start"),
                            ("added", "spans[].num_missing_logprobs"), ("added", "spans[].policy_version_max")}


def test_v2_to_v3() -> None:
    """v3 (known from schema.py's history): logprobs renamed action_logprobs (a removal and an
    addition: the name never means two things), schema_version and four lineage columns added,
    and the docs that name the log-prob column changed meaning."""
    code, changes = diff("2", "3")
    assert code == 0
    assert set(changes) == {("removed", "logprobs"), ("added", "action_logprobs"), ("added", "schema_version"),
                            ("added", "episode_id"), ("added", "parent_trajectory_id"), ("added", "fork_point"),
                            ("added", "link_kind"), ("meaning", "num_missing_logprobs"),
                            ("meaning", "spans[].logprob_start"), ("meaning", "spans[].num_missing_logprobs")}


def test_v2_to_v1_is_removals_and_same_version_is_empty() -> None:
    assert ("removed", "spans[].policy_version_max") in diff("2", "1")[1]
    assert diff("2", "2") == (0, [])


def test_unknown_version_is_bad_usage() -> None:
    r = CliRunner().invoke(app, ["schema", "--diff", "1", "9"])
    assert r.exit_code == 2 and "error: invalid option --diff: unknown trajectory schema version 9" in r.stderr
