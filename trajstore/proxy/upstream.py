"""What ``traj proxy`` asks an OpenAI-compatible rollout server for, and how it reads the answer.

Two dialects (``--engine``):

* ``vllm`` (also ``traj serve``): ``return_token_ids: true`` gives each choice's sampled
  ``token_ids`` and the ``prompt_token_ids`` (top level for chat, per choice for completions;
  in streams, in the first chunk and as per-chunk deltas); ``logprobs`` gives one log-prob per
  sampled token. vLLM reports no weight version; ``traj serve`` reports
  ``metadata.weight_version`` and per-token ``weight_version_spans``.
* ``sglang``: the same ``return_token_ids`` request field (SGLang >= the release with
  sgl-project/sglang#30917; chat streams cannot carry the ids there, so the proxy asks SGLang
  for a non-streamed answer and streams it to the client itself), and the weight version of
  each non-streamed response in ``metadata.weight_version``.

Fields the proxy added to a request are removed from what the client gets back; the client
sees the response it would have seen without the proxy. The upstream's JSON goes through orjson
(:func:`fast_loads`, :func:`fast_dumps`); what clients send is read strictly first
(:mod:`trajstore.http.json_body`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from trajstore.adapters import ActionCall, action_from_openai_completion

UpstreamDialect = Literal["vllm", "sglang"]
"""The upstream's request/response dialect (``traj proxy --engine``; ``traj serve`` speaks vLLM's)."""


def fast_loads(raw: bytes) -> Any:
    """Parse an upstream's JSON: orjson (about 4x faster than ``json`` on a response with ids and
    log-probs), else the standard library, which also reads NaN, Infinity and integers beyond
    64 bits (an upstream may send them; the recorder decides what they mean)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def fast_dumps(obj: Any) -> bytes:
    """Compact JSON bytes (orjson; the standard library for what orjson cannot write, e.g. an
    integer beyond 64 bits a client passed through)."""
    try:
        return orjson.dumps(obj)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class Augmented:
    """A request body as sent upstream and what the proxy added to it.

    Attributes:
        body: the JSON body for the upstream.
        added_token_ids: ``return_token_ids`` was added (strip ``token_ids`` / ``prompt_token_ids``).
        added_logprobs: ``logprobs`` was added (strip the log-probs).
        stream_to_client: the client asked for a stream.
        stream_upstream: the upstream is asked for a stream (False when the proxy streams a
            non-streamed upstream answer itself, e.g. SGLang chat).
    """

    body: dict[str, Any]
    added_token_ids: bool
    added_logprobs: bool
    stream_to_client: bool
    stream_upstream: bool


def augment(body: dict[str, Any], *, chat: bool, engine: UpstreamDialect) -> Augmented:
    """The upstream request for a client request: token ids and log-probs switched on."""
    out = dict(body)
    added_ids = not out.get("return_token_ids")
    out["return_token_ids"] = True
    if chat:
        added_lp = not out.get("logprobs")
        out["logprobs"] = True
    else:
        added_lp = out.get("logprobs") is None or out.get("logprobs") is False
        if added_lp:
            out["logprobs"] = 0  # the sampled token's log-prob, no alternatives
    stream = bool(out.get("stream"))
    stream_up = stream and not (engine == "sglang" and chat)
    if stream and not stream_up:
        out["stream"] = False
        out.pop("stream_options", None)
    return Augmented(out, added_ids, added_lp, stream, stream_up)


def strip_response(resp: dict[str, Any], aug: Augmented, *, chat: bool) -> dict[str, Any]:
    """Remove what the proxy's additions put into a response or stream chunk (in place)."""
    if aug.added_token_ids:
        resp.pop("prompt_token_ids", None)
        for ch in resp.get("choices") or []:
            ch.pop("token_ids", None)
            ch.pop("prompt_token_ids", None)
    if aug.added_logprobs:
        for ch in resp.get("choices") or []:
            if "logprobs" in ch:
                ch["logprobs"] = None
    return resp


@dataclass
class CallResult:
    """One model call as the proxy records it.

    Attributes:
        action: token ids, log-probs, prompt ids, finish reason, tool-call ids (the SDK adapter's
            :class:`~trajstore.adapters.ActionCall`).
        model: the response's model name.
        version_spans: ``(start, end, version)`` over the generated tokens when the upstream
            reports per-token versions (``traj serve``), else None.
        reported_version: the response's ``metadata.weight_version`` (SGLang, ``traj serve``).
    """

    action: ActionCall
    model: str | None
    version_spans: list[tuple[int, int, str]] | None
    reported_version: str | None


def read_call(resp: dict[str, Any], request: dict[str, Any]) -> CallResult:
    """Parse a non-streamed upstream response (or an accumulated stream).

    Raises:
        AdapterError: no token ids, or log-probs that do not match them.
    """
    action = action_from_openai_completion(resp, request=request)
    ch = (resp.get("choices") or [{}])[0]
    spans = ch.get("weight_version_spans")
    vs = None
    if isinstance(spans, list) and spans:
        vs = [(int(a), int(b), str(v)) for a, b, v in spans]
    meta = resp.get("metadata")
    rv = meta.get("weight_version") if isinstance(meta, dict) else None
    return CallResult(action, resp.get("model"), vs, None if rv is None else str(rv))


@dataclass
class StreamAccumulator:
    """Folds SSE chunks of one choice into the equivalent non-streamed response."""

    chat: bool
    resp: dict[str, Any] = field(default_factory=dict)
    token_ids: list[int] = field(default_factory=list)
    content: list[Any] = field(default_factory=list)
    tokens: list[Any] = field(default_factory=list)
    token_logprobs: list[Any] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    spans: list[list[Any]] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    saw_logprobs: bool = False
    saw_token_ids: bool = False

    def feed(self, chunk: dict[str, Any]) -> None:
        for k in ("id", "model", "created"):
            if k in chunk and k not in self.resp:
                self.resp[k] = chunk[k]
        if isinstance(chunk.get("metadata"), dict):
            self.resp["metadata"] = chunk["metadata"]
        if isinstance(chunk.get("usage"), dict):  # the last chunk, when the client asked for include_usage
            self.resp["usage"] = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_token_ids = chunk["prompt_token_ids"]
        for ch in chunk.get("choices") or []:
            if ch.get("index", 0) != 0:
                continue
            if ch.get("prompt_token_ids") is not None:
                self.prompt_token_ids = ch["prompt_token_ids"]
            if ch.get("token_ids") is not None:
                self.saw_token_ids = True
                self.token_ids += ch["token_ids"]
            for s in ch.get("weight_version_spans") or []:
                self.spans.append(list(s))
            lp = ch.get("logprobs")
            if lp:
                self.saw_logprobs = True
                if self.chat:
                    self.content += lp.get("content") or []
                else:
                    self.tokens += lp.get("tokens") or []
                    self.token_logprobs += lp.get("token_logprobs") or []
            if self.chat:
                delta = ch.get("delta") or {}
                if delta.get("content"):
                    self.text.append(delta["content"])
                for tc in delta.get("tool_calls") or []:
                    slot = self.tool_calls.setdefault(int(tc.get("index", 0)), {"function": {"arguments": ""}})
                    if tc.get("id"):
                        slot["id"] = tc["id"]
                    fn = tc.get("function") or {}
                    if fn.get("name"):
                        slot["function"]["name"] = fn["name"]
                    slot["function"]["arguments"] += fn.get("arguments") or ""
            elif ch.get("text"):
                self.text.append(ch["text"])
            if ch.get("finish_reason"):
                self.finish_reason = ch["finish_reason"]

    def response(self) -> dict[str, Any]:
        """The accumulated response in the non-streamed shape."""
        ch: dict[str, Any] = {"index": 0, "finish_reason": self.finish_reason}
        if self.saw_token_ids:
            ch["token_ids"] = self.token_ids
        if self.chat:
            msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
            if self.tool_calls:
                msg["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
            ch["message"] = msg
            ch["logprobs"] = {"content": self.content} if self.saw_logprobs else None
        else:
            ch["text"] = "".join(self.text)
            ch["logprobs"] = ({"tokens": self.tokens, "token_logprobs": self.token_logprobs}
                              if self.saw_logprobs else None)
        if self.spans:
            ch["weight_version_spans"] = self.spans
        out = dict(self.resp, choices=[ch])
        if self.prompt_token_ids is not None:
            out["prompt_token_ids"] = self.prompt_token_ids
        return out


def synthesize_stream(resp: dict[str, Any], *, chat: bool, include_usage: bool) -> list[bytes]:
    """SSE events equivalent to a non-streamed response (for upstreams that cannot stream the
    token ids): one content chunk, one finish chunk, the usage chunk if asked, ``[DONE]``."""
    base = {k: resp[k] for k in ("id", "created", "model") if k in resp}
    base["object"] = "chat.completion.chunk" if chat else "text_completion"
    events: list[dict[str, Any]] = []
    for ch in resp.get("choices") or []:
        i = ch.get("index", 0)
        if chat:
            msg = ch.get("message") or {}
            delta: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
            if msg.get("tool_calls"):
                delta["tool_calls"] = [{"index": j, **tc} for j, tc in enumerate(msg["tool_calls"])]
            events.append({**base, "choices": [{"index": i, "delta": delta, "logprobs": ch.get("logprobs"),
                                                "finish_reason": None}]})
            events.append({**base, "choices": [{"index": i, "delta": {}, "logprobs": None,
                                                "finish_reason": ch.get("finish_reason")}]})
        else:
            events.append({**base, "choices": [{"index": i, "text": ch.get("text", ""), "logprobs": ch.get("logprobs"),
                                                "finish_reason": ch.get("finish_reason")}]})
    if include_usage and resp.get("usage") is not None:
        events.append({**base, "choices": [], "usage": resp["usage"]})
    return [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]


def parse_version(v: str | None) -> int | None:
    """A reported weight version as a policy version number (``"3"``, ``"v3"``), else None."""
    if v is None:
        return None
    s = str(v).strip().lower().removeprefix("v")
    if s.isdigit():
        return int(s)
    try:
        f = float(s)
    except ValueError:
        return None
    return int(f) if math.isfinite(f) and f == int(f) and f >= 0 else None
