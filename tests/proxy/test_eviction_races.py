"""Idle eviction meeting the session's other events mid-write (trajstore/proxy/state.py): a call
or a ``/finish`` that lands while the evicted episode is being written. Each race is met by
holding that write (``Recorder.hold_write``) until the other event happened, never by timing."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Sequence

import httpx

from trajstore.errors import TrajstoreError
from trajstore.models import Trajectory
from trajstore.proxy import episodes
from trajstore.reader import read_trajectories

DEADLINE_S = 60.0
"""Safety net of every wait below (each waits for an event, not for a time)."""


class WriteHold:
    """Holds the proxy's store write of session `session`'s trajectories until :meth:`release`."""

    def __init__(self, px, session: str):
        self.state = px.server.config.app.state.proxy
        self.session = session
        self.holding = threading.Event()
        self._release = threading.Event()
        self.state.recorder.hold_write = self

    async def __call__(self, trajs: Sequence[Trajectory]) -> None:
        if any(t.metadata.get("session") == self.session for t in trajs):
            self.holding.set()
            await asyncio.to_thread(self._release.wait, DEADLINE_S)

    def wait_holding(self) -> None:
        assert self.holding.wait(DEADLINE_S), f"the write of session {self.session} never started"

    def release(self) -> None:
        self.state.recorder.hold_write = None
        self._release.set()


class SessionHold:
    """Holds one of the proxy's session hooks (``ProxyState.hold_evict``, ``hold_finish``) for
    session `session` until :meth:`release`; counts the holds entered and left."""

    def __init__(self, session: str):
        self.session = session
        self.holding = threading.Event()
        self._release = threading.Event()
        self.entered = self.left = 0

    async def __call__(self, s) -> None:
        if s.key == self.session:
            self.entered += 1
            self.holding.set()
            await asyncio.to_thread(self._release.wait, DEADLINE_S)
            self.left += 1  # the caller goes on in this same step of the event loop, with no await

    def wait_holding(self) -> None:
        assert self.holding.wait(DEADLINE_S), f"nothing held session {self.session}"

    def release(self) -> None:
        self._release.set()


def _rows(store: str) -> list[dict]:
    if not os.path.isdir(os.path.join(store, "trajectories")):
        return []
    return sorted(read_trajectories(store).to_pylist(), key=lambda r: r["trajectory_id"])


def _chat(url: str, session: str, msgs: list[dict], **extra) -> httpx.Response:
    r = httpx.post(f"{url}/s/{session}/v1/chat/completions", json={"model": "fake", "messages": msgs, **extra},
                   timeout=60)
    assert r.status_code == 200, r.text
    return r


def _timeout(px, seconds: float) -> None:
    px.server.config.app.state.proxy.cfg.session_timeout_s = seconds


def _wait(what: str, cond) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_call_during_the_eviction_write_continues_the_episode(fake_upstream, start_proxy, tmp_path):
    # The continuation was registered only once the evicted parts were durable: a call in that
    # window (the group commit's, the flush) opened a new episode, unlinked, with no header
    store = str(tmp_path / "store")
    px = start_proxy(fake_upstream.url, session_timeout_s=600.0)
    msgs = [{"role": "user", "content": "hi"}]
    _chat(px.url, "race", msgs)
    hold = WriteHold(px, "race")
    _timeout(px, 0.0)
    hold.wait_holding()  # the eviction is writing the episode
    _timeout(px, 600.0)
    msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "tool output"}]
    r = _chat(px.url, "race", msgs)
    assert r.headers.get("x-trajstore-evicted") == "1"
    hold.release()
    done = httpx.post(f"{px.url}/s/race/finish", json={"reward": 1.0}, timeout=60).json()
    a, b = _rows(store)
    assert done["evicted_parts"] == [a["trajectory_id"]] and done["trajectories"] == [b["trajectory_id"]]
    assert (b["parent_trajectory_id"], b["link_kind"], b["fork_point"]) == (a["trajectory_id"], "continuation",
                                                                           a["num_tokens"])
    assert a["episode_id"] == b["episode_id"] and a["status"] == "aborted" and b["status"] == "completed"


def test_a_finish_during_an_eviction_write_does_not_stop_eviction(fake_upstream, start_proxy, tmp_path):
    # The eviction task listed the idle sessions, awaited the first one's write and then looked
    # the next one up: ended meanwhile by its /finish, a KeyError ended the task for good, silently.
    # Here b's /finish ends it while the pass that evicts a awaits a's write.
    store = str(tmp_path / "store")
    px = start_proxy(fake_upstream.url, session_timeout_s=600.0)
    msgs = [{"role": "user", "content": "hi"}]
    _chat(px.url, "a", msgs)
    _chat(px.url, "b", msgs)
    b_call = threading.Thread(target=_chat, args=(px.url, "b", [*msgs, {"role": "assistant", "content": "ok"},
                                                                {"role": "user", "content": "go"}]),
                              kwargs={"fake_hold": "b"})
    b_call.start()  # b is busy during the eviction pass, so only a is evicted
    _wait("b's call at the upstream", lambda: httpx.get(f"{fake_upstream.url}/_fake/held").json() == {"b": 1})
    hold = WriteHold(px, "a")
    _timeout(px, 0.0)
    hold.wait_holding()  # session a being evicted: its write is held
    _timeout(px, 600.0)
    httpx.post(f"{fake_upstream.url}/_fake/release", json={"name": "b"})
    b_call.join(DEADLINE_S)
    done = httpx.post(f"{px.url}/s/b/finish", json={"reward": 0.5}, timeout=60).json()
    assert done["status"] == "completed" and done["trajectories"] and "updated" not in done
    hold.release()
    _wait("a's eviction written", lambda: len(_rows(store)) == 2)
    _chat(px.url, "c", msgs)  # a later idle session is still evicted
    _timeout(px, 0.0)
    _wait("c evicted", lambda: len(_rows(store)) == 3)
    stats = httpx.get(f"{px.url}/proxy/stats").json()
    assert stats["sessions_evicted"] == 2 and stats["eviction"]["errors"] == 0
    assert stats["eviction"]["last_run_s_ago"] is not None
    by_session = {json.loads(r["metadata"])["session"]: r["status"] for r in _rows(store)}
    assert by_session == {"a": "aborted", "b": "completed", "c": "aborted"}


def test_a_finish_after_an_eviction_sets_the_outcome_on_the_stored_parts(fake_upstream, start_proxy, tmp_path):
    # An evaluation slower than --session-timeout: its /finish answered 404 and the episode
    # stayed aborted without its reward. The /finish lands here while the eviction still writes.
    store = str(tmp_path / "store")
    px = start_proxy(fake_upstream.url, session_timeout_s=600.0)
    _chat(px.url, "slow-eval", [{"role": "user", "content": "hi"}])
    hold = WriteHold(px, "slow-eval")
    _timeout(px, 0.0)
    hold.wait_holding()
    _timeout(px, 600.0)
    done: dict = {}
    finishing = threading.Thread(target=lambda: done.update(httpx.post(
        f"{px.url}/s/slow-eval/finish", json={"reward": 0.75, "metadata": {"grader": "unit"}}, timeout=60).json()))
    finishing.start()
    hold.release()
    finishing.join(DEADLINE_S)
    (row,) = _rows(store)
    assert done["status"] == "completed" and done["evicted_parts"] == done["updated"] == [row["trajectory_id"]]
    meta = json.loads(row["metadata"])
    assert (row["status"], row["reward"]) == ("completed", 0.75)
    assert meta["finished_after_eviction"] is True and meta["grader"] == "unit" and meta["end_reason"].startswith("idle")
    # the episode is over: a second /finish finds nothing, a later call opens a new episode
    assert httpx.post(f"{px.url}/s/slow-eval/finish", json={}).status_code == 404
    assert "x-trajstore-evicted" not in _chat(px.url, "slow-eval", [{"role": "user", "content": "hi"}]).headers


def test_a_finish_after_an_eviction_whose_rewrite_failed_can_be_retried(fake_upstream, start_proxy, tmp_path,
                                                                         monkeypatch):
    # The evicted episode was forgotten before its parts were rewritten: when the rewrite failed
    # (500), the harness's retried /finish answered 404 and the outcome was lost for good.
    store = str(tmp_path / "store")
    px = start_proxy(fake_upstream.url, session_timeout_s=600.0)
    _chat(px.url, "retry", [{"role": "user", "content": "hi"}])
    state = px.server.config.app.state.proxy
    _timeout(px, 0.0)
    _wait("the episode evicted and written", lambda: len(_rows(store)) == 1 and "retry" in state.evicted
          and state.evicted["retry"].written.done())
    _timeout(px, 600.0)
    real = episodes.set_outcome
    failed: list[bool] = []

    def fail_once(*args, **kwargs):
        if not failed:
            failed.append(True)
            raise TrajstoreError("injected: the store refused the rewrite")
        return real(*args, **kwargs)

    monkeypatch.setattr(episodes, "set_outcome", fail_once)
    first = httpx.post(f"{px.url}/s/retry/finish", json={"reward": 0.25}, timeout=60)
    assert first.status_code == 500 and "injected" in first.text and failed
    (row,) = _rows(store)
    assert (row["status"], row["reward"]) == ("aborted", None)  # nothing half-done
    again = httpx.post(f"{px.url}/s/retry/finish", json={"reward": 0.25}, timeout=60)
    assert again.status_code == 200, again.text
    assert again.json()["updated"] == [row["trajectory_id"]]
    (row,) = _rows(store)
    assert (row["status"], row["reward"]) == ("completed", 0.25)
    assert httpx.post(f"{px.url}/s/retry/finish", json={}).status_code == 404  # now it is over


def test_a_finish_landing_while_an_eviction_chose_its_session_keeps_it(fake_upstream, start_proxy, tmp_path):
    # The eviction pass chose the idle session; before its task ended it, a /finish claimed the
    # session (its calls done, not yet ended). The eviction must leave it to the /finish (the
    # ``finishing`` flag): ending it would store the episode aborted and answer the /finish 409.
    store = str(tmp_path / "store")
    px = start_proxy(fake_upstream.url, session_timeout_s=600.0)
    state = px.server.config.app.state.proxy
    _chat(px.url, "claimed", [{"role": "user", "content": "hi"}])
    evict, finish = SessionHold("claimed"), SessionHold("claimed")
    state.hold_evict, state.hold_finish = evict, finish
    _timeout(px, 0.0)
    evict.wait_holding()  # a pass chose the session; its task waits before it looks again
    _timeout(px, 600.0)
    done: dict = {}
    finishing = threading.Thread(target=lambda: done.update(httpx.post(
        f"{px.url}/s/claimed/finish", json={"reward": 1.0}, timeout=60).json()))
    finishing.start()
    finish.wait_holding()  # the /finish claimed it and has not ended it yet
    evict.release()
    _wait("the eviction tasks looked again", lambda: evict.left == evict.entered)
    finish.release()
    finishing.join(DEADLINE_S)
    assert done.get("status") == "completed", done
    (row,) = _rows(store)
    assert done["trajectories"] == [row["trajectory_id"]]
    assert (row["status"], row["reward"]) == ("completed", 1.0)
    assert httpx.get(f"{px.url}/proxy/stats").json()["sessions_evicted"] == 0
