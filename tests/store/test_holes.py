"""Holes found by attacking the store and the SDK (issue 11, "Why"): each test failed before
its fix. Validation gaps, the writer ignoring metadata when sizing flushes and row groups,
symlinked shards ignored without a word, a mistyped remote prefix read as an empty store."""

from __future__ import annotations

import json
import math
import os
import warnings
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from trajstore import StoreWriter, Trajectory, TrajectoryBuilder, open_store, read_trajectories
from trajstore.convert import trajectories_to_table
from trajstore.errors import TrajectoryValidationError
from trajstore.store import CorruptShardWarning
from trajstore.validate import check_trajectory_id, find_violations

NAN = math.nan


def _valid(**update: Any) -> dict[str, Any]:
    d: dict[str, Any] = dict(
        trajectory_id="hole", source="sdk", reward=1.0, tokens=[1, 2, 3, 4],
        logprobs=[NAN, -0.1, -0.2, NAN],
        spans=[dict(kind="prompt", start=0, end=1),
               dict(kind="action", start=1, end=3, policy_version=0),
               dict(kind="observation", start=3, end=4)])
    d.update(update)
    return d


def _fields(traj: Trajectory) -> dict[str, str]:
    return {v.field: v.message for v in find_violations(traj)}


def test_base_record_is_valid() -> None:
    assert find_violations(Trajectory(**_valid())) == []


@pytest.mark.parametrize("tid", ["abc\n", "abc\r", "a\nb", "abc\n\n"])
def test_trajectory_id_with_a_trailing_newline_is_refused(tid: str) -> None:
    # `$` matched before a trailing newline, so "abc\n" passed the path-safety rule.
    (v,) = check_trajectory_id(tid)
    assert v.field == "trajectory_id" and "not safe in a path" in v.message


@pytest.mark.parametrize("meta", [{"x": NAN}, {"deep": [1.0, {"y": math.inf}]}, {"z": -math.inf}])
def test_nan_or_infinity_in_metadata_is_refused(meta: dict[str, Any], tmp_store: str) -> None:
    # json.dumps wrote NaN / Infinity, which is not JSON: DuckDB's json functions and other
    # readers reject it later.
    t = Trajectory(**_valid(metadata=meta))
    assert "metadata" in _fields(t) and "not standard JSON" in _fields(t)["metadata"]
    with StoreWriter(tmp_store, flush_seconds=None) as w:
        with pytest.raises(TrajectoryValidationError, match="metadata"):
            w.write(t)
    assert read_trajectories(tmp_store).num_rows == 0


@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("min_p", NAN, "min_p: must be finite and in [0, 1]"),
    ("min_p", 1.5, "min_p: must be finite and in [0, 1]"),
    ("top_k", -5, "top_k: must be -1 or 0 (disabled) or >= 1"),
    ("max_tokens", -3, "max_tokens: must be >= 1"),
    ("max_tokens", 0, "max_tokens: must be >= 1"),
    ("top_p", NAN, "top_p: must be in (0, 1]"),  # already refused before; kept beside min_p
    ("temperature", NAN, "temperature: must be finite and >= 0"),
    ("sampling_params", "{not json", "sampling_params: is not valid JSON"),
    ("sampling_params", "[1, 2]", "sampling_params: must be a JSON object"),
    ("sampling_params", '{"temperature": NaN}', "sampling_params: is not valid JSON"),
])
def test_bad_sampling_parameters_are_refused(field: str, value: Any, fragment: str) -> None:
    spans = _valid()["spans"]
    spans[1] = {**spans[1], field: value}
    fields = _fields(Trajectory(**_valid(spans=spans)))
    key = f"spans[1].{field}"
    assert key in fields, fields
    assert fragment.split(": ", 1)[-1] in fields[key]


@pytest.mark.parametrize("ok", [{"top_k": -1}, {"top_k": 0}, {"top_k": 40}, {"min_p": 0.0}, {"max_tokens": 1},
                                {"sampling_params": '{"seed": 7}'}])
def test_usual_sampling_parameters_are_accepted(ok: dict[str, Any]) -> None:
    spans = _valid()["spans"]
    spans[1] = {**spans[1], **ok}
    assert find_violations(Trajectory(**_valid(spans=spans))) == []


@pytest.mark.parametrize("raw", ["not json", "{'a': 1}", "NaN", "1 2"])
def test_reward_raw_must_be_json(raw: str) -> None:
    fields = _fields(Trajectory(**_valid(reward_raw=raw)))
    assert "reward_raw" in fields and "not valid JSON" in fields["reward_raw"]


def test_reward_raw_json_accepted() -> None:
    for raw in ['true', '"positive"', '{"passed": 3}', '0.5', 'null']:
        assert find_violations(Trajectory(**_valid(reward_raw=raw))) == []


def test_builder_refuses_bad_sampling_at_finish() -> None:
    b = TrajectoryBuilder(trajectory_id="b1")
    b.add_prompt([1])
    b.add_action([2, 3], [-0.1, -0.2], policy_version=0, sampling={"top_k": -5, "max_tokens": -3})
    with pytest.raises(TrajectoryValidationError) as ei:
        b.finish()
    assert {v.field for v in ei.value.violations} == {"spans[1].top_k", "spans[1].max_tokens"}


def test_created_at_out_of_range_is_a_validation_error_not_overflow() -> None:
    from pydantic import ValidationError

    # 0001-01-01T00:00:00+05:00 is 0000-12-31T19:00 UTC, before datetime.min: astimezone
    # raised a raw OverflowError.
    with pytest.raises(ValidationError, match="created_at") as ei:
        Trajectory(**_valid(created_at="0001-01-01T00:00:00+05:00"))
    assert "outside the range" in str(ei.value)
    b = TrajectoryBuilder(trajectory_id="b2")
    b.add_prompt([1])
    from datetime import datetime, timedelta, timezone

    with pytest.raises(ValidationError, match="created_at"):
        b.finish(created_at=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))))


# -- writer sizing ------------------------------------------------------------------------------


def _fat(i: int, meta_bytes: int) -> Trajectory:
    b = TrajectoryBuilder(trajectory_id=f"fat-{i}", metadata={"blob": "x" * meta_bytes})
    b.add_prompt([1, 2])
    b.add_action([3, 4], [-0.5, -0.25], policy_version=0)
    return b.finish()


def test_writer_counts_metadata_when_sizing_flushes(tmp_store: str) -> None:
    # 40 trajectories with 2 MiB of metadata each and flush_mb=1: every trajectory alone
    # exceeds the flush size, so each flush holds one (40 shards), not one 80 MB shard.
    with StoreWriter(tmp_store, flush_mb=1, flush_seconds=None) as w:
        for i in range(40):
            w.write(_fat(i, 2 * 2**20))
    assert len(w.shards_written) == 40
    assert read_trajectories(tmp_store, columns=["trajectory_id"]).num_rows == 40


def test_row_groups_count_metadata(tmp_store: str) -> None:
    # 12 rows of ~2 MiB metadata with a 4 MiB row-group target: at most 2 rows per row group
    # (2 x 2 MiB reaches the target), so at least 12 / 2 = 6 row groups instead of one.
    trajs = [_fat(i, 2 * 2**20) for i in range(12)]
    path = open_store(tmp_store).write_table(trajectories_to_table(trajs), row_group_target_mb=4)
    md = pq.read_metadata(path)
    assert md.num_row_groups >= 6
    assert max(md.row_group(i).num_rows for i in range(md.num_row_groups)) <= 2


# -- symlinked shards -------------------------------------------------------------------------


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


# -- a remote prefix that does not exist ---------------------------------------------------------


@pytest.mark.s3
def test_missing_remote_prefix_is_an_error(s3_store_uri: tuple[str, dict[str, Any]], make_trajectory: Any) -> None:
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    uri, opts = s3_store_uri
    store = open_store(uri, storage_options=opts)
    store.write_table(trajectories_to_table([make_trajectory(np.random.default_rng(0), trajectory_id="s3")]))
    assert store.exists()
    typo = uri + "-typo"
    assert not open_store(typo, storage_options=opts).exists()
    so = [f"--storage-option={k}={v}" for k, v in opts.items()]
    for cmd in (["stats", typo], ["sql", typo, "SELECT 1"], ["info", typo]):
        r = CliRunner().invoke(app, [*cmd, *so])
        assert r.exit_code == 1, (cmd, r.output)
        assert "no store at" in r.output and "typo" in r.output and "\n" == r.output[-1] and r.output.count("\n") == 1
    bucket_typo = "s3://no-such-bucket-xyz/store"
    r = CliRunner().invoke(app, ["stats", bucket_typo, *so])
    assert r.exit_code == 1 and "no store at" in r.output
    r = CliRunner().invoke(app, ["info", uri, *so, "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["trajectories"] == 1


def test_an_empty_store_uri_is_refused_not_the_current_directory(tmp_path, monkeypatch):
    # `traj ingest x.json --store "$STORE"` with STORE unset wrote trajectories/ and _tmp/ into
    # the working directory (a checkout) and exited 0.
    from typer.testing import CliRunner

    from trajstore.cli.main import app
    from trajstore.errors import StoreError
    from trajstore.store import open_store

    monkeypatch.chdir(tmp_path)
    for uri in ("", "  "):
        with pytest.raises(StoreError, match="the store URI is empty"):
            open_store(uri)
    (tmp_path / "x.json").write_text("{}")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "x.json"), "--store", ""])
    assert res.exit_code != 0 and "the store URI is empty" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]
