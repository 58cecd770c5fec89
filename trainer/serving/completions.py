"""The generation endpoints of ``traj serve`` (``/v1/chat/completions``, ``/v1/completions``): one
parsed call through the engine, answered whole or streamed as server-sent events."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from trajstore.http.errors import error_response
from trajstore.http.limits import BodyError
from trajstore.http.openai_fields import RequestFieldError, read_completion_request
from trajstore.trainer.serving.chat import parse_tool_calls
from trajstore.trainer.serving.engine import DoneEvent, GenRequest, TokenEvent
from trajstore.trainer.serving.request import ParsedCall
from trajstore.trainer.serving.response import (
    Detokenizer,
    chat_logprob_entry,
    completion_logprobs,
    cut_at_stop,
    usage_of,
    version_spans,
)
from trajstore.trainer.serving.state import ServeApp


def sample_record(call: ParsedCall, token_ids: list[int], logprobs: list[float], versions: list[str],
                  finish_reason: str) -> dict[str, Any]:
    """One generation as ``--sample-log`` records it (ids, log-probs, version spans, finish reason, seed)."""
    return {"id": call.id, "endpoint": "chat" if call.chat else "completions", "prompt_token_ids": call.prompt_ids,
            "token_ids": token_ids, "logprobs": logprobs, "weight_version_spans": version_spans(versions),
            "finish_reason": finish_reason, "seed": call.sampling.seed}


DISCONNECT_POLL_S = 0.5
"""Seconds between checks that the client of a non-streamed request is still there."""


async def engine_events(app: ServeApp, call: ParsedCall, request: Any, *, watch_disconnect: bool = False) -> Any:
    """Submit `call` to the engine and yield its events; a client that goes away cancels it.

    A streamed response learns of the disconnect from Starlette (which stops the generator); a
    non-streamed one does not, so with `watch_disconnect` the request is polled every
    :data:`DISCONNECT_POLL_S` seconds and the engine request is cancelled when its client is gone
    (otherwise it kept generating to the end, and with static batching every later request waited).
    """
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[Any] = asyncio.Queue()
    req = GenRequest(call.prompt_ids, call.sampling, lambda ev: loop.call_soon_threadsafe(q.put_nowait, ev))
    app.engine.submit(req)
    next_check = loop.time() + DISCONNECT_POLL_S
    try:
        while True:
            if watch_disconnect and loop.time() >= next_check:  # by the clock: tokens may never pause
                next_check = loop.time() + DISCONNECT_POLL_S
                if await request.is_disconnected():
                    return
            if not q.empty():  # the common case while generating: no timer, no task per token
                ev = q.get_nowait()
            elif watch_disconnect:
                try:
                    ev = await asyncio.wait_for(q.get(), max(0.0, next_check - loop.time()))
                except asyncio.TimeoutError:
                    continue
            else:
                ev = await q.get()
            yield ev
            if isinstance(ev, DoneEvent):
                return
    finally:
        req.cancelled.set()


async def complete(st: ServeApp, request: Request, *, chat: bool) -> Any:
    """Answer one chat or text completion request: whole, or as a stream when it asks for one."""
    tok = st.tokenizer
    try:
        body, fields = await read_completion_request(request, st.max_request_bytes, chat=chat)
        call = ParsedCall(body, fields, chat=chat, app=st)
    except BodyError as e:
        return error_response(e.status, str(e))
    except RequestFieldError as e:  # a 400 naming the field, as vLLM answers (a 500 before: tools: "nope")
        return error_response(400, str(e), param=e.field)
    except ValueError as e:
        return error_response(400, str(e))
    if len(call.prompt_ids) + call.sampling.max_new_tokens > st.max_model_len:
        return error_response(400, f"prompt ({len(call.prompt_ids)} tokens) + max_tokens "
                                   f"({call.sampling.max_new_tokens}) exceeds the context length {st.max_model_len}")
    if call.stream:
        return StreamingResponse(stream_completion(st, call, request), media_type="text/event-stream")
    ids: list[int] = []
    lps: list[float] = []
    versions: list[str] = []
    entries: list[dict[str, Any]] = []
    done: DoneEvent | None = None
    async for ev in engine_events(st, call, request, watch_disconnect=True):
        if isinstance(ev, TokenEvent):
            ids.append(ev.token_id)
            lps.append(ev.logprob)
            versions.append(ev.version)
            if call.want_logprobs:
                entries.append(chat_logprob_entry(tok, ev.token_id, ev.logprob, ev.top))
        else:
            done = ev
    if done is None:  # the client went away: nobody reads an answer
        return Response(status_code=499)
    if done.error is not None:
        return error_response(503 if "weight update" in done.error or "shutting" in done.error else 500,
                              done.error, "server_error")
    det = Detokenizer(tok, set(call.sampling.stop_token_ids))
    det.ids = ids
    text, stopped = cut_at_stop(det.text(final=done.finish_reason == "stop"), call.stop_strings)
    finish = "stop" if stopped else done.finish_reason
    st.log_sample(sample_record(call, ids, lps, versions, finish))
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if chat:
        content, calls = parse_tool_calls(text) if call.tools else (text, [])
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = calls
            choice["finish_reason"] = "tool_calls"
            st.renderer.remember([c["id"] for c in calls], det.text(final=True))
        choice["message"] = msg
        choice["logprobs"] = {"content": entries} if call.want_logprobs else None
    else:
        choice["text"] = text
        choice["logprobs"] = completion_logprobs(tok, entries) if call.want_logprobs else None
    if call.return_token_ids:
        choice["token_ids"] = ids
        if not chat:
            choice["prompt_token_ids"] = call.prompt_ids
    choice["weight_version_spans"] = version_spans(versions)
    resp: dict[str, Any] = {"id": call.id, "object": "chat.completion" if chat else "text_completion",
                            "created": call.created, "model": st.model_name, "choices": [choice],
                            "usage": usage_of(len(call.prompt_ids), len(ids)),
                            "metadata": {"weight_version": versions[-1] if versions else st.engine.version}}
    if chat and call.return_token_ids:
        resp["prompt_token_ids"] = call.prompt_ids
    return JSONResponse(resp)


async def stream_completion(st: ServeApp, call: ParsedCall, request: Request) -> Any:
    """Server-sent events of one call: a chunk per token, the final chunk, usage if asked, [DONE]."""
    tok = st.tokenizer
    chat = call.chat
    obj = "chat.completion.chunk" if chat else "text_completion"
    det = Detokenizer(tok, set(call.sampling.stop_token_ids))
    ids: list[int] = []
    lps: list[float] = []
    versions: list[str] = []
    buffered = bool(call.tools) or bool(call.stop_strings)  # text is only final at the end

    def chunk(choice: dict[str, Any] | None, **extra: Any) -> str:
        d = {"id": call.id, "object": obj, "created": call.created, "model": st.model_name,
             "choices": [] if choice is None else [{"index": 0, **choice}], **extra}
        return f"data: {json.dumps(d)}\n\n"

    first_extra: dict[str, Any] = {}
    if call.return_token_ids and chat:
        first_extra["prompt_token_ids"] = call.prompt_ids
    if chat:
        yield chunk({"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None},
                    **first_extra)
    first = True
    async for ev in engine_events(st, call, request):
        if isinstance(ev, TokenEvent):
            k = len(ids)
            ids.append(ev.token_id)
            lps.append(ev.logprob)
            versions.append(ev.version)
            delta = det.push(ev.token_id)
            if buffered:
                delta = ""
            entry = chat_logprob_entry(tok, ev.token_id, ev.logprob, ev.top)
            choice: dict[str, Any] = {"finish_reason": None}
            if chat:
                choice["delta"] = {"content": delta} if delta else {}
                choice["logprobs"] = {"content": [entry]} if call.want_logprobs else None
            else:
                choice["text"] = delta
                choice["logprobs"] = completion_logprobs(tok, [entry]) if call.want_logprobs else None
                if first and call.return_token_ids:
                    choice["prompt_token_ids"] = call.prompt_ids
            if call.return_token_ids:
                choice["token_ids"] = [ev.token_id]
            choice["weight_version_spans"] = [[k, k + 1, ev.version]]
            first = False
            yield chunk(choice)
            continue
        if ev.error is not None:
            err = {"error": {"message": ev.error, "type": "server_error", "code": 503}}
            yield f"data: {json.dumps(err)}\n\n"
            return
        text, stopped = cut_at_stop(det.text(final=ev.finish_reason == "stop"), call.stop_strings)
        finish = "stop" if stopped else ev.finish_reason
        st.log_sample(sample_record(call, ids, lps, versions, finish))
        final: dict[str, Any] = {"finish_reason": finish}
        if chat:
            delta: dict[str, Any] = {}
            if buffered:
                content, calls = parse_tool_calls(text) if call.tools else (text, [])
                if content:
                    delta["content"] = content
                if calls:
                    delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
                    final["finish_reason"] = "tool_calls"
                    st.renderer.remember([c["id"] for c in calls], det.text(final=True))
            else:
                rest = text[len(det.sent):]
                if rest:
                    delta["content"] = rest
            final["delta"] = delta
            final["logprobs"] = None
        else:
            final["text"] = text if buffered else text[len(det.sent):]
            final["logprobs"] = None
        yield chunk(final, metadata={"weight_version": versions[-1] if versions else st.engine.version})
        if call.include_usage:
            yield chunk(None, usage=usage_of(len(call.prompt_ids), len(ids)))
        yield "data: [DONE]\n\n"
