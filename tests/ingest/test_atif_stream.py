"""trajstore/ingest/formats/atif.py and atif_stream.py: ATIF streamed as JSONL (a header line, then one
step per line; real orchestrator files in tests/fixtures/ingest/atif_jsonl), the results that
system steps carry, and a log with no evidence of a model call."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from tests.helpers.faithful import FIXTURES, load, load_jsonl
from tests.helpers.ingest import GEN, TOOL_OBS, USER, call, ingest, span_texts, stored
from trajstore.cli.main import app
from trajstore.ingest import ingest_paths
from trajstore.ingest.formats import registry

DIR = FIXTURES / "atif_jsonl"
STREAM = DIR / "session-2025-12-05T07-45-57-649Z-x8251x.atif.jsonl"
WHOLE = DIR / "session-2025-12-05T07-45-57-649Z-x8251x.atif.json"
PARTIAL = DIR / "session-2025-12-05T08-00-23-404Z-ew8gut.atif.jsonl"


def test_a_streamed_atif_file_is_read_as_the_document_it_streams(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    for name in (STREAM.name, STREAM.name.replace(".atif.jsonl", ".index.json")):
        shutil.copy(DIR / name, d / name)
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(d)])
    assert res.exit_code == 0, res.output
    (row,) = stored(tmp_path / "s")
    meta = json.loads(row["metadata"])
    assert row["source"] == "atif" and meta["streamed"] is True
    assert meta["session_id"] == "session-2025-12-05T07-45-57-649Z-x8251x"
    # the header's root fields and the index's final_metrics (which the stream does not repeat)
    assert meta["final_metrics"] == load(DIR / STREAM.name.replace(".atif.jsonl", ".index.json"))["final_metrics"]
    # the same session written whole is the same trajectory
    rep = ingest_paths([str(WHOLE)], tmp_path / "w")
    assert rep.written_ids == [row["trajectory_id"]]


def test_a_stream_without_its_header_is_refused_naming_it(tmp_path):
    rep = ingest_paths([str(PARTIAL)], tmp_path / "s")
    (p,) = rep.problems
    assert p.kind == "malformed" and "no header line" in p.reason and "OpenHands" not in p.reason
    assert registry.detect_event(load_jsonl(PARTIAL)[0]).name == "atif"


def test_system_step_results_are_kept_with_their_content(tmp_path):
    ingest_paths([str(STREAM)], tmp_path / "s")
    (row,) = stored(tmp_path / "s")
    meta = json.loads(row["metadata"])
    steps = load_jsonl(STREAM)[1:]
    carried = {s["step_id"]: [r["content"] for r in s["observation"]["results"]] for s in steps
               if s["source"] == "system" and s.get("observation")}
    assert len(carried) == 3
    kept = {n["step_id"]: n.get("results") for n in meta["harness_notes"]}
    for step_id, contents in carried.items():  # the command outputs, verbatim
        assert kept[step_id] == [json.dumps(c, ensure_ascii=False) for c in contents]
    assert '"passed": false' in kept[2][0] and "SIGKILL" in kept[2][0]  # the failing typecheck
    assert "is not in the file" not in meta["fidelity_gaps"]["harness_notes"].split(";")[0]


def _atif(steps, **root):
    return {"schema_version": "ATIF-v1.5", "session_id": "s1", "agent": {"name": "an-agent", "model_name": "m"},
            "steps": steps, **root}


def test_a_system_step_answering_a_tool_call_is_that_calls_observation(tmp_path, tok):
    # ATIF 1.2+: results may sit on a system step; one answering a call is what the model read next
    doc = _atif([{"step_id": 1, "source": "user", "message": "Run the tests."},
                 {"step_id": 2, "source": "agent", "message": "Running.",
                  "tool_calls": [{"tool_call_id": "t1", "function_name": "bash", "arguments": {"cmd": "pytest"}}]},
                 {"step_id": 3, "source": "system", "message": "Tool result",
                  "observation": {"results": [{"source_call_id": "t1", "content": "1 failed: test_parse"}]}},
                 {"step_id": 4, "source": "agent", "message": "One test fails."}])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    (t,), rep = ingest(p)
    assert rep.problems == []
    assert span_texts(t, tok)[1:] == [
        ("action", "Running.\n" + call("bash", '{"cmd": "pytest"}') + "<|im_end|>"),
        ("observation", TOOL_OBS.format("1 failed: test_parse") + GEN),
        ("action", "One test fails.<|im_end|>")]
    assert t.spans[2].cause_id == "t1" and "harness_notes" not in t.metadata
    assert span_texts(t, tok)[0][1].endswith(USER.format("Run the tests.") + GEN)


def test_a_log_with_no_evidence_of_a_model_call_is_flagged_and_not_trained(tmp_path):
    (t,), _ = ingest(WHOLE)
    assert "0 prompt and 0 completion tokens" in t.metadata["fidelity_gaps"]["no_model_call"]
    assert t.not_trainable_reason.startswith("no evidence of a model call")
    # the same steps with one model's metrics are a model's calls
    doc = load(WHOLE)
    next(s for s in doc["steps"] if s["source"] == "agent")["metrics"] = {"prompt_tokens": 812, "completion_tokens": 40}
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    (t2,), _ = ingest(p)
    assert "no_model_call" not in t2.metadata["fidelity_gaps"] and t2.not_trainable_reason is None
    # ATIF 1.7: agent steps that made no model call say so
    doc = _atif([{"step_id": 1, "source": "user", "message": "go"},
                 {"step_id": 2, "source": "agent", "message": "dispatched", "llm_call_count": 0}])
    p.write_text(json.dumps(doc))
    (t3,), _ = ingest(p)
    assert "llm_call_count 0" in t3.metadata["fidelity_gaps"]["no_model_call"]


def test_stream_lines_are_atif_and_openhands_events_stay_openhands():
    header, step = load_jsonl(STREAM)[:2]
    assert registry.detect_event(header).name == "atif" and registry.detect_event(step).name == "atif"
    v0 = {"id": 3, "source": "agent", "action": "run", "args": {"command": "ls"}, "message": "Running command: ls"}
    assert registry.detect_event(v0).name == "openhands-v0-events"
    assert registry.detect_document(load(WHOLE)).name == "atif"
