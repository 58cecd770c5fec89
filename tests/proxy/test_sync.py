"""Which policy version the proxy records when the upstream reports none (vLLM): what it learns
from the upstream's model path, what whoever reloads the upstream by hand tells it, the one
warning when it can learn nothing, and weight sync through vLLM's own reload endpoints
(trajstore/proxy/sync.py)."""

from __future__ import annotations

import json
import logging
import os
import time

import httpx

from trajstore.reader import read_trajectories

VLLM_LIKE = {"weight_version": None}  # answers carry no metadata.weight_version


def _configure(upstream: str, **cfg) -> None:
    httpx.post(f"{upstream}/_fake/config", json=cfg).raise_for_status()


def _versions(url: str, session: str, n: int) -> list[int]:
    """`n` calls of a fresh session, finished; the policy version recorded for each."""
    msgs = [{"role": "user", "content": session}]
    for i in range(n):
        r = httpx.post(f"{url}/s/{session}/v1/chat/completions", json={"model": "fake", "messages": msgs}, timeout=30)
        r.raise_for_status()
        msgs += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                 {"role": "user", "content": str(i)}]
    return httpx.post(f"{url}/s/{session}/finish", json={}).json()["policy_versions"]


def _wait_for(pred, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_manual_reload_is_recorded_with_the_version_posted(fake_upstream, start_proxy):
    # An upstream reloaded by hand (the README's vLLM advice) was recorded as
    # --policy-version forever; POST /proxy/policy_version tells the proxy what it now serves
    _configure(fake_upstream.url, **VLLM_LIKE)
    px = start_proxy(fake_upstream.url)
    assert _versions(px.url, "before", 1) == [0]
    for bad in ({}, {"version": -1}, {"version": "3"}, {"version": 2.5}, {"version": True}):
        assert httpx.post(f"{px.url}/proxy/policy_version", json=bad).status_code == 400, bad
    r = httpx.post(f"{px.url}/proxy/policy_version", json={"version": 3})
    assert r.status_code == 200 and r.json()["policy_version"] == 3, r.text
    assert _versions(px.url, "after", 2) == [3, 3]
    stats = httpx.get(f"{px.url}/proxy/stats").json()
    assert stats["policy_version"] == 3 and stats["calls_by_version"] == {"0": 1, "3": 2}


def test_a_manual_version_says_when_the_upstream_labels_its_own_calls(fake_upstream, start_proxy):
    # POST /proxy/policy_version in front of traj serve answered 200 and the
    # stats showed v3, while every call stayed labelled with the version traj serve reports; the
    # reply now says which label wins (the upstream's own, per answer)
    _configure(fake_upstream.url, weight_version="0")
    px = start_proxy(fake_upstream.url)
    assert _versions(px.url, "reported", 1) == [0]
    r = httpx.post(f"{px.url}/proxy/policy_version", json={"version": 3})
    assert r.status_code == 200 and "reports its own weight version" in r.json()["note"], r.text
    assert _versions(px.url, "still-reported", 1) == [0]


def test_the_model_path_the_upstream_serves_names_the_version(fake_upstream, start_proxy, tmp_path):
    # An upstream restarted on a published version folder reports it as its
    # model (vLLM's GET /v1/models root): .../policies/<run>/v<N> is version N
    _configure(fake_upstream.url, **VLLM_LIKE, model_root=str(tmp_path / "store/policies/r1/v2"))
    px = start_proxy(fake_upstream.url, poll_s=0.05)
    assert _versions(px.url, "first", 1) == [2]
    _configure(fake_upstream.url, model_root=str(tmp_path / "store/policies/r1/v5/"))
    _wait_for(lambda: httpx.get(f"{px.url}/proxy/stats").json()["policy_version"] == 5, "v5 from the model path")
    assert _versions(px.url, "later", 1) == [5]
    _configure(fake_upstream.url, model_root="HuggingFaceTB/SmolLM2-135M-Instruct")  # names no version: kept
    served = lambda: httpx.get(f"{fake_upstream.url}/_fake/models_served").json()  # noqa: E731
    seen = served()
    _wait_for(lambda: served() >= seen + 2, "the proxy to read the new model path")  # one read may have begun before
    assert _versions(px.url, "kept", 1) == [5]


def test_an_upstream_that_reports_no_version_is_warned_about_once(fake_upstream, start_proxy, caplog):
    # Nothing said that every call was recorded as version 0
    caplog.set_level(logging.INFO, logger="trajstore.proxy")
    _configure(fake_upstream.url, **VLLM_LIKE)
    px = start_proxy(fake_upstream.url, policy_version=4)
    assert _versions(px.url, "a", 2) + _versions(px.url, "b", 1) == [4, 4, 4]
    warned = [r.getMessage() for r in caplog.records if "every call is recorded as version" in r.getMessage()]
    assert len(warned) == 1 and "version 4" in warned[0] and "/proxy/policy_version" in warned[0], warned


def test_an_upstream_that_reports_its_version_is_not_warned_about(fake_upstream, start_proxy, caplog):
    caplog.set_level(logging.INFO, logger="trajstore.proxy")
    px = start_proxy(fake_upstream.url)  # the fake reports metadata.weight_version, as SGLang
    assert _versions(px.url, "a", 2) == [0, 0]
    assert not [r for r in caplog.records if "every call is recorded as version" in r.getMessage()]


def _publish_marker(store: str, run: str, version: int) -> None:
    d = os.path.join(store, "policies", run, f"v{version}")
    os.makedirs(d)
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump({"run_id": run, "version": version}, fh)
    with open(os.path.join(store, "policies", run, "LATEST.tmp"), "w") as fh:
        json.dump({"version": version}, fh)
    os.replace(os.path.join(store, "policies", run, "LATEST.tmp"), os.path.join(store, "policies", run, "LATEST"))


def test_follow_run_reloads_vllm_through_its_dev_endpoints(fake_upstream, start_proxy, tmp_path):
    # --run asked vLLM for /update_weights_from_disk, which it does not
    # have: every load failed and every call was recorded as the first version
    store = str(tmp_path / "store")
    _configure(fake_upstream.url, **VLLM_LIKE, dialect="vllm")
    _publish_marker(store, "r", 0)
    px = start_proxy(fake_upstream.url, store=store, follow_run="r", engine="vllm", poll_s=0.05)
    stats = lambda: httpx.get(f"{px.url}/proxy/stats").json()  # noqa: E731
    _wait_for(lambda: stats()["policy_version"] == 0, "v0 loaded")
    assert _versions(px.url, "v0", 1) == [0]
    _publish_marker(store, "r", 1)
    _wait_for(lambda: stats()["policy_version"] == 1, "v1 loaded")
    assert _versions(px.url, "v1", 1) == [1]
    loads = httpx.get(f"{fake_upstream.url}/_fake/loads").json()
    assert [(x["endpoint"], x.get("kwargs", {}).get("weights_path")) for x in loads] == [
        ("/collective_rpc", os.path.join(store, "policies/r/v0")), ("/reset_prefix_cache", None),
        ("/collective_rpc", os.path.join(store, "policies/r/v1")), ("/reset_prefix_cache", None)]
    assert stats()["weight_load_failures"] == 0
    assert [x["in_flight"] for x in stats()["weight_loads"]] == [None, None]  # vLLM does not say
    rows = read_trajectories(store).to_pylist()
    assert sorted(s["policy_version"] for r in rows for s in r["spans"] if s["kind"] == "action") == [0, 1]


def test_each_weight_load_says_how_many_requests_were_in_flight(fake_upstream, start_proxy, tmp_path):
    # /proxy/stats listed a load's version and seconds only; the upstream's num_paused_requests
    # (the requests it was generating when it loaded) tells an operator whether a reload landed
    # inside calls, and a test whether the race it needs happened
    store = str(tmp_path / "store")
    _configure(fake_upstream.url, num_paused_requests=2)
    _publish_marker(store, "r", 0)
    px = start_proxy(fake_upstream.url, store=store, follow_run="r", poll_s=0.05)
    stats = lambda: httpx.get(f"{px.url}/proxy/stats").json()  # noqa: E731
    _wait_for(lambda: stats()["policy_version"] == 0, "v0 loaded")
    _configure(fake_upstream.url, num_paused_requests=None)  # an upstream that does not say
    _publish_marker(store, "r", 1)
    _wait_for(lambda: stats()["policy_version"] == 1, "v1 loaded")
    assert [(x["version"], x["in_flight"]) for x in stats()["weight_loads"]] == [(0, 2), (1, None)]
