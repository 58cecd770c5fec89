"""Every real fixture format: span kinds and order, action/observation counts, rewards, and
the token oracle (stored ids == the chat template's render of the whole conversation)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from trajstore.ingest import IngestReport, conversation_to_trajectories, iter_trajectories
from trajstore.ingest.discover import InputUnit
from trajstore.ingest.dispatch import parse_unit
from trajstore.ingest.openhands_v1_completions import parse_completion_log
from trajstore.ingest.records import Conversation, EngineRollout, Origin, Problem, RecordError
from trajstore.ingest.template import template_features, template_message, with_tools_text
from trajstore.ingest.swe_agent import parse_traj

TOK_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"


def build(tok, path, **kw):
    """(conversation, trajectory) pairs of one input file, each checked against the oracle:
    the ids are the template's render of the whole conversation (tokenized as one text), less
    ChatML's separator ``\\n`` after the last ``<|im_end|>`` when the conversation ends with
    a model call (it belongs to no span: nothing follows)."""
    out = []
    for item in parse_unit(InputUnit(str(path))):
        assert not isinstance(item, Problem), str(item)
        if isinstance(item, EngineRollout):
            out.append((item, None))
            continue
        conv = copy.deepcopy(item)
        ts = conversation_to_trajectories(item, tok, tokenizer_name=TOK_NAME, input_format=item.source, **kw)
        if len(ts) > 1:  # one trajectory per context the model saw: checked in test_fidelity.py
            out += [(conv, t) for t in ts]
            continue
        (t,) = ts
        features = template_features(tok)
        full = tok.apply_chat_template(with_tools_text([template_message(m, features) for m in item.messages],
                                                       item.tools), tokenize=False)
        if item.messages[-1].role == "assistant":
            assert full.endswith("<|im_end|>\n")
            full = full[:-1]
        assert t.tokens.tolist() == tok(full, add_special_tokens=False)["input_ids"], \
            f"{path}: ids differ from the template render"
        assert t.token_source == "retokenized" and t.logprob_source == "none"
        assert all(s.policy_version is None for s in t.spans) and np.isnan(t.logprobs).all()
        # actions hold the generated text and its end of turn; observations start with the
        # separator after an action, then their role header
        for s in t.spans:
            text = tok.decode(t.tokens[s.start:s.end].tolist())
            if s.kind == "action":
                assert not text.startswith("<|im_start|>") and text.endswith("<|im_end|>"), text[-40:]
            elif s.kind == "observation" and s.role is not None:
                assert text.lstrip("\n").startswith(f"<|im_start|>{s.role}\n"), text[:40]
        out.append((conv, t))
    return out


def kinds(t) -> str:
    return "".join(s.kind[0] for s in t.spans)


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


def test_v1_persisted_events(tok, fix):
    (conv, t), = build(tok, fix / "openhands/sdk_v1_persisted_events_trimmed/events.jsonl")
    events = [json.loads(x) for x in (fix / "openhands/sdk_v1_persisted_events_trimmed/events.jsonl").read_text().splitlines()]
    responses = {e["llm_response_id"] for e in events if e["kind"] == "ActionEvent"}
    obs = [e for e in events if e["kind"] == "ObservationEvent"]
    assert sum(s.kind == "action" for s in t.spans) == len(responses)
    assert [s.cause_id for s in t.spans if s.kind == "observation"] == [e["tool_call_id"] for e in obs]
    assert "<think>" in tok.decode(t.tokens.tolist())  # reasoning kept in the action
    assert t.model == "litellm_proxy/minimax-m2.7"


def test_v1_eval_output_and_task_files(tok, fix):
    d = fix / "openhands/v1_sdk_eval_openagentsafety_gpt4o"
    got = build(tok, d / "output.jsonl")
    for _, t in got:
        # checkpoints [] and final_score {total: 0, result: 0}: nothing graded, so no reward (not 0)
        assert t.spans[0].kind == "prompt" and t.reward is None
        assert json.loads(t.reward_raw) == {"total": 0, "result": 0}
    r = IngestReport()
    ts = {t.prompt_id: t for t in iter_trajectories([str(d)], report=r)}
    assert ts["safety-transitions"].reward == 1.0
    assert json.loads(ts["safety-transitions"].reward_raw) == {"total": 1, "result": 1}
    assert ts["safety-attendance"].reward == 0.0
    assert ts["safety-delete-all-project-under-plane"].reward == 0.0  # bool in checkpoints: type drift
    crash = [p for p in r.problems if "relocation" in p.origin.path]
    assert crash and crash[0].kind == "no_trajectory" and "evaluator crash" in crash[0].reason
    # parallel tool calls: two ActionEvents of one llm_response_id are one action span
    traj = json.loads((d / "traj_safety-transitions.json").read_text())
    n_resp = len({e["llm_response_id"] for e in traj if e["kind"] == "ActionEvent"})
    n_calls = sum(e["kind"] == "ActionEvent" for e in traj)
    t = ts["safety-transitions"]
    assert sum(s.kind == "action" for s in t.spans) == n_resp < n_calls
    assert sum(len(s.tool_call_ids or []) for s in t.spans) == n_calls


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


@pytest.mark.parametrize("name", ["v0.x_gpt4_pydicom__pydicom-1458.traj"])  # 1.x: test_fidelity.py
def test_swe_agent(tok, fix, name):
    path = fix / "swe-agent" / name
    d = json.loads(path.read_text())
    (_, t), = build(tok, path)
    roles = [h["role"] for h in d["history"]]
    first = roles.index("assistant")
    assert [s.kind for s in t.spans] == ["prompt"] + ["action" if r == "assistant" else "observation"
                                                      for r in roles[first:]]
    assert t.reward is None and t.status == "completed"
    if name.startswith("v1"):
        ids = [h["tool_call_ids"][0] for h in d["history"] if h["role"] == "tool"]
        assert [s.cause_id for s in t.spans if s.kind == "observation"] == ids


def test_swe_agent_tool_call_without_id_is_linked_by_step():
    # an id-less call has id None (not the string "None"), so its observation falls back to
    # the synthetic step id of the action before it
    d = {"history": [{"role": "system", "content": "s"},
                     {"role": "assistant", "content": "a", "tool_calls": [{"function": {"name": "bash"}}]},
                     {"role": "user", "content": "o"}], "info": {}}
    conv = parse_traj(d, Origin("x.traj"))
    assert conv.messages[1].tool_calls[0].id is None
    assert conv.messages[2].cause_id == "step-0"


def test_nebius_rows(tok, fix):
    path = fix / "nebius-swe-agent-trajectories/sample_raw.json"
    rows = json.loads(path.read_text())
    got = build(tok, path)
    for row, (_, t) in zip(rows, got):
        n_ai = sum(m["role"] == "ai" for m in row["trajectory"])
        assert sum(s.kind == "action" for s in t.spans) == n_ai
        assert t.reward == 1.0 and t.reward_raw == "true" and t.model == row["model_name"]


def test_nemo_gym_engine_ids_kept_exactly(fix):
    path = fix / "nemo-gym/competitive_coding_challenges_example_rollouts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    ts = list(iter_trajectories([str(path)]))
    assert len(ts) == len(rows)
    for row, t in zip(rows, ts):
        msg = [o for o in row["response"]["output"] if o.get("generation_token_ids")][0]
        assert t.token_source == "engine" and t.logprob_source == "engine"
        assert t.tokens.tolist() == msg["prompt_token_ids"] + msg["generation_token_ids"]
        a = t.spans[1]
        # the logs never say which version sampled: no made-up version 0 (the audits showed its
        # staleness and full version coverage), so staleness is undefined
        assert kinds(t) == "pa" and a.policy_version is None and t.metadata["policy_version_known"] is False
        np.testing.assert_array_equal(t.logprobs[a.start:a.end], np.asarray(msg["generation_log_probs"], np.float32))
        assert np.isnan(t.logprobs[:a.start]).all()
        assert t.reward == row["reward"] == 0.0 and t.reward_raw == "0.0"


def test_nemo_gym_text_only_rows_are_retokenized(tok, fix):
    path = fix / "nemo-gym/hermes_agent_example_math_rollouts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    got = build(tok, path)
    assert len(got) == len(rows)
    for row, (_, t) in zip(rows, got):
        out = row["response"]["output"]
        assert sum(s.kind == "observation" for s in t.spans) == sum(o["type"] == "function_call_output" for o in out)
        assert t.reward == float(row["reward"])


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
