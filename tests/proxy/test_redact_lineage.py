"""``traj proxy --redact`` with a secret in the context a child shares with its parent: the marker
has another length than the secret, so the child's ``fork_point`` is recomputed from the redacted
tokens (tokens[:fork_point] equal the parent's; ``traj validate`` checks it), for a parent in the
same write and for one written earlier (an idle eviction's part)."""

from __future__ import annotations

import os
import time

import httpx
import numpy as np

from tests.helpers.secrets import SECRETS, byte_tokenizer_dir
from trajstore.reader import read_trajectories
from trajstore.redact.lineage import common_prefix
from trajstore.validation import validate_files

SECRET_MSG = {"role": "user", "content": f"deploy with {SECRETS['aws_access_key']} now"}


def _chat(url: str, session: str, msgs: list[dict]) -> None:
    httpx.post(f"{url}/s/{session}/v1/chat/completions", json={"model": "fake", "messages": msgs},
               timeout=60).raise_for_status()


def _linked(store: str) -> list[tuple[dict, dict]]:
    rows = {r["trajectory_id"]: r for r in read_trajectories(store).to_pylist()}
    return [(r, rows[r["parent_trajectory_id"]]) for r in rows.values() if r["parent_trajectory_id"]]


def _assert_forks_shared(store: str) -> None:
    pairs = _linked(store)
    assert pairs
    for child, parent in pairs:
        raw = bytes(t - 4 for t in child["tokens"] if t >= 4)
        assert SECRETS["aws_access_key"].encode() not in raw
        shared = common_prefix(np.asarray(child["tokens"]), np.asarray(parent["tokens"]))
        assert child["fork_point"] == shared, (child["trajectory_id"], child["fork_point"], shared)
    assert validate_files([store]).ok


def test_a_fork_within_one_write_gets_its_redacted_shared_prefix(fake_upstream, start_proxy, tmp_path):
    store = str(tmp_path / "store")
    px = start_proxy(fake_upstream.url, tokenizer=byte_tokenizer_dir(tmp_path / "tok"), redact=True)
    turn = [SECRET_MSG, {"role": "assistant", "content": "ok"}]
    _chat(px.url, "tree", [SECRET_MSG])
    _chat(px.url, "tree", [*turn, {"role": "user", "content": "first try"}])
    _chat(px.url, "tree", [*turn, {"role": "user", "content": "second try"}])  # a retry: a new lineage
    httpx.post(f"{px.url}/s/tree/finish", json={}, timeout=60).raise_for_status()
    _assert_forks_shared(store)


def test_a_continuation_of_a_part_written_earlier_gets_its_redacted_shared_prefix(fake_upstream, start_proxy,
                                                                                  tmp_path):
    store = str(tmp_path / "store")
    px = start_proxy(fake_upstream.url, tokenizer=byte_tokenizer_dir(tmp_path / "tok"), redact=True,
                     session_timeout_s=600.0)
    _chat(px.url, "cont", [SECRET_MSG])
    px.server.config.app.state.proxy.cfg.session_timeout_s = 0.0
    deadline = time.monotonic() + 60
    while not os.path.isdir(os.path.join(store, "trajectories")) or not read_trajectories(store).num_rows:
        assert time.monotonic() < deadline, "never evicted"
        time.sleep(0.02)
    px.server.config.app.state.proxy.cfg.session_timeout_s = 600.0
    _chat(px.url, "cont", [SECRET_MSG, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}])
    httpx.post(f"{px.url}/s/cont/finish", json={}, timeout=60).raise_for_status()
    _assert_forks_shared(store)
