"""Trajectory trees in ingest: the records of one directory that name each other (a
:class:`~trajstore.ingest.records.ParsedLineage`: the lineages of a file split at a context rewrite,
its sub-agents' files, its continuation file) are built together, parents before children, and
linked: each child gets its parent's trajectory as ``parent_trajectory_id``, the ``link_kind``
and, as ``fork_point``, the tokens it shares with it; every trajectory of the tree gets the
root's ``episode_id``. Stored in that order, a parent is always in the store (or in the same
shard) before its children, as the writer requires.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from trajstore.ingest.builders.stored_fields import shared_prefix
from trajstore.ingest.records import ParsedTrajectory
from trajstore.models import Trajectory
from trajstore.validate import validate_trajectory


def _file_of(key: str) -> str:
    return key.split("#", 1)[0]


def tree_root(item: ParsedTrajectory) -> str:
    """The directory whose records `item` may be linked with (its file's)."""
    return os.path.dirname(_file_of(item.lineage.key)) if item.lineage else os.path.dirname(item.origin.path)


def parents_of(items: list[ParsedTrajectory]) -> dict[str, tuple[str, str]]:
    """``{child key: (parent key, link_kind)}`` over `items` (all with a lineage): a record's own
    ``parent`` first, else the first record that claims it (by its key, or by its file's path =
    the file's first record). Links to a record not among `items`, and any link closing a cycle,
    are dropped (such a record is a root)."""
    keys = {it.lineage.key for it in items if it.lineage}
    out: dict[str, tuple[str, str]] = {}
    for it in items:
        lin = it.lineage
        if lin and lin.parent in keys and lin.link_kind:
            out[lin.key] = (lin.parent, lin.link_kind)
    for it in items:
        lin = it.lineage
        for child, kind in lin.claims if lin else []:
            if child in keys and child not in out and child != lin.key:
                out[child] = (lin.key, kind)
    for child in list(out):  # a cycle (two files naming each other): cut where it is found
        seen, k = {child}, out[child][0]
        while k in out:
            if k in seen:
                del out[child]
                break
            seen.add(k)
            k = out[k][0]
    return out


def build_tree(items: list[ParsedTrajectory], build: Callable[[ParsedTrajectory], list[Trajectory]]
               ) -> Iterator[Trajectory]:
    """Build `items` (records of one directory, each with a lineage) parents first and link them
    (see the module docstring); yields every trajectory in an order where each parent comes before
    its children. A record whose parent built nothing (a refused record) is a root.

    Args:
        items: the records.
        build: a record's trajectories (validated; [] when it was refused), e.g.
            :meth:`~trajstore.ingest.builder.IngestBuilder.build`.
    """
    parent = parents_of(items)
    by_key = {it.lineage.key: it for it in items if it.lineage}
    children: dict[str, list[str]] = {}
    for child, (p, _) in parent.items():
        children.setdefault(p, []).append(child)
    built: dict[str, list[Trajectory]] = {}

    def visit(key: str) -> Iterator[Trajectory]:
        ts = build(by_key[key])
        if ts:
            link = parent.get(key)
            up = built.get(link[0]) if link else None
            if link and up:
                ts[0].parent_trajectory_id = up[-1].trajectory_id
                ts[0].link_kind = link[1]
                ts[0].fork_point = shared_prefix(ts[0], up[-1])
                episode = up[-1].episode_id or up[-1].trajectory_id
            else:
                episode = ts[0].episode_id or ts[0].trajectory_id
            for t in ts:
                t.episode_id = episode
            ts = [validate_trajectory(t) for t in ts]
        built[key] = ts
        yield from ts
        for c in children.get(key, []):
            yield from visit(c)

    for it in items:
        key = it.lineage.key if it.lineage else None
        if key is not None and key not in parent and key not in built:
            yield from visit(key)
    for it in items:  # a key read twice (a file named twice), or a record with no lineage: on its own
        if it.lineage is None or by_key.get(it.lineage.key) is not it:
            yield from build(it)


class HeldTree:
    """The records of one directory that name each other, held from the first one read until the
    walk leaves that directory (input units come sorted by path: a unit outside it means all of
    it was read), then handed out to be built together (:func:`build_tree`)."""

    def __init__(self) -> None:
        self.items: list[ParsedTrajectory] = []
        self.root = ""

    def hold(self, item: ParsedTrajectory) -> bool:
        """Hold `item` when it has a lineage (True); False: it is built on its own."""
        if item.lineage is None:
            return False
        if not self.items:
            self.root = tree_root(item)
        self.items.append(item)
        return True

    def leave(self, path: str) -> list[ParsedTrajectory]:
        """The held records, when the next input unit `path` is outside their directory; else []."""
        here = os.path.dirname(os.path.abspath(path))
        if self.items and not (here == self.root or here.startswith(self.root + os.sep)):
            return self.release()
        return []

    def release(self) -> list[ParsedTrajectory]:
        """The held records (none are held after)."""
        items, self.items = self.items, []
        return items
