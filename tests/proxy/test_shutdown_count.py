"""The shutdown's last log line counts every call stored after its flush: a call answered while
the flush was being written (its group-commit window, its fsync) goes into a later part, and was
left out of the count (3 said, 12 stored). The flush's write is held until that call is recorded."""

from __future__ import annotations

import logging
import threading
import time

import httpx

from trajstore.proxy.shutdown import begin_shutdown

from .test_eviction_races import DEADLINE_S, WriteHold, _chat, _rows, _wait


def test_a_call_answered_during_the_flush_write_is_counted_as_after_it(fake_upstream, start_proxy, tmp_path,
                                                                        caplog):
    caplog.set_level(logging.INFO, logger="trajstore.proxy")
    store = str(tmp_path / "store")
    px = start_proxy(fake_upstream.url, shutdown_grace_s=600.0)
    st = px.server.config.app.state.proxy
    msgs = [{"role": "user", "content": "hi"}]
    _chat(px.url, "s", msgs)
    held: dict = {}
    call = threading.Thread(target=lambda: held.update(r=httpx.post(
        f"{px.url}/s/s/v1/chat/completions", timeout=60,
        json={"model": "fake", "fake_hold": "late", "messages": [*msgs, {"role": "assistant", "content": "ok"},
                                                                 {"role": "user", "content": "go"}]})))
    call.start()
    _wait("the call held at the upstream", lambda: httpx.get(f"{fake_upstream.url}/_fake/held").json() == {"late": 1})
    hold = WriteHold(px, "s")
    st.tasks[0].get_loop().call_soon_threadsafe(begin_shutdown, st)
    hold.wait_holding()  # the flush took the episode's first call and is writing it
    httpx.post(f"{fake_upstream.url}/_fake/release", json={"name": "late"})
    call.join(DEADLINE_S)
    assert held["r"].status_code == 200
    _wait("the late call recorded", lambda: st.recorder.stats["calls_recorded"] == 2)
    hold.release()
    deadline = time.monotonic() + DEADLINE_S
    while not (done := [r.getMessage() for r in caplog.records if r.getMessage().startswith("shutdown complete")]):
        assert time.monotonic() < deadline, "no shutdown complete line"
        time.sleep(0.02)
    assert "1 call(s) answered after the flush were stored" in done[0], done
    assert len(_rows(store)) == 2  # the flush's part, and the later one holding that call
