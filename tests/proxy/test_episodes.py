"""``POST /s/<session>/finish`` (trajstore/proxy/episodes.py) while a call of the episode is still
in flight: it waits at most ``--finish-wait`` seconds, and an episode it could not wait for is
not ``completed``; the call answered afterwards is stored as a continuation part and counted."""

from __future__ import annotations

import json
import logging
import threading
import time

import httpx

from trajstore.proxy.testing import render
from trajstore.reader import read_trajectories

from .conftest import wait_held

REPLY_IDS = [115, 111, 0]  # the fake's "ok" and its end-of-turn token


def _rows(store: str) -> list[dict]:
    return sorted(read_trajectories(store).to_pylist(), key=lambda r: r["trajectory_id"])


def _wait_for(pred, what: str, timeout: float = 120) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_finish_during_a_slow_call_is_aborted_and_the_late_call_is_stored(fake_upstream, start_proxy, tmp_path,
                                                                          caplog):
    # /finish during a call in flight for longer than its wait returned `completed` without that
    # call; the call was then answered 200 and its recording failed with "trajectory ... is
    # already finished" (a traceback, nothing in /proxy/stats). The upstream answers the slow
    # call only when the test releases it, after /finish has answered.
    store = str(tmp_path / "store")
    px = start_proxy(fake_upstream.url, finish_wait_s=0.5)
    url = f"{px.url}/s/late/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    first = httpx.post(url, json={"model": "fake", "messages": msgs}).json()
    msgs += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
             {"role": "user", "content": "and?"}]
    answers: list[httpx.Response] = []
    slow = threading.Thread(target=lambda: answers.append(httpx.post(
        url, json={"model": "fake", "messages": msgs, "fake_hold": "slow"}, timeout=120)))
    slow.start()
    wait_held(fake_upstream.url, "slow", 1)  # the slow call is at the upstream
    done = httpx.post(f"{px.url}/s/late/finish", json={"status": "completed", "reward": 1.0}).json()
    assert done["status"] == "aborted" and done["calls_in_flight"] == 1 and len(done["trajectories"]) == 1, done
    assert httpx.get(f"{fake_upstream.url}/_fake/held").json() == {"slow": 1}  # waited --finish-wait, not for it
    httpx.post(f"{fake_upstream.url}/_fake/release", json={"name": "slow"}).raise_for_status()
    slow.join(120)
    assert answers[0].status_code == 200  # the client got its answer ...
    _wait_for(lambda: httpx.get(f"{px.url}/proxy/stats").json()["late_calls"] >= 1, "the late call counted")
    _wait_for(lambda: len(_rows(store)) >= 2, "the late call stored")
    a, b = _rows(store)
    ma, mb = json.loads(a["metadata"]), json.loads(b["metadata"])
    assert a["trajectory_id"] == done["trajectories"][0] and a["status"] == "aborted" and a["reward"] == 1.0
    assert ma["end_reason"] == "finish while 1 call(s) in flight" and ma["requested_status"] == "completed"
    assert ma["calls_in_flight"] == 1
    assert (ma["episode"]["id"], ma["episode"]["part"], ma["episode"]["change"]) == (mb["episode"]["id"], 1, None)
    assert (mb["episode"]["part"], mb["episode"]["parts"], mb["episode"]["change"]) == (2, 2, "after-finish")
    assert b["status"] == "aborted" and b["trajectory_id"] != a["trajectory_id"] and b["reward"] == 1.0
    assert b["tokens"] == render(msgs) + REPLY_IDS  # the earlier context is the late part's prompt
    # the late part continues the part /finish wrote
    assert (b["parent_trajectory_id"], b["fork_point"], b["link_kind"]) == (a["trajectory_id"], a["num_tokens"],
                                                                           "continuation")
    assert [s["kind"] for s in b["spans"]] == ["prompt", "action"]
    assert not [r for r in caplog.records if r.exc_info]  # no traceback
    late = [r.getMessage() for r in caplog.records if "after /finish" in r.getMessage()]
    assert len(late) == 1, late


def test_finish_waits_for_a_call_that_ends_within_the_wait(fake_upstream, start_proxy, tmp_path, caplog):
    # the ordinary case keeps working: the call answered within --finish-wait is in the episode.
    # The upstream answers only once /finish is waiting for the call (the proxy's debug line).
    caplog.set_level(logging.DEBUG, logger="trajstore.proxy")
    px = start_proxy(fake_upstream.url, finish_wait_s=600)
    url = f"{px.url}/s/ok/v1/chat/completions"
    slow = threading.Thread(target=lambda: httpx.post(url, json={
        "model": "fake", "messages": [{"role": "user", "content": "x"}], "fake_hold": "ok"}))
    slow.start()
    wait_held(fake_upstream.url, "ok", 1)
    out: dict = {}
    finishing = threading.Thread(target=lambda: out.update(done=httpx.post(
        f"{px.url}/s/ok/finish", json={"status": "completed"}).json()))
    finishing.start()
    _wait_for(lambda: any("/finish waits up to 600 s" in r.getMessage() for r in caplog.records), "/finish to wait")
    httpx.post(f"{fake_upstream.url}/_fake/release", json={"name": "ok"}).raise_for_status()
    slow.join(120)
    finishing.join(120)
    done = out["done"]
    assert done["status"] == "completed" and done["calls_in_flight"] == 0 and len(done["policy_versions"]) == 1
    (row,) = _rows(str(tmp_path / "store"))
    assert row["status"] == "completed" and "episode" not in json.loads(row["metadata"])
