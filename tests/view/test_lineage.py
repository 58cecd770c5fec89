"""trajstore/view/lineage.py: the episode tree from parent links (roots, children in creation
order, a missing or self or cyclic parent made a root) and the parts of a split episode in order."""

from __future__ import annotations

from trajstore.view.lineage import parts_in_order, tree_from_links


def row(tid: str, parent: str | None = None, kind: str | None = None, fork: int | None = None) -> dict:
    return {"trajectory_id": tid, "parent_trajectory_id": parent, "link_kind": kind, "fork_point": fork,
            "status": "completed", "reward": None, "num_tokens": 10}


def shape(nodes) -> list:  # noqa: ANN001
    return [(n.trajectory_id, n.link_kind, shape(n.children)) for n in nodes]


def test_tree_from_parent_links():
    rows = [row("root"), row("sub", "root", "sub-agent", 40), row("retry", "root", "fork/retry", 12),
            row("cont", "sub", "continuation"), row("orphan", "gone", "fork/retry"), row("self", "self"),
            row("x", "y"), row("y", "x")]
    t = tree_from_links("ep", rows)
    assert shape(t.roots) == [
        ("root", None, [("sub", "sub-agent", [("cont", "continuation", [])]), ("retry", "fork/retry", [])]),
        ("orphan", "fork/retry", []), ("self", None, []), ("x", None, []), ("y", None, [])]
    assert t.roots[0].children[0].fork_point == 40
    assert (t.total, t.shown, t.source) == (8, 8, "columns")


def test_parts_in_part_order():
    rows = [{"trajectory_id": "p3", "episode_part": 3, "change": "condensation"},
            {"trajectory_id": "p1", "episode_part": 1, "change": None},
            {"trajectory_id": "p2", "episode_part": 2, "change": "tools"}]
    t = parts_in_order("e", rows)
    assert [(n.trajectory_id, n.link_kind) for n in t.roots] == [("p1", None), ("p2", "tools"), ("p3", "condensation")]
    assert t.source == "metadata"
