"""trajstore/ingest/formats/atif.py: ATIF trajectory.json (Harbor / Terminal-Bench): engine tokens across
steps, the chat without token ids, a rewritten context, refusals naming the step."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers.ingest import (
    END,
    GEN,
    SMOL_SYSTEM,
    SYS,
    TOOL_OBS,
    USER,
    action_logprobs,
    call,
    decoded,
    ingest,
    only_row,
    span_texts,
)
from trajstore.ingest import ingest_paths


def _atif(steps, agent="an-agent", **extra):
    """An ATIF document by an agent of no known conventions (the generic reading), unless `agent` names one."""
    return {"schema_version": "ATIF-v1.4", "session_id": "sess", "agent": {"name": agent, "version": "1",
                                                                           "model_name": "m"},
            "steps": steps, **extra}


def _agent(step_id, prompt, completion, logprobs, observation=None, **kw):
    s = {"step_id": step_id, "source": "agent", "message": "x",
         "metrics": {"prompt_token_ids": prompt, "completion_token_ids": completion, "logprobs": logprobs}, **kw}
    if observation is not None:
        s["observation"] = {"results": [{"source_call_id": f"c{step_id}", "content": observation}]}
    return s


# fidelity of a format added beyond the reported cases
def test_atif_engine_tokens_across_steps(tmp_path):
    # Step 2 sees prompt [1, 2] and samples [3, 4]; step 3's prompt [1, 2, 3, 4, 9, 9] adds the
    # observation tokens [9, 9] and samples [5]. Steps are written out of order: read by step_id.
    doc = _atif([_agent(3, [1, 2, 3, 4, 9, 9], [5], [-0.5], observation="late"),
                 {"step_id": 1, "source": "user", "message": "task"},
                 _agent(2, [1, 2], [3, 4], [-0.25, -9999.0], observation="out")])
    trial = tmp_path / "trial-1"
    (trial / "agent").mkdir(parents=True)
    (trial / "verifier").mkdir()
    (trial / "agent" / "trajectory.json").write_text(json.dumps(doc))
    (trial / "verifier" / "reward.txt").write_text("1\n")
    rep = ingest_paths([str(trial / "agent")], tmp_path / "s")
    assert rep.problems == []
    row = only_row(tmp_path / "s")
    assert row["tokens"] == [1, 2, 3, 4, 9, 9, 5]
    assert [(s["kind"], s["start"], s["end"]) for s in row["spans"]] == [
        ("prompt", 0, 2), ("action", 2, 4), ("observation", 4, 6), ("action", 6, 7)]
    assert row["spans"][2]["cause_id"] == "2"  # the observation answers step 2
    lps = action_logprobs(row)
    # -9999.0 (an engine's stand-in for -inf) is stored as missing, never as a value
    assert lps[0] == pytest.approx(-0.25) and math.isnan(lps[1]) and lps[2] == pytest.approx(-0.5)
    assert row["num_missing_logprobs"] == 1
    assert row["reward"] == 1.0 and row["model"] == "m" and row["token_source"] == "engine"


def test_the_trial_reward_file_is_read_not_ignored(tmp_path):
    # walkthrough: ingesting a Harbor job folder counted verifier/reward.txt among the "files
    # ignored" although its number is the reward; a file no reader opened (the notes) still counts
    doc = _atif([{"step_id": 1, "source": "user", "message": "task"}, _agent(2, [1, 2], [3], [-0.5])])
    trial = tmp_path / "job" / "trial-1"
    (trial / "agent").mkdir(parents=True)
    (trial / "verifier").mkdir()
    (trial / "agent" / "trajectory.json").write_text(json.dumps(doc))
    (trial / "verifier" / "reward.txt").write_text("0.5\n")
    (trial / "verifier" / "notes.txt").write_text("not read")
    rep = ingest_paths([str(tmp_path / "job")], tmp_path / "s")
    assert rep.problems == [] and only_row(tmp_path / "s")["reward"] == 0.5
    assert rep.ignored_files == {".txt": 1}  # notes.txt only


# fidelity of a format added beyond the reported cases
def test_atif_without_token_ids_is_a_chat(tmp_path, tok):
    doc = _atif([{"step_id": 1, "source": "system", "message": "Be brief."},
                 {"step_id": 2, "source": "user", "message": "List files."},
                 {"step_id": 3, "source": "agent", "message": "Listing.", "reasoning_content": "ls is enough",
                  "tool_calls": [{"tool_call_id": "t1", "function_name": "bash", "arguments": {"cmd": "ls"}}],
                  "observation": {"results": [{"source_call_id": "t1", "content": "a.txt"}]}},
                 {"step_id": 4, "source": "agent", "message": "One file."}])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.problems == []
    row = only_row(tmp_path / "s")
    assert row["token_source"] == "retokenized" and row["source"] == "atif" and row["reward"] is None
    assert span_texts(row, tok) == [
        ("prompt", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nList files.<|im_end|>\n" + GEN),
        ("action", '<think>\nls is enough\n</think>\n\nListing.\n<tool_call>\n'
                   '{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>'),
        ("observation", "\n<|im_start|>tool\na.txt<|im_end|>\n" + GEN),
        ("action", "One file.<|im_end|>"),
    ]
    assert row["spans"][2]["cause_id"] == "t1"


# fidelity of a format added beyond the reported cases
def test_atif_rewritten_context_falls_back_to_the_chat_with_the_reason(tmp_path):
    # step 3's prompt does not start with step 2's prompt + completion: the engine ids cannot be joined
    doc = _atif([{"step_id": 1, "source": "user", "message": "go"},
                 _agent(2, [1, 2], [3], [-0.1], observation="o"), _agent(3, [7, 8], [4], [-0.2])])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    ingest_paths([str(p)], tmp_path / "s")
    row = only_row(tmp_path / "s")
    assert row["token_source"] == "retokenized"
    assert "do not extend the previous step" in json.loads(row["metadata"])["engine_token_ids_discarded"]


# fidelity of a format added beyond the reported cases
def test_atif_steps_sharing_an_id_are_refused(tmp_path):
    doc = _atif([{"step_id": 1, "source": "user", "message": "a"}, {"step_id": 1, "source": "user", "message": "b"}])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.trajectories_written == 0 and "share step_id 1" in rep.problems[0].reason


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_odd_tool_calls_in_an_atif_step(reported, tmp_path):
    doc = json.loads((reported / "other-formats" / "atif-trajectory.json").read_text())
    agent = next(i for i, s in enumerate(doc["steps"]) if s["source"] == "agent")
    doc["steps"][agent]["tool_calls"] = "bash ls"
    f = tmp_path / "trajectory.json"
    f.write_text(json.dumps(doc))
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert p.reason == (f"steps[{agent}].tool_calls is a string ('bash ls'), expected a list of tool calls "
                        "(objects with tool_call_id, function_name, arguments)")


# -- Harbor's Terminus-2 and OpenHands-as-ATIF, each span decoded, expected texts by hand ----------
def _terminus(steps, parser="json"):
    return {"schema_version": "ATIF-v1.5", "session_id": "t2", "agent": {
        "name": "terminus-2", "version": "2.0.0", "model_name": "m", "extra": {"parser": parser}}, "steps": steps}


def _t2_step(step_id, analysis, plan, commands, observation, done=False, **kw):
    calls = [{"tool_call_id": f"call_{step_id}_{i + 1}", "function_name": "bash_command",
              "arguments": {"keystrokes": k, "duration": d}} for i, (k, d) in enumerate(commands)]
    if done:
        calls.append({"tool_call_id": f"call_{step_id}_task_complete", "function_name": "mark_task_complete",
                      "arguments": {}})
    return {"step_id": step_id, "source": "agent", "message": f"Analysis: {analysis}\nPlan: {plan}",
            "tool_calls": calls, "observation": {"results": [{"content": observation}]}, **kw}


# per-format fidelity, Harbor Terminus-2 (golden file of a run that timed out)
def test_terminus2_actions_are_the_rebuilt_json_response(reported, tok, tmp_path):
    """Terminus-2's model writes one JSON object per call; the ATIF file keeps "Analysis:/Plan:"
    and the commands as bash_command tool calls. Stored: that JSON object rebuilt (not the
    parsed text, not native tool calls: Terminus-2 sends no tools and no system message), the
    terminal output as the next user turn, flagged action_text and not trainable by default."""
    path = reported / "atif-timeout-status" / "trajectory.json"
    task = json.loads(path.read_text())["steps"][0]["message"]  # Terminus-2's prompt: the first user turn
    (t,), rep = ingest(path)
    assert t.token_source == "retokenized"  # this golden file's ids are made up and do not chain
    assert decoded(tok, t) == [
        ("prompt", SMOL_SYSTEM + USER.format(task) + GEN),  # SmolLM2's default system prompt: the template's
        ("action", '{\n  "analysis": "Terminal is ready. Let me start by echoing hello world.",\n'
                   '  "plan": "Echo hello world to stdout.",\n  "commands": [\n    {\n'
                   '      "keystrokes": "echo \'Hello, world!\'\\n",\n      "duration": 0.1\n    }\n  ],\n'
                   '  "task_complete": false\n}' + END),
        ("observation", "\n" + USER.format("New Terminal Output:\n\nroot@CONTAINER_ID:/app# echo 'Hello, world!'\n"
                                           "Hello, world!\n\n\n") + GEN),
        ("action", '{\n  "analysis": "Continue working on the task.",\n  "plan": "Sleep for 50 seconds.",\n'
                   '  "commands": [\n    {\n      "keystrokes": "sleep 50\\n",\n      "duration": 50.0\n    }\n  ],\n'
                   '  "task_complete": false\n}' + END),
        ("observation", "\n" + USER.format("New Terminal Output:\n\nroot@CONTAINER_ID:/app# sleep 50\n\n\n") + GEN),
        ("action", '{\n  "analysis": "Continue working on the task.",\n  "plan": "Sleep for 50 seconds.",\n'
                   '  "commands": [\n    {\n      "keystrokes": "sleep 50\\n",\n      "duration": 50.0\n    }\n  ],\n'
                   '  "task_complete": false\n}' + END),
        ("observation", "\n" + USER.format("New Terminal Output:\n\nroot@CONTAINER_ID:/app# sleep 50\n\n\n")),
    ]
    assert [s.tool_call_ids for s in t.spans if s.kind == "action"] == [["call_0_1"], ["call_1_1"], ["call_2_1"]]
    gaps = t.metadata["fidelity_gaps"]
    assert list(gaps) == ["action_text", "engine_ids_discarded"]  # its ids are in the file: their discard is counted
    assert "Terminus-2" in gaps["action_text"] and "JSON" in gaps["action_text"]
    assert rep.engine_ids_discarded == 1 and rep.fidelity_gaps["engine_ids_discarded"] == 1
    assert t.not_trainable_reason.startswith("actions reconstructed, not the model's own tokens: Terminus-2")
    assert t.metadata["reconstructed_actions"] == 3 and t.metadata["ingest"]["tools"] is None
    assert t.status == "aborted" and t.model == "openai/gpt-4o"
    # the user opts in: the same text, trainable, stored under its own id
    (t2,), _ = ingest(path, train_reconstructed_actions=True)
    assert t2.not_trainable_reason is None and t2.tokens.tolist() == t.tokens.tolist()
    assert t2.trajectory_id != t.trajectory_id


# per-format fidelity, OpenHands-as-ATIF (Harbor's converter of an OpenHands CodeActAgent run)
def test_openhands_as_atif(reported, tok):
    """The tool definitions the agent sent, in the system message as the documented <tools>
    block; the converter's notes (steps 3, 4) left out; each tool-call action stored as its tool
    call without the OpenHands event message the converter put in its place ("I edited the file
    ...", "All done! ...": the model did not write them), flagged action_text."""
    path = reported / "atif-tool-definitions-dropped" / "trajectory.json"
    doc = json.loads(path.read_text())
    system = doc["steps"][0]["message"]
    tools = "\n".join(json.dumps(d["function"], ensure_ascii=False, sort_keys=True)
                      for d in doc["agent"]["tool_definitions"])  # the documented <tools> form
    (t,), _ = ingest(path)
    assert decoded(tok, t) == [
        ("prompt", SYS.format(f"{system}\n\n# Tools\n\n<tools>\n{tools}\n</tools>")
         + USER.format('Create a file called hello.txt with "Hello, world!" as the content.\n') + GEN),
        ("action", call("str_replace_editor", '{"command": "create", "path": "/app/hello.txt", '
                        '"file_text": "Hello, world!", "security_risk": "LOW"}') + END),
        ("observation", TOOL_OBS.format("File created successfully at: /app/hello.txt") + GEN),
        ("action", call("finish", '{"message": "Task complete. Created /app/hello.txt with \'Hello, world!\'"}')
         + END),
    ]
    assert t.spans[2].cause_id == "call_fake_1" and t.status == "completed" and t.model is None
    assert sorted(t.metadata["fidelity_gaps"]) == ["action_text", "harness_notes"]
    assert "OpenHands event message" in t.metadata["fidelity_gaps"]["action_text"]
    assert t.not_trainable_reason is not None


# reasoning is kept or dropped in later contexts as the harness sends it
def test_terminus2_does_not_send_reasoning_back(tmp_path, tok):
    """Terminus-2 sends a call's reasoning_content back only with interleaved_thinking (off by
    default, not recorded): the second call saw the first response without its reasoning, so
    it starts a new trajectory of the episode whose prompt holds that context."""
    doc = _terminus([{"step_id": 1, "source": "user", "message": "Task: say hi."},
                     _t2_step(2, "Empty dir.", "Echo.", [("echo hi\n", 0.1)], "hi\n",
                              reasoning_content="I should echo."),
                     _t2_step(3, "Done.", "Finish.", [], "Sure?", done=True),
                     _t2_step(4, "Yes.", "Confirm.", [], "", done=True)])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    ts, _ = ingest(p)
    a1 = '{\n  "analysis": "Empty dir.",\n  "plan": "Echo.",\n  "commands": [\n    {\n      "keystrokes": ' \
         '"echo hi\\n",\n      "duration": 0.1\n    }\n  ],\n  "task_complete": false\n}'
    a2 = '{\n  "analysis": "Done.",\n  "plan": "Finish.",\n  "commands": [],\n  "task_complete": true\n}'
    a3 = '{\n  "analysis": "Yes.",\n  "plan": "Confirm.",\n  "commands": [],\n  "task_complete": true\n}'
    assert [decoded(tok, t) for t in ts] == [
        [("prompt", SMOL_SYSTEM + USER.format("Task: say hi.") + GEN),
         ("action", f"<think>\nI should echo.\n</think>\n\n{a1}" + END)],
        [("prompt", SMOL_SYSTEM + USER.format("Task: say hi.") + GEN + a1 + END + "\n" + USER.format("hi\n") + GEN),
         ("action", a2 + END), ("observation", "\n" + USER.format("Sure?") + GEN), ("action", a3 + END),
         ("observation", "\n" + USER.format(""))],
    ]
    assert [t.metadata["episode"]["change"] for t in ts] == [None, "reasoning-dropped"]
    assert all(t.status == "completed" for t in ts)  # mark_task_complete, confirmed in the next step


# a step whose message is the raw response (a parse error) is kept as the model wrote it
def test_terminus2_raw_response_and_xml_parser(tmp_path, tok):
    bad = {"step_id": 2, "source": "agent", "message": "Let me think... {broken",
           "observation": {"results": [{"content": "Previous response had parsing errors:\nERROR: no JSON"}]}}
    doc = _terminus([{"step_id": 1, "source": "user", "message": "Task."}, bad,
                     _t2_step(3, "Fixed.", "Run ls.", [("ls\n", 1.0)], "a.txt\n")], parser="xml")
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    (t,), _ = ingest(p)
    assert [x for k, x in decoded(tok, t) if k == "action"] == [
        "Let me think... {broken" + END,
        '<response>\n<analysis>\nFixed.\n</analysis>\n<plan>\nRun ls.\n</plan>\n<commands>\n'
        '<keystrokes duration="1.0">ls\n</keystrokes>\n</commands>\n<task_complete>false</task_complete>\n'
        '</response>' + END]
    assert t.metadata["reconstructed_actions"] == 1 and "XML" in t.metadata["fidelity_gaps"]["action_text"]
    assert t.status == "aborted"


# an agent of no known conventions: reasoning kept (flagged), finished by a final answer
def test_generic_atif_agent_reasoning_and_status(tmp_path):
    doc = _atif([{"step_id": 1, "source": "system", "message": "sys"}, {"step_id": 2, "source": "user", "message": "go"},
                 {"step_id": 3, "source": "agent", "message": "ls", "reasoning_content": "look first",
                  "tool_calls": [{"tool_call_id": "c", "function_name": "bash", "arguments": {"cmd": "ls"}}],
                  "observation": {"results": [{"source_call_id": "c", "content": "a"}]}},
                 {"step_id": 4, "source": "system", "message": "note by the harness"},
                 {"step_id": 5, "source": "agent", "message": "one file"}])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    (t,), _ = ingest(p)
    assert sum(s.kind == "action" for s in t.spans) == 2 and t.status == "completed"
    assert sorted(t.metadata["fidelity_gaps"]) == ["harness_notes", "reasoning", "tools"]
    assert t.not_trainable_reason is None  # its actions are as the model wrote them
