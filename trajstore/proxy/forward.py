"""Forwarding one model call to the upstream: the request built from the client's (token ids and
log-probs switched on), the answer relayed back plain or streamed and stripped of what the proxy
added, upstream failures mapped to errors; the answered call goes to :class:`ProxyState` to record."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from trajstore.http.errors import error_response
from trajstore.proxy.jsonio import fast_dumps, fast_loads
from trajstore.proxy.recorder import Session
from trajstore.proxy.shutdown import InFlightCall, cut_message
from trajstore.proxy.state import ProxyState
from trajstore.proxy.sync import Ticket
from trajstore.proxy.upstream import Augmented, StreamAccumulator, augment, strip_response, synthesize_stream

_JSON_HEADERS = {"content-type": "application/json"}


def _observation_of(body: dict[str, Any], chat: bool) -> tuple[str | None, str | None]:
    """(role, cause id) of what a chat request added after the last assistant message."""
    if not chat:
        return None, None
    msgs = body.get("messages") or []
    tail = []
    for m in reversed(msgs):
        if not isinstance(m, dict) or m.get("role") == "assistant":
            break
        tail.append(m)
    tools = [m for m in reversed(tail) if m.get("role") == "tool"]
    if tools:
        return "tool", tools[0].get("tool_call_id")
    return "user", None


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
    call = st.start_call(s)
    call.lineage = lineage
    aug = augment(body, chat=chat, engine=st.cfg.engine)
    path = "/v1/chat/completions" if chat else "/v1/completions"
    headers = st.upstream_auth(request.headers)
    obs = _observation_of(body, chat)
    stack = contextlib.AsyncExitStack()
    handed_over = recording = False
    try:
        call.waiting = True
        try:
            ticket = await stack.enter_async_context(st.versioning.call())
            if aug.stream_upstream:
                req = st.client.build_request("POST", path, content=fast_dumps(aug.body),
                                              headers={**headers, **_JSON_HEADERS})
                upstream = await st.client.send(req, stream=True)
            else:
                r = await st.client.post(path, content=fast_dumps(aug.body), headers={**headers, **_JSON_HEADERS})
        except asyncio.CancelledError:
            if not call.cut:
                raise
            _uncancel()
            return _cut(st, s)
        except httpx.TimeoutException:
            return _upstream_failed(st, s, 504, "upstream timed out")
        except httpx.HTTPError as e:
            return _upstream_failed(st, s, 502, f"upstream unreachable: {type(e).__name__}")
        finally:
            call.waiting = False
        if aug.stream_upstream:
            if upstream.status_code != 200:
                content = await upstream.aread()
                await upstream.aclose()
                s.mark("failed", f"upstream HTTP {upstream.status_code}")
                st.count_error(f"upstream_{upstream.status_code}")
                return Response(content, status_code=upstream.status_code, media_type="application/json")
            stack.push_async_callback(upstream.aclose)
            handed_over = True
            return StreamingResponse(_relay(st, call, upstream, stack, aug, body, chat, ticket, obs, ephemeral),
                                     media_type="text/event-stream")
        if r.status_code != 200:
            s.mark("failed", f"upstream HTTP {r.status_code}")
            st.count_error(f"upstream_{r.status_code}")
            return Response(r.content, status_code=r.status_code, media_type="application/json")
        data = fast_loads(r.content)
        seen = dict(data)  # what the client gets: copies of the parts strip_response changes
        if isinstance(data.get("choices"), list):
            seen["choices"] = [dict(ch) if isinstance(ch, dict) else ch for ch in data["choices"]]
        strip_response(seen, aug, chat=chat)
        await stack.aclose()
        task = st.record_later(call, data, body, chat, ticket, obs, ephemeral)
        recording = True
        if ephemeral:
            await task
        if aug.stream_to_client:  # an upstream that cannot stream the ids: the proxy streams
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = synthesize_stream(seen, chat=chat, include_usage=include_usage)

            async def replay() -> AsyncIterator[bytes]:
                for e in events:
                    yield e
            return StreamingResponse(replay(), media_type="text/event-stream")
        return Response(fast_dumps(seen), media_type="application/json")
    finally:
        if not handed_over:
            await stack.aclose()
            if not recording:
                call.end()
                if ephemeral:
                    await st.end_session(s.key, "completed")


def _uncancel() -> None:
    """The cancellation that cut this call was handled: the request's task goes on to answer."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _cut(st: ProxyState, s: Session) -> JSONResponse:
    s.mark("aborted", "call cut at the shutdown deadline")
    return error_response(503, cut_message(st.cfg.shutdown_grace_s), "proxy_shutting_down")


def _upstream_failed(st: ProxyState, s: Session, status: int, message: str) -> JSONResponse:
    s.mark("failed", message)
    st.count_error("upstream_timeout" if status == 504 else "upstream_unreachable")
    return error_response(status, message, "upstream_error")

async def _relay(st: ProxyState, call: InFlightCall, upstream: httpx.Response, stack: contextlib.AsyncExitStack,
                 aug: Augmented, body: dict[str, Any], chat: bool, ticket: Ticket,
                 obs: tuple[str | None, str | None], ephemeral: bool) -> AsyncIterator[bytes]:
    """Relay the upstream's SSE stream: every event read in one network read goes out in one
    write (one send per token would double the proxy's system calls), stripped of what the
    proxy added; the call is recorded once the stream is complete. A shutdown that cuts the
    call stops the reading and ends the client's stream with an error event."""
    s = call.session
    acc = StreamAccumulator(chat)
    recorded = failed = False
    strip = aug.added_token_ids or aug.added_logprobs  # else the client asked for all of it: relay as is

    def events(lines: list[bytes]) -> tuple[bytes, bool]:
        """The client's bytes for complete SSE lines, and whether ``[DONE]`` was among them
        (plain code, no await: it runs once per network read, not per token)."""
        nonlocal failed
        out: list[bytes] = []
        done = False
        for line in lines:
            line = line.rstrip(b"\r")
            if not line.strip():
                continue
            if not line.startswith(b"data:"):
                out.append(line + b"\n\n")
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                out.append(b"data: [DONE]\n\n")
                continue
            try:
                chunk = fast_loads(payload)
            except ValueError:
                out.append(line + b"\n\n")
                continue
            if not isinstance(chunk, dict):
                out.append(b"data: " + payload + b"\n\n")
                continue
            if "error" in chunk:
                failed = True
                s.mark("failed", f"upstream stream error: {str(chunk['error'])[:200]}")
                st.count_error("upstream_stream_error")
                out.append(b"data: " + payload + b"\n\n")
                continue
            acc.feed(chunk)
            if strip:
                strip_response(chunk, aug, chat=chat)
                out.append(b"data: " + fast_dumps(chunk) + b"\n\n")
            else:
                out.append(b"data: " + payload + b"\n\n")
        return b"".join(out), done

    async def pump(queue: asyncio.Queue[bytes | None]) -> None:
        """Read the upstream, turn what it sent into the client's bytes, queue them; None ends.
        An upstream that sends faster than the proxy relays leaves several HTTP chunks
        (SSE events) in one network read: they are all processed here before the relay
        below wakes, so they go out in one write instead of one each."""
        nonlocal recorded
        buf = b""
        async for part in upstream.aiter_bytes():
            *lines, buf = (buf + part).split(b"\n")
            out, done = events(lines)
            if done and not failed and not recorded and acc.finish_reason is not None:
                task = st.record_later(call, acc.response(), body, chat, ticket, obs, ephemeral)
                recorded = True
                if ephemeral:  # durable before the client sees [DONE]
                    await task
            if out:
                await queue.put(out)
        if buf:
            out, _ = events([buf])
            if out:
                await queue.put(out)
        if not recorded and not failed:
            if acc.finish_reason is not None:
                task = st.record_later(call, acc.response(), body, chat, ticket, obs, ephemeral)
                recorded = True
                if ephemeral:
                    await task
            else:
                s.mark("failed", "upstream stream ended without a finish reason")

    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=64)  # bounded: a slow client slows the reads
    reader = asyncio.create_task(pump(queue))
    reader.add_done_callback(lambda _: queue.put_nowait(None) if not queue.full() else None)
    call.stop_relay = reader.cancel
    try:
        while True:
            item = await queue.get()
            parts = [item] if item is not None else []
            while item is not None and not queue.empty():
                item = queue.get_nowait()
                if item is not None:
                    parts.append(item)
            if parts:
                yield b"".join(parts)
            if item is None or (reader.done() and queue.empty()):
                break
        if call.cut and reader.cancelled():
            s.mark("aborted", "call cut at the shutdown deadline")
            if not recorded and acc.token_ids and acc.prompt_token_ids is not None:
                acc.finish_reason = "abort"  # what the client got before the cut is stored, as vLLM names it
                st.record_later(call, acc.response(), body, chat, ticket, obs, ephemeral)
                recorded = True
            err = {"error": {"message": cut_message(st.cfg.shutdown_grace_s, partial=recorded),
                             "type": "proxy_shutting_down", "code": 503}}
            yield b"data: " + fast_dumps(err) + b"\n\n"
        else:
            await reader  # re-raises what broke the reading (httpx.HTTPError below)
    except httpx.HTTPError as e:
        s.mark("failed", f"upstream stream broke: {type(e).__name__}")
        st.count_error("upstream_stream_broken")
        err = {"error": {"message": f"upstream stream broke: {type(e).__name__}", "type": "upstream_error"}}
        yield b"data: " + fast_dumps(err) + b"\n\n"
    except BaseException:
        if not recorded:  # the client went away mid-stream (cancelled) or the server stops
            s.mark("aborted", "client disconnected mid-stream")
            st.count_error("client_disconnect")
        raise
    finally:
        call.stop_relay = None
        if not reader.done():  # the client went away: stop reading before the upstream is closed
            reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
        await stack.aclose()
        if not recorded:  # else the recording task ends the call
            call.end()
            if ephemeral:
                await st.end_session(s.key, "completed")
