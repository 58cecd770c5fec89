"""Relaying an upstream's SSE stream to the client (:func:`relay`): every event read in one network
read goes out in one write (one send per token would double the proxy's system calls), stripped of
what the proxy added; the call is recorded once the stream is complete. A shutdown that cuts the
call stops the reading and ends the client's stream with an error event, as does an upstream
stream that breaks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

import httpx

from trajstore.proxy.inflight import InFlightCall
from trajstore.proxy.shutdown import cut_message
from trajstore.proxy.state import ProxyState
from trajstore.proxy.upstream import Augmented, StreamAccumulator, fast_dumps, fast_loads, strip_response

QUEUED_READS = 64
"""Network reads waiting for the client at most: a slow client slows the reading of the upstream."""


def _has_output(chunk: dict[str, Any]) -> bool:
    """A stream chunk carries generated output (a token: content, reasoning, a tool call's text, or
    token ids), not only the role or the usage."""
    for ch in chunk.get("choices") or ():
        if not isinstance(ch, dict):
            continue
        if ch.get("token_ids") or ch.get("text"):
            return True
        d = ch.get("delta")
        if isinstance(d, dict) and (d.get("content") or d.get("reasoning_content") or d.get("tool_calls")):
            return True
    return False


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + fast_dumps(event) + b"\n\n"


class _StreamReader:
    """Reads the upstream's stream for :func:`relay`: turns its lines into the client's bytes
    (:meth:`client_bytes`), accumulates the answer and records it once it is complete."""

    def __init__(self, st: ProxyState, call: InFlightCall, upstream: httpx.Response, aug: Augmented):
        self.st = st
        self.call = call
        self.upstream = upstream
        self.aug = aug
        self.acc = StreamAccumulator(call.chat)
        self.failed = False
        """The upstream sent an error event: the call is not recorded."""
        self.strip = aug.added_token_ids or aug.added_logprobs  # else the client asked for all of it: relay as is

    def client_bytes(self, lines: list[bytes]) -> tuple[bytes, bool]:
        """The client's bytes for complete SSE lines, and whether ``[DONE]`` was among them
        (plain code, no await: it runs once per network read, not per token)."""
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
                self.failed = True
                self.call.session.mark("failed", f"upstream stream error: {str(chunk['error'])[:200]}")
                self.st.count_error("upstream_stream_error")
                out.append(b"data: " + payload + b"\n\n")
                continue
            if self.call.first_token_at is None and _has_output(chunk):
                self.call.first_token_at = datetime.now(timezone.utc)
            self.acc.feed(chunk)
            if self.strip:
                strip_response(chunk, self.aug, chat=self.call.chat)
                out.append(_sse(chunk))
            else:
                out.append(b"data: " + payload + b"\n\n")
        return b"".join(out), done

    async def record(self, *, durable: bool) -> None:
        """Hand the answer accumulated so far to the recorder (`durable`: wait until it is written,
        for a call without a session, before the client sees the end)."""
        task = self.st.record_later(self.call, self.acc.response())
        if durable:
            await task

    async def record_if_finished(self) -> bool:
        """Record the call once its answer has a finish reason and no error; True once recorded."""
        if not self.call.answered and not self.failed and self.acc.finish_reason is not None:
            await self.record(durable=self.call.ephemeral)
        return self.call.answered

    async def pump(self, queue: asyncio.Queue[bytes | None]) -> None:
        """Read the upstream, turn what it sent into the client's bytes, queue them. An upstream
        that sends faster than the proxy relays leaves several HTTP chunks (SSE events) in one
        network read: they are all processed here before the relay wakes, so they go out in
        one write instead of one each."""
        buf = b""
        async for part in self.upstream.aiter_bytes():
            *lines, buf = (buf + part).split(b"\n")
            out, done = self.client_bytes(lines)
            if done:
                await self.record_if_finished()
            if out:
                await queue.put(out)
        if buf:
            out, _ = self.client_bytes([buf])
            if out:
                await queue.put(out)
        if not await self.record_if_finished() and not self.failed:
            self.call.session.mark("failed", "upstream stream ended without a finish reason")

    async def cut_event(self) -> bytes:
        """The shutdown cut the call mid-stream: what the client got is recorded (finish reason
        ``abort``, as vLLM names it) and this error event ends its stream."""
        self.call.session.mark("aborted", "call cut at the shutdown deadline")
        if not self.call.answered and self.acc.token_ids and self.acc.prompt_token_ids is not None:
            self.acc.finish_reason = "abort"
            await self.record(durable=False)
        return _sse({"error": {"message": cut_message(self.st.cfg.shutdown_grace_s, partial=self.call.answered),
                               "type": "proxy_shutting_down", "code": 503}})

    def broken_event(self, e: httpx.HTTPError) -> bytes:
        """The upstream's stream broke: the episode fails and this error event ends the client's stream."""
        self.call.session.mark("failed", f"upstream stream broke: {type(e).__name__}")
        self.st.count_error("upstream_stream_broken")
        return _sse({"error": {"message": f"upstream stream broke: {type(e).__name__}", "type": "upstream_error"}})


async def _next_write(queue: asyncio.Queue[bytes | None], reader: asyncio.Task[None]) -> tuple[bytes, bool]:
    """What the reader queued, joined (what arrived while the client was being written to goes
    out in one write), and whether the reading has ended."""
    item = await queue.get()
    parts = [item] if item is not None else []
    while item is not None and not queue.empty():
        item = queue.get_nowait()
        if item is not None:
            parts.append(item)
    return b"".join(parts), item is None or (reader.done() and queue.empty())


async def relay(st: ProxyState, call: InFlightCall, upstream: httpx.Response, aug: Augmented,
                stack: contextlib.AsyncExitStack) -> AsyncIterator[bytes]:
    """The client's stream for `call`, whose upstream answered 200 with a stream: `stack` holds
    the upstream connection and the versioning's hold on the call, released when it ends (as
    is the call, unless its recording ends it)."""
    r = _StreamReader(st, call, upstream, aug)
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=QUEUED_READS)
    reader = asyncio.create_task(r.pump(queue))
    reader.add_done_callback(lambda _: queue.put_nowait(None) if not queue.full() else None)
    call.stop_relay = reader.cancel
    try:
        ended = False
        while not ended:
            out, ended = await _next_write(queue, reader)
            if out:
                yield out
        if call.cut and reader.cancelled():
            yield await r.cut_event()
        else:
            await reader  # re-raises what broke the reading (httpx.HTTPError below)
    except httpx.HTTPError as e:
        yield r.broken_event(e)
    except BaseException:
        if not call.answered:  # the client went away mid-stream (cancelled) or the server stops
            call.session.mark("aborted", "client disconnected mid-stream")
            st.count_error("client_disconnect")
        raise
    finally:
        call.stop_relay = None
        if not reader.done():  # the client went away: stop reading before the upstream is closed
            reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
        await stack.aclose()
        await st.release(call)
