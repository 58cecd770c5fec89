"""The third group of reported cases (../shared/fixtures/reported/README.md, issue 24): real public
files that ingested with exit 0 and no word, each giving what its README says should be stored.
The ATIF summarisation and sub-agent cases of that group are issue 23's (lineages)."""

from __future__ import annotations

import json
import shutil

from tests.helpers.ingest import GEN, decoded, ingest
from trajstore.ingest import ingest_paths
from trajstore.reader import read_trajectories


def _rows(store) -> list[dict]:
    return read_trajectories(str(store)).to_pylist()


# reported: ../shared/fixtures/reported/nemo-gym-reasoning-after-function-call
def test_reasoning_after_its_function_call_is_one_call(reported, tok):
    (t,), rep = ingest(reported / "nemo-gym-reasoning-after-function-call")
    spans = decoded(tok, t)
    # 2 model calls (function call + its reasoning; reasoning + message), not 3
    assert [k for k, _ in spans] == ["prompt", "action", "observation", "action"]
    assert ("observation", "\n" + GEN) not in spans  # no observation made only of template tokens
    assert all(x.startswith("<think>\n") for k, x in spans if k == "action")
    assert "item_order" in t.metadata["fidelity_gaps"] and "observations" not in t.metadata["fidelity_gaps"]
    assert rep.fidelity_gaps == {"item_order": 1}


# reported: ../shared/fixtures/reported/atif-tool-definitions-dropped
def test_atif_tool_definitions_reach_the_prompt(reported, tok):
    doc = json.loads((reported / "atif-tool-definitions-dropped" / "trajectory.json").read_text())
    names = [t["function"]["name"] for t in doc["agent"]["tool_definitions"]]
    assert names == ["execute_bash", "think", "finish", "execute_ipython_cell", "task_tracker", "str_replace_editor"]
    (t,), _ = ingest(reported / "atif-tool-definitions-dropped")
    prompt = decoded(tok, t)[0][1]
    assert "\n\n# Tools\n\n<tools>\n" in prompt and '"parameters": {' in prompt
    assert all(f'"name": "{n}"' in prompt for n in names)
    assert t.metadata["ingest"]["tools"] == "system-text"  # SmolLM2's template does not read tools=
    assert "tools" not in t.metadata["fidelity_gaps"]
    # the converter's bookkeeping steps 3 and 4 are no messages of the model's context
    assert "Retrieving content for" not in prompt and "Added workspace context" not in prompt
    assert [n["step_id"] for n in t.metadata["harness_notes"]] == [3, 4]
    assert t.status == "completed"  # the agent called finish


# reported: ../shared/fixtures/reported/atif-timeout-status
def test_timed_out_harbor_run_is_not_completed(reported, tmp_path):
    (t,), _ = ingest(reported / "atif-timeout-status")
    assert t.status == "aborted"  # no mark_task_complete, no status field: not completed without evidence
    assert "no mark_task_complete" in t.metadata["status_evidence"]
    # laid out as a Harbor trial whose result.json records the timeout: truncated, with the exception
    trial = tmp_path / "hello-world__abc"
    (trial / "agent").mkdir(parents=True)
    shutil.copy(reported / "atif-timeout-status" / "trajectory.json", trial / "agent" / "trajectory.json")
    (trial / "result.json").write_text(json.dumps({
        "task_name": "hello-world", "trial_name": "hello-world__abc", "agent_info": {"name": "terminus-2"},
        "exception_info": {"exception_type": "AgentTimeoutError", "exception_message": "Agent execution timed out "
                           "after 60.0 seconds", "exception_traceback": "", "occurred_at": "2025-11-01T00:00:00"}}))
    rep = ingest_paths([str(trial)], str(tmp_path / "s"))
    assert [p.kind for p in rep.problems] == ["no_trajectory"]  # result.json: read with the trajectory, not as one
    (row,) = _rows(tmp_path / "s")
    assert row["status"] == "truncated"
    assert "AgentTimeoutError" in json.loads(row["metadata"])["status_evidence"]


# reported: ../shared/fixtures/reported/swe-agent-demonstration-replayed
def test_demonstration_with_zero_model_stats_is_replayed(reported, tmp_path):
    rep = ingest_paths([str(reported / "swe-agent-demonstration-replayed")], str(tmp_path / "s"))
    assert rep.problems == []
    (row,) = _rows(tmp_path / "s")
    meta = json.loads(row["metadata"])
    assert meta["replayed"] is True  # all-zero stats (api_calls 0 included): hand-written, not a model's run
    assert (row["model"], row["status"], row["num_actions"]) == (None, "completed", 4)
    assert "model_calls" not in (meta.get("fidelity_gaps") or {})  # a demonstration made no model call to count


# reported: ../shared/fixtures/reported/openhands-v1-early-base-state
def test_early_v1_base_state_is_read_and_a_paused_callless_run_is_not_completed(reported, tmp_path):
    rep = ingest_paths([str(reported / "openhands-v1-early-base-state")], str(tmp_path / "s"))
    assert rep.refused == 0  # exit 0: base_state.json is conversation state, not a refused record
    assert [(p.kind, p.origin.path.endswith("base_state.json")) for p in rep.problems] == [("no_trajectory", True)]
    (row,) = _rows(tmp_path / "s")
    assert (row["status"], row["model"], row["num_actions"], row["trainable"]) == ("aborted", "gpt-4", 0, False)
    assert json.loads(row["metadata"])["execution_status"] == "paused"  # read from agent_status


# reported: ../shared/fixtures/reported/nemo-gym-empty-model-name
def test_empty_model_name_is_null(reported, tmp_path):
    from trajstore import audit
    from trajstore.store import open_store

    rep = ingest_paths([str(reported / "nemo-gym-empty-model-name")], str(tmp_path / "s"))
    assert rep.problems == []
    (row,) = _rows(tmp_path / "s")
    assert row["model"] is None
    conn = audit.connect(open_store(str(tmp_path / "s")))  # what `traj sql` queries
    assert conn.execute("SELECT count(*) FROM trajectories WHERE model IS NULL").fetchone() == (1,)
