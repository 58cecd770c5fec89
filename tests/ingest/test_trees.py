"""trajstore/ingest/builders/trees.py: records linked across files are built parents first and linked; a
missing parent or a cycle leaves a root, never a dangling link."""

from __future__ import annotations

import numpy as np

from trajstore.ingest.builders.trees import build_tree, parents_of
from trajstore.ingest.records import Conversation, Message, Origin, ParsedLineage
from trajstore.models import Span, Trajectory


def _traj(tid, tokens):
    n = len(tokens)
    return Trajectory(trajectory_id=tid, source="x", tokenizer="tok", status="completed", token_source="engine",
                      logprob_source="none", tokens=np.asarray(tokens, dtype=np.int32),
                      action_logprobs=np.full(n, np.nan, dtype=np.float32),
                      spans=[Span(kind="prompt", start=0, end=n - 1), Span(kind="action", start=n - 1, end=n)])


def _rec(key, parent=None, kind=None, claims=()):
    return Conversation(source="x", key=key, origin=Origin(f"/d/{key}"), messages=[Message("user", key)],
                        lineage=ParsedLineage(f"/d/{key}", f"/d/{parent}" if parent else None, kind,
                                        [(f"/d/{c}", k) for c, k in claims]))


def test_own_parent_wins_over_a_claim_and_missing_parents_and_cycles_are_dropped():
    items = [_rec("a", claims=[("b", "subagent"), ("c", "continuation")]), _rec("b", parent="a", kind="fork"),
             _rec("c"), _rec("d", parent="gone", kind="fork"), _rec("e", claims=[("f", "fork")]),
             _rec("f", claims=[("e", "fork")])]
    got = {k.rsplit("/", 1)[1]: (p.rsplit("/", 1)[1], kind) for k, (p, kind) in parents_of(items).items()}
    assert got["b"] == ("a", "fork") and got["c"] == ("a", "continuation") and "d" not in got
    assert len({"e", "f"} & set(got)) == 1  # one link of the cycle is cut


def test_children_come_after_their_parent_with_its_episode_and_fork_point():
    def build(item):
        return [_traj(item.key, [1, 2, 3] if item.key == "a" else [1, 2, 9, 9])]

    ts = list(build_tree([_rec("b", parent="a", kind="subagent"), _rec("a")], build))
    assert [t.trajectory_id for t in ts] == ["a", "b"]
    assert (ts[1].parent_trajectory_id, ts[1].link_kind, ts[1].fork_point, ts[1].episode_id) == ("a", "subagent", 2, "a")
    failed = list(build_tree([_rec("b", parent="a", kind="subagent"), _rec("a")],
                             lambda it: [] if it.key == "a" else build(it)))
    assert [(t.trajectory_id, t.parent_trajectory_id) for t in failed] == [("b", None)]  # parent refused: a root
