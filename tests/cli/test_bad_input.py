"""Bad input found by a hostile tester: each one a clear line naming the file, row, field or flag,
and an exit status that means what the README's table says."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import trajstore as ts
from trajstore.cli.main import EXIT_ERROR, EXIT_REFUSED, EXIT_USAGE, app

from tests.helpers.paths import REPO_ROOT

runner = CliRunner()
WIDTH = {"COLUMNS": "200"}
README = REPO_ROOT / "README.md"


# -- exit status ---------------------------------------------------------------------------------


def test_readme_exit_status_table_matches_the_code(tmp_path: Path) -> None:
    # The table is what scripts rely on. Issue 12 fixes ingest's contract (1 when any record was
    # refused); errors exit 1 too, told apart by the stderr lines the table names.
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", README.read_text(), flags=re.M))
    assert (EXIT_ERROR, EXIT_USAGE, EXIT_REFUSED) == (1, 2, 1)  # issue 12: 1 when any record was refused
    assert rows["1"].startswith("error") and "not a store" in rows["1"]
    assert "`traj ingest` refused some records" in rows["1"] and "3" not in rows
    assert rows["2"].startswith("bad usage")
    res = runner.invoke(app, ["stats", str(tmp_path / "nope")])
    assert res.exit_code == 1 and "no store at" in res.stderr
    res = runner.invoke(app, ["stats", str(tmp_path), "--no-such-flag"])
    assert res.exit_code == 2


@pytest.mark.parametrize("args", [
    ["serve", "--port", "-1"],  # was pydantic's multi-line dump, exit 1
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "t", "--policy-lr", "nan"],
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "t", "--batch-size", "-3"],
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "t", "--overlong", "maybe"],
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "../evil"],
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "t", "--device", "tpu"],  # was exit 1 at run time
    ["info", "{store}", "--storage-option", "badformat"],
    ["proxy", "--store", "{store}", "--upstream", "notaurl"],
    ["proxy", "--upstream", "http://127.0.0.1:9", "--store", "{store}", "--hold-timeout", "-1"],
    ["demo", "--store", "{store}/d", "--run-id", "../evil"],
    ["bench", "learning", "--scratch", "{store}", "--preset", "full"],
], ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_a_bad_option_value_is_bad_usage_one_line_naming_the_option(tmp_path: Path, args: list[str]) -> None:
    pytest.importorskip("torch") if args[0] in ("serve", "train", "demo", "bench") else None
    pytest.importorskip("fastapi") if args[0] == "proxy" else None
    args = [a.replace("{store}", str(tmp_path)) for a in args]
    flag = next(a for a in reversed(args) if a.startswith("--"))
    res = runner.invoke(app, args)
    assert res.exit_code == EXIT_USAGE, res.output
    errors = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"error: invalid option {flag}"), res.stderr
    assert "pydantic" not in res.stderr and "validation error" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


# -- traj stats --where --------------------------------------------------------------------------


@pytest.fixture
def small_store(tmp_path: Path, make_trajectory: Any) -> str:
    rng = np.random.default_rng(0)
    uri = str(tmp_path / "s")
    ts.write_trajectories(uri, [make_trajectory(rng, trajectory_id=f"t{i}") for i in range(3)])
    return uri


def test_where_of_the_wrong_type_names_where(small_store: str) -> None:
    # reward is DOUBLE: 'x' cannot be cast; LIMIT 0 never casts, so this used to fail later as
    # "report query failed: Conversion Error ..." without naming --where
    res = runner.invoke(app, ["stats", small_store, "--statuses", "--where", "reward = 'x'"])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1, res.output
    assert "invalid --where predicate \"reward = 'x'\"" in res.stderr and "DOUBLE" in res.stderr
    # a cast that fails only on some row's value is found while reading: it names --where too
    res = runner.invoke(app, ["stats", small_store, "--statuses", "--where", "CAST(source AS INT) = 1"])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1, res.output
    assert "with --where 'CAST(source AS INT) = 1'" in res.stderr and "Conversion Error" in res.stderr
    res = runner.invoke(app, ["stats", small_store, "--statuses", "--where", "reward IS NULL OR reward > -1e9",
                              "--format", "json"])
    assert res.exit_code == 0 and sum(r["trajectories"] for r in json.loads(res.stdout)["statuses.by_source"]) == 3


def test_sql_write_refusal_reads_well(small_store: str) -> None:
    res = runner.invoke(app, ["sql", small_store, "INSERT INTO t VALUES (1)"])
    assert res.exit_code == 1 and "read-only: refusing this INSERT statement" in res.stderr, res.output


# -- corrupt shards ------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", [["sql", "{s}", "SELECT count(*) AS n FROM trajectories"], ["stats", "{s}"]])
def test_a_corrupt_shard_is_one_warning_line_naming_it(small_store: str, cmd: list[str]) -> None:
    bad = Path(small_store) / "trajectories" / "00000000000000000001-x-1-abc.parquet"
    bad.write_bytes(b"not parquet at all")
    res = runner.invoke(app, [a.replace("{s}", small_store) for a in cmd], env=WIDTH)
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert lines == [f"warning: skipping corrupt shard {bad}: {lines[0].split(': ', 2)[2]}"], res.stderr
    assert "CorruptShardWarning" not in res.output and ".py:" not in res.output


# -- traj runs on damaged checkpoints --------------------------------------------------------------


def _run_layout(root: Path) -> Path:
    """A run with one committed checkpoint (iteration 2) and a published v0, as the trainer lays
    them out (trainer/loop/checkpoint.py, trainer/loop/publish.py), with tiny files."""
    import torch

    ck = root / "runs" / "r" / "checkpoints" / "it00000002"
    ck.mkdir(parents=True)
    for name in ("policy.pt", "critic.pt", "optim.pt", "rng.pt"):
        torch.save({"w": torch.zeros(2)}, ck / name)
    (ck / "state.json").write_text(json.dumps({"iteration": 2, "step": 1, "version": 1}))
    (ck / "config.json").write_text("{}")
    (root / "runs" / "r" / "checkpoints" / "LATEST").write_text(json.dumps({"iteration": 2, "dir": "it00000002"}))
    v0 = root / "policies" / "r" / "v0"
    v0.mkdir(parents=True)
    (v0 / "meta.json").write_text("{}")
    (root / "policies" / "r" / "LATEST").write_text(json.dumps({"version": 0}))
    return ck


def _runs(root: Path) -> tuple[Any, list[str]]:
    res = runner.invoke(app, ["runs", str(root), "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr.splitlines()


def test_runs_names_damaged_checkpoints_and_pointers(tmp_path: Path) -> None:
    ck = _run_layout(tmp_path)
    out, lines = _runs(tmp_path)
    assert out["runs"][0]["problems"] == [] and lines == []
    # a truncated policy.pt, an empty optim.pt, a missing rng.pt
    data = (ck / "policy.pt").read_bytes()
    (ck / "policy.pt").write_bytes(data[: len(data) // 2])
    (ck / "optim.pt").write_bytes(b"")
    (ck / "rng.pt").unlink()
    out, lines = _runs(tmp_path)
    assert lines == [f"warning: run r: checkpoint {ck} has no rng.pt",
                     f"warning: run r: checkpoint file {ck / 'policy.pt'} is damaged (not a whole torch.save archive)",
                     f"warning: run r: checkpoint file {ck / 'optim.pt'} is empty"], lines
    assert len(out["runs"][0]["problems"]) == 3


@pytest.mark.parametrize("latest, says", [
    ("{not json", "is not valid JSON"),
    ('{"iteration": 2}', "is not a checkpoint pointer"),
    ('{"iteration": 9, "dir": "it00000009"}', "names it00000009, which does not exist"),
])
def test_runs_names_a_bad_checkpoint_latest(tmp_path: Path, latest: str, says: str) -> None:
    _run_layout(tmp_path)
    pointer = tmp_path / "runs" / "r" / "checkpoints" / "LATEST"
    pointer.write_text(latest)
    out, lines = _runs(tmp_path)
    assert len(lines) == 1 and lines[0].startswith(f"warning: run r: {pointer} {says}"), lines
    assert lines[0].endswith("--resume refuses this run")
    res = runner.invoke(app, ["runs", str(tmp_path)], env=WIDTH)  # the table says how many, stderr what
    assert res.exit_code == 0 and "1 (on stderr)" in res.stdout, res.output


def test_runs_names_a_bad_policies_latest(tmp_path: Path) -> None:
    _run_layout(tmp_path)
    (tmp_path / "policies" / "r" / "LATEST").write_text('"v0"')
    _, lines = _runs(tmp_path)
    assert lines == [f"warning: run r: {tmp_path / 'policies' / 'r' / 'LATEST'} is not a JSON object (str) (a "
                     "rollout server following this run cannot load the latest version)"], lines
    (tmp_path / "policies" / "r" / "LATEST").write_text('{"version": 4}')
    _, lines = _runs(tmp_path)
    assert lines == [f"warning: run r: {tmp_path / 'policies' / 'r' / 'LATEST'} names v4, which is missing or "
                     "incomplete"], lines


# -- traj train --resume without a checkpoint -----------------------------------------------------


def test_resume_without_a_checkpoint_warns(tmp_path: Path) -> None:
    from trajstore.errors import TrajstoreWarning
    from trajstore.store import open_store
    from trajstore.trainer.loop.config import ModelConfig, RunConfig, TrainConfig
    from trajstore.trainer.loop.resume import resume_point

    cfg = TrainConfig(store=str(tmp_path), model=ModelConfig(name="tiny-llama"), run=RunConfig(run_id="r1x"))
    with pytest.warns(TrajstoreWarning, match=r"--resume: run 'r1x' has no checkpoint .* starts fresh at iteration 0"):
        assert resume_point(open_store(str(tmp_path)), cfg, resume=True) is None
    res = runner.invoke(app, ["train", "--help"], env=WIDTH)
    assert "starts fresh with a warning" in " ".join(res.stdout.split())


# -- the writer SDK ------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, field", [
    ({"flush_seconds": math.nan}, "flush_seconds"), ({"flush_seconds": math.inf}, "flush_seconds"),
    ({"flush_seconds": -1}, "flush_seconds"), ({"flush_seconds": 0}, "flush_seconds"),
    ({"flush_seconds": "5"}, "flush_seconds"), ({"flush_mb": math.nan}, "flush_mb"), ({"flush_mb": 0}, "flush_mb"),
])
def test_writer_refuses_non_finite_or_non_positive_flush_limits(tmp_path: Path, kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be a finite number > 0"):
        ts.StoreWriter(str(tmp_path / "s"), **kwargs)


def test_numpy_rewards_are_stored_as_numbers() -> None:
    def raw(reward: Any, **kw: Any) -> str | None:
        b = ts.TrajectoryBuilder(trajectory_id="t", source="sdk")
        b.add_prompt([1, 2])
        b.add_action([3], [-0.5], policy_version=0)
        b.set_reward(reward, **kw)
        return b.finish().reward_raw

    assert raw(np.float32(1.0)) == "1.0"  # was '"1.0"', a JSON string
    assert raw(np.float32(0.1)) == "0.1"  # float32's own shortest decimal, not 0.10000000149011612
    assert raw(np.float64(0.25)) == "0.25" and raw(1.0, raw=np.int64(3)) == "3"
    assert json.loads(raw(1.0, raw={"score": np.float32(0.5), "passed": np.bool_(True),
                                    "per_test": np.array([1, 0], dtype=np.int8)})) == {
        "score": 0.5, "passed": True, "per_test": [1, 0]}


def test_ingest_format_is_case_insensitive_like_every_other_commands(tmp_path):
    # `traj stats --format JSON` worked, `traj ingest --format JSON` was refused as no output format.
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) + "\n")
    res = CliRunner().invoke(app, ["ingest", str(p), "--store", str(tmp_path / "s"), "--format", "JSON"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trajectories_written"] == 1
