"""trajstore/ingest/formats/claude_code.py: real Claude Code sessions (tests/fixtures/ingest/claude_code)
stored span by span; the session tree (a rewind's branch as a fork, a compaction as a context
rewrite, sidechains and sub-agent files as sub-agents); finish reasons from stop_reason; detection."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from tests.helpers.faithful import FIXTURES, action, assert_faithful, load_jsonl, observation
from tests.helpers.ingest import END, GEN, ingest, span_texts, stored
from trajstore.cli.main import app
from trajstore.ingest import ingest_paths
from trajstore.ingest.formats import registry

DIR = FIXTURES / "claude_code"
TWO = DIR / "full-session-two.jsonl"
FIVE = DIR / "full-session-five.jsonl"


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") if b.get("type") == "text" else "[image]" if b.get("type") == "image" else ""
                   for b in content)


def _turns(lines: list[dict]) -> tuple[list, str]:
    """The spans a linear session must become, from its lines: one action per ``message.id``
    (its text blocks, thinking, tool_use blocks), each tool_result a tool observation, user text a
    user observation; and the tail of the first call's prompt."""
    turns, prompt, calls = [], [], {}
    for ln in lines:
        if ln.get("type") not in ("user", "assistant"):
            continue
        content = ln["message"]["content"]
        if ln["type"] == "assistant":
            mid = ln["message"]["id"]
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            if mid not in calls:
                calls[mid] = {"text": [], "calls": [], "stop": None}
                turns.append(calls[mid])
            c = calls[mid]
            c["text"] += [b["text"] for b in blocks if b["type"] == "text"]
            c["calls"] += [(b["name"], json.dumps(b["input"], ensure_ascii=False)) for b in blocks if b["type"] == "tool_use"]
            c["stop"] = ln["message"].get("stop_reason") or c["stop"]
            continue
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        out = [observation("tool", _text(b["content"]) if isinstance(b["content"], list) else b["content"])
               for b in blocks if b["type"] == "tool_result"]
        text = [b for b in blocks if b["type"] in ("text", "image")]
        if text:
            out.append(observation("user", _text(text)))
        (prompt if not calls else turns).extend(out)
    stops = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length", None: None}
    turns = [action("\n".join(t["text"]), t["calls"], finish_reason=stops[t["stop"]]) if isinstance(t, dict) else t
             for t in turns]
    tail = "".join(f"<|im_start|>{o.role}\n{o.text}{END}\n" for o in prompt) + GEN
    return turns, tail


def test_real_sessions_ingest_with_exit_0(tmp_path):
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(DIR)])
    assert res.exit_code == 0, res.output
    assert sorted(r["source"] for r in stored(tmp_path / "s")) == ["claude-code", "claude-code"]


def test_every_message_of_a_real_session_is_its_span(tmp_path, tok):
    for path in (TWO, FIVE):
        (t,), rep = ingest(path)
        assert rep.problems == [] and t.source == "claude-code", path
        row = {"tokens": t.tokens.tolist(), "spans": [s.model_dump() for s in t.spans]}
        lines = load_jsonl(path)
        turns, tail = _turns(lines)
        assert_faithful(row, tok, turns, tail)
        assert t.model == "claude-sonnet-4-5-20250929" and t.reward is None
        assert t.metadata["session_id"] == lines[-1]["sessionId"]
        assert "system_prompt" in t.metadata["fidelity_gaps"]


def test_the_status_says_how_the_session_ended(tmp_path):
    (five,), _ = ingest(FIVE)
    assert five.status == "aborted" and "mid-turn" in five.metadata["status_evidence"]
    lines = load_jsonl(TWO)
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    (two,), _ = ingest(p)
    assert two.status == "completed"  # ends on the model's final answer
    interrupted = {**lines[-1], "uuid": "u-int", "parentUuid": lines[-1]["uuid"], "type": "user",
                   "message": {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]}}
    error = {**lines[-1], "uuid": "u-err", "parentUuid": lines[-1]["uuid"], "isApiErrorMessage": True,
             "message": {**lines[-1]["message"], "id": "msg_err", "model": "<synthetic>",
                         "content": [{"type": "text", "text": "API Error: 529 Overloaded"}]}}
    for extra, status in ((interrupted, "aborted"), (error, "failed")):
        p.write_text("".join(json.dumps(ln) + "\n" for ln in lines + [extra]))
        (t,), _ = ingest(p)
        assert t.status == status
    assert t.metadata["synthetic_messages"] == 1 and "API Error" not in str(t.metadata)  # never an action


def _line(uuid, parent, kind, content, **kw):
    base = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/w", "sessionId": "sess-1",
            "version": "2.1.30", "type": kind, "uuid": uuid, "timestamp": "2026-01-05T10:00:00.000Z"}
    if kind == "assistant":
        msg = {"model": "claude-opus-4-5", "id": kw.pop("mid"), "type": "message", "role": "assistant",
               "content": content, "stop_reason": kw.pop("stop", "end_turn"), "usage": {"output_tokens": 5}}
    else:
        msg = {"role": "user", "content": content}
    return {**base, "message": msg, **kw}


def test_stop_reasons_are_finish_reasons_and_a_length_stop_is_length(tmp_path, tok):
    lines = [_line("u1", None, "user", "Write it."),
             _line("a1", "u1", "assistant", [{"type": "text", "text": "Reading."}], mid="m1", stop=None),
             _line("a2", "a1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "x"}}],
                   mid="m1", stop="tool_use"),
             _line("u2", "a2", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "data"}]),
             _line("a3", "u2", "assistant", [{"type": "text", "text": "Here is a very long"}], mid="m2", stop="max_tokens")]
    p = tmp_path / "sess-1.jsonl"
    p.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    (t,), _ = ingest(p)
    assert [s.finish_reason for s in t.spans if s.kind == "action"] == ["tool_calls", "length"]
    assert [s.call_id for s in t.spans if s.kind == "action"] == ["m1", "m2"]  # one call per message.id
    assert t.spans[2].cause_id == "t1" and t.spans[1].tool_call_ids == ["t1"]


def test_a_rewind_branch_is_a_fork_holding_only_its_own_calls(tmp_path, tok):
    lines = [_line("u1", None, "user", "Plan it."),
             _line("a1", "u1", "assistant", [{"type": "text", "text": "Plan A."}], mid="m1"),
             _line("u2", "a1", "user", "Do A."),
             _line("a2", "u2", "assistant", [{"type": "text", "text": "Did A."}], mid="m2"),
             # the user rewound to after "Plan A." and asked for B instead
             _line("u3", "a1", "user", "Do B."),
             _line("a3", "u3", "assistant", [{"type": "text", "text": "Did B."}], mid="m3")]
    p = tmp_path / "sess-1.jsonl"
    p.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    ts, rep = ingest(p)
    assert rep.problems == [] and len(ts) == 2
    main, fork = ts
    assert [x for k, x in span_texts(main, tok) if k == "action"] == ["Plan A." + END, "Did B." + END]
    assert [x for k, x in span_texts(fork, tok) if k == "action"] == ["Did A." + END]  # "Plan A." is context
    assert span_texts(fork, tok)[0][1].endswith("Plan A.<|im_end|>\n<|im_start|>user\nDo A.<|im_end|>\n" + GEN)
    assert (fork.parent_trajectory_id, fork.link_kind, fork.episode_id) == (main.trajectory_id, "fork", main.trajectory_id)
    assert 0 < fork.fork_point < len(fork.tokens)


def test_a_compaction_is_a_context_rewrite(tmp_path, tok):
    lines = [_line("u1", None, "user", "Step one."),
             _line("a1", "u1", "assistant", [{"type": "text", "text": "One done."}], mid="m1"),
             {"parentUuid": None, "logicalParentUuid": "a1", "isSidechain": False, "type": "system",
              "subtype": "compact_boundary", "content": "Conversation compacted", "uuid": "b1", "sessionId": "sess-1",
              "compactMetadata": {"trigger": "auto", "preTokens": 150000}, "timestamp": "2026-01-05T10:01:00.000Z"},
             _line("s1", "b1", "user", "This session is being continued from a previous conversation. Summary: one done.",
                   isCompactSummary=True),
             _line("u2", "s1", "user", "Step two."),
             _line("a2", "u2", "assistant", [{"type": "text", "text": "Two done."}], mid="m2")]
    p = tmp_path / "sess-1.jsonl"
    p.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    ts, _ = ingest(p)
    assert len(ts) == 2
    before, after = ts
    prompt = span_texts(after, tok)[0][1]
    assert "Summary: one done." in prompt and "Step one." not in prompt and "One done." not in prompt
    assert span_texts(after, tok)[1:] == [("action", "Two done." + END)]
    assert (after.parent_trajectory_id, after.link_kind) == (before.trajectory_id, "context_rewrite")
    assert after.metadata["episode"]["change"] == "compaction" and after.metadata["compactions"] == 1


def test_sub_agents_in_their_own_files_and_in_sidechains_are_linked(tmp_path, tok):
    d = tmp_path / "proj"
    (d / "sess-1" / "subagents").mkdir(parents=True)
    main = [_line("u1", None, "user", "Find it."),
            _line("a1", "u1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Task",
                                              "input": {"prompt": "search"}}], mid="m1", stop="tool_use"),
            _line("u2", "a1", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "found"}],
                  toolUseResult={"agentId": "ab12", "status": "completed"}),
            _line("a2", "u2", "assistant", [{"type": "text", "text": "Found."}], mid="m2"),
            # an older layout: a sidechain in the session file
            _line("x1", None, "user", "side task", isSidechain=True),
            _line("x2", "x1", "assistant", [{"type": "text", "text": "side done"}], mid="m9", isSidechain=True)]
    sub = [_line("s1", None, "user", "search", isSidechain=True, agentId="ab12"),
           _line("s2", "s1", "assistant", [{"type": "text", "text": "found"}], mid="m5", isSidechain=True, agentId="ab12")]
    (d / "sess-1.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in main))
    (d / "sess-1" / "subagents" / "agent-ab12.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in sub))
    ts, rep = ingest(d)
    assert rep.problems == [] and len(ts) == 3
    root = next(t for t in ts if t.parent_trajectory_id is None)
    kids = {t.metadata.get("agent_id") or t.metadata.get("sidechain_root"): t for t in ts if t is not root}
    assert set(kids) == {"ab12", "x1"}
    for k, answer in (("ab12", "found"), ("x1", "side done")):
        t = kids[k]
        assert (t.parent_trajectory_id, t.link_kind, t.episode_id) == (root.trajectory_id, "subagent", root.trajectory_id)
        assert [x for kind, x in span_texts(t, tok) if kind == "action"] == [answer + END]
    assert ts[0] is root


def test_detection_of_session_lines(tmp_path):
    for line in load_jsonl(TWO) + load_jsonl(FIVE):
        assert registry.detect_record(line) is None
        assert registry.detect_event(line).name == "claude-code", line.get("type")
    codex = {"timestamp": "t", "type": "session_meta", "payload": {"id": "x"}}
    assert registry.detect_event(codex) is None or registry.detect_event(codex).name != "claude-code"
    v1 = {"kind": "MessageEvent", "id": "e1", "source": "user"}
    assert registry.detect_event(v1).name == "openhands-v1-events"
    # the titles of a session (summary lines) never make one
    d = tmp_path / "t"
    d.mkdir()
    shutil.copy(FIVE, d / FIVE.name)
    rep = ingest_paths([str(d)], tmp_path / "s")
    assert rep.problems == [] and rep.trajectories_written == 1
