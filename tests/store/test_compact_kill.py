"""``traj compact`` killed (SIGKILL) at random points while a writer appends, a reader reads the
whole store again and again, and a trainer's stream follows the store: no trajectory is ever lost
or doubled, for the reader, for the store after each kill, or for the trainer."""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.small_shards import trajectory_table, write_small_shards
from tests.helpers.trajectories import VOCAB
from trajstore.maintenance.compact import compact_store
from trajstore.reader import iter_batches, read_trajectories
from trajstore.store import TRAJECTORIES_DIR, open_store
from trajstore.store.layout import lock_file
from trajstore.store.lock import MAINTENANCE_LOCK
from trajstore.trainer.config import DataConfig
from trajstore.trainer.data import TrajectoryStream

CHILD = Path(__file__).with_name("_compact_child.py")
PLANS = [("3600", "soon"), ("0", "soon"), ("3600", "after_commit"), ("0", "after_commit"), ("3600", "soon"),
         ("0", "after_commit")]
"""One compaction child per plan, killed with SIGKILL: (keep_replaced_s: replaced shards deleted at once or
left, hidden, to a later run; when: at a random point of its first second, or at a random point of the
300 ms after it committed an output (or, with nothing left to merge, ended a pass)). On S3 under load a
child's first commit takes seconds: killed only in its first second, no child ever committed one."""


def _ids(store) -> list[str]:
    """Every stored row's id, later copies included: what the listing shows, not what dedupe hides."""
    return read_trajectories(store, columns=["trajectory_id"], dedupe=False).column("trajectory_id").to_pylist()


def _drop_lock_of(store, pid: int) -> None:
    """Remove the object-store maintenance lock when the killed child `pid` held it: what the lock's
    lease does when it expires (LEASE_S, 5 minutes), without holding every later child and the final
    compaction off that long (a local lock is a flock, released by the kernel when its holder dies)."""
    path = store.path(lock_file(MAINTENANCE_LOCK))
    try:
        owner = json.loads(store.fs.cat_file(path))["owner"]
    except FileNotFoundError:
        return
    if owner.split("-")[1] == str(pid):  # "<host>-<pid>-<random>", the host's alphanumerics only
        store.fs.rm_file(path)


def _output_lines(child: subprocess.Popen) -> queue.Queue:
    """The child's output lines as they come, stripped (None once it has ended)."""
    q: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in child.stdout:
            q.put(line.strip())
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _run(uri: str, opts: dict | None, seed: int) -> None:
    rnd = random.Random(seed)
    store = open_store(uri, storage_options=opts)
    table = trajectory_table(160)
    all_ids = table.column("trajectory_id").to_pylist()
    write_small_shards(store, table.slice(0, 80))
    written = list(all_ids[:80])
    problems: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        for i in range(80, 160):
            store.write_table(table.slice(i, 1))
            written.append(all_ids[i])
            time.sleep(rnd.uniform(0.0, 0.05))

    def reader() -> None:
        while not stop.is_set():
            must = set(written)
            for ids in (_ids(store), [t for b in iter_batches(store, columns=["trajectory_id"], dedupe=False)
                                      for t in b.trajectory_ids]):
                if len(ids) != len(set(ids)) or not must <= set(ids):
                    problems.append(f"reader: {len(ids)} ids, {len(set(ids))} distinct, "
                                    f"{len(must - set(ids))} missing")

    consumed: list[str] = []
    stream = TrajectoryStream(open_store(uri, storage_options=opts),
                              DataConfig(batch_size=8, follow=True, poll_interval_s=0.05), tokenizer="tiny-llama",
                              vocab_size=VOCAB)
    stream.stop_event = threading.Event()

    def trainer() -> None:
        while (b := stream.next_batch()) is not None:
            consumed.extend(s.trajectory_id for s in b.samples)

    def recorded(name: str, fn) -> None:  # noqa: ANN001 - a thread that dies is a problem, not a line on stderr
        try:
            fn()
        except Exception as e:
            problems.append(f"{name} failed: {type(e).__name__}: {e}")
            raise

    threads = {name: threading.Thread(target=recorded, args=(name, fn), name=name)
               for name, fn in (("writer", writer), ("reader", reader), ("trainer", trainer))}
    for t in threads.values():
        t.start()
    committed = 0  # children killed just after committing an output
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]))
    try:
        for keep, when in PLANS:
            args = [sys.executable, str(CHILD), uri, "0.1", keep] + ([json.dumps(opts)] if opts else [])
            child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
            try:
                lines = _output_lines(child)
                assert lines.get(timeout=300) == "ready"
                if when == "after_commit":
                    line = lines.get(timeout=300)
                    assert line is not None and line.startswith(("group ", "pass ")), line
                    committed += line.startswith("group ")
                    time.sleep(rnd.uniform(0.0, 0.3))
                else:
                    time.sleep(rnd.uniform(0.0, 1.0))
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait()
            if not store.is_local:
                _drop_lock_of(store, child.pid)
            must = set(written)
            ids = _ids(open_store(uri, storage_options=opts))
            if len(ids) != len(set(ids)) or not must <= set(ids) or not set(ids) <= set(all_ids):
                problems.append(f"after a kill: {len(ids)} ids, {len(set(ids))} distinct, "
                                f"{len(must - set(ids))} missing")
    finally:
        threads["writer"].join()
        try:
            compact_store(store, target_mb=0.1, min_age_s=0, keep_replaced_s=0)  # finish what the kills left
            deadline = time.monotonic() + 300  # bounds a hang: the assertions below say what was missed
            while len(consumed) < len(all_ids) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:  # whatever failed: no reader or trainer left running against a server the fixture stops
            stream.stop_event.set()
            stop.set()
            for name in ("reader", "trainer"):
                threads[name].join()
    assert problems == []
    assert committed >= 1, "no child was killed after committing an output: the test tested no commit"
    assert sorted(_ids(store)) == sorted(all_ids)
    assert len(consumed) == len(set(consumed)), "the trainer read a trajectory twice"
    assert sorted(consumed) == sorted(all_ids), "the trainer skipped trajectories"
    # the kills and the final run left no replaced shard behind: only outputs and the newest shards
    files = [p.rsplit("/", 1)[-1] for p, _ in store.shard_paths(TRAJECTORIES_DIR)]
    assert len(files) == len(store.list_shards())


def test_sigkill_at_random_points_loses_and_doubles_nothing(tmp_path: Path) -> None:
    _run(str(tmp_path / "s"), None, seed=1)


@pytest.mark.s3
@pytest.mark.slow
def test_sigkill_on_s3(s3_store_uri) -> None:
    uri, opts = s3_store_uri
    _run(uri, opts, seed=2)
