"""The staleness gate (trajstore/proxy/staleness.py) counts episodes, not trajectories: an episode
whose prompts stop extending is stored as several trajectories (parts), and still holds one slot
while it runs and counts as one unconsumed episode once written."""

from __future__ import annotations

import json

import httpx

from trajstore.reader import read_trajectories

RUN = "r"


def _call(url: str, session: str, text: str) -> httpx.Response:
    return httpx.post(f"{url}/s/{session}/v1/chat/completions", timeout=30,
                      json={"model": "fake", "messages": [{"role": "user", "content": text}]})


def _split_episode(url: str, session: str, parts: int) -> None:
    """`parts` calls whose prompts do not extend each other: one trajectory each."""
    for i in range(parts):
        r = _call(url, session, f"{session} fresh context {i}")
        assert r.status_code == 200, r.text


def _gate(url: str) -> dict:
    return httpx.get(f"{url}/proxy/stats").json()["staleness_gate"]


def test_an_episode_split_into_parts_releases_one_slot(fake_upstream, start_proxy):
    # end_session released one gate slot per stored trajectory; an episode
    # split into 3 parts freed 3 slots, so with capacity 2 three episodes ran at once
    px = start_proxy(fake_upstream.url, follow_run=RUN, max_staleness=0, batch_size=2, hold_timeout_s=0.5)
    _split_episode(px.url, "a", 3)
    _split_episode(px.url, "b", 1)
    assert _gate(px.url)["running"] == 2  # capacity (0 + 1) x 2 is full
    done = httpx.post(f"{px.url}/s/a/finish", json={"status": "aborted"}).json()
    assert len(done["trajectories"]) == 3  # split: the case under test
    assert _gate(px.url)["running"] == 1  # a ended: one slot back, b still runs
    assert _call(px.url, "c", "c").status_code == 200  # takes a's slot
    held = _call(px.url, "d", "d")  # b and c run: d waits, then is refused
    assert held.status_code == 503, held.text
    assert _gate(px.url)["running"] == 2


def test_a_split_episode_is_one_unconsumed_episode_also_after_a_restart(fake_upstream, start_proxy, tmp_path):
    # The unconsumed count is per episode: a completed episode of 3 parts
    # filled the bound of 2 on its own (and did again when the proxy reloaded the store)
    store = str(tmp_path / "store")
    cfg = dict(follow_run=RUN, max_staleness=0, batch_size=2, hold_timeout_s=0.5, store=store)
    px = start_proxy(fake_upstream.url, **cfg)
    _split_episode(px.url, "a", 3)
    httpx.post(f"{px.url}/s/a/finish", json={"status": "completed"}).raise_for_status()
    parts = read_trajectories(store).to_pylist()
    assert len(parts) == 3 and {json.loads(r["metadata"])["episode"]["id"] for r in parts} == {
        json.loads(parts[0]["metadata"])["episode"]["id"]}
    assert _gate(px.url)["unconsumed"] == 1
    assert _call(px.url, "b", "b").status_code == 200  # 1 unconsumed + 1 running = 2: room for b
    assert _gate(px.url)["running"] == 1
    px.__exit__()  # b is written as aborted at shutdown (not counted)
    again = start_proxy(fake_upstream.url, **cfg)  # load_written groups the parts by episode id
    assert _gate(again.url)["unconsumed"] == 1
    assert _call(again.url, "c", "c").status_code == 200
    assert _call(again.url, "d", "d").status_code == 503  # now the bound is full: 1 + 1 running


def test_the_first_call_of_a_new_episode_says_how_long_the_gate_held_it(fake_upstream, start_proxy):
    # X-Trajstore-Held: a client tells waiting for the trainer from the model's own latency
    import threading
    import time

    from trajstore.proxy.calls import HELD_HEADER

    px = start_proxy(fake_upstream.url, follow_run=RUN, max_staleness=0, batch_size=1, hold_timeout_s=30,
                     poll_s=0.05)
    first = _call(px.url, "a", "a")
    assert first.headers[HELD_HEADER] == "0.000"  # room at once
    assert HELD_HEADER not in _call(px.url, "a", "a more").headers  # only a new episode's first call
    out: dict[str, httpx.Response] = {}
    th = threading.Thread(target=lambda: out.update(b=_call(px.url, "b", "b")))
    th.start()
    deadline = time.monotonic() + 120  # b waits: a fills the bound of (0 + 1) x 1 (its call reaches the gate
    while _gate(px.url)["held"] < 1 and time.monotonic() < deadline:  # late on a loaded machine)
        time.sleep(0.02)
    assert _gate(px.url)["held"] == 1
    time.sleep(0.6)  # b is held at least this long: the header's lower bound below (no synchronisation)
    httpx.post(f"{px.url}/s/a/finish", json={"status": "aborted"}).raise_for_status()  # frees the slot
    th.join(timeout=120)
    assert out["b"].status_code == 200
    assert 0.5 <= float(out["b"].headers[HELD_HEADER]) < 30  # < --hold-timeout: it was admitted, not refused
