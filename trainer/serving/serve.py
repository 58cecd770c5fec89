"""``traj serve``: an OpenAI-compatible server over a transformers causal LM (CPU or CUDA).

It answers ``/v1/chat/completions`` and ``/v1/completions`` (streaming or not) and
``/v1/models`` in vLLM's shape, including vLLM's extensions for RL: ``return_token_ids`` (the
sampled ``token_ids`` per choice and the ``prompt_token_ids``), per-token ``logprobs``,
``allowed_token_ids``, ``stop_token_ids``, ``guided_choice`` (also as ``structured_outputs.choice``).
Like SGLang it reports the weight version
(``metadata.weight_version``; ``GET /model_info``) and reloads weights with
``POST /update_weights_from_disk {"model_path": ..., "weight_version": ...}``. It is the rollout
server of ``traj demo`` and of the proxy's tests on machines without vLLM or SGLang; it is not
a high-throughput server (static batching, no paged attention).

Extensions of its own, used by ``traj proxy``: every choice carries ``weight_version_spans``
(``[[start, end, version], ...]`` over its generated tokens, so a call that crossed a reload
in ``retract`` mode says where), and ``--sample-log`` appends every generation to a JSONL file.
Log-probs describe the distribution each token was drawn from (temperature, top-k, top-p
applied), which is what ``traj train`` expects for its importance ratios.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from trajstore.errors import TrajstoreError
from trajstore.hub import SMOLLM2_ALIAS
from trajstore.proxy.request import ChatFields, check_request

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_TOOLS_SYSTEM = ("You may call one or more functions to assist with the user query. Function signatures "
                 "are within <tools></tools>:\n<tools>\n{tools}\n</tools>\nFor each function call, return a "
                 "JSON object with the function name and arguments within <tool_call></tool_call> tags:\n"
                 "<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>")


class ServeConfig(BaseModel):
    """Options of ``traj serve``."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(SMOLLM2_ALIAS, description="'smollm2-135m', a local HF directory, a .gguf file, or "
                                                  "'tiny-llama' / 'tiny-qwen3-moe' (random weights, tests)")
    tokenizer: str | None = Field(None, description="tokenizer (default: the model's; SmolLM2's for tiny models)")
    served_model_name: str | None = Field(None, description="name in /v1/models and responses (default: --model)")
    host: str = Field("127.0.0.1", description="interface to bind (loopback by default)")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0 = any free port)")
    device: str = Field("auto", description="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:N'")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="parameter dtype: auto = bfloat16 on CUDA, float32 on CPU")
    max_batch_size: int = Field(16, ge=1, description="requests sampled together at most")
    max_tokens_default: int = Field(256, ge=1, description="max_tokens when a request gives none")
    weight_version: str = Field("0", description="weight version reported until the first reload")
    seed: int = Field(0, description="seed of the tiny random models' weights")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's choice)")
    sample_log: str | None = Field(None, description="append every generation (ids, log-probs, versions) "
                                                     "to this JSONL file")


# -- chat rendering and tool calls -----------------------------------------------------------------


def _text_of(content: Any) -> str:
    """An OpenAI message content (string, None, or a list of parts) as text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")


@dataclass
class ChatRenderer:
    """Renders OpenAI chat messages into prompt token ids with the tokenizer's chat template.

    A template without tool support gets the Hermes convention: the tool signatures in the
    system prompt, tool calls as ``<tool_call>{json}</tool_call>`` text. An assistant turn that
    this server generated is rendered with the exact text it generated (looked up by its tool-call
    ids), so the next prompt extends the previous one whenever the tokenizer round-trips.
    """

    tokenizer: Any
    raw_by_call_id: OrderedDict[str, str] = field(default_factory=OrderedDict)
    max_remembered: int = 100_000
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def template_has_tools(self) -> bool:
        return "tools" in (getattr(self.tokenizer, "chat_template", None) or "")

    def remember(self, call_ids: list[str], raw: str) -> None:
        with self._lock:
            for cid in call_ids:
                self.raw_by_call_id[cid] = raw
            while len(self.raw_by_call_id) > self.max_remembered:
                self.raw_by_call_id.popitem(last=False)

    def _assistant_text(self, m: dict[str, Any]) -> str:
        calls = m.get("tool_calls") or []
        ids = [c.get("id") for c in calls if isinstance(c, dict)]
        with self._lock:
            raws = {self.raw_by_call_id.get(i) for i in ids if i}
        if calls and len(raws) == 1 and None not in raws:
            return raws.pop() or ""
        text = _text_of(m.get("content"))
        for c in calls:
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = fn.get("arguments")
            text += "<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}) + "\n</tool_call>"
        return text

    def messages_for_template(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> list[dict[str, str]]:
        """Plain ``{"role", "content"}`` messages (what a tool-less template can render)."""
        out: list[dict[str, str]] = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError(f"messages[{i}] must be an object with a role")
            role = m["role"]
            if role == "developer":
                role = "system"
            text = self._assistant_text(m) if role == "assistant" else _text_of(m.get("content"))
            out.append({"role": role, "content": text})
        if tools:
            sig = "\n".join(json.dumps(t.get("function", t)) for t in tools)
            block = _TOOLS_SYSTEM.format(tools=sig)
            if out and out[0]["role"] == "system":
                out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + block}
            else:
                out.insert(0, {"role": "system", "content": block})
        return out

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> list[int]:
        """Token ids of the conversation with the generation prompt (the assistant header)."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("the served tokenizer has no chat template; use /v1/completions")
        text = self.tokenizer.apply_chat_template(self.messages_for_template(messages, tools), tokenize=False,
                                                  add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split generated text into content and Hermes-style tool calls.

    Returns:
        (content without the tool-call blocks, or None when empty; tool calls in OpenAI's shape
        with fresh ``call_<hex>`` ids). A block whose JSON lacks a name is left in the content.
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    pos = 0
    for m in _TOOL_CALL.finditer(text):
        try:
            obj = json.loads(m.group(1))
            name = obj["name"]
            if not isinstance(name, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            continue
        kept.append(text[pos:m.start()])
        pos = m.end()
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
    kept.append(text[pos:])
    content = "".join(kept).strip() if calls else text
    return (content or None), calls


# -- one generation, seen from the HTTP side ---------------------------------------------------------


class _Detok:
    """Incremental detokenisation: text deltas that never end inside a multi-byte character."""

    def __init__(self, tokenizer: Any, stop_ids: set[int]):
        self.tok = tokenizer
        self.ids: list[int] = []
        self.sent = ""
        self.stop_ids = stop_ids

    def text(self, final: bool = False) -> str:
        ids = self.ids[:-1] if final and self.ids and self.ids[-1] in self.stop_ids else self.ids
        return self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def push(self, tok: int) -> str:
        self.ids.append(tok)
        if tok in self.stop_ids:
            return ""
        full = self.text()
        if full.endswith("\ufffd"):
            return ""
        delta, self.sent = full[len(self.sent):], full
        return delta


def _version_spans(versions: list[str]) -> list[list[Any]]:
    """[[start, end, version], ...] runs of equal versions over a call's tokens."""
    spans: list[list[Any]] = []
    for i, v in enumerate(versions):
        if spans and spans[-1][2] == v:
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1, v])
    return spans


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class _Call:
    """Parsed request of either endpoint: the prompt ids and the generation settings."""

    def __init__(self, body: dict[str, Any], *, chat: bool, app: ServeApp):
        from trajstore.trainer.serving.engine import Sampling

        self.chat = chat
        self.body = body
        # typed as vLLM types them; a bad field is a 400 naming it (a 500 before: tools: "nope", seed: 1e300)
        p = check_request(body, chat=chat)
        if p.n not in (1, None):
            raise ValueError("traj serve samples one choice per request (n = 1)")
        self.stream = bool(p.stream)
        self.include_usage = bool((p.stream_options or {}).get("include_usage"))
        self.return_token_ids = bool(p.return_token_ids)
        self.tools = None
        if chat:
            assert isinstance(p, ChatFields)
            self.tools = p.tools if p.tool_choice != "none" else None
            self.prompt_ids = app.renderer.prompt_ids(body["messages"], p.tools)
            self.want_logprobs = bool(p.logprobs)
            top = p.top_logprobs or 0
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
                prompt = prompt[0]
            if isinstance(prompt, str):
                self.prompt_ids = list(app.tokenizer(prompt)["input_ids"])
            elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                             for t in prompt):
                self.prompt_ids = [int(t) for t in prompt]
            else:
                raise ValueError("prompt must be a string or a non-empty list of token ids (one prompt)")
            self.want_logprobs = p.logprobs is not None and body.get("logprobs") is not False  # as the proxy reads it
            top = (p.logprobs or 0) if self.want_logprobs else 0
        vocab = app.vocab_size
        bad = [t for t in self.prompt_ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary [0, {vocab})")
        max_tokens = p.max_completion_tokens or p.max_tokens or app.cfg.max_tokens_default
        stop_ids = set(p.stop_token_ids or [])
        if not p.ignore_eos:
            stop_ids |= set(app.engine.eos_token_ids)
        allowed = p.allowed_token_ids
        structured = body.get("structured_outputs") or {}
        if not isinstance(structured, dict):
            raise ValueError("structured_outputs: must be an object")
        guided = body.get("guided_choice") or structured.get("choice")
        choices = None
        if guided is not None:
            if not isinstance(guided, list) or not guided or not all(isinstance(c, str) and c for c in guided):
                raise ValueError("guided_choice must be a non-empty list of non-empty strings")
            eos = app.engine.eos_token_ids[:1]
            choices = tuple(tuple(app.tokenizer(c, add_special_tokens=False)["input_ids"]) + tuple(eos)
                            for c in guided)
        self.sampling = Sampling(
            max_new_tokens=int(max_tokens), temperature=1.0 if p.temperature is None else p.temperature,
            top_p=1.0 if p.top_p is None else p.top_p, top_k=-1 if p.top_k is None else p.top_k,
            stop_token_ids=tuple(sorted(stop_ids)),
            allowed_token_ids=None if allowed is None else tuple(allowed),
            seed=p.seed, top_logprobs=top, choices=choices)
        if self.sampling.max_new_tokens < 1 or self.sampling.temperature < 0 or not 0 < self.sampling.top_p <= 1:
            raise ValueError("need max_tokens >= 1, temperature >= 0 and 0 < top_p <= 1")
        stop = p.stop
        self.stop_strings = [stop] if isinstance(stop, str) else [s for s in (stop or []) if s]
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())


class ServeApp:
    """State shared by the endpoints: config, tokenizer, engine, renderer, sample log."""

    def __init__(self, cfg: ServeConfig, tokenizer: Any, engine: Any, *, model_name: str, vocab_size: int,
                 max_model_len: int):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.engine = engine
        self.renderer = ChatRenderer(tokenizer)
        self.model_name = model_name
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self._log_lock = threading.Lock()

    def log_sample(self, call: _Call, token_ids: list[int], logprobs: list[float], versions: list[str],
                   finish_reason: str) -> None:
        if not self.cfg.sample_log:
            return
        rec = {"id": call.id, "endpoint": "chat" if call.chat else "completions", "prompt_token_ids": call.prompt_ids,
               "token_ids": token_ids, "logprobs": logprobs, "weight_version_spans": _version_spans(versions),
               "finish_reason": finish_reason, "seed": call.sampling.seed}
        with self._log_lock, open(self.cfg.sample_log, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


def _token_text(tok: Any, tid: int) -> str:
    return tok.decode([tid], skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _chat_logprob_entry(tok: Any, tid: int, lp: float, top: tuple[tuple[int, float], ...]) -> dict[str, Any]:
    s = _token_text(tok, tid)
    return {"token": s, "logprob": lp, "bytes": list(s.encode()),
            "top_logprobs": [{"token": _token_text(tok, a), "logprob": b, "bytes": list(_token_text(tok, a).encode())}
                             for a, b in top]}


def _cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    hits = [text.find(s) for s in stops if s in text]
    return (text[: min(hits)], True) if hits else (text, False)


async def _events(app: ServeApp, call: _Call, request: Any) -> Any:
    """Submit `call` to the engine and yield its events; a client that goes away cancels it."""
    from trajstore.trainer.serving.engine import DoneEvent, GenRequest

    loop = asyncio.get_running_loop()
    q: asyncio.Queue[Any] = asyncio.Queue()
    req = GenRequest(call.prompt_ids, call.sampling, lambda ev: loop.call_soon_threadsafe(q.put_nowait, ev))
    app.engine.submit(req)
    try:
        while True:
            ev = await q.get()
            yield ev
            if isinstance(ev, DoneEvent):
                return
    finally:
        req.cancelled.set()


def build_app(app_state: ServeApp) -> FastAPI:
    """The FastAPI application of ``traj serve`` around a ready :class:`ServeApp`."""
    from trajstore.trainer.serving.engine import DoneEvent, TokenEvent

    api = FastAPI(title="traj serve", docs_url=None, redoc_url=None)
    st = app_state
    tok = st.tokenizer

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    @api.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "weight_version": st.engine.version}

    @api.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": st.model_name, "object": "model", "created": 0,
                                            "owned_by": "trajstore", "max_model_len": st.max_model_len}]}

    @api.get("/model_info")
    async def model_info() -> dict[str, Any]:
        return {"model_path": st.cfg.model, "tokenizer_path": st.cfg.tokenizer or st.cfg.model,
                "is_generation": True, "weight_version": st.engine.version}

    @api.post("/flush_cache")
    async def flush_cache() -> dict[str, Any]:
        # Nothing to flush: KV caches live for one batch only and are recomputed after a reload.
        return {"success": True, "message": "traj serve keeps no prefix cache across requests"}

    @api.post("/update_weights_from_disk")
    async def update_weights(request: Request) -> JSONResponse:
        try:
            body = await request.json()
            path = body["model_path"]
            if not isinstance(path, str) or not path:
                raise KeyError
        except (ValueError, KeyError, TypeError):
            return error(400, "body must be a JSON object with a model_path string")
        mode = body.get("mode") or ("abort" if body.get("abort_all_requests") else "drain")
        if mode not in ("drain", "abort", "retract"):
            return error(400, f"mode must be drain, abort or retract, got {mode!r}")
        version = body.get("weight_version")
        fut = st.engine.reload(path, version=None if version is None else str(version), mode=mode)
        result = await asyncio.wrap_future(fut)
        return JSONResponse(result, status_code=200 if result["success"] else 400)

    async def complete(request: Request, *, chat: bool) -> Any:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            call = _Call(body, chat=chat, app=st)
        except ValueError as e:
            return error(400, str(e))
        if len(call.prompt_ids) + call.sampling.max_new_tokens > st.max_model_len:
            return error(400, f"prompt ({len(call.prompt_ids)} tokens) + max_tokens "
                              f"({call.sampling.max_new_tokens}) exceeds the context length {st.max_model_len}")
        if call.stream:
            return StreamingResponse(_stream(call, request), media_type="text/event-stream")
        ids: list[int] = []
        lps: list[float] = []
        versions: list[str] = []
        entries: list[dict[str, Any]] = []
        done: DoneEvent | None = None
        async for ev in _events(st, call, request):
            if isinstance(ev, TokenEvent):
                ids.append(ev.token_id)
                lps.append(ev.logprob)
                versions.append(ev.version)
                if call.want_logprobs:
                    entries.append(_chat_logprob_entry(tok, ev.token_id, ev.logprob, ev.top))
            else:
                done = ev
        assert done is not None
        if done.error is not None:
            return error(503 if "weight update" in done.error or "shutting" in done.error else 500,
                         done.error, "server_error")
        det = _Detok(tok, set(call.sampling.stop_token_ids))
        det.ids = ids
        text, stopped = _cut_at_stop(det.text(final=done.finish_reason == "stop"), call.stop_strings)
        finish = "stop" if stopped else done.finish_reason
        st.log_sample(call, ids, lps, versions, finish)
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
            choice["logprobs"] = _completion_logprobs(tok, entries) if call.want_logprobs else None
        if call.return_token_ids:
            choice["token_ids"] = ids
            if not chat:
                choice["prompt_token_ids"] = call.prompt_ids
        choice["weight_version_spans"] = _version_spans(versions)
        resp: dict[str, Any] = {"id": call.id, "object": "chat.completion" if chat else "text_completion",
                                "created": call.created, "model": st.model_name, "choices": [choice],
                                "usage": _usage(len(call.prompt_ids), len(ids)),
                                "metadata": {"weight_version": versions[-1] if versions else st.engine.version}}
        if chat and call.return_token_ids:
            resp["prompt_token_ids"] = call.prompt_ids
        return JSONResponse(resp)

    async def _stream(call: _Call, request: Request) -> Any:
        chat = call.chat
        obj = "chat.completion.chunk" if chat else "text_completion"
        det = _Detok(tok, set(call.sampling.stop_token_ids))
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
        async for ev in _events(st, call, request):
            if isinstance(ev, TokenEvent):
                k = len(ids)
                ids.append(ev.token_id)
                lps.append(ev.logprob)
                versions.append(ev.version)
                delta = det.push(ev.token_id)
                if buffered:
                    delta = ""
                entry = _chat_logprob_entry(tok, ev.token_id, ev.logprob, ev.top)
                choice: dict[str, Any] = {"finish_reason": None}
                if chat:
                    choice["delta"] = {"content": delta} if delta else {}
                    choice["logprobs"] = {"content": [entry]} if call.want_logprobs else None
                else:
                    choice["text"] = delta
                    choice["logprobs"] = _completion_logprobs(tok, [entry]) if call.want_logprobs else None
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
            text, stopped = _cut_at_stop(det.text(final=ev.finish_reason == "stop"), call.stop_strings)
            finish = "stop" if stopped else ev.finish_reason
            st.log_sample(call, ids, lps, versions, finish)
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
                yield chunk(None, usage=_usage(len(call.prompt_ids), len(ids)))
            yield "data: [DONE]\n\n"

    @api.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await complete(request, chat=True)

    @api.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await complete(request, chat=False)

    return api


def _completion_logprobs(tok: Any, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Chat-style log-prob entries as the legacy completions ``logprobs`` object."""
    offsets, pos = [], 0
    for e in entries:
        offsets.append(pos)
        pos += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}


# -- process entry -------------------------------------------------------------------------------------


class ServeError(TrajstoreError):
    """``traj serve`` cannot start (model, tokenizer or device)."""


def load_serve_app(cfg: ServeConfig) -> ServeApp:
    """Load the model and tokenizer and start the engine.

    Raises:
        ServeError: the device is not available; TrajstoreError: model or tokenizer not found.
    """
    import torch

    from trajstore.hub import load_tokenizer
    from trajstore.trainer.models import TINY_MODELS, load_policy
    from trajstore.trainer.serving.engine import Engine

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ServeError(f"--device {cfg.device}: CUDA is not available on this machine")
    tiny = cfg.model in TINY_MODELS
    tok_name = cfg.tokenizer or (SMOLLM2_ALIAS if tiny else cfg.model)
    tokenizer = load_tokenizer(tok_name)
    policy = load_policy(cfg.model, tiny_vocab_size=len(tokenizer) if tiny else 256, seed=cfg.seed)
    dtype = {"auto": torch.bfloat16 if device.startswith("cuda") else torch.float32, "float32": torch.float32,
             "bfloat16": torch.bfloat16, "float16": torch.float16}[cfg.dtype]
    model = policy.model.to(device=device, dtype=dtype).eval()
    model.config.use_cache = True
    for p in model.parameters():
        p.requires_grad_(False)
    eos = [t for t in {tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)}
           if isinstance(t, int)]
    engine = Engine(model, eos_token_ids=eos, version=cfg.weight_version, max_batch_size=cfg.max_batch_size)
    max_len = int(getattr(model.config, "max_position_embeddings", 8192) or 8192)
    return ServeApp(cfg, tokenizer, engine, model_name=cfg.served_model_name or cfg.model,
                    vocab_size=int(model.get_output_embeddings().weight.shape[0]), max_model_len=max_len)


def run_serve(cfg: ServeConfig, *, on_ready: Any = None) -> None:
    """Load, then serve until SIGINT / SIGTERM (uvicorn's handlers; in-flight requests end).

    Args:
        on_ready: called with the bound ``(host, port)`` once the socket listens.
    """
    import uvicorn

    from trajstore.proxy.server import listening_socket

    state = load_serve_app(cfg)
    api = build_app(state)
    sock = listening_socket(cfg.host, cfg.port)  # connections wait in the backlog until uvicorn accepts them
    host, port = sock.getsockname()[:2]
    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.should_exit:  # one line, at once: the stop itself takes seconds (in-flight requests, the engine)
                print("traj serve: stopping (in-flight requests end first, at most 10 s)", file=sys.stderr, flush=True)
            super().handle_exit(sig, frame)

    # lifespan off: the app has no startup/shutdown hooks, and uvicorn's lifespan task printed a
    # CancelledError traceback on Ctrl-C
    server = _Server(uvicorn.Config(api, log_level="warning", timeout_graceful_shutdown=10, lifespan="off"))
    if on_ready is not None:
        on_ready(host, port)
    # uvicorn re-raises a SIGTERM after its graceful shutdown; with this handler in place that
    # ends the process normally (exit 0) once everything is written.
    import signal

    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run(sockets=[sock])
    finally:
        state.engine.close()
