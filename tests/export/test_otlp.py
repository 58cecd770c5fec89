"""trajstore/export/otlp.py: the three-turn store and a fork of it as OpenTelemetry traces, sent to a
receiver on loopback that decodes them with the official protobufs (opentelemetry-proto): a trace
per trajectory, a chat span per model call with its token ids, log-probs and policy version, an
execute_tool span per observation, the lineage as a link; the OTLP/JSON files parse to the same
request."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from tests.helpers.export import CREATED, UNCHECKED, three_turn_trajectories, write_store
from trajstore import TrajectoryBuilder
from trajstore.export import ExportError, ExportOptions, export_store

pb = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2",
                         reason="pip install 'trajstore[otlp]'")


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP traces receiver: decodes each body as ExportTraceServiceRequest."""

    received: list = []
    status = 200

    def do_POST(self):  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        req = pb.ExportTraceServiceRequest.FromString(body)
        type(self).received.append((self.path, self.headers["Content-Type"], req))
        out = pb.ExportTraceServiceResponse().SerializeToString()
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.received, _Receiver.status = [], 200
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1/traces", _Receiver.received
    srv.shutdown()
    srv.server_close()


def _attrs(span) -> dict:
    def value(v):
        kind = v.WhichOneof("value")
        if kind == "array_value":
            return [value(x) for x in v.array_value.values]
        return getattr(v, kind)
    return {a.key: value(a.value) for a in span.attributes}


def _store(tmp_path):
    t1, t2 = three_turn_trajectories()
    b = TrajectoryBuilder(trajectory_id="fork", model="m", tokenizer="tok")
    b.add_prompt([11, 12, 13])
    b.add_action([70, 71], [-1.5, -2.5], policy_version=9, call_id="f1",
                 sampling={"temperature": 0.6, "top_p": 0.9})
    fork = b.finish(created_at=CREATED).model_copy(update={"parent_trajectory_id": "t1", "fork_point": 3,
                                                          "link_kind": "fork", "episode_id": "t1"})
    return write_store(tmp_path / "s", [t1, t2, fork])


def test_every_model_call_reaches_the_receiver(tmp_path, receiver):
    url, received = receiver
    store = _store(tmp_path)
    r = export_store(store, "otlp", str(tmp_path / "otlp"), ExportOptions(allow_secrets=True, endpoint=url))
    assert r.files == ["part-00000.otlp.json"] and len(received) == 1
    path, ctype, req = received[0]
    assert (path, ctype) == ("/v1/traces", "application/x-protobuf")
    spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert r.sent_spans == len(spans) == 3 * 1 + 6 + 3 + 2  # a root per trajectory + one span per stored span
    by_trace: dict[bytes, list] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    assert len(by_trace) == 3  # a trace per trajectory
    roots = {_attrs(s)["trajstore.trajectory_id"]: s for s in spans if not s.parent_span_id}
    assert set(roots) == {"t1", "t2", "fork"}
    t1 = sorted((s for s in by_trace[roots["t1"].trace_id] if s.parent_span_id),
                key=lambda s: _attrs(s)["trajstore.span.index"])
    assert [s.name for s in t1] == ["prompt", "chat m", "execute_tool", "chat m", "execute_tool", "chat m"]
    assert all(s.parent_span_id == roots["t1"].span_id for s in t1)
    calls = [_attrs(s) for s in t1 if s.name == "chat m"]
    assert [(a["trajstore.token_ids"], a["trajstore.policy_version"], a["gen_ai.response.id"], a["gen_ai.operation.name"],
             a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) for a in calls] == [
        ([21, 22], 3, "c1", "chat", 3, 2), ([41, 42, 43], 4, "c2", "chat", 6, 3), ([61], 4, "c3", "chat", 11, 1)]
    lps = [x for a in calls for x in a["trajstore.logprobs"]]
    assert np.array_equal(np.float32(lps), np.float32([-0.1, -0.2, -0.3, -0.4, -0.5, -0.6]))
    assert calls[0]["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert _attrs(t1[2])["gen_ai.tool.call.id"] == "c1" and _attrs(t1[2])["trajstore.token_ids"] == [31]
    fork = roots["fork"]
    (link,) = fork.links
    assert (link.trace_id, link.span_id) == (roots["t1"].trace_id, roots["t1"].span_id)  # the lineage, as a link
    assert _attrs(link) == {"trajstore.link_kind": "fork", "trajstore.fork_point": 3,
                            "trajstore.parent_trajectory_id": "t1"}
    call = next(_attrs(s) for s in by_trace[fork.trace_id] if s.name == "chat m")
    assert (call["gen_ai.request.temperature"], call["gen_ai.request.top_p"]) == (0.6, 0.9)
    # the OTLP/JSON file is the same request, its ids in hex as the OTLP specification writes them
    from trajstore.export.otlp import request_from_json

    doc = json.loads((tmp_path / "otlp" / "part-00000.otlp.json").read_text())
    assert doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] == roots["t1"].trace_id.hex()
    assert request_from_json(doc) == req


def test_an_endpoint_that_refuses_fails_the_export_and_endpoint_is_otlp_only(tmp_path, receiver):
    url, received = receiver
    _Receiver.status = 503
    store = _store(tmp_path)
    with pytest.raises(ExportError, match=r"^http://127\.0\.0\.1:\d+/v1/traces answered 503 to part-00000\.otlp\.json"):
        export_store(store, "otlp", str(tmp_path / "o"), ExportOptions(allow_secrets=True, endpoint=url))
    assert len(received) == 1
    with pytest.raises(ExportError, match=r"^invalid --endpoint: only --to otlp sends"):
        export_store(store, "hf", str(tmp_path / "h"), ExportOptions(allow_secrets=True, endpoint="http://x"))
    export_store(store, "otlp", str(tmp_path / "plain"), UNCHECKED)  # no endpoint: the files only
    assert (tmp_path / "plain" / "part-00000.otlp.json").is_file()
