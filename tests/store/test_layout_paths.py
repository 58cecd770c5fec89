"""Every file a store holds is an instance of a template of trajstore.store.layout: classify()
agrees with the functions that build the paths, and a store written through the writer SDK, a
one-step `traj train` (records, TensorBoard, a checkpoint, published versions) and `traj proxy`
(following that run, with the staleness bound) holds no file that classify() does not know."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from trajstore.store import TRAJECTORIES_DIR
from trajstore.store.compaction_records import compacted_name
from trajstore.store.layout import (
    CHECKPOINT_FILES,
    CHECKPOINT_SHARD_SUFFIX,
    SHARDED_CHECKPOINT_FILES,
    VERSION_CONFIG_FILE,
    VERSION_META_FILE,
    VERSION_WEIGHTS_FILE,
    checkpoint_dir,
    checkpoint_latest_file,
    classify,
    compaction_record_file,
    lock_file,
    new_shard_name,
    policy_latest_file,
    run_app_config_file,
    run_config_file,
    run_consumed_dir,
    run_log_file,
    run_steps_dir,
    run_tensorboard_dir,
    run_tokens_dir,
    scalar_cache_file,
    shard_index_file,
    tmp_path,
    version_dir,
)

RUN = "r"


def _built_paths() -> list[str]:
    """One file path of each kind, every one from a layout function (a file name joined onto the
    folder a function names, where the layout names a folder)."""
    shard = new_shard_name()
    ckpt = checkpoint_dir(RUN, 3)
    return [
        f"{TRAJECTORIES_DIR}/{shard}",
        f"{run_steps_dir(RUN)}/{shard}", f"{run_consumed_dir(RUN)}/{shard}", f"{run_tokens_dir(RUN)}/{shard}",
        run_config_file(RUN), f"{run_tensorboard_dir(RUN)}/events.out.tfevents.1.host.1.0",
        checkpoint_latest_file(RUN),
        *(f"{ckpt}/{f}" for f in (*CHECKPOINT_FILES, *SHARDED_CHECKPOINT_FILES, f"__0_0{CHECKPOINT_SHARD_SUFFIX}")),
        policy_latest_file(RUN),
        *(f"{version_dir(RUN, 2)}/{f}" for f in (VERSION_WEIGHTS_FILE, VERSION_CONFIG_FILE, VERSION_META_FILE,
                                                  "tokenizer.json")),
        tmp_path("policy-abc/model.safetensors"), lock_file("ingest"),
        run_log_file(RUN, "trainer"), run_app_config_file(RUN, "demo-train"),  # traj demo's files
        compaction_record_file(compacted_name(shard)), shard_index_file(new_shard_name().replace(".parquet", ".arrow")),
        scalar_cache_file(new_shard_name().replace(".parquet", ".scalars")),
    ]


@pytest.mark.parametrize("rel", _built_paths())
def test_every_path_the_layout_builds_is_classified(rel: str) -> None:
    assert classify(rel) is not None


def test_paths_of_different_kinds_have_different_templates() -> None:
    # 4 record kinds (trajectories, steps, consumed, tokens) + config + tensorboard + 2 LATEST pointers +
    # checkpoint files + version files + _tmp + _locks + process logs + application configs
    # + compaction records + shard index files + scalar cache files = 17
    assert len({classify(p) for p in _built_paths()}) == 17


@pytest.mark.parametrize("rel", [
    "runs/r/.log", "runs/r/-config.json",  # a process or application name is required
    "runs/r/checkpoints/it3/rng.pt",  # checkpoint_dir_name(3) is it00000003
    "runs/r/checkpoints/it00000003/notes.txt",  # not a checkpoint file
    "policies/r/v03/meta.json",  # version_dir_name(3) is v3
    "policies/r/v3/sub/meta.json",
    "trajectories/x.parquet.tmp", "trajectories/.x.parquet", "trajectories/sub/x.parquet",
    "trajectories/_index/scalars/x.parquet", "trajectories/_index/x.scalars",
    "runs/_r/config.json",  # not a run id
    "runs/r/steps/x.json",
    "_locks/ingest", "notes.txt", "runs", "",
])
def test_a_path_outside_the_layout_is_not_classified(rel: str) -> None:
    assert classify(rel) is None


# -- a store written by the writer SDK, the trainer and the proxy ------------------------------

VOCAB = 128
"""Token ids of the tiny random models are below this (``--model tiny-llama``)."""


def _trajectories(n: int):  # noqa: ANN202
    from trajstore import TrajectoryBuilder

    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        b = TrajectoryBuilder(trajectory_id=f"t{i}", prompt_id=f"p{i}", model="tiny", tokenizer="tiny-llama")
        b.add_prompt(rng.integers(0, VOCAB, 6))
        for turn in range(2):
            ids = rng.integers(0, VOCAB, 5)
            b.add_action(ids, np.full(5, -math.log(VOCAB)), policy_version=0, finish_reason="stop",
                         sampling={"temperature": 1.0})
            if turn == 0:
                b.add_observation(rng.integers(0, VOCAB, 3))
        b.set_reward(float(i % 2))
        out.append(b.finish())
    return out


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_a_store_written_by_the_sdk_the_trainer_and_the_proxy_holds_only_layout_paths(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("tensorboard")
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import httpx
    from typer.testing import CliRunner

    from trajstore import StoreWriter
    from trajstore.cli.main import app
    from trajstore.http.server import ServerThread
    from trajstore.proxy.app import create_app
    from trajstore.proxy.config import ProxyConfig
    from trajstore.proxy.testing import fake_app

    root = tmp_path / "store"
    with StoreWriter(str(root), flush_rows=2) as w:  # the writer SDK: two shards
        for t in _trajectories(4):
            w.write(t)
    sdk_files = _files(root)

    r = CliRunner().invoke(app, [  # traj train: 1 step, its records, TensorBoard, a checkpoint, v0 and v1
        "train", str(root), "--model", "tiny-llama", "--batch-size", "4", "--micro-batch-size", "2",
        "--max-seq-len", "512", "--critic-warmup-steps", "0", "--run", RUN, "--max-steps", "1",
        "--checkpoint-every", "1", "--tensorboard", "--format", "json"], env={"TRAJ_TRACEBACK": "1"})
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["policy_version"] == 1
    train_files = _files(root)

    # traj proxy following the run: loads its latest version, reads its config.json (batch size)
    # and consumed records (staleness bound), records one episode
    with ServerThread(fake_app(reply="ok")) as upstream, ServerThread(create_app(ProxyConfig(
            upstream=upstream.url, store=str(root), follow_run=RUN, max_staleness=1, poll_s=0.05))) as proxy:
        call = httpx.post(f"{proxy.url}/s/ep-1/v1/chat/completions", timeout=30,
                          json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]})
        assert call.status_code == 200, call.text
        done = httpx.post(f"{proxy.url}/s/ep-1/finish", json={"reward": 1.0}, timeout=30)
        assert done.status_code == 200, done.text
        loads = httpx.get(f"{upstream.url}/_fake/loads", timeout=120).json()
    assert [(ld["weight_version"], ld["model_path"]) for ld in loads] == [("1", str(root / version_dir(RUN, 1)))]
    files = _files(root)

    # each writer added files, and the proxy its trajectory shard
    assert set(sdk_files) < set(train_files) < set(files)
    assert any(f.startswith(f"{TRAJECTORIES_DIR}/") for f in set(files) - set(train_files))
    unknown = [f for f in files if classify(f) is None]
    assert not unknown, f"files at paths no layout template names: {unknown}"
    # every kind a trainer run writes is there (so the check above saw each writer's paths)
    kinds = {classify(f) for f in files}
    for rel in (f"{run_steps_dir(RUN)}/x.parquet", f"{run_consumed_dir(RUN)}/x.parquet", run_config_file(RUN),
                f"{run_tensorboard_dir(RUN)}/e", checkpoint_latest_file(RUN), f"{checkpoint_dir(RUN, 1)}/{CHECKPOINT_FILES[0]}",
                policy_latest_file(RUN), f"{version_dir(RUN, 1)}/{VERSION_META_FILE}"):
        assert classify(rel) in kinds, rel
    assert os.path.isfile(root / version_dir(RUN, 1) / VERSION_WEIGHTS_FILE)
