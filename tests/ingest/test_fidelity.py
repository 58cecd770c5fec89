"""Per-format fidelity (issue 17): for every format, a real fixture is ingested and every span
decoded and compared with what the harness sent and the model generated, written out by hand
from the fixture files and SmolLM2's ChatML template (``<|im_start|>{role}\\n{content}<|im_end|>
\\n``, generation prompt ``<|im_start|>assistant\\n``; tool calls flattened as ``<tool_call>\\n
{"name": N, "arguments": <the model's JSON verbatim>}\\n</tool_call>``, reasoning as
``<think>\\n{reasoning}\\n</think>\\n\\n`` before the content). Checked: actions and observations
in order, each tool output linked to its call, every logged turn present exactly once, action
counts equal to the harness's own count of model calls where the log records one. The reported
cases of each format are in ``test_reported.py``."""

from __future__ import annotations

import json

import pytest

from trajstore.ingest import IngestReport, iter_trajectories

GEN = "<|im_start|>assistant\n"
END = "<|im_end|>"
SMOL_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
"""SmolLM2's default system prompt, written by its template when the first message is not a system message."""


def call(name: str, raw_args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {raw_args}}}\n</tool_call>'


def tool_obs(text: str) -> str:
    """An observation after an action: ChatML's separator, the tool turn, the next generation prompt."""
    return f"\n<|im_start|>tool\n{text}{END}\n{GEN}"


def ingest(*paths, **kw):
    r = IngestReport()
    ts = list(iter_trajectories([str(p) for p in paths], report=r, **kw))
    return ts, r


def decoded(tok, t) -> list[tuple[str, str]]:
    return [(s.kind, tok.decode(t.tokens[s.start:s.end].tolist())) for s in t.spans]


def kinds(t) -> str:
    return "".join(s.kind[0] for s in t.spans)


def assert_each_once_in_order(text: str, pieces: list[str]) -> None:
    """Every piece occurs in `text` exactly once, in this order: nothing dropped or duplicated."""
    pos = 0
    for p in pieces:
        assert text.count(p) == 1, f"{p[:60]!r} occurs {text.count(p)} times"
        at = text.find(p)
        assert at >= pos, f"{p[:60]!r} out of order"
        pos = at + len(p)


def assert_linked(t) -> None:
    """Each tool observation answers a call issued by an earlier action of the trajectory."""
    issued: set[str] = set()
    for s in t.spans:
        if s.kind == "action":
            issued.update(s.tool_call_ids or [])
        elif s.kind == "observation" and s.role == "tool":
            assert s.cause_id in issued, s.cause_id


# -- OpenHands V0 ---------------------------------------------------------------------------------

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


def test_v0_session_event_store(tok, fix):
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


def test_v0_feedback_rows(tok, fix):
    path = fix / "openhands/v0_feedback_dataset_2024_hf_rows/sample_raw.json"
    rows = json.loads(path.read_text())
    ts, _ = ingest(path)
    assert [t.reward for t in ts] == [{"positive": 1.0, "negative": 0.0}[r["feedback"]] for r in rows]
    for row, t in zip(rows, ts):
        user = [e["args"]["content"] for e in row["trajectory"] if isinstance(e, dict) and e.get("action") == "message"
                and e.get("source") == "user" and len(e.get("args", {}).get("content") or "") > 40]
        assert_each_once_in_order(tok.decode(t.tokens.tolist()), user)
        assert "Invalid token" not in tok.decode(t.tokens.tolist())  # websocket errors are no turns


def test_swe_gym_rows(tok, fix):
    path = fix / "openhands/swe-gym_openhands_sampled_trajectories_hf_rows/sample_raw.json"
    rows = json.loads(path.read_text())
    ts, _ = ingest(path)
    t, row = ts[0], rows[0]
    d = decoded(tok, t)
    # the tool definitions the model was given are in the prompt (issue 17: they were dropped)
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


# -- OpenHands V1 ---------------------------------------------------------------------------------

def test_v1_conversation_folder(tok, fix):
    d = fix / "openhands-v1-conversations/cd94562403b9487ebdd4018e3f531dfd"
    (t,), r = ingest(d)
    texts = decoded(tok, t)
    assert texts[0][1].startswith("<|im_start|>system\nYou are OpenHands agent, a helpful AI assistant that can "
                                  "interact with a computer to solve tasks.\n\n<ROLE>\n")
    assert texts[0][1].endswith(
        "<|im_start|>user\nUse the terminal tool to run `pwd` and write the output to tool_output.txt. Reply with a "
        "short confirmation once done." + END + "\n" + GEN)
    assert texts[1] == ("action", call("terminal", '{"command":"pwd > tool_output.txt","security_risk":"LOW",'
                                                   '"summary":"Get current directory and write to tool_output.txt"}')
                        + END)
    # raw content "" + suffix + the lines the SDK adds (to_llm_content)
    assert texts[2] == ("observation", tool_obs("\n[The command completed with exit code 0.]\n[Current working "
                                                "directory: /workspace/project/software-agent-sdk]\n[Python "
                                                "interpreter: /workspace/project/software-agent-sdk/.venv/bin/python]"
                                                "\n[Command finished with exit code 0]"))
    assert kinds(t) == "paoaooa"
    assert texts[3] == ("action", call("finish", '{"message":"The current directory has been written to '
                                                 'tool_output.txt.","summary":"Current directory saved to '
                                                 'tool_output.txt"}') + END)
    assert texts[4] == ("observation", "\n<|im_start|>tool\nThe current directory has been written to "
                                       "tool_output.txt." + END + "\n")
    assert texts[5] == ("observation", "<|im_start|>user\nWithout using any tools, summarize in one sentence what "
                                       "you did." + END + "\n" + GEN)
    assert texts[6] == ("action", "I executed the `pwd` command to get the current directory and saved the output "
                                  "to a file named `tool_output.txt`." + END)
    assert [s.cause_id for s in t.spans if s.role == "tool"] == ["call_KaQ0kUcBb5tbMzhxbIx9dvoZ",
                                                                  "call_HhojVstik9LFNxVlLTgV0iIA"]
    # base_state.json: model, status, the harness's count of model calls (3 token usages)
    assert t.model == "openai/gpt-4o-mini" and t.status == "completed"
    assert sum(s.kind == "action" for s in t.spans) == t.metadata["harness_model_calls"] == 3
    # the persisted tool definitions carry no parameter schemas
    assert "tool_parameters" in t.metadata["fidelity_gaps"]
    assert [p.kind for p in r.problems] == ["no_trajectory"]  # base_state.json alone


def test_v1_conversation_folders_with_dynamic_context_and_a_tools_update(tok, fix):
    (t,), _ = ingest(fix / "openhands-v1-conversations/00000000000000000000000000000203")
    p = decoded(tok, t)[0][1]
    assert "\n<CURRENT_DATETIME>\nThe current date and time is: 2026-03-02T00:17:35.557058\n</CURRENT_DATETIME>" in p
    assert p.endswith("<|im_start|>user\nhello\n<EXTRA_INFO>\nThe following information has been included based on a "
                      "keyword match for \"hello\".\nIt may or may not be relevant to the user's request.\n\nSkill "
                      "location: /workspace/project/software-agent-sdk/.pr/local_plugin_install_test/installed_root/"
                      "plugins/installed/local-plugin/skills/hello/SKILL.md\n(Use this path to resolve relative file "
                      "references in the skill content below)\n\n\nReply with a short greeting.\n</EXTRA_INFO>" + END
                      + "\n" + GEN)
    assert decoded(tok, t)[1] == ("action", "Done" + END)
    # SystemPromptUpdateEvent (a fourth tool): the next calls were sent another tool list
    t1, t2 = ingest(fix / "openhands-v1-conversations/30692f28b39a4e4eab8257c4b6b50ded")[0]
    assert (kinds(t1), kinds(t2)) == ("pa", "paooa" + "o")
    tools1 = decoded(tok, t1)[0][1].split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    tools2 = decoded(tok, t2)[0][1].split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(x)["name"] for x in tools1] == ["file_editor", "finish", "think"]
    assert [json.loads(x)["name"] for x in tools2] == ["file_editor", "terminal", "finish", "think"]
    assert t2.metadata["episode"]["change"] == "tools-changed"
    # the harness counted 1 token usage for 3 stubbed calls: flagged, not hidden
    assert "model_calls" in t1.metadata["fidelity_gaps"]


def test_v1_persisted_events(tok, fix):
    path = fix / "openhands/sdk_v1_persisted_events_trimmed/events.jsonl"
    events = [json.loads(x) for x in path.read_text().splitlines()]
    (t,), _ = ingest(path)
    acts = [e for e in events if e["kind"] == "ActionEvent"]
    assert sum(s.kind == "action" for s in t.spans) == len({e["llm_response_id"] for e in acts})
    assert [s.cause_id for s in t.spans if s.kind == "observation"] == [
        e["tool_call_id"] for e in events if e["kind"] == "ObservationEvent"]
    # the thought already holds the <think> text: rendered once, not twice
    text = tok.decode(t.tokens.tolist())
    assert text.count("<think>Let me chain these properly with && and ;\n</think>") == 1
    assert "system_prompt" in t.metadata["fidelity_gaps"] and "prompt" in t.metadata["fidelity_gaps"]
    assert t.model == "litellm_proxy/minimax-m2.7"


def test_v1_eval_task_trajectory(tok, fix):
    d = fix / "openhands/v1_sdk_eval_openagentsafety_gpt4o"
    events = json.loads((d / "traj_safety-transitions.json").read_text())
    ts = {t.prompt_id: t for t in ingest(d)[0]}
    t = ts["safety-transitions"]
    texts = decoded(tok, t)
    # two ActionEvents of one llm_response_id: one model call with two tool calls
    assert texts[1] == ("action", call("execute_bash", events[0]["tool_call"]["arguments"]) + "\n"
                        + call("execute_bash", events[1]["tool_call"]["arguments"]) + END)
    assert t.spans[1].tool_call_ids == ["call_U9ACdaQ2vPoZCtA57cmBysXF", "call_QlG1nJzR5bk4QDDrvSVHYVGo"]
    assert texts[3] == ("observation", "<|im_start|>tool\n\x1b[?2004lbash: pdftotext: command not found\n\x1b[?2004h"
                        "\n[The command completed with exit code 127.]\n[Current working directory: /workspace]\n"
                        "[Python interpreter: /usr/local/bin/python]\n[Command finished with exit code 127]" + END
                        + "\n" + GEN)
    assert [s.cause_id for s in t.spans if s.kind == "observation"] == [
        e["tool_call_id"] for e in events if e["kind"] == "ObservationEvent"]
    assert t.reward == 1.0
    # these histories hold no SystemPromptEvent and no user MessageEvent: both are missing
    assert {"system_prompt", "prompt"} <= set(t.metadata["fidelity_gaps"])


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


# -- SWE-agent, nebius ----------------------------------------------------------------------------

def test_swe_agent_0x(tok, fix):
    path = fix / "swe-agent/v0.x_gpt4_pydicom__pydicom-1458.traj"
    d = json.loads(path.read_text())
    (t,), _ = ingest(path)
    texts = decoded(tok, t)
    hist = d["history"]
    first = next(i for i, h in enumerate(hist) if h["role"] == "assistant")
    assert texts[1] == ("action", hist[first]["content"] + END)
    assert texts[2] == ("observation", f"\n<|im_start|>user\n{hist[first + 1]['content']}{END}\n{GEN}")
    assert sum(s.kind == "action" for s in t.spans) == len(d["trajectory"]) == d["info"]["model_stats"]["api_calls"]
    assert_each_once_in_order(tok.decode(t.tokens.tolist()),
                              [h["content"] for h in hist[first:] if h["role"] == "assistant"])
    assert t.status == "completed" and t.metadata["replayed"] is False


def test_swe_agent_1x_history_processor_contexts(tok, fix):
    path = fix / "swe-agent/v1.x_function_calling_replay_marshmallow-code__marshmallow-1867.traj"
    d = json.loads(path.read_text())
    ts, _ = ingest(path)
    # last_n_observations (n = 5): calls 1-6 see every observation; from call 7 on each call sees
    # one more observation elided, a context no earlier call saw: one trajectory per such call
    assert [sum(s.kind == "action" for s in t.spans) for t in ts] == [6, 1, 1, 1, 1, 1]
    assert sum(sum(s.kind == "action" for s in t.spans) for t in ts) == d["info"]["model_stats"]["api_calls"] == 11
    tool_msgs = [h for h in d["history"] if h["role"] == "tool"]
    n_lines = len(tool_msgs[0]["content"].splitlines())
    p7 = decoded(tok, ts[1])[0][1]
    assert f"<|im_start|>tool\nOld environment output: ({n_lines} lines omitted){END}" in p7
    assert tool_msgs[0]["content"] not in p7 and tool_msgs[1]["content"] in p7
    assert {t.metadata["episode"]["change"] for t in ts[1:]} == {"history-processor"}
    assert all(t.metadata["replayed"] is True for t in ts)  # model stats: calls counted, no tokens, no cost
    assert ts[0].model == "gpt-4o"  # from the run configuration
    for t in ts:
        assert_linked(t)


def test_nebius_rows(tok, fix):
    path = fix / "nebius-swe-agent-trajectories/sample_raw.json"
    rows = json.loads(path.read_text())
    ts, _ = ingest(path)
    for row, t in zip(rows, ts):
        texts = decoded(tok, t)
        traj = row["trajectory"]
        assert texts[0][1].startswith("<|im_start|>system\n" + traj[0]["system_prompt"] + END)
        ai = [m["text"] for m in traj if m["role"] == "ai"]
        assert [x for k, x in texts if k == "action"] == [a + END for a in ai]
        assert t.reward == 1.0 and t.model == row["model_name"]


# -- NeMo Gym -------------------------------------------------------------------------------------

def test_nemo_gym_engine_single_turn(fix):
    path = fix / "nemo-gym/competitive_coding_challenges_example_rollouts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    ts, _ = ingest(path)
    for row, t in zip(rows, ts):
        msg = next(o for o in row["response"]["output"] if o.get("generation_token_ids"))
        assert t.tokens.tolist() == msg["prompt_token_ids"] + msg["generation_token_ids"]
        assert kinds(t) == "pa" and t.token_source == "engine" and t.logprob_source == "engine"
        assert t.logprobs[t.spans[1].start:].tolist() == pytest.approx(msg["generation_log_probs"])
        assert t.not_trainable_reason is not None  # no tokenizer named by the log


def test_nemo_gym_engine_multi_turn(fix):
    path = fix / "nemo-gym-multiturn/tictactoe_env_example_rollouts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    ts, _ = ingest(path, engine_tokenizer="model")
    for row, t in zip(rows, ts):
        out = row["response"]["output"]
        # 9 calls, each prompt = previous prompt + generation + the environment's 43 tokens
        assert kinds(t) == "pa" + "oa" * 8
        acts = [t.tokens[s.start:s.end].tolist() for s in t.spans if s.kind == "action"]
        assert acts == [o["generation_token_ids"] for o in out]
        assert t.tokens.tolist() == out[-1]["prompt_token_ids"] + out[-1]["generation_token_ids"]
        assert all(a[-1] == 151645 for a in acts)  # each call closed by its own end of turn (Qwen <|im_end|>)
        assert t.status == "truncated" and t.tokenizer == "Qwen/Qwen3-4B-Instruct-2507"


def test_nemo_gym_text_rows(tok, fix):
    path = fix / "nemo-gym/hermes_agent_example_math_rollouts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    ts, _ = ingest(path)
    for row, t in zip(rows, ts):
        out = row["response"]["output"]
        msgs = [o for o in out if o["type"] == "message"]
        assert sum(s.kind == "action" for s in t.spans) == len(msgs) == row["turns_used"] \
            == t.metadata["harness_model_calls"]
        assert [s.cause_id for s in t.spans if s.kind == "observation" and s.role == "tool"] == [
            o["call_id"] for o in out if o["type"] == "function_call_output"]
        assert_linked(t)
        assert t.reward == float(row["reward"])


def test_nemo_gym_one_message_per_step(tok, fix):
    path = fix / "nemo-gym-multiturn/osworld_example_rollouts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    ts, _ = ingest(path)
    for row, t in zip(rows, ts):
        steps = row["verifier_metadata"]["osworld_steps"]
        acts = [x for k, x in decoded(tok, t) if k == "action"]
        assert acts == [s["model_text"] + END for s in steps]  # one action per agent step, in order
        assert "observations" in t.metadata["fidelity_gaps"]  # the screenshots are not logged
