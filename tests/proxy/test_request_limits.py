"""The proxy's own routes refuse hostile requests with a 4xx before anything is recorded (the
HTTP layer's rules, tests/http, checked here through the proxy): a 100k-deep JSON body and a lone
UTF-16 surrogate are a 400 (they were a 500), too many headers a 431."""

from __future__ import annotations

import httpx


def test_hostile_bodies_and_headers_are_refused_by_the_proxy(fake_upstream, start_proxy):
    px = start_proxy(fake_upstream.url)
    url = f"{px.url}/s/hostile/v1/chat/completions"
    head = b'{"model": "fake", "messages": [{"role": "user", "content": '
    bodies = {"nested deeper": head + b"[" * 100_000 + b"]" * 100_000 + b"}]}",
              "surrogate": head + b'"\\ud800"}]}'}
    for why, raw in bodies.items():
        r = httpx.post(url, content=raw, headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code == 400 and why in r.text, (why, r.status_code, r.text[:200])
        r = httpx.post(f"{px.url}/s/hostile/finish", content=raw.replace(head, b'{"metadata": {"x": ')[:-3] + b"}}",
                       headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code == 400 and why in r.text, (why, "finish", r.status_code, r.text[:200])
    many = {f"x-h{i}": "v" for i in range(200)}
    r = httpx.post(url, json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]}, headers=many,
                   timeout=60)
    assert r.status_code == 431, r.text
    assert httpx.get(f"{px.url}/proxy/stats").json()["calls_recorded"] == 0
