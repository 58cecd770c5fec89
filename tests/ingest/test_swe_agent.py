"""trajstore/ingest/formats/swe_agent.py: SWE-agent .traj files and nebius SWE-agent rows: span kinds and
order, action and observation counts, rewards, the token oracle (stored ids == the chat template's
render of the whole conversation) and, on the real fixtures, every span decoded against what the
harness sent and the model generated."""

from __future__ import annotations

import json

import pytest

from tests.helpers.ingest import (
    END,
    GEN,
    SYS,
    TOOL_OBS,
    USER,
    assert_each_once_in_order,
    assert_linked,
    build,
    call,
    decoded,
    ingest,
)
from trajstore.ingest.formats.swe_agent import parse_swe_agent_traj
from trajstore.ingest.records import Origin


# per-format fidelity on a real fixture, every span decoded against what the harness sent
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


# per-format fidelity on a real fixture, every span decoded against what the harness sent
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


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_nebius_rows_fidelity(tok, fix):
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


# 1.x: test_swe_agent_1x_history_processor_contexts
@pytest.mark.parametrize("name", ["v0.x_gpt4_pydicom__pydicom-1458.traj"])
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
    conv = parse_swe_agent_traj(d, Origin("x.traj"))
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


# reported: ../shared/fixtures/reported/swe-agent-thinking-blocks
def test_swe_agent_thinking_blocks_are_rendered_into_the_action(tok, reported):
    (t,), _ = ingest(reported / "swe-agent-thinking-blocks")
    assert decoded(tok, t)[1] == ("action", "<think>\nPRIVATE-REASONING-MARKER: the bug is in util.py\n</think>\n\n"
                                          "I will list files.\n" + call("bash", '{"command": "ls"}') + "<|im_end|>")
    assert t.metadata["replayed"] is False  # model_stats logs no token counts: not a replay


# reported: ../shared/fixtures/reported/swe-agent-final-step-only-in-trajectory
def test_swe_agent_final_step_only_in_trajectory(tok, reported):
    (t,), _ = ingest(reported / "swe-agent-final-step-only-in-trajectory")
    assert decoded(tok, t) == [
        ("prompt", SYS.format("You are a test programmer.") + USER.format("Fix the typo in notes.txt") + GEN),
        ("action", "Let me look at the file.\n" + call("bash", '{"command": "cat notes.txt"}') + "<|im_end|>"),
        ("observation", TOOL_OBS.format("helo world") + GEN),
        ("action", "The typo is clear; I will submit now.\n" + call("submit", "{}") + "<|im_end|>")]
    # actions = len(trajectory) = model_stats.api_calls = 2
    assert sum(s.kind == "action" for s in t.spans) == t.metadata["harness_model_calls"] == 2
    assert t.model == "made-up-model" and t.metadata["replayed"] is False
    assert "final_step" in t.metadata["fidelity_gaps"]
