"""Finished episodes written together (trajstore/proxy/recorder.py ``persist``, ``--finish-batch``):
episodes finishing within the window share one shard, each /finish answers only once its episode
is durable (in the store), a full window flushes at once, and 0 writes each at once."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import numpy as np

from tests.helpers.trajectories import tiny_model_trajectory
from trajstore.proxy.recorder import Recorder
from trajstore.reader import read_trajectories
from trajstore.store import TRAJECTORIES_DIR, open_store
from trajstore.writer import StoreWriter


def _writer(root: Path) -> StoreWriter:
    return StoreWriter(str(root), flush_rows=1 << 30, flush_mb=1 << 20, flush_seconds=None)


def _trajs(n: int, prefix: str) -> list:
    rng = np.random.default_rng(0)
    return [tiny_model_trajectory(rng, trajectory_id=f"{prefix}{i}") for i in range(n)]


def _shards(root: Path) -> int:
    return len(open_store(root).shard_paths(TRAJECTORIES_DIR))


def test_episodes_finishing_within_the_window_share_a_shard_and_are_durable_on_return(tmp_path: Path) -> None:
    # The window closes when it is full (4 trajectories), never by the clock here (30 s), so the
    # four share a shard however late the later ones arrive on a loaded machine; the clock's end
    # of a window is the next test's.
    rec = Recorder(_writer(tmp_path), tokenizer=None, run_metadata={}, batch_s=30.0, batch_max=4)
    durable: dict[str, bool] = {}

    async def finish(i: int) -> None:
        for _ in range(i):  # arriving one after another, while the first waits in the window
            await asyncio.sleep(0)
        t = _trajs(1, f"e{i}-")
        await rec.persist(t)
        ids = set(read_trajectories(str(tmp_path), columns=["trajectory_id"]).column("trajectory_id").to_pylist())
        durable[f"e{i}"] = t[0].trajectory_id in ids

    async def main() -> None:
        await asyncio.wait_for(asyncio.gather(*(finish(i) for i in range(4))), 120)

    asyncio.run(main())
    assert _shards(tmp_path) == 1
    assert all(durable.values()) and len(durable) == 4
    assert rec.stats["trajectories_written"] == 4


def test_a_window_that_does_not_fill_ends_after_its_time(tmp_path: Path) -> None:
    # bounded: a lone finished episode waits at most the window (0.2 s) for others, then is
    # written; without the bound it would wait for 512 more (120 s only bounds a hang)
    rec = Recorder(_writer(tmp_path), tokenizer=None, run_metadata={}, batch_s=0.2)

    async def main() -> None:
        await asyncio.wait_for(rec.persist(_trajs(1, "lone")), 120)

    asyncio.run(main())
    assert _shards(tmp_path) == 1 and rec.stats["trajectories_written"] == 1


def test_a_full_window_flushes_without_waiting(tmp_path: Path) -> None:
    rec = Recorder(_writer(tmp_path), tokenizer=None, run_metadata={}, batch_s=30.0, batch_max=3)

    async def main() -> None:
        await asyncio.gather(rec.persist(_trajs(2, "a")), rec.persist(_trajs(1, "b")))

    asyncio.run(asyncio.wait_for(main(), 120))  # not the 30 s window: 3 trajectories fill it
    assert _shards(tmp_path) == 1


def test_zero_writes_each_finish_at_once(tmp_path: Path) -> None:
    rec = Recorder(_writer(tmp_path), tokenizer=None, run_metadata={}, batch_s=0.0)

    async def main() -> None:
        for i in range(3):
            await rec.persist(_trajs(1, f"z{i}-"))

    asyncio.run(main())
    assert _shards(tmp_path) == 3


def test_the_proxy_groups_concurrent_finishes(fake_upstream, start_proxy, tmp_path: Path) -> None:
    # the four /finish requests go out together (a barrier), and a 5 s window is long enough for
    # all four to reach it on a loaded machine; should one still miss it, it gets a shard of its
    # own, which the assertion allows (grouped: fewer shards than episodes)
    px = start_proxy(fake_upstream.url, finish_batch_s=5.0)
    answers = {}
    together = threading.Barrier(4)

    def episode(i: int) -> None:
        httpx.post(f"{px.url}/s/ep{i}/v1/chat/completions",
                   json={"model": "fake", "messages": [{"role": "user", "content": f"task {i}"}]}, timeout=120)
        together.wait(120)
        answers[i] = httpx.post(f"{px.url}/s/ep{i}/finish", json={"status": "completed", "reward": 1.0},
                                timeout=120).json()
        sessions = {r["metadata"] for r in read_trajectories(str(tmp_path / "store"), columns=["metadata"]).to_pylist()}
        answers[i]["durable"] = any(f'"session": "ep{i}"' in m or f'"session":"ep{i}"' in m for m in sessions)

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert sorted(a["status"] for a in answers.values()) == ["completed"] * 4
    assert all(a["durable"] for a in answers.values())  # stored when its /finish answered
    assert _shards(tmp_path / "store") < 4  # grouped (all four, unless a window closed between them)
    assert len(read_trajectories(str(tmp_path / "store"))) == 4
