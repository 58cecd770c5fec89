"""The model-call routes, ``POST /v1/chat/completions`` and ``POST /v1/completions`` (also under
``/s/<session>`` and ``/s/<session>/l/<lineage>``, the lineage the call belongs to, as the
``X-Lineage-Id`` header names it: :mod:`~trajstore.proxy.lineage`): check the request, find its
session, continue an episode evicted for idling
(the answer says so in ``X-Trajstore-Evicted``) or open a new one (admitted by the staleness
gate), then :func:`~trajstore.proxy.forward.forward` it to the upstream."""

from __future__ import annotations

import re
import uuid

from fastapi import Request
from fastapi.responses import Response

from trajstore.http.errors import error_response
from trajstore.http.limits import BodyError
from trajstore.http.openai_fields import RequestFieldError, read_completion_request
from trajstore.proxy.forward import forward
from trajstore.proxy.lineage import LINEAGE_HEADER
from trajstore.proxy.shutdown import SHUTTING_DOWN
from trajstore.proxy.staleness import StalenessOverflow
from trajstore.proxy.state import ProxyState

EVICTED_HEADER = "X-Trajstore-Evicted"
"""Response header of the first call after an idle eviction: how many trajectories of its
episode were written as aborted (the call continues the episode as a new part)."""
HELD_HEADER = "X-Trajstore-Held"
"""Response header of the first call of a new episode when ``--max-staleness`` is on: seconds the
staleness gate held it before it reached the upstream (``0.000`` = admitted at once), so a client
can tell waiting for the trainer from the model's own latency."""

_SAFE_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:=+-]{0,127}$")


def check_session_key(key: str) -> str:
    """A session key as given, or ValueError: letters, digits and ``._:=+-``, at most 128."""
    if not _SAFE_KEY.match(key or ""):
        raise ValueError(f"session key {key!r} must be 1-128 letters, digits or ._:=+- (starting with a "
                         "letter or digit)")
    return key


async def chat_completions(request: Request) -> Response:
    return await handle_call(request, request.path_params.get("session"), True)


async def completions(request: Request) -> Response:
    return await handle_call(request, request.path_params.get("session"), False)


def _lineage_of(request: Request) -> str | None:
    """The lineage the call names (the URL's ``/l/<lineage>`` first, else ``X-Lineage-Id``), or None.

    Raises:
        ValueError: not a valid key (the session key's rule).
    """
    name = request.path_params.get("lineage") or request.headers.get(LINEAGE_HEADER)
    return check_session_key(name) if name else None


async def handle_call(request: Request, session: str | None, chat: bool) -> Response:
    """One model call: refused with 4xx before it reaches the upstream when the body or the
    session key is bad, with 503 when the staleness gate refuses a new episode; else forwarded."""
    st: ProxyState = request.app.state.proxy
    cfg = st.cfg
    if st.closing:
        return error_response(503, SHUTTING_DOWN, "proxy_shutting_down")
    try:  # a request the upstream would refuse never reaches it (nor fails the episode)
        body, fields = await read_completion_request(request, st.max_request_bytes, chat=chat)
    except BodyError as e:
        return error_response(e.status, f"{e} (--max-request-mb)" if e.status == 413 else str(e))
    except RequestFieldError as e:
        return error_response(400, str(e), param=e.field)
    if fields.n not in (None, 1):
        return error_response(400, "traj proxy records one choice per call: n must be 1", param="n")
    key = session or request.headers.get("x-trajectory-id")
    try:
        key = check_session_key(key) if key else None
        lineage = _lineage_of(request)
    except ValueError as e:
        return error_response(400, str(e))
    if key is None and cfg.require_session:
        return error_response(400, "no session: use the base URL http://HOST:PORT/s/<session>/v1 or an "
                                 "X-Trajectory-Id header (--require-session)")
    ephemeral = key is None
    key = key or f"call-{uuid.uuid4().hex[:16]}"
    s = st.recorder.sessions.get(key)
    evicted = None
    held: float | None = None
    if s is None:
        if st.gate is not None:
            try:
                held = await st.gate.admit()
            except StalenessOverflow as e:
                st.count_error("staleness_refused")
                return error_response(503, str(e), "staleness_limit")
        if st.closing:  # the shutdown began while the gate held it
            if st.gate is not None:
                st.gate.release()
            return error_response(503, SHUTTING_DOWN, "proxy_shutting_down")
        evicted = st.take_evicted(key)
        s = st.recorder.open(key, prompt_id=request.headers.get("x-prompt-id"),
                             group_id=request.headers.get("x-group-id"), evicted=evicted)
    response = await forward(st, request, s, body, chat=chat, ephemeral=ephemeral, lineage=lineage)
    if evicted is not None:
        response.headers[EVICTED_HEADER] = str(len(evicted.trajectory_ids))
    if held is not None:
        response.headers[HELD_HEADER] = f"{held:.3f}"
    return response
