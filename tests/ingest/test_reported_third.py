"""The third group of reported cases (../shared/fixtures/reported/README.md): real public files
that ingested with exit 0 and no word, each giving what its README says should be stored. The ATIF
summarisation and sub-agent cases of that group are stored as linked lineages."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers.ingest import END, GEN, SMOL_SYSTEM, USER, decoded, ingest
from trajstore import audit
from trajstore.ingest import ingest_paths
from trajstore.reader import read_trajectories
from trajstore.store import open_store


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
    rep = ingest_paths([str(reported / "nemo-gym-empty-model-name")], str(tmp_path / "s"))
    assert rep.problems == []
    (row,) = _rows(tmp_path / "s")
    assert row["model"] is None
    conn = audit.connect(open_store(str(tmp_path / "s")))  # what `traj sql` queries
    assert conn.execute("SELECT count(*) FROM trajectories WHERE model IS NULL").fetchone() == (1,)


# -- Harbor's context summarisation and its sub-agents as linked lineages -----------------------------
_SUB = ("summary", "questions", "answers")


def _harbor_trial(reported, tmp_path, *, subagents=True):
    """The four files laid out as Harbor writes them in a trial's agent/ folder (README of
    atif-subagent-history-as-actions): trajectory.json and trajectory.summarization-1-<kind>.json."""
    agent = tmp_path / "hello-world__x" / "agent"
    agent.mkdir(parents=True)
    shutil.copy(reported / "atif-summarization-context" / "trajectory.json", agent / "trajectory.json")
    for k in _SUB if subagents else ():
        shutil.copy(reported / "atif-subagent-history-as-actions"
                    / f"hello-world-context-summarization.trajectory.summarization-1-{k}.json",
                    agent / f"trajectory.summarization-1-{k}.json")
    return agent


def _doc(reported, name):
    folder = "atif-summarization-context" if name == "main" else "atif-subagent-history-as-actions"
    f = "trajectory.json" if name == "main" else f"hello-world-context-summarization.trajectory.summarization-1-{name}.json"
    return json.loads((reported / folder / f).read_text())


# reported: ../shared/fixtures/reported/atif-summarization-context and atif-subagent-history-as-actions
def test_harbor_summarisation_and_subagents_are_linked_lineages(reported, tok, tmp_path):
    main, questions = _doc(reported, "main"), _doc(reported, "questions")
    task, handoff = main["steps"][0]["message"], main["steps"][5]["message"]
    question_prompt, model_questions = questions["steps"][0]["message"], questions["steps"][1]["message"]
    ts, rep = ingest(_harbor_trial(reported, tmp_path))
    assert rep.problems == []
    part1, part2, summary, asked, answers = ts  # parents before children
    # the main agent's 7 calls, each stored once (not again in the sub-agents' replays of its history)
    calls = [c for t in ts for s in t.spans if s.kind == "action" for c in s.tool_call_ids or [s.call_id]]
    assert sorted(calls) == sorted(["call_0_1", "call_1_1", "call_2_1", "call_3_1", "call_4_1", "call_5_task_complete",
                                    "call_6_task_complete", "5", "2", "7"])  # + each sub-agent's own call (step id)
    # part 2: the context Terminus-2 reset the chat to (first message, question prompt, the model's
    # questions), then the handoff; never the old steps nor the step-5 harness note
    a7 = ('{\n  "analysis": "Based on the handoff, I need to create hello.txt with \'Hello, world!\' content.",\n'
          '  "plan": "I will use printf to create hello.txt with the required content.",\n  "commands": [\n    {\n'
          '      "keystrokes": "printf \'Hello, world!\\\\n\' > hello.txt\\n",\n      "duration": 0.1\n    }\n  ],\n'
          '  "task_complete": false\n}' + END)
    d2 = decoded(tok, part2)
    assert d2[:3] == [
        ("prompt", SMOL_SYSTEM + USER.format(task) + USER.format(question_prompt) + GEN + model_questions + END
         + "\n" + USER.format(handoff) + GEN),
        ("action", a7),
        ("observation", "\n" + USER.format("New Terminal Output:\n\nroot@CONTAINER_ID:/app# printf 'Hello, world!\\n' "
                                           "> hello.txt\n\n\n") + GEN)]
    assert [k for k, _ in d2] == ["prompt"] + ["action", "observation"] * 4
    assert [k for k, _ in decoded(tok, part1)] == ["prompt"] + ["action", "observation"] * 3
    assert not any("Performed context summarization" in x for t in (part1, part2) for _, x in decoded(tok, t))
    assert [n["step_id"] for n in part1.metadata["harness_notes"]] == [5]
    # one episode: part 2 rewrites part 1's context (sharing the default system prompt, the task and the
    # next turn's header); each sub-agent is a child of the lineage its summarisation ended
    assert {t.episode_id for t in ts} == {part1.trajectory_id} and part1.parent_trajectory_id is None
    assert (part2.parent_trajectory_id, part2.link_kind) == (part1.trajectory_id, "context_rewrite")
    assert tok.decode(part2.tokens[:part2.fork_point]) == SMOL_SYSTEM + USER.format(task) + "<|im_start|>"
    for t in (summary, asked, answers):  # engine ids of no named tokenizer: no token shared with part 1
        assert (t.parent_trajectory_id, t.link_kind, t.fork_point) == (part1.trajectory_id, "subagent", 0)
    # each sub-agent's own call with its engine ids: the prompt is the whole context it was sent
    for t, k in zip((summary, asked, answers), _SUB):
        own = _doc(reported, k)["steps"][-1]["metrics"]
        assert t.token_source == "engine" and t.logprob_source == "engine"
        assert t.tokens.tolist() == own["prompt_token_ids"] + own["completion_token_ids"]
        assert [(s.kind, s.start, s.end) for s in t.spans] == [
            ("prompt", 0, len(own["prompt_token_ids"])), ("action", len(own["prompt_token_ids"]), len(t.tokens))]
        assert t.action_logprobs[len(own["prompt_token_ids"]):].tolist() == pytest.approx(own["logprobs"])
    # the main file's made-up ids chain within neither lineage: both discards counted under one name
    assert rep.engine_ids_discarded == 2 == rep.fidelity_gaps["engine_ids_discarded"]
    assert all("engine_ids_discarded" in t.metadata["fidelity_gaps"] for t in (part1, part2))
    # stored: parents before children, lineage columns as built
    srep = ingest_paths([str(tmp_path)], str(tmp_path / "s"))
    assert srep.written_ids == [t.trajectory_id for t in ts]
    rows = {r["trajectory_id"]: r for r in _rows(tmp_path / "s")}
    assert [(rows[t.trajectory_id]["parent_trajectory_id"], rows[t.trajectory_id]["link_kind"],
             rows[t.trajectory_id]["episode_id"]) for t in ts] == [
        (None, None, part1.trajectory_id), (part1.trajectory_id, "context_rewrite", part1.trajectory_id)] + [
        (part1.trajectory_id, "subagent", part1.trajectory_id)] * 3


# reported: ../shared/fixtures/reported/atif-summarization-context
def test_harbor_summarisation_alone_is_flagged_where_the_reset_context_is_not_in_the_file(reported, tok, tmp_path):
    (part1, part2), rep = ingest(reported / "atif-summarization-context")
    task, handoff = (_doc(reported, "main")["steps"][i]["message"] for i in (0, 5))
    assert decoded(tok, part2)[0] == ("prompt", SMOL_SYSTEM + USER.format(task) + USER.format(handoff) + GEN)
    assert "trajectory.summarization-1-questions.json" in part2.metadata["fidelity_gaps"]["context_rewritten"]
    assert (part2.parent_trajectory_id, part2.link_kind) == (part1.trajectory_id, "context_rewrite")


# reported: ../shared/fixtures/reported/atif-subagent-history-as-actions
def test_harbor_subagent_files_store_only_their_own_calls(reported, tok):
    ts, rep = ingest(reported / "atif-subagent-history-as-actions")
    assert rep.problems == [] and rep.engine_ids_discarded == 0
    by_kind = {t.metadata["session_id"].rsplit("-", 1)[-1]: t for t in ts}
    for k in _SUB:  # the replayed main-agent steps are context: one action, the engine's ids kept
        t = by_kind[k]
        assert [s.kind for s in t.spans] == ["prompt", "action"]
        assert t.token_source == "engine" and t.parent_trajectory_id is None  # no main file here: a root
        assert "action_text" not in (t.metadata.get("fidelity_gaps") or {})  # the copies' rebuilt JSON is context


def test_harbor_continuation_file_is_linked_and_its_copied_steps_are_context(reported, tok, tmp_path):
    """Harbor's linear_history mode: trajectory.json ends at the summarisation and names
    trajectory.cont-1.json, which starts with the reset chat as copied steps, then the handoff."""
    main, questions = _doc(reported, "main"), _doc(reported, "questions")
    steps = [{k: v for k, v in s.items() if k != "metrics"} for s in main["steps"]]  # text only: no ids to chain
    head = {k: v for k, v in main.items() if k != "steps"}
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "trajectory.json").write_text(json.dumps({**head, "steps": steps[:5],
                                                       "continued_trajectory_ref": "trajectory.cont-1.json"}))
    copied = [{"step_id": 1, "source": "user", "message": steps[0]["message"], "is_copied_context": True},
              {"step_id": 2, "source": "user", "message": questions["steps"][0]["message"], "is_copied_context": True},
              {"step_id": 3, "source": "agent", "message": questions["steps"][1]["message"], "is_copied_context": True}]
    rest = [{**s, "step_id": 4 + i} for i, s in enumerate(steps[5:])]
    cont = {**head, "session_id": "NORMALIZED_SESSION_ID-cont-1", "steps": copied + rest,
            "agent": {**head["agent"], "extra": {**head["agent"]["extra"], "continuation_index": 1}}}
    (agent / "trajectory.cont-1.json").write_text(json.dumps(cont))
    (first, nxt), rep = ingest(agent)  # cont-1 sorts before trajectory.json: still stored after its parent
    assert rep.problems == [] and first.metadata["session_id"] == "NORMALIZED_SESSION_ID"
    assert (nxt.parent_trajectory_id, nxt.link_kind, nxt.episode_id) == (first.trajectory_id, "continuation",
                                                                         first.trajectory_id)
    d = decoded(tok, nxt)
    assert d[0] == ("prompt", SMOL_SYSTEM + USER.format(steps[0]["message"]) + USER.format(questions["steps"][0]["message"])
                    + GEN + questions["steps"][1]["message"] + END + "\n" + USER.format(steps[5]["message"]) + GEN)
    assert [k for k, _ in d].count("action") == 4 and [k for k, _ in decoded(tok, first)].count("action") == 3
