"""The routes that describe ``traj proxy`` and its upstream: ``GET /health``, ``GET /proxy/stats``
(counters, per-version call counts, open sessions, weight sync and staleness gate state (each
weight load: ``version``, ``seconds``, ``in_flight``: the requests the upstream was generating
when it loaded, None where it does not say), when
the idle-eviction task last ended a pass: ``eviction.last_run_s_ago``, None before its first) and
``GET /v1/models`` (passed through to the upstream)."""

from __future__ import annotations

import time
from typing import Any

import httpx
from fastapi import Request
from fastapi.responses import Response

from trajstore.http.errors import error_response
from trajstore.proxy.state import ProxyState


async def health(request: Request) -> dict[str, Any]:
    st: ProxyState = request.app.state.proxy
    return {"status": "shutting down" if st.closing else "ok", "policy_version": st.versioning.version,
            "logprob_mode": st.logprobs.mode}


async def stats(request: Request) -> dict[str, Any]:
    st: ProxyState = request.app.state.proxy
    r = st.recorder
    out: dict[str, Any] = {
        **dict(r.stats), "open_sessions": len(r.sessions), "errors": dict(st.errors),
        "calls_by_version": {str(k): v for k, v in sorted(r.calls_by_version.items())},
        "lineages_per_episode": {str(k): v for k, v in sorted(r.lineages_per_episode.items()) if v},
        "policy_version": st.versioning.version, "policy_version_source": st.versioning.source,
        "reload_epoch": st.versioning.epoch,
        "logprob_mode": st.logprobs.mode, "logprob_mode_source": st.logprobs.source,
        "uptime_s": round(time.time() - st.started, 1), "shutting_down": st.closing, "calls_in_flight": len(st.calls),
        "eviction": {"last_run_s_ago": None if st.eviction_last_run is None
                     else round(time.time() - st.eviction_last_run, 1),
                     "errors": st.errors.get("eviction", 0) + st.errors.get("eviction_write", 0),
                     "remembered": len(st.evicted)}}
    if st.sync is not None:
        out["weight_loads"] = [{"version": v, "seconds": round(s, 3), "in_flight": n} for v, s, n in st.sync.loads]
        out["weight_load_failures"] = st.sync.failures
    if st.gate is not None:
        out["staleness_gate"] = {"capacity": st.gate.capacity, "running": st.gate.running,
                                 "unconsumed": st.gate.unconsumed, "held": st.gate.held,
                                 "refused": st.gate.refused}
    return out


async def models(request: Request) -> Response:
    st: ProxyState = request.app.state.proxy
    headers = st.upstream_auth(request.headers)
    try:
        r = await st.client.get("/v1/models", headers=headers)
    except httpx.HTTPError as e:
        return error_response(502, f"upstream unreachable: {type(e).__name__}", "upstream_error")
    return Response(r.content, status_code=r.status_code, media_type="application/json")
