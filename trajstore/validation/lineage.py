"""Lineage across the files ``traj validate`` reads: every child's parent
(``parent_trajectory_id``) must be among the rows read, and its ``fork_point`` must not be past
the parent's ``num_tokens`` (:func:`trajstore.validate.lineage_violations`, the writer's rule).
Memory: 16 bytes per row read (a 64-bit id hash and its token count) plus the children."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from trajstore.errors import Violation
from trajstore.store.id_index import id_hashes
from trajstore.validate import lineage_violations


@dataclass(frozen=True)
class Child:
    """A row with a parent, and where it is."""

    file_index: int
    row_group: int
    row: int
    trajectory_id: str
    parent_trajectory_id: str
    fork_point: int | None


@dataclass
class LineageCheck:
    """Collects each row group's ids, token counts and children; :meth:`problems` then checks the
    children against every row read (a parent may be in a later file). A hash collision could
    take a missing parent for present (64-bit hashes: negligible)."""

    _hashes: list[np.ndarray] = field(default_factory=list)
    _lengths: list[np.ndarray] = field(default_factory=list)
    _children: list[Child] = field(default_factory=list)

    def add(self, file_index: int, row_group: int, first_row: int, table: pa.Table) -> None:
        """Record one row group (rows of schema v3; older tables have no lineage and are only
        recorded as possible parents)."""
        names = set(table.column_names)
        if not {"trajectory_id", "num_tokens"} <= names:
            return
        ids = table.column("trajectory_id").to_pylist()
        self._hashes.append(id_hashes(["" if i is None else i for i in ids]))
        self._lengths.append(table.column("num_tokens").fill_null(-1).to_numpy(zero_copy_only=False)
                             .astype(np.int64, copy=False))
        if "parent_trajectory_id" not in names or table.column("parent_trajectory_id").null_count == table.num_rows:
            return
        parents = table.column("parent_trajectory_id").to_pylist()
        forks = table.column("fork_point").to_pylist() if "fork_point" in names else [None] * table.num_rows
        for i, p in enumerate(parents):
            if p is not None and ids[i] is not None:
                self._children.append(Child(file_index, row_group, first_row + i, ids[i], p, forks[i]))

    def problems(self) -> Iterator[tuple[Child, Violation]]:
        """Each child whose parent is not among the rows read, or whose fork point is past the
        parent's end (the first copy of a repeated parent id counts)."""
        if not self._children:
            return
        hashes = np.concatenate(self._hashes)
        lengths = np.concatenate(self._lengths)
        order = np.argsort(hashes, kind="stable")  # stable: the first copy of an id comes first
        sorted_h = hashes[order]
        wanted = id_hashes([c.parent_trajectory_id for c in self._children])
        at = np.searchsorted(sorted_h, wanted)
        for c, h, k in zip(self._children, wanted.tolist(), at.tolist()):
            found = k < len(sorted_h) and int(sorted_h[k]) == h
            n = int(lengths[order[k]]) if found else None
            record = _Record(c.parent_trajectory_id, c.fork_point)
            for v in lineage_violations(record, None if n is None or n < 0 else n):  # type: ignore[arg-type]
                if n is None:
                    v = Violation(v.field, f"{c.parent_trajectory_id!r} is not among the rows read")
                yield c, v


@dataclass(frozen=True)
class _Record:
    """The attributes :func:`lineage_violations` reads."""

    parent_trajectory_id: str
    fork_point: int | None
