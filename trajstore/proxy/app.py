"""The ``traj proxy`` ASGI application: OpenAI-compatible routes that forward to the upstream
and record every call (see :mod:`trajstore.proxy` for the whole picture).

Routes (each ``/v1/...`` route also exists under ``/s/<session>/v1/...``):

* ``POST /v1/chat/completions``, ``POST /v1/completions`` (streaming or not), ``GET /v1/models``;
* ``POST /s/<session>/reward`` ``{"reward": float, "raw": any}``;
* ``POST /s/<session>/finish`` ``{"status": "completed", "reward": ..., "prompt_id": ..., "group_id": ...,
  "metadata": {...}}``: ends the episode and returns once its trajectories are durable in the
  store (``prompt_id`` / ``group_id`` may also come as ``X-Prompt-Id`` / ``X-Group-Id`` headers on
  the session's first call; ``group_id`` is a GRPO group of rollouts of one prompt, none by
  default), with their ids, final status, the policy version of each action (``policy_versions``; the oldest
  for a mixed-version call, whose newest is in ``policy_versions_max``, else null) and the token count;
* ``GET /proxy/stats``: counters (``mixed_version_calls`` among them), per-version counts of the
  calls made by one version, open sessions, weight sync state;
* ``GET /health``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from trajstore.errors import TrajstoreError
from trajstore.proxy.config import GRACEFUL_SHUTDOWN_S, ProxyConfig
from trajstore.proxy.httpio import openai_error, read_json_object, read_limited
from trajstore.proxy.jsonio import fast_dumps, fast_loads, strict_json_loads
from trajstore.proxy.recorder import (
    RESERVED_METADATA_KEYS,
    Session,
    check_session_key,
)
from trajstore.proxy.request import RequestFieldError, check_request
from trajstore.proxy.staleness import StalenessOverflow
from trajstore.proxy.state import ProxyState
from trajstore.proxy.sync import Ticket
from trajstore.proxy.upstream import (
    Augmented,
    StreamAccumulator,
    augment,
    strip_response,
    synthesize_stream,
)

log = logging.getLogger("trajstore.proxy")
STATUSES = ("completed", "truncated", "aborted", "failed")

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


class _ClientAuth:
    """Refuses requests without the client token (when one is configured), ``/health`` aside.

    A plain ASGI middleware: Starlette's ``@app.middleware("http")`` runs every request through
    an extra task and memory streams, about 0.5 ms per call (bench/proxy.py)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            st: ProxyState = scope["app"].state.proxy
            if st.client_token:
                got = dict(scope["headers"]).get(b"authorization", b"")
                if not hmac.compare_digest(got, f"Bearer {st.client_token}".encode()):
                    await openai_error(401, "missing or wrong bearer token", "authentication_error")(
                        scope, receive, send)
                    return
        await self.app(scope, receive, send)


def create_app(cfg: ProxyConfig) -> FastAPI:
    """The proxy application for `cfg` (state is built when the server starts)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        st = ProxyState(cfg)
        app.state.proxy = st
        await st.start()
        try:
            yield
        finally:
            await st.stop()

    app = FastAPI(title="traj proxy", docs_url=None, redoc_url=None, lifespan=lifespan)
    limit = int(cfg.max_request_mb * 2**20)

    app.add_middleware(_ClientAuth)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        st: ProxyState = app.state.proxy
        return {"status": "ok", "policy_version": st.versioning.version}

    @app.get("/proxy/stats")
    async def stats() -> dict[str, Any]:
        st: ProxyState = app.state.proxy
        r = st.recorder
        out: dict[str, Any] = {
            **dict(r.stats), "open_sessions": len(r.sessions), "errors": dict(st.errors),
            "calls_by_version": {str(k): v for k, v in sorted(r.calls_by_version.items())},
            "policy_version": st.versioning.version, "reload_epoch": st.versioning.epoch,
            "uptime_s": round(time.time() - st.started, 1)}
        if st.sync is not None:
            out["weight_loads"] = [{"version": v, "seconds": round(s, 3)} for v, s in st.sync.loads]
            out["weight_load_failures"] = st.sync.failures
        if st.gate is not None:
            out["staleness_gate"] = {"capacity": st.gate.capacity, "running": st.gate.running,
                                     "unconsumed": st.gate.unconsumed, "held": st.gate.held,
                                     "refused": st.gate.refused}
        return out

    async def models(request: Request) -> Response:
        st: ProxyState = request.app.state.proxy
        headers = st.upstream_headers or _client_auth(st, request)
        try:
            r = await st.client.get("/v1/models", headers=headers)
        except httpx.HTTPError as e:
            return openai_error(502, f"upstream unreachable: {type(e).__name__}", "upstream_error")
        return Response(r.content, status_code=r.status_code, media_type="application/json")

    app.add_api_route("/v1/models", models, methods=["GET"])
    app.add_api_route("/s/{session}/v1/models", models, methods=["GET"])

    def _client_auth(st: ProxyState, request: Request) -> dict[str, str]:
        """Without a configured upstream key, a client's own Authorization header goes upstream
        (unless it is the proxy's token)."""
        got = request.headers.get("authorization")
        return {"Authorization": got} if got and not st.client_token else {}

    async def forward(request: Request, session: str | None, chat: bool) -> Response:
        st: ProxyState = request.app.state.proxy
        raw = await read_limited(request, limit)
        if raw is None:
            return openai_error(413, f"request body larger than {cfg.max_request_mb:g} MiB (--max-request-mb)")
        try:
            body = strict_json_loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError as e:
            return openai_error(400, f"request body is not a JSON object: {e}")
        try:  # a request the upstream would refuse never reaches it (nor fails the episode)
            fields = check_request(body, chat=chat)
        except RequestFieldError as e:
            return openai_error(400, str(e), param=e.field)
        if fields.n not in (None, 1):
            return openai_error(400, "traj proxy records one choice per call: n must be 1", param="n")
        key = session or request.headers.get("x-trajectory-id")
        try:
            key = check_session_key(key) if key else None
        except ValueError as e:
            return openai_error(400, str(e))
        if key is None and cfg.require_session:
            return openai_error(400, "no session: use the base URL http://HOST:PORT/s/<session>/v1 or an "
                               "X-Trajectory-Id header (--require-session)")
        ephemeral = key is None
        key = key or f"call-{uuid.uuid4().hex[:16]}"
        s = st.recorder.sessions.get(key)
        if s is None:
            if st.gate is not None:
                try:
                    await st.gate.admit()
                except StalenessOverflow as e:
                    st.count_error("staleness_refused")
                    return openai_error(503, str(e), "staleness_limit")
            s = st.recorder.open(key, prompt_id=request.headers.get("x-prompt-id"),
                                 group_id=request.headers.get("x-group-id"))
        s.begin()
        aug = augment(body, chat=chat, engine=cfg.engine)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        headers = st.upstream_headers or _client_auth(st, request)
        obs = _observation_of(body, chat)
        stack = contextlib.AsyncExitStack()
        handed_over = recording = False
        try:
            ticket = await stack.enter_async_context(st.versioning.call())
            if aug.stream_upstream:
                req = st.client.build_request("POST", path, content=fast_dumps(aug.body),
                                              headers={**headers, **_JSON_HEADERS})
                try:
                    upstream = await st.client.send(req, stream=True)
                except httpx.TimeoutException:
                    return _upstream_failed(st, s, 504, "upstream timed out")
                except httpx.HTTPError as e:
                    return _upstream_failed(st, s, 502, f"upstream unreachable: {type(e).__name__}")
                if upstream.status_code != 200:
                    content = await upstream.aread()
                    await upstream.aclose()
                    s.mark("failed", f"upstream HTTP {upstream.status_code}")
                    st.count_error(f"upstream_{upstream.status_code}")
                    return Response(content, status_code=upstream.status_code, media_type="application/json")
                stack.push_async_callback(upstream.aclose)
                handed_over = True
                return StreamingResponse(_relay(st, s, upstream, stack, aug, body, chat, ticket, obs, ephemeral),
                                         media_type="text/event-stream")
            try:
                r = await st.client.post(path, content=fast_dumps(aug.body), headers={**headers, **_JSON_HEADERS})
            except httpx.TimeoutException:
                return _upstream_failed(st, s, 504, "upstream timed out")
            except httpx.HTTPError as e:
                return _upstream_failed(st, s, 502, f"upstream unreachable: {type(e).__name__}")
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
            task = st.record_later(s, data, body, chat, ticket, obs, ephemeral)
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
                    s.end()
                    if ephemeral:
                        await st.end_session(key, "completed")

    def _upstream_failed(st: ProxyState, s: Session, status: int, message: str) -> JSONResponse:
        s.mark("failed", message)
        st.count_error("upstream_timeout" if status == 504 else "upstream_unreachable")
        return openai_error(status, message, "upstream_error")

    async def _relay(st: ProxyState, s: Session, upstream: httpx.Response, stack: contextlib.AsyncExitStack,
                     aug: Augmented, body: dict[str, Any], chat: bool, ticket: Ticket,
                     obs: tuple[str | None, str | None], ephemeral: bool) -> AsyncIterator[bytes]:
        """Relay the upstream's SSE stream: every event read in one network read goes out in one
        write (one send per token would double the proxy's system calls), stripped of what the
        proxy added; the call is recorded once the stream is complete."""
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
                    task = st.record_later(s, acc.response(), body, chat, ticket, obs, ephemeral)
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
                    task = st.record_later(s, acc.response(), body, chat, ticket, obs, ephemeral)
                    recorded = True
                    if ephemeral:
                        await task
                else:
                    s.mark("failed", "upstream stream ended without a finish reason")

        queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=64)  # bounded: a slow client slows the reads
        reader = asyncio.create_task(pump(queue))
        reader.add_done_callback(lambda _: queue.put_nowait(None) if not queue.full() else None)
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
            if not reader.done():  # the client went away: stop reading before the upstream is closed
                reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            await stack.aclose()
            if not recorded:  # else the recording task ends the call
                s.end()
                if ephemeral:
                    await st.end_session(s.key, "completed")

    # The model-call routes are plain Starlette routes: FastAPI's request handler (dependency
    # solving, exit stacks) has nothing to inject here and costs ~0.1-0.2 ms a call (bench/proxy.py).
    for chat, name in ((True, "chat/completions"), (False, "completions")):
        def make(chat: bool = chat) -> Any:
            async def call(request: Request) -> Response:
                return await forward(request, request.path_params.get("session"), chat)
            return call
        app.add_route(f"/v1/{name}", make(), methods=["POST"], include_in_schema=False)
        app.add_route(f"/s/{{session}}/v1/{name}", make(), methods=["POST"], include_in_schema=False)

    @app.post("/s/{session}/reward")
    async def reward(request: Request, session: str) -> JSONResponse:
        st: ProxyState = request.app.state.proxy
        body = await read_json_object(request, limit)
        r = None if body is None else body.get("reward")
        if not isinstance(r, (int, float)) or isinstance(r, bool) or not math.isfinite(r):
            return openai_error(400, "body must be {\"reward\": <finite number>, \"raw\": <any, optional>}")
        s = st.recorder.sessions.get(session)
        if s is None:
            return openai_error(404, f"no open session {session!r} (a session opens with its first call)")
        st.recorder.set_reward(s, float(body["reward"]), body.get("raw"))
        s.last_active = time.monotonic()
        return JSONResponse({"session": session, "reward": float(body["reward"])})

    @app.post("/s/{session}/finish")
    async def finish(request: Request, session: str) -> JSONResponse:
        st: ProxyState = request.app.state.proxy
        body = await read_json_object(request, limit)
        if body is None:
            return openai_error(400, "body must be a JSON object (strict JSON: no NaN or Infinity, which the store "
                               "would refuse after the session had ended)")
        status = body.get("status", "completed")
        if status not in STATUSES:
            return openai_error(400, f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        meta = body.get("metadata") or {}
        if not isinstance(meta, dict):
            return openai_error(400, "metadata must be a JSON object")
        reserved = sorted(set(meta) & RESERVED_METADATA_KEYS)
        if reserved:
            return openai_error(400, f"metadata keys {reserved} are the proxy's own (reserved: "
                               f"{', '.join(sorted(RESERVED_METADATA_KEYS))})")
        s = st.recorder.sessions.get(session)
        if s is None:
            return openai_error(404, f"no open session {session!r} (a session opens with its first call)")
        if "reward" in body:
            r = body["reward"]
            if r is not None and (not isinstance(r, (int, float)) or isinstance(r, bool) or not math.isfinite(r)):
                return openai_error(400, f"reward must be a finite number or null, got {r!r}")
            st.recorder.set_reward(s, None if r is None else float(r), body.get("reward_raw"))
        await s.wait_idle(60.0)  # a call still streaming its last bytes, or being recorded, comes first
        prompt_id = body.get("prompt_id")
        if prompt_id is not None and not isinstance(prompt_id, str):
            return openai_error(400, "prompt_id must be a string")
        group_id = body.get("group_id")
        if group_id is not None and not isinstance(group_id, str):
            return openai_error(400, "group_id must be a string (a GRPO group: rollouts of one prompt)")
        if group_id is not None:
            s.group_id = group_id
        try:
            trajs, final = await st.end_session(session, status, metadata=meta, prompt_id=prompt_id)
        except TrajstoreError as e:
            return openai_error(500, f"could not write the trajectories: {e}", "store_error")
        return JSONResponse({"session": session, "status": final,
                             "trajectories": [t.trajectory_id for t in trajs],
                             "policy_versions": [sp.policy_version for t in trajs for sp in t.spans
                                                 if sp.kind == "action"],
                             "policy_versions_max": [sp.policy_version_max for t in trajs for sp in t.spans
                                                     if sp.kind == "action"],
                             "num_tokens": sum(len(t.tokens) for t in trajs)})

    return app


def run_proxy(cfg: ProxyConfig, *, on_ready: Any = None) -> None:
    """Serve until SIGINT / SIGTERM; then open episodes are written as ``aborted``.

    Args:
        on_ready: called with the bound ``(host, port)`` once the socket listens.
    """
    import uvicorn

    from trajstore.proxy.server import listening_socket

    logging.basicConfig(level=logging.INFO, format="traj proxy: %(message)s")
    for noisy in ("httpx", "httpcore"):  # one INFO line per upstream request: 0.1-0.2 ms each, on the request path
        logging.getLogger(noisy).setLevel(logging.WARNING)
    app = create_app(cfg)
    sock = listening_socket(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # held episodes end at once (503): they would keep the graceful shutdown waiting for
            # its whole timeout, and a supervisor (traj demo) killed the proxy before the open
            # episodes were written as aborted
            st = getattr(app.state, "proxy", None)
            if st is not None and st.gate is not None:
                st.gate.closing = True
            super().handle_exit(sig, frame)

    server = _Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                                    access_log=False))
    if on_ready is not None:
        on_ready(host, port)
    # uvicorn re-raises a SIGTERM after its graceful shutdown; with this handler in place that
    # ends the process normally (exit 0) once everything is written.
    import signal

    signal.signal(signal.SIGTERM, lambda *_: None)
    server.run(sockets=[sock])
