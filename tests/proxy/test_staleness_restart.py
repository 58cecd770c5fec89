"""``--max-staleness 0`` holds across proxy restarts: agents play through ``traj proxy`` (fake
upstream that loads versions like SGLang) while a simulated trainer reads the store with the
trainer's own stream, writes consumed records with the trainer's record code and publishes a
new version per step. The proxy is restarted twice while the trainer is paused, so a gate that
forgot the finished-but-unconsumed trajectories (or the consumed ones) after a restart would
let more than one batch run ahead, or hold forever. At the end, every consumed record's
staleness is at most max_staleness + 1 = 1 version."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import httpx
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trajstore.http.server import ServerThread  # noqa: E402
from trajstore.proxy.testing import fake_app  # noqa: E402
from trajstore.reader import read_trajectories  # noqa: E402
from trajstore.store import RUN_CONSUMED_DIR, RUNS_DIR, open_store  # noqa: E402

TOKENIZER = "fake-bytes"
RUN = "stale0"
B = 2  # the trainer's batch size; with max_staleness 0 the proxy lets B trajectories run ahead
STEPS = 4
COUNTED = f"source = 'trajstore/proxy' AND status IN ('completed', 'truncated') AND " \
          f"json_extract_string(metadata, '$.run_id') = '{RUN}'"


def _tiny_model() -> torch.nn.Module:
    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    return transformers.LlamaForCausalLM(cfg)


class SimulatedTrainer:
    """The trainer's data path and records without the model update: TrajectoryStream reads
    step batches (follow mode), consumed_rows + RunRecorder.write_step record them, then the
    next version is published (the order of trainer/loop/train.py)."""

    def __init__(self, store: str):
        from trajstore.trainer.config import DataConfig
        from trajstore.trainer.data import TrajectoryStream
        from trajstore.trainer.loop.records import RunRecorder

        self.store = store
        self.model = _tiny_model()
        self.stream = TrajectoryStream(open_store(store), DataConfig(
            batch_size=B, micro_batch_size=1, follow=True, poll_interval_s=0.05, idle_timeout_s=60, where=COUNTED),
            tokenizer=TOKENIZER, vocab_size=512)
        self.recorder = RunRecorder(open_store(store), RUN, progress=False)
        self.version = 0

    def publish(self) -> None:
        from trajstore.trainer.loop.publish import publish_policy

        publish_policy(self.store, RUN, self.version, self.model)

    def step(self, step: int) -> None:
        from trajstore.trainer.loop.records import consumed_rows

        batch = self.stream.next_batch()
        assert batch is not None and len(batch.samples) == B
        rows = consumed_rows(batch.samples, step=step, trainer_version=self.version, rank=0, ratios=None)
        self.recorder.write_step(iteration=step, step=step, trainer_version=self.version,
                                 metrics={"data/trajectories": float(len(rows))}, consumed=rows)
        self.version += 1
        self.publish()


def _wait(pred: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _counted_ids(store: str) -> list[str]:
    t = read_trajectories(store, columns=["trajectory_id", "source", "status", "metadata"]).to_pylist()
    return [r["trajectory_id"] for r in t if r["source"] == "trajstore/proxy"
            and r["status"] in ("completed", "truncated") and json.loads(r["metadata"]).get("run_id") == RUN]


def _consumed(store: str) -> list[dict]:
    s = open_store(store)
    out: list[dict] = []
    for path, _ in s.shard_paths(f"{RUNS_DIR}/{RUN}/{RUN_CONSUMED_DIR}"):
        with s.fs.open(path, "rb") as fh:
            out += pq.read_table(fh).to_pylist()
    return out


def test_max_staleness_0_holds_across_proxy_restarts(tmp_path):
    from trajstore.proxy.app import create_app
    from trajstore.proxy.config import ProxyConfig

    store = str(tmp_path / "store")
    trainer = SimulatedTrainer(store)
    trainer.publish()  # v0: what the upstream serves first
    stop = threading.Event()
    played: list[str] = []
    refused = [0]

    with ServerThread(fake_app(reply="ok")) as upstream:
        cfg = ProxyConfig(upstream=upstream.url, store=store, tokenizer=TOKENIZER, follow_run=RUN, poll_s=0.05,
                          max_staleness=0, batch_size=B, hold_timeout_s=0.5)
        proxy = ServerThread(create_app(cfg)).__enter__()
        port = proxy.port
        base = f"http://127.0.0.1:{port}"

        def agent(i: int) -> None:
            n = 0
            with httpx.Client(timeout=120) as c:
                while not stop.is_set():
                    n += 1
                    key = f"{RUN}-a{i}-e{n}"
                    msgs = [{"role": "user", "content": f"agent {i} episode {n}"}]
                    try:
                        for _ in range(2):
                            r = c.post(f"{base}/s/{key}/v1/chat/completions", json={"model": "fake", "messages": msgs})
                            if r.status_code == 503:  # held past --hold-timeout: refused, never dropped
                                refused[0] += 1
                                raise ConnectionError("refused")
                            r.raise_for_status()
                            msgs += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                                     {"role": "user", "content": "again"}]
                        r = c.post(f"{base}/s/{key}/finish", json={"reward": 1.0})
                        r.raise_for_status()
                        played.append(key)
                    except (httpx.HTTPError, ConnectionError):  # the proxy is restarting, or refused
                        time.sleep(0.05)

        agents = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(3)]
        for t in agents:
            t.start()
        restarts = 0
        try:
            for step in range(STEPS):
                consumed_so_far = B * step
                # the gate fills: B finished trajectories wait for the trainer, nothing more runs
                _wait(lambda done=consumed_so_far: len(_counted_ids(store)) - done >= B, f"batch {step}")
                if step in (1, 2):
                    for _ in range(2):  # restart while the trainer is paused and agents keep trying
                        proxy.__exit__()
                        proxy = ServerThread(create_app(cfg), port=port).__enter__()
                        restarts += 1
                        # the restarted gate holds and refuses the agents (a wrong one would admit
                        # them): 4 refusals, more than the 3 agents' calls that the old proxy may
                        # have refused while it stopped
                        before = refused[0]
                        _wait(lambda n=before: refused[0] >= n + 4, "the restarted proxy to refuse held calls")
                # exactly one batch ahead: the restarted proxies admitted nothing beyond the bound
                assert len(_counted_ids(store)) - consumed_so_far == B
                trainer.step(step)
        finally:
            stop.set()
            for t in agents:
                t.join(timeout=120)
            proxy.__exit__()
        loads = httpx.get(f"{upstream.url}/_fake/loads").json()

    assert restarts == 4
    rows = _consumed(store)
    assert len(rows) == STEPS * B and len({r["trajectory_id"] for r in rows}) == STEPS * B
    # staleness = trainer version - policy version; with max_staleness 0 at most one version old
    assert max(r["staleness_max"] for r in rows) <= 1, sorted((r["step"], r["staleness_max"]) for r in rows)
    assert [r["trainer_version"] for r in sorted(rows, key=lambda r: r["step"])] == [s for s in range(STEPS)
                                                                                      for _ in range(B)]
    # the versions recorded are the ones the upstream was told to load (v0 first, then each step's)
    # (a restarted proxy has the upstream load the latest version again: it cannot know what it holds)
    assert [int(x["weight_version"]) for x in loads] == sorted(int(x["weight_version"]) for x in loads)
    assert {int(x["weight_version"]) for x in loads} == set(range(STEPS + 1))
    by_id = {r["trajectory_id"]: r for r in read_trajectories(store).to_pylist()}
    for r in rows:
        assert by_id[r["trajectory_id"]]["max_policy_version"] == r["max_policy_version"] <= r["trainer_version"]
    # nothing lost: every episode an agent saw finish is stored completed (the others were
    # aborted by a restart or refused by the gate while held, never marked complete)
    completed = {json.loads(r["metadata"])["session"] for r in by_id.values() if r["status"] == "completed"}
    assert set(played) <= completed
    assert refused[0] > 0  # agents kept knocking while the trainer was paused: the gate held them
