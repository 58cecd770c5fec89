"""Disk use of training runs (issue 14): published versions and checkpoints are pruned to
`--keep-versions` / `--keep-checkpoints` (never the latest version or the one before),
`traj runs` lists what each run occupies, and `_tmp/` leftovers of killed writers are removed by
the next writer or trainer once an hour old, never while in use."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajstore import StoreWriter, open_store
from trajstore.cli.main import app
from trajstore.trainer.loop.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.loop.train import train
from trajstore.policies import latest_policy_version, list_policy_versions
from trajstore.trainer.loop.publish import prune_versions, publish_policy

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB


def _cfg(store: Path, **run) -> TrainConfig:
    return TrainConfig(store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
                       data=DataConfig(batch_size=2, micro_batch_size=2, max_seq_len=512),
                       algo=AlgoConfig(critic_warmup_steps=0),
                       run=RunConfig(run_id="r", progress=False, **run))


def test_keep_versions_and_checkpoints_bound_the_disk(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12, per_shard=2)
    s = train(_cfg(tmp_path, keep_versions=2, keep_checkpoints=1, checkpoint_every=1))
    assert s.steps == 6  # 12 trajectories / 2 per step -> v0 .. v6 published
    assert list_policy_versions(tmp_path, "r") == [5, 6]
    assert sorted(os.listdir(tmp_path / "runs/r/checkpoints")) == ["LATEST", "it00000006"]


def test_keep_versions_1_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        RunConfig(run_id="r", keep_versions=1)


def test_prune_never_deletes_the_latest_or_the_one_before(tmp_path: Path) -> None:
    import torch

    store = open_store(str(tmp_path))
    net = torch.nn.Linear(2, 2)
    for v in range(5):
        publish_policy(store, "r", v, net)
    # LATEST moved back to v2 (a resumed run re-publishes its checkpoint's version)
    publish_policy(store, "r", 2, net)
    assert latest_policy_version(store, "r") == 2
    deleted = prune_versions(store, "r", keep=2)
    # the 2 newest (v3, v4) are kept by count, v2 (latest) and v1 (the one before) by rule
    assert deleted == [0] and list_policy_versions(store, "r") == [1, 2, 3, 4]
    assert prune_versions(store, "r", keep=0) == []


def test_traj_runs_lists_versions_checkpoints_and_sizes(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4, per_shard=2)
    train(_cfg(tmp_path, checkpoint_every=1))
    r = CliRunner().invoke(app, ["runs", str(tmp_path), "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    (run,) = out["runs"]
    assert run["run_id"] == "r" and run["model"] == "tiny-llama" and run["latest_version"] == 2
    assert [v["version"] for v in run["versions"]] == [0, 1, 2] and all(v["complete"] for v in run["versions"])
    assert [(c["iteration"], c["latest"]) for c in run["checkpoints"]] == [(1, False), (2, True)]
    # sizes are what is on disk
    ck = sum(f.stat().st_size for f in (tmp_path / "runs/r/checkpoints/it00000002").iterdir())
    assert run["checkpoints"][1]["bytes"] == ck
    assert run["total_bytes"] == run["versions_bytes"] + run["checkpoints_bytes"] + run["records_bytes"] > 0
    table = CliRunner().invoke(app, ["runs", str(tmp_path)], terminal_width=160)
    assert table.exit_code == 0 and "3: v0 .. v2" in table.output and "it2*" in table.output, table.output
    # binary units, as the memory plan, README and bench/RESULTS.md give sizes (it printed "3.6 MB")
    total = run["total_bytes"] / 1024 ** (2 if run["total_bytes"] >= 1024 ** 2 else 1)
    unit = "MiB" if run["total_bytes"] >= 1024 ** 2 else "KiB"
    assert f"{total:.1f} {unit}" in table.output, table.output
    assert not re.search(r"\d (KB|MB|GB)\b", table.output), table.output


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (t, t))


def test_stale_tmp_leftovers_are_removed_by_the_next_writer_never_fresh_ones(tmp_path: Path) -> None:
    tmp = tmp_path / "_tmp"
    (tmp / "policy-old").mkdir(parents=True)
    (tmp / "policy-old" / "model.safetensors").write_bytes(b"x" * 1000)  # a killed publish, 2 h ago
    _age(tmp / "policy-old", 7200)
    (tmp / "policy-busy").mkdir()
    (tmp / "policy-busy" / "model.safetensors").write_bytes(b"y")  # being written right now ...
    _age(tmp / "policy-busy", 7200)
    os.utime(tmp / "policy-busy" / "model.safetensors")  # ... its file was touched a moment ago
    (tmp / "00000000000000000001-otherhost-1-abc.parquet.tmp").write_bytes(b"z" * 10)  # 2 h old shard
    _age(tmp / "00000000000000000001-otherhost-1-abc.parquet.tmp", 7200)
    (tmp / "fresh.tmp").write_bytes(b"f")
    with StoreWriter(str(tmp_path), flush_seconds=None):
        pass
    assert sorted(os.listdir(tmp)) == ["fresh.tmp", "policy-busy"]


def test_stale_tmp_leftovers_are_removed_when_a_trainer_starts(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 2)
    (tmp_path / "_tmp" / "ckpt-dead").mkdir(parents=True)
    (tmp_path / "_tmp" / "ckpt-dead" / "optim.pt").write_bytes(b"0" * 100)
    _age(tmp_path / "_tmp" / "ckpt-dead", 3700)
    train(_cfg(tmp_path))
    assert not (tmp_path / "_tmp" / "ckpt-dead").exists()


def test_traj_runs_on_a_store_without_runs_says_so_once(tmp_path: Path) -> None:
    # "training runs in S: no rows (no training runs in S)" named the store twice
    write_synthetic_store(tmp_path, 1)
    r = CliRunner().invoke(app, ["runs", str(tmp_path)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert r.output == f"training runs in {tmp_path}: no rows (no run has trained on this store yet)\n"
