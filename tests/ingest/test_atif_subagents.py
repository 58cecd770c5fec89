"""trajstore/ingest/formats/atif.py: ATIF 1.7 embeds sub-agent trajectories in one file
(``subagent_trajectories``, resolved by ``trajectory_id``): each is a linked lineage of its own
(``subagent`` under the lineage whose step names it), with its own calls as actions."""

from __future__ import annotations

import json

from tests.helpers.ingest import END, GEN, TOOL_OBS, USER, call, ingest, span_texts


def _sub(tid, prompt, answer, *, subs=None):
    d = {"schema_version": "ATIF-v1.7", "trajectory_id": tid, "agent": {"name": tid, "model_name": "small-model"},
         "steps": [{"step_id": 1, "source": "user", "message": prompt},
                   {"step_id": 2, "source": "agent", "message": answer}]}
    if subs:
        d["subagent_trajectories"] = subs
    return d


def _doc():
    return {
        "schema_version": "ATIF-v1.7", "session_id": "run-1", "trajectory_id": "main",
        "agent": {"name": "lead", "model_name": "big-model"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "Find the bug."},
            {"step_id": 2, "source": "agent", "message": "Delegating.",
             "tool_calls": [{"tool_call_id": "t1", "function_name": "research", "arguments": {"q": "bug"}}],
             "observation": {"results": [{"source_call_id": "t1", "content": "It is in parse().",
                                          "subagent_trajectory_ref": [{"trajectory_id": "researcher"}]}]}},
            {"step_id": 3, "source": "agent", "message": "The bug is in parse()."}],
        "subagent_trajectories": [
            _sub("researcher", "Research: bug", "It is in parse().",
                 subs=[_sub("grep-helper", "grep parse", "parse.py:12")]),
            _sub("reviewer", "Review the fix", "Looks fine.")],
    }


def test_embedded_subagents_are_linked_lineages_with_their_own_calls(tmp_path, tok):
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(_doc()))
    ts, rep = ingest(p)
    assert rep.problems == [] and len(ts) == 4
    by = {t.metadata["trajectory_id"]: t for t in ts}
    main = by["main"]
    assert ts[0] is main and main.parent_trajectory_id is None and main.model == "big-model"
    assert span_texts(main, tok)[1:] == [
        ("action", "Delegating.\n" + call("research", '{"q": "bug"}') + END),
        ("observation", TOOL_OBS.format("It is in parse().") + GEN),
        ("action", "The bug is in parse()." + END)]
    for tid, parent, prompt, answer in (("researcher", "main", "Research: bug", "It is in parse()."),
                                        ("grep-helper", "researcher", "grep parse", "parse.py:12"),
                                        ("reviewer", "main", "Review the fix", "Looks fine.")):
        t = by[tid]
        assert (t.parent_trajectory_id, t.link_kind) == (by[parent].trajectory_id, "subagent"), tid
        assert t.episode_id == main.trajectory_id and t.model == "small-model"
        texts = span_texts(t, tok)
        assert texts[0][1].endswith(USER.format(prompt) + GEN) and texts[1:] == [("action", answer + END)]
        a, b = list(t.tokens), list(by[parent].tokens)
        shared = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert t.fork_point == shared  # the tokens it shares with its parent
    # a parent is always yielded before its children
    order = [t.metadata["trajectory_id"] for t in ts]
    assert order.index("researcher") < order.index("grep-helper")


def test_an_embedded_subagent_without_its_trajectory_id_is_refused_by_name(tmp_path):
    doc = _doc()
    del doc["subagent_trajectories"][1]["trajectory_id"]
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    ts, rep = ingest(p)
    (prob,) = rep.problems
    assert ts == [] and "subagent_trajectories[1] has no trajectory_id" in prob.reason
