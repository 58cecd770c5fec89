"""trajstore/ingest/formats/openhands_v1_completions.py: OpenHands V1 log_completions files (native and prompt-
based tool calling): span kinds and order, action and observation counts, rewards, the token oracle
(stored ids == the chat template's render of the whole conversation) and, on the real fixtures,
every span decoded against what the harness sent and the model generated."""

from __future__ import annotations

import json

import pytest

from tests.helpers.ingest import assert_linked, decoded, ingest
from trajstore.ingest import IngestReport, iter_trajectories
from trajstore.ingest.formats.openhands_v1_completions import parse_completion_log
from trajstore.ingest.records import Origin, RecordError


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_v1_completion_logs(tok, fix):
    d = fix / "openhands/sdk_v1_llm_completion_logs_2025-09"
    ts, r = ingest(d / "llm-logs", d / "nonfncall-llm-logs")
    native, prompt = sorted(ts, key=lambda t: t.metadata["tool_calling"])
    last = json.loads(sorted((d / "llm-logs").glob("*.json"))[-1].read_text())
    assert sum(s.kind == "action" for s in native.spans) == sum(m["role"] == "assistant"
                                                                 for m in last["messages"]) + 1
    p = decoded(tok, native)[0][1]
    assert f'"name": "{last["tools"][0]["function"]["name"]}"' in p and native.metadata["ingest"]["tools"] == \
        "system-text"
    assert_linked(native)
    # prompt-based tool calling: the tools are already in the system message, not added again
    assert prompt.metadata["ingest"]["tools"] is None
    assert "<function=execute_bash>" in tok.decode(prompt.tokens.tolist())


def test_v1_completion_logs_native_and_prompt_based(tok, fix):
    d = fix / "openhands/sdk_v1_llm_completion_logs_2025-09"
    r = IngestReport()
    ts = [t for t in iter_trajectories([str(d / "llm-logs"), str(d / "nonfncall-llm-logs")], report=r)]
    assert r.skipped["superseded_completion_log"] == 8  # 6 + 4 logs of two conversations
    native, prompt = sorted(ts, key=lambda t: t.metadata["tool_calling"])
    last = json.loads(sorted((d / "llm-logs").glob("*.json"))[-1].read_text())
    assert sum(s.kind == "action" for s in native.spans) == sum(m["role"] == "assistant" for m in last["messages"]) + 1
    assert native.spans[-1].kind == "action" and native.spans[-1].finish_reason == "tool_calls"
    text = tok.decode(prompt.tokens.tolist())
    assert "<function=execute_bash>" in text  # prompt-based calls kept verbatim
    obs = [s for s in prompt.spans if s.kind == "observation"]
    assert obs and all(s.cause_id for s in obs)  # linked through raw_messages


def test_prompt_based_completion_log_without_parsed_response_is_a_record_error():
    # raw_response is fine but response (which holds the parsed tool calls) has no choices:
    # a RecordError (reported as a problem), not a KeyError that stops the whole ingest
    d = {"messages": [{"role": "user", "content": "x"}], "response": {},
         "raw_response": {"choices": [{"message": {"content": "y"}}]}}
    with pytest.raises(RecordError, match="choices"):
        parse_completion_log(d, Origin("log.json"))
