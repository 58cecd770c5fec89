"""traj proxy against the fast fake upstream (trajstore.proxy.testing): what is recorded, what
the client sees, concurrency, and every failure path (upstream errors and timeouts, client
disconnects, SIGKILL, SIGTERM, auth, size limits)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import numpy as np
import pytest

openai = pytest.importorskip("openai")

from trajstore.proxy.testing import EOS, render  # noqa: E402
from trajstore.reader import read_trajectories  # noqa: E402
from trajstore.store import open_store  # noqa: E402

from .conftest import proxy_process, wait_held  # noqa: E402

REPLY = "ok"
# The fake upstream's reply "ok": token id = byte + 4, then EOS (0):
# "o" = 111 -> 115, "k" = 107 -> 111, EOS = 0.
REPLY_IDS = [115, 111, 0]
# its log-probs are -0.5 - 0.001 * position: -0.5, -0.501, -0.502
REPLY_LPS = np.array([-0.5, -0.501, -0.502], dtype=np.float32)


def client(base: str, session: str | None = None, **kw) -> openai.OpenAI:
    url = f"{base}/s/{session}/v1" if session else f"{base}/v1"
    return openai.OpenAI(base_url=url, api_key=kw.pop("api_key", "sk-client"), max_retries=0, **kw)


def rows(store: str) -> list[dict]:
    return sorted(read_trajectories(store).to_pylist(), key=lambda r: r["trajectory_id"])


def action_ids(row: dict) -> list[list[int]]:
    return [row["tokens"][s["start"]:s["end"]] for s in row["spans"] if s["kind"] == "action"]


def play(c: openai.OpenAI, turns: int, *, stream: bool = False) -> list[dict]:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    for t in range(turns):
        r = c.chat.completions.create(model="fake", messages=msgs, stream=stream)
        text = "".join(ch.choices[0].delta.content or "" for ch in r if ch.choices) if stream else \
            r.choices[0].message.content
        assert text == REPLY
        msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": f"turn {t}"}]
    return msgs


@pytest.mark.parametrize("stream", [False, True])
def test_multi_turn_session_is_one_trajectory_with_the_engines_ids(fake_upstream, start_proxy, tmp_path, stream):
    px = start_proxy(fake_upstream.url)
    msgs = play(client(px.url, "ep-1"), 3, stream=stream)
    r = httpx.post(f"{px.url}/s/ep-1/finish", json={"status": "completed", "reward": 0.75,
                                                    "metadata": {"task": "t1"}})
    assert r.status_code == 200 and r.json()["status"] == "completed"
    (row,) = rows(str(tmp_path / "store"))
    assert row["status"] == "completed" and row["reward"] == 0.75 and row["source"] == "trajstore/proxy"
    # the whole trajectory is the last prompt the upstream saw (the conversation without the last
    # reply and the unanswered user message after it) plus that reply's ids
    final_prompt = render(msgs[:-2])
    assert row["tokens"] == final_prompt + REPLY_IDS
    kinds = [s["kind"] for s in row["spans"]]
    assert kinds == ["prompt", "action", "observation", "action", "observation", "action"]
    assert action_ids(row) == [REPLY_IDS] * 3
    lp = np.array(row["action_logprobs"], dtype=np.float32)
    for s in row["spans"]:
        if s["kind"] == "action":
            assert s["policy_version"] == 0 and s["finish_reason"] == "stop"
            np.testing.assert_array_equal(lp[s["logprob_start"]:s["logprob_start"] + s["end"] - s["start"]],
                                          REPLY_LPS)  # bit for bit; schema v2: action tokens only
        if s["kind"] == "observation":
            assert s["role"] == "user"
    assert json.loads(row["metadata"])["task"] == "t1"
    # each call timed by the proxy (request in, first token of a stream, answer complete), in call order,
    # and the engine's usage counts (a stream carries them only when the client asks for include_usage)
    acts = [s for s in row["spans"] if s["kind"] == "action"]
    for a, b in zip(acts, acts[1:]):
        assert a["ended_at"] <= b["started_at"]
    for a in acts:
        assert a["started_at"] <= (a["first_token_at"] or a["ended_at"]) <= a["ended_at"]
        assert (a["first_token_at"] is not None) == stream
        usage = (a["usage_prompt_tokens"], a["usage_completion_tokens"], a["usage_cached_tokens"])
        assert usage == ((None, None, None) if stream else (a["start"], 3, None))


def test_the_client_sees_what_it_would_have_seen_without_the_proxy(fake_upstream, start_proxy):
    px = start_proxy(fake_upstream.url)
    msgs = [{"role": "user", "content": "hi"}]
    via = httpx.post(f"{px.url}/v1/chat/completions", json={"model": "fake", "messages": msgs}).json()
    direct = httpx.post(f"{fake_upstream.url}/v1/chat/completions", json={"model": "fake", "messages": msgs}).json()
    for d in (via, direct):
        d.pop("id"), d.pop("created")
    assert via == direct and "prompt_token_ids" not in via and via["choices"][0]["logprobs"] is None
    # what the client asks for itself stays
    asked = {"model": "fake", "messages": msgs, "logprobs": True, "return_token_ids": True}
    via = httpx.post(f"{px.url}/v1/chat/completions", json=asked).json()
    assert via["choices"][0]["token_ids"] == REPLY_IDS and via["prompt_token_ids"] == render(msgs)
    assert [e["logprob"] for e in via["choices"][0]["logprobs"]["content"]] == pytest.approx(REPLY_LPS.tolist())
    # streams too: no chunk carries the ids the proxy asked for
    with httpx.stream("POST", f"{px.url}/v1/chat/completions",
                      json={"model": "fake", "messages": msgs, "stream": True}) as r:
        chunks = [json.loads(ln[5:]) for ln in r.iter_lines() if ln.startswith("data:") and "[DONE]" not in ln]
    assert chunks and all("prompt_token_ids" not in c for c in chunks)
    assert all("token_ids" not in ch and ch.get("logprobs") is None for c in chunks for ch in c["choices"])


def test_a_prompt_that_does_not_extend_starts_a_new_trajectory_of_the_same_episode(fake_upstream, start_proxy,
                                                                                    tmp_path):
    px = start_proxy(fake_upstream.url)
    c = client(px.url, "ep-2")
    msgs = play(c, 2)
    condensed = [{"role": "user", "content": "summary of the above"}]  # context condensed
    c.chat.completions.create(model="fake", messages=condensed)
    httpx.post(f"{px.url}/s/ep-2/finish", json={"reward": 1.0}).raise_for_status()
    a, b = rows(str(tmp_path / "store"))
    assert a["trajectory_id"] != b["trajectory_id"]
    assert len(action_ids(a)) == 2 and b["tokens"] == render(condensed) + REPLY_IDS
    assert a["reward"] == b["reward"] == 1.0
    # linked as ingest links the parts of a split episode (trajstore/ingest/builders/render.py); group_id
    # is a GRPO group, which the client did not name: parts of one episode are not a group
    assert a["group_id"] is None and b["group_id"] is None
    meta = [json.loads(r["metadata"]) for r in (a, b)]
    (ep,) = {m["episode"]["id"] for m in meta}
    assert ep.startswith("ep-2.") and a["trajectory_id"].startswith(ep)
    assert [(m["episode"]["part"], m["episode"]["parts"], m["episode"]["change"]) for m in meta] == [
        (1, 2, None), (2, 2, "engine-prompt")]
    assert not any(k in m for m in meta for k in ("episode_id", "segment", "segments"))
    assert all(m["context_breaks"] == 1 for m in meta)
    assert httpx.get(f"{px.url}/proxy/stats").json()["context_breaks"] == 1
    del msgs


def test_group_id_is_only_the_grpo_group_the_client_names(fake_upstream, start_proxy, tmp_path):
    px = start_proxy(fake_upstream.url)
    play(client(px.url, "g-hdr", default_headers={"X-Group-Id": "prompt-7", "X-Prompt-Id": "p7"}), 1)
    play(client(px.url, "g-fin"), 1)
    play(client(px.url, "g-none"), 1)
    assert httpx.post(f"{px.url}/s/g-fin/finish", json={"group_id": 7}).status_code == 400
    for s, body in (("g-hdr", {}), ("g-fin", {"group_id": "prompt-7"}), ("g-none", {})):
        httpx.post(f"{px.url}/s/{s}/finish", json=body).raise_for_status()
    by = {json.loads(r["metadata"])["session"]: r for r in rows(str(tmp_path / "store"))}
    assert {s: (r["group_id"], r["prompt_id"]) for s, r in by.items()} == {
        "g-hdr": ("prompt-7", "p7"), "g-fin": ("prompt-7", None), "g-none": (None, None)}
    assert not any("episode" in json.loads(r["metadata"]) for r in by.values())  # one trajectory each


def test_16_concurrent_sessions_give_16_correct_trajectories(fake_upstream, start_proxy, tmp_path):
    px = start_proxy(fake_upstream.url)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            play(client(px.url, f"c{i}"), 3, stream=i % 2 == 1)
            httpx.post(f"{px.url}/s/c{i}/finish", json={"reward": i / 16}).raise_for_status()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[:3]
    got = rows(str(tmp_path / "store"))
    assert len(got) == 16 and len({r["trajectory_id"] for r in got}) == 16
    by_session = {json.loads(r["metadata"])["session"]: r for r in got}
    assert sorted(by_session) == sorted(f"c{i}" for i in range(16))
    for i in range(16):
        r = by_session[f"c{i}"]
        assert r["reward"] == i / 16 and r["status"] == "completed" and action_ids(r) == [REPLY_IDS] * 3


def test_sessions_by_header_and_calls_without_a_session(fake_upstream, start_proxy, tmp_path):
    px = start_proxy(fake_upstream.url)
    c = client(px.url, default_headers={"X-Trajectory-Id": "hdr-1"})
    c.chat.completions.create(model="fake", messages=[{"role": "user", "content": "a"}])
    httpx.post(f"{px.url}/s/hdr-1/finish", json={}).raise_for_status()
    client(px.url).chat.completions.create(model="fake", messages=[{"role": "user", "content": "b"}])
    got = rows(str(tmp_path / "store"))
    sessions = sorted(json.loads(r["metadata"])["session"] for r in got)
    assert len(got) == 2 and sessions[1] == "hdr-1" and sessions[0].startswith("call-")


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_500_reaches_the_client_and_the_episode_is_not_complete(fake_upstream, start_proxy, tmp_path,
                                                                         stream):
    px = start_proxy(fake_upstream.url)
    c = client(px.url, "e500")
    play(c, 1)
    httpx.post(f"{fake_upstream.url}/_fake/config", json={"status": 500})
    with pytest.raises(openai.InternalServerError):
        c.chat.completions.create(model="fake", messages=[{"role": "user", "content": "x"}], stream=stream)
    r = httpx.post(f"{px.url}/s/e500/finish", json={"status": "completed", "reward": 1.0}).json()
    assert r["status"] == "failed"
    (row,) = rows(str(tmp_path / "store"))
    meta = json.loads(row["metadata"])
    assert row["status"] == "failed" and meta["requested_status"] == "completed" and "HTTP 500" in meta["errors"][0]


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_timeout_is_a_504_and_fails_the_episode(fake_upstream, start_proxy, tmp_path, stream):
    px = start_proxy(fake_upstream.url, upstream_timeout_s=0.3)
    c = client(px.url, "slow")
    httpx.post(f"{fake_upstream.url}/_fake/config", json={"delay_s": 1.5})
    with pytest.raises(openai.APIStatusError) as e:
        c.chat.completions.create(model="fake", messages=[{"role": "user", "content": "x"}], stream=stream)
    assert e.value.status_code == 504
    r = httpx.post(f"{px.url}/s/slow/finish", json={}).json()
    assert r["status"] == "failed" and r["trajectories"] == []  # its only call failed: nothing to store
    assert not os.path.isdir(tmp_path / "store" / "trajectories") or not rows(str(tmp_path / "store"))


def test_an_upstream_that_stalls_mid_stream_is_an_error_event_and_fails_the_episode(fake_upstream, start_proxy,
                                                                                     tmp_path):
    """The answer started (200, first tokens relayed), then the upstream went silent for longer
    than --upstream-timeout: the client's stream ends in an error, the call is not recorded."""
    # the upstream sends one token, then nothing (held): the timeout ends the stream; 5 s, so that
    # it never fires for the answers before the stall, however slow a loaded machine is
    px = start_proxy(fake_upstream.url, upstream_timeout_s=5)
    c = client(px.url, "stall")
    play(c, 1)
    with pytest.raises(openai.APIError, match="upstream stream broke"):
        for _ in c.chat.completions.create(model="fake", messages=[{"role": "user", "content": "x"}], stream=True,
                                           extra_body={"fake_hold": "never", "fake_hold_after": 1}):
            pass
    r = httpx.post(f"{px.url}/s/stall/finish", json={"status": "completed"}).json()
    assert r["status"] == "failed" and len(r["policy_versions"]) == 1  # the stalled call is not recorded
    (row,) = rows(str(tmp_path / "store"))
    meta = json.loads(row["metadata"])
    assert row["status"] == "failed" and meta["requested_status"] == "completed"
    assert "upstream stream broke: ReadTimeout" in meta["errors"][0]


def test_client_disconnect_mid_stream_leaves_the_episode_aborted(fake_upstream, start_proxy, tmp_path):
    px = start_proxy(fake_upstream.url)
    play(client(px.url, "dc"), 1)
    # the upstream holds the answer after its first token until the client has gone: the stream
    # cannot end before the client leaves, however the two are scheduled
    body = {"model": "fake", "messages": [{"role": "user", "content": "x"}], "stream": True,
            "fake_hold": "dc", "fake_hold_after": 1}
    with httpx.stream("POST", f"{px.url}/s/dc/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                break  # the client goes away after the first event
    httpx.post(f"{fake_upstream.url}/_fake/release", json={"name": "dc"}).raise_for_status()
    deadline = time.monotonic() + 120
    while httpx.get(f"{px.url}/proxy/stats").json()["errors"].get("client_disconnect", 0) < 1:
        assert time.monotonic() < deadline, "the proxy never noticed the disconnect"
        time.sleep(0.1)
    assert httpx.post(f"{px.url}/s/dc/finish", json={"status": "completed"}).json()["status"] == "aborted"
    (row,) = rows(str(tmp_path / "store"))
    assert row["status"] == "aborted" and len(action_ids(row)) == 1  # the cut call is not recorded


def test_an_upstream_stream_that_stops_without_finishing_fails_the_episode(fake_upstream, start_proxy):
    px = start_proxy(fake_upstream.url)
    httpx.post(f"{fake_upstream.url}/_fake/config", json={"cut_stream_after": 1})
    body = {"model": "fake", "messages": [{"role": "user", "content": "x"}], "stream": True}
    with httpx.stream("POST", f"{px.url}/s/cut/v1/chat/completions", json=body) as r:
        list(r.iter_lines())
    assert httpx.post(f"{px.url}/s/cut/finish", json={}).json()["status"] == "failed"


def test_idle_sessions_end_aborted(fake_upstream, start_proxy, tmp_path):
    px = start_proxy(fake_upstream.url, session_timeout_s=0.5)
    play(client(px.url, "idle"), 1)
    deadline = time.monotonic() + 120
    while not os.path.isdir(tmp_path / "store" / "trajectories") or not rows(str(tmp_path / "store")):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    (row,) = rows(str(tmp_path / "store"))
    assert row["status"] == "aborted" and json.loads(row["metadata"])["end_reason"].startswith("idle")
    # its /finish still tells the outcome: set on the part stored (a second one finds nothing)
    assert httpx.post(f"{px.url}/s/idle/finish", json={}).json()["updated"] == [row["trajectory_id"]]
    assert httpx.post(f"{px.url}/s/idle/finish", json={}).status_code == 404


def test_reward_and_finish_refuse_bad_input(fake_upstream, start_proxy):
    px = start_proxy(fake_upstream.url)
    assert httpx.post(f"{px.url}/s/nobody/finish", json={}).status_code == 404
    play(client(px.url, "r1"), 1)
    assert httpx.post(f"{px.url}/s/r1/reward", json={"reward": "high"}).status_code == 400
    assert httpx.post(f"{px.url}/s/r1/finish", json={"status": "great"}).status_code == 400
    assert httpx.post(f"{px.url}/s/r1/reward", json={"reward": 0.5, "raw": {"ok": True}}).status_code == 200
    assert httpx.post(f"{px.url}/s/bad key!/v1/chat/completions", json={}).status_code in (400, 404)


def test_a_finish_the_store_would_refuse_keeps_the_session_open(fake_upstream, start_proxy, tmp_path):
    # A reward of 1e400 (inf), NaN or NaN in metadata ended the session, then failed at write
    # time: the recorded calls were lost (500, then 404 on a retry). Now each is a 400 and the
    # session stays open, so a corrected finish stores the episode with all its calls.
    px = start_proxy(fake_upstream.url)
    play(client(px.url, "nf"), 2)
    url = f"{px.url}/s/nf"
    for body in ('{"reward": 1e400}', '{"reward": NaN}', '{"metadata": {"a": NaN}}', '{"reward_raw": [Infinity]}',
                 '{"metadata": {"episode": "mine"}}'):
        r = httpx.post(f"{url}/finish", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400, (body, r.text)
    r = httpx.post(f"{url}/reward", content='{"reward": -Infinity}', headers={"content-type": "application/json"})
    assert r.status_code == 400
    ok = httpx.post(f"{url}/finish", json={"reward": 1.0})
    assert ok.status_code == 200, ok.text
    (row,) = rows(str(tmp_path / "store"))
    assert row["status"] == "completed" and row["reward"] == 1.0 and row["num_actions"] == 2


def test_nan_or_infinity_in_a_call_is_a_400_and_the_proxy_keeps_serving(fake_upstream, start_proxy):
    # "temperature": NaN was a plain-text 500 (the forwarder could not re-encode it as JSON).
    px = start_proxy(fake_upstream.url)
    for body in ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
                 '{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": Infinity}',
                 '{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 1e400}'):
        r = httpx.post(f"{px.url}/s/nan/v1/chat/completions", content=body,
                       headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not a JSON object" in r.json()["error"]["message"], r.text
    play(client(px.url, "after"), 1)  # still serving


def test_a_field_the_upstream_would_refuse_is_a_400_naming_it_and_never_forwarded(fake_upstream, start_proxy,
                                                                                   tmp_path):
    # A fractional max_tokens went upstream (vLLM answers 400) and the episode was stored as
    # failed. Now the proxy refuses it first, like vLLM's and OpenAI's own check, and the
    # session goes on: the next, valid call and the finish store a completed episode.
    px = start_proxy(fake_upstream.url)
    msgs = [{"role": "user", "content": "x"}]
    bad = [("max_tokens", 10.5), ("max_tokens", 0), ("seed", 1e300), ("seed", 2**63), ("tools", "nope"),
           ("tools", [1]), ("temperature", -1), ("top_p", 0), ("logprobs", "many"), ("stop", [1])]
    for name, value in bad:
        r = httpx.post(f"{px.url}/s/typo/v1/chat/completions", json={"model": "fake", "messages": msgs, name: value})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == name, r.text
        assert err["message"].split(":")[0].split("[")[0] == name, r.text  # "tools[0]: Input should be ..."
    for body in ({"model": "fake", "messages": "hi"}, {"model": "fake", "messages": ["hi"]}, {"model": "fake"}):
        r = httpx.post(f"{px.url}/s/typo/v1/chat/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("messages"), r.text
    r = httpx.post(f"{px.url}/s/typo/v1/completions", json={"model": "fake", "prompt": "x", "logprobs": 2.5})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs", r.text
    assert httpx.get(f"{fake_upstream.url}/_fake/seen").json() == []  # none of them was forwarded
    ok = httpx.post(f"{px.url}/s/typo/v1/chat/completions",
                    json={"model": "fake", "messages": msgs, "max_tokens": 10.0, "seed": 7})  # 10.0 is an integer
    assert ok.status_code == 200, ok.text
    assert httpx.post(f"{px.url}/s/typo/finish", json={}).json()["status"] == "completed"
    (row,) = rows(str(tmp_path / "store"))
    assert row["status"] == "completed" and row["num_actions"] == 1


def test_upstream_key_is_sent_but_never_stored_or_logged(fake_upstream, tmp_path):
    secret = "sk-upstream-" + "9f3c1d7e5a"
    store, log = str(tmp_path / "store"), str(tmp_path / "proxy.log")
    proc, url = proxy_process(fake_upstream.url, store, env={"TRAJ_UPSTREAM_API_KEY": secret}, log_path=log)
    try:
        play(client(url, "k1"), 2)
        httpx.post(f"{url}/s/k1/finish", json={}).raise_for_status()
        httpx.post(f"{fake_upstream.url}/_fake/config", json={"status": 500})
        with pytest.raises(openai.InternalServerError):
            client(url, "k2").chat.completions.create(model="fake", messages=[{"role": "user", "content": "x"}])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    seen = httpx.get(f"{fake_upstream.url}/_fake/seen").json()
    assert seen and all(h == f"Bearer {secret}" for h in seen)  # the client's own key never goes upstream
    for root, _, files in os.walk(tmp_path):
        for f in files:
            assert secret.encode() not in open(os.path.join(root, f), "rb").read(), f


def test_client_token_and_request_size_limit(fake_upstream, start_proxy, monkeypatch):
    monkeypatch.setenv("TRAJ_PROXY_TOKEN", "let-me-in")
    px = start_proxy(fake_upstream.url, max_request_mb=0.001)
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.AuthenticationError):
        client(px.url, "a1").chat.completions.create(model="fake", messages=msgs)
    ok = client(px.url, "a1", api_key="let-me-in")
    assert ok.chat.completions.create(model="fake", messages=msgs).choices[0].message.content == REPLY
    big = [{"role": "user", "content": "x" * 5000}]  # 5 kB > 0.001 MiB = 1048 bytes
    with pytest.raises(openai.APIStatusError) as e:
        ok.chat.completions.create(model="fake", messages=big)
    assert e.value.status_code == 413
    assert httpx.get(f"{px.url}/health").status_code == 200  # health needs no token


def test_the_client_token_is_taken_whatever_the_case_of_its_scheme(fake_upstream, start_proxy, monkeypatch):
    # "Authorization: bearer <token>" was a 401: the scheme is case-insensitive (RFC 9110 section 11.1)
    monkeypatch.setenv("TRAJ_PROXY_TOKEN", "let-me-in")
    px = start_proxy(fake_upstream.url)
    body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
    for scheme in ("bearer", "BEARER", "Bearer"):
        r = httpx.post(f"{px.url}/v1/chat/completions", json=body, headers={"Authorization": f"{scheme} let-me-in"},
                       timeout=60)
        assert r.status_code == 200, (scheme, r.text)
    r = httpx.post(f"{px.url}/v1/chat/completions", json=body, headers={"Authorization": "bearer Let-Me-In"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"  # the token itself is exact
    assert httpx.get(f"{fake_upstream.url}/_fake/seen").json() == ["", "", ""]  # the proxy's token never goes upstream


def test_a_body_python_cannot_carry_is_a_400_and_the_session_goes_on(fake_upstream, start_proxy, tmp_path):
    # A lone surrogate ("\ud800") parsed, then could not be encoded for the upstream (a 500, the
    # episode failed) or stored at /finish; 100,000 nested arrays were a RecursionError (a 500).
    # Each is a 400 naming why, before anything reaches the upstream or the session.
    px = start_proxy(fake_upstream.url)
    msgs = play(client(px.url, "odd"), 1)
    head = '{"model": "fake", "messages": [{"role": "user", "content": "x"}], '
    for body, why in ((head + '"user": "\\ud800"}', "lone UTF-16 surrogate"),
                      ('{"model": "fake", "messages": [{"role": "user", "content": "\\udc00 x"}]}', "lone UTF-16"),
                      (head + '"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 128")):
        r = httpx.post(f"{px.url}/s/odd/v1/chat/completions", content=body,
                       headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code == 400 and why in r.json()["error"]["message"], r.text[:300]
    r = httpx.post(f"{px.url}/s/odd/finish", content='{"metadata": {"note": "\\ud800"}}',
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and "lone UTF-16 surrogate" in r.json()["error"]["message"], r.text
    r = httpx.post(f"{px.url}/s/odd/v1/chat/completions", json={"model": "fake", "messages": msgs},
                   headers=[(f"x-h{i}", "v") for i in range(101)])
    assert r.status_code == 431 and r.json()["error"]["code"] == 431  # too many headers: never forwarded
    assert len(httpx.get(f"{fake_upstream.url}/_fake/seen").json()) == 1  # only the good call went upstream
    client(px.url, "odd").chat.completions.create(model="fake", messages=msgs)
    done = httpx.post(f"{px.url}/s/odd/finish", json={"metadata": {"note": "\U0001f600"}}).json()
    assert done["status"] == "completed", done  # the session was never failed
    (row,) = rows(str(tmp_path / "store"))
    assert row["num_actions"] == 2 and json.loads(row["metadata"])["note"] == "\U0001f600"


def _wait_rows(store: str, n: int, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        got = rows(store) if os.path.isdir(os.path.join(store, "trajectories")) else []
        if len(got) >= n or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_sigkill_leaves_no_partial_shard_and_nothing_marked_complete(fake_upstream, tmp_path):
    store = str(tmp_path / "store")
    proc, url = proxy_process(fake_upstream.url, store)
    finished: list[str] = []  # /finish answered 200 before the kill
    stop = threading.Event()

    def hammer(w: int) -> None:  # episodes finishing (shards being written) when the kill lands
        for i in range(1000):
            if stop.is_set():
                return
            try:
                play(client(url, f"busy{w}-{i}"), 2)
                httpx.post(f"{url}/s/busy{w}-{i}/finish", json={"reward": 1.0}).raise_for_status()
                finished.append(f"busy{w}-{i}")
            except Exception:  # noqa: BLE001 - the proxy is gone
                return

    threads = [threading.Thread(target=hammer, args=(w,)) for w in range(6)]
    try:
        for i in range(3):
            play(client(url, f"done{i}"), 2)
            httpx.post(f"{url}/s/done{i}/finish", json={"reward": 1.0}).raise_for_status()
        for i in range(4):
            play(client(url, f"open{i}"), 1)
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while len(finished) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert len(finished) >= 6, "the hammer never got going"
    shards = open_store(store).list_shards(strict=True)  # every shard readable (strict raises otherwise)
    assert shards
    got = rows(store)
    sessions = [json.loads(r["metadata"])["session"] for r in got]
    assert len(sessions) == len(set(sessions))  # each stored once
    assert {"done0", "done1", "done2", *finished} <= set(sessions)  # finished episodes are durable
    assert not any(s.startswith("open") for s in sessions)  # open ones are not stored, not even as aborted
    # what is stored is whole: an episode cut by the kill is either absent or complete
    assert all(r["status"] == "completed" and action_ids(r) == [REPLY_IDS] * 2 for r in got)


def test_sigterm_writes_open_episodes_as_aborted(fake_upstream, tmp_path):
    store = str(tmp_path / "store")
    proc, url = proxy_process(fake_upstream.url, store)
    for i in range(3):
        play(client(url, f"open{i}"), 2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    got = rows(store)
    assert sorted(json.loads(r["metadata"])["session"] for r in got) == ["open0", "open1", "open2"]
    assert all(r["status"] == "aborted" and len(action_ids(r)) == 2 for r in got)
    assert all(json.loads(r["metadata"])["end_reason"] == "proxy shutting down" for r in got)
    assert all(json.loads(r["metadata"])["calls_in_flight"] == 0 for r in got)


def test_eos_constant_matches_the_fake():
    assert EOS == REPLY_IDS[-1]


def test_servers_accept_connections_with_nagle_off():
    """Without TCP_NODELAY on the listening socket, uvicorn's two sends per response (head, body)
    wait for the client's delayed ACK: ~40 ms per call on loopback (found with bench/proxy.py)."""
    import socket

    from trajstore.http.sockets import PortInUseError, listening_socket

    with listening_socket("127.0.0.1", 0) as lsock, socket.create_connection(lsock.getsockname()):
        conn, _ = lsock.accept()
        with conn:
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    busy = listening_socket("127.0.0.1", 0)
    taken = busy.getsockname()[1]
    with busy, pytest.raises(PortInUseError, match=f"port {taken} on 127.0.0.1 is already in use") as e:
        listening_socket("127.0.0.1", taken).close()  # in use: a clear OSError naming the port, no leak
    assert isinstance(e.value, OSError)


def _publish_marker(store: str, run: str, version: int) -> None:
    """A published version as traj proxy sees it (meta.json, then LATEST); the fake upstream
    loads nothing, so no weights are needed."""
    d = os.path.join(store, "policies", run, f"v{version}")
    os.makedirs(d)
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump({"run_id": run, "version": version}, fh)
    tmp = os.path.join(store, "policies", run, "LATEST.tmp")
    with open(tmp, "w") as fh:
        json.dump({"version": version}, fh)
    os.replace(tmp, os.path.join(store, "policies", run, "LATEST"))


def _wait_for(pred, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_call_across_a_reload_without_a_reported_boundary_carries_both_versions(fake_upstream, start_proxy,
                                                                                  tmp_path):
    """tag mode, an upstream that reports only the version at the end of a call (SGLang's
    weight_version): a call that a reload crossed is one action span with policy_version 0 and
    policy_version_max 1, never labelled with one of them alone."""
    store = str(tmp_path / "store")
    _publish_marker(store, "r", 0)
    px = start_proxy(fake_upstream.url, store=store, follow_run="r", reload_mode="tag", poll_s=0.05)
    stats = lambda: httpx.get(f"{px.url}/proxy/stats").json()  # noqa: E731
    _wait_for(lambda: stats()["policy_version"] == 0, "v0 loaded")
    c = client(px.url, "mix")
    msgs = [{"role": "user", "content": "hi"}]
    answer: list = []
    call = threading.Thread(target=lambda: answer.append(c.chat.completions.create(
        model="fake", messages=msgs, extra_body={"fake_hold": "mix"})))
    call.start()
    wait_held(fake_upstream.url, "mix", 1)  # the call is in flight at the upstream ...
    _publish_marker(store, "r", 1)  # ... when the trainer publishes v1 and the proxy has it loaded
    _wait_for(lambda: stats()["policy_version"] == 1, "v1 loaded")
    httpx.post(f"{fake_upstream.url}/_fake/release", json={"name": "mix"}).raise_for_status()
    call.join(120)
    msgs += [{"role": "assistant", "content": answer[0].choices[0].message.content}, {"role": "user", "content": "x"}]
    c.chat.completions.create(model="fake", messages=msgs)  # all of it under v1
    done = httpx.post(f"{px.url}/s/mix/finish", json={"reward": 1.0}).json()
    assert (done["policy_versions"], done["policy_versions_max"]) == ([0, 1], [1, None])
    (row,) = rows(store)
    actions = [(s["policy_version"], s["policy_version_max"]) for s in row["spans"] if s["kind"] == "action"]
    assert actions == [(0, 1), (1, None)]
    assert (row["min_policy_version"], row["max_policy_version"]) == (0, 1)
    meta = json.loads(row["metadata"])
    assert [(m["min_version"], m["max_version"], m["part"]) for m in meta["mixed_version_calls"]] == [(0, 1, 1)]
    st = stats()
    assert st["mixed_version_calls"] == 1 and st["calls_by_version"] == {"1": 1}  # the mixed call is in neither


def test_sigterm_with_a_held_episode_refuses_it_and_still_writes_the_open_ones_at_once(fake_upstream, tmp_path):
    """`traj demo` stopped its proxy while --max-staleness held new
    episodes; the held calls kept uvicorn's graceful shutdown waiting its whole 30 s, the demo
    killed the proxy at 30 s, and the episodes in flight (3 recorded calls) were never written,
    though the demo said they were stored as aborted."""

    store = str(tmp_path / "store")
    proc, url = proxy_process(fake_upstream.url, store, "--run", "r", "--max-staleness", "0",
                              "--batch-size", "1", "--hold-timeout", "600")
    held: list[BaseException] = []
    try:
        play(client(url, "open0"), 2)  # the one episode the bound admits

        def held_call() -> None:
            try:
                client(url, "held").chat.completions.create(model="fake", messages=[{"role": "user", "content": "x"}])
            except BaseException as e:  # noqa: BLE001 - checked below
                held.append(e)

        t = threading.Thread(target=held_call)
        t.start()
        deadline = time.monotonic() + 120
        while httpx.get(f"{url}/proxy/stats").json().get("staleness_gate", {}).get("held", 0) < 1:
            assert time.monotonic() < deadline, httpx.get(f"{url}/proxy/stats").json()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        t.join(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    # refused by the proxy (503), not cut when a graceful timeout ran out (a dropped connection)
    assert len(held) == 1 and isinstance(held[0], openai.APIStatusError) and held[0].status_code == 503, held
    (row,) = rows(store)
    assert json.loads(row["metadata"])["session"] == "open0"
    assert row["status"] == "aborted" and len(action_ids(row)) == 2
