"""A fast fake OpenAI-compatible upstream in vLLM's shape, for the proxy's tests and benchmark.

No model: a byte-level "tokenizer" (token id = byte value + 4; 1, 2, 3 frame chat messages,
0 ends a turn) renders chats prefix-stably, and each reply is a fixed text whose token
log-probs are -0.5 - 0.001 * position. ``POST /_fake/config`` changes its behaviour (HTTP
status to answer with, delays, a stream that stops half way); ``GET /_fake/seen`` returns the
Authorization headers it received. ``POST /update_weights_from_disk`` (SGLang's reload request,
as ``traj proxy --run`` sends it) makes the body's ``weight_version`` the reported one
and logs the request (``GET /_fake/loads``); config ``num_paused_requests`` is what its answer
reports as in flight (absent by default). With ``dialect: "vllm"`` it answers that request
404, as vLLM does, and reloads through vLLM's dev endpoints instead (``POST /collective_rpc``
``reload_weights``, then ``POST /reset_prefix_cache``; both logged); ``weight_version: None``
reports no version at all, as vLLM; ``model_root`` is the model path ``GET /v1/models`` reports
(``GET /_fake/models_served`` counts the times it was asked).

A call can be held at a named gate until the test opens it (``fake_hold`` in its body; see
:func:`fake_app`): a test then waits for the event it needs ("the call is at the upstream",
``GET /_fake/held``) and decides when the answer comes, instead of guessing with delays that a
loaded machine outlasts. ``POST /_fake/release`` opens a gate, or with ``{}`` every gate (what a
fixture does before it stops the server, whose shutdown waits for held calls).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

EOS = 0


def render(messages: list[dict[str, Any]], *, trim: bool = False) -> list[int]:
    """Prompt ids of a chat: ``1 role 2 content 0 3`` per message, then ``1 assistant 2``: the
    template appends its end-of-turn token (0) after every message's content, a reply cut by
    ``max_tokens`` included. `trim`: contents are stripped of surrounding whitespace first, as
    templates that ``| trim`` them do (Llama 3's)."""
    out: list[int] = []
    for m in messages:
        content = m.get("content") or ""
        if m.get("tool_calls"):
            content += json.dumps([tc["function"] for tc in m["tool_calls"]])
        if trim:
            content = content.strip()
        out += [1, *(b + 4 for b in str(m.get("role", "")).encode()), 2, *(b + 4 for b in content.encode()), EOS, 3]
    return out + [1, *(b + 4 for b in b"assistant"), 2]


def fake_app(*, reply: str = "ok", config: dict[str, Any] | None = None) -> FastAPI:
    """The fake upstream. `config` keys: ``status`` (int, answer every call with it), ``delay_s``
    (before answering), ``token_delay_s`` (between streamed tokens), ``cut_stream_after`` (close
    a stream after that many tokens, without a finish reason), ``weight_version`` (reported),
    ``reply`` (the text every call answers), ``trim`` (render contents stripped, see
    :func:`render`), ``dialect`` (``sglang``, or ``vllm``: see the module docstring),
    ``model_root`` (``GET /v1/models``'s ``root``), ``logprob_mode`` (reported there, as ``traj
    serve`` does; None = not reported, as vLLM). A request's ``max_tokens`` cuts the reply's
    ids (finish reason ``length``); its ``fake_delay_s`` and ``fake_token_delay_s`` replace
    ``delay_s`` and ``token_delay_s`` for that call. Its ``fake_hold`` (a gate name) holds it
    until ``POST /_fake/release {"name": <gate>}`` opens that gate (before it answers; a stream
    after its ``fake_hold_after`` tokens, default 0); ``GET /_fake/held`` counts the calls
    waiting at each gate."""
    app = FastAPI()
    cfg: dict[str, Any] = {"status": 200, "delay_s": 0.0, "token_delay_s": 0.0, "cut_stream_after": None,
                           "weight_version": "0", "reply": reply, "trim": False, "dialect": "sglang",
                           "model_root": "fake", "logprob_mode": None, "num_paused_requests": None, **(config or {})}
    seen: list[str] = []
    loads: list[dict[str, Any]] = []
    lock = threading.Lock()
    gates: dict[str, asyncio.Event] = {}
    held: dict[str, int] = {}
    all_open = [False]
    models_served = [0]

    def gate(name: str) -> asyncio.Event:
        if name not in gates:
            gates[name] = asyncio.Event()
            if all_open[0]:
                gates[name].set()
        return gates[name]

    async def hold(name: Any) -> None:
        if name is None:
            return
        name = str(name)
        held[name] = held.get(name, 0) + 1
        try:
            await gate(name).wait()
        finally:
            held[name] -= 1

    @app.post("/_fake/release")
    async def release(request: Request) -> dict[str, Any]:
        name = (await request.json()).get("name")
        if name is None:
            all_open[0] = True
        for g in [gate(str(name))] if name is not None else list(gates.values()):
            g.set()
        return {"released": name}

    @app.get("/_fake/held")
    async def get_held() -> dict[str, int]:
        return {k: v for k, v in held.items() if v}

    @app.post("/_fake/config")
    async def set_config(request: Request) -> dict[str, Any]:
        cfg.update(await request.json())
        return cfg

    @app.get("/_fake/seen")
    async def get_seen() -> list[str]:
        return list(seen)

    @app.post("/update_weights_from_disk")
    async def update_weights(request: Request) -> Any:
        if cfg["dialect"] == "vllm":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        body = await request.json()
        if not isinstance(body.get("model_path"), str):
            return JSONResponse({"success": False, "message": "model_path is required"}, status_code=400)
        loads.append(body)
        cfg["weight_version"] = str(body.get("weight_version", len(loads)))
        paused = {"num_paused_requests": cfg["num_paused_requests"]} if cfg["num_paused_requests"] is not None else {}
        return {"success": True, "message": f"loaded {body['model_path']}", "weight_version": cfg["weight_version"],
                **paused}

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> Any:
        if cfg["dialect"] != "vllm":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        body = await request.json()
        path = (body.get("kwargs") or {}).get("weights_path")
        if body.get("method") != "reload_weights" or not isinstance(path, str):
            return JSONResponse({"error": "unsupported"}, status_code=400)
        loads.append({"endpoint": "/collective_rpc", **body})
        return {"results": [None]}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Any:
        if cfg["dialect"] != "vllm":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        loads.append({"endpoint": "/reset_prefix_cache"})
        return JSONResponse(None)

    @app.get("/_fake/loads")
    async def get_loads() -> list[dict[str, Any]]:
        return list(loads)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        models_served[0] += 1
        mode = {"logprob_mode": cfg["logprob_mode"]} if cfg["logprob_mode"] is not None else {}
        return {"object": "list", "data": [{"id": "fake", "object": "model", "root": cfg["model_root"], **mode}]}

    @app.get("/_fake/models_served")
    async def get_models_served() -> int:
        return models_served[0]

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        with lock:
            seen.append(request.headers.get("authorization", ""))
        streaming = bool(body.get("stream"))
        hold_after = int(body.get("fake_hold_after") or 0) if streaming else 0
        if not hold_after:
            await hold(body.get("fake_hold"))
        delay = body.get("fake_delay_s", cfg["delay_s"])
        if delay:
            await asyncio.sleep(delay)
        if cfg["status"] != 200:
            return JSONResponse({"error": {"message": "fake upstream failure", "code": cfg["status"]}},
                                status_code=cfg["status"])
        prompt = render(body.get("messages") or [], trim=bool(cfg["trim"]))
        ids = [b + 4 for b in str(cfg["reply"]).encode()] + [EOS]
        finish = "stop"
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if limit is not None and int(limit) < len(ids):
            ids, finish = ids[:int(limit)], "length"
        text = bytes(t - 4 for t in ids if t != EOS).decode(errors="replace")
        lps = [-0.5 - 0.001 * i for i in range(len(ids))]
        rid = "chatcmpl-" + uuid.uuid4().hex
        want_ids = bool(body.get("return_token_ids"))
        want_lp = bool(body.get("logprobs"))
        entries = [{"token": chr(t - 4) if t >= 4 else "", "logprob": lp, "bytes": [], "top_logprobs": []}
                   for t, lp in zip(ids, lps)]
        if not streaming:
            ch: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "logprobs": {"content": entries} if want_lp else None, "finish_reason": finish}
            if want_ids:
                ch["token_ids"] = ids
            resp = {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": "fake",
                    "choices": [ch], "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                                               "total_tokens": len(prompt) + len(ids)},
                    **({"metadata": {"weight_version": cfg["weight_version"]}}
                       if cfg["weight_version"] is not None else {})}
            if want_ids:
                resp["prompt_token_ids"] = prompt
            return JSONResponse(resp)

        token_delay = body.get("fake_token_delay_s", cfg["token_delay_s"])

        async def events() -> Any:
            base = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": "fake"}
            first: dict[str, Any] = dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                         "finish_reason": None}])
            if want_ids:
                first["prompt_token_ids"] = prompt
            yield f"data: {json.dumps(first)}\n\n"
            for i, (t, e) in enumerate(zip(ids, entries)):
                if cfg["cut_stream_after"] is not None and i >= cfg["cut_stream_after"]:
                    return
                if hold_after and i == hold_after:
                    await hold(body.get("fake_hold"))
                if token_delay:
                    await asyncio.sleep(token_delay)
                ch = {"index": 0, "delta": {"content": e["token"]} if t != EOS else {},
                      "logprobs": {"content": [e]} if want_lp else None, "finish_reason": None}
                if want_ids:
                    ch["token_ids"] = [t]
                yield f"data: {json.dumps(dict(base, choices=[ch]))}\n\n"
            yield f"data: {json.dumps(dict(base, choices=[{'index': 0, 'delta': {}, 'finish_reason': finish}]))}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    return app
