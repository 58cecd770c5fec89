"""``POST /proxy/policy_version {"version": N}``: whoever reloads the upstream by hand (vLLM
without ``--follow-run``) tells the proxy which policy version it serves from now on; calls
that run across the change are flagged with both versions, as across a weight-sync reload."""

from __future__ import annotations

import logging

from fastapi import Request
from fastapi.responses import JSONResponse

from trajstore.http.errors import error_response
from trajstore.http.json_body import read_json_object
from trajstore.http.limits import BodyError
from trajstore.proxy.state import ProxyState

log = logging.getLogger("trajstore.proxy")


async def set_policy_version(request: Request) -> JSONResponse:
    st: ProxyState = request.app.state.proxy
    try:
        v = (await read_json_object(request, st.max_request_bytes)).get("version")
    except BodyError as e:
        if e.status != 400:
            return error_response(e.status, str(e))
        v = None  # answered below, with the body it must have
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        return error_response(400, 'body must be {"version": <integer >= 0>}', param="version")
    if st.sync is not None:
        return error_response(409, f"weight sync (--follow-run {st.cfg.follow_run}) sets the version: the proxy "
                                 "loads each published one itself", "conflict")
    before = st.versioning.version
    st.versioning.loaded(v, "manual")
    log.info("policy version set by hand: v%s -> v%d", before, v)
    out: dict[str, object] = {"policy_version": v, "previous": before}
    if st.upstream_reports_version:
        out["note"] = ("the upstream reports its own weight version with each answer, and that labels the calls; "
                       "this version labels only answers that carry none")
        log.warning("policy version set by hand, but the upstream reports its own weight version with each "
                    "answer: calls keep its label (the hand-set v%d applies only to answers without one)", v)
    return JSONResponse(out)
