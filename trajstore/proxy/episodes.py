"""The routes that end an episode: ``POST /s/<session>/reward`` sets its reward, and
``POST /s/<session>/finish`` waits (at most ``--finish-wait`` seconds) for its calls in flight,
then ends it and returns once its trajectories are durable in the store (with their ids, final
status, policy versions, token count, the calls it could not wait for and the parts written
earlier at idle evictions). An episode with calls still in flight ends ``aborted``: what they
answer later is stored as a continuation part, never dropped. An episode written as aborted at an
idle eviction and not called since is still the harness's to end: its ``/finish`` (and reward)
sets the outcome on the parts stored (``finished_after_eviction`` in their metadata)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from trajstore.errors import TrajstoreError
from trajstore.http.errors import error_response
from trajstore.http.json_body import read_json_object
from trajstore.http.limits import BodyError
from trajstore.maintenance.outcome import Outcome, set_outcome
from trajstore.proxy.recorder import RESERVED_METADATA_KEYS
from trajstore.proxy.shutdown import SHUTTING_DOWN
from trajstore.proxy.state import ProxyState
from trajstore.schema import STATUSES  # a client may end an episode with any stored status

log = logging.getLogger("trajstore.proxy")

# The routes below have comments, not docstrings: FastAPI would publish a docstring in /openapi.json.


async def set_episode_reward(request: Request, session: str) -> JSONResponse:
    st: ProxyState = request.app.state.proxy
    if st.closing:
        return error_response(503, SHUTTING_DOWN + "; this reward is not applied", "proxy_shutting_down")
    try:
        body = await read_json_object(request, st.max_request_bytes)
    except BodyError as e:
        if e.status != 400:
            return error_response(e.status, str(e))
        body = {}  # answered below, with the body it must have
    r = body.get("reward")
    if not isinstance(r, (int, float)) or isinstance(r, bool) or not math.isfinite(r):
        return error_response(400, "body must be {\"reward\": <finite number>, \"raw\": <any, optional>}")
    s = st.recorder.sessions.get(session)
    ev = st.evicted.get(session) if s is None else None
    if ev is not None:  # kept for its continuation, or for its /finish
        ev.reward, ev.reward_raw = float(body["reward"]), body.get("raw")
        return JSONResponse({"session": session, "reward": float(body["reward"])})
    if s is None:
        return _no_session(st, session)
    st.recorder.set_reward(s, float(body["reward"]), body.get("raw"))
    s.last_active = time.monotonic()
    return JSONResponse({"session": session, "reward": float(body["reward"])})


def _no_session(st: ProxyState, session: str) -> JSONResponse:
    return error_response(404, f"no open session {session!r} (a session opens with its first call)")


# /finish: check the body, set the reward, wait (at most --finish-wait) for the session's calls
# in flight or being recorded, then end the episode through ProxyState.end_session: aborted when
# calls are still in flight (each one answered later is stored as a continuation part).
async def finish_episode(request: Request, session: str) -> JSONResponse:
    st: ProxyState = request.app.state.proxy
    if st.closing:
        return error_response(503, SHUTTING_DOWN + "; this episode among them", "proxy_shutting_down")
    try:
        body = await read_json_object(request, st.max_request_bytes, empty_is_object=True)
    except BodyError as e:  # strict JSON: no NaN or Infinity, which the store would refuse after the session ended
        return error_response(e.status, str(e))
    status = body.get("status", "completed")
    if status not in STATUSES:
        return error_response(400, f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict):
        return error_response(400, "metadata must be a JSON object")
    reserved = sorted(set(meta) & RESERVED_METADATA_KEYS)
    if reserved:
        return error_response(400, f"metadata keys {reserved} are the proxy's own (reserved: "
                                 f"{', '.join(sorted(RESERVED_METADATA_KEYS))})")
    prompt_id = body.get("prompt_id")
    if prompt_id is not None and not isinstance(prompt_id, str):
        return error_response(400, "prompt_id must be a string")
    group_id = body.get("group_id")
    if group_id is not None and not isinstance(group_id, str):
        return error_response(400, "group_id must be a string (a GRPO group: rollouts of one prompt)")
    if "reward" in body:
        r = body["reward"]
        if r is not None and (not isinstance(r, (int, float)) or isinstance(r, bool) or not math.isfinite(r)):
            return error_response(400, f"reward must be a finite number or null, got {r!r}")
    s = st.recorder.sessions.get(session)
    if s is None:
        if session in st.evicted:
            return await _finish_evicted(st, session, status, body, meta)
        return _no_session(st, session)
    s.finishing = True  # from here on, idle eviction leaves the episode to this /finish
    if "reward" in body:
        r = body["reward"]
        st.recorder.set_reward(s, None if r is None else float(r), body.get("reward_raw"))
    # a call still waiting for the upstream, streaming its last bytes or being recorded comes first
    if s.in_flight:
        log.debug("session %s: /finish waits up to %g s (--finish-wait) for %d call(s) in flight", session,
                  st.cfg.finish_wait_s, s.in_flight)
    idle = await s.wait_idle(st.cfg.finish_wait_s)
    if st.hold_finish is not None:
        await st.hold_finish(s)
    if st.closing:
        return error_response(503, SHUTTING_DOWN + "; this episode among them", "proxy_shutting_down")
    if st.recorder.sessions.get(session) is not s:
        return error_response(409, f"session {session!r} ended while /finish waited for its calls")
    if group_id is not None:
        s.group_id = group_id
    in_flight = 0 if idle else s.in_flight
    try:
        if in_flight:
            trajs, final = await st.end_session(
                session, "aborted", reason=f"finish while {in_flight} call(s) in flight", metadata=meta,
                prompt_id=prompt_id, requested_status=status, notes={"calls_in_flight": in_flight}, late=True)
        else:
            trajs, final = await st.end_session(session, status, metadata=meta, prompt_id=prompt_id)
    except TrajstoreError as e:
        return error_response(500, f"could not write the trajectories: {e}", "store_error")
    return JSONResponse({"session": session, "status": final, "calls_in_flight": in_flight,
                         "evicted_parts": list(s.evicted_ids),
                         "trajectories": [t.trajectory_id for t in trajs],
                         "policy_versions": [sp.policy_version for t in trajs for sp in t.spans
                                             if sp.kind == "action"],
                         "policy_versions_max": [sp.policy_version_max for t in trajs for sp in t.spans
                                                 if sp.kind == "action"],
                         "num_tokens": sum(len(t.tokens) for t in trajs)})


async def _finish_evicted(st: ProxyState, session: str, status: str, body: dict[str, Any],
                          meta: dict[str, Any]) -> JSONResponse:
    """``/finish`` of an episode an idle eviction wrote as aborted, with no call since: the
    harness's outcome (status, reward, metadata) is set on the parts already stored, rewritten
    in place (:func:`~trajstore.maintenance.outcome.set_outcome`), and the episode is forgotten
    once that rewrite succeeded: after a failed one (500) it is still there, so the harness can
    send its ``/finish`` again. A second ``/finish`` while one rewrites answers 409."""
    ev = st.evicted[session]
    if ev.finishing:
        return error_response(409, f"a /finish of session {session!r} is already setting its outcome on the parts "
                                   f"written at its idle eviction")
    ev.finishing = True
    try:
        if ev.written is not None:
            await asyncio.shield(ev.written)  # the eviction may still be writing them
        reward, raw = (ev.reward, ev.reward_raw) if "reward" not in body else (body["reward"], body.get("reward_raw"))
        reward = None if reward is None else float(reward)
        if ev.taint is not None and status in ("completed", "truncated"):
            status = ev.taint  # as Recorder.take: an upstream error or a client gone mid-call
        outcome = Outcome(status=status, reward=reward,
                          reward_raw=None if raw is None and reward is None else json.dumps(raw if raw is not None
                                                                                              else reward),
                          metadata={**meta, "requested_status": status, "finished_after_eviction": True})
        ids = await asyncio.to_thread(set_outcome, st.store, ev.trajectory_ids, outcome,
                                      wait_s=st.cfg.finish_wait_s)
    except (TrajstoreError, ValueError) as e:  # ValueError: a reward_raw that is not JSON
        ev.finishing = False  # kept: a retried /finish sets the outcome
        return error_response(500, f"the episode's parts {ev.trajectory_ids}, written as aborted at its idle "
                                   f"eviction, could not be given this outcome: {e}", "store_error")
    st.forget_evicted(session, ev)
    log.info("session %s: /finish after an idle eviction: status %s and reward %s set on its stored part(s) %s",
             session, status, reward, ", ".join(ids))
    return JSONResponse({"session": session, "status": status, "calls_in_flight": 0,
                         "evicted_parts": list(ev.trajectory_ids), "trajectories": [], "updated": ids,
                         "policy_versions": [], "policy_versions_max": [], "num_tokens": 0})
