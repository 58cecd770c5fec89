"""trajstore/ingest/formats/openhands_v0_*.py: OpenHands V0 logs (event lists and GUI exports, session event
stores, eval and resolver outputs, feedback rows, SWE-Gym rows): span kinds and order, action and
observation counts, rewards, the token oracle (stored ids == the chat template's render of the whole
conversation) and, on the real fixtures, every span decoded against what the harness sent and the
model generated."""

from __future__ import annotations

import json

from tests.helpers.ingest import (
    END,
    GEN,
    SMOL_SYSTEM,
    SYS,
    TOOL_OBS,
    USER,
    assert_each_once_in_order,
    assert_linked,
    build,
    call,
    decoded,
    ingest,
    kinds,
    only_row,
    tool_obs,
)
from trajstore.ingest import IngestReport, ingest_paths, iter_trajectories


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_v0_eval_output(tok, fix):
    path = fix / "openhands/v0_eval_output_multi_swe_bench_v0.35/output.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    ts, _ = ingest(path)
    t = ts[0]
    d = decoded(tok, t)
    # the system action's text and its tool definitions (plain text: SmolLM2 renders no tools)
    assert d[0][1].startswith("<|im_start|>system\nYou are OpenHands agent, a helpful AI assistant that can "
                              "interact with a computer to solve tasks.\n\n<ROLE>\n")
    assert '# Tools\n\n<tools>\n{"description": "Execute a bash command in the terminal' in d[0][1]
    assert d[0][1].endswith(GEN)
    assert d[1] == ("action", "The task involves fixing an issue in the `ponylang__ponyc__0.1` repository where the "
                              "`ponyc` compiler segfaults when using a single-element tuple in a `match` statement. I'll "
                              "start by exploring the repository to understand its structure and identify relevant "
                              "files.\n\nFirst, I'll list the contents of the `/workspace/ponylang__ponyc__0.1` "
                              "directory to get an overview of the repository's structure.\n"
                              + call("execute_bash", '{"command": "ls -l /workspace/ponylang__ponyc__0.1"}') + END)
    # the run observation as CodeAct sent it: output + suffix + working directory + exit code
    # (py_interpreter_path is "" so that line is absent)
    assert d[2][0] == "observation" and d[2][1].startswith(
        "\n<|im_start|>tool\ntotal 300\n-rw-r--r--  1 root root   9336 Apr 30 08:32 BUILD.md\n")
    assert d[2][1].endswith("\n[The command completed with exit code 0.]\n[Current working directory: "
                            "/workspace/ponylang__ponyc__0.1]\n[Command finished with exit code 0]" + END + "\n" + GEN)
    assert t.spans[2].cause_id == "toolu_01"
    for row, t in zip(rows, ts):
        assert_linked(t)
        # one action per model response = the harness's own count (metrics.token_usages)
        assert sum(s.kind == "action" for s in t.spans) == len(row["metrics"]["token_usages"]) \
            == t.metadata["harness_model_calls"]
        # every model response's text, once each, in order (long ones: short texts recur by chance)
        responses = {e["tool_call_metadata"]["model_response"]["id"]: e["tool_call_metadata"]["model_response"]
                     for e in row["history"] if "action" in e and e.get("tool_call_metadata")}
        texts = [r["choices"][0]["message"]["content"] for r in responses.values()]
        assert_each_once_in_order(tok.decode(t.tokens.tolist()), [x for x in texts if x and len(x) > 40])
    assert ts[2].status == "truncated"  # "Agent reached maximum iteration"


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_v0_saved_trajectory(tok, fix):
    path = fix / "openhands/v0_saved_trajectory/basic.json"
    events = json.loads(path.read_text())
    (t,), _ = ingest(path)
    d = decoded(tok, t)
    assert kinds(t) == "paoa"  # task; the edit call; its result; the finish call
    assert d[0][1] == SMOL_SYSTEM + ("<|im_start|>user\nPlease create a simple 2048 game. No need to run it. Please "
                                     "finish the interaction after your finish coding." + END + "\n" + GEN)
    edit = events[1]["tool_call_metadata"]["model_response"]["choices"][0]["message"]["tool_calls"][0]
    assert d[1][1] == ("I'll help you create a simple 2048 game in Python. I'll use the str_replace_editor to create "
                       "the file.\n" + call("str_replace_editor", edit["function"]["arguments"]) + END)
    assert d[2][1] == tool_obs(events[2]["content"]) and t.spans[2].cause_id == "toolu_017nBp7UfiGqyrA7j77HgtFP"
    assert d[3][1].startswith("I've created a simple implementation of the 2048 game with the following features:\n")
    assert d[3][1].endswith("</tool_call>" + END)
    # the log holds no system action: the system prompt the model was sent is missing, and the
    # edit observation's CodeAct formatting is not reproduced
    assert set(t.metadata["fidelity_gaps"]) == {"system_prompt", "observation_format"}


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_v0_session_event_store_fidelity(tok, fix):
    d = fix / "openhands/v0_session_event_store_2025-07"
    (t,), r = ingest(d)
    events = [json.loads((d / f"sessions/63b4315947a049e2b7a51249b3d4fcc3/events/{i}.json").read_text())
              for i in range(14)]
    texts = decoded(tok, t)
    calls = [e for e in events if e.get("source") == "agent" and e.get("tool_call_metadata") and "action" in e]
    assert sum(k == "action" for k, _ in texts) == len({e["tool_call_metadata"]["model_response"]["id"]
                                                          for e in calls})
    assert_linked(t)
    assert t.model == "anthropic/claude-3-7-sonnet-20250219"
    user = [e["args"]["content"] for e in events if e.get("action") == "message" and e.get("source") == "user"]
    assert_each_once_in_order(tok.decode(t.tokens.tolist()), user)


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_v0_resolver_output(tok, fix):
    path = fix / "openhands/v0_resolver_output_2024-11/output.jsonl"
    row = json.loads(path.read_text().splitlines()[0])
    ts, _ = ingest(path)
    t = ts[0]
    d = decoded(tok, t)
    h = row["history"]
    assert d[1] == ("action", h[1]["thought"] + "\n<execute_bash>\ntouch LICENSE\n</execute_bash>" + END)
    # CodeAct's prompt-based format: the result is a user turn linked to the action before it
    assert d[2] == ("observation", "\n<|im_start|>user\n\r\nroot@bcd3959393a1:/workspace # " + END + "\n" + GEN)
    assert t.spans[2].cause_id == t.spans[1].call_id
    assert "observation_format" in t.metadata["fidelity_gaps"]  # run output without its metadata
    assert t.reward == 1.0


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_v0_feedback_rows_fidelity(tok, fix):
    path = fix / "openhands/v0_feedback_dataset_2024_hf_rows/sample_raw.json"
    rows = json.loads(path.read_text())
    ts, _ = ingest(path)
    assert [t.reward for t in ts] == [{"positive": 1.0, "negative": 0.0}[r["feedback"]] for r in rows]
    for row, t in zip(rows, ts):
        user = [e["args"]["content"] for e in row["trajectory"] if isinstance(e, dict) and e.get("action") == "message"
                and e.get("source") == "user" and len(e.get("args", {}).get("content") or "") > 40]
        assert_each_once_in_order(tok.decode(t.tokens.tolist()), user)
        assert "Invalid token" not in tok.decode(t.tokens.tolist())  # websocket errors are no turns


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_swe_gym_rows_fidelity(tok, fix):
    path = fix / "openhands/swe-gym_openhands_sampled_trajectories_hf_rows/sample_raw.json"
    rows = json.loads(path.read_text())
    ts, _ = ingest(path)
    t, row = ts[0], rows[0]
    d = decoded(tok, t)
    # the tool definitions the model was given are in the prompt (they used to be dropped)
    assert '"name": "execute_bash"' in d[0][1] and "Execute a bash command in the terminal." in d[0][1]
    assert d[1] == ("action", call("str_replace_editor",
                                   '{"command":"view","path":"/workspace/python__mypy__1.6","view_range":[0,-1]}') + END)
    assert d[2] == ("observation", tool_obs("OBSERVATION:\nERROR:\nThe `view_range` parameter is not allowed when "
                                            "`path` points to a directory."))
    assert t.spans[2].cause_id == "call_wmUMCvkWsBrXZdFlTSwE3sy6"
    for row, t in zip(rows, ts):
        roles = [m["role"] for m in row["messages"]]
        assert kinds(t) == "p" + "".join("a" if r == "assistant" else "o" for r in roles[2:])
        assert_linked(t)


def test_v0_eval_flat_history(tok, fix):
    path = fix / "openhands/v0_eval_output_multi_swe_bench_v0.35/output.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    got = build(tok, path)
    assert len(got) == 3
    for row, (_, t) in zip(rows, got):
        hist = row["history"]
        responses = {e["tool_call_metadata"]["model_response"]["id"] for e in hist
                     if e.get("source") == "agent" and "action" in e and e.get("tool_call_metadata")}
        plain = [e for e in hist if e.get("source") == "agent" and e.get("action") not in (None, "system")
                 and not e.get("tool_call_metadata")]
        tool_obs = [e for e in hist if "observation" in e and e.get("tool_call_metadata")]
        assert t.spans[0].kind == "prompt" and kinds(t)[1] == "o" or kinds(t)[1] == "a"
        assert sum(s.kind == "action" for s in t.spans) == len(responses) + len(plain)
        tool_spans = [s for s in t.spans if s.kind == "observation" and s.role == "tool"]
        assert len(tool_spans) == len(tool_obs)
        # each tool observation answers a tool call issued by an earlier action span
        issued: set[str] = set()
        for s in t.spans:
            if s.kind == "action":
                issued.update(s.tool_call_ids or [])
            elif s.role == "tool":
                assert s.cause_id in issued
        assert t.reward is None and t.reward_raw is None  # never run through the harness
    assert got[2][1].status == "truncated"  # "Agent reached maximum iteration"
    assert got[0][1].status == "completed"


def test_v0_saved_trajectories_and_gui(tok, fix):
    basic = build(tok, fix / "openhands/v0_saved_trajectory/basic.json")[0][1]
    assert kinds(basic) == "paoa"  # task; edit call; its result; final message
    chat = build(tok, fix / "openhands/v0_saved_trajectory/basic_interactions.json")[0][1]
    events = json.loads((fix / "openhands/v0_saved_trajectory/basic_interactions.json").read_text())
    agent_msgs = [e for e in events if "action" in e and e["source"] == "agent"]  # messages + finish
    user_msgs = [e for e in events if e.get("action") == "message" and e["source"] == "user"]
    assert sum(s.kind == "action" for s in chat.spans) == len(agent_msgs)
    assert sum(s.kind == "observation" for s in chat.spans) == len(user_msgs) - 1  # first one is the prompt
    gui = build(tok, fix / "openhands/v0_saved_trajectory/basic_gui_mode.json")[0][1]
    assert "agent_state" not in tok.decode(gui.tokens.tolist())  # state changes are not conversation
    assert gui.metadata["ignored_events"] > 0


def test_v0_session_event_store(tok, fix):
    r = IngestReport()
    ts = list(iter_trajectories([str(fix / "openhands/v0_session_event_store_2025-07")], report=r))
    assert len(ts) == 1 and r.files_seen == 15
    t = ts[0]
    assert t.source == "openhands/v0-session" and "63b4315947a049e2b7a51249b3d4fcc3" in t.trajectory_id
    assert t.model == "anthropic/claude-3-7-sonnet-20250219"
    assert t.spans[0].kind == "prompt" and kinds(t).count("a") >= 2
    assert [p.kind for p in r.problems] == ["no_trajectory"]  # metadata.json alone


def test_v0_resolver_no_ids(tok, fix):
    path = fix / "openhands/v0_resolver_output_2024-11/output.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    got = build(tok, path)
    for row, (_, t) in zip(rows, got):
        n_act = sum(1 for e in row["history"] if "action" in e) - 1  # first message is the task
        n_obs = sum(1 for e in row["history"] if "observation" in e)
        assert kinds(t) == "p" + "ao" * n_obs + "a" * (n_act - n_obs)
        assert t.reward == 1.0 and t.reward_raw == "true"
        acts = [s.call_id for s in t.spans if s.kind == "action"]
        obs = [s.cause_id for s in t.spans if s.kind == "observation"]
        assert obs == acts[:len(obs)]


def test_v0_feedback_rows(tok, fix):
    got = build(tok, fix / "openhands/v0_feedback_dataset_2024_hf_rows/sample_raw.json")
    rows = json.loads((fix / "openhands/v0_feedback_dataset_2024_hf_rows/sample_raw.json").read_text())
    assert [t.reward for _, t in got] == [{"positive": 1.0, "negative": 0.0}[r["feedback"]] for r in rows]
    assert [json.loads(t.reward_raw) for _, t in got] == [r["feedback"] for r in rows]
    assert got[0][1].model == "ollama/deepseek-coder"  # the last initialize wins
    unknown = got[2][1].metadata["unknown_event_kinds"]
    assert set(unknown) >= {"task_plan", "rag_search"}  # degraded per event, trajectory kept
    assert "Invalid token" not in tok.decode(got[0][1].tokens.tolist())  # websocket errors dropped


def test_swe_gym_rows(tok, fix):
    path = fix / "openhands/swe-gym_openhands_sampled_trajectories_hf_rows/sample_raw.json"
    rows = json.loads(path.read_text())
    got = build(tok, path)
    for row, (_, t) in zip(rows, got):
        roles = [m["role"] for m in row["messages"]]
        assert t.spans[0].kind == "prompt"
        assert [s.kind for s in t.spans[1:]] == ["action" if r == "assistant" else "observation" for r in roles[2:]]
        calls = {c["id"] for m in row["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []}
        assert {s.cause_id for s in t.spans if s.role == "tool"} <= calls
        assert t.reward == 1.0 and t.prompt_id == row["instance_id"]
    # several consecutive tool messages: one observation span each
    assert any("oo" in kinds(t) for _, t in got)


def test_v0_eval_pair_history_matches_the_flat_history(tok, fix, tmp_path):
    """Older eval outputs hold ``[action, observation]`` pairs instead of a flat event list. No
    public fixture has that shape, so it is made from the flat fixture: every observation is
    paired with the action it answers (by ``cause``), actions without one get ``{}``. The pair
    file must detect as V0 eval output and give exactly the same spans and token ids."""
    src = fix / "openhands/v0_eval_output_multi_swe_bench_v0.35/output.jsonl"
    row = json.loads(src.read_text().splitlines()[0])
    flat = row["history"]
    obs_by_cause = {e["cause"]: e for e in flat if "observation" in e and e.get("cause") is not None}
    paired_obs = {id(e) for e in obs_by_cause.values()}
    pairs = []
    for e in flat:
        if "observation" in e and id(e) in paired_obs:
            continue  # emitted next to its action
        if "observation" in e:
            pairs.append([{}, e])
        else:
            pairs.append([e, obs_by_cause.get(e.get("id"), {})])
    assert any(p[0] and p[1] for p in pairs) and len(pairs) < len(flat)
    (tmp_path / "flat.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "pairs.jsonl").write_text(json.dumps({**row, "history": pairs}) + "\n")
    (_, t_flat), = build(tok, tmp_path / "flat.jsonl")
    (_, t_pairs), = build(tok, tmp_path / "pairs.jsonl")
    assert kinds(t_pairs) == kinds(t_flat)
    assert t_pairs.tokens.tolist() == t_flat.tokens.tolist()
    assert [s.cause_id for s in t_pairs.spans] == [s.cause_id for s in t_flat.spans]


# fidelity of a format added beyond the reported cases
def test_swe_gym_rows_with_messages_as_a_json_string(tmp_path):
    row = {"instance_id": "x-1", "resolved": True, "run_id": "r",
           "messages": json.dumps([{"role": "user", "content": "fix"}, {"role": "assistant", "content": "done"}])}
    p = tmp_path / "rows.jsonl"
    p.write_text(json.dumps(row) + "\n" + json.dumps({**row, "messages": "[{not json"}) + "\n")
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.trajectories_written == 1 and only_row(tmp_path / "s")["source"] == "openhands/swe-gym"
    assert [(pr.origin.line, pr.kind) for pr in rep.problems] == [(2, "malformed")]
    assert "messages is a string that is not JSON" in rep.problems[0].reason


# reasoning is kept or dropped in later contexts as the harness sends it
def test_v0_reasoning_is_not_sent_back(tmp_path, tok):
    """V0's ConversationMemory rebuilds an earlier response from its content and tool calls only:
    the second call's context lacks the first call's reasoning, so it starts a new trajectory
    of the episode whose prompt is that context."""
    def response(rid, content, calls, reasoning=None):
        msg = {"role": "assistant", "content": content, "tool_calls": calls}
        if reasoning:
            msg["reasoning_content"] = reasoning
        return {"id": rid, "choices": [{"message": msg}]}

    ls = [{"id": "c1", "type": "function", "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'}}]
    fin = [{"id": "c2", "type": "function", "function": {"name": "finish", "arguments": '{"message": "done"}'}}]
    events = [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "sys", "tools": []}},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "List."}},
        {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls"}, "tool_call_metadata": {
            "tool_call_id": "c1", "function_name": "execute_bash", "model_response": response("r1", "", ls, "look")}},
        {"id": 3, "source": "agent", "observation": "run", "content": "a.txt", "cause": 2,
         "tool_call_metadata": {"tool_call_id": "c1", "function_name": "execute_bash"}},
        {"id": 4, "source": "agent", "action": "finish", "args": {"final_thought": "done"}, "tool_call_metadata": {
            "tool_call_id": "c2", "function_name": "finish", "model_response": response("r2", "", fin)}},
    ]
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(events))
    ts, _ = ingest(p)
    first = call("execute_bash", '{"command": "ls"}')
    assert [decoded(tok, t) for t in ts] == [
        [("prompt", SYS.format("sys") + USER.format("List.") + GEN),
         ("action", f"<think>\nlook\n</think>\n\n\n{first}" + END)],
        [("prompt", SYS.format("sys") + USER.format("List.") + GEN + first + END + TOOL_OBS.format("a.txt") + GEN),
         ("action", call("finish", '{"message": "done"}') + END)],
    ]
    assert ts[1].metadata["episode"]["change"] == "reasoning-dropped" and ts[0].metadata["reasoning_sent_back"] is False


# a V0 condensation (CondensationAction) starts a linked lineage with the condensed view
def test_v0_condensation_gives_linked_lineages(tmp_path, tok):
    """V0 ``View.from_events``: the forgotten events (2, 3) leave the view, the summary goes in at
    summary_offset 2 (after system and task) as a user message (AgentCondensationObservation);
    the call after the condensation is sent that view."""
    events = [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "sys"}},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "Task."}},
        {"id": 2, "source": "agent", "action": "run", "args": {"command": "cat big.log"}},
        {"id": 3, "source": "agent", "observation": "run", "content": "FORGOTTEN", "cause": 2},
        {"id": 4, "source": "agent", "action": "run", "args": {"command": "ls"}},
        {"id": 5, "source": "agent", "observation": "run", "content": "a b", "cause": 4},
        {"id": 6, "source": "agent", "action": "change_agent_state", "args": {"agent_state": "running"}},
        {"id": 7, "source": "agent", "action": "condensation",
         "args": {"forgotten_event_ids": [2, 3], "summary": "SUMMARY: big.log holds nothing.", "summary_offset": 2}},
        {"id": 8, "source": "agent", "action": "run", "args": {"command": "pwd"}},
        {"id": 9, "source": "agent", "observation": "run", "content": "/w", "cause": 8},
    ]
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(events))
    (t1, t2), rep = ingest(p)
    a1, a2, a3 = ("<execute_bash>\ncat big.log\n</execute_bash>" + END, "<execute_bash>\nls\n</execute_bash>" + END,
                  "<execute_bash>\npwd\n</execute_bash>" + END)
    head = SYS.format("sys") + USER.format("Task.")
    assert decoded(tok, t1) == [("prompt", head + GEN), ("action", a1), ("observation", "\n" + USER.format("FORGOTTEN") + GEN),
                                ("action", a2)]  # o5 is in the next call's context: stored there
    assert decoded(tok, t2) == [
        ("prompt", head + USER.format("SUMMARY: big.log holds nothing.") + GEN + a2 + "\n" + USER.format("a b") + GEN),
        ("action", a3), ("observation", "\n" + USER.format("/w"))]
    assert (t2.parent_trajectory_id, t2.link_kind, t2.episode_id) == (t1.trajectory_id, "context_rewrite", t1.episode_id)
    assert tok.decode(t2.tokens[:t2.fork_point]) == head + "<|im_start|>"
    assert t2.metadata["episode"]["change"] == "condensation" and t1.metadata["condensations"] == 1
    assert "condensation" not in (t2.metadata.get("fidelity_gaps") or {})  # rendered as sent, no longer flagged
    assert rep.problems == []
