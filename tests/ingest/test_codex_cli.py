"""trajstore/ingest/formats/codex_cli.py: real Codex CLI rollouts (tests/fixtures/ingest/codex_cli) stored
span by span; one model call's items as one action (told by the CLI's token_count events, in the
order of old and new versions); base instructions, compaction, forks and sub-agents; status."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.helpers.faithful import FIXTURES, action, assert_faithful, load_jsonl, observation
from tests.helpers.ingest import END, GEN, call, ingest, span_texts, stored
from trajstore.cli.main import app
from trajstore.ingest.formats import registry

DIR = FIXTURES / "codex_cli"
ROLLOUTS = sorted(DIR.glob("rollout-*.jsonl"))


def _text(item) -> str:
    """A message's content items joined: a newline between two, none after one that ends with it."""
    out = ""
    for c in item["content"]:
        part = c["text"] if "text" in c else "[image]"
        out += ("\n" if out and not out.endswith("\n") else "") + part
    return out


def _turns(lines: list[dict]) -> tuple[list, str]:
    """The spans a rollout whose calls each return one message or one function call (and
    encrypted reasoning) must become, from its response items; and the first prompt's tail."""
    turns, prompt = [], []
    for ln in lines:
        if ln["type"] != "response_item":
            continue
        item = ln["payload"]
        kind = item["type"]
        if kind == "function_call":
            turns.append(action(calls=[(item["name"], item["arguments"])]))
        elif kind == "message" and item["role"] == "assistant":
            turns.append(action(_text(item)))
        elif kind == "function_call_output":
            turns.append(observation("tool", item["output"]))
        elif kind == "message":
            (turns if turns else prompt).append(observation(item["role"], _text(item)))
    tail = "".join(f"<|im_start|>{o.role}\n{o.text}{END}\n" for o in prompt) + GEN
    return turns, tail


def test_real_rollouts_ingest_with_exit_0(tmp_path):
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "s"), str(DIR)])
    assert res.exit_code == 0, res.output
    assert len(stored(tmp_path / "s")) == len(ROLLOUTS) == 2


def test_every_item_of_a_real_rollout_is_its_span(tok):
    for path in ROLLOUTS:
        (t,), rep = ingest(path)
        assert rep.problems == [] and t.source == "codex-cli"
        lines = load_jsonl(path)
        turns, tail = _turns(lines)
        row = {"tokens": t.tokens.tolist(), "spans": [s.model_dump() for s in t.spans]}
        assert_faithful(row, tok, turns, tail)
        # one action per model call: as many as the CLI counted (its token_count events)
        counted = sum(1 for ln in lines if ln["type"] == "event_msg" and ln["payload"]["type"] == "token_count")
        assert sum(s.kind == "action" for s in t.spans) == counted
        meta = lines[0]["payload"]
        assert t.metadata["session_id"] == meta["id"] and t.model == "gpt-5-codex" and t.status == "completed"
        gaps = t.metadata["fidelity_gaps"]
        assert "encrypted" in gaps["reasoning"] and "base_instructions" in gaps["system_prompt"]
        assert len(t.metadata["reasoning_summaries"]) == sum(
            1 for ln in lines if ln["type"] == "response_item" and ln["payload"]["type"] == "reasoning")


def _l(kind, payload, ts="2026-03-01T10:00:00.000Z"):
    return {"timestamp": ts, "type": kind, "payload": payload}


def _meta(tid, **kw):
    return _l("session_meta", {"id": tid, "cli_version": "0.130.0", "originator": "codex_cli_rs",
                               "base_instructions": {"text": "You are Codex."}, **kw})


def _user(text):
    return _l("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})


def _fc(cid, cmd):
    return _l("response_item", {"type": "function_call", "name": "shell", "arguments": json.dumps({"cmd": cmd}),
                                "call_id": cid})


def _out(cid, text):
    return _l("response_item", {"type": "function_call_output", "call_id": cid, "output": text})


def _say(text):
    return _l("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})


TOKENS = _l("event_msg", {"type": "token_count", "info": {"last_token_usage": {"output_tokens": 9}}})
DONE = _l("event_msg", {"type": "task_complete", "last_agent_message": "ok"})


def _write(p, lines):
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def test_parallel_calls_of_one_response_are_one_action_in_either_order(tmp_path, tok):
    new = [_meta("t1"), _user("check"), _fc("c1", "ls"), _fc("c2", "pwd"), TOKENS, _out("c1", "a"), _out("c2", "/w"),
           _say("done"), TOKENS, DONE]
    old = [_meta("t1"), _user("check"), TOKENS, _fc("c1", "ls"), _out("c1", "a"), _fc("c2", "pwd"), _out("c2", "/w"),
           TOKENS, _say("done")]
    for name, lines in (("new", new), ("old", old)):
        (t,), _ = ingest(_write(tmp_path / f"rollout-{name}.jsonl", lines))
        texts = span_texts(t, tok)
        assert texts[0][1] == ("<|im_start|>system\nYou are Codex.<|im_end|>\n<|im_start|>user\ncheck<|im_end|>\n" + GEN)
        assert [x for k, x in texts[1:] if k == "action"] == [
            call("shell", '{"cmd": "ls"}') + "\n" + call("shell", '{"cmd": "pwd"}') + END, "done" + END], name
        assert [s.cause_id for s in t.spans if s.kind == "observation"] == ["c1", "c2"]
        assert "system_prompt" not in t.metadata.get("fidelity_gaps", {}) and t.status == "completed"


def test_a_compaction_starts_a_new_context(tmp_path, tok):
    summary = "Summary: listed the files."
    lines = [_meta("t1"), _user("list"), TOKENS, _fc("c1", "ls"), _out("c1", "a b"), TOKENS, _say("a and b"),
             _l("compacted", {"message": summary, "replacement_history": [
                 {"type": "message", "role": "user", "content": [{"type": "input_text", "text": summary}]}]}),
             _user("now count them"), TOKENS, _say("two")]
    ts, _ = ingest(_write(tmp_path / "rollout-c.jsonl", lines))
    assert len(ts) == 2
    prompt = span_texts(ts[1], tok)[0][1]
    assert prompt == ("<|im_start|>system\nYou are Codex.<|im_end|>\n<|im_start|>user\n" + summary + END + "\n"
                      "<|im_start|>user\nnow count them<|im_end|>\n" + GEN)
    assert (ts[1].parent_trajectory_id, ts[1].link_kind) == (ts[0].trajectory_id, "context_rewrite")
    del lines[7]["payload"]["replacement_history"]
    ts, _ = ingest(_write(tmp_path / "rollout-c.jsonl", lines))
    assert "summary alone" in ts[1].metadata["fidelity_gaps"]["context_rewritten"]


def test_a_fork_keeps_the_copied_history_as_context_and_a_subagent_links_to_its_parent(tmp_path, tok):
    d = tmp_path / "sessions" / "2026" / "03" / "01"
    d.mkdir(parents=True)
    parent = [_meta("p-1"), _user("plan"), TOKENS, _say("plan A"), DONE]
    _write(d / "rollout-2026-03-01T10-00-00-p-1.jsonl", parent)
    fork = [_meta("f-2", forked_from_id="p-1"), *parent[1:4], _user("do B instead"), TOKENS, _say("did B"), DONE]
    _write(d / "rollout-2026-03-01T10-05-00-f-2.jsonl", fork)
    sub = [_meta("s-3", source={"subagent": {"thread_spawn": {"parent_thread_id": "p-1", "depth": 1}}}),
           _user("review"), TOKENS, _say("fine"), DONE]
    _write(d / "rollout-2026-03-01T10-06-00-s-3.jsonl", sub)
    ts, rep = ingest(tmp_path / "sessions")
    assert rep.problems == []
    by = {t.metadata["session_id"]: t for t in ts}
    assert [x for k, x in span_texts(by["f-2"], tok) if k == "action"] == ["did B" + END]  # not "plan A" again
    assert span_texts(by["f-2"], tok)[0][1].endswith("plan A<|im_end|>\n<|im_start|>user\ndo B instead<|im_end|>\n" + GEN)
    assert (by["f-2"].parent_trajectory_id, by["f-2"].link_kind) == (by["p-1"].trajectory_id, "fork")
    assert by["f-2"].fork_point > 0 and by["f-2"].metadata["copied_items"] == 2
    assert (by["s-3"].parent_trajectory_id, by["s-3"].link_kind) == (by["p-1"].trajectory_id, "subagent")


def test_the_status_says_how_the_last_turn_ended(tmp_path):
    base = [_meta("t1"), _user("go"), TOKENS, _fc("c1", "ls")]
    for end, status in (([_l("event_msg", {"type": "turn_aborted", "reason": "interrupted"})], "aborted"),
                        ([_l("event_msg", {"type": "error", "message": "stream disconnected"})], "failed"),
                        ([_out("c1", "x")], "aborted"), ([_out("c1", "x"), TOKENS, _say("ok"), DONE], "completed")):
        (t,), _ = ingest(_write(tmp_path / "rollout-s.jsonl", base + end))
        assert t.status == status, end


def test_detection_of_rollout_lines():
    for ln in load_jsonl(ROLLOUTS[0]):
        assert registry.detect_record(ln) is None and registry.detect_event(ln).name == "codex-cli"
    claude = {"type": "user", "uuid": "u", "sessionId": "s", "message": {"role": "user", "content": "x"}}
    assert registry.detect_event(claude).name == "claude-code"
