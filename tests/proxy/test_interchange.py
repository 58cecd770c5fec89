"""A store the proxy recorded, through every format trajstore both writes and reads (ATIF, the
Hugging Face folder's Parquet) and back: identical rows except what the format cannot carry
(tests/helpers/interchange.py; the SDK store and the fixtures: tests/export/test_interchange.py)."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.interchange import NOT_CARRIED, ROUND_TRIP_FORMATS, differences, round_trip


def _call(url: str, msgs: list[dict], **sampling) -> None:
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": "fake", "messages": msgs, **sampling}, timeout=60)
    r.raise_for_status()


@pytest.mark.parametrize("fmt", ROUND_TRIP_FORMATS)
def test_a_proxy_store_comes_back_identical(fmt, fake_upstream, start_proxy, tmp_path):
    px = start_proxy(fake_upstream.url, store=str(tmp_path / "store"))
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    for session, temperature in (("a", 0.7), ("b", 1.0)):
        url = f"{px.url}/s/{session}"
        _call(url, msgs, temperature=temperature, top_p=0.95)
        _call(url, [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}],
              temperature=temperature, max_tokens=16)
        httpx.post(f"{url}/finish", json={"status": "completed", "reward": 1.0}, timeout=60).raise_for_status()
    before, after = round_trip(str(tmp_path / "store"), fmt, tmp_path)
    assert len(before) == 2
    assert set(differences(before, after)) <= NOT_CARRIED[fmt]
    temps = sorted(s["temperature"] for r in after.values() for s in r["spans"] if s["kind"] == "action")
    assert temps == [0.7, 0.7, 1.0, 1.0]
    assert all(r["source"] == before[t]["source"] for t, r in after.items())
