"""OpenTelemetry: each trajectory as one trace, written as OTLP JSON (``part-NNNNN.otlp.json``, an
``ExportTraceServiceRequest`` each) and, with an endpoint, sent to an OTLP/HTTP collector
(Langfuse, Phoenix, Tempo, an OpenTelemetry Collector) as protobuf.

The trace: a root span ``invoke_agent {source}`` for the trajectory, and a child span per stored
span in order: ``chat {model}`` per model call (action), ``execute_tool`` per observation,
``prompt`` per prompt piece. GenAI semantic-convention attributes (``gen_ai.*``, semconv 1.37:
operation name, request model and sampling parameters, response id and finish reasons, token
usage, tool call ids) where they have one; the training data they have none for (token ids,
log-probs, policy versions, span boundaries, reward, trainability) as ``trajstore.*`` attributes.
The lineage (``parent_trajectory_id``) is a link to the parent trajectory's root span, with the
link kind and fork point as the link's attributes. The store keeps no per-call times: every span
of a trajectory starts and ends at its ``created_at``; ``trajstore.span.index`` gives the order.
Trace and span ids are derived from the trajectory id (SHA-256), so a trajectory exported twice
is the same trace and a link finds its parent.

The spans are built as ``opentelemetry-sdk`` ``ReadableSpan`` objects and encoded with the
OpenTelemetry exporter's own encoder (``opentelemetry-exporter-otlp-proto-common``); the JSON is
the OTLP/JSON mapping (ids as hex, as the OTLP specification requires, not protobuf's base64).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any, Final

import numpy as np

from trajstore import __version__
from trajstore.export.files import part_name, write_json
from trajstore.export.refusals import ExportError
from trajstore.export.samples import rows_of
from trajstore.export.target import Part, Target
from trajstore.extras import require
from trajstore.schema import ACTION_LOGPROBS_COLUMN

INSTALL_OTLP_EXTRA: Final[str] = "pip install 'trajstore[otlp]'"
"""Install command of the ``otlp`` extra (opentelemetry-sdk, its OTLP encoder and the protobufs)."""

NS: Final[str] = "trajstore"
"""The namespace of the attributes GenAI semantic conventions have no name for."""

_ID_FIELDS: Final[frozenset[str]] = frozenset({"traceId", "spanId", "parentSpanId"})


def _require() -> None:
    require(("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.common", "opentelemetry.proto"),
            what="traj export --to otlp", install=INSTALL_OTLP_EXTRA)


def trace_id(trajectory_id: str) -> int:
    """The 128-bit trace id of a trajectory (the first 16 bytes of SHA-256 of its id)."""
    return int.from_bytes(hashlib.sha256(trajectory_id.encode()).digest()[:16], "big") or 1


def span_id(trajectory_id: str, k: int | None = None) -> int:
    """The 64-bit id of the root span (`k` None) or of child span `k` of a trajectory."""
    key = trajectory_id if k is None else f"{trajectory_id}\0{k}"
    return int.from_bytes(hashlib.sha256(b"span\0" + key.encode()).digest()[:8], "big") or 1


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None and v != []}


def trajectory_spans(row: dict[str, Any]) -> list[Any]:
    """The OpenTelemetry spans (``ReadableSpan``) of one stored row (:func:`rows_of`): root first."""
    _require()
    # opentelemetry: the otlp extra, loaded only by this target
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags

    tid = row["trajectory_id"]
    trace = trace_id(tid)
    t = int(row["created_at"].timestamp() * 1e9) if row.get("created_at") else 0
    resource = Resource.create({"service.name": "trajstore", "trajstore.source": row["source"]})
    scope = InstrumentationScope("trajstore.export.otlp", __version__)

    def ctx(sid: int, trace_of: int = trace) -> SpanContext:
        return SpanContext(trace_of, sid, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))

    root = ctx(span_id(tid))
    links = []
    if row.get("parent_trajectory_id"):
        parent = row["parent_trajectory_id"]
        links.append(Link(ctx(span_id(parent), trace_id(parent)), _clean({
            f"{NS}.link_kind": row.get("link_kind"), f"{NS}.fork_point": row.get("fork_point"),
            f"{NS}.parent_trajectory_id": parent})))
    model = row.get("model")
    spans = [ReadableSpan(
        f"invoke_agent {row['source']}", root, None, resource, _clean({
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": row["source"],
            "gen_ai.request.model": model, "gen_ai.conversation.id": row.get("episode_id"),
            f"{NS}.trajectory_id": tid, f"{NS}.prompt_id": row.get("prompt_id"), f"{NS}.group_id": row.get("group_id"),
            f"{NS}.episode_id": row.get("episode_id"), f"{NS}.tokenizer": row.get("tokenizer"),
            f"{NS}.status": row["status"], f"{NS}.reward": row.get("reward"), f"{NS}.reward_raw": row.get("reward_raw"),
            f"{NS}.token_source": row["token_source"], f"{NS}.logprob_source": row["logprob_source"],
            f"{NS}.trainable": row["trainable"], f"{NS}.not_trainable_reason": row.get("not_trainable_reason"),
            f"{NS}.num_tokens": len(row["tokens"]), f"{NS}.metadata_json": row.get("metadata")}),
        links=links, kind=SpanKind.INTERNAL, start_time=t, end_time=t, instrumentation_scope=scope)]
    tokens = np.asarray(row["tokens"], np.int64)
    lps = np.asarray(row[ACTION_LOGPROBS_COLUMN], np.float64)
    for k, s in enumerate(row["spans"]):
        a, b = s["start"], s["end"]
        attrs: dict[str, Any] = {f"{NS}.span.index": k, f"{NS}.span.kind": s["kind"], f"{NS}.span.start": a,
                                 f"{NS}.span.end": b, f"{NS}.span.role": s.get("role"),
                                 f"{NS}.token_ids": tokens[a:b].tolist(), f"{NS}.call_id": s.get("call_id")}
        if s["kind"] == "action":
            name = f"chat {model}" if model else "chat"
            lo = s["logprob_start"]
            attrs.update({
                "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.response.id": s.get("call_id"),
                "gen_ai.response.finish_reasons": [s["finish_reason"]] if s.get("finish_reason") else None,
                "gen_ai.request.temperature": s.get("temperature"), "gen_ai.request.top_p": s.get("top_p"),
                "gen_ai.request.top_k": s.get("top_k"), "gen_ai.request.max_tokens": s.get("max_tokens"),
                "gen_ai.usage.input_tokens": a, "gen_ai.usage.output_tokens": b - a,
                f"{NS}.logprobs": lps[lo:lo + b - a].tolist() if row["logprob_source"] == "engine" else None,
                f"{NS}.policy_version": s.get("policy_version"), f"{NS}.policy_version_max": s.get("policy_version_max"),
                f"{NS}.min_p": s.get("min_p"), f"{NS}.sampling_params": s.get("sampling_params"),
                f"{NS}.tool_call_ids": s.get("tool_call_ids") or None})
        elif s["kind"] == "observation":
            name = "execute_tool"
            attrs.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": s.get("cause_id"),
                          f"{NS}.cause_id": s.get("cause_id"), f"{NS}.truncated": s.get("truncated")})
        else:
            name = "prompt"
        spans.append(ReadableSpan(name, ctx(span_id(tid, k)), root, resource, _clean(attrs),
                                  kind=SpanKind.CLIENT if s["kind"] == "action" else SpanKind.INTERNAL,
                                  start_time=t, end_time=t, instrumentation_scope=scope))
    return spans


def trace_request(rows: list[dict[str, Any]]) -> Any:
    """The ``ExportTraceServiceRequest`` (protobuf) of stored rows, by the exporter's own encoder."""
    _require()
    # opentelemetry: the otlp extra, loaded only by this target
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans([sp for row in rows for sp in trajectory_spans(row)])


def _ids(value: Any, to_hex: bool) -> Any:
    """Trace / span ids between protobuf JSON's base64 and OTLP/JSON's hex, recursively."""
    if isinstance(value, list):
        return [_ids(v, to_hex) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k in _ID_FIELDS and isinstance(v, str):
            out[k] = base64.b64decode(v).hex() if to_hex else base64.b64encode(bytes.fromhex(v)).decode()
        else:
            out[k] = _ids(v, to_hex)
    return out


def request_json(request: Any) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` as OTLP/JSON (camelCase fields, ids as hex; a NaN log-prob
    is the string ``"NaN"``, as the protobuf JSON mapping writes it)."""
    _require()
    from google.protobuf.json_format import MessageToDict  # protobuf: with the otlp extra

    return _ids(MessageToDict(request), to_hex=True)


def request_from_json(doc: dict[str, Any]) -> Any:
    """The ``ExportTraceServiceRequest`` of an OTLP/JSON document (:func:`request_json`)."""
    _require()
    from google.protobuf.json_format import ParseDict  # protobuf: with the otlp extra
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return ParseDict(_ids(doc, to_hex=False), ExportTraceServiceRequest())


def send(out_dir: str, files: list[str], endpoint: str, *, timeout: float = 30.0) -> int:
    """POST every OTLP/JSON file of an export to the OTLP/HTTP traces `endpoint` (e.g.
    ``http://localhost:4318/v1/traces``) as protobuf; returns the spans sent.

    Raises:
        ExportError: the endpoint cannot be reached or answers other than 2xx (naming the file,
            and saying that the folder is complete and how many spans were sent before).
    """
    import httpx  # the HTTP client of the proxy and the otlp extras, loaded only to send

    sent = 0
    for name in files:
        with open(os.path.join(out_dir, name), encoding="utf-8") as fh:
            req = request_from_json(json.load(fh))
        try:
            r = httpx.post(endpoint, content=req.SerializeToString(), timeout=timeout,
                           headers={"Content-Type": "application/x-protobuf"})
        except httpx.HTTPError as e:
            raise ExportError(f"cannot send {name} to {endpoint}: {e}{_written(out_dir, sent)}") from e
        if not 200 <= r.status_code < 300:
            raise ExportError(f"{endpoint} answered {r.status_code} to {name}: {r.text[:200]}{_written(out_dir, sent)}")
        sent += sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
    return sent


def _written(out_dir: str, sent: int) -> str:
    return f" (the export in {out_dir} is complete; {sent} spans were sent before this file)"


def write_part(part: Part) -> list[str]:
    rows = rows_of(part.rows)
    doc = request_json(trace_request(rows))
    return [write_json(part.out_dir, part_name(part.index, ".otlp.json"), doc)]


TARGET = Target(
    name="otlp", description="OpenTelemetry traces (OTLP/JSON; --endpoint sends them over OTLP/HTTP)",
    fields={}, required=frozenset(),
    alignment="a trace per trajectory: a chat span per model call, an execute_tool span per observation, a prompt "
              "span per prompt piece, token ids / log-probs / policy versions as trajstore.* attributes",
    checked_against="OTLP 1.x (opentelemetry-proto), GenAI semantic conventions 1.37",
    uses_samples=False, write=write_part, loader="an OTLP/HTTP collector, or ParseDict into ExportTraceServiceRequest")
