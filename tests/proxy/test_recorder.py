"""How the recorder (trajstore/proxy/recorder.py) cuts calls into trajectories when a reply was
cut by ``max_tokens`` (finish reason ``length``): the fake upstream's template appends its
end-of-turn token (0) after the cut content, as SmolLM2's, Qwen's and Llama's templates do."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from trajstore.proxy.testing import EOS, render
from trajstore.reader import read_trajectories


def _turns(url: str, session: str, n: int, *, max_tokens: int, stream: bool = False) -> list[dict]:
    """`n` turns of one conversation, each reply cut at `max_tokens`; returns the messages."""
    msgs = [{"role": "user", "content": "hi"}]
    for t in range(n):
        body = {"model": "fake", "messages": msgs, "max_tokens": max_tokens, "stream": stream}
        if stream:
            with httpx.stream("POST", f"{url}/s/{session}/v1/chat/completions", json=body, timeout=30) as r:
                chunks = [json.loads(ln[5:]) for ln in r.iter_lines() if ln.startswith("data:") and "[DONE]" not in ln]
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
            finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
        else:
            r = httpx.post(f"{url}/s/{session}/v1/chat/completions", json=body, timeout=30)
            r.raise_for_status()
            text, finish = r.json()["choices"][0]["message"]["content"], r.json()["choices"][0]["finish_reason"]
        assert finish == "length"
        msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": f"go on {t}"}]
    return msgs


def _rows(store: str, session: str) -> list[dict]:
    return sorted((r for r in read_trajectories(store).to_pylist() if json.loads(r["metadata"])["session"] == session),
                  key=lambda r: r["trajectory_id"])


def _actions(row: dict) -> list[list[int]]:
    return [row["tokens"][s["start"]:s["end"]] for s in row["spans"] if s["kind"] == "action"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_cut_by_max_tokens_is_continued_by_the_next_turn(fake_upstream, start_proxy, tmp_path, stream):
    # A `length` reply followed by the next turn is one trajectory: the next
    # prompt holds the cut ids, then the template's end-of-turn token (0), which is the
    # observation's first token (the model never sampled it), never re-tokenized text
    httpx.post(f"{fake_upstream.url}/_fake/config", json={"reply": "ok then"}).raise_for_status()
    px = start_proxy(fake_upstream.url)
    msgs = _turns(px.url, "cut", 3, max_tokens=2, stream=stream)
    done = httpx.post(f"{px.url}/s/cut/finish", json={}).json()
    assert len(done["trajectories"]) == 1
    (row,) = _rows(str(tmp_path / "store"), "cut")
    assert _actions(row) == [[115, 111]] * 3  # "ok" = 111 + 4, 107 + 4: cut before " then" and EOS
    assert [s["finish_reason"] for s in row["spans"] if s["kind"] == "action"] == ["length"] * 3
    assert [row["tokens"][s["start"]] for s in row["spans"] if s["kind"] == "observation"] == [EOS, EOS]
    assert row["tokens"] == render(msgs[:-2]) + [115, 111]
    stats = httpx.get(f"{px.url}/proxy/stats").json()
    assert stats["context_breaks"] == 0 and stats["context_breaks_after_length"] == 0


def test_a_cut_reply_the_template_re_renders_differently_is_a_new_part_counted_apart(fake_upstream, start_proxy,
                                                                                        tmp_path, caplog):
    # A template that trims content ("ok " -> "ok") renders the cut reply with
    # other ids than the engine sampled: the mismatch lies inside the last action's ids, so a new
    # part is right (the stored action stays the sampled ids, never re-tokenized text), but it is
    # counted apart from other context changes (context_breaks_after_length) and its reason is
    # logged once per proxy, not once per call
    caplog.set_level(logging.INFO, logger="trajstore.proxy")
    httpx.post(f"{fake_upstream.url}/_fake/config", json={"reply": "ok then", "trim": True}).raise_for_status()
    px = start_proxy(fake_upstream.url)
    _turns(px.url, "trim1", 2, max_tokens=3)  # "ok " + EOS rendered "ok" + EOS
    _turns(px.url, "trim2", 2, max_tokens=3)
    c = px.url + "/s/trim1/v1/chat/completions"
    httpx.post(c, json={"model": "fake", "messages": [{"role": "user", "content": "condensed"}]}).raise_for_status()
    for s in ("trim1", "trim2"):
        httpx.post(f"{px.url}/s/{s}/finish", json={}).raise_for_status()
    a, b, c3 = _rows(str(tmp_path / "store"), "trim1")
    assert _actions(a) == [[115, 111, 36]]  # the sampled "ok " (space = 32 + 4), as the engine gave it
    assert _actions(b)[0] == [115, 111, 36] and a["tokens"] == b["tokens"][:len(a["tokens"]) - 1] + [36]
    meta = json.loads(b["metadata"])
    assert meta["context_breaks"] == 2 and meta["context_breaks_after_length"] == 1
    assert [json.loads(r["metadata"])["episode"]["part"] for r in (a, b, c3)] == [1, 2, 3]
    stats = httpx.get(f"{px.url}/proxy/stats").json()
    assert stats["context_breaks"] == 3 and stats["context_breaks_after_length"] == 2  # the condensed one is not
    lines = [r.getMessage() for r in caplog.records if "max_tokens" in r.getMessage()]
    assert len(lines) == 1 and "trim1" in lines[0], lines
