"""Lineages of a proxy session (trajstore/proxy/lineage.py), through the proxy and the fake
upstream: a parent and a sub-agent interleaving, a retry (fork), a condensed context (context
rewrite), explicit lineage ids (header and URL); and the link-kind rule on a LineageSet alone.

The fake's "tokenizer" (trajstore/proxy/testing.py) renders each chat message as
``1 <role bytes + 4> 2 <content bytes + 4> 0 3`` and ends a prompt with ``1 assistant 2``; every
reply is "ok" + end of turn, ids [115, 111, 0]. The fork points below are counted by hand from it.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from trajstore.builder import TrajectoryBuilder
from trajstore.proxy.lineage import CONTEXT_REWRITE, FORK, SUBAGENT, LineageSet
from trajstore.proxy.testing import render
from trajstore.reader import read_trajectories

REPLY_IDS = [115, 111, 0]


def _chat(url: str, msgs: list[dict], headers: dict | None = None) -> None:
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": "fake", "messages": msgs}, headers=headers,
                   timeout=60)
    r.raise_for_status()
    assert r.json()["choices"][0]["message"]["content"] == "ok"


def _turn(msgs: list[dict], user: str) -> list[dict]:
    return [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": user}]


def _played(url: str, turns: int) -> list[dict]:
    """`turns` calls of one agent through the proxy at `url`, each extending the last; returns the
    conversation with the last reply and a next user message."""
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    for t in range(turns):
        _chat(url, msgs)
        msgs = _turn(msgs, f"turn {t}")
    return msgs


def _rows(store) -> dict[str, dict]:
    return {r["trajectory_id"]: r for r in read_trajectories(str(store)).to_pylist()}


def _actions(row: dict) -> list[tuple[int, int]]:
    return [(s["start"], s["end"]) for s in row["spans"] if s["kind"] == "action"]


def _finish(url: str, session: str) -> dict:
    r = httpx.post(f"{url}/s/{session}/finish", json={"status": "completed", "reward": 1.0})
    r.raise_for_status()
    return r.json()


def test_an_interleaved_parent_and_sub_agent_are_two_linked_lineages(fake_upstream, start_proxy, tmp_path):
    # A1 B1 A2 B2 A3 B3, each extending its own history, was stored as 6 one-action
    # trajectories (context_breaks 5)
    px = start_proxy(fake_upstream.url)
    url = f"{px.url}/s/inter"
    a = [{"role": "system", "content": "you are the lead"}, {"role": "user", "content": "fix the bug"}]
    b = [{"role": "system", "content": "you are a helper"}, {"role": "user", "content": "read the file"}]
    for t in range(3):
        _chat(url, a)
        _chat(url, b)
        a, b = _turn(a, f"lead tool {t}"), _turn(b, f"helper tool {t}")
    done = _finish(px.url, "inter")
    rows = _rows(tmp_path / "store")
    assert len(rows) == 2 and sorted(done["trajectories"]) == sorted(rows)
    lead, helper = (rows[t] for t in sorted(rows))  # opened in this order
    # each is the last prompt its agent sent plus the reply: 3 actions each, no other copy
    assert lead["tokens"] == render(a[:-2]) + REPLY_IDS and helper["tokens"] == render(b[:-2]) + REPLY_IDS
    assert len(_actions(lead)) == len(_actions(helper)) == 3
    # shared prefix: frame 1, "system" (6), frame 2, "you are " (8) = 16 tokens
    assert (helper["parent_trajectory_id"], helper["fork_point"], helper["link_kind"]) == (
        lead["trajectory_id"], 16, "subagent")
    assert helper["tokens"][:16] == lead["tokens"][:16] and helper["tokens"][16] != lead["tokens"][16]
    assert lead["parent_trajectory_id"] is None and lead["link_kind"] is None and lead["fork_point"] is None
    assert lead["abandoned"] is False and helper["abandoned"] is False  # both went on: both earn the reward
    assert lead["episode_id"] == helper["episode_id"] and lead["episode_id"].startswith("inter.")
    assert all(json.loads(r["metadata"])["episode"]["id"] == lead["episode_id"] for r in rows.values())
    assert all(s >= 16 for s, _ in _actions(helper))  # the shared prefix is the helper's prompt
    stats = httpx.get(f"{px.url}/proxy/stats").json()
    assert stats["context_breaks"] == 1 and stats["lineages"] == 2 and stats["lineages_per_episode"] == {"2": 1}


@pytest.mark.parametrize("sub_first", [True, False])
def test_a_sub_agent_that_inherits_the_whole_context_without_a_name_is_the_child(fake_upstream, start_proxy,
                                                                                 tmp_path, sub_first):
    # The sub-agent's first prompt extends the lead's whole context: when it called before the
    # lead went on, it was taken for the lead's next turn: the lead's trajectory held the
    # sub-agent's calls and the lead's own later turns were stored as a "subagent" child of it
    # (parent and sub-agent labels swapped). Either order must store the same two trajectories.
    px = start_proxy(fake_upstream.url)
    url = f"{px.url}/s/inherit"
    lead = [{"role": "system", "content": "you are the lead"}, {"role": "user", "content": "fix the bug"}]
    _chat(url, lead)
    sub = _turn(lead, "sub-agent: read the file")
    lead = _turn(lead, "tool: started a sub-agent")
    for t in range(3):  # they interleave; the lead makes the episode's last call
        for msgs in ((sub, lead) if sub_first else (lead, sub)):
            if t < 2 or msgs is lead:
                _chat(url, msgs)
        sub, lead = _turn(sub, f"file part {t}"), _turn(lead, f"lead tool {t}")
    done = _finish(px.url, "inherit")
    rows = _rows(tmp_path / "store")
    assert len(rows) == 2 and sorted(done["trajectories"]) == sorted(rows)
    first, second = (rows[t] for t in sorted(rows))  # in the order they opened
    # the lead: its first call, then its own turns; the root, as the first lineage of the session
    assert first["tokens"] == render(lead[:-2]) + REPLY_IDS and len(_actions(first)) == 4
    assert first["parent_trajectory_id"] is None and first["link_kind"] is None
    # the sub-agent: its calls only, its prompt the lead's context it inherited plus its task
    assert second["tokens"] == render(sub[:-4]) + REPLY_IDS and len(_actions(second)) == 2
    # shared: the lead's first call and reply (render + 3), then 3, 1, "user" (4), 2: the messages
    # "sub-agent: ..." / "tool: ..." differ at their first byte
    fork = len(render(lead[:2])) + 3 + 7
    assert (second["parent_trajectory_id"], second["fork_point"], second["link_kind"]) == (
        first["trajectory_id"], fork, "subagent")
    assert second["tokens"][:fork] == first["tokens"][:fork] and second["tokens"][fork] != first["tokens"][fork]
    assert _actions(second)[0][0] == len(render(_turn(lead[:2], "sub-agent: read the file")))  # all prompt before
    assert [json.loads(r["metadata"])["episode"]["part"] for r in (first, second)] == [1, 2]
    assert httpx.get(f"{px.url}/proxy/stats").json()["context_breaks"] == 1


def test_a_retry_from_an_earlier_turn_is_a_fork_of_the_original(fake_upstream, start_proxy, tmp_path):
    px = start_proxy(fake_upstream.url)
    url = f"{px.url}/s/retry"
    msgs = _played(url, 3)
    retry = [*msgs[:5], {"role": "user", "content": "other way"}]  # resends two turns, goes on differently
    _chat(url, retry)
    _chat(url, _turn(retry, "and then"))
    _finish(px.url, "retry")
    orig, fork = (r for _, r in sorted(_rows(tmp_path / "store").items()))
    assert len(_actions(orig)) == 3 and len(_actions(fork)) == 2
    # render(msgs[:4]): system 1+6+1+8+2 = 18, user "hi" 1+4+1+2+2 = 10, assistant "ok" 1+9+1+2+2 = 15,
    # user "turn 0" 1+4+1+6+2 = 14, header 1+9+1 = 11: 68 tokens; then the reply [115, 111, 0] and 3,
    # then 1, "user" (4), 2: the contents "turn 1" / "other way" differ at their first byte
    assert len(render(msgs[:4])) == 68
    assert (fork["parent_trajectory_id"], fork["fork_point"], fork["link_kind"]) == (orig["trajectory_id"], 78,
                                                                                     "fork")
    assert fork["tokens"][:78] == orig["tokens"][:78] and fork["tokens"][78] != orig["tokens"][78]
    assert _actions(orig)[1][1] == 71 <= 78  # the original's first two actions are in the shared prefix ...
    assert all(s >= 78 for s, _ in _actions(fork))  # ... and only prompt in the fork
    # the retry replaced the original: the original is the branch the harness threw away
    assert orig["abandoned"] is True and fork["abandoned"] is False


def test_a_resample_of_the_last_call_abandons_the_first_attempt(fake_upstream, start_proxy, tmp_path):
    # the harness sends its last prompt again (it did not like the answer) and goes on with the new
    # answer; also for the episode's very first call, whose resample shares none of the parent's actions
    px = start_proxy(fake_upstream.url)
    for session, turns in (("again", 2), ("first", 0)):
        msgs = _played(f"{px.url}/s/{session}", turns)
        last = msgs[:-2] if turns else msgs
        _chat(f"{px.url}/s/{session}", last)
        if not turns:
            _chat(f"{px.url}/s/{session}", last)  # the first call, resampled
        _chat(f"{px.url}/s/{session}", _turn(last, "next"))  # goes on with the kept answer
        _finish(px.url, session)
    rows = _rows(tmp_path / "store")
    for session in ("again", "first"):
        first, kept = (r for _, r in sorted((k, r) for k, r in rows.items()
                                            if json.loads(r["metadata"])["session"] == session))
        assert (kept["parent_trajectory_id"], kept["link_kind"]) == (first["trajectory_id"], "fork"), session
        assert first["abandoned"] is True and kept["abandoned"] is False, session
        assert len(_actions(kept)) == 2 and kept["reward"] == first["reward"] == 1.0


def test_a_condensed_context_is_a_context_rewrite_child(fake_upstream, start_proxy, tmp_path):
    px = start_proxy(fake_upstream.url)
    url = f"{px.url}/s/cond"
    msgs = _played(url, 2)
    condensed = [msgs[0], {"role": "user", "content": "summary: said ok twice"}]
    _chat(url, condensed)
    _chat(url, _turn(condensed, "go on"))
    _finish(px.url, "cond")
    old, new = (r for _, r in sorted(_rows(tmp_path / "store").items()))
    # system message 18, then 1, "user" (4), 2: "hi" / "summary..." differ at their first byte
    assert (new["parent_trajectory_id"], new["fork_point"], new["link_kind"]) == (old["trajectory_id"], 24,
                                                                                  "context_rewrite")
    assert new["tokens"] == render(_turn(condensed, "go on")) + REPLY_IDS  # the context the model saw
    assert len(_actions(old)) == len(_actions(new)) == 2
    assert old["abandoned"] is False and new["abandoned"] is False  # one line of context, nothing thrown away


def test_explicit_lineage_ids_by_header_and_url_are_honoured(fake_upstream, start_proxy, tmp_path):
    # a sub-agent that starts from the lead's whole context: its prompt extends the lead's tokens,
    # so without an id it would be taken for the lead's next turn
    px = start_proxy(fake_upstream.url)
    url = f"{px.url}/s/named"
    lead = [{"role": "user", "content": "plan"}]
    _chat(url, lead)
    n_lead = len(render(lead)) + 3
    sub = _turn(lead, "subtask: look up x")
    _chat(url, sub, headers={"X-Lineage-Id": "finder"})
    lead = _turn(lead, "tool 0")
    _chat(url, lead)  # the lead goes on: extends its own tokens, not the finder's
    _chat(url, _turn(sub, "found"), headers={"X-Lineage-Id": "finder"})
    _chat(f"{px.url}/s/named/l/checker", _turn(lead, "check it"))  # the URL form
    assert httpx.post(f"{px.url}/s/named/l/bad key!/v1/chat/completions", json={}).status_code in (400, 404)
    assert httpx.post(f"{url}/v1/chat/completions", json={"model": "fake", "messages": lead},
                      headers={"X-Lineage-Id": "no spaces"}).status_code == 400
    _finish(px.url, "named")
    rows = sorted(_rows(tmp_path / "store").items())
    (lid, lead_row), (_, finder), (_, checker) = rows
    assert len(_actions(lead_row)) == 2 and len(_actions(finder)) == 2 and len(_actions(checker)) == 1
    assert (finder["parent_trajectory_id"], finder["fork_point"], finder["link_kind"]) == (lid, n_lead, "subagent")
    n_lead2 = len(render(lead)) + 3
    assert (checker["parent_trajectory_id"], checker["fork_point"], checker["link_kind"]) == (lid, n_lead2,
                                                                                              "subagent")
    assert json.loads(finder["metadata"])["episode"]["change"] == "new-lineage"
    assert httpx.get(f"{px.url}/proxy/stats").json()["context_breaks"] == 0


# -- the rule on a LineageSet alone ---------------------------------------------------------------


def _call(ls: LineageSet, prompt: list[int], sampled: list[int], name: str | None = None):  # noqa: ANN202
    p = np.array(prompt, np.int32)
    r = ls.route(p, name)
    if r.opens:
        b = TrajectoryBuilder(trajectory_id=f"t{ls.parts}")
        b.add_prompt(p)
        ls.open(r, b)
    ls.extend(r.lineage, p, np.array(sampled, np.int32))
    return r


def test_the_link_kind_is_decided_by_what_follows():
    ls = LineageSet()
    _call(ls, [1, 2, 3], [4])  # A: tokens 1 2 3 4, its first action ends at 4
    r = _call(ls, [1, 2, 9], [5])  # B: shares 2 tokens with A, none of A's actions
    assert r.unmatched and (r.parent, r.fork_point) == (ls.lineages[0], 2)
    child = ls.pending[1]
    assert child.link_kind() == CONTEXT_REWRITE  # A has not gone on (so far)
    _call(ls, [1, 2, 3, 4, 7], [8])  # A goes on: B ran beside it
    assert child.link_kind() == SUBAGENT
    r = _call(ls, [1, 2, 3, 4, 9], [6])  # shares A's first action: a retry of A's second turn
    assert r.fork_point == 4 and ls.pending[2].link_kind() == FORK
    # a named lineage that starts from A's whole context; an unnamed call extending it goes to the
    # deepest lineage it extends (the named one, 9 tokens), not to A (6)
    r = _call(ls, [1, 2, 3, 4, 7, 8, 20], [21, 22], name="n")
    assert r.link == SUBAGENT and r.fork_point == 6
    r = _call(ls, [1, 2, 3, 4, 7, 8, 20, 21, 22, 23], [24])
    assert not r.opens and r.lineage.name == "n"
    written = ls.written("after-finish")
    assert [p.number for p in written] == [1, 2, 3, 4]
    r = _call(ls, [1, 2, 3, 4, 7, 8, 10], [11])  # after an installment: a continuation of A's part
    assert r.opens and (r.parent, r.fork_point, r.link, r.change) == (ls.lineages[0], 6, "continuation",
                                                                      "after-finish")
    assert ls.pending[0].parent_id == "t0"


def test_the_parent_of_a_fork_is_abandoned_and_nothing_else():
    ls = LineageSet()
    _call(ls, [1, 2], [3])  # A, one call
    _call(ls, [1, 2], [4])  # the same prompt again: a resample of A's (first) call
    assert ls.pending[1].link_kind() == FORK and ls.abandoned() == {"t0"}
    _call(ls, [1, 2, 3, 9], [5])  # A goes on after all: B ran beside it, nothing was thrown away
    assert ls.pending[1].link_kind() == SUBAGENT and ls.abandoned() == set()


def test_a_re_rendered_last_reply_is_a_context_rewrite_a_resent_last_prompt_a_fork():
    # A: [1, 2] -> [3]; [1, 2, 3, 7] -> [8, 9] (its last action starts at 4)
    for prompt, kind in (([1, 2, 3, 7, 8, 6, 11], CONTEXT_REWRITE),  # the last reply rendered otherwise, goes on
                         ([1, 2, 3, 7], FORK)):  # the last prompt again: a resample of the last turn
        ls = LineageSet()
        _call(ls, [1, 2], [3])
        _call(ls, [1, 2, 3, 7], [8, 9])
        r = _call(ls, prompt, [5])
        assert r.unmatched and ls.pending[1].covers_action and ls.pending[1].link_kind() == kind


def _rec(ls: LineageSet, prompt: list[int], sampled: list[int]):  # noqa: ANN202
    """One call as the recorder records it: the prompt (or the tokens past the lineage's) and the action."""
    p = np.array(prompt, np.int32)
    r = ls.route(p, None)
    if r.opens:
        b = TrajectoryBuilder(trajectory_id=f"t{ls.parts}")
        b.add_prompt(p)
    else:
        b = r.lineage.part.builder
        if len(p) > len(r.lineage.tokens):
            b.add_observation(p[len(r.lineage.tokens):])
    b.add_action(sampled, None, policy_version=0)
    if r.opens:
        ls.open(r, b)
    ls.extend(r.lineage, p, np.array(sampled, np.int32))
    return r


def test_an_inherited_context_sub_agent_trades_places_only_when_its_parent_calls_last():
    for parent_last in (True, False):
        ls = LineageSet()
        _rec(ls, [1, 2], [3])  # the lead
        _rec(ls, [1, 2, 3, 10], [11])  # the sub-agent: extends the lead's whole context
        _rec(ls, [1, 2, 3, 20], [21])  # the lead goes on from its own context: a child
        _rec(ls, [1, 2, 3, 10, 11, 12], [13])  # the sub-agent again: they interleave
        if parent_last:
            _rec(ls, [1, 2, 3, 20, 21, 22], [23])
        ls.settle()
        lead, other = ls.pending
        got = [(p.builder.trajectory_id, p.number, p.builder.finish().tokens.tolist()) for p in (lead, other)]
        if parent_last:  # the lead's part holds its own calls; the sub-agent's moved to the child
            assert got == [("t0", 1, [1, 2, 3, 20, 21, 22, 23]), ("t1", 2, [1, 2, 3, 10, 11, 12, 13])]
            assert (other.parent_id, other.fork_point, other.link_kind()) == ("t0", 3, SUBAGENT)
            assert [x.tokens.tolist() for x in ls.lineages] == [[1, 2, 3, 20, 21, 22, 23], [1, 2, 3, 10, 11, 12, 13]]
            assert [x.calls for x in ls.lineages] == [3, 2]
        else:  # the line that called last is the parent: nothing moves
            assert got == [("t0", 1, [1, 2, 3, 10, 11, 12, 13]), ("t1", 2, [1, 2, 3, 20, 21])]
            assert (other.parent_id, other.fork_point, other.link_kind()) == ("t0", 3, SUBAGENT)
