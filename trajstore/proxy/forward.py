"""Forwarding one model call to the upstream: the request built from the client's (token ids and
log-probs switched on, :func:`~trajstore.proxy.upstream.augment`) and sent once the versioning lets
it through (:func:`_send`); the answer given back whole (:func:`_answer`) or streamed
(:func:`~trajstore.proxy.relay.relay`), stripped of what the proxy added; upstream failures mapped
to errors. The answered call goes to :meth:`ProxyState.record_later`; one that is not recorded
ends with :meth:`ProxyState.release`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from trajstore.http.errors import error_response
from trajstore.proxy.inflight import InFlightCall
from trajstore.proxy.recorder import Session
from trajstore.proxy.relay import relay
from trajstore.proxy.shutdown import cut_message
from trajstore.proxy.state import ProxyState
from trajstore.proxy.upstream import Augmented, augment, fast_dumps, fast_loads, strip_response, synthesize_stream

_JSON_HEADERS = {"content-type": "application/json"}
UPSTREAM_PATHS = {True: "/v1/chat/completions", False: "/v1/completions"}
"""The upstream's path for a chat call (True) and a text completion (False)."""


async def forward(st: ProxyState, request: Request, s: Session, body: dict[str, Any], *, chat: bool,
                  ephemeral: bool, lineage: str | None = None) -> Response:
    """Send one checked call of session `s` upstream and answer the client; the session's call
    counts as in flight from here until it is answered and recorded (or failed). A shutdown may
    cut it while it waits for the upstream: the client then gets a 503 from the proxy.

    Args:
        request: the client's request (its Authorization header may go upstream).
        body: the client's JSON body (not modified).
        chat: ``/v1/chat/completions`` rather than ``/v1/completions``.
        ephemeral: a call without a session, its own episode: it ends (durably written) before
            the answer goes out.
        lineage: the lineage the client named for the call (None: the one its prompt extends).
    """
    call = InFlightCall(s, st.calls, body=body, chat=chat, ephemeral=ephemeral, lineage=lineage)
    aug = augment(body, chat=chat, engine=st.cfg.engine)
    stack = contextlib.AsyncExitStack()  # the versioning's hold on the call, and a stream's connection
    relayed = False
    try:
        answer = await _send(st, call, aug, st.upstream_auth(request.headers), stack)
        if not isinstance(answer, httpx.Response):
            return answer  # the proxy's own error: cut, timed out, unreachable
        if answer.status_code != 200:
            return await _refused(st, s, answer)
        if aug.stream_upstream:
            stack.push_async_callback(answer.aclose)
            relayed = True  # from here the relay ends the call
            return StreamingResponse(relay(st, call, answer, aug, stack), media_type="text/event-stream")
        await stack.aclose()  # answered: a drain-mode reload need not wait for it any more
        return await _answer(st, call, answer, aug)
    finally:
        if not relayed:
            await stack.aclose()
            await st.release(call)


async def _send(st: ProxyState, call: InFlightCall, aug: Augmented, auth: dict[str, str],
                stack: contextlib.AsyncExitStack) -> httpx.Response | JSONResponse:
    """Send `call` upstream once the versioning lets it through (a drain-mode reload holds it;
    ``call.ticket`` is the version it got) and return the upstream's answer (a stream's head
    only), or the proxy's own error: the shutdown cut the call while it waited (503), the
    upstream timed out (504) or could not be reached (502)."""
    req = st.client.build_request("POST", UPSTREAM_PATHS[call.chat], content=fast_dumps(aug.body),
                                  headers={**auth, **_JSON_HEADERS})
    call.waiting = True
    try:
        call.ticket = await stack.enter_async_context(st.versioning.call())
        return await st.client.send(req, stream=aug.stream_upstream)
    except asyncio.CancelledError:
        if not call.cut:
            raise
        _uncancel()
        call.session.mark("aborted", "call cut at the shutdown deadline")
        return error_response(503, cut_message(st.cfg.shutdown_grace_s), "proxy_shutting_down")
    except httpx.TimeoutException:
        return _upstream_failed(st, call.session, 504, "upstream timed out")
    except httpx.HTTPError as e:
        return _upstream_failed(st, call.session, 502, f"upstream unreachable: {type(e).__name__}")
    finally:
        call.waiting = False


def _uncancel() -> None:
    """The cancellation that cut this call was handled: the request's task goes on to answer."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _upstream_failed(st: ProxyState, s: Session, status: int, message: str) -> JSONResponse:
    s.mark("failed", message)
    st.count_error("upstream_timeout" if status == 504 else "upstream_unreachable")
    return error_response(status, message, "upstream_error")


async def _refused(st: ProxyState, s: Session, r: httpx.Response) -> Response:
    """The upstream answered an error: the client gets it as it is, and the episode fails."""
    try:
        content = await r.aread()
    finally:
        await r.aclose()
    s.mark("failed", f"upstream HTTP {r.status_code}")
    st.count_error(f"upstream_{r.status_code}")
    return Response(content, status_code=r.status_code, media_type="application/json")


async def _answer(st: ProxyState, call: InFlightCall, r: httpx.Response, aug: Augmented) -> Response:
    """A whole answer: recorded (durably first for a call without a session), and given to the
    client as it would be without the proxy, whole or as the stream it asked for."""
    data = fast_loads(r.content)
    seen = dict(data)  # what the client gets: copies of the parts strip_response changes
    if isinstance(data.get("choices"), list):
        seen["choices"] = [dict(ch) if isinstance(ch, dict) else ch for ch in data["choices"]]
    strip_response(seen, aug, chat=call.chat)
    task = st.record_later(call, data)
    if call.ephemeral:
        await task
    if aug.stream_to_client:  # an upstream that cannot stream the ids: the proxy streams
        include_usage = bool((call.body.get("stream_options") or {}).get("include_usage"))
        events = synthesize_stream(seen, chat=call.chat, include_usage=include_usage)
        return StreamingResponse(_replay(events), media_type="text/event-stream")
    return Response(fast_dumps(seen), media_type="application/json")


async def _replay(events: Iterable[bytes]) -> AsyncIterator[bytes]:
    for e in events:
        yield e
